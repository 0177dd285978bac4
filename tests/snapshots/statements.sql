-- Every SQL statement the application sends to PostgreSQL during `make test`, exactly as sent
-- (the text of each Parse and simple Query message), sorted. Written by
-- `make statements-update`; never edited by hand. See docs/development.md, "The statement
-- snapshot".

-- statement

    INSERT INTO affiliates (name, subscriber_id, code) VALUES ($1, $2, $3)
    ON CONFLICT DO NOTHING

-- statement

    INSERT INTO referral_attributions AS r (subscriber_id, affiliate_id)
    VALUES ($1, $2)
    ON CONFLICT (subscriber_id) DO UPDATE
        SET affiliate_id = EXCLUDED.affiliate_id, attributed_at = statement_timestamp()
        WHERE $3
           OR r.attributed_at + make_interval(days => $4) <= statement_timestamp()
    RETURNING r.subscriber_id

-- statement

    INSERT INTO referral_clicks (affiliate_id, subscriber_id, outcome) VALUES ($1, $2, $3)

-- statement

    SELECT a.id AS affiliate_id, a.subscriber_id AS affiliate_subscriber_id,
           p.enabled, p.attribution, p.window_days
    FROM affiliates a CROSS JOIN referral_program p
    WHERE a.code = $1 AND a.active

-- statement

    WITH seen AS (
        SELECT id, reference, answer, state FROM join_requests WHERE query_id = $4
    ), made AS (
        INSERT INTO join_requests
            (channel_id, chat_id, user_id, query_id, answer, requested_at, reference,
             state, decided_at)
        SELECT $1, $2, $3, $4, $5, $6, $7,
               CASE WHEN $5 = 'approve' THEN 'approved' ELSE 'waiting' END,
               CASE WHEN $5 = 'approve' THEN statement_timestamp() END
        WHERE NOT EXISTS (SELECT 1 FROM seen)
        ON CONFLICT (chat_id, user_id) WHERE state = 'waiting' DO UPDATE
            SET query_id = EXCLUDED.query_id, answer = EXCLUDED.answer,
                requested_at = EXCLUDED.requested_at, reference = EXCLUDED.reference,
                channel_id = EXCLUDED.channel_id, created_at = statement_timestamp(),
                state = EXCLUDED.state, decided_at = EXCLUDED.decided_at
        RETURNING id, reference, answer, state
    )
    SELECT id, reference, answer, state FROM seen
    UNION ALL
    SELECT id, reference, answer, state FROM made

-- statement
-- A Stars subscription charge that subgate refuses (a first charge or a renewal) stops its
-- subscription in the payment's transaction: the row is cancelled by 'subgate', with the
-- refused charge's reason, and an editUserStarSubscription effect is enqueued beside it. A
-- refused first charge gets its own row too, so Telegram can be told to stop charging it:
-- `applied` is false for such a row (it never granted access and is not its order's
-- subscription). An order still has at most one subscription whose first charge was applied;
-- a charge starts at most one subscription.
ALTER TABLE star_subscriptions
    ADD COLUMN applied boolean NOT NULL DEFAULT true,
    ADD COLUMN refused_reason text,
    DROP CONSTRAINT star_subscriptions_order_key,
    DROP CONSTRAINT star_subscriptions_cancelled_by_check,
    ADD CONSTRAINT star_subscriptions_cancelled_by_check
        CHECK (cancelled_by IN ('staff', 'buyer', 'subgate')),
    ADD CONSTRAINT star_subscriptions_refused_check
        CHECK ((cancelled_by IS NOT DISTINCT FROM 'subgate') = (refused_reason IS NOT NULL)),
    ADD CONSTRAINT star_subscriptions_refused_reason_check CHECK (refused_reason IN (
        'order_cancelled', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'already_paid', 'hold_expired', 'no_seat', 'channel_inactive')),
    ADD CONSTRAINT star_subscriptions_applied_check
        CHECK (applied OR cancelled_by IS NOT DISTINCT FROM 'subgate'),
    ADD CONSTRAINT star_subscriptions_charge_key UNIQUE (charge_id);
CREATE UNIQUE INDEX star_subscriptions_order_key ON star_subscriptions (order_id) WHERE applied;


-- statement
-- A day's revenue is a sum of payments, and a sum of `bigint` amounts can exceed `bigint`:
-- the roll-up keeps it exact (`numeric`), as the reads that add the days up do.
ALTER TABLE stats_revenue_days
    ALTER COLUMN gross TYPE numeric,
    ALTER COLUMN refunded TYPE numeric;


-- statement
-- A payout of affiliate $1's payable lines in currency $2, recorded by staff account $3, in one
-- statement (the caller holds the affiliate's row lock): the payable lines, both signs, are
-- summed; when there is at least one and the net is positive the payout row is written and
-- exactly those lines are marked paid by it. Always answers one row: the net and the count
-- (whether paid or not), and the payout when one was written.
WITH payable AS (
    SELECT l.id, l.amount_minor
    FROM commission_lines l
    WHERE l.affiliate_id = $1 AND l.currency = $2
      AND l.status = 'pending' AND l.payable_at <= statement_timestamp()
),
totals AS (
    SELECT sum(amount_minor) AS net, count(*) AS n FROM payable
),
payout AS (
    INSERT INTO payouts (affiliate_id, currency, amount_minor, lines, staff_id)
    SELECT $1, $2, t.net, t.n, $3 FROM totals t
    WHERE t.n > 0 AND t.net > 0
    RETURNING id, affiliate_id, currency, amount_minor, lines, created_at
),
paid AS (
    UPDATE commission_lines l SET status = 'paid', payout_id = p.id
    FROM payout p
    WHERE l.id IN (SELECT id FROM payable)
    RETURNING l.id
)
SELECT t.net::text AS net, t.n AS n, (SELECT count(*) FROM paid) AS paid,
       p.id, p.affiliate_id, p.currency, p.amount_minor, p.lines, p.created_at
FROM totals t LEFT JOIN payout p ON true


-- statement
-- A refund at the gateway (WayForPay `Refunded`/`Voided`, Stripe `charge.refunded`) reported
-- before its payment, or while the payment waited for its locks, is recorded as the payment
-- itself: a `refunded` row with reason `refunded_before_payment`, under the payment's own
-- (gateway, external_id). The payment's later delivery conflicts on that key and is answered as
-- a duplicate that grants nothing (src/payments/gateway_refunds.rs, docs/payments.md).
ALTER TABLE payments
    DROP CONSTRAINT payments_reason_check,
    ADD CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive',
        'refunded_elsewhere', 'unknown_subscription', 'subscription_cancelled',
        'promo_exhausted', 'already_lifetime', 'refunded_at_gateway',
        'refunded_before_payment'));


-- statement
-- A staff account's token version: every token carries the version it was issued under (claim
-- `ver`) and opens the API only while it is still the account's. Bumping it (a password change,
-- a role change, a disabling) ends every session of the account at once. Tokens issued before
-- this column existed carry no version and count as 0.
ALTER TABLE staff_accounts
    ADD COLUMN token_version integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT staff_accounts_token_version_check CHECK (token_version >= 0);


-- statement
-- An audit's runner shows it is alive: `heartbeat_at` moves on with every batch it checks (and
-- while it waits out a rate limit). A `running` audit whose heartbeat stopped belongs to a
-- process that died; it is marked failed ("interrupted") before another audit of its channel
-- starts, and at start-up.
ALTER TABLE audits ADD COLUMN heartbeat_at timestamptz NOT NULL DEFAULT statement_timestamp();

-- One running audit per channel: a second request while one runs is a conflict.
CREATE UNIQUE INDEX audits_one_running ON audits (channel_id) WHERE status = 'running';


-- statement
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


-- statement
-- Door 5, Monobank acquiring. One row per Monobank invoice: made by us for an order (the bot's
-- invoice effect, the Mini App), or first heard of in a signed webhook. It keeps the newest
-- status Monobank reported with that report's `modifiedDate` (an older report changes nothing),
-- the page handed to the buyer (reused while it stays valid: Monobank has no idempotency key),
-- and the chase of an invoice whose webhook has not come (asked about with
-- `GET /api/merchant/invoice/status`, with back-off, for up to 72 hours), in the shape of
-- WayForPay's `gateway_checks`, which holds one row per order and so cannot hold an order's
-- several invoices.
CREATE TABLE monobank_invoices (
    invoice_id      text        PRIMARY KEY,
    -- The order of rows in staff lists (`GET /api/reconciliation/monobank`).
    id              bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    order_id        bigint      REFERENCES orders (id) ON DELETE CASCADE,
    -- Our order reference, as sent in `merchantPaymInfo.reference` (or as a webhook reported it).
    reference       text        NOT NULL,
    amount_minor    bigint      NOT NULL,
    page_url        text,
    -- The page was given to the buyer: only such an invoice is reused, chased, and releases its
    -- order's holds when it fails or expires (of two made at once for one order, one is given).
    handed_out      boolean     NOT NULL DEFAULT false,
    valid_until     timestamptz,
    status          text        NOT NULL DEFAULT 'created',
    -- Monobank's `modifiedDate` of the newest report applied (null: none yet).
    modified_date   timestamptz,
    chase           text        NOT NULL DEFAULT 'chasing',
    attempts        integer     NOT NULL DEFAULT 0,
    next_check_at   timestamptz NOT NULL,
    last_checked_at timestamptz,
    last_error      text,
    payment_id      bigint      REFERENCES payments (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT monobank_invoices_status_check CHECK (status IN (
        'created', 'processing', 'hold', 'success', 'failure', 'reversed', 'expired')),
    CONSTRAINT monobank_invoices_chase_check CHECK (chase IN ('chasing', 'found', 'gave_up', 'settled')),
    CONSTRAINT monobank_invoices_attempts_check CHECK (attempts >= 0),
    CONSTRAINT monobank_invoices_amount_check CHECK (amount_minor >= 0)
);
CREATE INDEX monobank_invoices_order_idx ON monobank_invoices (order_id);
CREATE INDEX monobank_invoices_due_idx ON monobank_invoices (next_check_at) WHERE chase = 'chasing';


-- statement
-- Door 6 (Crypto Pay, @CryptoBot): the prices an owner fixes for a plan in crypto assets, and
-- the Crypto Pay invoices the bot makes for orders.

-- `{"USDT": 4990000, "TON": 1500000000}`: asset → the price in the asset's minor units (the
-- exponents of `common::currency`). NULL: the plan is not sold in crypto. Checked in Rust
-- (known assets, positive amounts); the schema keeps the shape.
ALTER TABLE plans
    ADD COLUMN crypto_prices jsonb,
    ADD CONSTRAINT plans_crypto_prices_check
        CHECK (crypto_prices IS NULL OR jsonb_typeof(crypto_prices) = 'object');

-- One invoice per order and asset: a repeat of the effect that made it finds it here and sends
-- the same pay URL. `status` follows Crypto Pay's (`active`, `paid`, `expired`); an `active`
-- one is asked about (`getInvoices`) from `next_check_at` on.
CREATE TABLE cryptopay_invoices (
    invoice_id bigint PRIMARY KEY,
    order_id bigint NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    asset text NOT NULL,
    amount_minor bigint NOT NULL,
    status text NOT NULL DEFAULT 'active',
    pay_url text NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    next_check_at timestamptz NOT NULL,
    checks integer NOT NULL DEFAULT 0,
    last_error text,
    CONSTRAINT cryptopay_invoices_order_asset_key UNIQUE (order_id, asset),
    CONSTRAINT cryptopay_invoices_asset_check CHECK (asset ~ '^[A-Z]{3,5}$'),
    CONSTRAINT cryptopay_invoices_amount_check CHECK (amount_minor > 0),
    CONSTRAINT cryptopay_invoices_status_check CHECK (status IN ('active', 'paid', 'expired')),
    CONSTRAINT cryptopay_invoices_checks_check CHECK (checks >= 0)
);
CREATE INDEX cryptopay_invoices_due_idx ON cryptopay_invoices (next_check_at)
    WHERE status = 'active';


-- statement
-- Fiscal receipts (Checkbox, a software cash register): one sale receipt per applied UAH card
-- payment and one return receipt per refund of such a payment, each performed by a
-- `fiscal_receipt` effect (the kind 0028 allowed).

-- Whether the running service has Checkbox configured (`CHECKBOX_*`): written by `subgate
-- serve` at start-up, read by the transactions that apply a payment, so a payment owes a
-- receipt only while receipts are on. One row.
CREATE TABLE fiscal_register (
    id         boolean     PRIMARY KEY DEFAULT true,
    enabled    boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT fiscal_register_one_check CHECK (id)
);
INSERT INTO fiscal_register DEFAULT VALUES;

-- One receipt of one payment. `receipt_id` is the id we give Checkbox for it, chosen before
-- the first call: Checkbox keeps one receipt per id, so a request sent again after a crash
-- or a lost answer finds the receipt the first one made instead of making a second.
CREATE TABLE fiscal_receipts (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id  bigint      NOT NULL REFERENCES payments (id),
    kind        text        NOT NULL,
    state       text        NOT NULL DEFAULT 'pending',
    receipt_id  uuid        NOT NULL DEFAULT gen_random_uuid(),
    fiscal_code text,
    url         text,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    created_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    done_at     timestamptz,
    CONSTRAINT fiscal_receipts_payment_kind_key UNIQUE (payment_id, kind),
    CONSTRAINT fiscal_receipts_receipt_id_key UNIQUE (receipt_id),
    CONSTRAINT fiscal_receipts_kind_check CHECK (kind IN ('sale', 'return')),
    CONSTRAINT fiscal_receipts_state_check CHECK (state IN ('pending', 'done', 'failed')),
    CONSTRAINT fiscal_receipts_done_check CHECK (
        (state = 'done') = (done_at IS NOT NULL AND fiscal_code IS NOT NULL AND url IS NOT NULL)),
    CONSTRAINT fiscal_receipts_attempts_check CHECK (attempts >= 0)
);

-- Staff's look at what is still owed or failed.
CREATE INDEX fiscal_receipts_open_idx ON fiscal_receipts (state) WHERE state <> 'done';


-- statement
-- Messages to members: the buyer's consent, the automations, broadcasts, and one row per
-- message a member is sent (docs/effects.md, "Messages to members").

-- `/stop` in the bot sets `marketing_opt_out` (`/start` clears it); a 403 from Telegram (the
-- buyer blocked the bot) clears `reachable` until the buyer writes to the bot again. Neither
-- ever holds back a message about the buyer's own access or payments.
ALTER TABLE subscribers
    ADD COLUMN marketing_opt_out boolean NOT NULL DEFAULT false,
    ADD COLUMN reachable         boolean NOT NULL DEFAULT true;

-- A promo code made for one buyer alone (a win-back or cancel offer): nobody else may use it.
ALTER TABLE promo_codes
    ADD COLUMN subscriber_id integer REFERENCES subscribers (id) ON DELETE CASCADE;
CREATE INDEX promo_codes_subscriber_idx ON promo_codes (subscriber_id)
    WHERE subscriber_id IS NOT NULL;

-- The four automations, each off until the owner switches it on. `texts`: a Project Fluent
-- pattern per language; `promo`: the template of the code a win-back or cancel offer makes
-- (`{"percent_off", "valid_days", "plan_ids"}`).
CREATE TABLE automations (
    kind          text        PRIMARY KEY,
    enabled       boolean     NOT NULL DEFAULT false,
    delay_minutes integer     NOT NULL,
    texts         jsonb       NOT NULL DEFAULT '{}',
    promo         jsonb,
    updated_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT automations_kind_check CHECK (
        kind IN ('unpaid_checkout', 'win_back', 'cancel_offer', 'renewal_failed')),
    CONSTRAINT automations_delay_minutes_check CHECK (delay_minutes BETWEEN 0 AND 525600),
    CONSTRAINT automations_texts_check CHECK (jsonb_typeof(texts) = 'object'),
    CONSTRAINT automations_promo_check CHECK (
        promo IS NULL OR (jsonb_typeof(promo) = 'object'
                          AND kind IN ('win_back', 'cancel_offer')))
);
INSERT INTO automations (kind, delay_minutes) VALUES
    ('unpaid_checkout', 60), ('win_back', 4320), ('cancel_offer', 0), ('renewal_failed', 0);

-- A broadcast: its texts, segment and button, and when it is sent. The recipient list is fixed
-- when sending starts (`messages` rows). A paid broadcast reserves its budget in steps
-- (`paid_reserved`, never above `paid_max_stars` × 10 messages at 0.1 Star each); the
-- messages actually sent paid are the `messages` rows with `paid`.
CREATE TABLE broadcasts (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status         text        NOT NULL,
    texts          jsonb       NOT NULL,
    segment        jsonb       NOT NULL,
    button         jsonb,
    send_at        timestamptz NOT NULL,
    paid_max_stars integer,
    paid_reserved  integer     NOT NULL DEFAULT 0,
    recipients     integer     NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    started_at     timestamptz,
    finished_at    timestamptz,
    cancelled_at   timestamptz,
    CONSTRAINT broadcasts_status_check CHECK (
        status IN ('scheduled', 'sending', 'finished', 'cancelled')),
    CONSTRAINT broadcasts_texts_check CHECK (jsonb_typeof(texts) = 'object'),
    CONSTRAINT broadcasts_segment_check CHECK (jsonb_typeof(segment) = 'object'),
    CONSTRAINT broadcasts_paid_max_stars_check CHECK (paid_max_stars >= 1),
    CONSTRAINT broadcasts_budget_check CHECK (
        paid_reserved >= 0 AND paid_reserved <= COALESCE(paid_max_stars, 0) * 10)
);
CREATE INDEX broadcasts_due_idx ON broadcasts (send_at) WHERE status = 'scheduled';
CREATE INDEX broadcasts_sending_idx ON broadcasts (id) WHERE status = 'sending';

-- One message to one member: a broadcast's (one per recipient) or an automation's (one per
-- order, membership end or subscription: `dedupe_key`). Sent by a `member_message` effect;
-- `attempted_at` is written just before the Bot API call, so a call a crash interrupted is
-- never made again (it might have reached the buyer). `outcome` NULL: not decided yet.
CREATE TABLE messages (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber_id        integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    kind                 text        NOT NULL,
    broadcast_id         bigint      REFERENCES broadcasts (id) ON DELETE CASCADE,
    order_id             bigint      REFERENCES orders (id) ON DELETE CASCADE,
    membership_id        bigint      REFERENCES memberships (id) ON DELETE CASCADE,
    star_subscription_id bigint      REFERENCES star_subscriptions (id) ON DELETE CASCADE,
    promo_code_id        bigint      REFERENCES promo_codes (id) ON DELETE SET NULL,
    dedupe_key           text        NOT NULL,
    language             text        NOT NULL,
    outcome              text,
    note                 text,
    text                 text,
    paid                 boolean     NOT NULL DEFAULT false,
    attempted_at         timestamptz,
    created_at           timestamptz NOT NULL DEFAULT statement_timestamp(),
    sent_at              timestamptz,
    CONSTRAINT messages_dedupe_key_key UNIQUE (dedupe_key),
    CONSTRAINT messages_kind_check CHECK (
        kind IN ('broadcast', 'unpaid_checkout', 'win_back', 'cancel_offer', 'renewal_failed')),
    CONSTRAINT messages_broadcast_check CHECK ((kind = 'broadcast') = (broadcast_id IS NOT NULL)),
    CONSTRAINT messages_language_check CHECK (language IN ('en', 'uk', 'ru')),
    CONSTRAINT messages_outcome_check CHECK (
        outcome IN ('sent', 'blocked', 'failed', 'skipped')),
    CONSTRAINT messages_decided_check CHECK ((outcome IS NULL) = (sent_at IS NULL))
);
CREATE INDEX messages_broadcast_idx ON messages (broadcast_id, outcome)
    WHERE broadcast_id IS NOT NULL;
CREATE INDEX messages_subscriber_idx ON messages (subscriber_id, id);
CREATE INDEX messages_automation_idx ON messages (kind, outcome) WHERE broadcast_id IS NULL;

-- `member_message`: one `messages` row sent (`payload.message_id`; `user_id` the buyer).
ALTER TABLE effects
    DROP CONSTRAINT effects_kind_check,
    ADD CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel',
        'unban', 'member_message')),
    DROP CONSTRAINT effects_chat_id_check,
    ADD CONSTRAINT effects_chat_id_check CHECK (
        kind IN ('refund', 'bot_message', 'invoice', 'subscription_cancel', 'member_message')
        OR chat_id IS NOT NULL);

-- The claim's order gains a third tier: access effects, then every other effect (invoices,
-- receipts, the bot's answers), then messages to members, each tier by due time and id. A
-- 100,000-recipient broadcast therefore holds back neither a grant nor a buyer's invoice.
-- The expression must stay exactly the claim query's (src/app/worker/claim.rs).
DROP INDEX effects_claim_idx;
CREATE INDEX effects_claim_idx ON effects (
        (CASE WHEN kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') THEN 0
              WHEN kind = 'member_message' THEN 2 ELSE 1 END),
        next_attempt_at, id)
    WHERE status = 'pending';

-- Outbound endpoints may ask for `broadcast.finished` and `automation.sent` (emitted by the code
-- that finishes a broadcast and records an automation's message, with `webhook_emit`).
ALTER TABLE webhook_endpoints
    DROP CONSTRAINT webhook_endpoints_event_types_check,
    ADD CONSTRAINT webhook_endpoints_event_types_check CHECK (
        cardinality(event_types) >= 1
        AND event_types <@ ARRAY['payment.applied', 'payment.needs_review', 'payment.refunded',
            'payment.disputed', 'membership.activated', 'membership.renewed', 'membership.grace',
            'membership.expired', 'membership.deleted', 'trial.started', 'broadcast.finished',
            'automation.sent']::text[]);


-- statement
-- Outbound webhooks, one lane per endpoint: a delivery being sent carries its lease, so a claim
-- counts an endpoint's deliveries in flight over every process (src/outbound/delivery.rs).
-- NULL when no attempt is under way; an attempt's record clears it, and one left by a killed
-- process stops counting when it runs out.
ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;

-- The leases a claim counts, per endpoint: only deliveries under way (or left by a killed
-- process) carry one.
CREATE INDEX webhook_deliveries_leased_idx ON webhook_deliveries (endpoint_id)
    WHERE leased_until IS NOT NULL;

-- One endpoint's next due deliveries, read in due order up to its limit, however long the
-- queue of another endpoint is.
CREATE INDEX webhook_deliveries_endpoint_due_idx
    ON webhook_deliveries (endpoint_id, next_attempt_at, id) WHERE status = 'pending';


-- statement
-- Outbound webhooks: the owner's endpoints, the events written in the transaction that made
-- each change (an outbox), one delivery per (event, endpoint) and the log of every attempt.
--
-- The events are written by triggers on the tables whose changes they report, so every way a
-- payment or a membership changes (the payment core, refunds, the set-based sweep, staff writes,
-- trials, cascades) reports it, in its own transaction — never lost, never written by one that
-- rolled back. A trigger does nothing but one EXISTS probe unless an enabled endpoint wants
-- that event type; then one INSERT of the event and one INSERT … SELECT of its deliveries.

CREATE TABLE webhook_endpoints (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url                   text        NOT NULL,
    description           text,
    event_types           text[]      NOT NULL,
    -- `whsec_<base64>`; the previous one keeps signing until `previous_secret_until`.
    secret                text        NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    -- Null: enabled. Set with a reason when staff disable it, on `410 Gone`, or after five days
    -- of failing.
    disabled_at           timestamptz,
    disabled_reason       text,
    -- Since when every delivery to it has failed (null when the last one succeeded).
    failing_since         timestamptz,
    created_at            timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at            timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT webhook_endpoints_url_check CHECK (char_length(url) BETWEEN 1 AND 2048),
    CONSTRAINT webhook_endpoints_description_check CHECK (char_length(description) <= 500),
    CONSTRAINT webhook_endpoints_event_types_check CHECK (
        cardinality(event_types) >= 1
        AND event_types <@ ARRAY['payment.applied', 'payment.needs_review', 'payment.refunded',
            'membership.activated', 'membership.renewed', 'membership.grace',
            'membership.expired', 'membership.deleted', 'trial.started']::text[]),
    CONSTRAINT webhook_endpoints_disabled_check CHECK (
        (disabled_at IS NULL) = (disabled_reason IS NULL)),
    CONSTRAINT webhook_endpoints_disabled_reason_check CHECK (
        disabled_reason IN ('staff', 'gone', 'failing'))
);

CREATE TABLE webhook_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- `webhook-id`: the same on every attempt and replay.
    msg_id     text        NOT NULL DEFAULT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
    type       text        NOT NULL,
    -- The body sent, byte for byte: {"type", "timestamp", "data"}.
    body       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT webhook_events_msg_id_key UNIQUE (msg_id)
);

CREATE TABLE webhook_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        bigint      NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    endpoint_id     bigint      NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    status          text        NOT NULL DEFAULT 'pending',
    -- Attempts made since it was enqueued or last replayed (the retry schedule's position).
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT webhook_deliveries_event_endpoint_key UNIQUE (event_id, endpoint_id),
    CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'failed'))
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, id)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, id);

CREATE TABLE webhook_attempts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id  bigint      NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT statement_timestamp(),
    status_code  integer,
    latency_ms   integer     NOT NULL,
    error        text
);
CREATE INDEX webhook_attempts_delivery_idx ON webhook_attempts (delivery_id, id);

-- RFC 3339 in UTC, as the API writes times; lifetime access ('infinity') as "infinity".
CREATE FUNCTION webhook_time(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN t = 'infinity' THEN 'infinity'
                ELSE to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') END
$$;

-- Writes event `kind` about `data` (the resource as the staff API shows it) and its deliveries
-- to every enabled endpoint that wants it; nothing when none does.
CREATE FUNCTION webhook_emit(kind text, data jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    event_id bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE disabled_at IS NULL AND kind = ANY (event_types)) THEN
        RETURN;
    END IF;
    INSERT INTO webhook_events (type, body)
    VALUES (kind, jsonb_build_object('type', kind,
                                     'timestamp', webhook_time(statement_timestamp()),
                                     'data', data)::text)
    RETURNING id INTO event_id;
    INSERT INTO webhook_deliveries (event_id, endpoint_id)
    SELECT event_id, e.id FROM webhook_endpoints e
    WHERE e.disabled_at IS NULL AND kind = ANY (e.event_types);
END
$$;

CREATE FUNCTION webhook_payment_json(p payments) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', p.id, 'gateway', p.gateway, 'external_id', p.external_id,
        'order_reference', p.order_reference, 'order_id', p.order_id,
        'subscriber_id', p.subscriber_id, 'channel_id', p.channel_id,
        'amount_minor', p.amount_minor, 'currency', p.currency,
        'paid_at', webhook_time(p.paid_at), 'outcome', p.outcome, 'reason', p.reason,
        'created_at', webhook_time(p.created_at))
$$;

CREATE FUNCTION webhook_membership_json(m memberships) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', m.id, 'subscriber_id', m.subscriber_id, 'channel_id', m.channel_id,
        'status', m.status, 'expires_at', webhook_time(m.expires_at),
        'created_at', webhook_time(m.created_at), 'updated_at', webhook_time(m.updated_at))
$$;

-- payment.applied / payment.needs_review when stored; payment.refunded, payment.applied or
-- payment.needs_review when its outcome changes to one of those.
CREATE FUNCTION webhook_payments_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.outcome IS NOT DISTINCT FROM NEW.outcome THEN
        RETURN NULL;
    END IF;
    IF NEW.outcome = 'applied' THEN
        PERFORM webhook_emit('payment.applied', webhook_payment_json(NEW));
    ELSIF NEW.outcome = 'needs_review' THEN
        PERFORM webhook_emit('payment.needs_review', webhook_payment_json(NEW));
    ELSIF NEW.outcome = 'refunded' THEN
        PERFORM webhook_emit('payment.refunded', webhook_payment_json(NEW));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_payments AFTER INSERT OR UPDATE OF outcome ON payments
    FOR EACH ROW EXECUTE FUNCTION webhook_payments_trigger();

-- A membership's history row says what happened to it: activated (new, or live again after
-- expiry), renewed (a live one extended), grace, expired; a trial's grant is also
-- trial.started. The data is the membership as it is now.
CREATE FUNCTION webhook_membership_events_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text;
    m memberships;
BEGIN
    IF NEW.to_status = 'active' AND (NEW.from_status IS NULL OR NEW.from_status = 'expired') THEN
        kind := 'membership.activated';
    ELSIF NEW.to_status = 'active' AND NEW.expires_at_after > NEW.expires_at_before THEN
        kind := 'membership.renewed';
    ELSIF NEW.to_status = 'grace' AND NEW.from_status IS DISTINCT FROM 'grace' THEN
        kind := 'membership.grace';
    ELSIF NEW.to_status = 'expired' AND NEW.from_status IS DISTINCT FROM 'expired' THEN
        kind := 'membership.expired';
    END IF;
    IF kind IS NULL AND NEW.cause <> 'trial' THEN
        RETURN NULL;
    END IF;
    -- Without an endpoint that wants it, not even the membership is read.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE disabled_at IS NULL
                     AND (kind = ANY (event_types)
                          OR (NEW.cause = 'trial' AND 'trial.started' = ANY (event_types)))) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO m FROM memberships WHERE id = NEW.membership_id;
    IF kind IS NOT NULL THEN
        PERFORM webhook_emit(kind, webhook_membership_json(m));
    END IF;
    IF NEW.cause = 'trial' THEN
        PERFORM webhook_emit('trial.started', webhook_membership_json(m));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_membership_events AFTER INSERT ON membership_events
    FOR EACH ROW EXECUTE FUNCTION webhook_membership_events_trigger();

CREATE FUNCTION webhook_memberships_delete_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit('membership.deleted', webhook_membership_json(OLD));
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_memberships_delete AFTER DELETE ON memberships
    FOR EACH ROW EXECUTE FUNCTION webhook_memberships_delete_trigger();


-- statement
-- Referrals and affiliates (docs/referrals.md): the program, affiliates and their links, the
-- clicks and attributions of buyers, the commission ledger, payouts, the reward days of
-- buyer-referrers, and Telegram's own affiliate fee on a Stars payment.

-- The one program: off until the owner switches it on.
CREATE TABLE referral_program (
    id                        boolean     PRIMARY KEY DEFAULT true,
    enabled                   boolean     NOT NULL DEFAULT false,
    attribution               text        NOT NULL DEFAULT 'first_click',
    window_days               integer     NOT NULL DEFAULT 30,
    hold_days                 integer     NOT NULL DEFAULT 14,
    first_percent             integer     NOT NULL DEFAULT 0,
    renewal_percent           integer     NOT NULL DEFAULT 0,
    renewal_months            integer     NOT NULL DEFAULT 0,
    buyer_links               boolean     NOT NULL DEFAULT false,
    buyer_reward_days         integer,
    max_reward_days_per_month integer,
    updated_at                timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT referral_program_one_check CHECK (id),
    CONSTRAINT referral_program_attribution_check CHECK (
        attribution IN ('first_click', 'last_click')),
    CONSTRAINT referral_program_window_days_check CHECK (window_days BETWEEN 1 AND 365),
    CONSTRAINT referral_program_hold_days_check CHECK (hold_days BETWEEN 0 AND 180),
    CONSTRAINT referral_program_first_percent_check CHECK (first_percent BETWEEN 0 AND 90),
    CONSTRAINT referral_program_renewal_percent_check CHECK (renewal_percent BETWEEN 0 AND 90),
    CONSTRAINT referral_program_renewal_months_check CHECK (renewal_months BETWEEN 0 AND 120),
    CONSTRAINT referral_program_buyer_reward_days_check CHECK (
        buyer_reward_days BETWEEN 1 AND 365),
    CONSTRAINT referral_program_max_reward_days_check CHECK (
        max_reward_days_per_month BETWEEN 1 AND 3660)
);
INSERT INTO referral_program DEFAULT VALUES;

-- A plan's own rates, in place of the program's.
CREATE TABLE plan_referral_rates (
    plan_id         bigint      PRIMARY KEY REFERENCES plans (id) ON DELETE CASCADE,
    first_percent   integer     NOT NULL,
    renewal_percent integer     NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT plan_referral_rates_first_percent_check CHECK (first_percent BETWEEN 0 AND 90),
    CONSTRAINT plan_referral_rates_renewal_percent_check CHECK (
        renewal_percent BETWEEN 0 AND 90)
);

-- An affiliate: an external partner by name, or a buyer (`subscriber_id`). Never deleted once
-- it has lines (the foreign keys below refuse it); deactivated instead.
CREATE TABLE affiliates (
    id            integer     GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text        NOT NULL,
    subscriber_id integer     REFERENCES subscribers (id) ON DELETE SET NULL,
    code          text        NOT NULL,
    active        boolean     NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT affiliates_code_key UNIQUE (code),
    CONSTRAINT affiliates_subscriber_key UNIQUE (subscriber_id),
    CONSTRAINT affiliates_name_check CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT affiliates_code_check CHECK (code ~ '^[A-Z0-9_]{3,32}$')
);

