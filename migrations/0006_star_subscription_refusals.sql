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
