-- Messages to members: the buyer's consent, the automations, broadcasts, and one row per
-- message a member is sent (docs/effects.md, "Messages to members").

-- `/stop` in the bot sets `marketing_opt_out` (`/start` clears it); a 403 from Telegram (the
-- buyer blocked the bot) clears `reachable` until the buyer writes to the bot again. Neither
-- ever holds back a message about the buyer's own access or payments.
ALTER TABLE subscribers
    ADD COLUMN marketing_opt_out boolean NOT NULL DEFAULT false,
    ADD COLUMN reachable         boolean NOT NULL DEFAULT true;

-- A promo code made for one buyer alone (a win-back or cancel offer): nobody else may use it.
ALTER TABLE promo_codes
    ADD COLUMN subscriber_id integer REFERENCES subscribers (id) ON DELETE CASCADE;
CREATE INDEX promo_codes_subscriber_idx ON promo_codes (subscriber_id)
    WHERE subscriber_id IS NOT NULL;

-- The four automations, each off until the owner switches it on. `texts`: a Project Fluent
-- pattern per language; `promo`: the template of the code a win-back or cancel offer makes
-- (`{"percent_off", "valid_days", "plan_ids"}`).
CREATE TABLE automations (
    kind          text        PRIMARY KEY,
    enabled       boolean     NOT NULL DEFAULT false,
    delay_minutes integer     NOT NULL,
    texts         jsonb       NOT NULL DEFAULT '{}',
    promo         jsonb,
    updated_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT automations_kind_check CHECK (
        kind IN ('unpaid_checkout', 'win_back', 'cancel_offer', 'renewal_failed')),
    CONSTRAINT automations_delay_minutes_check CHECK (delay_minutes BETWEEN 0 AND 525600),
    CONSTRAINT automations_texts_check CHECK (jsonb_typeof(texts) = 'object'),
    CONSTRAINT automations_promo_check CHECK (
        promo IS NULL OR (jsonb_typeof(promo) = 'object'
                          AND kind IN ('win_back', 'cancel_offer')))
);
INSERT INTO automations (kind, delay_minutes) VALUES
    ('unpaid_checkout', 60), ('win_back', 4320), ('cancel_offer', 0), ('renewal_failed', 0);

-- A broadcast: its texts, segment and button, and when it is sent. The recipient list is fixed
-- when sending starts (`messages` rows). A paid broadcast reserves its budget in steps
-- (`paid_reserved`, never above `paid_max_stars` × 10 messages at 0.1 Star each); the
-- messages actually sent paid are the `messages` rows with `paid`.
CREATE TABLE broadcasts (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status         text        NOT NULL,
    texts          jsonb       NOT NULL,
    segment        jsonb       NOT NULL,
    button         jsonb,
    send_at        timestamptz NOT NULL,
    paid_max_stars integer,
    paid_reserved  integer     NOT NULL DEFAULT 0,
    recipients     integer     NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    started_at     timestamptz,
    finished_at    timestamptz,
    cancelled_at   timestamptz,
    CONSTRAINT broadcasts_status_check CHECK (
        status IN ('scheduled', 'sending', 'finished', 'cancelled')),
    CONSTRAINT broadcasts_texts_check CHECK (jsonb_typeof(texts) = 'object'),
    CONSTRAINT broadcasts_segment_check CHECK (jsonb_typeof(segment) = 'object'),
    CONSTRAINT broadcasts_paid_max_stars_check CHECK (paid_max_stars >= 1),
    CONSTRAINT broadcasts_budget_check CHECK (
        paid_reserved >= 0 AND paid_reserved <= COALESCE(paid_max_stars, 0) * 10)
);
CREATE INDEX broadcasts_due_idx ON broadcasts (send_at) WHERE status = 'scheduled';
CREATE INDEX broadcasts_sending_idx ON broadcasts (id) WHERE status = 'sending';

