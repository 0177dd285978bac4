-- subgate schema, version 20: Telegram's `subscription` updates, and a limit on guessing promo
-- codes through the bot.

-- Every `subscription` update (Bot API BotSubscriptionUpdated: a buyer cancelled or re-enabled
-- a Stars subscription, or its renewal charge failed), by Telegram's update_id: what it said,
-- the subscription it was tied to and what came of it. A redelivered update finds its row and
-- changes nothing (as bot_updates: Telegram re-delivers within a day and may reuse ids after a
-- quiet week, so a row older than a day is taken over). One that could not be applied (an
-- unknown payload, buyer or state; a re-enable of a subscription staff or subgate cancelled)
-- is `review`, with its `note`, for staff; those rows are never purged.
CREATE TABLE star_subscription_updates (
    update_id        bigint      PRIMARY KEY,
    -- As Telegram sent them; null when missing from an odd update.
    telegram_user_id bigint,
    invoice_payload  text,
    state            text,
    subscription_id  bigint      REFERENCES star_subscriptions (id) ON DELETE SET NULL,
    outcome          text        NOT NULL,
    note             text,
    created_at       timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT star_subscription_updates_outcome_check
        CHECK (outcome IN ('applied', 'unchanged', 'review')),
    CONSTRAINT star_subscription_updates_note_check
        CHECK ((outcome = 'review') = (note IS NOT NULL))
);
CREATE INDEX star_subscription_updates_review_idx ON star_subscription_updates (created_at)
    WHERE outcome = 'review';

-- Wrong promo codes given to the bot (`/code`, a deep link with a code), counted in fixed
-- windows: one row per Telegram user (`who` > 0) and one for everyone (`who` = 0). A code
-- attempt locks its user's row and then the everyone row, in that order, for the rest of its
-- transaction, so concurrent attempts are counted one after another and never past a limit.
CREATE TABLE bot_code_guesses (
    who          bigint      PRIMARY KEY,
    window_start timestamptz NOT NULL,
    wrong        integer     NOT NULL DEFAULT 0,
    CONSTRAINT bot_code_guesses_who_check CHECK (who >= 0),
    CONSTRAINT bot_code_guesses_wrong_check CHECK (wrong >= 0)
);
