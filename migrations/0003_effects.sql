-- subgate schema, version 3: Telegram effects through a transactional outbox.
-- A change that needs Telegram to act (grant, revoke, remind, refund, answer a join request)
-- inserts an `effects` row in its own transaction, so the intent commits exactly when the change
-- does. A worker claims due rows with FOR UPDATE SKIP LOCKED, performs the Bot API calls while
-- holding the row lock (no two workers perform one effect at once), and records the result in
-- the same transaction. Delivery is at least once; every effect is harmless when repeated.

CREATE TABLE effects (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text        NOT NULL,
    -- What the effect is about. SET NULL keeps the audit row when staff delete the record.
    membership_id   bigint      REFERENCES memberships (id) ON DELETE SET NULL,
    payment_id      bigint      REFERENCES payments (id) ON DELETE SET NULL,
    order_id        bigint      REFERENCES orders (id) ON DELETE SET NULL,
    -- The channel's telegram_chat_id (NULL for refunds, which concern no chat).
    chat_id         bigint,
    -- The Telegram user acted on or written to.
    user_id         bigint      NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}',
    -- pending: due at next_attempt_at; done; failed: the dead letter, retried only by staff.
    status          text        NOT NULL DEFAULT 'pending',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    -- Telegram's description or the transport failure; never contains the bot token.
    last_error      text,
    -- One effect per key, e.g. one reminder per (membership, expiry), one revoke per
    -- (membership, expiry), one refund per payment. NULL: no deduplication needed.
    dedupe_key      text,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    done_at         timestamptz,
    CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline')),
    CONSTRAINT effects_status_check CHECK (status IN ('pending', 'done', 'failed')),
    CONSTRAINT effects_done_at_check CHECK ((status = 'done') = (done_at IS NOT NULL)),
    CONSTRAINT effects_attempts_check CHECK (attempts >= 0),
    CONSTRAINT effects_chat_id_check CHECK (kind = 'refund' OR chat_id IS NOT NULL),
    CONSTRAINT effects_payment_check CHECK (kind <> 'refund' OR payment_id IS NOT NULL),
    CONSTRAINT effects_dedupe_key_key UNIQUE (dedupe_key)
);
-- The worker's queue: due pending rows, oldest due first.
CREATE INDEX effects_due_idx ON effects (next_attempt_at, id) WHERE status = 'pending';
-- GET /api/effects?status=…
CREATE INDEX effects_status_idx ON effects (status, id);
-- ON DELETE SET NULL of the three references.
CREATE INDEX effects_membership_idx ON effects (membership_id) WHERE membership_id IS NOT NULL;
CREATE INDEX effects_payment_idx ON effects (payment_id) WHERE payment_id IS NOT NULL;
CREATE INDEX effects_order_idx ON effects (order_id) WHERE order_id IS NOT NULL;

-- The channel's join link: createChatInviteLink(creates_join_request = true), made once by the
-- first grant and reused, so a shared link admits nobody: each join request is approved only
-- for a paying member.
ALTER TABLE channels ADD COLUMN invite_link text;

-- Where the reconcile of Stars transactions (getStarTransactions) left off. One row.
CREATE TABLE star_reconcile (
    singleton   boolean     PRIMARY KEY DEFAULT true,
    next_offset bigint      NOT NULL DEFAULT 0,
    last_run_at timestamptz,
    CONSTRAINT star_reconcile_singleton_check CHECK (singleton),
    CONSTRAINT star_reconcile_next_offset_check CHECK (next_offset >= 0)
);
INSERT INTO star_reconcile DEFAULT VALUES;
