-- The sweep records its Telegram effects in a compact queue; the effects worker turns them into
-- `effects` rows, a chunk at a time.
--
-- A sweep of a million overdue memberships used to write a million `effects` rows inside its
-- batches, each with a heap tuple, seven index entries, a JSON payload, a text key and three
-- foreign-key checks — most of the sweep's time, spent while its batches hold pair locks, on
-- rows the worker can only perform at Telegram's pace (about 28 a second: ten hours for a
-- million). Now each batch writes, in the same statement and transaction as the transitions,
-- one narrow row per revoke or grace notice here (one index, no foreign key, no trigger): the
-- intent still commits exactly when the transition does, and is never lost. The worker moves
-- queued rows into `effects` (src/effects/mod.rs, `materialize_sweep_queue`) in chunks, at the
-- start of every run and whenever it finds nothing due, deleting them in the same statement, so
-- each becomes exactly one effect with the key, payload and Telegram ids it always had
-- (`revoke:{membership}:ev{event}`).
--
-- A row is self-contained: the chat and the user are those of the transition, and it outlives
-- its membership (a membership deleted before its revoke was made still gets it, naming no
-- membership, like the revoke of a deleted membership).
CREATE TABLE sweep_queue (
    -- The transition's `membership_events` row; its key and the queue's order.
    event_id      bigint      PRIMARY KEY,
    membership_id bigint      NOT NULL,
    kind          text        NOT NULL,
    chat_id       bigint      NOT NULL,
    user_id       bigint      NOT NULL,
    -- The membership's expiry at the transition (the effect's payload).
    expires_at    timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT sweep_queue_kind_check CHECK (kind IN ('revoke', 'grace_notice'))
);
