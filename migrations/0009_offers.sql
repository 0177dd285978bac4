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
