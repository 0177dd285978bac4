-- Ukrainian and crypto money: the shared ground of door 5 (Monobank), door 6 (Crypto Pay),
-- fiscal receipts (Checkbox) and refunds staff start. Each of those brings its own tables in
-- the migrations after this one; what they share is widened here once.

-- `fiscal_receipt`: one Checkbox receipt (a sale or a return) of one payment.
-- `gateway_refund`: a refund staff asked for, made at the payment's gateway.
ALTER TABLE effects
    DROP CONSTRAINT effects_kind_check,
    ADD CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel',
        'unban', 'member_message', 'referral_reward', 'fiscal_receipt', 'gateway_refund')),
    DROP CONSTRAINT effects_chat_id_check,
    ADD CONSTRAINT effects_chat_id_check CHECK (
        kind IN ('refund', 'bot_message', 'invoice', 'subscription_cancel', 'member_message',
                 'referral_reward', 'fiscal_receipt', 'gateway_refund')
        OR chat_id IS NOT NULL);

-- Monobank's invoices and Crypto Pay's are chased like WayForPay's orders.
ALTER TABLE gateway_checks
    DROP CONSTRAINT gateway_checks_gateway_check,
    ADD CONSTRAINT gateway_checks_gateway_check CHECK (gateway IN ('wayforpay', 'monobank', 'cryptopay'));

-- A crypto payment is kept in what was paid: `USDT` is four letters.
ALTER TABLE payments
    DROP CONSTRAINT payments_currency_check,
    ADD CONSTRAINT payments_currency_check CHECK (currency ~ '^[A-Z]{3,5}$');
