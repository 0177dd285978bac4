-- The channel's (or group's) own link as the paywall: a chat whose join requests subgate
-- answers with a Mini App (docs/bot.md#the-door), and the requests waiting at that door.

-- How a join request of the chat is answered: `bot` as before (approve a member, decline
-- anyone else), `mini_app` the paywall (a request carrying a query opens the Mini App).
ALTER TABLE channels
    ADD COLUMN door text NOT NULL DEFAULT 'bot',
    ADD CONSTRAINT channels_door_check CHECK (door IN ('bot', 'mini_app'));

-- A join request that came with a query (`chat_join_request.query_id`) to a `mini_app` chat.
-- `answer` is how the query was answered at the door (in the webhook's reply): `approve` (a
-- member, an exempt user, an administrator), `web_app` (the paywall opened), `queue` (not
-- decided in time: decided later, as a plain join request). `state` is the request's own fate:
-- `waiting` until it is approved (its buyer's access was granted) or declined (its order ran
-- out unpaid, or it outlived its query). One waiting request per chat and user: a new request
-- of the same user takes the waiting row over (its new query, its new reference).
CREATE TABLE join_requests (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id   integer     NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
    chat_id      bigint      NOT NULL,
    user_id      bigint      NOT NULL,
    query_id     text        NOT NULL,
    -- The one-time reference the paywall URL carries (`r=`), naming this request.
    reference    text        NOT NULL,
    answer       text        NOT NULL,
    state        text        NOT NULL DEFAULT 'waiting',
    -- The order the Mini App made for this request (its hold decides when an unpaid request is
    -- declined).
    order_id     bigint      REFERENCES orders (id) ON DELETE SET NULL,
    -- Telegram's `date` of the request.
    requested_at timestamptz NOT NULL,
    -- When the query arrived (its life counts from here).
    created_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    decided_at   timestamptz,
    -- Telegram confirmed the decision (the approval or decline call succeeded).
    answered_at  timestamptz,
    CONSTRAINT join_requests_query_key UNIQUE (query_id),
    CONSTRAINT join_requests_reference_key UNIQUE (reference),
    CONSTRAINT join_requests_answer_check CHECK (answer IN ('approve', 'web_app', 'queue')),
    CONSTRAINT join_requests_state_check CHECK (state IN ('waiting', 'approved', 'declined')),
    CONSTRAINT join_requests_decided_check CHECK ((state = 'waiting') = (decided_at IS NULL)),
    CONSTRAINT join_requests_query_id_check CHECK (char_length(query_id) BETWEEN 1 AND 256)
);
CREATE UNIQUE INDEX join_requests_waiting_key ON join_requests (chat_id, user_id)
    WHERE state = 'waiting';
CREATE INDEX join_requests_waiting_idx ON join_requests (created_at) WHERE state = 'waiting';
CREATE INDEX join_requests_order_idx ON join_requests (order_id) WHERE order_id IS NOT NULL;
CREATE INDEX join_requests_channel_idx ON join_requests (channel_id, created_at DESC);
