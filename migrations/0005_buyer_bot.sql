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
