-- subgate schema, version 1. Invariants live here; the code relies on them.
-- subscribers.id and channels.id are integer identities: they are the two int4 keys of
-- pg_advisory_xact_lock(subscriber_id, channel_id), the lock every hold/membership change takes.

CREATE TABLE staff_accounts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email         text        NOT NULL,
    password_hash text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT staff_accounts_email_key UNIQUE (email),
    CONSTRAINT staff_accounts_email_check CHECK (email = lower(email) AND char_length(email) BETWEEN 3 AND 254)
);

CREATE TABLE subscribers (
    id               integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    telegram_user_id bigint      NOT NULL,
    username         text,
    display_name     text,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT subscribers_telegram_user_id_key UNIQUE (telegram_user_id),
    CONSTRAINT subscribers_telegram_user_id_check CHECK (telegram_user_id > 0),
    CONSTRAINT subscribers_username_check CHECK (char_length(username) <= 64),
    CONSTRAINT subscribers_display_name_check CHECK (char_length(display_name) <= 128)
);

CREATE TABLE channels (
    id                  integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    telegram_chat_id    bigint      NOT NULL,
    title               text        NOT NULL,
    price_minor         bigint      NOT NULL,
    currency            text        NOT NULL,
    billing_period_days integer     NOT NULL,
    grace_period_days   integer     NOT NULL DEFAULT 0,
    seat_limit          integer,
    active              boolean     NOT NULL DEFAULT true,
    created_at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT channels_telegram_chat_id_key UNIQUE (telegram_chat_id),
    CONSTRAINT channels_telegram_chat_id_check CHECK (telegram_chat_id <> 0),
    CONSTRAINT channels_title_check CHECK (char_length(title) BETWEEN 1 AND 255),
    CONSTRAINT channels_price_minor_check CHECK (price_minor > 0),
    CONSTRAINT channels_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT channels_billing_period_days_check CHECK (billing_period_days BETWEEN 1 AND 3660),
    CONSTRAINT channels_grace_period_days_check CHECK (grace_period_days BETWEEN 0 AND 365),
    CONSTRAINT channels_seat_limit_check CHECK (seat_limit IS NULL OR seat_limit >= 1)
);

CREATE TABLE memberships (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber_id integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    channel_id    integer     NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    status        text        NOT NULL,
    expires_at    timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT memberships_subscriber_channel_key UNIQUE (subscriber_id, channel_id),
    CONSTRAINT memberships_status_check CHECK (status IN ('active', 'grace', 'expired'))
);
-- The sweep's candidates: not yet expired, ordered by expiry.
CREATE INDEX memberships_sweep_idx ON memberships (expires_at, id) WHERE status <> 'expired';
-- Seat counting: live members of a channel.
CREATE INDEX memberships_channel_live_idx ON memberships (channel_id) WHERE status <> 'expired';

CREATE TABLE orders (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reference     text        NOT NULL,
    subscriber_id integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    channel_id    integer     NOT NULL REFERENCES channels (id) ON DELETE RESTRICT,
    amount_minor  bigint      NOT NULL,
    currency      text        NOT NULL,
    status        text        NOT NULL DEFAULT 'pending',
    hold_until    timestamptz,
    invoice_link  text,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    paid_at       timestamptz,
    CONSTRAINT orders_reference_key UNIQUE (reference),
    CONSTRAINT orders_reference_check CHECK (char_length(reference) BETWEEN 1 AND 64),
    CONSTRAINT orders_amount_minor_check CHECK (amount_minor > 0),
    CONSTRAINT orders_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT orders_status_check CHECK (status IN ('pending', 'paid', 'cancelled')),
    CONSTRAINT orders_paid_at_check CHECK ((status = 'paid') = (paid_at IS NOT NULL)),
    CONSTRAINT orders_cancelled_hold_check CHECK (status <> 'cancelled' OR hold_until IS NULL)
);
CREATE INDEX orders_subscriber_idx ON orders (subscriber_id);
-- Seat counting: pending holds of a channel.
CREATE INDEX orders_channel_holds_idx ON orders (channel_id, hold_until)
    WHERE status = 'pending' AND hold_until IS NOT NULL;

CREATE TABLE payments (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    gateway         text        NOT NULL,
    external_id     text        NOT NULL,
    order_reference text,
    order_id        bigint      REFERENCES orders (id) ON DELETE RESTRICT,
    subscriber_id   integer     REFERENCES subscribers (id) ON DELETE RESTRICT,
    channel_id      integer     REFERENCES channels (id) ON DELETE RESTRICT,
    payer           text,
    amount_minor    bigint      NOT NULL,
    currency        text        NOT NULL,
    paid_at         timestamptz NOT NULL,
    outcome         text        NOT NULL,
    reason          text,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT payments_gateway_external_id_key UNIQUE (gateway, external_id),
    CONSTRAINT payments_gateway_check CHECK (gateway ~ '^[a-z0-9_-]{1,32}$'),
    CONSTRAINT payments_external_id_check CHECK (char_length(external_id) BETWEEN 1 AND 255),
    CONSTRAINT payments_amount_minor_check CHECK (amount_minor >= 0),
    CONSTRAINT payments_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT payments_outcome_check CHECK (
        outcome IN ('applied', 'needs_review', 'refund_pending', 'refunded', 'refund_failed')),
    CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive')),
    CONSTRAINT payments_outcome_reason_check CHECK ((outcome = 'applied') = (reason IS NULL))
);
-- An order is paid by at most one payment.
CREATE UNIQUE INDEX payments_one_applied_per_order ON payments (order_id) WHERE outcome = 'applied';
CREATE INDEX payments_outcome_idx ON payments (outcome, id);
CREATE INDEX payments_order_idx ON payments (order_id);
CREATE INDEX payments_subscriber_idx ON payments (subscriber_id);

CREATE TABLE membership_events (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    membership_id     bigint      NOT NULL REFERENCES memberships (id) ON DELETE CASCADE,
    from_status       text,
    to_status         text        NOT NULL,
    expires_at_before timestamptz,
    expires_at_after  timestamptz NOT NULL,
    cause             text        NOT NULL,
    payment_id        bigint      REFERENCES payments (id) ON DELETE RESTRICT,
    at                timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT membership_events_from_status_check CHECK (from_status IN ('active', 'grace', 'expired')),
    CONSTRAINT membership_events_to_status_check CHECK (to_status IN ('active', 'grace', 'expired')),
    CONSTRAINT membership_events_cause_check CHECK (cause IN ('payment', 'sweep', 'staff')),
    CONSTRAINT membership_events_payment_check CHECK ((cause = 'payment') = (payment_id IS NOT NULL))
);
CREATE INDEX membership_events_membership_idx ON membership_events (membership_id, id);
CREATE INDEX membership_events_payment_idx ON membership_events (payment_id) WHERE payment_id IS NOT NULL;

-- Idempotency-Key records for staff POSTs. The row is inserted at the start of the effect's
-- transaction (a concurrent request with the same key waits on the unique index, then replays)
-- and the response is written before commit, so effect and saved response commit together.
CREATE TABLE idempotency_keys (
    staff_id        bigint      NOT NULL REFERENCES staff_accounts (id) ON DELETE CASCADE,
    key             text        NOT NULL,
    method          text        NOT NULL,
    path            text        NOT NULL,
    body_sha256     bytea       NOT NULL,
    response_status smallint,
    response_body   bytea,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (staff_id, key),
    CONSTRAINT idempotency_keys_key_check CHECK (char_length(key) BETWEEN 1 AND 255)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
