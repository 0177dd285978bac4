-- Cheaper writes on the payment path and the sweep, with the same effects: row triggers that
-- do less for the rows they cannot concern, and two indexes no query needs.
--
-- 1. Statistics roll-up markers (0014). A write of a row whose day is today (UTC, by the
--    writing statement's clock) no longer runs `stats_forget_changed_days` at all: a trigger
--    `WHEN` clause skips it, so the row queues no after-trigger event and calls no function.
--    Nothing can have rolled that day up yet, and nothing will before this transaction ends:
--    `stats::roll_up` rolls only days that ended at least an hour before its own statement
--    (MISSING_DAYS_SQL: up to `(statement_timestamp() - 1 hour)::date - 1`), so today's day d is
--    rolled no earlier than d + 1 at 01:00 UTC, and its marker cannot exist while d is today.
--    The writing transaction commits long before then (every transaction here lasts seconds at
--    most; one left open over an hour past midnight would be the only way to miss the roll-up,
--    the case the shared day lock covered), so the roll-up's snapshot sees the row. A row of an
--    earlier day (a late payment, a refund, a deleted membership's events) still takes the
--    day's lock and removes its marker, as before. Each trigger is split by event, since a
--    `WHEN` clause of an INSERT trigger cannot name OLD nor one of a DELETE trigger NEW.
--
-- 2. Outbound events (0013). `payment.*`: the trigger built the payment's JSON (a dozen
--    formatted fields) before asking whether any endpoint wanted it; it now asks first, and an
--    UPDATE that leaves `outcome` as it was is skipped by `WHEN` without a call.
--    `membership.*` / `trial.started`: one trigger per statement (with the inserted rows as a
--    transition table) makes the one EXISTS probe for the whole statement, not one per row — a
--    sweep batch inserts hundreds of events in one statement; when an endpoint wants any of
--    these types, each new row is handled exactly as the row trigger did, in id order.

DROP TRIGGER payments_stats ON payments;
DROP TRIGGER membership_events_stats ON membership_events;
DROP TRIGGER trial_uses_stats ON trial_uses;

CREATE TRIGGER payments_stats_insert AFTER INSERT ON payments
    FOR EACH ROW
    WHEN ((NEW.paid_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('paid_at');
CREATE TRIGGER payments_stats_update AFTER UPDATE OF paid_at, outcome, amount_minor, currency,
    channel_id, subscriber_id ON payments
    FOR EACH ROW
    WHEN ((OLD.paid_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date
          OR (NEW.paid_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('paid_at');
CREATE TRIGGER payments_stats_delete AFTER DELETE ON payments
    FOR EACH ROW
    WHEN ((OLD.paid_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('paid_at');

CREATE TRIGGER membership_events_stats_insert AFTER INSERT ON membership_events
    FOR EACH ROW
    WHEN ((NEW.at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('at');
CREATE TRIGGER membership_events_stats_update AFTER UPDATE ON membership_events
    FOR EACH ROW
    WHEN ((OLD.at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date
          OR (NEW.at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('at');
CREATE TRIGGER membership_events_stats_delete AFTER DELETE ON membership_events
    FOR EACH ROW
    WHEN ((OLD.at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('at');

CREATE TRIGGER trial_uses_stats_insert AFTER INSERT ON trial_uses
    FOR EACH ROW
    WHEN ((NEW.created_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('created_at');
CREATE TRIGGER trial_uses_stats_update AFTER UPDATE ON trial_uses
    FOR EACH ROW
    WHEN ((OLD.created_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date
          OR (NEW.created_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('created_at');
CREATE TRIGGER trial_uses_stats_delete AFTER DELETE ON trial_uses
    FOR EACH ROW
    WHEN ((OLD.created_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('created_at');

-- payment.applied / payment.needs_review when stored; payment.refunded, payment.applied or
-- payment.needs_review when its outcome changes to one of those (the UPDATE trigger's WHEN).
CREATE OR REPLACE FUNCTION webhook_payments_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text := CASE NEW.outcome WHEN 'applied' THEN 'payment.applied'
                                  WHEN 'needs_review' THEN 'payment.needs_review'
                                  WHEN 'refunded' THEN 'payment.refunded' END;
BEGIN
    -- Without an endpoint that wants it, the payment's JSON is not even built.
    IF kind IS NULL OR NOT EXISTS (SELECT 1 FROM webhook_endpoints
                                   WHERE disabled_at IS NULL AND kind = ANY (event_types)) THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_emit(kind, webhook_payment_json(NEW));
    RETURN NULL;
END
$$;
DROP TRIGGER webhook_payments ON payments;
CREATE TRIGGER webhook_payments_insert AFTER INSERT ON payments
    FOR EACH ROW EXECUTE FUNCTION webhook_payments_trigger();
CREATE TRIGGER webhook_payments_update AFTER UPDATE OF outcome ON payments
    FOR EACH ROW WHEN (OLD.outcome IS DISTINCT FROM NEW.outcome)
    EXECUTE FUNCTION webhook_payments_trigger();

-- The membership events a statement inserted: one probe for all of them; with an endpoint
-- that wants any membership event (or trial.started), each row as the row trigger of 0013
-- handled it (`webhook_membership_event`), in id order.
CREATE FUNCTION webhook_membership_event(e membership_events) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    kind text;
    m memberships;
BEGIN
    IF e.to_status = 'active' AND (e.from_status IS NULL OR e.from_status = 'expired') THEN
        kind := 'membership.activated';
    ELSIF e.to_status = 'active' AND e.expires_at_after > e.expires_at_before THEN
        kind := 'membership.renewed';
    ELSIF e.to_status = 'grace' AND e.from_status IS DISTINCT FROM 'grace' THEN
        kind := 'membership.grace';
    ELSIF e.to_status = 'expired' AND e.from_status IS DISTINCT FROM 'expired' THEN
        kind := 'membership.expired';
    END IF;
    IF kind IS NULL AND e.cause <> 'trial' THEN
        RETURN;
    END IF;
    -- Without an endpoint that wants it, not even the membership is read.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE disabled_at IS NULL
                     AND (kind = ANY (event_types)
                          OR (e.cause = 'trial' AND 'trial.started' = ANY (event_types)))) THEN
        RETURN;
    END IF;
    SELECT * INTO m FROM memberships WHERE id = e.membership_id;
    IF kind IS NOT NULL THEN
        PERFORM webhook_emit(kind, webhook_membership_json(m));
    END IF;
    IF e.cause = 'trial' THEN
        PERFORM webhook_emit('trial.started', webhook_membership_json(m));
    END IF;
END
$$;

CREATE FUNCTION webhook_membership_events_statement_trigger() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    e membership_events;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE disabled_at IS NULL
                     AND event_types && ARRAY['membership.activated', 'membership.renewed',
                                              'membership.grace', 'membership.expired',
                                              'trial.started']) THEN
        RETURN NULL;
    END IF;
    FOR e IN SELECT * FROM new_events ORDER BY id LOOP
        PERFORM webhook_membership_event(e);
    END LOOP;
    RETURN NULL;
END
$$;
DROP TRIGGER webhook_membership_events ON membership_events;
DROP FUNCTION webhook_membership_events_trigger();
CREATE TRIGGER webhook_membership_events AFTER INSERT ON membership_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_membership_events_statement_trigger();

-- 3. Two indexes every payment and sweep write paid for and no query needs.
--    `memberships_channel_live_idx` (channel_id) WHERE status <> 'expired' is a prefix of
--    `memberships_live_channel_expiry_idx` (channel_id, expires_at) with the same predicate
--    (0014): every query it served (the seat count, live members of a channel) is served by the
--    other. `effects_member_pending_idx` (chat_id, user_id, id) of pending effects was the
--    claim's ordering check until 0010 narrowed that check to access effects, which
--    `effects_member_access_idx` covers; what remained of its use are the two rare per-chat
--    statements (is anything pending in this chat, wake this chat's effects), which read the
--    pending effects through `effects_due_idx`.
DROP INDEX memberships_channel_live_idx;
DROP INDEX effects_member_pending_idx;
