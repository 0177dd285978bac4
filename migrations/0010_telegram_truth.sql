-- Telegram and the card gateway checked against the database.

-- Whether the bot can act in the channel's chat: `no_rights` once Telegram told us (a
-- `my_chat_member` update, or a refusal for missing rights) that the bot is no longer an
-- administrator able to invite and ban. The chat's access effects wait while it is so.
ALTER TABLE channels
    ADD COLUMN telegram_status    text        NOT NULL DEFAULT 'ok',
    ADD COLUMN telegram_status_at timestamptz,
    ADD CONSTRAINT channels_telegram_status_check CHECK (telegram_status IN ('ok', 'no_rights'));

-- Users allowed in a channel's chat without a membership (staff, guests): never removed by a
-- revoke, a `chat_member` check or an audit.
CREATE TABLE channel_exemptions (
    channel_id       integer     NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    telegram_user_id bigint      NOT NULL,
    note             text,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (channel_id, telegram_user_id),
    CONSTRAINT channel_exemptions_user_check CHECK (telegram_user_id > 0),
    CONSTRAINT channel_exemptions_note_check CHECK (char_length(note) <= 255)
);

-- Who subgate banned in which chat: written before a revoke's ban, removed once its unban is
-- recorded. A grant unbans only the users listed here (anyone else is not banned by us), so a
-- grant is one message.
CREATE TABLE chat_bans (
    chat_id   bigint      NOT NULL,
    user_id   bigint      NOT NULL,
    banned_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (chat_id, user_id)
);

-- `unban`: an audit found a live member banned in the chat.
ALTER TABLE effects
    DROP CONSTRAINT effects_kind_check,
    ADD CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel',
        'unban'));

-- The access effects of one member are ordered among themselves only.
CREATE INDEX effects_member_access_idx ON effects (chat_id, user_id, id)
    WHERE status = 'pending'
      AND kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban');

-- An audit of one channel's member list (`POST /api/channels/{id}/audit`).
CREATE TABLE audits (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id  integer     NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    fix         boolean     NOT NULL,
    status      text        NOT NULL DEFAULT 'running',
    checked     integer     NOT NULL DEFAULT 0,
    total       integer     NOT NULL DEFAULT 0,
    counts      jsonb       NOT NULL DEFAULT '{}',
    rows        jsonb       NOT NULL DEFAULT '{}',
    error       text,
    started_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    finished_at timestamptz,
    CONSTRAINT audits_status_check CHECK (status IN ('running', 'done', 'failed')),
    CONSTRAINT audits_finished_check CHECK ((status = 'running') = (finished_at IS NULL))
);
CREATE INDEX audits_channel_idx ON audits (channel_id, id);

-- When the buyer was given a card purchase link for the order (the moment a lost callback
-- becomes possible).
ALTER TABLE orders ADD COLUMN purchase_link_at timestamptz;

-- A pending card order being asked about at the gateway (`CHECK_STATUS`).
CREATE TABLE gateway_checks (
    order_id        bigint      PRIMARY KEY REFERENCES orders (id) ON DELETE CASCADE,
    gateway         text        NOT NULL,
    state           text        NOT NULL DEFAULT 'chasing',
    attempts        integer     NOT NULL DEFAULT 0,
    next_check_at   timestamptz NOT NULL,
    last_checked_at timestamptz,
    last_status     text,
    last_error      text,
    payment_id      bigint      REFERENCES payments (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT gateway_checks_gateway_check CHECK (gateway IN ('wayforpay')),
    CONSTRAINT gateway_checks_state_check CHECK (state IN ('chasing', 'found', 'gave_up', 'settled')),
    CONSTRAINT gateway_checks_attempts_check CHECK (attempts >= 0)
);
CREATE INDEX gateway_checks_due_idx ON gateway_checks (next_check_at) WHERE state = 'chasing';

-- A payment refunded at the gateway (a WayForPay `Refunded`/`Voided`): its memberships are
-- shortened by what it bought, recorded as `refund` events naming the payment.
ALTER TABLE payments
    DROP CONSTRAINT payments_reason_check,
    ADD CONSTRAINT payments_reason_check CHECK (reason IN (
        'unknown_order', 'amount_mismatch', 'currency_mismatch', 'payer_mismatch',
        'order_cancelled', 'already_paid', 'hold_expired', 'no_seat', 'channel_inactive',
        'refunded_elsewhere', 'unknown_subscription', 'subscription_cancelled',
        'promo_exhausted', 'already_lifetime', 'refunded_at_gateway'));
ALTER TABLE membership_events
    DROP CONSTRAINT membership_events_cause_check,
    ADD CONSTRAINT membership_events_cause_check
        CHECK (cause IN ('payment', 'sweep', 'staff', 'trial', 'promo', 'refund')),
    DROP CONSTRAINT membership_events_payment_check,
    ADD CONSTRAINT membership_events_payment_check
        CHECK ((cause IN ('payment', 'refund')) = (payment_id IS NOT NULL));
