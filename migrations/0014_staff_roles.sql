-- Staff roles, disabled accounts and the audit log of staff writes.
--
-- Every account that existed before roles could do everything: it becomes an `owner`. A new
-- account always names its role (no default).
ALTER TABLE staff_accounts
    ADD COLUMN role text NOT NULL DEFAULT 'owner',
    ADD COLUMN disabled boolean NOT NULL DEFAULT false,
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    ADD CONSTRAINT staff_accounts_role_check CHECK (role IN ('owner', 'admin', 'support', 'viewer'));
ALTER TABLE staff_accounts ALTER COLUMN role DROP DEFAULT;

-- One row per staff write, written in the write's transaction (a rolled-back write leaves
-- none). `staff_id` has no foreign key and `staff_email` is copied: the record of what an
-- account did outlives the account. Rows are never changed or removed (the trigger below).
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    staff_id    bigint      NOT NULL,
    staff_email text        NOT NULL,
    action      text        NOT NULL,
    target_type text        NOT NULL,
    target_id   bigint,
    before      jsonb,
    after       jsonb,
    request_id  text,
    at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT audit_log_action_check CHECK (action ~ '^[a-z_]+\.[a-z_]+$'),
    CONSTRAINT audit_log_target_type_check CHECK (target_type ~ '^[a-z_]+$')
);
CREATE INDEX audit_log_staff_idx ON audit_log (staff_id, id);
CREATE INDEX audit_log_action_idx ON audit_log (action, id);
CREATE INDEX audit_log_target_idx ON audit_log (target_type, target_id, id);
CREATE INDEX audit_log_at_idx ON audit_log (at);

CREATE FUNCTION audit_log_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log rows are never changed or removed'
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_is_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_is_append_only();

-- Statistics (`GET /api/stats/*`): each series reads one range of one index, without the heap.
-- Revenue: payments by time, with what is summed.
CREATE INDEX payments_paid_at_idx ON payments (paid_at) INCLUDE (currency, amount_minor, outcome);
-- Trial conversions and unpaid trials: a pair's paid payments by time.
CREATE INDEX payments_pair_paid_idx ON payments (subscriber_id, channel_id, paid_at)
    WHERE outcome = 'applied' AND amount_minor > 0;
-- Members: the events by time, with what is counted.
CREATE INDEX membership_events_at_idx ON membership_events (at)
    INCLUDE (membership_id, from_status, to_status, cause);
-- Live memberships by channel (lifetime told apart) and by subscriber (active members).
CREATE INDEX memberships_live_channel_expiry_idx ON memberships (channel_id, expires_at)
    WHERE status <> 'expired';
CREATE INDEX memberships_live_subscriber_idx ON memberships (subscriber_id)
    WHERE status <> 'expired';
CREATE INDEX trial_uses_created_idx ON trial_uses (created_at);

-- Daily roll-ups of the statistics, for days that have ended (UTC), so a series reads one row
-- per day (and channel or currency) instead of every payment and event. A day is rolled once
-- (`stats_rolled_days` says which) from the raw rows; any later change to a row of that day —
-- a late payment, a refund, a deleted membership's events, a trial — removes the day's marker
-- (the triggers below), and the next read rolls the day again. The trigger takes the day's
-- advisory lock shared and the roll-up takes it exclusively, so a roll-up never misses a write
-- that was in flight when it read (key: 0x5374617473 << 24 plus days since 2000-01-01, in the
-- single-bigint space, apart from the two-int4 keys of the payment path).
CREATE TABLE stats_rolled_days (
    day       date        PRIMARY KEY,
    rolled_at timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE TABLE stats_revenue_days (
    day      date   NOT NULL,
    currency text   NOT NULL,
    gross    bigint NOT NULL,
    refunded bigint NOT NULL,
    payments bigint NOT NULL,
    PRIMARY KEY (day, currency)
);
CREATE TABLE stats_member_days (
    day              date    NOT NULL,
    channel_id       integer NOT NULL,
    new              bigint  NOT NULL,
    renewed          bigint  NOT NULL,
    expired          bigint  NOT NULL,
    -- Live memberships gained minus lost that day.
    delta            bigint  NOT NULL,
    trials_started   bigint  NOT NULL,
    trials_converted bigint  NOT NULL,
    PRIMARY KEY (day, channel_id)
);

CREATE FUNCTION stats_day_lock_key(day date) RETURNS bigint LANGUAGE sql IMMUTABLE AS
    $$ SELECT (x'5374617473'::bigint << 24) + (day - date '2000-01-01') $$;

CREATE FUNCTION stats_forget_day(at timestamptz) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    d date := (at AT TIME ZONE 'UTC')::date;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(stats_day_lock_key(d));
    DELETE FROM stats_rolled_days WHERE day = d;
END
$$;

-- The day a row belongs to is its column TG_ARGV[0].
CREATE FUNCTION stats_forget_changed_days() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'DELETE' THEN
        PERFORM stats_forget_day((to_jsonb(NEW) ->> TG_ARGV[0])::timestamptz);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        PERFORM stats_forget_day((to_jsonb(OLD) ->> TG_ARGV[0])::timestamptz);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER payments_stats AFTER INSERT OR DELETE OR UPDATE OF paid_at, outcome, amount_minor,
    currency, channel_id, subscriber_id ON payments
    FOR EACH ROW EXECUTE FUNCTION stats_forget_changed_days('paid_at');
CREATE TRIGGER membership_events_stats AFTER INSERT OR DELETE OR UPDATE ON membership_events
    FOR EACH ROW EXECUTE FUNCTION stats_forget_changed_days('at');
CREATE TRIGGER trial_uses_stats AFTER INSERT OR DELETE OR UPDATE ON trial_uses
    FOR EACH ROW EXECUTE FUNCTION stats_forget_changed_days('created_at');
