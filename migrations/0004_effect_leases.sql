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