-- Every `/start r_<code>` of a known, active code: what it came to.
CREATE TABLE referral_clicks (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    affiliate_id  integer     NOT NULL REFERENCES affiliates (id),
    subscriber_id integer     REFERENCES subscribers (id) ON DELETE SET NULL,
    outcome       text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT referral_clicks_outcome_check CHECK (
        outcome IN ('attributed', 'kept', 'self', 'program_off'))
);
CREATE INDEX referral_clicks_affiliate_idx ON referral_clicks (affiliate_id, created_at);

-- Which affiliate a buyer is attributed to (one per buyer): since when, and by which click.
CREATE TABLE referral_attributions (
    subscriber_id integer     PRIMARY KEY REFERENCES subscribers (id) ON DELETE CASCADE,
    affiliate_id  integer     NOT NULL REFERENCES affiliates (id),
    attributed_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE INDEX referral_attributions_affiliate_idx ON referral_attributions (affiliate_id);

-- A payout: the lines of one currency an affiliate was paid for, netted.
CREATE TABLE payouts (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    affiliate_id integer     NOT NULL REFERENCES affiliates (id),
    currency     text        NOT NULL,
    amount_minor bigint      NOT NULL,
    lines        integer     NOT NULL,
    staff_id     integer,
    created_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT payouts_amount_check CHECK (amount_minor > 0),
    CONSTRAINT payouts_lines_check CHECK (lines >= 1)
);
CREATE INDEX payouts_affiliate_idx ON payouts (affiliate_id, id);

-- The ledger: one earning line (`first` or `renewal`) per applied payment of an attributed
-- buyer, written in the payment's transaction, and at most one `reversal` (negative) when the
-- payment is taken back after its line was paid. `status` is stored as `pending`, `paid` or
-- `reversed`; a `pending` line whose `payable_at` has passed reads as `payable`.
CREATE TABLE commission_lines (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    affiliate_id  integer     NOT NULL REFERENCES affiliates (id),
    payment_id    bigint      NOT NULL REFERENCES payments (id),
    subscriber_id integer     REFERENCES subscribers (id) ON DELETE SET NULL,
    kind          text        NOT NULL,
    amount_minor  bigint      NOT NULL,
    currency      text        NOT NULL,
    percent       integer     NOT NULL,
    base_minor    bigint      NOT NULL,
    status        text        NOT NULL DEFAULT 'pending',
    payable_at    timestamptz NOT NULL,
    payout_id     bigint      REFERENCES payouts (id),
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    reversed_at   timestamptz,
    CONSTRAINT commission_lines_kind_check CHECK (kind IN ('first', 'renewal', 'reversal')),
    CONSTRAINT commission_lines_status_check CHECK (status IN ('pending', 'paid', 'reversed')),
    CONSTRAINT commission_lines_sign_check CHECK (
        (kind = 'reversal' AND amount_minor < 0) OR (kind <> 'reversal' AND amount_minor > 0)),
    CONSTRAINT commission_lines_paid_check CHECK ((status = 'paid') = (payout_id IS NOT NULL)),
    CONSTRAINT commission_lines_reversed_check CHECK (
        (status = 'reversed') = (reversed_at IS NOT NULL) AND NOT (kind = 'reversal'
                                                                  AND status = 'reversed'))
);
-- At most one earning line and one reversal per payment, ever.
CREATE UNIQUE INDEX commission_lines_payment_key
    ON commission_lines (payment_id, (kind = 'reversal'));
CREATE INDEX commission_lines_affiliate_idx ON commission_lines (affiliate_id, id);
CREATE INDEX commission_lines_open_idx ON commission_lines (affiliate_id, currency, payable_at)
    WHERE status = 'pending';

-- Reward days owed to a buyer-referrer for a referred buyer's first purchase: written in the
-- payment's transaction, granted (and taken back after a refund) by a `referral_reward` effect
-- under the referrer's own pair lock. `granted_at` / `taken_back_at`: when the effect added the
-- days and took them back; `reversed_at`: the payment was taken back (before the grant: the
-- days are never granted).
CREATE TABLE referral_rewards (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    affiliate_id        integer     NOT NULL REFERENCES affiliates (id),
    referrer_id         integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    channel_id          integer     NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    payment_id          bigint      NOT NULL REFERENCES payments (id),
    days                integer     NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    reversed_at         timestamptz,
    granted_at          timestamptz,
    taken_back_at       timestamptz,
    CONSTRAINT referral_rewards_payment_key UNIQUE (payment_id),
    CONSTRAINT referral_rewards_days_check CHECK (days BETWEEN 1 AND 365)
);
CREATE INDEX referral_rewards_referrer_idx ON referral_rewards (referrer_id, created_at);

-- A membership's change by a reward: `referral` (granted) and `referral_back` (taken back).
ALTER TABLE membership_events
    DROP CONSTRAINT membership_events_cause_check,
    ADD CONSTRAINT membership_events_cause_check
        CHECK (cause IN ('payment', 'sweep', 'staff', 'trial', 'promo', 'refund', 'referral',
                         'referral_back'));

-- Telegram's own affiliate program's commission on a Stars payment (its `StarTransaction`'s
-- `source.affiliate.amount`), in the payment's minor units; 0 when none.
ALTER TABLE payments ADD COLUMN affiliate_fee_minor bigint NOT NULL DEFAULT 0;

-- `referral_reward`: grant or take back one `referral_rewards` row (`payload.reward_id`).
ALTER TABLE effects
    DROP CONSTRAINT effects_kind_check,
    ADD CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel',
        'unban', 'member_message', 'referral_reward')),
    DROP CONSTRAINT effects_chat_id_check,
    ADD CONSTRAINT effects_chat_id_check CHECK (
        kind IN ('refund', 'bot_message', 'invoice', 'subscription_cancel', 'member_message',
                 'referral_reward')
        OR chat_id IS NOT NULL);

ALTER TABLE webhook_endpoints
    DROP CONSTRAINT webhook_endpoints_event_types_check,
    ADD CONSTRAINT webhook_endpoints_event_types_check CHECK (
        cardinality(event_types) >= 1
        AND event_types <@ ARRAY['payment.applied', 'payment.needs_review', 'payment.refunded',
            'payment.disputed', 'membership.activated', 'membership.renewed', 'membership.grace',
            'membership.expired', 'membership.deleted', 'trial.started', 'broadcast.finished',
            'automation.sent', 'referral.attributed', 'commission.created',
            'commission.reversed', 'payout.recorded']::text[]);

-- The four events, written by triggers in the transaction that made the change, like
-- migration 0013's.
CREATE FUNCTION webhook_commission_json(l commission_lines) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', l.id, 'affiliate_id', l.affiliate_id, 'payment_id', l.payment_id,
        'kind', l.kind, 'amount_minor', l.amount_minor, 'currency', l.currency,
        'status', CASE WHEN l.status = 'pending' AND l.payable_at <= statement_timestamp()
                       THEN 'payable' ELSE l.status END,
        'payable_at', webhook_time(l.payable_at), 'created_at', webhook_time(l.created_at))
$$;

CREATE FUNCTION webhook_referral_attributions_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.affiliate_id = NEW.affiliate_id
       AND OLD.attributed_at = NEW.attributed_at THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_emit('referral.attributed', jsonb_build_object(
        'subscriber_id', NEW.subscriber_id, 'affiliate_id', NEW.affiliate_id,
        'attributed_at', webhook_time(NEW.attributed_at)));
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_referral_attributions AFTER INSERT OR UPDATE ON referral_attributions
    FOR EACH ROW EXECUTE FUNCTION webhook_referral_attributions_trigger();

CREATE FUNCTION webhook_commission_lines_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.kind = 'reversal' THEN
            PERFORM webhook_emit('commission.reversed', webhook_commission_json(NEW));
        ELSE
            PERFORM webhook_emit('commission.created', webhook_commission_json(NEW));
        END IF;
    ELSIF NEW.status = 'reversed' AND OLD.status <> 'reversed' THEN
        PERFORM webhook_emit('commission.reversed', webhook_commission_json(NEW));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_commission_lines AFTER INSERT OR UPDATE OF status ON commission_lines
    FOR EACH ROW EXECUTE FUNCTION webhook_commission_lines_trigger();

CREATE FUNCTION webhook_payouts_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit('payout.recorded', jsonb_build_object(
        'id', NEW.id, 'affiliate_id', NEW.affiliate_id, 'currency', NEW.currency,
        'amount_minor', NEW.amount_minor, 'lines', NEW.lines,
        'created_at', webhook_time(NEW.created_at)));
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_payouts AFTER INSERT ON payouts
    FOR EACH ROW EXECUTE FUNCTION webhook_payouts_trigger();


-- statement
-- Refunds staff start (`POST /api/payments/{id}/refund`): one request per payment, ever. The
-- work itself is the `gateway_refund` effect keyed `gateway_refund:{payment}` (allowed by
-- migration 0028); where the refund stands is that effect's status, so nothing here is
-- updated after the request is written.
CREATE TABLE staff_refunds (
    payment_id   bigint      PRIMARY KEY REFERENCES payments (id) ON DELETE RESTRICT,
    -- Why staff refunded it, as they wrote it (also sent to WayForPay as the refund's comment).
    reason       text        NOT NULL,
    -- Who asked: the account (kept NULL once it is deleted) and its email at the time.
    staff_id     bigint      REFERENCES staff_accounts (id) ON DELETE SET NULL,
    staff_email  text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT staff_refunds_reason_check CHECK (char_length(reason) BETWEEN 1 AND 500)
);
CREATE INDEX staff_refunds_staff_idx ON staff_refunds (staff_id) WHERE staff_id IS NOT NULL;

-- A payment staff refunded and its gateway confirmed: `refunded`, reason `refunded_by_staff`.
ALTER TABLE payments
    DROP CONSTRAINT payments_reason_check,
    ADD CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive',
        'refunded_elsewhere', 'unknown_subscription', 'subscription_cancelled',
        'promo_exhausted', 'already_lifetime', 'refunded_at_gateway',
        'refunded_before_payment', 'disputed_at_gateway', 'dispute_won', 'refunded_by_staff'));


-- statement
-- Staff accounts changed from the command line (`subgate staff create`, `set-password`) are in
-- the audit log too. Such a row has no staff account behind it: `actor` says who made a write,
-- `staff` (an account, named by `staff_id` and `staff_email`) or `cli` (the command line, with
-- neither). Adding a column with a constant default and a CHECK changes no existing row, so
-- the append-only trigger is not involved.
ALTER TABLE audit_log
    ADD COLUMN actor text NOT NULL DEFAULT 'staff',
    ALTER COLUMN staff_id DROP NOT NULL,
    ALTER COLUMN staff_email DROP NOT NULL,
    ADD CONSTRAINT audit_log_actor_check CHECK (
        (actor = 'staff' AND staff_id IS NOT NULL AND staff_email IS NOT NULL)
        OR (actor = 'cli' AND staff_id IS NULL AND staff_email IS NULL));
ALTER TABLE audit_log ALTER COLUMN actor DROP DEFAULT;


-- statement
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


-- statement
-- Stripe disputes (door 4). `charge.dispute.created` takes back what an applied payment bought,
-- as a refund at the gateway does, and marks it `disputed` (reason `disputed_at_gateway`);
-- `charge.dispute.closed` with `won` puts a disputed payment in review (`needs_review`,
-- reason `dispute_won`) for staff to grant again. Outbound endpoints may ask for
-- `payment.disputed`; the review is the `payment.needs_review` it always was.
ALTER TABLE payments
    DROP CONSTRAINT payments_outcome_check,
    ADD CONSTRAINT payments_outcome_check CHECK (
        outcome IN ('applied', 'needs_review', 'refund_pending', 'refunded', 'refund_failed',
                    'disputed')),
    DROP CONSTRAINT payments_reason_check,
    ADD CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive',
        'refunded_elsewhere', 'unknown_subscription', 'subscription_cancelled',
        'promo_exhausted', 'already_lifetime', 'refunded_at_gateway',
        'refunded_before_payment', 'disputed_at_gateway', 'dispute_won'));

ALTER TABLE webhook_endpoints
    DROP CONSTRAINT webhook_endpoints_event_types_check,
    ADD CONSTRAINT webhook_endpoints_event_types_check CHECK (
        cardinality(event_types) >= 1
        AND event_types <@ ARRAY['payment.applied', 'payment.needs_review', 'payment.refunded',
            'payment.disputed', 'membership.activated', 'membership.renewed', 'membership.grace',
            'membership.expired', 'membership.deleted', 'trial.started']::text[]);

-- As in 0015, with `disputed` → payment.disputed.
CREATE OR REPLACE FUNCTION webhook_payments_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text := CASE NEW.outcome WHEN 'applied' THEN 'payment.applied'
                                  WHEN 'needs_review' THEN 'payment.needs_review'
                                  WHEN 'refunded' THEN 'payment.refunded'
                                  WHEN 'disputed' THEN 'payment.disputed' END;
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


-- statement
-- Telegram and the card gateway checked against the database.

-- Whether the bot can act in the channel's chat: `no_rights` once Telegram told us (a
-- `my_chat_member` update, or a refusal for missing rights) that the bot is no longer an
-- administrator able to invite and ban. The chat's access effects wait while it is so.
ALTER TABLE channels
    ADD COLUMN telegram_status    text        NOT NULL DEFAULT 'ok',
    ADD COLUMN telegram_status_at timestamptz,
    ADD CONSTRAINT channels_telegram_status_check CHECK (telegram_status IN ('ok', 'no_rights'));

-- Users allowed in a channel's chat without a membership (staff, guests): never removed by a
-- revoke, a `chat_member` check or an audit.
CREATE TABLE channel_exemptions (
    channel_id       integer     NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    telegram_user_id bigint      NOT NULL,
    note             text,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (channel_id, telegram_user_id),
    CONSTRAINT channel_exemptions_user_check CHECK (telegram_user_id > 0),
    CONSTRAINT channel_exemptions_note_check CHECK (char_length(note) <= 255)
);

-- Who subgate banned in which chat: written before a revoke's ban, removed once its unban is
-- recorded. A grant unbans only the users listed here (anyone else is not banned by us), so a
-- grant is one message.
CREATE TABLE chat_bans (
    chat_id   bigint      NOT NULL,
    user_id   bigint      NOT NULL,
    banned_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (chat_id, user_id)
);

-- `unban`: an audit found a live member banned in the chat.
ALTER TABLE effects
    DROP CONSTRAINT effects_kind_check,
    ADD CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel',
        'unban'));

-- The access effects of one member are ordered among themselves only.
CREATE INDEX effects_member_access_idx ON effects (chat_id, user_id, id)
    WHERE status = 'pending'
      AND kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban');

-- An audit of one channel's member list (`POST /api/channels/{id}/audit`).
CREATE TABLE audits (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id  integer     NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    fix         boolean     NOT NULL,
    status      text        NOT NULL DEFAULT 'running',
    checked     integer     NOT NULL DEFAULT 0,
    total       integer     NOT NULL DEFAULT 0,
    counts      jsonb       NOT NULL DEFAULT '{}',
    rows        jsonb       NOT NULL DEFAULT '{}',
    error       text,
    started_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    finished_at timestamptz,
    CONSTRAINT audits_status_check CHECK (status IN ('running', 'done', 'failed')),
    CONSTRAINT audits_finished_check CHECK ((status = 'running') = (finished_at IS NULL))
);
CREATE INDEX audits_channel_idx ON audits (channel_id, id);

-- When the buyer was given a card purchase link for the order (the moment a lost callback
-- becomes possible).
ALTER TABLE orders ADD COLUMN purchase_link_at timestamptz;

-- A pending card order being asked about at the gateway (`CHECK_STATUS`).
CREATE TABLE gateway_checks (
    order_id        bigint      PRIMARY KEY REFERENCES orders (id) ON DELETE CASCADE,
    gateway         text        NOT NULL,
    state           text        NOT NULL DEFAULT 'chasing',
    attempts        integer     NOT NULL DEFAULT 0,
    next_check_at   timestamptz NOT NULL,
    last_checked_at timestamptz,
    last_status     text,
    last_error      text,
    payment_id      bigint      REFERENCES payments (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT gateway_checks_gateway_check CHECK (gateway IN ('wayforpay')),
    CONSTRAINT gateway_checks_state_check CHECK (state IN ('chasing', 'found', 'gave_up', 'settled')),
    CONSTRAINT gateway_checks_attempts_check CHECK (attempts >= 0)
);
CREATE INDEX gateway_checks_due_idx ON gateway_checks (next_check_at) WHERE state = 'chasing';

-- A payment refunded at the gateway (a WayForPay `Refunded`/`Voided`): its memberships are
-- shortened by what it bought, recorded as `refund` events naming the payment.
ALTER TABLE payments
    DROP CONSTRAINT payments_reason_check,
    ADD CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive',
        'refunded_elsewhere', 'unknown_subscription', 'subscription_cancelled',
        'promo_exhausted', 'already_lifetime', 'refunded_at_gateway'));
ALTER TABLE membership_events
    DROP CONSTRAINT membership_events_cause_check,
    ADD CONSTRAINT membership_events_cause_check
        CHECK (cause IN ('payment', 'sweep', 'staff', 'trial', 'promo', 'refund')),
    DROP CONSTRAINT membership_events_payment_check,
    ADD CONSTRAINT membership_events_payment_check
        CHECK ((cause IN ('payment', 'refund')) = (payment_id IS NOT NULL));


-- statement
-- Telegram's affiliate fee on a Stars payment (`payments.affiliate_fee_minor`, 0025), carried
-- into the revenue statistics and the outbound payment JSON, and kept until its payment is
-- stored (docs/telegram.md#telegrams-affiliate-programs).

-- The fees the Stars reconcile read in `getStarTransactions` (`source.affiliate.amount`) and
-- has not yet written on their payment: a row lives from the run that reads the transaction
-- to the transaction that records the fee on the stored payment, so a fee whose payment is
-- stored later (its update delayed past the run) is recorded by a later run, never lost.
CREATE TABLE star_affiliate_fees (
    charge_id    text        PRIMARY KEY,
    amount_minor bigint      NOT NULL,
    seen_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT star_affiliate_fees_amount_check CHECK (amount_minor >= 0)
);

-- A day's revenue also sums the fees of the payments it counts in gross.
ALTER TABLE stats_revenue_days ADD COLUMN affiliate_fees numeric NOT NULL DEFAULT 0;

-- A fee recorded on a payment of an ended day forgets that day's roll-up, as a refund does
-- (0015's trigger, with the fee among the columns it watches).
DROP TRIGGER payments_stats_update ON payments;
CREATE TRIGGER payments_stats_update AFTER UPDATE OF paid_at, outcome, amount_minor, currency,
    channel_id, subscriber_id, affiliate_fee_minor ON payments
    FOR EACH ROW
    WHEN ((OLD.paid_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date
          OR (NEW.paid_at AT TIME ZONE 'UTC')::date < (statement_timestamp() AT TIME ZONE 'UTC')::date)
    EXECUTE FUNCTION stats_forget_changed_days('paid_at');

-- Days rolled up before the column existed are rolled again where a payment has a fee.
DELETE FROM stats_rolled_days
WHERE day IN (SELECT DISTINCT (paid_at AT TIME ZONE 'UTC')::date FROM payments
              WHERE affiliate_fee_minor <> 0);

-- The payment of a `payment.*` event, as the staff API shows it (with its fee).
CREATE OR REPLACE FUNCTION webhook_payment_json(p payments) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', p.id, 'gateway', p.gateway, 'external_id', p.external_id,
        'order_reference', p.order_reference, 'order_id', p.order_id,
        'subscriber_id', p.subscriber_id, 'channel_id', p.channel_id,
        'amount_minor', p.amount_minor, 'currency', p.currency,
        'affiliate_fee_minor', p.affiliate_fee_minor,
        'paid_at', webhook_time(p.paid_at), 'outcome', p.outcome, 'reason', p.reason,
        'created_at', webhook_time(p.created_at))
$$;


-- statement
-- The bot speaks the buyer's language: English (the default), Ukrainian, Russian.

-- The language the bot speaks to a subscriber (chosen with /language, set by staff, or their
-- Telegram app's when they first bought); NULL: the configured default.
ALTER TABLE subscribers
    ADD COLUMN language text
        CONSTRAINT subscribers_language_check CHECK (language IN ('en', 'uk', 'ru'));

-- Per-language titles and descriptions of channels and plans:
-- {"uk": {"title": "…", "description": "…"}, …}; a language without one falls back to the
-- default title and description. The API checks the shape; the schema keeps it an object.
ALTER TABLE channels
    ADD COLUMN translations jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT channels_translations_check CHECK (jsonb_typeof(translations) = 'object');
ALTER TABLE plans
    ADD COLUMN translations jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT plans_translations_check CHECK (jsonb_typeof(translations) = 'object');


-- statement
-- The channel's (or group's) own link as the paywall: a chat whose join requests subgate
-- answers with a Mini App (docs/bot.md#the-door), and the requests waiting at that door.

-- How a join request of the chat is answered: `bot` as before (approve a member, decline
-- anyone else), `mini_app` the paywall (a request carrying a query opens the Mini App).
ALTER TABLE channels
    ADD COLUMN door text NOT NULL DEFAULT 'bot',
    ADD CONSTRAINT channels_door_check CHECK (door IN ('bot', 'mini_app'));

-- A join request that came with a query (`chat_join_request.query_id`) to a `mini_app` chat.
-- `answer` is how the query was answered at the door (in the webhook's reply): `approve` (a
-- member, an exempt user, an administrator), `web_app` (the paywall opened), `queue` (not
-- decided in time: decided later, as a plain join request). `state` is the request's own fate:
-- `waiting` until it is approved (its buyer's access was granted) or declined (its order ran
-- out unpaid, or it outlived its query). One waiting request per chat and user: a new request
-- of the same user takes the waiting row over (its new query, its new reference).
CREATE TABLE join_requests (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id   integer     NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    chat_id      bigint      NOT NULL,
    user_id      bigint      NOT NULL,
    query_id     text        NOT NULL,
    -- The one-time reference the paywall URL carries (`r=`), naming this request.
    reference    text        NOT NULL,
    answer       text        NOT NULL,
    state        text        NOT NULL DEFAULT 'waiting',
    -- The order the Mini App made for this request (its hold decides when an unpaid request is
    -- declined).
    order_id     bigint      REFERENCES orders (id) ON DELETE SET NULL,
    -- Telegram's `date` of the request.
    requested_at timestamptz NOT NULL,
    -- When the query arrived (its life counts from here).
    created_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    decided_at   timestamptz,
    -- Telegram confirmed the decision (the approval or decline call succeeded).
    answered_at  timestamptz,
    CONSTRAINT join_requests_query_key UNIQUE (query_id),
    CONSTRAINT join_requests_reference_key UNIQUE (reference),
    CONSTRAINT join_requests_answer_check CHECK (answer IN ('approve', 'web_app', 'queue')),
    CONSTRAINT join_requests_state_check CHECK (state IN ('waiting', 'approved', 'declined')),
    CONSTRAINT join_requests_decided_check CHECK ((state = 'waiting') = (decided_at IS NULL)),
    CONSTRAINT join_requests_query_id_check CHECK (char_length(query_id) BETWEEN 1 AND 256)
);
CREATE UNIQUE INDEX join_requests_waiting_key ON join_requests (chat_id, user_id)
    WHERE state = 'waiting';
CREATE INDEX join_requests_waiting_idx ON join_requests (created_at) WHERE state = 'waiting';
CREATE INDEX join_requests_order_idx ON join_requests (order_id) WHERE order_id IS NOT NULL;
CREATE INDEX join_requests_channel_idx ON join_requests (channel_id, created_at DESC);


-- statement
-- The effects worker claims access effects first.
--
-- The claim's order: access effects (grant, revoke, join answers, unban) first, then by due
-- time and id. `false` sorts first, so the leading key is "not an access effect". The
-- expression must stay exactly the claim query's (src/worker/mod.rs, `CANDIDATE_SQL`).
--
-- (No trigger notifies the worker: a NOTIFY inside the writing transaction takes a
-- cluster-wide lock from its commit to the end of the commit's WAL flush, which serializes
-- every payment's commit. The process that commits wakes its own worker and tells the others
-- with a NOTIFY of its own, outside any payment; see src/worker/listen.rs.)
CREATE INDEX effects_claim_idx ON effects (
        (kind NOT IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban')),
        next_attempt_at, id)
    WHERE status = 'pending';

-- The index above replaces the due-time index the claim used.
DROP INDEX IF EXISTS effects_due_idx;


-- statement
-- The sweep records its Telegram effects in a compact queue; the effects worker turns them into
-- `effects` rows, a chunk at a time.
--
-- A sweep of a million overdue memberships used to write a million `effects` rows inside its
-- batches, each with a heap tuple, seven index entries, a JSON payload, a text key and three
-- foreign-key checks — most of the sweep's time, spent while its batches hold pair locks, on
-- rows the worker can only perform at Telegram's pace (about 28 a second: ten hours for a
-- million). Now each batch writes, in the same statement and transaction as the transitions,
-- one narrow row per revoke or grace notice here (one index, no foreign key, no trigger): the
-- intent still commits exactly when the transition does, and is never lost. The worker moves
-- queued rows into `effects` (src/effects/mod.rs, `materialize_sweep_queue`) in chunks, at the
-- start of every run and whenever it finds nothing due, deleting them in the same statement, so
-- each becomes exactly one effect with the key, payload and Telegram ids it always had
-- (`revoke:{membership}:ev{event}`).
--
-- A row is self-contained: the chat and the user are those of the transition, and it outlives
-- its membership (a membership deleted before its revoke was made still gets it, naming no
-- membership, like the revoke of a deleted membership).
CREATE TABLE sweep_queue (
    -- The transition's `membership_events` row; its key and the queue's order.
    event_id      bigint      PRIMARY KEY,
    membership_id bigint      NOT NULL,
    kind          text        NOT NULL,
    chat_id       bigint      NOT NULL,
    user_id       bigint      NOT NULL,
    -- The membership's expiry at the transition (the effect's payload).
    expires_at    timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT sweep_queue_kind_check CHECK (kind IN ('revoke', 'grace_notice'))
);


-- statement
-- Ukrainian and crypto money: the shared ground of door 5 (Monobank), door 6 (Crypto Pay),
-- fiscal receipts (Checkbox) and refunds staff start. Each of those brings its own tables in
-- the migrations after this one; what they share is widened here once.

-- `fiscal_receipt`: one Checkbox receipt (a sale or a return) of one payment.
-- `gateway_refund`: a refund staff asked for, made at the payment's gateway.
ALTER TABLE effects
    DROP CONSTRAINT effects_kind_check,
    ADD CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel',
        'unban', 'member_message', 'referral_reward', 'fiscal_receipt', 'gateway_refund')),
    DROP CONSTRAINT effects_chat_id_check,
    ADD CONSTRAINT effects_chat_id_check CHECK (
        kind IN ('refund', 'bot_message', 'invoice', 'subscription_cancel', 'member_message',
                 'referral_reward', 'fiscal_receipt', 'gateway_refund')
        OR chat_id IS NOT NULL);

-- Monobank's invoices and Crypto Pay's are chased like WayForPay's orders.
ALTER TABLE gateway_checks
    DROP CONSTRAINT gateway_checks_gateway_check,
    ADD CONSTRAINT gateway_checks_gateway_check CHECK (gateway IN ('wayforpay', 'monobank', 'cryptopay'));

-- A crypto payment is kept in what was paid: `USDT` is four letters.
ALTER TABLE payments
    DROP CONSTRAINT payments_currency_check,
    ADD CONSTRAINT payments_currency_check CHECK (currency ~ '^[A-Z]{3,5}$');


-- statement
-- subgate schema, version 1. Invariants live here; the code relies on them.
-- subscribers.id and channels.id are integer identities: they are the two int4 keys of
-- pg_advisory_xact_lock(subscriber_id, channel_id), the lock every hold/membership change takes.

CREATE TABLE staff_accounts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email         text        NOT NULL,
    password_hash text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT staff_accounts_email_key UNIQUE (email),
    CONSTRAINT staff_accounts_email_check CHECK (email = lower(email) AND char_length(email) BETWEEN 3 AND 254)
);

CREATE TABLE subscribers (
    id               integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    telegram_user_id bigint      NOT NULL,
    username         text,
    display_name     text,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT subscribers_telegram_user_id_key UNIQUE (telegram_user_id),
    CONSTRAINT subscribers_telegram_user_id_check CHECK (telegram_user_id > 0),
    CONSTRAINT subscribers_username_check CHECK (char_length(username) <= 64),
    CONSTRAINT subscribers_display_name_check CHECK (char_length(display_name) <= 128)
);

CREATE TABLE channels (
    id                  integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    telegram_chat_id    bigint      NOT NULL,
    title               text        NOT NULL,
    price_minor         bigint      NOT NULL,
    currency            text        NOT NULL,
    billing_period_days integer     NOT NULL,
    grace_period_days   integer     NOT NULL DEFAULT 0,
    seat_limit          integer,
    active              boolean     NOT NULL DEFAULT true,
    created_at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT channels_telegram_chat_id_key UNIQUE (telegram_chat_id),
    CONSTRAINT channels_telegram_chat_id_check CHECK (telegram_chat_id <> 0),
    CONSTRAINT channels_title_check CHECK (char_length(title) BETWEEN 1 AND 255),
    CONSTRAINT channels_price_minor_check CHECK (price_minor > 0),
    CONSTRAINT channels_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT channels_billing_period_days_check CHECK (billing_period_days BETWEEN 1 AND 3660),
    CONSTRAINT channels_grace_period_days_check CHECK (grace_period_days BETWEEN 0 AND 365),
    CONSTRAINT channels_seat_limit_check CHECK (seat_limit IS NULL OR seat_limit >= 1)
);

CREATE TABLE memberships (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber_id integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    channel_id    integer     NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    status        text        NOT NULL,
    expires_at    timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT memberships_subscriber_channel_key UNIQUE (subscriber_id, channel_id),
    CONSTRAINT memberships_status_check CHECK (status IN ('active', 'grace', 'expired'))
);
-- The sweep's candidates: not yet expired, ordered by expiry.
CREATE INDEX memberships_sweep_idx ON memberships (expires_at, id) WHERE status <> 'expired';
-- Seat counting: live members of a channel.
CREATE INDEX memberships_channel_live_idx ON memberships (channel_id) WHERE status <> 'expired';

CREATE TABLE orders (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reference     text        NOT NULL,
    subscriber_id integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    channel_id    integer     NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    amount_minor  bigint      NOT NULL,
    currency      text        NOT NULL,
    status        text        NOT NULL DEFAULT 'pending',
    hold_until    timestamptz,
    invoice_link  text,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    paid_at       timestamptz,
    CONSTRAINT orders_reference_key UNIQUE (reference),
    CONSTRAINT orders_reference_check CHECK (char_length(reference) BETWEEN 1 AND 64),
    CONSTRAINT orders_amount_minor_check CHECK (amount_minor > 0),
    CONSTRAINT orders_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT orders_status_check CHECK (status IN ('pending', 'paid', 'cancelled')),
    CONSTRAINT orders_paid_at_check CHECK ((status = 'paid') = (paid_at IS NOT NULL)),
    CONSTRAINT orders_cancelled_hold_check CHECK (status <> 'cancelled' OR hold_until IS NULL)
);
CREATE INDEX orders_subscriber_idx ON orders (subscriber_id);
-- Seat counting: pending holds of a channel.
CREATE INDEX orders_channel_holds_idx ON orders (channel_id, hold_until)
    WHERE status = 'pending' AND hold_until IS NOT NULL;

CREATE TABLE payments (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    gateway         text        NOT NULL,
    external_id     text        NOT NULL,
    order_reference text,
    order_id        bigint      REFERENCES orders (id) ON DELETE RESTRICT,
    subscriber_id   integer     REFERENCES subscribers (id) ON DELETE RESTRICT,
    channel_id      integer     REFERENCES channels (id) ON DELETE RESTRICT,
    payer           text,
    amount_minor    bigint      NOT NULL,
    currency        text        NOT NULL,
    paid_at         timestamptz NOT NULL,
    outcome         text        NOT NULL,
    reason          text,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT payments_gateway_external_id_key UNIQUE (gateway, external_id),
    CONSTRAINT payments_gateway_check CHECK (gateway ~ '^[a-z0-9_-]{1,32}$'),
    CONSTRAINT payments_external_id_check CHECK (char_length(external_id) BETWEEN 1 AND 255),
    CONSTRAINT payments_amount_minor_check CHECK (amount_minor >= 0),
    CONSTRAINT payments_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT payments_outcome_check CHECK (
        outcome IN ('applied', 'needs_review', 'refund_pending', 'refunded', 'refund_failed')),
    CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive')),
    CONSTRAINT payments_outcome_reason_check CHECK ((outcome = 'applied') = (reason IS NULL))
);
-- An order is paid by at most one payment.
CREATE UNIQUE INDEX payments_one_applied_per_order ON payments (order_id) WHERE outcome = 'applied';
CREATE INDEX payments_outcome_idx ON payments (outcome, id);
CREATE INDEX payments_order_idx ON payments (order_id);
CREATE INDEX payments_subscriber_idx ON payments (subscriber_id);

