-- subgate schema, version 2: Telegram Stars pre-checkout decisions.
-- Telegram may deliver the same pre_checkout_query twice (our answer was lost, a retry); the
-- decision is stored under the query id so a repeat gets the same answer and never extends a
-- hold. Rows are never purged: with no timestamps on Telegram updates, deduplication is the
-- replay defence.

CREATE TABLE pre_checkout_decisions (
    query_id         text        PRIMARY KEY,
    -- NULL when the payload named no order (or the order was deleted later).
    order_id         bigint      REFERENCES orders (id) ON DELETE SET NULL,
    order_reference  text        NOT NULL,
    telegram_user_id bigint      NOT NULL,
    ok               boolean     NOT NULL,
    -- What the buyer was shown when refused.
    error_message    text,
    reason           text,
    -- The order's hold when approved (NULL: no hold needed, e.g. an unlimited channel).
    hold_until       timestamptz,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT pre_checkout_decisions_query_id_check CHECK (char_length(query_id) BETWEEN 1 AND 255),
    CONSTRAINT pre_checkout_decisions_reason_check CHECK (reason IN (
        'unknown_order', 'order_cancelled', 'already_paid', 'payer_mismatch',
        'currency_mismatch', 'amount_mismatch', 'channel_inactive', 'hold_expired', 'no_seat')),
    CONSTRAINT pre_checkout_decisions_ok_check CHECK (
        ok = (reason IS NULL) AND ok = (error_message IS NULL)),
    CONSTRAINT pre_checkout_decisions_hold_check CHECK (ok OR hold_until IS NULL)
);
CREATE INDEX pre_checkout_decisions_order_idx ON pre_checkout_decisions (order_id);
