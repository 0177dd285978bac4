-- Door 5, Monobank acquiring. One row per Monobank invoice: made by us for an order (the bot's
-- invoice effect, the Mini App), or first heard of in a signed webhook. It keeps the newest
-- status Monobank reported with that report's `modifiedDate` (an older report changes nothing),
-- the page handed to the buyer (reused while it stays valid: Monobank has no idempotency key),
-- and the chase of an invoice whose webhook has not come (asked about with
-- `GET /api/merchant/invoice/status`, with back-off, for up to 72 hours), in the shape of
-- WayForPay's `gateway_checks`, which holds one row per order and so cannot hold an order's
-- several invoices.
CREATE TABLE monobank_invoices (
    invoice_id      text        PRIMARY KEY,
    -- The order of rows in staff lists (`GET /api/reconciliation/monobank`).
    id              bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    order_id        bigint      REFERENCES orders (id) ON DELETE CASCADE,
    -- Our order reference, as sent in `merchantPaymInfo.reference` (or as a webhook reported it).
    reference       text        NOT NULL,
    amount_minor    bigint      NOT NULL,
    page_url        text,
    -- The page was given to the buyer: only such an invoice is reused, chased, and releases its
    -- order's holds when it fails or expires (of two made at once for one order, one is given).
    handed_out      boolean     NOT NULL DEFAULT false,
    valid_until     timestamptz,
    status          text        NOT NULL DEFAULT 'created',
    -- Monobank's `modifiedDate` of the newest report applied (null: none yet).
    modified_date   timestamptz,
    chase           text        NOT NULL DEFAULT 'chasing',
    attempts        integer     NOT NULL DEFAULT 0,
    next_check_at   timestamptz NOT NULL,
    last_checked_at timestamptz,
    last_error      text,
    payment_id      bigint      REFERENCES payments (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT monobank_invoices_status_check CHECK (status IN (
        'created', 'processing', 'hold', 'success', 'failure', 'reversed', 'expired')),
    CONSTRAINT monobank_invoices_chase_check CHECK (chase IN ('chasing', 'found', 'gave_up', 'settled')),
    CONSTRAINT monobank_invoices_attempts_check CHECK (attempts >= 0),
    CONSTRAINT monobank_invoices_amount_check CHECK (amount_minor >= 0)
);
CREATE INDEX monobank_invoices_order_idx ON monobank_invoices (order_id);
CREATE INDEX monobank_invoices_due_idx ON monobank_invoices (next_check_at) WHERE chase = 'chasing';