CREATE TABLE membership_events (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    membership_id     bigint      NOT NULL REFERENCES memberships (id) ON DELETE CASCADE,
    from_status       text,
    to_status         text        NOT NULL,
    expires_at_before timestamptz,
    expires_at_after  timestamptz NOT NULL,
    cause             text        NOT NULL,
    payment_id        bigint      REFERENCES payments (id) ON DELETE RESTRICT,
    at                timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT membership_events_from_status_check CHECK (from_status IN ('active', 'grace', 'expired')),
    CONSTRAINT membership_events_to_status_check CHECK (to_status IN ('active', 'grace', 'expired')),
    CONSTRAINT membership_events_cause_check CHECK (cause IN ('payment', 'sweep', 'staff')),
    CONSTRAINT membership_events_payment_check CHECK ((cause = 'payment') = (payment_id IS NOT NULL))
);
CREATE INDEX membership_events_membership_idx ON membership_events (membership_id, id);
CREATE INDEX membership_events_payment_idx ON membership_events (payment_id) WHERE payment_id IS NOT NULL;

-- Idempotency-Key records for staff POSTs. The row is inserted at the start of the effect's
-- transaction (a concurrent request with the same key waits on the unique index, then replays)
-- and the response is written before commit, so effect and saved response commit together.
CREATE TABLE idempotency_keys (
    staff_id        bigint      NOT NULL REFERENCES staff_accounts (id) ON DELETE CASCADE,
    key             text        NOT NULL,
    method          text        NOT NULL,
    path            text        NOT NULL,
    body_sha256     bytea       NOT NULL,
    response_status smallint,
    response_body   bytea,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (staff_id, key),
    CONSTRAINT idempotency_keys_key_check CHECK (char_length(key) BETWEEN 1 AND 255)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);


-- statement
-- subgate schema, version 20: Telegram's `subscription` updates, and a limit on guessing promo
-- codes through the bot.

-- Every `subscription` update (Bot API BotSubscriptionUpdated: a buyer cancelled or re-enabled
-- a Stars subscription, or its renewal charge failed), by Telegram's update_id: what it said,
-- the subscription it was tied to and what came of it. A redelivered update finds its row and
-- changes nothing (as bot_updates: Telegram re-delivers within a day and may reuse ids after a
-- quiet week, so a row older than a day is taken over). One that could not be applied (an
-- unknown payload, buyer or state; a re-enable of a subscription staff or subgate cancelled)
-- is `review`, with its `note`, for staff; those rows are never purged.
CREATE TABLE star_subscription_updates (
    update_id        bigint      PRIMARY KEY,
    -- As Telegram sent them; null when missing from an odd update.
    telegram_user_id bigint,
    invoice_payload  text,
    state            text,
    subscription_id  bigint      REFERENCES star_subscriptions (id) ON DELETE SET NULL,
    outcome          text        NOT NULL,
    note             text,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT star_subscription_updates_outcome_check
        CHECK (outcome IN ('applied', 'unchanged', 'review')),
    CONSTRAINT star_subscription_updates_note_check
        CHECK ((outcome = 'review') = (note IS NOT NULL))
);
CREATE INDEX star_subscription_updates_review_idx ON star_subscription_updates (created_at)
    WHERE outcome = 'review';

-- Wrong promo codes given to the bot (`/code`, a deep link with a code), counted in fixed
-- windows: one row per Telegram user (`who` > 0) and one for everyone (`who` = 0). A code
-- attempt locks its user's row and then the everyone row, in that order, for the rest of its
-- transaction, so concurrent attempts are counted one after another and never past a limit.
CREATE TABLE bot_code_guesses (
    who          bigint      PRIMARY KEY,
    window_start timestamptz NOT NULL,
    wrong        integer     NOT NULL DEFAULT 0,
    CONSTRAINT bot_code_guesses_who_check CHECK (who >= 0),
    CONSTRAINT bot_code_guesses_wrong_check CHECK (wrong >= 0)
);


-- statement
-- subgate schema, version 2: Telegram Stars pre-checkout decisions.
-- Telegram may deliver the same pre_checkout_query twice (our answer was lost, a retry); the
-- decision is stored under the query id so a repeat gets the same answer and never extends a
-- hold. Rows are never purged: with no timestamps on Telegram updates, deduplication is the
-- replay defence.

CREATE TABLE pre_checkout_decisions (
    query_id         text        PRIMARY KEY,
    -- NULL when the payload named no order (or the order was deleted later).
    order_id         bigint      REFERENCES orders (id) ON DELETE SET NULL,
    order_reference  text        NOT NULL,
    telegram_user_id bigint      NOT NULL,
    ok               boolean     NOT NULL,
    -- What the buyer was shown when refused.
    error_message    text,
    reason           text,
    -- The order's hold when approved (NULL: no hold needed, e.g. an unlimited channel).
    hold_until       timestamptz,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pre_checkout_decisions_query_id_check CHECK (char_length(query_id) BETWEEN 1 AND 255),
    CONSTRAINT pre_checkout_decisions_reason_check CHECK (reason IN (
        'unknown_order', 'order_cancelled', 'already_paid', 'payer_mismatch',
        'currency_mismatch', 'amount_mismatch', 'channel_inactive', 'hold_expired', 'no_seat')),
    CONSTRAINT pre_checkout_decisions_ok_check CHECK (
        ok = (reason IS NULL) AND ok = (error_message IS NULL)),
    CONSTRAINT pre_checkout_decisions_hold_check CHECK (ok OR hold_until IS NULL)
);
CREATE INDEX pre_checkout_decisions_order_idx ON pre_checkout_decisions (order_id);


-- statement
-- subgate schema, version 3: Telegram effects through a transactional outbox.
-- A change that needs Telegram to act (grant, revoke, remind, refund, answer a join request)
-- inserts an `effects` row in its own transaction, so the intent commits exactly when the change
-- does. A worker claims due rows with FOR UPDATE SKIP LOCKED, performs the Bot API calls while
-- holding the row lock (no two workers perform one effect at once), and records the result in
-- the same transaction. Delivery is at least once; every effect is harmless when repeated.

CREATE TABLE effects (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text        NOT NULL,
    -- What the effect is about. SET NULL keeps the audit row when staff delete the record.
    membership_id   bigint      REFERENCES memberships (id) ON DELETE SET NULL,
    payment_id      bigint      REFERENCES payments (id) ON DELETE SET NULL,
    order_id        bigint      REFERENCES orders (id) ON DELETE SET NULL,
    -- The channel's telegram_chat_id (NULL for refunds, which concern no chat).
    chat_id         bigint,
    -- The Telegram user acted on or written to.
    user_id         bigint      NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}',
    -- pending: due at next_attempt_at; done; failed: the dead letter, retried only by staff.
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    -- Telegram's description or the transport failure; never contains the bot token.
    last_error      text,
    -- One effect per key, e.g. one reminder per (membership, expiry), one revoke per
    -- (membership, expiry), one refund per payment. NULL: no deduplication needed.
    dedupe_key      text,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    done_at         timestamptz,
    CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline')),
    CONSTRAINT effects_status_check CHECK (status IN ('pending', 'done', 'failed')),
    CONSTRAINT effects_done_at_check CHECK ((status = 'done') = (done_at IS NOT NULL)),
    CONSTRAINT effects_attempts_check CHECK (attempts >= 0),
    CONSTRAINT effects_chat_id_check CHECK (kind = 'refund' OR chat_id IS NOT NULL),
    CONSTRAINT effects_payment_check CHECK (kind <> 'refund' OR payment_id IS NOT NULL),
    CONSTRAINT effects_dedupe_key_key UNIQUE (dedupe_key)
);
-- The worker's queue: due pending rows, oldest due first.
CREATE INDEX effects_due_idx ON effects (next_attempt_at, id) WHERE status = 'pending';
-- GET /api/effects?status=…
CREATE INDEX effects_status_idx ON effects (status, id);
-- ON DELETE SET NULL of the three references.
CREATE INDEX effects_membership_idx ON effects (membership_id) WHERE membership_id IS NOT NULL;
CREATE INDEX effects_payment_idx ON effects (payment_id) WHERE payment_id IS NOT NULL;
CREATE INDEX effects_order_idx ON effects (order_id) WHERE order_id IS NOT NULL;

-- The channel's join link: createChatInviteLink(creates_join_request = true), made once by the
-- first grant and reused, so a shared link admits nobody: each join request is approved only
-- for a paying member.
ALTER TABLE channels ADD COLUMN invite_link text;

-- Where the reconcile of Stars transactions (getStarTransactions) left off. One row.
CREATE TABLE star_reconcile (
    singleton   boolean     PRIMARY KEY DEFAULT true,
    next_offset bigint      NOT NULL DEFAULT 0,
    last_run_at timestamptz,
    CONSTRAINT star_reconcile_singleton_check CHECK (singleton),
    CONSTRAINT star_reconcile_next_offset_check CHECK (next_offset >= 0)
);
INSERT INTO star_reconcile DEFAULT VALUES;


-- statement
-- subgate schema, version 4: effects are claimed with a lease, not a row lock held across calls.
-- A worker commits its claim (lease_until, lease_token + 1), reads what the effect needs on a
-- connection it returns at once, calls Telegram holding no transaction and no connection, and
-- records the result in a new short transaction only while lease_token is still its own. A
-- lease that ran out is claimed again (every effect is harmless when repeated); the older worker
-- then records nothing. Effects of one chat member (chat_id, user_id) are claimed one at a time,
-- in id order.

ALTER TABLE effects
    -- While in the future, a worker is performing the effect; NULL or past: free to claim.
    ADD COLUMN lease_until     timestamptz,
    -- Incremented by every claim: the token a worker must still see to record its result.
    ADD COLUMN lease_token     bigint      NOT NULL DEFAULT 0,
    -- The first failed attempt since the effect was created or last sent back by staff:
    -- transient failures are retried until it is 72 hours old, then dead-lettered.
    ADD COLUMN first_failed_at timestamptz,
    ADD CONSTRAINT effects_lease_token_check CHECK (lease_token >= 0);

-- The ordering check of a claim: is an earlier (or a leased) effect of this member pending?
CREATE INDEX effects_member_pending_idx ON effects (chat_id, user_id, id)
    WHERE status = 'pending' AND chat_id IS NOT NULL;

-- Reconcile keeps a Stars charge that was refunded outside subgate (its refund is listed by
-- getStarTransactions next to it) as a `refunded` payment that granted nothing.
ALTER TABLE payments DROP CONSTRAINT payments_reason_check;
ALTER TABLE payments ADD CONSTRAINT payments_reason_check CHECK (reason IN (
    'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
    'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive',
    'refunded_elsewhere'));


-- statement
-- subgate schema, version 5: buyers in the bot.
-- The bot sells by itself: it shows the catalogue, makes orders and invoices, sells Telegram
-- Stars subscriptions that renew every 30 days, and tells buyers what happened to a payment.

-- What the bot shows buyers, and whether a Stars channel is sold as a subscription. Telegram
-- offers subscriptions in Stars with a 30-day period only.
ALTER TABLE channels
    ADD COLUMN description text,
    ADD COLUMN recurring   boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT channels_description_check CHECK (char_length(description) <= 1000),
    ADD CONSTRAINT channels_recurring_check
        CHECK (NOT recurring OR (currency = 'XTR' AND billing_period_days = 30));

-- Orders the bot made for a buyer. Pressing buy twice never makes two pending orders for one
-- channel: a schema invariant for the bot's own orders, while staff may still make several by
-- hand (a second invoice for the same buyer is a staff decision).
ALTER TABLE orders ADD COLUMN via_bot boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX orders_one_pending_bot_order ON orders (subscriber_id, channel_id)
    WHERE status = 'pending' AND via_bot;

-- Conversation updates (commands, button presses) already handled, by Telegram's update_id,
-- with the Bot API call given back in the webhook reply. Telegram re-delivers an update on any
-- non-2xx answer or a lost one; the repeat gets the same reply and enqueues nothing. The row is
-- written in the transaction of the update's effects. Telegram gives up re-delivering within a
-- day and may reuse ids after a quiet week, so a row older than a day deduplicates nothing and
-- rows older than two days are deleted now and then.
CREATE TABLE bot_updates (
    update_id  bigint      PRIMARY KEY,
    reply      jsonb,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE INDEX bot_updates_created_idx ON bot_updates (created_at);

-- Telegram Stars subscriptions: made by the first payment of a subscription invoice
-- (createInvoiceLink with subscription_period); each renewal charge carries the same payload
-- (the order reference) and a new charge id. `charge_id` is the first payment's
-- telegram_payment_charge_id, the key editUserStarSubscription needs.
CREATE TABLE star_subscriptions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id         bigint      NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    subscriber_id    integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    channel_id       integer     NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    charge_id        text        NOT NULL,
    -- Telegram's subscription_expiration_date of the latest charge: the next renewal.
    expires_at       timestamptz NOT NULL,
    status           text        NOT NULL DEFAULT 'active',
    cancelled_by     text,
    cancelled_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT star_subscriptions_order_key UNIQUE (order_id),
    CONSTRAINT star_subscriptions_status_check CHECK (status IN ('active', 'cancelled')),
    CONSTRAINT star_subscriptions_cancelled_check CHECK (
        (status = 'cancelled') = (cancelled_at IS NOT NULL)
        AND (status = 'cancelled') = (cancelled_by IS NOT NULL)),
    CONSTRAINT star_subscriptions_cancelled_by_check CHECK (cancelled_by IN ('staff', 'buyer'))
);
CREATE INDEX star_subscriptions_pair_idx ON star_subscriptions (subscriber_id, channel_id);
CREATE INDEX star_subscriptions_channel_idx ON star_subscriptions (channel_id);

-- A renewal charge is one more applied payment of its (paid) order; every other order is still
-- paid by at most one payment. `subscription_expires_at` keeps Telegram's
-- subscription_expiration_date of a subscription charge.
ALTER TABLE payments
    ADD COLUMN renewal boolean NOT NULL DEFAULT false,
    ADD COLUMN subscription_expires_at timestamptz,
    DROP CONSTRAINT payments_reason_check,
    ADD CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive',
        'refunded_elsewhere', 'unknown_subscription', 'subscription_cancelled'));
DROP INDEX payments_one_applied_per_order;
CREATE UNIQUE INDEX payments_one_applied_per_order ON payments (order_id)
    WHERE outcome = 'applied' AND NOT renewal;

-- The bot's outgoing work goes through the same outbox: a message (with its buttons), an
-- order's invoice (sendInvoice, a subscription link, or a card payment link), and the
-- cancellation of a Stars subscription. None of them concerns a channel's chat: their
-- `chat_id` is NULL and `user_id` is the buyer (a private chat's id is the user's id).
ALTER TABLE effects
    DROP CONSTRAINT effects_kind_check,
    ADD CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel')),
    DROP CONSTRAINT effects_chat_id_check,
    ADD CONSTRAINT effects_chat_id_check CHECK (
        kind IN ('refund', 'bot_message', 'invoice', 'subscription_cancel') OR chat_id IS NOT NULL);


-- statement
-- subgate schema, version 7: superseded bot orders, and when a hold was granted.
--
-- The bot never cancels an order that may still be paid (an approved pre-checkout, a card link
-- sent): when the buyer presses buy again and that order cannot be reused, it is superseded
-- instead. A superseded order stays `pending`, so a late payment of it is judged by the seat
-- rules like any other (applied, or `hold_expired`); the bot never reuses it, and it makes room
-- for the buyer's next order under the one-pending-bot-order index.
ALTER TABLE orders
    ADD COLUMN superseded_at timestamptz,
    -- When this order's own seat hold was granted (NULL: never held, or held before this
    -- migration). Kept when the hold is cleared, so the holds a buyer took stay countable.
    ADD COLUMN held_at timestamptz,
    ADD CONSTRAINT orders_superseded_check CHECK (superseded_at IS NULL OR via_bot);

DROP INDEX orders_one_pending_bot_order;
CREATE UNIQUE INDEX orders_one_pending_bot_order ON orders (subscriber_id, channel_id)
    WHERE status = 'pending' AND via_bot AND superseded_at IS NULL;

-- The hold rules (a cooldown after an unpaid hold, a daily cap) read a buyer's holds of one
-- channel by when they were granted.
CREATE INDEX orders_pair_holds_idx ON orders (subscriber_id, channel_id, held_at)
    WHERE held_at IS NOT NULL;

-- A pre-checkout refused by the buyer's hold rules (a cooldown after an unpaid hold ran out, or
-- the daily number of holds reached). Never a payment reason: a payment is judged by the seat
-- rules alone.
ALTER TABLE pre_checkout_decisions
    DROP CONSTRAINT pre_checkout_decisions_reason_check,
    ADD CONSTRAINT pre_checkout_decisions_reason_check CHECK (reason IN (
        'unknown_order', 'order_cancelled', 'already_paid', 'payer_mismatch',
        'currency_mismatch', 'amount_mismatch', 'channel_inactive', 'hold_expired', 'no_seat',
        'hold_limited'));


-- statement
-- subgate schema, version 9: offers — plans, lifetime access, trials, promo codes, bundles.
--
-- A channel is sold through plans. A plan covers one channel or several (a bundle), is paid or
-- a free trial, and lasts `period_days` or for life (NULL; the membership's `expires_at`
-- becomes 'infinity', which the sweep's `expires_at <= now` never reaches). Every channel has
-- one default plan (`default_of`), made here for the channels that exist: it carries the
-- channel's own price fields, which the channel keeps showing, and an order made the old way
-- (`{"subscriber_id", "channel_id"}`) buys it.

CREATE TABLE plans (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    title       text        NOT NULL,
    description text,
    kind        text        NOT NULL DEFAULT 'paid',
    price_minor bigint      NOT NULL,
    currency    text        NOT NULL,
    -- NULL: lifetime access.
    period_days integer,
    recurring   boolean     NOT NULL DEFAULT false,
    active      boolean     NOT NULL DEFAULT true,
    position    integer     NOT NULL DEFAULT 0,
    -- The channel this plan is the default plan of (NULL: not a default plan). A default plan
    -- sells exactly that channel, is paid and has a period, like the channel's own fields.
    default_of  integer     REFERENCES channels (id) ON DELETE RESTRICT,
    created_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT plans_default_of_key UNIQUE (default_of),
    CONSTRAINT plans_title_check CHECK (char_length(title) BETWEEN 1 AND 255),
    CONSTRAINT plans_description_check CHECK (char_length(description) <= 1000),
    CONSTRAINT plans_kind_check CHECK (kind IN ('paid', 'trial')),
    CONSTRAINT plans_price_minor_check CHECK (
        (kind = 'paid' AND price_minor > 0) OR (kind = 'trial' AND price_minor = 0)),
    CONSTRAINT plans_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT plans_period_days_check CHECK (
        period_days IS NULL OR period_days BETWEEN 1 AND 3660),
    CONSTRAINT plans_trial_period_check CHECK (
        kind <> 'trial' OR period_days BETWEEN 1 AND 90),
    CONSTRAINT plans_recurring_check CHECK (
        NOT recurring OR (kind = 'paid' AND currency = 'XTR' AND period_days = 30)),
    CONSTRAINT plans_default_check CHECK (
        default_of IS NULL OR (kind = 'paid' AND period_days IS NOT NULL))
);

-- The channels of a plan, in the plan's own order (`position` 0 is the plan's first channel,
-- the `channel_id` of its orders). More than one row: a bundle. 1..10 rows, checked by the code
-- that writes them.
CREATE TABLE plan_channels (
    plan_id    bigint   NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    channel_id integer  NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    position   smallint NOT NULL,
    PRIMARY KEY (plan_id, channel_id),
    CONSTRAINT plan_channels_position_key UNIQUE (plan_id, position),
    CONSTRAINT plan_channels_position_check CHECK (position BETWEEN 0 AND 9)
);
CREATE INDEX plan_channels_channel_idx ON plan_channels (channel_id, plan_id);

-- Every existing channel's default plan, with its terms.
INSERT INTO plans (title, kind, price_minor, currency, period_days, recurring, active, position,
                   default_of, created_at, updated_at)
SELECT title, 'paid', price_minor, currency, billing_period_days, recurring, true, 0, id,
       created_at, updated_at
FROM channels ORDER BY id;
INSERT INTO plan_channels (plan_id, channel_id, position)
SELECT id, default_of, 0 FROM plans WHERE default_of IS NOT NULL;

-- Promo codes. `code` is kept upper-case (matched case-insensitively by upper-casing the
-- buyer's text). `plan_ids` NULL: every paid plan. A code's uses are its paid orders plus the
-- pending orders that hold one (`orders.promo_held_until` in the future); every decision about
-- a use is taken under a lock on the code's row.
CREATE TABLE promo_codes (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code                text        NOT NULL,
    percent_off         integer,
    amount_off_minor    bigint,
    currency            text,
    plan_ids            bigint[],
    max_redemptions     integer,
    per_buyer_limit     integer     NOT NULL DEFAULT 1,
    expires_at          timestamptz,
    first_purchase_only boolean     NOT NULL DEFAULT false,
    active              boolean     NOT NULL DEFAULT true,
    created_at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT promo_codes_code_key UNIQUE (code),
    CONSTRAINT promo_codes_code_check CHECK (code ~ '^[A-Z0-9_-]{3,32}$'),
    CONSTRAINT promo_codes_discount_check CHECK ((percent_off IS NULL) <> (amount_off_minor IS NULL)),
    CONSTRAINT promo_codes_percent_off_check CHECK (percent_off BETWEEN 1 AND 100),
    CONSTRAINT promo_codes_amount_off_minor_check CHECK (amount_off_minor > 0),
    CONSTRAINT promo_codes_currency_check CHECK (
        (amount_off_minor IS NULL) = (currency IS NULL) AND currency ~ '^[A-Z]{3}$'),
    CONSTRAINT promo_codes_plan_ids_check CHECK (
        plan_ids IS NULL OR cardinality(plan_ids) BETWEEN 1 AND 100),
    CONSTRAINT promo_codes_max_redemptions_check CHECK (max_redemptions >= 1),
    CONSTRAINT promo_codes_per_buyer_limit_check CHECK (per_buyer_limit >= 1)
);

-- Orders buy a plan. `amount_minor` = `list_price_minor` - `discount_minor`, fixed when the order
-- is made; a 100 % code makes a free order (amount 0, granted at once) and a trial's order is
-- free too. `channel_id` stays: the plan's first channel (the pair of the order's first lock,
-- and where every existing query looks). Existing orders bought their channel's default plan.
ALTER TABLE orders
    ADD COLUMN plan_id          bigint REFERENCES plans (id) ON DELETE RESTRICT,
    ADD COLUMN list_price_minor bigint,
    ADD COLUMN discount_minor   bigint NOT NULL DEFAULT 0,
    ADD COLUMN promo_code_id    bigint REFERENCES promo_codes (id) ON DELETE RESTRICT,
    -- Until when this pending order holds a use of its promo code (like a seat hold; re-taken
    -- by a checkout or pre-checkout while the code has room).
    ADD COLUMN promo_held_until timestamptz;
UPDATE orders o SET plan_id = p.id, list_price_minor = o.amount_minor
FROM plans p WHERE p.default_of = o.channel_id;
ALTER TABLE orders
    ALTER COLUMN plan_id SET NOT NULL,
    ALTER COLUMN list_price_minor SET NOT NULL,
    DROP CONSTRAINT orders_amount_minor_check,
    ADD CONSTRAINT orders_amount_minor_check CHECK (amount_minor >= 0),
    ADD CONSTRAINT orders_discount_check CHECK (
        discount_minor >= 0 AND amount_minor = list_price_minor - discount_minor
        AND (promo_code_id IS NOT NULL OR discount_minor = 0)),
    ADD CONSTRAINT orders_promo_hold_check CHECK (
        promo_held_until IS NULL OR promo_code_id IS NOT NULL);
CREATE INDEX orders_plan_idx ON orders (plan_id);
-- A code's uses, and a buyer's uses of it.
CREATE INDEX orders_promo_code_idx ON orders (promo_code_id, subscriber_id)
    WHERE promo_code_id IS NOT NULL;

-- The bot's one pending order is now per plan: a buyer may have a card order of one plan and a
-- Stars order of another of the same channel pending at once.
DROP INDEX orders_one_pending_bot_order;
CREATE UNIQUE INDEX orders_one_pending_bot_order ON orders (subscriber_id, plan_id)
    WHERE status = 'pending' AND via_bot AND superseded_at IS NULL;

-- Trials used: once per buyer and channel, ever (a trial bundle uses one per channel). Written
-- under the pair's lock with the trial's grant; the primary key makes a second trial impossible
-- even for a caller that forgot the lock.
CREATE TABLE trial_uses (
    subscriber_id integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    channel_id    integer     NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    order_id      bigint      NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (subscriber_id, channel_id)
);
CREATE INDEX trial_uses_order_idx ON trial_uses (order_id);

-- A code a buyer gave the bot with `/code` (or a deep link), applied to their next order for
-- an hour.
CREATE TABLE bot_promo_codes (
    subscriber_id integer     PRIMARY KEY REFERENCES subscribers (id) ON DELETE CASCADE,
    promo_code_id bigint      NOT NULL REFERENCES promo_codes (id) ON DELETE CASCADE,
    until         timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp()
);

-- Lifetime access is `expires_at = 'infinity'` (what the code reads as "never"); '-infinity'
-- is no expiry.
ALTER TABLE memberships
    ADD CONSTRAINT memberships_expires_at_check CHECK (expires_at <> '-infinity');

-- Grants without a payment: a trial (`trial`), and a free order of a 100 % code (`promo`).
ALTER TABLE membership_events
    DROP CONSTRAINT membership_events_cause_check,
    ADD CONSTRAINT membership_events_cause_check
        CHECK (cause IN ('payment', 'sweep', 'staff', 'trial', 'promo'));

-- A payment whose order's promo use lapsed while the code filled up is kept for review, never
-- applied past the limit (`promo_exhausted`); one that would buy nothing because the buyer
-- already has lifetime access is `already_lifetime` (refunded for Stars, like a double payment).
ALTER TABLE payments
    DROP CONSTRAINT payments_reason_check,
    ADD CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive',
        'refunded_elsewhere', 'unknown_subscription', 'subscription_cancelled',
        'promo_exhausted', 'already_lifetime'));
ALTER TABLE pre_checkout_decisions
    DROP CONSTRAINT pre_checkout_decisions_reason_check,
    ADD CONSTRAINT pre_checkout_decisions_reason_check CHECK (reason IN (
        'unknown_order', 'order_cancelled', 'already_paid', 'payer_mismatch',
        'currency_mismatch', 'amount_mismatch', 'channel_inactive', 'hold_expired', 'no_seat',
        'hold_limited', 'promo_exhausted', 'already_lifetime'));
ALTER TABLE star_subscriptions
    DROP CONSTRAINT star_subscriptions_refused_reason_check,
    ADD CONSTRAINT star_subscriptions_refused_reason_check CHECK (refused_reason IN (
        'order_cancelled', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'already_paid', 'hold_expired', 'no_seat', 'channel_inactive', 'promo_exhausted',
        'already_lifetime'));

-- Every channel has its default plan, whoever writes the channel: made with the channel, kept
-- equal to the channel's price fields when they change, and deleted with the channel (an order
-- of it makes that delete fail like the channel's own orders do).
CREATE FUNCTION channels_default_plan() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        WITH p AS (
            INSERT INTO plans (title, kind, price_minor, currency, period_days, recurring,
                               default_of)
            VALUES (NEW.title, 'paid', NEW.price_minor, NEW.currency, NEW.billing_period_days,
                    NEW.recurring, NEW.id)
            RETURNING id
        )
        INSERT INTO plan_channels (plan_id, channel_id, position) SELECT id, NEW.id, 0 FROM p;
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE plans
        SET price_minor = NEW.price_minor, currency = NEW.currency,
            period_days = NEW.billing_period_days, recurring = NEW.recurring,
            updated_at = statement_timestamp()
        WHERE default_of = NEW.id
          AND (price_minor, currency, period_days, recurring) IS DISTINCT FROM
              (NEW.price_minor, NEW.currency, NEW.billing_period_days, NEW.recurring);
        RETURN NEW;
    ELSE
        DELETE FROM plans WHERE default_of = OLD.id;
        RETURN OLD;
    END IF;
END
$$;
CREATE TRIGGER channels_default_plan_insert AFTER INSERT ON channels
    FOR EACH ROW EXECUTE FUNCTION channels_default_plan();
CREATE TRIGGER channels_default_plan_update
    AFTER UPDATE OF price_minor, currency, billing_period_days, recurring ON channels
    FOR EACH ROW EXECUTE FUNCTION channels_default_plan();
CREATE TRIGGER channels_default_plan_delete BEFORE DELETE ON channels
    FOR EACH ROW EXECUTE FUNCTION channels_default_plan();

-- An order that names no plan (made the old way, by channel) buys its channel's default plan
-- at its amount.
CREATE FUNCTION orders_default_plan() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.plan_id IS NULL THEN
        SELECT id INTO NEW.plan_id FROM plans WHERE default_of = NEW.channel_id;
    END IF;
    IF NEW.list_price_minor IS NULL THEN
        NEW.list_price_minor := NEW.amount_minor + NEW.discount_minor;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER orders_default_plan BEFORE INSERT ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_default_plan();


-- statement
ANALYZE effects, messages

-- statement
BEGIN

-- statement
COMMIT

-- statement
CREATE TABLE schema_migrations (
                     version    integer PRIMARY KEY,
                     name       text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now()
                 )

-- statement
DELETE FROM bot_promo_codes WHERE subscriber_id = $1

-- statement
DELETE FROM channel_exemptions WHERE channel_id = $1 AND telegram_user_id = $2

-- statement
DELETE FROM channels WHERE id = $1

-- statement
DELETE FROM chat_bans WHERE chat_id = $1 AND user_id = $2

-- statement
DELETE FROM idempotency_keys WHERE created_at < statement_timestamp() - interval '24 hours'

-- statement
DELETE FROM idempotency_keys WHERE staff_id = $1 AND key = $2
     AND created_at < statement_timestamp() - interval '24 hours'

-- statement
DELETE FROM orders WHERE id = $1

-- statement
DELETE FROM plan_channels WHERE plan_id = $1

-- statement
DELETE FROM plan_referral_rates WHERE plan_id = $1

-- statement
DELETE FROM plans WHERE id = $1

-- statement
DELETE FROM staff_accounts WHERE id = $1

-- statement
DELETE FROM star_affiliate_fees WHERE charge_id = $1 AND amount_minor = $2

-- statement
DELETE FROM subscribers WHERE id = $1

-- statement
DELETE FROM webhook_endpoints WHERE id = $1

-- statement
INSERT INTO affiliates (name, subscriber_id, code) VALUES ($1, $2, $3)
     ON CONFLICT ON CONSTRAINT affiliates_code_key DO NOTHING
     RETURNING id, name, subscriber_id, code, active, created_at, updated_at

-- statement
INSERT INTO audit_log
     (actor, staff_id, staff_email, action, target_type, target_id, before, after, request_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)

-- statement
INSERT INTO audits (channel_id, fix, counts, rows)
     VALUES ($1, $2, $3, $4) RETURNING id

-- statement
INSERT INTO bot_code_guesses AS g (who, window_start)
     VALUES ($1, statement_timestamp()), (0, statement_timestamp())
     ON CONFLICT (who) DO UPDATE
         SET window_start = CASE WHEN (g.window_start + make_interval(secs => CASE WHEN g.who = 0 THEN $3::float8 ELSE $2::float8 END)) <= statement_timestamp() THEN statement_timestamp() ELSE g.window_start END,
             wrong = CASE WHEN (g.window_start + make_interval(secs => CASE WHEN g.who = 0 THEN $3::float8 ELSE $2::float8 END)) <= statement_timestamp() THEN 0 ELSE g.wrong END
     RETURNING who, wrong,
               ceil(extract(epoch FROM (g.window_start + make_interval(secs => CASE WHEN g.who = 0 THEN $3::float8 ELSE $2::float8 END)) - statement_timestamp()))::bigint AS left_secs

-- statement
INSERT INTO bot_promo_codes (subscriber_id, promo_code_id, until)
     VALUES ($1, $2, statement_timestamp() + interval '1 hour')
     ON CONFLICT (subscriber_id) DO UPDATE
         SET promo_code_id = EXCLUDED.promo_code_id, until = EXCLUDED.until,
             created_at = statement_timestamp()

-- statement
INSERT INTO broadcasts (status, texts, segment, button, send_at,
                                                  paid_max_stars, recipients)
     VALUES ('scheduled', $1, $2, $3, coalesce($4, statement_timestamp()), $5, $6)
     RETURNING id, send_at <= statement_timestamp() AS due

