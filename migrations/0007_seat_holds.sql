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