-- One message to one member: a broadcast's (one per recipient) or an automation's (one per
-- order, membership end or subscription: `dedupe_key`). Sent by a `member_message` effect;
-- `attempted_at` is written just before the Bot API call, so a call a crash interrupted is
-- never made again (it might have reached the buyer). `outcome` NULL: not decided yet.
CREATE TABLE messages (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber_id        integer     NOT NULL REFERENCES subscribers (id) ON DELETE CASCADE,
    kind                 text        NOT NULL,
    broadcast_id         bigint      REFERENCES broadcasts (id) ON DELETE CASCADE,
    order_id             bigint      REFERENCES orders (id) ON DELETE CASCADE,
    membership_id        bigint      REFERENCES memberships (id) ON DELETE CASCADE,
    star_subscription_id bigint      REFERENCES star_subscriptions (id) ON DELETE CASCADE,
    promo_code_id        bigint      REFERENCES promo_codes (id) ON DELETE SET NULL,
    dedupe_key           text        NOT NULL,
    language             text        NOT NULL,
    outcome              text,
    note                 text,
    text                 text,
    paid                 boolean     NOT NULL DEFAULT false,
    attempted_at         timestamptz,
    created_at           timestamptz NOT NULL DEFAULT statement_timestamp(),
    sent_at              timestamptz,
    CONSTRAINT messages_dedupe_key_key UNIQUE (dedupe_key),
    CONSTRAINT messages_kind_check CHECK (
        kind IN ('broadcast', 'unpaid_checkout', 'win_back', 'cancel_offer', 'renewal_failed')),
    CONSTRAINT messages_broadcast_check CHECK ((kind = 'broadcast') = (broadcast_id IS NOT NULL)),
    CONSTRAINT messages_language_check CHECK (language IN ('en', 'uk', 'ru')),
    CONSTRAINT messages_outcome_check CHECK (
        outcome IN ('sent', 'blocked', 'failed', 'skipped')),
    CONSTRAINT messages_decided_check CHECK ((outcome IS NULL) = (sent_at IS NULL))
);
CREATE INDEX messages_broadcast_idx ON messages (broadcast_id, outcome)
    WHERE broadcast_id IS NOT NULL;
CREATE INDEX messages_subscriber_idx ON messages (subscriber_id, id);
CREATE INDEX messages_automation_idx ON messages (kind, outcome) WHERE broadcast_id IS NULL;

-- `member_message`: one `messages` row sent (`payload.message_id`; `user_id` the buyer).
ALTER TABLE effects
    DROP CONSTRAINT effects_kind_check,
    ADD CONSTRAINT effects_kind_check CHECK (kind IN (
        'grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
        'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel',
        'unban', 'member_message')),
    DROP CONSTRAINT effects_chat_id_check,
    ADD CONSTRAINT effects_chat_id_check CHECK (
        kind IN ('refund', 'bot_message', 'invoice', 'subscription_cancel', 'member_message')
        OR chat_id IS NOT NULL);

-- The claim's order gains a third tier: access effects, then every other effect (invoices,
-- receipts, the bot's answers), then messages to members, each tier by due time and id. A
-- 100,000-recipient broadcast therefore holds back neither a grant nor a buyer's invoice.
-- The expression must stay exactly the claim query's (src/app/worker/claim.rs).
DROP INDEX effects_claim_idx;
CREATE INDEX effects_claim_idx ON effects (
        (CASE WHEN kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban') THEN 0
              WHEN kind = 'member_message' THEN 2 ELSE 1 END),
        next_attempt_at, id)
    WHERE status = 'pending';

-- Outbound endpoints may ask for `broadcast.finished` and `automation.sent` (emitted by the code
-- that finishes a broadcast and records an automation's message, with `webhook_emit`).
ALTER TABLE webhook_endpoints
    DROP CONSTRAINT webhook_endpoints_event_types_check,
    ADD CONSTRAINT webhook_endpoints_event_types_check CHECK (
        cardinality(event_types) >= 1
        AND event_types <@ ARRAY['payment.applied', 'payment.needs_review', 'payment.refunded',
            'payment.disputed', 'membership.activated', 'membership.renewed', 'membership.grace',
            'membership.expired', 'membership.deleted', 'trial.started', 'broadcast.finished',
            'automation.sent']::text[]);