-- statement
INSERT INTO channel_exemptions (channel_id, telegram_user_id, note)
     VALUES ($1, $2, $3)
     RETURNING channel_id, telegram_user_id, note, created_at

-- statement
INSERT INTO channels (telegram_chat_id, title, price_minor, currency,
                             billing_period_days, grace_period_days, seat_limit, active,
                             description, recurring, translations, door)
                         VALUES ($1, $2, $3, $4, $5, COALESCE($6, 0), $7, COALESCE($8, true),
                                 $9, COALESCE($10, false), COALESCE($11::jsonb, '{}'::jsonb),
                                 COALESCE($12, 'bot'))
                         RETURNING id, telegram_chat_id, title, price_minor, currency, billing_period_days, grace_period_days, seat_limit, active, created_at, updated_at, description, recurring, telegram_status, translations, door

-- statement
INSERT INTO chat_bans (chat_id, user_id) VALUES ($1, $2)
     ON CONFLICT (chat_id, user_id) DO NOTHING

-- statement
INSERT INTO commission_lines
         (affiliate_id, payment_id, subscriber_id, kind, amount_minor, currency, percent,
          base_minor, payable_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (payment_id, (kind = 'reversal')) DO NOTHING
     RETURNING id

-- statement
INSERT INTO effects
         (kind, membership_id, chat_id, user_id, payload, dedupe_key)
     SELECT 'reminder', d.id, d.telegram_chat_id, d.telegram_user_id, jsonb_build_object('expires_at', CASE WHEN isfinite(d.expires_at) THEN to_char((d.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ELSE (d.expires_at)::text END), d.key
     FROM (
         SELECT m.id, c.telegram_chat_id, s.telegram_user_id, m.expires_at, 'reminder:' || (m.id) || ':' || (extract(epoch FROM (m.expires_at)) * 1000000)::bigint AS key
         FROM memberships m
         JOIN subscribers s ON s.id = m.subscriber_id
         JOIN channels c ON c.id = m.channel_id
         WHERE m.status = 'active' AND c.active
           AND m.expires_at > statement_timestamp()
           AND m.expires_at <= statement_timestamp() + make_interval(days => $1)
     ) AS d
     WHERE NOT EXISTS (SELECT 1 FROM effects e WHERE e.dedupe_key = d.key)
     LIMIT $2
     ON CONFLICT (dedupe_key) DO NOTHING

-- statement
INSERT INTO effects
         (kind, membership_id, payment_id, chat_id, user_id, payload, dedupe_key)
     SELECT $2, m.id, $3, c.telegram_chat_id, s.telegram_user_id, jsonb_build_object('expires_at', CASE WHEN isfinite($4::timestamptz) THEN to_char(($4::timestamptz) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ELSE ($4::timestamptz)::text END), ($5::text) || ':' || (m.id) || ':ev' || ($6::bigint)
     FROM memberships m
     JOIN subscribers s ON s.id = m.subscriber_id
     JOIN channels c ON c.id = m.channel_id
     WHERE m.id = $1
     FOR KEY SHARE OF c, s

-- statement
INSERT INTO effects
         (kind, membership_id, payment_id, order_id, chat_id, user_id, payload, dedupe_key)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (dedupe_key) DO NOTHING
     RETURNING id

-- statement
INSERT INTO effects
         (kind, payment_id, order_id, user_id, payload, dedupe_key)
     SELECT 'refund', d.id, d.order_id, d.user_id,
            jsonb_build_object('charge_id', d.external_id), d.key
     FROM (
         SELECT p.id, p.order_id, p.external_id, 'refund:' || p.id AS key,
                COALESCE(CASE WHEN p.payer ~ '^[0-9]{1,18}$' THEN p.payer::bigint END,
                         s.telegram_user_id) AS user_id
         FROM payments p LEFT JOIN subscribers s ON s.id = p.subscriber_id
         WHERE p.outcome = 'refund_pending' AND p.gateway = 'telegram_stars'
     ) AS d
     WHERE d.user_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.dedupe_key = d.key)
     LIMIT $1
     ON CONFLICT (dedupe_key) DO NOTHING

-- statement
INSERT INTO gateway_checks (order_id, gateway, next_check_at)
     VALUES ($1, $2, statement_timestamp() + make_interval(secs => $3))
     ON CONFLICT (order_id) DO NOTHING

-- statement
INSERT INTO idempotency_keys (staff_id, key, method, path, body_sha256)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (staff_id, key) DO NOTHING

-- statement
INSERT INTO membership_events
         (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause,
          payment_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     RETURNING id

-- statement
INSERT INTO monobank_invoices AS m
         (invoice_id, order_id, reference, amount_minor, page_url, handed_out, valid_until,
          chase, next_check_at)
     VALUES ($1, $2, $3, $4, $5, $6, statement_timestamp() + make_interval(secs => $7),
             CASE WHEN $6 THEN 'chasing' ELSE 'settled' END,
             statement_timestamp() + make_interval(secs => $8))
     ON CONFLICT (invoice_id) DO UPDATE SET
         order_id = EXCLUDED.order_id, page_url = EXCLUDED.page_url,
         handed_out = EXCLUDED.handed_out, valid_until = EXCLUDED.valid_until,
         chase = CASE WHEN EXCLUDED.handed_out AND m.status IN ('created', 'processing', 'hold')
                      THEN 'chasing' ELSE m.chase END,
         next_check_at = EXCLUDED.next_check_at, updated_at = statement_timestamp()

-- statement
INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
     VALUES ($1, $2, $3, $4, $5) RETURNING id, reference, subscriber_id, channel_id, amount_minor, currency, status, hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id, list_price_minor, discount_minor, promo_code_id, promo_held_until, (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id) AS promo_code

-- statement
INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency, plan_id,
                             list_price_minor, discount_minor, promo_code_id, promo_held_until,
                             via_bot)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
                 CASE WHEN $9::bigint IS NULL THEN NULL
                      ELSE statement_timestamp() + make_interval(secs => $10::float8) END,
                 $11) RETURNING id, reference, subscriber_id, channel_id, amount_minor, currency, status, hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id, list_price_minor, discount_minor, promo_code_id, promo_held_until, (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id) AS promo_code

-- statement
INSERT INTO plan_channels (plan_id, channel_id, position)
     SELECT $1, c.id, (c.n - 1)::smallint FROM unnest($2::integer[]) WITH ORDINALITY AS c (id, n)

-- statement
INSERT INTO plan_referral_rates (plan_id, first_percent, renewal_percent)
     VALUES ($1, $2, $3)
     ON CONFLICT (plan_id) DO UPDATE
         SET first_percent = EXCLUDED.first_percent,
             renewal_percent = EXCLUDED.renewal_percent,
             updated_at = statement_timestamp()
     RETURNING first_percent, renewal_percent

-- statement
INSERT INTO plans (title, description, kind, price_minor, currency,
                                             period_days, recurring, active, position,
                                             translations, crypto_prices)
     VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8, true), COALESCE($9, 0),
             COALESCE($10::jsonb, '{}'::jsonb), $11)
     RETURNING id

-- statement
INSERT INTO pre_checkout_decisions
         (query_id, order_id, order_reference, telegram_user_id, ok, error_message, reason,
          hold_until)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (query_id) DO NOTHING
     RETURNING pg_current_xact_id()::text AS xact

-- statement
INSERT INTO promo_codes (code, percent_off, plan_ids, max_redemptions,
         per_buyer_limit, expires_at, first_purchase_only, subscriber_id)
     VALUES ($1 || '-' || upper(left(replace(gen_random_uuid()::text, '-', ''), 10)), $2, $3, 1,
             1, statement_timestamp() + make_interval(days => $4), false, $5)
     RETURNING id, code

-- statement
INSERT INTO schema_migrations (version, name) VALUES ($1, $2)

-- statement
INSERT INTO staff_accounts (email, password_hash, role)
     VALUES ($1, $2, $3)
     RETURNING id, email, role, disabled, created_at, updated_at

-- statement
INSERT INTO staff_accounts (email, password_hash, role)
     VALUES ($1, $2, $3) ON CONFLICT (email) DO NOTHING
     RETURNING id, email, role, disabled, created_at, updated_at

-- statement
INSERT INTO staff_refunds (payment_id, reason, staff_id, staff_email)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (payment_id) DO NOTHING
     RETURNING payment_id

-- statement
INSERT INTO star_affiliate_fees (charge_id, amount_minor)
     SELECT * FROM unnest($1::text[], $2::bigint[])
     ON CONFLICT (charge_id) DO UPDATE SET amount_minor = EXCLUDED.amount_minor
     WHERE star_affiliate_fees.amount_minor <> EXCLUDED.amount_minor

-- statement
INSERT INTO star_subscription_updates AS u
         (update_id, telegram_user_id, invoice_payload, state, subscription_id, outcome, note)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (update_id) DO UPDATE
         SET telegram_user_id = EXCLUDED.telegram_user_id,
             invoice_payload = EXCLUDED.invoice_payload, state = EXCLUDED.state,
             subscription_id = EXCLUDED.subscription_id, outcome = EXCLUDED.outcome,
             note = EXCLUDED.note, created_at = statement_timestamp()
         WHERE u.created_at < statement_timestamp() - interval '1 day'

-- statement
INSERT INTO star_subscriptions (order_id, subscriber_id, channel_id, charge_id, expires_at)
     SELECT o.id, o.subscriber_id, o.channel_id, $2,
            COALESCE($3, LEAST($5::timestamptz, statement_timestamp())
                         + make_interval(secs => $4))
     FROM orders o WHERE o.id = $1
     RETURNING id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, cancelled_at, applied, refused_reason, created_at, updated_at

-- statement
INSERT INTO star_subscriptions (order_id, subscriber_id, channel_id, charge_id, expires_at,
                                     status, cancelled_by, cancelled_at, applied, refused_reason)
     SELECT o.id, o.subscriber_id, o.channel_id, $2,
            COALESCE($3, LEAST($5::timestamptz, statement_timestamp())
                         + make_interval(secs => $4)),
            $6, $7, statement_timestamp(), false, $8
     FROM orders o WHERE o.id = $1
     RETURNING id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, cancelled_at, applied, refused_reason, created_at, updated_at

-- statement
INSERT INTO stats_member_days (day, channel_id, new, renewed, expired, delta,
                               trials_started, trials_converted)
