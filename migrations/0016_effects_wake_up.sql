-- The effects worker claims access effects first.
--
-- The claim's order: access effects (grant, revoke, join answers, unban) first, then by due
-- time and id. `false` sorts first, so the leading key is "not an access effect". The
-- expression must stay exactly the claim query's (src/worker/mod.rs, `CANDIDATE_SQL`).
--
-- (No trigger notifies the worker: a NOTIFY inside the writing transaction takes a
-- cluster-wide lock from its commit to the end of the commit's WAL flush, which serializes
-- every payment's commit. The process that commits wakes its own worker and tells the others
-- with a NOTIFY of its own, outside any payment; see src/worker/listen.rs.)
CREATE INDEX effects_claim_idx ON effects (
        (kind NOT IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban')),
        next_attempt_at, id)
    WHERE status = 'pending';

-- The index above replaces the due-time index the claim used.
DROP INDEX IF EXISTS effects_due_idx;
