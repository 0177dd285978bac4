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
