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
