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
