-- Door 6 (Crypto Pay, @CryptoBot): the prices an owner fixes for a plan in crypto assets, and
-- the Crypto Pay invoices the bot makes for orders.

-- `{"USDT": 4990000, "TON": 1500000000}`: asset → the price in the asset's minor units (the
-- exponents of `common::currency`). NULL: the plan is not sold in crypto. Checked in Rust
-- (known assets, positive amounts); the schema keeps the shape.
ALTER TABLE plans
    ADD COLUMN crypto_prices jsonb,
    ADD CONSTRAINT plans_crypto_prices_check
        CHECK (crypto_prices IS NULL OR jsonb_typeof(crypto_prices) = 'object');

-- One invoice per order and asset: a repeat of the effect that made it finds it here and sends
-- the same pay URL. `status` follows Crypto Pay's (`active`, `paid`, `expired`); an `active`
-- one is asked about (`getInvoices`) from `next_check_at` on.
CREATE TABLE cryptopay_invoices (
    invoice_id bigint PRIMARY KEY,
    order_id bigint NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    asset text NOT NULL,
    amount_minor bigint NOT NULL,
    status text NOT NULL DEFAULT 'active',
    pay_url text NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    next_check_at timestamptz NOT NULL,
    checks integer NOT NULL DEFAULT 0,
    last_error text,
    CONSTRAINT cryptopay_invoices_order_asset_key UNIQUE (order_id, asset),
    CONSTRAINT cryptopay_invoices_asset_check CHECK (asset ~ '^[A-Z]{3,5}$'),
    CONSTRAINT cryptopay_invoices_amount_check CHECK (amount_minor > 0),
    CONSTRAINT cryptopay_invoices_status_check CHECK (status IN ('active', 'paid', 'expired')),
    CONSTRAINT cryptopay_invoices_checks_check CHECK (checks >= 0)
);
CREATE INDEX cryptopay_invoices_due_idx ON cryptopay_invoices (next_check_at)
    WHERE status = 'active';