SELECT * FROM (
    SELECT day, channel_id, sum(new)::bigint AS new, sum(renewed)::bigint AS renewed,
           sum(expired)::bigint AS expired, sum(delta)::bigint AS delta,
           sum(trials)::bigint AS trials_started, sum(conversions)::bigint AS trials_converted
    FROM (
        SELECT (e.at AT TIME ZONE 'UTC')::date AS day, m.channel_id,
               count(*) FILTER (WHERE e.from_status IS NULL) AS new,
               count(*) FILTER (WHERE e.cause = 'payment' AND e.from_status IS NOT NULL)
                   AS renewed,
               count(*) FILTER (WHERE e.to_status = 'expired'
                                  AND e.from_status IS DISTINCT FROM 'expired') AS expired,
               sum((CASE WHEN e.to_status <> 'expired' THEN 1 ELSE 0 END
                    - CASE WHEN e.from_status IS NOT NULL AND e.from_status <> 'expired' THEN 1 ELSE 0 END))
                   AS delta,
               0 AS trials, 0 AS conversions
        FROM membership_events e JOIN memberships m ON m.id = e.membership_id
        WHERE e.at >= ((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')
          AND e.at < (((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')
        GROUP BY 1, 2
        UNION ALL
        SELECT (created_at AT TIME ZONE 'UTC')::date, channel_id, 0, 0, 0, 0, count(*), 0
        FROM trial_uses
        WHERE created_at >= ((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')
          AND created_at < (((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')
        GROUP BY 1, 2
        UNION ALL
        SELECT (p.paid_at AT TIME ZONE 'UTC')::date, p.channel_id, 0, 0, 0, 0, 0, count(*)
        FROM payments p
        JOIN trial_uses t ON t.subscriber_id = p.subscriber_id
                         AND t.channel_id = p.channel_id AND t.created_at < p.paid_at
        WHERE p.paid_at >= ((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')
          AND p.paid_at < (((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')
          AND p.outcome = 'applied' AND p.amount_minor > 0
          AND NOT EXISTS (
              SELECT 1 FROM payments q
              WHERE q.subscriber_id = p.subscriber_id AND q.channel_id = p.channel_id
                AND q.outcome = 'applied' AND q.amount_minor > 0
                AND q.paid_at > t.created_at
                AND (q.paid_at, q.id) < (p.paid_at, p.id))
        GROUP BY 1, 2
    ) x
    GROUP BY day, channel_id
) m WHERE day = ANY($1)


-- statement
INSERT INTO stats_revenue_days (day, currency, gross, refunded, affiliate_fees, payments)
SELECT * FROM (
    SELECT (paid_at AT TIME ZONE 'UTC')::date AS day, currency,
           sum(amount_minor) AS gross,
           coalesce(sum(amount_minor) FILTER (WHERE outcome IN ('refunded', 'disputed')), 0)
               AS refunded,
           coalesce(sum(affiliate_fee_minor)
                    FILTER (WHERE outcome NOT IN ('refunded', 'disputed')), 0) AS affiliate_fees,
           count(*) AS payments
    FROM payments
    WHERE paid_at >= ((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')
      AND paid_at < (((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')
      AND outcome IN ('applied', 'refund_pending', 'refunded', 'refund_failed', 'disputed')
    GROUP BY 1, 2
) r WHERE day = ANY($1)


-- statement
INSERT INTO stats_rolled_days (day) SELECT unnest($1::date[])
     ON CONFLICT (day) DO UPDATE SET rolled_at = statement_timestamp()

-- statement
INSERT INTO subscribers (telegram_user_id, username, display_name, language)
                         VALUES ($1, $2, $3, $4) RETURNING id, telegram_user_id, username, display_name, language, marketing_opt_out, reachable, created_at, updated_at

-- statement
INSERT INTO subscribers (telegram_user_id, username, display_name, language)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (telegram_user_id) DO UPDATE
         SET username = EXCLUDED.username, display_name = EXCLUDED.display_name,
             language = coalesce(subscribers.language, EXCLUDED.language),
             updated_at = statement_timestamp()
         WHERE (subscribers.username, subscribers.display_name)
               IS DISTINCT FROM (EXCLUDED.username, EXCLUDED.display_name)
            OR (subscribers.language IS NULL AND EXCLUDED.language IS NOT NULL)
     RETURNING id

-- statement
INSERT INTO trial_uses (subscriber_id, channel_id, order_id)
     SELECT $1, c, $3 FROM unnest($2::integer[]) AS c

-- statement
INSERT INTO webhook_attempts (delivery_id, status_code, latency_ms, error)
     VALUES ($1, $2, $3, $4)

-- statement
INSERT INTO webhook_endpoints (url, description, event_types, secret)
     VALUES ($1, $2, $3, $4) RETURNING id, url, description, event_types, disabled_at IS NULL AS enabled, disabled_reason,
         failing_since,
         CASE WHEN previous_secret_until > statement_timestamp() THEN previous_secret_until END
             AS previous_secret_until,
         created_at, updated_at

-- statement
LISTEN subgate_effects

-- statement
RELEASE SAVEPOINT bot_promo_code

-- statement
RESET lock_timeout

-- statement
ROLLBACK

-- statement
SAVEPOINT bot_promo_code

-- statement
SELECT
         coalesce(bool_or(paid_reserved < paid_max_stars * 10), false) AS unreserved,
         coalesce(array_agg(id), '{}') AS sending
     FROM broadcasts
     WHERE status = 'sending' AND paid_max_stars IS NOT NULL

-- statement
SELECT
       (SELECT count(*) FROM memberships m JOIN channels c ON c.id = m.channel_id
         WHERE m.channel_id = $1 AND m.status <> 'expired' AND statement_timestamp() < m.expires_at + make_interval(days => c.grace_period_days))
     + (SELECT count(DISTINCT ss.subscriber_id) FROM star_subscriptions ss
         WHERE (ss.channel_id = $1 OR ss.order_id = ANY (ARRAY(
                  SELECT bo.id FROM orders bo WHERE bo.plan_id = ANY (ARRAY(SELECT bpc.plan_id FROM plan_channels bpc
               WHERE bpc.channel_id = $1 AND bpc.position > 0)))))
           AND ss.status = 'active' AND statement_timestamp() < ss.expires_at + make_interval(secs => 86400)
           AND NOT EXISTS (
               SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                WHERE m.subscriber_id = ss.subscriber_id AND m.channel_id = $1
                  AND m.status <> 'expired' AND statement_timestamp() < m.expires_at + make_interval(days => c.grace_period_days)))
     + (SELECT count(DISTINCT o.subscriber_id) FROM orders o
         WHERE (o.channel_id = $1 OR o.plan_id = ANY (ARRAY(SELECT bpc.plan_id FROM plan_channels bpc
               WHERE bpc.channel_id = $1 AND bpc.position > 0)))
           AND o.status = 'pending'
           AND o.hold_until > statement_timestamp()
           AND NOT EXISTS (
               SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                WHERE m.subscriber_id = o.subscriber_id AND m.channel_id = $1
                  AND m.status <> 'expired' AND statement_timestamp() < m.expires_at + make_interval(days => c.grace_period_days))
           AND NOT EXISTS (
               SELECT 1 FROM star_subscriptions ss
                WHERE ss.subscriber_id = o.subscriber_id AND (ss.channel_id = $1 OR EXISTS (SELECT 1 FROM orders so JOIN plan_channels spc ON spc.plan_id = so.plan_id
                         WHERE so.id = ss.order_id AND spc.channel_id = $1)) AND ss.status = 'active' AND statement_timestamp() < ss.expires_at + make_interval(secs => 86400))) AS taken

-- statement
SELECT
       (SELECT max(hold_until) + make_interval(secs => $3::float8) FROM orders o
         WHERE subscriber_id = $1 AND (o.channel_id = $2 OR EXISTS (SELECT 1 FROM plan_channels cpc WHERE cpc.plan_id = o.plan_id AND cpc.channel_id = $2)) AND status = 'pending'
           AND hold_until <= statement_timestamp()
           AND hold_until > statement_timestamp() - make_interval(secs => $3::float8))
         AS cooldown_until,
       (SELECT held_at + interval '1 day' FROM orders o
         WHERE subscriber_id = $1 AND (o.channel_id = $2 OR EXISTS (SELECT 1 FROM plan_channels cpc WHERE cpc.plan_id = o.plan_id AND cpc.channel_id = $2)) AND held_at > statement_timestamp() - interval '1 day'
         ORDER BY held_at DESC OFFSET $4::bigint - 1 LIMIT 1)
         AS cap_until

-- statement
SELECT
       EXISTS (SELECT 1 FROM trial_uses t WHERE t.subscriber_id = $1 AND t.channel_id = ANY ($2))
    OR EXISTS (SELECT 1 FROM memberships m
               WHERE m.subscriber_id = $1 AND m.channel_id = ANY ($2))
    OR EXISTS (SELECT 1 FROM orders o JOIN plan_channels pc ON pc.plan_id = o.plan_id
               WHERE o.subscriber_id = $1 AND o.status = 'paid' AND pc.channel_id = ANY ($2))
       AS former

-- statement
SELECT
     (SELECT count(*) FROM referral_clicks WHERE affiliate_id = $1) AS clicks,
     (SELECT count(*) FROM referral_attributions WHERE affiliate_id = $1) AS attributed_buyers,
     (SELECT count(DISTINCT subscriber_id) FROM commission_lines
      WHERE affiliate_id = $1 AND kind <> 'reversal') AS paying_buyers

-- statement
SELECT $1::timestamptz <= statement_timestamp() AS past

-- statement
SELECT $1::timestamptz > statement_timestamp() AS valid

-- statement
SELECT (SELECT count(*) FROM orders o WHERE o.promo_code_id = $1 AND (o.status = 'paid' OR (o.status = 'pending' AND o.promo_held_until > statement_timestamp()))) AS uses,
       (SELECT count(*) FROM orders o WHERE o.promo_code_id = $1 AND o.subscriber_id = $2 AND (o.status = 'paid' OR (o.status = 'pending' AND o.promo_held_until > statement_timestamp()))) AS buyer_uses,
       coalesce($3::timestamptz > statement_timestamp(), false) AS still_held,
       coalesce((SELECT pc.expires_at <= statement_timestamp() FROM promo_codes pc
                 WHERE pc.id = $1), false) AS expired

-- statement
SELECT (SELECT promo_code_id FROM bot_promo_codes
              WHERE subscriber_id = $1 AND until > statement_timestamp()) AS promo_code_id

-- statement
SELECT (p.crypto_prices ->> $2)::bigint AS price,
            o.amount_minor, o.list_price_minor
     FROM orders o JOIN plans p ON p.id = o.plan_id
     WHERE o.id = $1

-- statement
SELECT 1

-- statement
SELECT 1 FROM payments WHERE subscriber_id = $1 LIMIT 1

-- statement
SELECT 1 FROM schema_migrations WHERE version = $1

-- statement
SELECT 1 FROM subscribers WHERE id = $1

-- statement
SELECT 1 FROM subscribers WHERE id = $1 FOR KEY SHARE

-- statement
SELECT ARRAY(SELECT m.channel_id FROM memberships m
             WHERE m.subscriber_id = $1 AND m.expires_at = 'infinity' AND m.status <> 'expired' ORDER BY m.channel_id) AS lifetime,
            (SELECT promo_code_id FROM bot_promo_codes
              WHERE subscriber_id = $1 AND until > statement_timestamp()) AS promo_code_id,
            EXISTS (SELECT 1 FROM orders o
                    WHERE o.subscriber_id = $1 AND o.plan_id = $2 AND o.status = 'pending'
                      AND o.superseded_at IS NULL) AS pending

-- statement
SELECT CASE WHEN payer ~ '^[0-9]{1,18}$' THEN payer::bigint END AS payer
     FROM payments WHERE id = $1

-- statement
SELECT DISTINCT m.subscriber_id, m.channel_id
     FROM membership_events e JOIN memberships m ON m.id = e.membership_id
     WHERE e.payment_id = $1 AND e.cause = $2
     ORDER BY m.channel_id

-- statement
SELECT EXISTS (
         SELECT 1 FROM channel_exemptions x JOIN channels c ON c.id = x.channel_id
         WHERE c.telegram_chat_id = $1 AND x.telegram_user_id = $2) AS exempt

-- statement
SELECT EXISTS (
         SELECT 1 FROM chat_bans WHERE chat_id = $1 AND user_id = $2) AS banned

-- statement
SELECT EXISTS (
         SELECT 1 FROM cryptopay_invoices
         WHERE order_id = $1 AND invoice_id <> $2 AND status = 'active'
           AND expires_at > statement_timestamp()) AS others

-- statement
SELECT EXISTS (
         SELECT 1 FROM effects
         WHERE membership_id = $1 AND user_id = $2 AND kind IN ('grant', 'renewal_receipt')
           AND status = 'done' AND NOT payload ? 'note'
     ) AS delivered

-- statement
SELECT EXISTS (
         SELECT 1 FROM memberships m
         JOIN subscribers s ON s.id = m.subscriber_id
         JOIN channels c ON c.id = m.channel_id
         WHERE s.telegram_user_id = $1 AND c.telegram_chat_id = $2 AND m.status <> 'expired' AND statement_timestamp() < m.expires_at + make_interval(days => c.grace_period_days)) AS found

-- statement
SELECT EXISTS (
         SELECT 1 FROM monobank_invoices
         WHERE order_id = $1 AND invoice_id <> $2 AND handed_out
           AND status IN ('created', 'processing', 'hold')
           AND valid_until > statement_timestamp()) AS open

-- statement
SELECT EXISTS (
         SELECT 1 FROM orders o
         JOIN plans p ON p.id = o.plan_id
         JOIN plan_channels pc ON pc.plan_id = o.plan_id
         WHERE o.subscriber_id = $1 AND o.status = 'paid' AND p.kind = 'paid'
           AND pc.channel_id = ANY($2::integer[])) AS bought

-- statement
SELECT EXISTS (SELECT 1 FROM effects WHERE status = 'pending' AND chat_id = $1)
         OR EXISTS (SELECT 1 FROM sweep_queue WHERE chat_id = $1) AS pending

-- statement
SELECT EXISTS (SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                    WHERE m.subscriber_id = $1 AND m.channel_id = $2 AND m.status <> 'expired' AND statement_timestamp() < m.expires_at + make_interval(days => c.grace_period_days))
         OR EXISTS (SELECT 1 FROM star_subscriptions ss
                    WHERE ss.subscriber_id = $1 AND (ss.channel_id = $2 OR EXISTS (SELECT 1 FROM orders so JOIN plan_channels spc ON spc.plan_id = so.plan_id
                         WHERE so.id = ss.order_id AND spc.channel_id = $2)) AND ss.status = 'active' AND statement_timestamp() < ss.expires_at + make_interval(secs => 86400)) AS seated

-- statement
SELECT EXISTS (SELECT 1 FROM memberships m WHERE m.channel_id = $1 AND m.status <> 'expired') AS found

-- statement
SELECT EXISTS (SELECT 1 FROM memberships m WHERE m.subscriber_id = $1 AND m.status <> 'expired') AS found

-- statement
SELECT EXISTS (SELECT 1 FROM messages WHERE dedupe_key = $1) AS found

-- statement
SELECT EXISTS (SELECT 1 FROM orders WHERE plan_id = $1) AS has_orders

-- statement
SELECT EXISTS (SELECT 1 FROM orders WHERE promo_code_id = $1) AS used

-- statement
SELECT EXISTS (SELECT 1 FROM star_subscription_updates
     WHERE update_id = $1
       AND created_at >= statement_timestamp() - interval '1 day') AS seen

-- statement
SELECT NOT EXISTS (
    SELECT 1 FROM effects b
    WHERE b.chat_id = $2 AND b.user_id = $3 AND b.status = 'pending' AND b.id <> $1
      AND b.kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban')
      AND (b.id < $1 OR b.lease_until > statement_timestamp())) AS first

-- statement
SELECT NOT EXISTS (SELECT 1 FROM trial_uses
                            WHERE subscriber_id = $1 AND channel_id = ANY($2))
            AND NOT EXISTS (SELECT 1 FROM memberships
                            WHERE subscriber_id = $1 AND channel_id = ANY($2)) AS eligible

-- statement
SELECT a.delay_minutes, a.promo
     FROM automations a, subscribers s
     WHERE a.kind = $1 AND a.enabled AND s.id = $2 AND NOT s.marketing_opt_out AND s.reachable

-- statement
SELECT a.kind, a.enabled, a.delay_minutes, a.texts, a.promo, a.updated_at,
         (SELECT count(*) FROM messages m
          WHERE m.kind = a.kind AND m.broadcast_id IS NULL AND m.outcome = 'sent') AS sent FROM automations a
     ORDER BY array_position(
         ARRAY['unpaid_checkout', 'win_back', 'cancel_offer', 'renewal_failed'], a.kind)

-- statement
SELECT a.kind, a.enabled, a.delay_minutes, a.texts, a.promo, a.updated_at,
         (SELECT count(*) FROM messages m
          WHERE m.kind = a.kind AND m.broadcast_id IS NULL AND m.outcome = 'sent') AS sent FROM automations a WHERE a.kind = $1

-- statement
SELECT a.kind, a.enabled, a.delay_minutes, a.texts, a.promo, a.updated_at,
         (SELECT count(*) FROM messages m
          WHERE m.kind = a.kind AND m.broadcast_id IS NULL AND m.outcome = 'sent') AS sent FROM automations a WHERE a.kind = $1 FOR UPDATE

-- statement
SELECT active, seat_limit, billing_period_days FROM channels
     WHERE id = $1 FOR NO KEY UPDATE

-- statement
SELECT active, seat_limit, billing_period_days FROM channels WHERE id = $1 FOR KEY SHARE

-- statement
SELECT affiliate_id FROM commission_lines
     WHERE payment_id = $1 AND kind <> 'reversal'

-- statement
SELECT attempts FROM gateway_checks WHERE order_id = $1

-- statement
SELECT b.id, b.status, b.texts, b.segment, b.button, b.send_at, b.paid_max_stars,
         b.recipients, b.created_at, b.started_at, b.finished_at, b.cancelled_at,
         c.sent, c.blocked, c.failed, c.skipped, c.pending, c.paid_messages FROM broadcasts b LEFT JOIN LATERAL (
             SELECT count(*) FILTER (WHERE m.outcome = 'sent') AS sent,
                    count(*) FILTER (WHERE m.outcome = 'blocked') AS blocked,
                    count(*) FILTER (WHERE m.outcome = 'failed') AS failed,
                    count(*) FILTER (WHERE m.outcome = 'skipped') AS skipped,
                    count(*) FILTER (WHERE m.outcome IS NULL) AS pending,
                    count(*) FILTER (WHERE m.outcome = 'sent' AND m.paid) AS paid_messages
             FROM messages m
             WHERE m.broadcast_id = b.id
         ) c ON true WHERE b.id = $1

-- statement
SELECT b.id, b.status, b.texts, b.segment, b.button, b.send_at, b.paid_max_stars,
         b.recipients, b.created_at, b.started_at, b.finished_at, b.cancelled_at,
         c.sent, c.blocked, c.failed, c.skipped, c.pending, c.paid_messages FROM broadcasts b LEFT JOIN LATERAL (
             SELECT count(*) FILTER (WHERE m.outcome = 'sent') AS sent,
                    count(*) FILTER (WHERE m.outcome = 'blocked') AS blocked,
                    count(*) FILTER (WHERE m.outcome = 'failed') AS failed,
                    count(*) FILTER (WHERE m.outcome = 'skipped') AS skipped,
                    count(*) FILTER (WHERE m.outcome IS NULL) AS pending,
                    count(*) FILTER (WHERE m.outcome = 'sent' AND m.paid) AS paid_messages
             FROM messages m
             WHERE m.broadcast_id = b.id
         ) c ON true WHERE b.id > $1 ORDER BY b.id LIMIT $2

-- statement
SELECT c.id, c.title, c.active, c.seat_limit,
            count(m.id) FILTER (WHERE m.status = 'active') AS members_active,
            count(m.id) FILTER (WHERE m.status = 'grace') AS members_grace,
            count(m.id) FILTER (WHERE m.status = 'expired') AS members_expired
     FROM channels c LEFT JOIN memberships m ON m.channel_id = c.id
     GROUP BY c.id ORDER BY c.id

-- statement
SELECT cause FROM membership_events WHERE id = $1 AND membership_id = $2

-- statement
SELECT channel_id, telegram_user_id, note, created_at
     FROM channel_exemptions WHERE channel_id = $1 ORDER BY telegram_user_id

-- statement
SELECT chase, count(*) AS n FROM monobank_invoices WHERE handed_out GROUP BY chase

-- statement
SELECT code, active FROM affiliates WHERE subscriber_id = $1

-- statement
SELECT count(*) = (SELECT count(DISTINCT c) FROM unnest($2::integer[]) AS c) AS found
     FROM memberships m
     WHERE m.subscriber_id = $1 AND m.channel_id = ANY($2::integer[])
       AND m.expires_at = 'infinity' AND m.status <> 'expired'

-- statement
SELECT count(*) AS depth FROM webhook_deliveries d
             JOIN webhook_endpoints e ON e.id = d.endpoint_id
             WHERE d.status = 'pending' AND e.disabled_at IS NULL

-- statement
SELECT count(*) AS found FROM plans WHERE id = ANY ($1) AND kind = 'paid'

-- statement
SELECT count(*) AS held FROM orders o
     JOIN plan_channels pc ON pc.plan_id = o.plan_id
     JOIN channels c ON c.id = pc.channel_id
     WHERE o.status = 'pending' AND o.hold_until > statement_timestamp()
       AND c.seat_limit IS NOT NULL

-- statement
SELECT count(*) AS live_memberships,
            count(DISTINCT subscriber_id) AS active_members,
            statement_timestamp() AS at
     FROM memberships WHERE status <> 'expired'

-- statement
SELECT count(*) AS n FROM gateway_checks WHERE state = 'chasing'

-- statement
SELECT count(*) AS paused FROM effects e
     JOIN channels c ON c.telegram_chat_id = e.chat_id
     WHERE e.status = 'pending' AND c.telegram_status = 'no_rights'
       AND e.kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban')

-- statement
SELECT count(*) AS uses FROM orders o WHERE o.promo_code_id = $1 AND (o.status = 'paid' OR (o.status = 'pending' AND o.promo_held_until > statement_timestamp()))

-- statement
SELECT count(*) FILTER (WHERE outcome = 'needs_review') AS needs_review,
                    count(*) FILTER (WHERE outcome = 'refund_pending') AS refund_pending,
                    count(*) FILTER (WHERE outcome = 'refund_failed') AS refund_failed,
                    (SELECT count(*) FROM effects WHERE status = 'pending') AS effects_pending,
                    (SELECT count(*) FROM effects WHERE status = 'failed') AS effects_failed,
                    (SELECT at FROM membership_events WHERE cause = 'sweep'
                      ORDER BY id DESC LIMIT 1) AS last_sweep_change_at,
                    statement_timestamp() AS as_of
             FROM payments WHERE outcome IN ('needs_review', 'refund_pending', 'refund_failed')

-- statement
SELECT count(pg_advisory_xact_lock(stats_day_lock_key(day))) AS n FROM unnest($1::date[]) day

-- statement
SELECT currency, sum(amount_minor)::text AS amount_minor, count(*) AS payments
             FROM payments
             WHERE outcome = 'applied' AND paid_at > statement_timestamp() - interval '30 days'
             GROUP BY currency ORDER BY currency

-- statement
SELECT d.id, d.endpoint_id, d.event_id, ev.msg_id,
         ev.type AS event_type, d.status,
         CASE WHEN d.status = 'pending' THEN d.next_attempt_at END AS next_attempt_at,
         d.created_at,
         COALESCE((SELECT jsonb_agg(jsonb_build_object(
                      'at', webhook_time(a.at), 'status_code', a.status_code,
                      'latency_ms', a.latency_ms, 'error', a.error) ORDER BY a.id)
                   FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]') AS attempts
     FROM webhook_deliveries d JOIN webhook_events ev ON ev.id = d.event_id
     WHERE ($1::bigint IS NULL OR d.endpoint_id = $1) AND ($2::bigint IS NULL OR d.id = $2)
       AND d.id > $3
     ORDER BY d.id LIMIT $4

-- statement
SELECT days, reversed_at IS NOT NULL AS reversed,
            granted_at IS NOT NULL AS granted, taken_back_at IS NOT NULL AS taken_back
     FROM referral_rewards WHERE id = $1 FOR UPDATE

-- statement
SELECT e.id FROM webhook_endpoints e
     WHERE e.disabled_at IS NULL
       AND EXISTS (SELECT 1 FROM webhook_deliveries d
                   WHERE d.endpoint_id = e.id AND d.status = 'pending'
                     AND d.next_attempt_at <= statement_timestamp())
     ORDER BY e.id
     FOR NO KEY UPDATE OF e SKIP LOCKED

-- statement
SELECT email, role FROM staff_accounts
     WHERE id = $1 AND token_version = $2 AND NOT disabled

-- statement
SELECT enabled, attribution, window_days, hold_days, first_percent, renewal_percent, renewal_months, buyer_links, buyer_reward_days, max_reward_days_per_month, updated_at FROM referral_program

-- statement
SELECT enabled, attribution, window_days, hold_days, first_percent, renewal_percent, renewal_months, buyer_links, buyer_reward_days, max_reward_days_per_month, updated_at FROM referral_program FOR UPDATE

-- statement
SELECT expires_at FROM star_subscriptions
         WHERE subscriber_id = $1 AND channel_id = $2 AND status = 'active'
           AND expires_at > statement_timestamp()
         ORDER BY id DESC LIMIT 1

-- statement
SELECT external_id FROM payments
     WHERE gateway = $2 AND external_id = ANY($1)

-- statement
SELECT f.charge_id, f.amount_minor, p.id AS payment_id
     FROM star_affiliate_fees f
     LEFT JOIN payments p ON p.gateway = $1 AND p.external_id = f.charge_id
     ORDER BY f.charge_id

-- statement
SELECT first_percent, renewal_percent FROM plan_referral_rates WHERE plan_id = $1

-- statement
SELECT g.order_id, o.reference, g.gateway, g.state, g.attempts, g.next_check_at, g.last_checked_at, g.last_status, g.last_error, g.payment_id, o.purchase_link_at, g.created_at, g.updated_at FROM gateway_checks g JOIN orders o ON o.id = g.order_id
     WHERE g.order_id > $1 AND ($2::text IS NULL OR g.state = $2::text)
     ORDER BY g.order_id LIMIT $3

-- statement
SELECT gateway, external_id, order_id FROM payments WHERE id = $1

-- statement
SELECT hold_until FROM orders WHERE id = $1

-- statement
SELECT id FROM affiliates WHERE subscriber_id = $1

-- statement
SELECT id FROM audits WHERE channel_id = $1 AND status = 'running'

-- statement
SELECT id FROM broadcasts
     WHERE status = 'scheduled' AND send_at <= statement_timestamp()
     ORDER BY send_at, id LIMIT 10

-- statement
SELECT id FROM channels ORDER BY id

-- statement
SELECT id FROM channels WHERE telegram_chat_id = $1

-- statement
SELECT id FROM plans WHERE id = $1 FOR KEY SHARE

-- statement
SELECT id FROM staff_accounts
     WHERE role = 'owner' AND NOT disabled ORDER BY id FOR UPDATE

-- statement
SELECT id FROM subscribers WHERE telegram_user_id = $1

-- statement
SELECT id, active, seat_limit, billing_period_days
     FROM channels WHERE id = ANY($1) ORDER BY id FOR KEY SHARE

-- statement
SELECT id, active, seat_limit, billing_period_days
     FROM channels WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE

-- statement
SELECT id, actor, staff_id, staff_email, action, target_type, target_id,
            before, after, request_id, at
     FROM audit_log
     WHERE id > $1
       AND ($2::bigint IS NULL OR staff_id = $2)
       AND ($3::text IS NULL OR action = $3)
       AND ($4::text IS NULL OR target_type = $4)
       AND ($5::bigint IS NULL OR target_id = $5)
       AND ($6::timestamptz IS NULL OR at >= $6)
       AND ($7::timestamptz IS NULL OR at < $7)
     ORDER BY id LIMIT $8

-- statement
SELECT id, affiliate_id, currency, amount_minor, lines, created_at
     FROM payouts
     WHERE id > $1
       AND ($2::integer IS NULL OR affiliate_id = $2)
       AND ($3::text IS NULL OR currency = $3)
     ORDER BY id
     LIMIT $4

-- statement
SELECT id, affiliate_id, currency, amount_minor, lines, created_at
     FROM payouts WHERE id = $1

-- statement
SELECT id, channel_id, fix, status, checked, total, counts, rows, error,
            started_at, finished_at
     FROM audits
     WHERE ($1::integer IS NULL OR channel_id = $1) AND ($2::bigint IS NULL OR id < $2)
     ORDER BY id DESC LIMIT $3

-- statement
SELECT id, channel_id, fix, status, checked, total, counts, rows, error,
            started_at, finished_at
     FROM audits WHERE id = $1

-- statement
SELECT id, currency FROM channels WHERE id = ANY($1) ORDER BY id FOR SHARE

-- statement
SELECT id, door, active FROM channels WHERE telegram_chat_id = $1

-- statement
SELECT id, email, role, disabled, created_at, updated_at
     FROM staff_accounts WHERE id = $1 FOR UPDATE

-- statement
SELECT id, email, role, disabled, created_at, updated_at
     FROM staff_accounts WHERE id > $1 ORDER BY id LIMIT $2

-- statement
SELECT id, gateway, external_id, order_reference, order_id, subscriber_id, channel_id, amount_minor, currency, affiliate_fee_minor, paid_at, outcome, reason, created_at FROM payments
     WHERE id > $1
       AND ($2::text IS NULL OR outcome = $2::text)
       AND ($3::bigint IS NULL OR order_id = $3)
       AND ($4::integer IS NULL OR subscriber_id = $4)
       AND ($6::timestamptz IS NULL OR created_at >= $6)
       AND ($7::timestamptz IS NULL OR created_at < $7)
     ORDER BY id LIMIT $5

-- statement
SELECT id, gateway, external_id, order_reference, order_id, subscriber_id, channel_id, amount_minor, currency, affiliate_fee_minor, paid_at, outcome, reason, created_at FROM payments WHERE gateway = $1 AND external_id = $2

-- statement
SELECT id, gateway, external_id, order_reference, order_id, subscriber_id, channel_id, amount_minor, currency, affiliate_fee_minor, paid_at, outcome, reason, created_at FROM payments WHERE id = $1

-- statement
SELECT id, gateway, external_id, order_reference, order_id, subscriber_id, channel_id, amount_minor, currency, affiliate_fee_minor, paid_at, outcome, reason, created_at, payer, subscription_expires_at FROM payments
     WHERE order_id = $1 AND gateway = $2 AND renewal AND outcome = $3 AND reason = $4
     ORDER BY paid_at, id

-- statement
SELECT id, invoice_id, order_id, reference, amount_minor, page_url, handed_out, valid_until, status, modified_date, chase, attempts, next_check_at, last_checked_at, last_error, payment_id, created_at, updated_at FROM monobank_invoices
     WHERE id > $1 AND ($2::text IS NULL OR chase = $2::text)
       AND ($3::bigint IS NULL OR order_id = $3)
     ORDER BY id LIMIT $4

-- statement
SELECT id, kind, chat_id, user_id FROM effects e
     WHERE status = 'pending' AND next_attempt_at <= statement_timestamp()
       AND (lease_until IS NULL OR lease_until <= statement_timestamp())
       AND NOT (id = ANY($1))
       AND (CASE WHEN kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') THEN 0
              WHEN kind = 'member_message' THEN 2 ELSE 1 END) <= $2
       AND NOT (e.kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') AND EXISTS (
           SELECT 1 FROM effects b
           WHERE b.chat_id = e.chat_id AND b.user_id = e.user_id
             AND b.status = 'pending' AND b.kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') AND b.id <> e.id
             AND (b.id < e.id OR b.lease_until > statement_timestamp())))
       AND NOT (e.kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') AND e.chat_id IN (SELECT telegram_chat_id FROM channels WHERE telegram_status = 'no_rights'))
     ORDER BY (CASE WHEN kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') THEN 0
              WHEN kind = 'member_message' THEN 2 ELSE 1 END), next_attempt_at, id
     LIMIT 1
     FOR UPDATE SKIP LOCKED

-- statement
SELECT id, kind, currency, price_minor FROM plans WHERE id = ANY($1::bigint[])

-- statement
SELECT id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload, status, attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, done_at, lease_until, first_failed_at FROM effects
     WHERE id > $1
       AND ($2::text IS NULL OR status = $2::text)
       AND ($3::text IS NULL OR kind = $3::text)
       AND ($4::bigint IS NULL OR membership_id = $4)
       AND ($5::bigint IS NULL OR payment_id = $5)
     ORDER BY id LIMIT $6

-- statement
SELECT id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload, status, attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, done_at, lease_until, first_failed_at FROM effects WHERE id = $1

-- statement
SELECT id, membership_id, from_status, to_status, expires_at_before,
            expires_at_after, cause, payment_id, at
     FROM membership_events WHERE membership_id = $1 AND id > $2
     ORDER BY id LIMIT $3

-- statement
SELECT id, name, subscriber_id, code, active, created_at, updated_at FROM affiliates
     WHERE id > $1::bigint
       AND ($2::boolean IS NULL OR active = $2)
       AND ($3::integer IS NULL OR subscriber_id = $3)
       AND ($4::text IS NULL OR code = $4)
     ORDER BY id
     LIMIT $5

-- statement
SELECT id, name, subscriber_id, code, active, created_at, updated_at FROM affiliates WHERE id = $1

-- statement
SELECT id, name, subscriber_id, code, active, created_at, updated_at FROM affiliates WHERE id = $1 FOR UPDATE

-- statement
SELECT id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, cancelled_at, applied, refused_reason, created_at, updated_at FROM star_subscriptions
     WHERE applied AND order_id = (SELECT id FROM orders WHERE reference = $1)
     FOR UPDATE

-- statement
SELECT id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, cancelled_at, applied, refused_reason, created_at, updated_at FROM star_subscriptions
     WHERE id > $1
       AND ($2::integer IS NULL OR subscriber_id = $2)
       AND ($3::integer IS NULL OR channel_id = $3)
       AND ($4::text IS NULL OR status = $4::text)
     ORDER BY id LIMIT $5

-- statement
SELECT id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, cancelled_at, applied, refused_reason, created_at, updated_at FROM star_subscriptions WHERE id = $1

-- statement
SELECT id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, cancelled_at, applied, refused_reason, created_at, updated_at FROM star_subscriptions WHERE id = $1 FOR UPDATE

-- statement
SELECT id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, cancelled_at, applied, refused_reason, created_at, updated_at FROM star_subscriptions WHERE order_id = $1 AND applied FOR UPDATE

-- statement
SELECT id, outcome, reason, order_id FROM payments
     WHERE gateway = $1 AND external_id = $2

-- statement
SELECT id, password_hash FROM staff_accounts WHERE email = $1

-- statement
SELECT id, password_hash, token_version, role FROM staff_accounts
     WHERE email = $1 AND NOT disabled

-- statement
SELECT id, percent_off, amount_off_minor, currency, plan_ids, max_redemptions, per_buyer_limit, first_purchase_only, active FROM promo_codes WHERE code = $1 AND (subscriber_id IS NULL OR subscriber_id = $2)
     FOR UPDATE

-- statement
SELECT id, percent_off, amount_off_minor, currency, plan_ids, max_redemptions, per_buyer_limit, first_purchase_only, active FROM promo_codes WHERE id = $1 FOR UPDATE

-- statement
SELECT id, promo_code_id FROM orders
             WHERE subscriber_id = $1 AND plan_id = $2 AND status = 'pending'
               AND superseded_at IS NULL
               AND (hold_until > statement_timestamp()
                    OR (hold_until IS NULL AND list_price_minor = $3 AND currency = $4
                        AND created_at > statement_timestamp() - make_interval(secs => $5)
                        AND ($6::bigint IS NULL OR promo_code_id = $6)))
             ORDER BY id DESC LIMIT 1

-- statement
SELECT id, reference, subscriber_id, channel_id, amount_minor, currency, status, hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id, list_price_minor, discount_minor, promo_code_id, promo_held_until, (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id) AS promo_code FROM orders
     WHERE id > $1
       AND ($2::integer IS NULL OR subscriber_id = $2)
       AND ($3::integer IS NULL OR channel_id = $3)
       AND ($4::text IS NULL OR status = $4::text)
     ORDER BY id LIMIT $5

-- statement
SELECT id, reference, subscriber_id, channel_id, amount_minor, currency, status, hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id, list_price_minor, discount_minor, promo_code_id, promo_held_until, (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id) AS promo_code FROM orders WHERE id = $1

-- statement
SELECT id, status, last_error FROM effects WHERE dedupe_key = $1

-- statement
SELECT id, subscriber_id, channel_id, status, expires_at, created_at, updated_at FROM memberships
     WHERE id > $1
       AND ($2::integer IS NULL OR subscriber_id = $2)
       AND ($3::integer IS NULL OR channel_id = $3)
       AND ($4::text IS NULL OR status = $4::text)
       AND ($6::timestamptz IS NULL OR created_at >= $6)
       AND ($7::timestamptz IS NULL OR created_at < $7)
     ORDER BY id LIMIT $5

-- statement
SELECT id, subscriber_id, channel_id, status, expires_at, created_at, updated_at FROM memberships WHERE id = $1

-- statement
SELECT id, subscriber_id, channel_id, status, expires_at, created_at, updated_at FROM memberships WHERE subscriber_id = $1 AND channel_id = $2

-- statement
SELECT id, subscriber_id, channel_id, status, expires_at, created_at, updated_at FROM memberships WHERE subscriber_id = $1 AND channel_id = $2 FOR UPDATE

-- statement
SELECT id, subscriber_id, kind, broadcast_id, outcome, text, note, created_at, sent_at FROM messages WHERE subscriber_id = $1 AND id > $2 ORDER BY id LIMIT $3

-- statement
SELECT id, telegram_chat_id, title, price_minor, currency, billing_period_days, grace_period_days, seat_limit, active, created_at, updated_at, description, recurring, telegram_status, translations, door FROM channels
                 WHERE id > $1::bigint AND ($2::boolean IS NULL OR active = $2)
                 ORDER BY id LIMIT $3

-- statement
SELECT id, telegram_chat_id, title, price_minor, currency, billing_period_days, grace_period_days, seat_limit, active, created_at, updated_at, description, recurring, telegram_status, translations, door FROM channels WHERE id = $1

-- statement
SELECT id, telegram_user_id, username, display_name, language, marketing_opt_out, reachable, created_at, updated_at FROM subscribers
                 WHERE id > $1::bigint AND ($2::bigint IS NULL OR telegram_user_id = $2)
                   AND ($4::text IS NULL OR lower(username) = lower($4))
                   AND ($5::timestamptz IS NULL OR created_at >= $5)
                   AND ($6::timestamptz IS NULL OR created_at < $6)
                 ORDER BY id LIMIT $3

-- statement
SELECT id, telegram_user_id, username, display_name, language, marketing_opt_out, reachable, created_at, updated_at FROM subscribers WHERE id = $1

-- statement
SELECT id, title, description, price_minor, currency, billing_period_days, recurring, seat_limit, active, translations FROM channels WHERE active AND id > $1 ORDER BY id LIMIT $2

-- statement
SELECT id, title, description, price_minor, currency, billing_period_days, recurring, seat_limit, active, translations FROM channels WHERE id = $1

-- statement
SELECT id, title, telegram_chat_id, telegram_status_at AS since FROM channels
     WHERE telegram_status = 'no_rights' ORDER BY id

-- statement
SELECT id, url, description, event_types, disabled_at IS NULL AS enabled, disabled_reason,
         failing_since,
         CASE WHEN previous_secret_until > statement_timestamp() THEN previous_secret_until END
             AS previous_secret_until,
         created_at, updated_at FROM webhook_endpoints WHERE id = $1

-- statement
SELECT id, url, description, event_types, disabled_at IS NULL AS enabled, disabled_reason,
         failing_since,
         CASE WHEN previous_secret_until > statement_timestamp() THEN previous_secret_until END
             AS previous_secret_until,
         created_at, updated_at FROM webhook_endpoints WHERE id > $1 ORDER BY id LIMIT $2

-- statement
SELECT invite_link FROM channels WHERE id = $1 AND telegram_chat_id = $2

-- statement
SELECT invoice_id, order_id, asset, amount_minor, status, pay_url, expires_at FROM cryptopay_invoices WHERE order_id = $1 AND asset = $2

-- statement
SELECT kind = 'paid' AND active AS buyable FROM plans WHERE id = $1

-- statement
SELECT kind, status, sum(count)::bigint AS count, max(oldest_secs) AS oldest_secs
     FROM (
         SELECT kind, status, count(*) AS count,
         EXTRACT(EPOCH FROM statement_timestamp() - min(created_at))::float8 AS oldest_secs FROM effects WHERE status IN ('pending', 'failed')
         GROUP BY kind, status
         UNION ALL
         SELECT kind, status, count(*) AS count,
         EXTRACT(EPOCH FROM statement_timestamp() - min(created_at))::float8 AS oldest_secs FROM (SELECT kind, 'pending' AS status, created_at FROM sweep_queue) q
         GROUP BY kind, status
     ) d
     GROUP BY kind, status

-- statement
SELECT l.id, l.affiliate_id, l.payment_id, l.subscriber_id, l.kind, l.amount_minor, l.currency, l.percent, l.base_minor, CASE WHEN l.status = 'pending' AND l.payable_at <= statement_timestamp() THEN 'payable' ELSE l.status END AS status, l.payable_at, l.payout_id, l.created_at, l.reversed_at FROM commission_lines l
     WHERE l.id > $1
       AND ($2::integer IS NULL OR l.affiliate_id = $2)
       AND ($3::text IS NULL OR CASE WHEN l.status = 'pending' AND l.payable_at <= statement_timestamp() THEN 'payable' ELSE l.status END = $3)
       AND ($4::text IS NULL OR l.kind = $4)
       AND ($5::text IS NULL OR l.currency = $5)
       AND ($6::bigint IS NULL OR l.payout_id = $6)
       AND ($7::timestamptz IS NULL OR l.created_at >= $7)
       AND ($8::timestamptz IS NULL OR l.created_at < $8)
     ORDER BY l.id
     LIMIT $9

-- statement
SELECT language FROM subscribers WHERE telegram_user_id = $1

-- statement
SELECT m.channel_id FROM memberships m
             WHERE m.subscriber_id = $1 AND m.expires_at = 'infinity' AND m.status <> 'expired' ORDER BY m.channel_id

-- statement
SELECT m.channel_id, c.active, c.currency, lp.last_plan_id, lp.last_plan_renews
     FROM memberships m JOIN channels c ON c.id = m.channel_id LEFT JOIN LATERAL (
                 SELECT o.plan_id AS last_plan_id,
                        p.active AND p.default_of IS NULL AS last_plan_renews
                 FROM orders o JOIN plans p ON p.id = o.plan_id
                 WHERE o.subscriber_id = m.subscriber_id AND o.status = 'paid'
                   AND p.kind = 'paid' AND p.period_days IS NOT NULL
                   AND EXISTS (SELECT 1 FROM plan_channels pc
                               WHERE pc.plan_id = o.plan_id AND pc.channel_id = m.channel_id)
                 ORDER BY o.paid_at DESC NULLS LAST, o.id DESC LIMIT 1
             ) lp ON true WHERE m.id = $1

-- statement
SELECT m.id AS membership_id, ev.id AS event_id, m.subscriber_id,
            a.promo
     FROM automations a
     JOIN membership_events ev
       ON ev.to_status = 'expired'
      AND ev.at <= statement_timestamp() - make_interval(mins => a.delay_minutes)
      AND ev.at > statement_timestamp() - make_interval(mins => a.delay_minutes) - interval '1 day'
     JOIN memberships m ON m.id = ev.membership_id AND m.status = 'expired'
     JOIN subscribers s ON s.id = m.subscriber_id
     WHERE a.kind = 'win_back'
       AND a.enabled
       AND NOT s.marketing_opt_out
       AND s.reachable
       AND NOT EXISTS (
               SELECT 1 FROM membership_events later
               WHERE later.membership_id = m.id AND later.id > ev.id)
       AND NOT EXISTS (
               SELECT 1 FROM messages x
               WHERE x.dedupe_key = 'win_back:' || m.id || ':' || ev.id)
     ORDER BY ev.id
     LIMIT 500

-- statement
SELECT m.id AS membership_id, m.channel_id, c.title, c.translations, m.status,
            m.expires_at,
            c.active, c.currency,
            lp.last_plan_id, lp.last_plan_renews,
            ss.id AS subscription_id, ss.status AS subscription_status,
            ss.expires_at AS subscription_expires_at,
            ss.expires_at > statement_timestamp() AS subscription_ahead
     FROM memberships m
     JOIN subscribers s ON s.id = m.subscriber_id
     JOIN channels c ON c.id = m.channel_id
     LEFT JOIN LATERAL (
         SELECT x.id, x.status, x.expires_at FROM star_subscriptions x
         WHERE x.subscriber_id = m.subscriber_id AND x.channel_id = m.channel_id
           AND x.applied
         ORDER BY x.id DESC LIMIT 1
     ) ss ON true
     LEFT JOIN LATERAL (
                 SELECT o.plan_id AS last_plan_id,
                        p.active AND p.default_of IS NULL AS last_plan_renews
                 FROM orders o JOIN plans p ON p.id = o.plan_id
                 WHERE o.subscriber_id = m.subscriber_id AND o.status = 'paid'
                   AND p.kind = 'paid' AND p.period_days IS NOT NULL
                   AND EXISTS (SELECT 1 FROM plan_channels pc
                               WHERE pc.plan_id = o.plan_id AND pc.channel_id = m.channel_id)
                 ORDER BY o.paid_at DESC NULLS LAST, o.id DESC LIMIT 1
             ) lp ON true
     WHERE s.telegram_user_id = $1
     ORDER BY m.status = 'expired', m.expires_at DESC, m.id
     LIMIT $2

-- statement
SELECT m.id AS membership_id, m.subscriber_id, s.telegram_user_id, (m.status <> 'expired' AND statement_timestamp() < m.expires_at + make_interval(days => c.grace_period_days)) AS live
     FROM memberships m
     JOIN subscribers s ON s.id = m.subscriber_id
     JOIN channels c ON c.id = m.channel_id
     WHERE m.channel_id = $1
       AND ($2::bigint[] IS NULL OR s.telegram_user_id = ANY($2::bigint[]))
     ORDER BY s.telegram_user_id

-- statement
SELECT m.id,
       m.kind,
       m.subscriber_id,
       m.broadcast_id,
       m.language,
       m.outcome,
       m.attempted_at IS NOT NULL AS attempted,
       s.telegram_user_id,
       coalesce(s.display_name, s.username) AS name,
       s.marketing_opt_out,
       s.reachable,
       pc.code AS promo_code,
       pc.percent_off AS promo_percent_off,
       b.status AS broadcast_status,
       b.paid_max_stars,
       b.button,
       coalesce(b.texts, a.texts) AS texts,
       coalesce(a.enabled, true) AS enabled,
       CASE m.kind
           WHEN 'unpaid_checkout' THEN
               o.status = 'pending'
               AND o.superseded_at IS NULL
               AND NOT EXISTS (
                       SELECT 1
                       FROM orders p
                       WHERE p.subscriber_id = o.subscriber_id
                         AND p.channel_id = o.channel_id
                         AND p.status = 'paid'
                         AND p.paid_at > o.created_at)
           WHEN 'win_back' THEN ms.status = 'expired'
           WHEN 'cancel_offer' THEN ss.status = 'cancelled'
           ELSE true
       END AS applies,
       ch.id AS channel_id,
       ch.title AS channel_title,
       ch.translations AS channel_translations,
       coalesce(ms.expires_at, ss.expires_at, about.expires_at) AS expires_at,
       CASE m.kind
           WHEN 'broadcast' THEN (b.button ->> 'plan_id')::bigint
           WHEN 'unpaid_checkout' THEN o.plan_id
           WHEN 'win_back' THEN renew.plan_id
           ELSE so.plan_id
       END AS plan_id
FROM messages m
JOIN subscribers s ON s.id = m.subscriber_id
LEFT JOIN promo_codes pc ON pc.id = m.promo_code_id
LEFT JOIN broadcasts b ON b.id = m.broadcast_id
LEFT JOIN automations a ON a.kind = m.kind
LEFT JOIN orders o ON o.id = m.order_id
LEFT JOIN memberships ms ON ms.id = m.membership_id
LEFT JOIN star_subscriptions ss ON ss.id = m.star_subscription_id
LEFT JOIN orders so ON so.id = ss.order_id
LEFT JOIN LATERAL (
        SELECT mb.channel_id, mb.expires_at
        FROM memberships mb
        WHERE m.kind = 'broadcast'
          AND mb.subscriber_id = m.subscriber_id
          AND (b.segment -> 'channel_ids' IS NULL
               OR mb.channel_id IN (
                      SELECT jsonb_array_elements_text(b.segment -> 'channel_ids')::integer))
        ORDER BY mb.status <> 'expired' DESC, mb.expires_at DESC
        LIMIT 1
     ) about ON true
LEFT JOIN LATERAL (
        SELECT coalesce(
                   (SELECT o2.plan_id
                    FROM orders o2
                    JOIN plans p2 ON p2.id = o2.plan_id
                    WHERE o2.subscriber_id = m.subscriber_id
                      AND o2.channel_id = ms.channel_id
                      AND o2.status = 'paid'
                      AND p2.kind = 'paid'
                      AND p2.active
                    ORDER BY o2.paid_at DESC
                    LIMIT 1),
                   (SELECT p3.id FROM plans p3 WHERE p3.default_of = ms.channel_id)) AS plan_id
        WHERE m.kind = 'win_back'
     ) renew ON true
LEFT JOIN channels ch
       ON ch.id = coalesce(o.channel_id, ms.channel_id, ss.channel_id, about.channel_id)
WHERE m.id = ANY($1)


-- statement
SELECT m.id, m.expires_at
     FROM memberships m
     WHERE m.status <> 'expired'
       AND m.expires_at <= $1
       AND (m.expires_at, m.id) > (COALESCE($2::timestamptz, '-infinity'), $3::bigint)
     ORDER BY m.expires_at, m.id
     LIMIT $4

-- statement
SELECT m.id, m.status, m.expires_at, ch.grace_period_days,
            statement_timestamp() AS now,
            pg_try_advisory_xact_lock(m.subscriber_id, m.channel_id) AS locked
     FROM memberships m JOIN channels ch ON ch.id = m.channel_id
     WHERE m.id = ANY($2)
       AND m.status <> 'expired'
       AND m.expires_at <= $1
     ORDER BY m.id

-- statement
SELECT m.status, m.expires_at, c.id AS channel_id, c.title, c.invite_link,
            s.telegram_user_id, s.language, c.translations
     FROM memberships m
     JOIN channels c ON c.id = m.channel_id
     JOIN subscribers s ON s.id = m.subscriber_id
     WHERE c.telegram_chat_id = $1 AND s.telegram_user_id = $2

-- statement
SELECT m.status, m.expires_at, c.id AS channel_id, c.title, c.invite_link,
            s.telegram_user_id, s.language, c.translations
     FROM memberships m
     JOIN channels c ON c.id = m.channel_id
     JOIN subscribers s ON s.id = m.subscriber_id
     WHERE m.id = $1

-- statement
SELECT max(ss.expires_at) AS renews_at
     FROM memberships m
     JOIN star_subscriptions ss ON ss.subscriber_id = m.subscriber_id
     JOIN orders o ON o.id = ss.order_id
     WHERE m.id = $1 AND ss.applied AND ss.status = 'active'
       AND ss.expires_at > statement_timestamp()
       AND (o.channel_id = m.channel_id
            OR EXISTS (SELECT 1 FROM plan_channels pc
                       WHERE pc.plan_id = o.plan_id AND pc.channel_id = m.channel_id))

-- statement
SELECT max(version) FROM schema_migrations HAVING max(version) >= $1

-- statement
SELECT method, path, body_sha256, response_status, response_body
     FROM idempotency_keys WHERE staff_id = $1 AND key = $2

-- statement
SELECT next_offset FROM star_reconcile

-- statement
SELECT next_offset, last_run_at, statement_timestamp() AS now FROM star_reconcile

-- statement
SELECT o.*, c.active, c.seat_limit, c.billing_period_days, s.telegram_user_id,
       p.kind AS plan_kind, p.period_days AS plan_period_days,
       p.recurring AS plan_recurring, p.active AS plan_active,
       ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = o.plan_id
             ORDER BY pc.channel_id) AS plan_channel_ids,
       (SELECT count(*) FROM memberships lm
        WHERE lm.subscriber_id = o.subscriber_id
          AND lm.channel_id = ANY (COALESCE(
              NULLIF(ARRAY(SELECT pc.channel_id FROM plan_channels pc
                           WHERE pc.plan_id = o.plan_id), '{}'::integer[]),
              ARRAY[o.channel_id]))
          AND lm.expires_at = 'infinity' AND lm.status <> 'expired') AS lifetime_channels
FROM (SELECT id, reference, subscriber_id, channel_id, amount_minor, currency, status,
             hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id,
             list_price_minor, discount_minor, promo_code_id, promo_held_until,
             (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id)
                 AS promo_code
      FROM orders WHERE id = $1 FOR UPDATE) AS o
LEFT JOIN LATERAL (SELECT pcl.id FROM promo_codes pcl WHERE pcl.id = o.promo_code_id
                   FOR UPDATE) AS promo_lock ON true
JOIN channels c ON c.id = o.channel_id
JOIN subscribers s ON s.id = o.subscriber_id
JOIN plans p ON p.id = o.plan_id
FOR KEY SHARE OF c


-- statement
SELECT o.*, c.active, c.seat_limit, c.billing_period_days, s.telegram_user_id,
       p.kind AS plan_kind, p.period_days AS plan_period_days,
       p.recurring AS plan_recurring, p.active AS plan_active,
       ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = o.plan_id
             ORDER BY pc.channel_id) AS plan_channel_ids,
       (SELECT count(*) FROM memberships lm
        WHERE lm.subscriber_id = o.subscriber_id
          AND lm.channel_id = ANY (COALESCE(
              NULLIF(ARRAY(SELECT pc.channel_id FROM plan_channels pc
                           WHERE pc.plan_id = o.plan_id), '{}'::integer[]),
              ARRAY[o.channel_id]))
          AND lm.expires_at = 'infinity' AND lm.status <> 'expired') AS lifetime_channels,
       o.row_version AS order_version, c.xmin::text AS channel_version,
       p.xmin::text AS plan_version,
       (SELECT pm.xmin::text FROM memberships pm
        WHERE pm.subscriber_id = o.subscriber_id AND pm.channel_id = o.channel_id)
           AS membership_version,
       EXISTS (SELECT 1 FROM referral_attributions ra JOIN referral_program rp ON rp.enabled
               WHERE ra.subscriber_id = o.subscriber_id) AS referred,
       st.stored,
       CASE WHEN st.stored THEN NULL
            ELSE nextval(pg_get_serial_sequence('payments', 'id')) END AS new_payment_id
FROM (SELECT id, reference, subscriber_id, channel_id, amount_minor, currency, status,
             hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id,
             list_price_minor, discount_minor, promo_code_id, promo_held_until,
             (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id)
                 AS promo_code,
             xmin::text AS row_version
      FROM orders WHERE reference = $1) AS o
CROSS JOIN (SELECT EXISTS (SELECT 1 FROM payments sp
                           WHERE sp.gateway = $2 AND sp.external_id = $3) AS stored) AS st
JOIN channels c ON c.id = o.channel_id
JOIN subscribers s ON s.id = o.subscriber_id
JOIN plans p ON p.id = o.plan_id


-- statement
SELECT o.amount_minor, o.list_price_minor, o.currency, o.channel_id,
            coalesce(c.title, p.title) AS name,
            coalesce(c.translations, p.translations) AS translations
     FROM orders o
     JOIN plans p ON p.id = o.plan_id
     LEFT JOIN channels c ON c.id = p.default_of
     WHERE o.subscriber_id = $1 AND o.promo_code_id = $2 AND o.status = 'pending'
       AND o.superseded_at IS NULL AND o.promo_held_until > statement_timestamp()
     ORDER BY o.id DESC LIMIT 1

-- statement
SELECT o.id AS order_id, o.subscriber_id, a.delay_minutes
     FROM automations a
     JOIN orders o
       ON o.status = 'pending' AND o.via_bot AND o.superseded_at IS NULL AND o.amount_minor > 0
     JOIN subscribers s ON s.id = o.subscriber_id
     WHERE a.kind = 'unpaid_checkout'
       AND a.enabled
       AND NOT s.marketing_opt_out
       AND s.reachable
       AND EXISTS (
               SELECT 1
               FROM effects e
               WHERE e.order_id = o.id
                 AND e.kind = 'invoice'
                 AND e.status = 'done'
                 AND e.done_at <= statement_timestamp() - make_interval(mins => a.delay_minutes)
                 AND e.done_at > statement_timestamp() - make_interval(mins => a.delay_minutes)
                                 - interval '1 day')
       AND NOT EXISTS (
               SELECT 1
               FROM orders p
               WHERE p.subscriber_id = o.subscriber_id
                 AND p.channel_id = o.channel_id
                 AND p.status = 'paid'
                 AND p.paid_at > o.created_at)
       AND NOT EXISTS (SELECT 1 FROM messages x WHERE x.dedupe_key = 'unpaid_checkout:' || o.id)
     ORDER BY o.id
     LIMIT 500

-- statement
SELECT o.id AS order_id_named, o.subscriber_id AS order_subscriber_id,
             ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = o.plan_id ORDER BY pc.channel_id) AS order_channel_ids,
             CASE WHEN true THEN pg_advisory_xact_lock(o.subscriber_id, COALESCE((SELECT min(pc.channel_id) FROM plan_channels pc
                                        WHERE pc.plan_id = o.plan_id), o.channel_id)) IS NULL END AS pair_locked FROM orders o WHERE o.id = $1

-- statement
SELECT o.id AS order_id_named, o.subscriber_id AS order_subscriber_id,
             ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = o.plan_id ORDER BY pc.channel_id) AS order_channel_ids,
             CASE WHEN true THEN pg_advisory_xact_lock(o.subscriber_id, COALESCE((SELECT min(pc.channel_id) FROM plan_channels pc
                                        WHERE pc.plan_id = o.plan_id), o.channel_id)) IS NULL END AS pair_locked FROM orders o WHERE o.reference = $1

-- statement
SELECT o.status, o.reference, o.amount_minor, o.currency, o.invoice_link,
         extract(epoch FROM o.created_at)::bigint AS order_date,
         c.id AS channel_id,
         CASE WHEN p.default_of IS NULL THEN p.title ELSE c.title END AS title,
         CASE WHEN p.default_of IS NULL THEN p.description ELSE c.description END
             AS description,
         p.period_days, p.recurring,
         floor(extract(epoch FROM CASE
             WHEN o.hold_until IS NOT NULL THEN o.hold_until - statement_timestamp()
             ELSE o.created_at + make_interval(secs => $2) - statement_timestamp()
         END))::bigint AS open_secs,
         extract(epoch FROM COALESCE(o.hold_until,
             o.created_at + make_interval(secs => $2)))::bigint AS closes_at,
         o.superseded_at IS NOT NULL AS superseded,
         s.language,
         CASE WHEN p.default_of IS NULL THEN p.translations ELSE c.translations END
             AS translations FROM orders o JOIN channels c ON c.id = o.channel_id JOIN plans p ON p.id = o.plan_id
          JOIN subscribers s ON s.id = o.subscriber_id
     WHERE o.id = $1

-- statement
SELECT ok, error_message FROM pre_checkout_decisions WHERE query_id = $1

-- statement
SELECT outcome, external_id FROM payments WHERE id = $1

-- statement
SELECT p.crypto_prices, o.amount_minor, o.list_price_minor
     FROM orders o JOIN plans p ON p.id = o.plan_id
     WHERE o.id = $1

-- statement
SELECT p.id FROM plan_channels pc JOIN plans p ON p.id = pc.plan_id
     WHERE pc.channel_id = $1 AND p.default_of IS DISTINCT FROM $1 AND p.currency <> $2
     ORDER BY p.id LIMIT 5

-- statement
SELECT p.id, coalesce(c.title, p.title) AS name,
            coalesce(c.translations, p.translations) AS translations
     FROM plans p LEFT JOIN channels c ON c.id = p.default_of
     WHERE p.active AND p.kind = 'paid'
       AND ($1::bigint[] IS NULL OR p.id = ANY($1))
       AND ($2::text IS NULL OR p.currency = $2)
     ORDER BY p.price_minor, p.position, p.id LIMIT 4

-- statement
SELECT p.id, p.gateway, p.external_id, p.amount_minor, p.currency,
            p.outcome, r.reason
     FROM payments p JOIN staff_refunds r ON r.payment_id = p.id
     WHERE p.id = $1

-- statement
SELECT p.id, p.title, p.description, p.kind, p.price_minor, p.currency, p.period_days, p.recurring, p.active, p.position, p.default_of IS NOT NULL AS is_default, p.created_at, p.updated_at, p.translations, p.crypto_prices, ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = p.id ORDER BY pc.position) AS channel_ids FROM plans p
     WHERE p.active AND EXISTS (SELECT 1 FROM plan_channels pc
                                WHERE pc.plan_id = p.id AND pc.channel_id = $1)
     ORDER BY p.price_minor, p.position, p.id

-- statement
SELECT p.id, p.title, p.description, p.kind, p.price_minor, p.currency, p.period_days, p.recurring, p.active, p.position, p.default_of IS NOT NULL AS is_default, p.created_at, p.updated_at, p.translations, p.crypto_prices, ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = p.id ORDER BY pc.position) AS channel_ids FROM plans p
     WHERE p.id > $1
       AND ($2::integer IS NULL OR EXISTS (SELECT 1 FROM plan_channels pc
                                           WHERE pc.plan_id = p.id AND pc.channel_id = $2))
       AND ($3::boolean IS NULL OR p.active = $3)
     ORDER BY p.id LIMIT $4

-- statement
SELECT p.id, p.title, p.description, p.kind, p.price_minor, p.currency, p.period_days, p.recurring, p.active, p.position, p.default_of IS NOT NULL AS is_default, p.created_at, p.updated_at, p.translations, p.crypto_prices, ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = p.id ORDER BY pc.position) AS channel_ids FROM plans p WHERE p.default_of = $1

-- statement
SELECT p.id, p.title, p.description, p.kind, p.price_minor, p.currency, p.period_days, p.recurring, p.active, p.position, p.default_of IS NOT NULL AS is_default, p.created_at, p.updated_at, p.translations, p.crypto_prices, ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = p.id ORDER BY pc.position) AS channel_ids FROM plans p WHERE p.id = $1

-- statement
SELECT p.id, p.title, p.description, p.kind, p.price_minor, p.currency, p.period_days, p.recurring, p.active, p.position, p.default_of IS NOT NULL AS is_default, p.created_at, p.updated_at, p.translations, p.crypto_prices, ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = p.id ORDER BY pc.position) AS channel_ids FROM plans p WHERE p.id = $1 FOR UPDATE OF p

-- statement
SELECT page_url FROM monobank_invoices
     WHERE order_id = $1 AND handed_out AND page_url IS NOT NULL
       AND status IN ('created', 'processing')
       AND valid_until > statement_timestamp() + make_interval(secs => $2)
     ORDER BY created_at DESC LIMIT 1

-- statement
SELECT password_hash FROM staff_accounts WHERE id = $1

-- statement
SELECT payment_id, reason, staff_email, requested_at
     FROM staff_refunds WHERE payment_id = $1

-- statement
SELECT payment_id, state, url FROM fiscal_receipts
     WHERE payment_id = ANY($1) AND kind = $2

-- statement
SELECT pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, pc.max_redemptions, pc.per_buyer_limit, pc.expires_at, pc.first_purchase_only, pc.active, pc.created_at, pc.updated_at, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'paid') AS redemptions, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'pending' AND o.promo_held_until > statement_timestamp()) AS held FROM promo_codes pc
     WHERE pc.id > $1
       AND ($2::boolean IS NULL OR pc.active = $2)
       AND ($3::bigint IS NULL OR EXISTS (
             SELECT 1 FROM plans p
             WHERE p.id = $3 AND p.kind = 'paid'
               AND (pc.plan_ids IS NULL OR p.id = ANY (pc.plan_ids))
               AND (pc.currency IS NULL OR pc.currency = p.currency)))
       AND ($4::text IS NULL OR pc.code = $4)
     ORDER BY pc.id LIMIT $5

-- statement
SELECT pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, pc.max_redemptions, pc.per_buyer_limit, pc.expires_at, pc.first_purchase_only, pc.active, pc.created_at, pc.updated_at, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'paid') AS redemptions, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'pending' AND o.promo_held_until > statement_timestamp()) AS held FROM promo_codes pc WHERE pc.id = $1

-- statement
SELECT pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, pc.max_redemptions, pc.per_buyer_limit, pc.expires_at, pc.first_purchase_only, pc.active, pc.created_at, pc.updated_at, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'paid') AS redemptions, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'pending' AND o.promo_held_until > statement_timestamp()) AS held FROM promo_codes pc WHERE pc.id = $1 FOR UPDATE

-- statement
SELECT pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, pc.max_redemptions, pc.per_buyer_limit, pc.first_purchase_only, pc.active, coalesce(pc.expires_at <= statement_timestamp(), false) AS expired, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND (o.status = 'paid' OR (o.status = 'pending' AND o.promo_held_until > statement_timestamp()))) AS uses, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.subscriber_id = $2 AND (o.status = 'paid' OR (o.status = 'pending' AND o.promo_held_until > statement_timestamp()))) AS buyer_uses FROM promo_codes pc
     WHERE pc.code = $1 AND (pc.subscriber_id IS NULL OR pc.subscriber_id = $2)

-- statement
SELECT pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, pc.max_redemptions, pc.per_buyer_limit, pc.first_purchase_only, pc.active, coalesce(pc.expires_at <= statement_timestamp(), false) AS expired, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND (o.status = 'paid' OR (o.status = 'pending' AND o.promo_held_until > statement_timestamp()))) AS uses, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.subscriber_id = $2 AND (o.status = 'paid' OR (o.status = 'pending' AND o.promo_held_until > statement_timestamp()))) AS buyer_uses FROM promo_codes pc WHERE pc.id = $1

-- statement
SELECT pg_advisory_lock($1)

-- statement
SELECT pg_advisory_unlock($1)

-- statement
SELECT pg_advisory_xact_lock(
         hashtextextended('subgate effects ' || $1::bigint || ':' || $2::bigint, 0))

-- statement
SELECT pg_advisory_xact_lock($1, $2)

-- statement
SELECT pg_advisory_xact_lock(hashtextextended('subgate automations', 0))

-- statement
SELECT pg_advisory_xact_lock(hashtextextended('subgate monobank order ' || $1::bigint, 0))

-- statement
SELECT pg_notify('subgate_effects', '<random token>')

-- statement
SELECT pg_xact_status($1::text::xid8) AS status

-- statement
SELECT price_minor, currency, active FROM channels WHERE id = $1

-- statement
SELECT query_id, state,
                answer <> 'queue'
                    AND created_at + make_interval(secs => $2::bigint) > statement_timestamp()
                    AS query_valid,
                answered_at IS NOT NULL AS answered
         FROM join_requests WHERE id = $1

-- statement
SELECT r.id, r.channel_id, r.chat_id, r.user_id, s.id AS subscriber_id
         FROM join_requests r
         LEFT JOIN subscribers s ON s.telegram_user_id = r.user_id
         WHERE r.chat_id = $1 AND r.user_id = $2 AND r.state = 'waiting'

-- statement
SELECT r.id, r.channel_id, r.chat_id, r.user_id, s.id AS subscriber_id
     FROM join_requests r
     JOIN channels c ON c.id = r.channel_id
     LEFT JOIN subscribers s ON s.telegram_user_id = r.user_id
     WHERE r.state = 'waiting'
       AND ((r.created_at + make_interval(secs => $1::bigint) <= statement_timestamp()
              OR EXISTS (SELECT 1 FROM orders o WHERE o.id = r.order_id
                         AND o.status <> 'paid'
                         AND COALESCE(o.hold_until, o.created_at + make_interval(secs => $2::bigint))
                             <= statement_timestamp())) OR EXISTS (SELECT 1 FROM memberships m WHERE m.subscriber_id = s.id
                         AND m.channel_id = r.channel_id AND m.status <> 'expired' AND statement_timestamp() < m.expires_at + make_interval(days => c.grace_period_days)))
     ORDER BY r.created_at
     LIMIT $3

-- statement
SELECT r.id, r.channel_id, r.chat_id, r.user_id, s.id AS subscriber_id, r.answer,
                    r.state, r.order_id, r.requested_at, r.created_at, r.decided_at,
                    r.answered_at
             FROM join_requests r
             LEFT JOIN subscribers s ON s.telegram_user_id = r.user_id
             WHERE ($1::int IS NULL OR r.channel_id = $1)
               AND ($2::text IS NULL OR r.state = $2)
               AND r.id > $3
             ORDER BY r.id
             LIMIT $4

-- statement
SELECT r.id, r.payment_id, r.kind, r.state, r.receipt_id::text AS receipt_id, p.amount_minor, p.currency, pl.id AS plan_id, pl.title AS plan_title, c.title AS channel_title, sale.state AS sale_state, sale.receipt_id::text AS sale_receipt_id
     FROM fiscal_receipts r
     JOIN payments p ON p.id = r.payment_id
     LEFT JOIN orders o ON o.id = p.order_id
     LEFT JOIN plans pl ON pl.id = o.plan_id
     LEFT JOIN channels c ON c.id = p.channel_id
     LEFT JOIN fiscal_receipts sale
            ON sale.payment_id = r.payment_id AND sale.kind = 'sale' AND r.kind = 'return'
     WHERE r.id = $1

-- statement
SELECT r.language, count(*) AS recipients
FROM (
SELECT s.id AS subscriber_id,
       s.telegram_user_id,
       coalesce(s.language, $6) AS language
FROM subscribers s
WHERE NOT s.marketing_opt_out
  AND s.reachable
  AND ($5::text[] IS NULL OR coalesce(s.language, $6) = ANY ($5::text[]))
  AND (
        ($1::integer[] IS NULL AND $2::bigint[] IS NULL AND $3::text[] IS NULL
         AND $4::integer IS NULL)
     OR EXISTS (
            SELECT 1
            FROM memberships m
            WHERE m.subscriber_id = s.id
              AND ($1::integer[] IS NULL OR m.channel_id = ANY ($1::integer[]))
              AND ($2::bigint[] IS NULL OR EXISTS (
                      SELECT 1
                      FROM orders o
                      WHERE o.subscriber_id = s.id
                        AND o.channel_id = m.channel_id
                        AND o.status = 'paid'
                        AND o.plan_id = ANY ($2::bigint[])))
              AND (
                    ($3::text[] IS NULL AND $4::integer IS NULL AND m.status <> 'expired')
                 OR (m.status = 'grace' AND 'grace' = ANY ($3::text[]))
                 OR (m.status = 'active'
                     AND CASE WHEN EXISTS (
                                       SELECT 1
                                       FROM trial_uses t
                                       WHERE t.subscriber_id = s.id
                                         AND t.channel_id = m.channel_id)
                                   AND NOT EXISTS (
                                       SELECT 1
                                       FROM payments p
                                       WHERE p.subscriber_id = s.id
                                         AND p.channel_id = m.channel_id
                                         AND p.outcome = 'applied')
                              THEN 'trial'
                              ELSE 'active'
                         END = ANY ($3::text[]))
                 OR (m.status = 'expired'
                     AND ('expired' = ANY ($3::text[])
                          OR ($3::text[] IS NULL AND $4::integer IS NOT NULL))
                     AND ($4::integer IS NULL
                          OR m.updated_at >= statement_timestamp() - make_interval(days => $4::integer)))))
     OR ('never_paid' = ANY ($3::text[])
         AND $2::bigint[] IS NULL
         AND NOT EXISTS (
                 SELECT 1
                 FROM payments p
                 WHERE p.subscriber_id = s.id
                   AND p.outcome = 'applied'
                   AND ($1::integer[] IS NULL OR p.channel_id = ANY ($1::integer[]))))
      )
) r
GROUP BY r.language

-- statement
SELECT referrer_id, channel_id FROM referral_rewards WHERE id = $1

-- statement
SELECT reply FROM bot_updates
         WHERE update_id = $1 AND created_at >= statement_timestamp() - interval '1 day'

-- statement
SELECT rp.window_days, rp.hold_days, rp.renewal_months,
            rp.buyer_reward_days, rp.max_reward_days_per_month,
            COALESCE(pr.first_percent, rp.first_percent) AS first_percent,
            COALESCE(pr.renewal_percent, rp.renewal_percent) AS renewal_percent,
            a.affiliate_id, f.subscriber_id AS referrer_id, a.attributed_at,
            (SELECT min(q.created_at) FROM payments q
             WHERE q.subscriber_id = $1 AND q.channel_id = $2 AND q.id <> $3
               AND q.outcome = 'applied' AND q.amount_minor > 0) AS first_paid_at,
            COALESCE((SELECT p.affiliate_fee_minor FROM payments p WHERE p.id = $3), 0)
                AS fee_minor,
            statement_timestamp() AS now
     FROM referral_program rp
     JOIN referral_attributions a ON a.subscriber_id = $1
     JOIN affiliates f ON f.id = a.affiliate_id AND f.active
     LEFT JOIN plan_referral_rates pr ON pr.plan_id = $4
     WHERE rp.enabled

-- statement
SELECT s.telegram_user_id FROM star_subscriptions ss
             JOIN subscribers s ON s.id = ss.subscriber_id
             WHERE ss.id = $1

-- statement
SELECT s.telegram_user_id, p.amount_minor, p.currency, p.channel_id,
         pl.title AS plan_title
     FROM payments p
     JOIN subscribers s ON s.id = p.subscriber_id
     LEFT JOIN orders o ON o.id = p.order_id
     LEFT JOIN plans pl ON pl.id = o.plan_id
     WHERE p.id = $1

-- statement
SELECT segment FROM broadcasts WHERE id = $1 AND status = 'scheduled' FOR UPDATE

-- statement
SELECT ss.charge_id, ss.status, ss.cancelled_by, c.id AS channel_id, c.title, m.expires_at AS access_until, s.language, c.translations
     FROM star_subscriptions ss
     JOIN channels c ON c.id = ss.channel_id
     JOIN subscribers s ON s.id = ss.subscriber_id
     LEFT JOIN memberships m
            ON m.subscriber_id = ss.subscriber_id AND m.channel_id = ss.channel_id
           AND m.status <> 'expired'
     WHERE ss.id = $1

-- statement
SELECT state FROM join_requests
     WHERE order_id = $1 AND user_id = $2
     ORDER BY id DESC LIMIT 1

-- statement
SELECT state, count(*) AS n FROM gateway_checks GROUP BY state

-- statement
SELECT statement_timestamp() AS now

-- statement
SELECT status FROM broadcasts WHERE id = $1 FOR UPDATE

-- statement
SELECT status FROM monobank_invoices WHERE invoice_id = $1

-- statement
SELECT status, COALESCE(lease_until > statement_timestamp(), false) AS leased
     FROM effects WHERE id = $1 FOR UPDATE NOWAIT

-- statement
SELECT subscriber_id, channel_id FROM memberships WHERE id = $1

-- statement
SELECT telegram_chat_id FROM channels WHERE id = $1 FOR UPDATE

-- statement
SELECT telegram_user_id FROM subscribers WHERE id = $1

-- statement
SELECT telegram_user_id FROM subscribers WHERE id = $1 FOR UPDATE

-- statement
SELECT title, translations FROM channels WHERE id = $1

-- statement
SELECT to_regclass('schema_migrations') IS NOT NULL

-- statement
SELECT webhook_emit($1, $2::jsonb)

-- statement
SET LOCAL enable_sort = off

-- statement
SET LOCAL lock_timeout = '10s'

-- statement
SET LOCAL lock_timeout = '2s'; SET LOCAL statement_timeout = '3s'

-- statement
SET LOCAL lock_timeout = '5s'; SET LOCAL synchronous_commit = off

-- statement
START TRANSACTION

-- statement
START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- statement
UPDATE affiliates SET name = COALESCE($2, name), active = COALESCE($3, active),
         updated_at = statement_timestamp()
     WHERE id = $1
     RETURNING id, name, subscriber_id, code, active, created_at, updated_at

-- statement
UPDATE audits
     SET checked = $2, counts = $3, rows = $4, heartbeat_at = statement_timestamp()
     WHERE id = $1 AND status = 'running'

-- statement
UPDATE audits
     SET status = $2, error = $3, finished_at = statement_timestamp(),
         heartbeat_at = statement_timestamp()
     WHERE id = $1 AND status = 'running'

-- statement
UPDATE audits
     SET status = 'failed', error = 'interrupted', finished_at = statement_timestamp()
     WHERE status = 'running' AND ($1::integer IS NULL OR channel_id = $1)
       AND heartbeat_at < statement_timestamp() - make_interval(secs => $2)

-- statement
UPDATE audits SET heartbeat_at = statement_timestamp()
     WHERE id = $1 AND status = 'running'

-- statement
UPDATE audits SET total = $2, heartbeat_at = statement_timestamp()
     WHERE id = $1 AND status = 'running'

-- statement
UPDATE automations
     SET enabled = $2, delay_minutes = $3, texts = $4, promo = $5,
         updated_at = statement_timestamp()
     WHERE kind = $1

-- statement
UPDATE bot_code_guesses SET wrong = wrong + 1 WHERE who = $1 OR who = 0

-- statement
UPDATE broadcasts
     SET status = 'cancelled', cancelled_at = statement_timestamp()
     WHERE id = $1

-- statement
UPDATE broadcasts
     SET status = 'sending', started_at = statement_timestamp(), recipients = $2
     WHERE id = $1

-- statement
UPDATE broadcasts b
     SET status = 'finished', finished_at = statement_timestamp()
     WHERE b.status = 'sending'
       AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.broadcast_id = b.id AND m.outcome IS NULL)
     RETURNING b.id

-- statement
UPDATE channels
     SET telegram_status = $2, telegram_status_at = statement_timestamp()
     WHERE telegram_chat_id = $1 AND telegram_status <> $2
     RETURNING id

-- statement
UPDATE channels SET
                         telegram_chat_id = COALESCE($2, telegram_chat_id),
                         title = COALESCE($3, title),
                         price_minor = COALESCE($4, price_minor),
                         currency = COALESCE($5, currency),
                         billing_period_days = COALESCE($6, billing_period_days),
                         grace_period_days = COALESCE($7, grace_period_days),
                         seat_limit = CASE WHEN $8 THEN $9 ELSE seat_limit END,
                         active = COALESCE($10, active),
                         invite_link = CASE WHEN $2 <> telegram_chat_id THEN NULL
                                            ELSE invite_link END,
                         description = CASE WHEN $11 THEN $12 ELSE description END,
                         recurring = COALESCE($13, recurring),
                         translations = COALESCE($14, translations),
                         door = COALESCE($15, door),
                         updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING id, telegram_chat_id, title, price_minor, currency, billing_period_days, grace_period_days, seat_limit, active, created_at, updated_at, description, recurring, telegram_status, translations, door

-- statement
UPDATE channels SET invite_link = NULL
     WHERE telegram_chat_id = $1 AND invite_link IS NOT NULL
       AND ($2::text IS NULL OR invite_link = $2)
     RETURNING id

-- statement
UPDATE cryptopay_invoices
     SET next_check_at = LEAST(
             statement_timestamp() + make_interval(secs => $2),
             GREATEST(expires_at + interval '5 seconds',
                      statement_timestamp() + interval '30 seconds')),
         last_error = $3
     WHERE invoice_id = $1 AND status = 'active'

-- statement
UPDATE cryptopay_invoices SET status = $2, last_error = NULL
     WHERE invoice_id = $1 AND status = 'active'

-- statement
UPDATE effects
     SET next_attempt_at = statement_timestamp(), updated_at = statement_timestamp()
     WHERE chat_id = $1 AND status = 'pending' AND next_attempt_at > statement_timestamp()

-- statement
UPDATE effects SET
         next_attempt_at = statement_timestamp() + make_interval(secs => $2),
         last_error = $3, lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $4 AND status = 'pending'
     RETURNING status

-- statement
UPDATE effects SET attempts = attempts + 1, last_error = $2,
         first_failed_at = COALESCE(first_failed_at, statement_timestamp()),
         status = CASE WHEN $3 OR COALESCE(first_failed_at, statement_timestamp())
                                  <= statement_timestamp() - make_interval(secs => $4)
                       THEN 'failed' ELSE 'pending' END,
         next_attempt_at = statement_timestamp() + make_interval(secs => $5),
         payload = CASE WHEN $6 THEN payload || '{"verify": true}' ELSE payload END,
         lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $7 AND status = 'pending'
     RETURNING status

-- statement
UPDATE effects SET lease_until = statement_timestamp() + make_interval(secs => $2),
         lease_token = lease_token + 1
     WHERE id = $1
     RETURNING id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload, status, attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, done_at, lease_until, first_failed_at, lease_token AS token

-- statement
UPDATE effects SET next_attempt_at = statement_timestamp(), last_error = $2,
         payload = CASE WHEN $3 THEN payload || '{"verify": true}' ELSE payload END,
         lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $4 AND status = 'pending'
       AND (NOT $5 OR chat_id IN (SELECT telegram_chat_id FROM channels WHERE telegram_status = 'no_rights'))
     RETURNING status

-- statement
UPDATE effects SET status = 'done', attempts = attempts + 1,
         done_at = statement_timestamp(), updated_at = statement_timestamp(),
         lease_until = NULL,
         payload = CASE WHEN $2::text IS NULL THEN payload
                        ELSE payload || jsonb_build_object('note', $2::text) END
     WHERE id = $1 AND lease_token = $3 AND status = 'pending'
     RETURNING status,
         extract(epoch FROM statement_timestamp() - created_at)::float8 AS age_secs

-- statement
UPDATE effects e SET lease_until = NULL
     FROM unnest($1::bigint[], $2::bigint[]) AS c(id, token)
     WHERE e.id = c.id AND e.lease_token = c.token AND e.status = 'pending'

-- statement
UPDATE effects e SET lease_until = statement_timestamp() + make_interval(secs => $3)
     FROM unnest($1::bigint[], $2::bigint[]) AS c(id, token)
     WHERE e.id = c.id AND e.lease_token = c.token AND e.status = 'pending'
     RETURNING e.id

-- statement
UPDATE fiscal_receipts
     SET state = 'done', fiscal_code = $2, url = $3, attempts = attempts + 1, last_error = NULL,
         done_at = statement_timestamp()
     WHERE id = $1 AND state <> 'done'
     RETURNING payment_id, kind

-- statement
UPDATE fiscal_receipts
     SET state = 'failed', attempts = attempts + 1, last_error = $2
     WHERE id = $1 AND state <> 'done'

-- statement
UPDATE fiscal_receipts
     SET state = 'pending', attempts = attempts + 1, last_error = $2,
         receipt_id = CASE WHEN $3 THEN gen_random_uuid() ELSE receipt_id END
     WHERE id = $1 AND state <> 'done'

-- statement
UPDATE fiscal_register
     SET enabled = $1, updated_at = statement_timestamp()
     WHERE enabled IS DISTINCT FROM $1

-- statement
UPDATE gateway_checks SET
         state = $2, last_status = $3, payment_id = $4, last_error = NULL,
         attempts = attempts + 1,
         last_checked_at = statement_timestamp(), updated_at = statement_timestamp()
     WHERE order_id = $1 AND state = 'chasing'

-- statement
UPDATE gateway_checks g
     SET next_check_at = statement_timestamp() + make_interval(secs => $1)
     FROM orders o
     WHERE o.id = g.order_id
       AND g.order_id = (
           SELECT c.order_id FROM gateway_checks c JOIN orders p ON p.id = c.order_id
           WHERE c.state = 'chasing' AND c.next_check_at <= statement_timestamp()
             AND p.status = 'pending'
           ORDER BY c.next_check_at LIMIT 1
           FOR UPDATE OF c SKIP LOCKED)
     RETURNING g.order_id, o.reference

-- statement
UPDATE gateway_checks g
     SET state = 'settled', updated_at = statement_timestamp()
     FROM orders o
     WHERE o.id = g.order_id AND g.state = 'chasing' AND o.status <> 'pending'

-- statement
UPDATE gateway_checks g SET
         attempts = g.attempts + 1,
         last_checked_at = statement_timestamp(),
         last_status = COALESCE($3, g.last_status),
         last_error = $4,
         state = CASE WHEN statement_timestamp() >= (COALESCE(o.purchase_link_at, g.created_at) + make_interval(secs => $2)) THEN 'gave_up' ELSE 'chasing' END,
         next_check_at = LEAST(statement_timestamp() + make_interval(secs => $5), (COALESCE(o.purchase_link_at, g.created_at) + make_interval(secs => $2))),
         updated_at = statement_timestamp()
     FROM orders o
     WHERE o.id = g.order_id AND g.order_id = $1 AND g.state = 'chasing'
     RETURNING g.state

-- statement
UPDATE idempotency_keys SET response_status = $3, response_body = $4
     WHERE staff_id = $1 AND key = $2

-- statement
UPDATE join_requests SET answered_at = statement_timestamp()
         WHERE id = $1 AND answered_at IS NULL

-- statement
UPDATE join_requests j SET order_id = $3
     FROM orders o
     WHERE j.reference = $1 AND j.user_id = $2 AND j.state = 'waiting'
       AND o.id = $3
       AND EXISTS (SELECT 1 FROM plan_channels pc
                   WHERE pc.plan_id = o.plan_id AND pc.channel_id = j.channel_id)
     RETURNING j.id

-- statement
UPDATE memberships
     SET expires_at = expires_at - make_interval(days => $2),
         status = CASE WHEN expires_at - make_interval(days => $2) <= statement_timestamp()
                       THEN $3 ELSE status END,
         updated_at = statement_timestamp()
     WHERE id = $1 AND isfinite(expires_at) RETURNING id, subscriber_id, channel_id, status, expires_at, created_at, updated_at

-- statement
UPDATE memberships SET expires_at = COALESCE($2, expires_at),
         status = COALESCE($3, status), updated_at = statement_timestamp()
     WHERE id = $1 RETURNING id, subscriber_id, channel_id, status, expires_at, created_at, updated_at

-- statement
UPDATE messages
     SET outcome = $2, text = $3, note = $4, sent_at = statement_timestamp(),
         paid = paid AND $2 = 'sent'
     WHERE id = $1 AND outcome IS NULL
     RETURNING id, subscriber_id, kind, broadcast_id, outcome, text, note, created_at, sent_at

-- statement
UPDATE messages m
     SET attempted_at = statement_timestamp(), paid = $2
     WHERE m.id = $1
       AND m.outcome IS NULL
       AND m.attempted_at IS NULL
       AND EXISTS (SELECT 1 FROM subscribers s
                   WHERE s.id = m.subscriber_id AND NOT s.marketing_opt_out AND s.reachable)
       AND (m.broadcast_id IS NULL
            OR (SELECT b.status FROM broadcasts b WHERE b.id = m.broadcast_id) = 'sending')
     RETURNING m.id

-- statement
UPDATE monobank_invoices
     SET next_check_at = statement_timestamp() + make_interval(secs => $1)
     WHERE invoice_id = (
         SELECT invoice_id FROM monobank_invoices
         WHERE chase = 'chasing' AND next_check_at <= statement_timestamp()
         ORDER BY next_check_at LIMIT 1
         FOR UPDATE SKIP LOCKED)
     RETURNING invoice_id, attempts

-- statement
UPDATE monobank_invoices SET
         attempts = attempts + 1,
         last_checked_at = statement_timestamp(),
         last_error = $2,
         chase = CASE WHEN statement_timestamp() >= created_at + make_interval(secs => $3)
                      THEN 'gave_up' ELSE 'chasing' END,
         next_check_at = LEAST(statement_timestamp() + make_interval(secs => $4),
                               created_at + make_interval(secs => $3)),
         updated_at = statement_timestamp()
     WHERE invoice_id = $1 AND chase = 'chasing'
     RETURNING chase

-- statement
UPDATE monobank_invoices SET
         attempts = attempts + 1, last_checked_at = statement_timestamp(),
         updated_at = statement_timestamp()
     WHERE invoice_id = $1

-- statement
UPDATE monobank_invoices SET
         chase = $2, payment_id = COALESCE($3, payment_id), last_error = NULL,
         updated_at = statement_timestamp()
     WHERE invoice_id = $1 AND chase = 'chasing'

-- statement
UPDATE orders
     SET hold_until = CASE WHEN hold_until > statement_timestamp() THEN statement_timestamp()
                           ELSE hold_until END,
         promo_held_until = CASE WHEN promo_held_until > statement_timestamp()
                                 THEN statement_timestamp() ELSE promo_held_until END,
         superseded_at = CASE WHEN via_bot
                              THEN COALESCE(superseded_at, statement_timestamp()) END
     WHERE id = $1 AND status = $2
       AND (hold_until > statement_timestamp() OR promo_held_until > statement_timestamp()
            OR (via_bot AND superseded_at IS NULL))

-- statement
UPDATE orders
     SET hold_until = statement_timestamp() + make_interval(secs => $2::float8),
         held_at = statement_timestamp()
     WHERE id = $1 RETURNING id, reference, subscriber_id, channel_id, amount_minor, currency, status, hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id, list_price_minor, discount_minor, promo_code_id, promo_held_until, (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id) AS promo_code

-- statement
UPDATE orders
     SET promo_held_until = statement_timestamp() + make_interval(secs => $2::float8)
     WHERE id = $1 AND status = 'pending' AND promo_code_id IS NOT NULL
       AND (promo_held_until IS NULL OR promo_held_until <= statement_timestamp())

-- statement
UPDATE orders
     SET purchase_link_at = COALESCE(purchase_link_at, statement_timestamp())
     WHERE id = $1
     RETURNING purchase_link_at

-- statement
UPDATE orders
     SET status = 'paid', paid_at = statement_timestamp(), promo_held_until = NULL
     WHERE id = $1

-- statement
UPDATE orders SET invoice_link = $2 WHERE id = $1 AND invoice_link IS NULL

-- statement
UPDATE orders SET status = $2, hold_until = NULL, promo_held_until = NULL
     WHERE id = $1 RETURNING id, reference, subscriber_id, channel_id, amount_minor, currency, status, hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id, list_price_minor, discount_minor, promo_code_id, promo_held_until, (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id) AS promo_code

-- statement
UPDATE payments
     SET outcome = $2, reason = $3, updated_at = statement_timestamp()
     WHERE id = $1

-- statement
UPDATE payments
     SET outcome = $2, reason = $3, updated_at = statement_timestamp()
     WHERE id = $1 AND outcome = $4

-- statement
UPDATE payments
     SET outcome = $3, reason = $4, updated_at = statement_timestamp()
     WHERE gateway = $1 AND external_id = $2 AND outcome = $5
     RETURNING id

-- statement
UPDATE payments SET affiliate_fee_minor = $2
     WHERE id = $1 AND affiliate_fee_minor <> $2
     RETURNING id

-- statement
UPDATE payments SET outcome = $2, updated_at = statement_timestamp()
     WHERE id = $1 AND outcome = $3

-- statement
UPDATE payments p SET outcome = $3, updated_at = statement_timestamp()
     FROM unnest($1::text[], $2::text[]) AS r(id, payer)
     WHERE p.gateway = $4 AND p.external_id = r.id
       AND p.outcome = $5
       AND (p.payer = r.payer OR (p.payer IS NULL AND EXISTS (
           SELECT 1 FROM subscribers s
           WHERE s.id = p.subscriber_id AND s.telegram_user_id::text = r.payer)))

-- statement
UPDATE plans SET
         title = COALESCE($2, title),
         description = CASE WHEN $3 THEN $4 ELSE description END,
         kind = COALESCE($5, kind),
         price_minor = COALESCE($6, price_minor),
         currency = COALESCE($7, currency),
         period_days = CASE WHEN $8 THEN $9 ELSE period_days END,
         recurring = COALESCE($10, recurring),
         active = COALESCE($11, active),
         position = COALESCE($12, position),
         translations = COALESCE($13, translations),
         crypto_prices = CASE WHEN $14 THEN $15 ELSE crypto_prices END,
         updated_at = statement_timestamp()
     WHERE id = $1

-- statement
UPDATE referral_program SET
         enabled = COALESCE($1, enabled),
         attribution = COALESCE($2, attribution),
         window_days = COALESCE($3, window_days),
         hold_days = COALESCE($4, hold_days),
         first_percent = COALESCE($5, first_percent),
         renewal_percent = COALESCE($6, renewal_percent),
         renewal_months = COALESCE($7, renewal_months),
         buyer_links = COALESCE($8, buyer_links),
         buyer_reward_days = CASE WHEN $9 THEN $10 ELSE buyer_reward_days END,
         max_reward_days_per_month = CASE WHEN $11 THEN $12 ELSE max_reward_days_per_month END,
         updated_at = statement_timestamp()
     RETURNING enabled, attribution, window_days, hold_days, first_percent, renewal_percent, renewal_months, buyer_links, buyer_reward_days, max_reward_days_per_month, updated_at

-- statement
UPDATE referral_program SET enabled = true, buyer_reward_days = 7;
             INSERT INTO affiliates (name, code, subscriber_id) VALUES ('Friend', 'FRIEND', 9);
             INSERT INTO referral_attributions (subscriber_id, affiliate_id)
             SELECT 10, id FROM affiliates WHERE code = 'FRIEND';

-- statement
UPDATE referral_rewards SET granted_at = statement_timestamp() WHERE id = $1

-- statement
UPDATE referral_rewards SET reversed_at = statement_timestamp()
     WHERE payment_id = $1 AND reversed_at IS NULL
     RETURNING id, referrer_id, granted_at IS NOT NULL AS granted

-- statement
UPDATE referral_rewards SET taken_back_at = statement_timestamp() WHERE id = $1

-- statement
UPDATE staff_accounts
     SET password_hash = $2, token_version = token_version + 1, updated_at = statement_timestamp()
     WHERE id = $1 RETURNING token_version

-- statement
UPDATE staff_accounts
     SET role = COALESCE($2, role), disabled = COALESCE($3, disabled),
         token_version = token_version + CASE WHEN $4 THEN 1 ELSE 0 END,
         updated_at = statement_timestamp()
     WHERE id = $1
     RETURNING id, email, role, disabled, created_at, updated_at

-- statement
UPDATE staff_accounts SET password_hash = $2 WHERE email = $1
     RETURNING id

-- statement
UPDATE staff_accounts SET token_version = token_version + 1
     WHERE id = $1

-- statement
UPDATE star_reconcile SET next_offset = $1, last_run_at = $2

-- statement
UPDATE star_subscriptions
     SET expires_at = COALESCE($2, GREATEST(expires_at, LEAST($4::timestamptz,
                                                                statement_timestamp()))
                                   + make_interval(secs => $3)),
         updated_at = statement_timestamp()
     WHERE id = $1
     RETURNING expires_at

-- statement
UPDATE star_subscriptions
     SET status = $3, cancelled_by = $2, cancelled_at = statement_timestamp(),
         refused_reason = $4, updated_at = statement_timestamp()
     WHERE id = $1 RETURNING id, order_id, subscriber_id, channel_id, charge_id, expires_at, status, cancelled_by, cancelled_at, applied, refused_reason, created_at, updated_at

-- statement
UPDATE star_subscriptions
     SET status = 'active', cancelled_by = NULL, cancelled_at = NULL,
         updated_at = statement_timestamp()
     WHERE id = $1

-- statement
UPDATE subscribers
     SET language = $2, updated_at = statement_timestamp()
     WHERE id = $1 AND language IS DISTINCT FROM $2

-- statement
UPDATE subscribers
     SET marketing_opt_out = true, updated_at = statement_timestamp()
     WHERE id = $1 AND NOT marketing_opt_out

-- statement
UPDATE subscribers
     SET reachable = false, updated_at = statement_timestamp()
     WHERE telegram_user_id = $1 AND reachable

-- statement
UPDATE subscribers SET
                         telegram_user_id = COALESCE($2, telegram_user_id),
                         username = CASE WHEN $3 THEN $4 ELSE username END,
                         display_name = CASE WHEN $5 THEN $6 ELSE display_name END,
                         language = CASE WHEN $7 THEN $8 ELSE language END,
                         updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING id, telegram_user_id, username, display_name, language, marketing_opt_out, reachable, created_at, updated_at

-- statement
UPDATE webhook_deliveries
     SET status = 'pending', attempts = 0, next_attempt_at = statement_timestamp(),
         updated_at = statement_timestamp()
     WHERE id = $1
       AND (status <> 'pending'
            OR (next_attempt_at > statement_timestamp()
                AND (leased_until IS NULL OR leased_until <= statement_timestamp())))
     RETURNING id

-- statement
UPDATE webhook_deliveries SET
         attempts = attempts + 1, last_status = $2, last_error = $3,
         status = CASE WHEN $4::bigint IS NULL THEN 'failed' ELSE 'pending' END,
         next_attempt_at = CASE WHEN $4::bigint IS NULL THEN next_attempt_at
             ELSE statement_timestamp() + make_interval(secs => $4::bigint) END,
         leased_until = NULL,
         updated_at = statement_timestamp()
     WHERE id = $1

-- statement
UPDATE webhook_endpoints SET
         failing_since = COALESCE(failing_since, statement_timestamp()),
         disabled_reason = CASE
             WHEN disabled_at IS NOT NULL THEN disabled_reason
             WHEN $2 THEN 'gone'
             WHEN COALESCE(failing_since, statement_timestamp())
                  <= statement_timestamp() - make_interval(days => $3) THEN 'failing'
         END,
         disabled_at = CASE
             WHEN disabled_at IS NOT NULL THEN disabled_at
             WHEN $2 OR COALESCE(failing_since, statement_timestamp())
                  <= statement_timestamp() - make_interval(days => $3)
                 THEN statement_timestamp()
         END,
         updated_at = statement_timestamp()
     WHERE id = $1 RETURNING disabled_reason

-- statement
UPDATE webhook_endpoints SET
         previous_secret = secret,
         previous_secret_until = statement_timestamp() + make_interval(hours => $3),
         secret = $2, updated_at = statement_timestamp()
     WHERE id = $1 RETURNING id, url, description, event_types, disabled_at IS NULL AS enabled, disabled_reason,
         failing_since,
         CASE WHEN previous_secret_until > statement_timestamp() THEN previous_secret_until END
             AS previous_secret_until,
         created_at, updated_at

-- statement
UPDATE webhook_endpoints SET
         url = COALESCE($2, url),
         description = CASE WHEN $3 THEN $4 ELSE description END,
         event_types = COALESCE($5, event_types),
         disabled_at = CASE WHEN $6::boolean IS NULL THEN disabled_at
                            WHEN $6 THEN NULL
                            ELSE COALESCE(disabled_at, statement_timestamp()) END,
         disabled_reason = CASE WHEN $6::boolean IS NULL THEN disabled_reason
                                WHEN $6 THEN NULL
                                ELSE COALESCE(disabled_reason, 'staff') END,
         failing_since = CASE WHEN $6 THEN NULL ELSE failing_since END,
         updated_at = statement_timestamp()
     WHERE id = $1 RETURNING id, url, description, event_types, disabled_at IS NULL AS enabled, disabled_reason,
         failing_since,
         CASE WHEN previous_secret_until > statement_timestamp() THEN previous_secret_until END
             AS previous_secret_until,
         created_at, updated_at

-- statement
WITH b AS (
         SELECT id, paid_reserved, paid_max_stars * 10 AS cap
         FROM broadcasts
         WHERE id = $1 AND status = 'sending' AND paid_max_stars IS NOT NULL
         FOR UPDATE
     )
     UPDATE broadcasts x
     SET paid_reserved = LEAST(b.paid_reserved + $2, b.cap)
     FROM b
     WHERE x.id = b.id AND b.paid_reserved < b.cap
     RETURNING x.paid_reserved - b.paid_reserved AS granted

-- statement
WITH bought AS (
         SELECT bool_or(e.expires_at_after = 'infinity'
                        AND e.expires_at_before IS DISTINCT FROM 'infinity') AS for_life,
                max(e.expires_at_before)
                    FILTER (WHERE e.expires_at_after = 'infinity'
                                  AND e.expires_at_before IS DISTINCT FROM 'infinity')
                    AS before_life,
                COALESCE(sum(extract(epoch FROM e.expires_at_after)
                             - extract(epoch FROM GREATEST(e.expires_at_before, e.at)))
                         FILTER (WHERE e.expires_at_after <> 'infinity'), 0) AS secs,
                bool_or(e.from_status IS NULL OR e.from_status = $4) AS revived,
                max(e.id) AS last_event
         FROM membership_events e
         WHERE e.membership_id = $1 AND e.payment_id = $2 AND e.cause = $3
     ), target AS (
         SELECT m.id,
                CASE WHEN b.for_life
                     THEN LEAST(m.expires_at, GREATEST(b.before_life, statement_timestamp()))
                     ELSE m.expires_at
                          - interval '1 microsecond' * round(b.secs * 1000000)::float8 END
                    AS expires_at,
                b.revived AND NOT EXISTS (
                    SELECT 1 FROM membership_events l
                    WHERE l.membership_id = m.id AND l.id > b.last_event
                      AND l.cause NOT IN ($5, $6)) AS ends
         FROM memberships m CROSS JOIN bought b
         WHERE m.id = $1 AND (b.for_life OR b.secs > 0)
     )
     UPDATE memberships m
     SET expires_at = t.expires_at,
         status = CASE WHEN t.ends OR t.expires_at <= statement_timestamp() THEN $4
                       ELSE m.status END,
         updated_at = statement_timestamp()
     FROM target t
     WHERE m.id = t.id AND (m.expires_at <> t.expires_at OR (t.ends AND m.status <> $4))
     RETURNING m.id, m.subscriber_id, m.channel_id, m.status, m.expires_at, m.created_at, m.updated_at

-- statement
WITH d AS (
         UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1,
             last_status = $2, last_error = NULL, leased_until = NULL,
             updated_at = statement_timestamp()
         WHERE id = $1 RETURNING endpoint_id
     )
     UPDATE webhook_endpoints e SET failing_since = NULL
     FROM d WHERE e.id = d.endpoint_id AND e.failing_since IS NOT NULL

-- statement
WITH days AS (
    SELECT delta, renewed, expired FROM stats_member_days
    WHERE day >= ((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date - 30
      AND day < ((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date
    UNION ALL
    SELECT delta, renewed, expired FROM (
        SELECT day, channel_id, sum(new)::bigint AS new, sum(renewed)::bigint AS renewed,
               sum(expired)::bigint AS expired, sum(delta)::bigint AS delta,
               sum(trials)::bigint AS trials_started, sum(conversions)::bigint AS trials_converted
        FROM (
            SELECT (e.at AT TIME ZONE 'UTC')::date AS day, m.channel_id,
                   count(*) FILTER (WHERE e.from_status IS NULL) AS new,
                   count(*) FILTER (WHERE e.cause = 'payment' AND e.from_status IS NOT NULL)
                       AS renewed,
                   count(*) FILTER (WHERE e.to_status = 'expired'
                                      AND e.from_status IS DISTINCT FROM 'expired') AS expired,
                   sum((CASE WHEN e.to_status <> 'expired' THEN 1 ELSE 0 END
                        - CASE WHEN e.from_status IS NOT NULL AND e.from_status <> 'expired' THEN 1 ELSE 0 END))
                       AS delta,
                   0 AS trials, 0 AS conversions
            FROM membership_events e JOIN memberships m ON m.id = e.membership_id
            WHERE e.at >= (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC')
              AND e.at < 'infinity'
            GROUP BY 1, 2
            UNION ALL
            SELECT (created_at AT TIME ZONE 'UTC')::date, channel_id, 0, 0, 0, 0, count(*), 0
            FROM trial_uses
            WHERE created_at >= (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC')
              AND created_at < 'infinity'
            GROUP BY 1, 2
            UNION ALL
            SELECT (p.paid_at AT TIME ZONE 'UTC')::date, p.channel_id, 0, 0, 0, 0, 0, count(*)
            FROM payments p
            JOIN trial_uses t ON t.subscriber_id = p.subscriber_id
                             AND t.channel_id = p.channel_id AND t.created_at < p.paid_at
            WHERE p.paid_at >= (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC')
              AND p.paid_at < 'infinity'
              AND p.outcome = 'applied' AND p.amount_minor > 0
              AND NOT EXISTS (
                  SELECT 1 FROM payments q
                  WHERE q.subscriber_id = p.subscriber_id AND q.channel_id = p.channel_id
                    AND q.outcome = 'applied' AND q.amount_minor > 0
                    AND q.paid_at > t.created_at
                    AND (q.paid_at, q.id) < (p.paid_at, p.id))
            GROUP BY 1, 2
        ) x
        GROUP BY day, channel_id
    ) raw
)
SELECT coalesce(sum(delta), 0)::bigint AS delta,
       coalesce(sum(renewed), 0)::bigint AS renewed,
       coalesce(sum(expired), 0)::bigint AS expired
FROM days


-- statement
WITH done AS (
         UPDATE effects e SET status = 'done', attempts = attempts + 1,
         done_at = statement_timestamp(), updated_at = statement_timestamp(),
         lease_until = NULL
         FROM unnest($1::bigint[], $2::bigint[]) AS d(id, token)
         WHERE e.id = d.id AND e.lease_token = d.token AND e.status = 'pending'
         RETURNING e.id),
     decided AS (
         UPDATE messages m SET outcome = 'sent', text = s.text, note = NULL,
             sent_at = statement_timestamp()
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS s(effect_id, message_id, text)
         WHERE m.id = s.message_id AND m.outcome IS NULL
           AND s.effect_id IN (SELECT id FROM done)
         RETURNING m.id),
     marked AS (UPDATE messages m
     SET attempted_at = statement_timestamp(), paid = $6
     WHERE m.id = $5
       AND m.outcome IS NULL
       AND m.attempted_at IS NULL
       AND EXISTS (SELECT 1 FROM subscribers s
                   WHERE s.id = m.subscriber_id AND NOT s.marketing_opt_out AND s.reachable)
       AND (m.broadcast_id IS NULL
            OR (SELECT b.status FROM broadcasts b WHERE b.id = m.broadcast_id) = 'sending')
     RETURNING m.id)
     SELECT array(SELECT id FROM done) AS done,
            (SELECT count(*) FROM decided) AS decided,
            EXISTS (SELECT 1 FROM marked) AS marked

-- statement
WITH due AS (
         SELECT id AS due_id FROM effects
         WHERE status = 'pending' AND (CASE WHEN kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') THEN 0
              WHEN kind = 'member_message' THEN 2 ELSE 1 END) = 2
           AND next_attempt_at <= statement_timestamp()
           AND (lease_until IS NULL OR lease_until <= statement_timestamp())
           AND NOT (id = ANY($1))
         ORDER BY (CASE WHEN kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') THEN 0
              WHEN kind = 'member_message' THEN 2 ELSE 1 END), next_attempt_at, id
         LIMIT $2
         FOR UPDATE SKIP LOCKED)
     UPDATE effects SET lease_until = statement_timestamp() + make_interval(secs => $3),
         lease_token = lease_token + 1
     FROM due WHERE id = due.due_id
     RETURNING id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload, status, attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, done_at, lease_until, first_failed_at, lease_token AS token

-- statement
WITH due AS (
         SELECT invoice_id FROM cryptopay_invoices
         WHERE status = 'active' AND next_check_at <= statement_timestamp()
         ORDER BY next_check_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
     )
     UPDATE cryptopay_invoices i
     SET next_check_at = statement_timestamp() + make_interval(secs => $2),
         checks = i.checks + 1
     FROM due, orders o
     WHERE i.invoice_id = due.invoice_id AND o.id = i.order_id
     RETURNING i.invoice_id, i.order_id, o.reference, i.asset, i.amount_minor, i.expires_at,
               i.checks

-- statement
WITH floor AS (
         SELECT (least((SELECT min(paid_at) FROM payments),
                       (SELECT min(at) FROM membership_events),
                       (SELECT min(created_at) FROM trial_uses)) AT TIME ZONE 'UTC')::date AS day
     )
     SELECT coalesce(array_agg(d::date ORDER BY d), '{}') AS days
     FROM floor, generate_series(greatest($1::date, floor.day),
                                 least(coalesce($2::date, 'infinity'), ((statement_timestamp() - interval '1 hour')
                                                  AT TIME ZONE 'UTC')::date) - 1,
                                 interval '1 day') AS d
     WHERE NOT EXISTS (SELECT 1 FROM stats_rolled_days r WHERE r.day = d::date)

-- statement
WITH fresh AS (
    SELECT o.id
    FROM (SELECT id FROM orders WHERE id = $15 AND xmin::text = $20 FOR UPDATE) AS o
    JOIN channels c ON c.id = $2 AND c.xmin::text = $21
    WHERE EXISTS (SELECT 1 FROM plans p WHERE p.id = $22 AND p.xmin::text = $23)
      AND (SELECT pm.xmin::text FROM memberships pm
           WHERE pm.subscriber_id = $1 AND pm.channel_id = $2)
          IS NOT DISTINCT FROM $24::text
      AND NOT EXISTS (SELECT 1 FROM referral_attributions ra JOIN referral_program rp ON rp.enabled
                      WHERE ra.subscriber_id = $1)
    FOR KEY SHARE OF c
), inserted AS (
    INSERT INTO payments (id, gateway, external_id, order_reference, order_id, subscriber_id,
                          channel_id, payer, amount_minor, currency, paid_at, outcome, reason,
                          renewal, subscription_expires_at)
    OVERRIDING SYSTEM VALUE
    SELECT $6, $12, $13, $14, fresh.id, $1, $2, NULL, $16, $17,
           LEAST($18::timestamptz, statement_timestamp()), $19, NULL, false, NULL
    FROM fresh
    ON CONFLICT (gateway, external_id) DO NOTHING
    RETURNING id, order_id, paid_at, created_at
), to_mark AS (SELECT order_id, paid_at FROM inserted), paid AS (
    UPDATE orders o SET status = 'paid', paid_at = m.paid_at, promo_held_until = NULL
    FROM to_mark m WHERE o.id = m.order_id
), sub AS (
    SELECT id, telegram_user_id FROM subscribers WHERE id = $1 AND (EXISTS (SELECT 1 FROM inserted)) FOR KEY SHARE
), b AS (
    SELECT id, status, expires_at FROM memberships
    WHERE subscriber_id = $1 AND channel_id = $2
), m AS (
    INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
    SELECT sub.id, $2, $4,
           CASE WHEN $3::integer IS NULL THEN 'infinity'::timestamptz
                ELSE GREATEST(statement_timestamp() + make_interval(days => $3),
                              $11::timestamptz) END
    FROM sub
    ON CONFLICT (subscriber_id, channel_id) DO UPDATE
    SET status = $4,
        expires_at = CASE WHEN $3::integer IS NULL THEN 'infinity'::timestamptz
                          ELSE GREATEST(GREATEST(memberships.expires_at, statement_timestamp())
                                        + make_interval(days => $3), $11::timestamptz) END,
        updated_at = statement_timestamp()
    RETURNING id, subscriber_id, channel_id, status, expires_at, created_at, updated_at
), ev AS (
    INSERT INTO membership_events
        (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause,
         payment_id)
    SELECT m.id, b.status, m.status, b.expires_at, m.expires_at, $5, $6
    FROM m LEFT JOIN b ON true
    RETURNING id, membership_id
), fx AS (
    INSERT INTO effects (kind, membership_id, payment_id, chat_id, user_id, payload, dedupe_key)
    SELECT k.kind, m.id, $6, c.telegram_chat_id, sub.telegram_user_id,
           jsonb_build_object('expires_at',
               CASE WHEN isfinite(m.expires_at)
                    THEN to_char((m.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                    ELSE (m.expires_at)::text END),
           (k.key_prefix) || ':' || (m.id) || ':ev' || (ev.id)
    FROM m
    JOIN ev ON ev.membership_id = m.id
    LEFT JOIN b ON true
    CROSS JOIN LATERAL (
        SELECT CASE WHEN b.status <> 'expired' THEN $7::text ELSE $8::text END,
               CASE WHEN b.status <> 'expired' THEN $9::text ELSE $10::text END
    ) AS k(kind, key_prefix)
    JOIN sub ON sub.id = m.subscriber_id
    JOIN channels c ON c.id = m.channel_id
    WHERE b.id IS NULL OR NOT (b.status <> 'expired') OR m.expires_at > b.expires_at
    FOR KEY SHARE OF c
)
SELECT m.*, i.paid_at AS payment_paid_at, i.created_at AS payment_created_at
FROM inserted i CROSS JOIN m


-- statement
WITH gone AS (
    DELETE FROM memberships WHERE id = $1
    RETURNING id, subscriber_id, channel_id, status, expires_at
), deleted_revokes AS (
    INSERT INTO effects (kind, chat_id, user_id, payload, dedupe_key)
    SELECT 'revoke', c.telegram_chat_id, s.telegram_user_id,
           jsonb_build_object('membership_id', g.id, 'deleted', true, 'expires_at',
               CASE WHEN isfinite(g.expires_at)
                    THEN to_char((g.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                    ELSE (g.expires_at)::text END),
           'revoke:' || (g.id) || ':deleted'
    FROM gone g
    JOIN subscribers s ON s.id = g.subscriber_id
    JOIN channels c ON c.id = g.channel_id
    WHERE g.status IN ('active', 'grace')
    ORDER BY g.id
)
SELECT count(*) AS deleted FROM gone


-- statement
WITH gone AS (
    DELETE FROM memberships WHERE subscriber_id = $1
    RETURNING id, subscriber_id, channel_id, status, expires_at
), deleted_revokes AS (
    INSERT INTO effects (kind, chat_id, user_id, payload, dedupe_key)
    SELECT 'revoke', c.telegram_chat_id, s.telegram_user_id,
           jsonb_build_object('membership_id', g.id, 'deleted', true, 'expires_at',
               CASE WHEN isfinite(g.expires_at)
                    THEN to_char((g.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                    ELSE (g.expires_at)::text END),
           'revoke:' || (g.id) || ':deleted'
    FROM gone g
    JOIN subscribers s ON s.id = g.subscriber_id
    JOIN channels c ON c.id = g.channel_id
    WHERE g.status IN ('active', 'grace')
    ORDER BY g.id
)
SELECT count(*) AS deleted FROM gone


-- statement
WITH heard AS (
             UPDATE subscribers
             SET reachable = true, marketing_opt_out = marketing_opt_out AND NOT $2::boolean,
                 updated_at = statement_timestamp()
             WHERE telegram_user_id = $1 AND (NOT reachable OR ($2::boolean AND marketing_opt_out))
         ) SELECT language FROM subscribers WHERE telegram_user_id = $1

-- statement
WITH heard AS (
             UPDATE subscribers
             SET reachable = true, marketing_opt_out = marketing_opt_out AND NOT $3::boolean,
                 updated_at = statement_timestamp()
             WHERE telegram_user_id = $1 AND (NOT reachable OR ($3::boolean AND marketing_opt_out))
         )
         SELECT b.update_id IS NOT NULL AS found, b.reply,
                (SELECT language FROM subscribers WHERE telegram_user_id = $1) AS language
         FROM (VALUES (true)) AS one (x) LEFT JOIN bot_updates b
             ON b.update_id = $2
            AND b.created_at >= statement_timestamp() - interval '1 day'

-- statement
WITH inserted AS (
         INSERT INTO payments (gateway, external_id, order_reference, order_id, subscriber_id,
                               channel_id, amount_minor, currency, paid_at, outcome, reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, LEAST($9::timestamptz, statement_timestamp()),
                 $10, $11)
         ON CONFLICT (gateway, external_id) DO NOTHING
         RETURNING id, order_id, paid_at
     ), to_mark AS (SELECT order_id, paid_at FROM inserted WHERE $12::boolean), paid AS (
    UPDATE orders o SET status = 'paid', paid_at = m.paid_at, promo_held_until = NULL
    FROM to_mark m WHERE o.id = m.order_id
)
     SELECT id FROM inserted

-- statement
WITH inserted AS (
         INSERT INTO payments (gateway, external_id, order_reference, order_id, subscriber_id, channel_id, payer, amount_minor, currency, paid_at, outcome, reason, renewal, subscription_expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
                 LEAST($10::timestamptz, statement_timestamp()), $11, $12, $13, $14)
         ON CONFLICT (gateway, external_id) DO NOTHING
         RETURNING id, gateway, external_id, order_reference, order_id, subscriber_id, channel_id, amount_minor, currency, affiliate_fee_minor, paid_at, outcome, reason, created_at
     ), to_mark AS (SELECT order_id, paid_at FROM inserted WHERE $15::boolean), paid AS (
    UPDATE orders o SET status = 'paid', paid_at = m.paid_at, promo_held_until = NULL
    FROM to_mark m WHERE o.id = m.order_id
)
     SELECT id, gateway, external_id, order_reference, order_id, subscriber_id, channel_id, amount_minor, currency, affiliate_fee_minor, paid_at, outcome, reason, created_at FROM inserted

-- statement
WITH kept AS (
         INSERT INTO cryptopay_invoices (invoice_id, order_id, asset, amount_minor, pay_url,
                                         expires_at, next_check_at)
         VALUES ($1, $2, $3, $4, $5, $6, statement_timestamp() + make_interval(secs => $7))
         ON CONFLICT DO NOTHING
         RETURNING invoice_id, order_id, asset, amount_minor, status, pay_url, expires_at)
     SELECT invoice_id, order_id, asset, amount_minor, status, pay_url, expires_at FROM kept
     UNION ALL
     SELECT invoice_id, order_id, asset, amount_minor, status, pay_url, expires_at FROM cryptopay_invoices WHERE order_id = $2 AND asset = $3
     LIMIT 1

-- statement
WITH l AS (
         SELECT id, affiliate_id, payment_id, subscriber_id, amount_minor, currency, percent,
                base_minor, status
         FROM commission_lines WHERE payment_id = $1 AND kind <> 'reversal' FOR UPDATE
     ), unpaid AS (
         UPDATE commission_lines c
         SET status = 'reversed', reversed_at = statement_timestamp()
         FROM l WHERE c.id = l.id AND l.status = 'pending'
         RETURNING c.id
     ), back AS (
         INSERT INTO commission_lines
             (affiliate_id, payment_id, subscriber_id, kind, amount_minor, currency, percent,
              base_minor, payable_at)
         SELECT affiliate_id, payment_id, subscriber_id, 'reversal', -amount_minor, currency,
                percent, base_minor, statement_timestamp()
         FROM l WHERE l.status = 'paid'
         ON CONFLICT (payment_id, (kind = 'reversal')) DO NOTHING
         RETURNING id
     )
     SELECT (SELECT count(*) FROM unpaid) AS unpaid, (SELECT count(*) FROM back) AS back

-- statement
WITH l AS (
         SELECT l.kind, l.currency, l.amount_minor, l.base_minor, CASE WHEN l.status = 'pending' AND l.payable_at <= statement_timestamp() THEN 'payable' ELSE l.status END AS status,
                l.status = 'reversed' OR EXISTS (
                    SELECT 1 FROM commission_lines r
                    WHERE r.payment_id = l.payment_id AND r.kind = 'reversal') AS taken_back
         FROM commission_lines l
         WHERE l.affiliate_id = $1
     )
     SELECT currency,
            (sum(base_minor) FILTER (WHERE kind <> 'reversal' AND NOT taken_back))::text
                AS revenue_minor,
            (sum(amount_minor) FILTER (WHERE kind <> 'reversal' AND status = 'pending'))::text
                AS pending,
            (sum(amount_minor) FILTER (WHERE kind <> 'reversal' AND status = 'payable'))::text
                AS payable,
            (sum(amount_minor) FILTER (WHERE kind <> 'reversal' AND status = 'paid'))::text
                AS paid,
            (sum(amount_minor) FILTER (WHERE kind <> 'reversal' AND status = 'reversed'))::text
                AS reversed,
            (sum(amount_minor) FILTER (WHERE kind = 'reversal'))::text AS reversals_minor,
            (sum(amount_minor) FILTER (WHERE status = 'payable'))::text AS balance_minor
     FROM l
     GROUP BY currency
     ORDER BY currency

-- statement
WITH live AS (
         SELECT EXISTS (
             SELECT 1 FROM join_requests r
             JOIN channels c ON c.id = r.channel_id
             JOIN subscribers s ON s.telegram_user_id = r.user_id
             JOIN memberships m ON m.subscriber_id = s.id AND m.channel_id = r.channel_id
             WHERE r.id = $1 AND m.status <> 'expired' AND statement_timestamp() < m.expires_at + make_interval(days => c.grace_period_days)) AS found
     )
     UPDATE join_requests r
     SET state = CASE WHEN live.found THEN 'approved' ELSE 'declined' END,
         decided_at = statement_timestamp()
     FROM live
     WHERE r.id = $1 AND r.state = 'waiting'
       AND (live.found OR (r.created_at + make_interval(secs => $2::bigint) <= statement_timestamp()
              OR EXISTS (SELECT 1 FROM orders o WHERE o.id = r.order_id
                         AND o.status <> 'paid'
                         AND COALESCE(o.hold_until, o.created_at + make_interval(secs => $3::bigint))
                             <= statement_timestamp())))
     RETURNING r.state

-- statement
WITH live AS (
         SELECT channel_id, count(*) AS n FROM memberships
         WHERE status <> 'expired' AND expires_at <> 'infinity'
         GROUP BY channel_id
     ),
     -- A trial can only still be running within the longest trial plus the longest grace:
     -- older ones were paid for (or extended by staff) if their membership is live.
     trial_horizon AS (
         SELECT statement_timestamp()
                - ((SELECT coalesce(max(period_days), 0) FROM plans WHERE kind = 'trial')
                   + (SELECT coalesce(max(grace_period_days), 0) FROM channels))
                  * interval '1 day' AS since
     ),
     on_trial AS (
         SELECT t.channel_id, count(*) AS n
         FROM trial_uses t
         JOIN memberships m ON m.subscriber_id = t.subscriber_id AND m.channel_id = t.channel_id
         WHERE t.created_at >= (SELECT since FROM trial_horizon)
           AND m.status <> 'expired' AND m.expires_at <> 'infinity'
           AND NOT EXISTS (
               SELECT 1 FROM payments p
               WHERE p.subscriber_id = t.subscriber_id AND p.channel_id = t.channel_id
                 AND p.outcome = 'applied' AND p.amount_minor > 0 AND p.paid_at > t.created_at)
         GROUP BY t.channel_id
     )
     SELECT c.currency,
            round(sum((l.n - coalesce(t.n, 0))::numeric * c.price_minor * 30
                      / c.billing_period_days))::text AS amount_minor
     FROM live l JOIN channels c ON c.id = l.channel_id
     LEFT JOIN on_trial t ON t.channel_id = l.channel_id
     GROUP BY c.currency ORDER BY c.currency

-- statement
WITH m AS (
         INSERT INTO messages (subscriber_id, kind, order_id, membership_id,
                               star_subscription_id, promo_code_id, dedupe_key, language)
         SELECT s.id, $2, $3, $4, $5, $6, $7, coalesce(s.language, $8)
         FROM subscribers s
         WHERE s.id = $1
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING id, subscriber_id
     )
     INSERT INTO effects (kind, user_id, payload, dedupe_key, next_attempt_at)
     SELECT 'member_message', s.telegram_user_id, jsonb_build_object('message_id', m.id),
            'message:' || m.id, statement_timestamp() + make_interval(mins => $9)
     FROM m
     JOIN subscribers s ON s.id = m.subscriber_id
     RETURNING (payload ->> 'message_id')::bigint AS message_id

-- statement
WITH m AS (
         UPDATE messages
         SET outcome = 'skipped', note = 'the broadcast was cancelled',
             sent_at = statement_timestamp()
         WHERE broadcast_id = $1 AND outcome IS NULL AND attempted_at IS NULL
         RETURNING id
     )
     UPDATE effects e
     SET status = 'done', done_at = statement_timestamp(), updated_at = statement_timestamp(),
         lease_until = NULL,
         payload = e.payload || '{"note": "skipped: the broadcast was cancelled"}'
     FROM m
     WHERE e.dedupe_key = 'message:' || m.id AND e.status = 'pending'

-- statement
WITH o AS (INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency, plan_id,
                             list_price_minor, discount_minor, promo_code_id, promo_held_until,
                             via_bot)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
                 CASE WHEN $9::bigint IS NULL THEN NULL
                      ELSE statement_timestamp() + make_interval(secs => $10::float8) END,
                 $11) RETURNING id),
     invoice AS (
         INSERT INTO effects (kind, order_id, user_id, payload, dedupe_key)
         SELECT $12, o.id, $13, $14, $15::text || o.id FROM o
         ON CONFLICT (dedupe_key) DO NOTHING)
     SELECT id FROM o

-- statement
WITH owed AS (
         SELECT p.id, p.order_id, s.telegram_user_id
         FROM payments p
         JOIN fiscal_receipts sale ON sale.payment_id = p.id AND sale.kind = 'sale'
                                  AND sale.state <> 'failed'
         JOIN subscribers s ON s.id = p.subscriber_id
         WHERE p.id = $1 AND p.outcome IN ('refunded', 'disputed')
     ), receipt AS (
         INSERT INTO fiscal_receipts (payment_id, kind)
         SELECT id, 'return' FROM owed
         ON CONFLICT (payment_id, kind) DO NOTHING
         RETURNING id, payment_id
     )
     INSERT INTO effects (kind, payment_id, order_id, user_id, payload, dedupe_key)
     SELECT 'fiscal_receipt', r.payment_id, o.order_id, o.telegram_user_id,
            jsonb_build_object('fiscal_receipt_id', r.id), 'receipt:return:' || r.payment_id
     FROM receipt r JOIN owed o ON o.id = r.payment_id
     ON CONFLICT (dedupe_key) DO NOTHING

-- statement
WITH owed AS (
         SELECT p.id, p.order_id, s.telegram_user_id
         FROM payments p
         JOIN fiscal_register r ON r.enabled
         JOIN subscribers s ON s.id = p.subscriber_id
         WHERE p.id = $1 AND p.outcome = 'applied' AND p.currency = 'UAH'
           AND p.amount_minor > 0 AND p.gateway NOT IN ('telegram_stars', 'cryptopay')
     ), receipt AS (
         INSERT INTO fiscal_receipts (payment_id, kind)
         SELECT id, 'sale' FROM owed
         ON CONFLICT (payment_id, kind) DO NOTHING
         RETURNING id, payment_id
     )
     INSERT INTO effects (kind, payment_id, order_id, user_id, payload, dedupe_key)
     SELECT 'fiscal_receipt', r.payment_id, o.order_id, o.telegram_user_id,
            jsonb_build_object('fiscal_receipt_id', r.id), 'receipt:sale:' || r.payment_id
     FROM receipt r JOIN owed o ON o.id = r.payment_id
     ON CONFLICT (dedupe_key) DO NOTHING

-- statement
WITH p AS (
         SELECT id, amount_minor - affiliate_fee_minor AS base FROM payments WHERE id = $1
     ), l AS (
         SELECT c.id, c.status, p.base, greatest(p.base, 0) * c.percent / 100 AS amount
         FROM commission_lines c JOIN p ON p.id = c.payment_id
         WHERE c.kind <> 'reversal' FOR UPDATE OF c
     ), changed AS (
         UPDATE commission_lines c
         SET base_minor = l.base,
             amount_minor = CASE WHEN l.amount > 0 THEN l.amount ELSE c.amount_minor END,
             status = CASE WHEN l.amount > 0 THEN c.status ELSE 'reversed' END,
             reversed_at = CASE WHEN l.amount > 0 THEN c.reversed_at
                                ELSE statement_timestamp() END
         FROM l WHERE c.id = l.id AND l.status = 'pending' AND c.base_minor <> l.base
         RETURNING c.id
     )
     SELECT (SELECT count(*) FROM changed) AS changed,
            EXISTS (SELECT 1 FROM l WHERE l.status = 'paid') AS paid

-- statement
WITH pc AS (
         INSERT INTO promo_codes (code, percent_off, amount_off_minor, currency, plan_ids,
             max_redemptions, per_buyer_limit, expires_at, first_purchase_only, active)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         RETURNING *
     )
     SELECT pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, pc.max_redemptions, pc.per_buyer_limit, pc.expires_at, pc.first_purchase_only, pc.active, pc.created_at, pc.updated_at, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'paid') AS redemptions, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'pending' AND o.promo_held_until > statement_timestamp()) AS held FROM pc

-- statement
WITH pc AS (
         UPDATE promo_codes
         SET code = $2, percent_off = $3, amount_off_minor = $4, currency = $5, plan_ids = $6,
             max_redemptions = $7, per_buyer_limit = $8, expires_at = $9,
             first_purchase_only = $10, active = $11, updated_at = statement_timestamp()
         WHERE id = $1
         RETURNING *
     )
     SELECT pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, pc.max_redemptions, pc.per_buyer_limit, pc.expires_at, pc.first_purchase_only, pc.active, pc.created_at, pc.updated_at, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'paid') AS redemptions, (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'pending' AND o.promo_held_until > statement_timestamp()) AS held FROM pc

-- statement
WITH picked AS (
         SELECT next.id
         FROM unnest($1::bigint[]) AS e (id)
         CROSS JOIN LATERAL (
             SELECT count(*) AS n FROM webhook_deliveries f
             WHERE f.endpoint_id = e.id AND f.status = 'pending'
               AND f.leased_until > statement_timestamp()
         ) AS flying
         CROSS JOIN LATERAL (
             SELECT due.id, due.next_attempt_at,
                    row_number() OVER (ORDER BY due.next_attempt_at, due.id) AS turn
             FROM (SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
                   WHERE d.endpoint_id = e.id AND d.status = 'pending'
                     AND d.next_attempt_at <= statement_timestamp()
                   ORDER BY d.next_attempt_at, d.id
                   LIMIT greatest($2 - flying.n, 0)) AS due
         ) AS next
         ORDER BY next.turn, next.next_attempt_at, next.id
         LIMIT $3
     )
     UPDATE webhook_deliveries d
     SET next_attempt_at = statement_timestamp() + make_interval(secs => $4),
         leased_until = statement_timestamp() + make_interval(secs => $4),
         updated_at = statement_timestamp()
     FROM picked, webhook_events ev, webhook_endpoints e
     WHERE d.id = picked.id AND ev.id = d.event_id AND e.id = d.endpoint_id
       AND d.status = 'pending' AND d.next_attempt_at <= statement_timestamp()
     RETURNING d.id, d.endpoint_id, d.attempts, ev.msg_id, ev.body, e.url, e.secret,
         CASE WHEN e.previous_secret_until > statement_timestamp() THEN e.previous_secret END
             AS previous_secret

-- statement
WITH r AS (
SELECT s.id AS subscriber_id,
       s.telegram_user_id,
       coalesce(s.language, $6) AS language
FROM subscribers s
WHERE NOT s.marketing_opt_out
  AND s.reachable
  AND ($5::text[] IS NULL OR coalesce(s.language, $6) = ANY ($5::text[]))
  AND (
        ($1::integer[] IS NULL AND $2::bigint[] IS NULL AND $3::text[] IS NULL
         AND $4::integer IS NULL)
     OR EXISTS (
            SELECT 1
            FROM memberships m
            WHERE m.subscriber_id = s.id
              AND ($1::integer[] IS NULL OR m.channel_id = ANY ($1::integer[]))
              AND ($2::bigint[] IS NULL OR EXISTS (
                      SELECT 1
                      FROM orders o
                      WHERE o.subscriber_id = s.id
                        AND o.channel_id = m.channel_id
                        AND o.status = 'paid'
                        AND o.plan_id = ANY ($2::bigint[])))
              AND (
                    ($3::text[] IS NULL AND $4::integer IS NULL AND m.status <> 'expired')
                 OR (m.status = 'grace' AND 'grace' = ANY ($3::text[]))
                 OR (m.status = 'active'
                     AND CASE WHEN EXISTS (
                                       SELECT 1
                                       FROM trial_uses t
                                       WHERE t.subscriber_id = s.id
                                         AND t.channel_id = m.channel_id)
                                   AND NOT EXISTS (
                                       SELECT 1
                                       FROM payments p
                                       WHERE p.subscriber_id = s.id
                                         AND p.channel_id = m.channel_id
                                         AND p.outcome = 'applied')
                              THEN 'trial'
                              ELSE 'active'
                         END = ANY ($3::text[]))
                 OR (m.status = 'expired'
                     AND ('expired' = ANY ($3::text[])
                          OR ($3::text[] IS NULL AND $4::integer IS NOT NULL))
                     AND ($4::integer IS NULL
                          OR m.updated_at >= statement_timestamp() - make_interval(days => $4::integer)))))
     OR ('never_paid' = ANY ($3::text[])
         AND $2::bigint[] IS NULL
         AND NOT EXISTS (
                 SELECT 1
                 FROM payments p
                 WHERE p.subscriber_id = s.id
                   AND p.outcome = 'applied'
                   AND ($1::integer[] IS NULL OR p.channel_id = ANY ($1::integer[]))))
      )
),
     m AS (
         INSERT INTO messages (subscriber_id, kind, broadcast_id, dedupe_key, language)
         SELECT r.subscriber_id, 'broadcast', $7::bigint,
                'broadcast:' || $7::bigint || ':' || r.subscriber_id,
                r.language
         FROM r
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING id, subscriber_id
     ),
     e AS (
         INSERT INTO effects (kind, user_id, payload, dedupe_key)
         SELECT 'member_message', r.telegram_user_id, jsonb_build_object('message_id', m.id),
                'message:' || m.id
         FROM m
         JOIN r ON r.subscriber_id = m.subscriber_id
         RETURNING 1
     )
     SELECT count(*)::integer AS recipients FROM e

-- statement
WITH r AS (DELETE FROM stats_revenue_days WHERE day = ANY($1)),
          m AS (DELETE FROM stats_member_days WHERE day = ANY($1))
     SELECT 1

-- statement
WITH sent AS (
                 UPDATE effects SET status = 'pending',
                     attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END,
                     first_failed_at = CASE WHEN status = 'failed' THEN NULL
                                            ELSE first_failed_at END,
                     next_attempt_at = statement_timestamp(),
                     updated_at = statement_timestamp()
                 WHERE id = $1
                 RETURNING id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload, status, attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, done_at, lease_until, first_failed_at
             ), payments_back AS (
                 UPDATE payments p SET outcome = 'refund_pending',
                     updated_at = statement_timestamp()
                 FROM sent
                 WHERE sent.kind = 'refund' AND p.id = sent.payment_id
                   AND p.outcome = 'refund_failed'
             ) SELECT id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload, status, attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, done_at, lease_until, first_failed_at FROM sent

-- statement
WITH sent AS (
                 UPDATE effects SET status = 'pending',
                     attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END,
                     first_failed_at = CASE WHEN status = 'failed' THEN NULL
                                            ELSE first_failed_at END,
                     next_attempt_at = statement_timestamp(),
                     updated_at = statement_timestamp()
                 WHERE status = 'failed'
       AND ($1::text IS NULL OR kind = $1::text)
       AND ($2::bigint IS NULL OR membership_id = $2)
       AND ($3::bigint IS NULL OR payment_id = $3)
                 RETURNING id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload, status, attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, done_at, lease_until, first_failed_at
             ), payments_back AS (
                 UPDATE payments p SET outcome = 'refund_pending',
                     updated_at = statement_timestamp()
                 FROM sent
                 WHERE sent.kind = 'refund' AND p.id = sent.payment_id
                   AND p.outcome = 'refund_failed'
             ) SELECT count(*) AS retried FROM sent

-- statement
WITH stale AS (
         SELECT o.id,
                o.currency <> 'XTR'
                OR EXISTS (SELECT 1 FROM pre_checkout_decisions d
                           WHERE d.order_id = o.id AND d.ok) AS may_be_paid
         FROM orders o
         WHERE o.subscriber_id = $1 AND o.plan_id = $2 AND o.status = 'pending'
           AND o.via_bot AND o.superseded_at IS NULL
     ), superseded AS (
         UPDATE orders o SET superseded_at = statement_timestamp()
         FROM stale s WHERE o.id = s.id AND s.may_be_paid
         RETURNING o.id
     ), cancelled AS (
         UPDATE orders o SET status = 'cancelled', hold_until = NULL, promo_held_until = NULL
         FROM stale s WHERE o.id = s.id AND NOT s.may_be_paid
         RETURNING o.id
     )
     SELECT (SELECT count(*) FROM superseded) AS superseded,
            (SELECT count(*) FROM cancelled) AS cancelled

-- statement
WITH starts AS (
    SELECT s AT TIME ZONE 'UTC' AS start,
           (s + ('1 ' || $3)::interval) AT TIME ZONE 'UTC' AS stop
    FROM generate_series(date_trunc($3, $1::timestamptz AT TIME ZONE 'UTC'),
                         $2::timestamptz AT TIME ZONE 'UTC' - interval '1 microsecond',
                         ('1 ' || $3)::interval) AS s
),
bounds AS (SELECT min(start) AS first FROM starts),
days AS (
    SELECT day, currency, gross, refunded, affiliate_fees, payments FROM stats_revenue_days
    WHERE day >= ((SELECT first FROM bounds) AT TIME ZONE 'UTC')::date
      AND day < ((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date
    UNION ALL
    SELECT (paid_at AT TIME ZONE 'UTC')::date AS day, currency,
           sum(amount_minor) AS gross,
           coalesce(sum(amount_minor) FILTER (WHERE outcome IN ('refunded', 'disputed')), 0)
               AS refunded,
           coalesce(sum(affiliate_fee_minor)
                    FILTER (WHERE outcome NOT IN ('refunded', 'disputed')), 0) AS affiliate_fees,
           count(*) AS payments
    FROM payments
    WHERE paid_at >= greatest((SELECT first FROM bounds), (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC'))
      AND paid_at < $2
      AND outcome IN ('applied', 'refund_pending', 'refunded', 'refund_failed', 'disputed')
    GROUP BY 1, 2
),
agg AS (
    SELECT date_trunc($3, day::timestamp) AT TIME ZONE 'UTC' AS start, currency,
           sum(gross) AS gross, sum(refunded) AS refunded,
           sum(affiliate_fees) AS affiliate_fees,
           sum(payments)::bigint AS payments
    FROM days WHERE day::timestamp AT TIME ZONE 'UTC' < $2
    GROUP BY 1, 2
),
currencies AS (SELECT DISTINCT currency FROM agg)
SELECT s.start, c.currency, coalesce(a.gross, 0)::text AS gross_minor,
       coalesce(a.refunded, 0)::text AS refunded_minor,
       coalesce(a.gross - a.refunded, 0)::text AS net_minor,
       coalesce(a.affiliate_fees, 0)::text AS affiliate_fees_minor,
       coalesce(a.gross - a.refunded - a.affiliate_fees, 0)::text AS net_after_fees_minor,
       coalesce(a.payments, 0) AS payments
FROM starts s CROSS JOIN currencies c
LEFT JOIN agg a ON a.start = s.start AND a.currency = c.currency
ORDER BY s.start, c.currency


-- statement
WITH starts AS (
    SELECT s AT TIME ZONE 'UTC' AS start,
           (s + ('1 ' || $3)::interval) AT TIME ZONE 'UTC' AS stop
    FROM generate_series(date_trunc($3, $1::timestamptz AT TIME ZONE 'UTC'),
                         $2::timestamptz AT TIME ZONE 'UTC' - interval '1 microsecond',
                         ('1 ' || $3)::interval) AS s
),
bounds AS (SELECT min(start) AS first, max(stop) AS last FROM starts),
chans AS (SELECT unnest($5::int[]) AS channel_id),
live_now AS (
    SELECT channel_id, count(*) AS n FROM memberships
    WHERE status <> 'expired' AND ($4::int IS NULL OR channel_id = $4)
    GROUP BY channel_id
),
days AS (
    SELECT day, channel_id, new, renewed, expired, delta, trials_started,
           trials_converted
    FROM stats_member_days
    WHERE day >= ((SELECT first FROM bounds) AT TIME ZONE 'UTC')::date
      AND day < ((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date
      AND ($4::int IS NULL OR channel_id = $4)
    UNION ALL
    SELECT * FROM (
        SELECT day, channel_id, sum(new)::bigint AS new, sum(renewed)::bigint AS renewed,
               sum(expired)::bigint AS expired, sum(delta)::bigint AS delta,
               sum(trials)::bigint AS trials_started, sum(conversions)::bigint AS trials_converted
        FROM (
            SELECT (e.at AT TIME ZONE 'UTC')::date AS day, m.channel_id,
                   count(*) FILTER (WHERE e.from_status IS NULL) AS new,
                   count(*) FILTER (WHERE e.cause = 'payment' AND e.from_status IS NOT NULL)
                       AS renewed,
                   count(*) FILTER (WHERE e.to_status = 'expired'
                                      AND e.from_status IS DISTINCT FROM 'expired') AS expired,
                   sum((CASE WHEN e.to_status <> 'expired' THEN 1 ELSE 0 END
                        - CASE WHEN e.from_status IS NOT NULL AND e.from_status <> 'expired' THEN 1 ELSE 0 END))
                       AS delta,
                   0 AS trials, 0 AS conversions
            FROM membership_events e JOIN memberships m ON m.id = e.membership_id
            WHERE e.at >= greatest((SELECT first FROM bounds), (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC'))
              AND e.at < 'infinity'
            GROUP BY 1, 2
            UNION ALL
            SELECT (created_at AT TIME ZONE 'UTC')::date, channel_id, 0, 0, 0, 0, count(*), 0
            FROM trial_uses
            WHERE created_at >= greatest((SELECT first FROM bounds), (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC'))
              AND created_at < 'infinity'
            GROUP BY 1, 2
            UNION ALL
            SELECT (p.paid_at AT TIME ZONE 'UTC')::date, p.channel_id, 0, 0, 0, 0, 0, count(*)
            FROM payments p
            JOIN trial_uses t ON t.subscriber_id = p.subscriber_id
                             AND t.channel_id = p.channel_id AND t.created_at < p.paid_at
            WHERE p.paid_at >= greatest((SELECT first FROM bounds), (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC'))
              AND p.paid_at < 'infinity'
              AND p.outcome = 'applied' AND p.amount_minor > 0
              AND NOT EXISTS (
                  SELECT 1 FROM payments q
                  WHERE q.subscriber_id = p.subscriber_id AND q.channel_id = p.channel_id
                    AND q.outcome = 'applied' AND q.amount_minor > 0
                    AND q.paid_at > t.created_at
                    AND (q.paid_at, q.id) < (p.paid_at, p.id))
            GROUP BY 1, 2
        ) x
        GROUP BY day, channel_id
    ) raw WHERE ($4::int IS NULL OR channel_id = $4)
),
tail AS (
    SELECT channel_id, sum(delta) AS delta FROM days
    WHERE day::timestamp AT TIME ZONE 'UTC' >= (SELECT last FROM bounds)
    GROUP BY channel_id
),
per_interval AS (
    SELECT date_trunc($3, day::timestamp) AT TIME ZONE 'UTC' AS start, channel_id,
           sum(new) AS new, sum(renewed) AS renewed, sum(expired) AS expired,
           sum(delta) AS delta, sum(trials_started) AS trials_started,
           sum(trials_converted) AS trials_converted
    FROM days WHERE day::timestamp AT TIME ZONE 'UTC' < (SELECT last FROM bounds)
    GROUP BY 1, 2
),
grid AS (
    SELECT s.start, s.stop, c.channel_id, coalesce(p.new, 0) AS new,
           coalesce(p.renewed, 0) AS renewed, coalesce(p.expired, 0) AS expired,
           coalesce(p.delta, 0) AS delta,
           coalesce(p.trials_started, 0) AS trials_started,
           coalesce(p.trials_converted, 0) AS trials_converted
    FROM starts s CROSS JOIN chans c
    LEFT JOIN per_interval p ON p.start = s.start AND p.channel_id = c.channel_id
)
SELECT g.start, g.channel_id,
       (coalesce(l.n, 0) - coalesce(tl.delta, 0)
        - coalesce(sum(g.delta) OVER (PARTITION BY g.channel_id ORDER BY g.start DESC
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::bigint
           AS live,
       g.new::bigint AS new, g.renewed::bigint AS renewed,
       g.expired::bigint AS expired, g.trials_started::bigint AS trials_started,
       g.trials_converted::bigint AS trials_converted
FROM grid g
LEFT JOIN live_now l ON l.channel_id = g.channel_id
LEFT JOIN tail tl ON tl.channel_id = g.channel_id
ORDER BY g.start, g.channel_id


-- statement
WITH stored AS (
         INSERT INTO monobank_invoices AS m
             (invoice_id, order_id, reference, amount_minor, status, modified_date, chase,
              next_check_at)
         VALUES ($1, (SELECT id FROM orders WHERE reference = $2), COALESCE($2, ''), $3, $4,
                 $5, 'settled', statement_timestamp())
         ON CONFLICT (invoice_id) DO UPDATE SET
             status = EXCLUDED.status, modified_date = EXCLUDED.modified_date,
             updated_at = statement_timestamp()
         WHERE m.modified_date IS NULL OR m.modified_date <= EXCLUDED.modified_date
         RETURNING m.order_id
     )
     SELECT order_id FROM stored

-- statement
WITH stored AS (
         UPDATE channels SET invite_link = $2
         WHERE id = $1 AND invite_link IS NULL AND telegram_chat_id = $3
         RETURNING invite_link
     )
     SELECT invite_link FROM stored
     UNION ALL
     SELECT invite_link FROM channels WHERE id = $1 AND telegram_chat_id = $3
     LIMIT 1

-- statement
WITH stored AS (
         UPDATE orders SET invoice_link = $2
         WHERE id = $1 AND invoice_link IS NULL
         RETURNING invoice_link
     )
     SELECT invoice_link FROM stored
     UNION ALL
     SELECT invoice_link FROM orders WHERE id = $1
     LIMIT 1

-- statement
WITH stored AS (SELECT id, gateway, external_id, order_reference, order_id, subscriber_id, channel_id, amount_minor, currency, affiliate_fee_minor, paid_at, outcome, reason, created_at FROM payments WHERE gateway = $2 AND external_id = $3)
     SELECT s.*, o.id AS order_id_named, o.subscriber_id AS order_subscriber_id,
             ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = o.plan_id ORDER BY pc.channel_id) AS order_channel_ids,
             CASE WHEN s.id IS NULL AND o.id IS NOT NULL THEN pg_advisory_xact_lock(o.subscriber_id, COALESCE((SELECT min(pc.channel_id) FROM plan_channels pc
                                        WHERE pc.plan_id = o.plan_id), o.channel_id)) IS NULL END AS pair_locked
     FROM (SELECT 1) AS one
     LEFT JOIN stored s ON true
     LEFT JOIN orders o ON o.reference = $1

-- statement
WITH sub AS (
    SELECT id, telegram_user_id FROM subscribers WHERE id = $1 AND (true) FOR KEY SHARE
), b AS (
    SELECT id, status, expires_at FROM memberships
    WHERE subscriber_id = $1 AND channel_id = $2
), m AS (
    INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
    SELECT sub.id, $2, $4,
           CASE WHEN $3::integer IS NULL THEN 'infinity'::timestamptz
                ELSE GREATEST(statement_timestamp() + make_interval(days => $3),
                              $11::timestamptz) END
    FROM sub
    ON CONFLICT (subscriber_id, channel_id) DO UPDATE
    SET status = $4,
        expires_at = CASE WHEN $3::integer IS NULL THEN 'infinity'::timestamptz
                          ELSE GREATEST(GREATEST(memberships.expires_at, statement_timestamp())
                                        + make_interval(days => $3), $11::timestamptz) END,
        updated_at = statement_timestamp()
    RETURNING id, subscriber_id, channel_id, status, expires_at, created_at, updated_at
), ev AS (
    INSERT INTO membership_events
        (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause,
         payment_id)
    SELECT m.id, b.status, m.status, b.expires_at, m.expires_at, $5, $6
    FROM m LEFT JOIN b ON true
    RETURNING id, membership_id
), fx AS (
    INSERT INTO effects (kind, membership_id, payment_id, chat_id, user_id, payload, dedupe_key)
    SELECT k.kind, m.id, $6, c.telegram_chat_id, sub.telegram_user_id,
           jsonb_build_object('expires_at',
               CASE WHEN isfinite(m.expires_at)
                    THEN to_char((m.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                    ELSE (m.expires_at)::text END),
           (k.key_prefix) || ':' || (m.id) || ':ev' || (ev.id)
    FROM m
    JOIN ev ON ev.membership_id = m.id
    LEFT JOIN b ON true
    CROSS JOIN LATERAL (
        SELECT CASE WHEN b.status <> 'expired' THEN $7::text ELSE $8::text END,
               CASE WHEN b.status <> 'expired' THEN $9::text ELSE $10::text END
    ) AS k(kind, key_prefix)
    JOIN sub ON sub.id = m.subscriber_id
    JOIN channels c ON c.id = m.channel_id
    WHERE b.id IS NULL OR NOT (b.status <> 'expired') OR m.expires_at > b.expires_at
    FOR KEY SHARE OF c
)
SELECT m.*, ev.id AS event_id, b.status AS status_before, b.expires_at AS expires_at_before
FROM m JOIN ev ON ev.membership_id = m.id LEFT JOIN b ON true


-- statement
WITH taken AS (
         DELETE FROM sweep_queue q
         WHERE q.event_id IN (
             SELECT event_id FROM sweep_queue ORDER BY event_id LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING q.event_id, q.membership_id, q.kind, q.chat_id, q.user_id, q.expires_at
     ), made AS (
         INSERT INTO effects (kind, membership_id, chat_id, user_id, payload, dedupe_key)
         SELECT t.kind, m.id, t.chat_id, t.user_id,
                CASE WHEN m.id IS NULL AND t.kind = 'revoke' THEN jsonb_build_object('membership_id', t.membership_id, 'deleted', true, 'expires_at', CASE WHEN isfinite(t.expires_at) THEN to_char((t.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ELSE (t.expires_at)::text END) ELSE jsonb_build_object('expires_at', CASE WHEN isfinite(t.expires_at) THEN to_char((t.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ELSE (t.expires_at)::text END) END, (CASE WHEN t.kind = 'revoke' THEN 'revoke' ELSE 'grace' END) || ':' || (t.membership_id) || ':ev' || (t.event_id)
         FROM taken t
         LEFT JOIN LATERAL (
             SELECT id FROM memberships WHERE id = t.membership_id FOR KEY SHARE
         ) m ON true
         ORDER BY t.event_id
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING 1
     )
     SELECT (SELECT count(*) FROM taken) AS taken, (SELECT count(*) FROM made) AS made

-- statement
WITH updated AS (
    UPDATE memberships m
    SET status = d.to_status, updated_at = statement_timestamp()
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[])
         AS d(id, from_status, to_status, expires_at)
    WHERE m.id = d.id AND m.status = d.from_status AND m.expires_at = d.expires_at
    RETURNING m.id, m.subscriber_id, m.channel_id, d.from_status, m.status, m.expires_at
), events AS (
    INSERT INTO membership_events
        (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause)
    SELECT id, from_status, status, expires_at, expires_at, 'sweep' FROM updated
    RETURNING id, membership_id
), sweep_effects AS (
    INSERT INTO sweep_queue (event_id, membership_id, kind, chat_id, user_id, expires_at)
    SELECT ev.id, u.id,
           CASE WHEN u.status = 'expired' THEN 'revoke' ELSE 'grace_notice' END,
           c.telegram_chat_id, s.telegram_user_id, u.expires_at
    FROM updated u
    JOIN events ev ON ev.membership_id = u.id
    JOIN subscribers s ON s.id = u.subscriber_id
    JOIN channels c ON c.id = u.channel_id
    WHERE (u.from_status IN ('active', 'grace') AND u.status = 'expired')
       OR (u.from_status = 'active' AND u.status = 'grace')
    ORDER BY u.id
)
SELECT id, subscriber_id, channel_id, from_status, status, expires_at FROM updated


-- statement
WITH used AS (
         SELECT COALESCE(sum(days), 0)::integer AS days FROM referral_rewards
         WHERE referrer_id = $2 AND reversed_at IS NULL
           AND created_at >= date_trunc('month', statement_timestamp(), 'UTC')
     ), owed AS (
         SELECT LEAST($5::integer, COALESCE($6::integer - used.days, $5::integer)) AS days
         FROM used
     )
     INSERT INTO referral_rewards (affiliate_id, referrer_id, channel_id, payment_id, days)
     SELECT $1, $2, $3, $4, owed.days FROM owed WHERE owed.days >= 1
     ON CONFLICT (payment_id) DO NOTHING
     RETURNING id, days

-- statement
WITH w AS MATERIALIZED (
             SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS wrote
         ), recorded AS (
             INSERT INTO bot_updates (update_id, reply)
             SELECT $1, $2 FROM w WHERE w.wrote
             ON CONFLICT (update_id) DO UPDATE
                 SET reply = EXCLUDED.reply, created_at = statement_timestamp()
                 WHERE bot_updates.created_at
                       < statement_timestamp() - interval '1 day'
             RETURNING update_id
         )
         SELECT w.wrote, EXISTS (SELECT 1 FROM recorded) AS recorded,
                b.update_id IS NOT NULL AS found, b.reply
         FROM w LEFT JOIN bot_updates b
             ON b.update_id = $1
            AND b.created_at >= statement_timestamp() - interval '1 day'
