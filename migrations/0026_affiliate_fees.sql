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
