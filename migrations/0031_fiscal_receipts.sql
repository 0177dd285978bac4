-- Fiscal receipts (Checkbox, a software cash register): one sale receipt per applied UAH card
-- payment and one return receipt per refund of such a payment, each performed by a
-- `fiscal_receipt` effect (the kind 0028 allowed).

-- Whether the running service has Checkbox configured (`CHECKBOX_*`): written by `subgate
-- serve` at start-up, read by the transactions that apply a payment, so a payment owes a
-- receipt only while receipts are on. One row.
CREATE TABLE fiscal_register (
    id         boolean     PRIMARY KEY DEFAULT true,
    enabled    boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT fiscal_register_one_check CHECK (id)
);
INSERT INTO fiscal_register DEFAULT VALUES;

-- One receipt of one payment. `receipt_id` is the id we give Checkbox for it, chosen before
-- the first call: Checkbox keeps one receipt per id, so a request sent again after a crash
-- or a lost answer finds the receipt the first one made instead of making a second.
CREATE TABLE fiscal_receipts (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id  bigint      NOT NULL REFERENCES payments (id),
    kind        text        NOT NULL,
    state       text        NOT NULL DEFAULT 'pending',
    receipt_id  uuid        NOT NULL DEFAULT gen_random_uuid(),
    fiscal_code text,
    url         text,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    created_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    done_at     timestamptz,
    CONSTRAINT fiscal_receipts_payment_kind_key UNIQUE (payment_id, kind),
    CONSTRAINT fiscal_receipts_receipt_id_key UNIQUE (receipt_id),
    CONSTRAINT fiscal_receipts_kind_check CHECK (kind IN ('sale', 'return')),
    CONSTRAINT fiscal_receipts_state_check CHECK (state IN ('pending', 'done', 'failed')),
    CONSTRAINT fiscal_receipts_done_check CHECK (
        (state = 'done') = (done_at IS NOT NULL AND fiscal_code IS NOT NULL AND url IS NOT NULL)),
    CONSTRAINT fiscal_receipts_attempts_check CHECK (attempts >= 0)
);

-- Staff's look at what is still owed or failed.
CREATE INDEX fiscal_receipts_open_idx ON fiscal_receipts (state) WHERE state <> 'done';
