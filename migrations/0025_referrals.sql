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
