//! Claiming and leasing (the module doc of [`super`] says why): the claim of the next due
//! effect in its own short transaction, the per-member ordering of access effects under an
//! advisory lock, the heartbeat that renews a claim while its attempt runs, and the release
//! of a claim whose result could not be recorded.

use std::time::Duration;

use deadpool_postgres::{Object, Transaction};

use super::Worker;
use crate::{
    app::state::AppState,
    catalog::channels,
    common::error::ApiError,
    db,
    outbox::effects::{Effect, Kind, effect_columns},
};

/// A committed claim: the effect and the token its result must be recorded under.
pub(super) struct Claimed {
    pub(super) effect: Effect,
    pub(super) token: i64,
}

impl Worker {
    /// Renews the claims `claims` (effect id and token; `lease_until` = now + lease) every third
    /// of the lease while their attempts run; returns only when every one was found superseded
    /// (claimed again, after this worker failed to renew it in time). A renewal that fails on a
    /// database error is tried again at the next beat.
    pub(super) async fn heartbeat(&self, claims: &[(i64, i64)]) {
        let lease = self.options.lease;
        let every = lease / 3;
        let (ids, tokens): (Vec<i64>, Vec<i64>) = claims.iter().copied().unzip();
        loop {
            tokio::time::sleep(every).await;
            let renewed = async {
                let client = self.state.db.get().await?;
                db::rows(&client, RENEW_SQL, &[&ids, &tokens, &lease.as_secs_f64()]).await
            }
            .await;
            match renewed {
                Ok(rows) if rows.is_empty() => return,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(effect_ids = ?ids, error = %e, "leases not renewed; trying again");
                }
            }
        }
    }
}

const RENEW_SQL: &str =
    "UPDATE effects e SET lease_until = statement_timestamp() + make_interval(secs => $3)
     FROM unnest($1::bigint[], $2::bigint[]) AS c(id, token)
     WHERE e.id = c.id AND e.lease_token = c.token AND e.status = 'pending'
     RETURNING e.id";

/// The access kinds, which are ordered per member and claimed before every other kind (as a
/// SQL list; the partial index `effects_member_access_idx` covers exactly these, and the claim
/// index `effects_claim_idx` leads with `claim_tier_sql!` below, which names them).
macro_rules! access_kinds_sql {
    () => {
        "('grant', 'revoke', 'join_approve', 'join_decline', 'unban')"
    };
}

/// Whether effects of `kind` change who is in a chat, and so are ordered per member.
pub fn is_access(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Grant | Kind::Revoke | Kind::JoinApprove | Kind::JoinDecline | Kind::Unban
    )
}

/// The test of a claim's ordering rule for access effect `$1` of member (`$2`, `$3`): no other
/// pending access effect of the member is earlier, and none is leased.
const FIRST_OF_MEMBER_SQL: &str = concat!(
    "SELECT NOT EXISTS (
    SELECT 1 FROM effects b
    WHERE b.chat_id = $2 AND b.user_id = $3 AND b.status = 'pending' AND b.id <> $1
      AND b.kind IN ",
    access_kinds_sql!(),
    "
      AND (b.id < $1 OR b.lease_until > statement_timestamp())) AS first"
);

/// The claim's tier of an effect: 0 for access effects, 2 for messages to members (broadcasts
/// and automations), 1 for every other kind (invoices, receipts, the bot's answers). Claims
/// take the lowest tier first, so neither a grant nor a buyer's invoice waits behind a
/// broadcast. The expression is exactly the leading key of `effects_claim_idx` (migration
/// `0024_messages_to_members.sql`), which serves the claim's order.
macro_rules! claim_tier_sql {
    () => {
        concat!(
            "(CASE WHEN kind IN ",
            access_kinds_sql!(),
            " THEN 0\n              WHEN kind = 'member_message' THEN 2 ELSE 1 END)"
        )
    };
}

const CANDIDATE_SQL: &str = concat!(
    "SELECT id, kind, chat_id, user_id FROM effects e
     WHERE status = 'pending' AND next_attempt_at <= statement_timestamp()
       AND (lease_until IS NULL OR lease_until <= statement_timestamp())
       AND NOT (id = ANY($1))
       AND ",
    claim_tier_sql!(),
    " <= $2
       AND NOT (e.kind IN ",
    access_kinds_sql!(),
    " AND EXISTS (
           SELECT 1 FROM effects b
           WHERE b.chat_id = e.chat_id AND b.user_id = e.user_id
             AND b.status = 'pending' AND b.kind IN ",
    access_kinds_sql!(),
    " AND b.id <> e.id
             AND (b.id < e.id OR b.lease_until > statement_timestamp())))
       AND NOT (e.kind IN ",
    access_kinds_sql!(),
    " AND e.chat_id IN (",
    channels::no_rights_chats_sql!(),
    "))
     ORDER BY ",
    claim_tier_sql!(),
    ", next_attempt_at, id
     LIMIT 1
     FOR UPDATE SKIP LOCKED"
);

/// The claim reads its candidate through `effects_claim_idx`, which returns pending effects in
/// the claim's order, so `LIMIT 1` reads one entry however many are pending. The planner would
/// rather read every pending effect through another index and sort them when the statistics
/// say few are pending (taken in a quiet hour, or of an empty table): it estimates one row and
/// keeps the plan for the connection's prepared statement. During a backlog (an invoice storm
/// of the bot) each claim would then read and sort the whole backlog: 6.5 ms a claim at 10,000
/// pending invoices, against 0.6 ms through the claim index. Sorting is therefore off for the claim's
/// transaction (`SET LOCAL`): with the claim index there is nothing to sort.
const CLAIM_PLAN_SQL: &str = "SET LOCAL enable_sort = off";

const MEMBER_LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(
         hashtextextended('subgate effects ' || $1::bigint || ':' || $2::bigint, 0))";

const LEASE_SQL: &str = concat!(
    "UPDATE effects SET lease_until = statement_timestamp() + make_interval(secs => $2),
         lease_token = lease_token + 1
     WHERE id = $1
     RETURNING ",
    effect_columns!(),
    ", lease_token AS token"
);

/// Claims the next due effect (see the module doc): the first due one, by due time then id,
/// that is not leased, not in `exclude`, of a tier up to `max_tier` (1: not a message to
/// members, which lanes then claim in batches, [`claim_messages`]; 2: every kind), and — for an access effect — the first pending access
/// effect of its chat member with none of that member's access effects leased. For an access
/// effect the rule is checked again in a fresh statement under the member's advisory lock —
/// held until the claim commits — so of two claims racing for one member, the second sees the
/// first's lease; a candidate that fails the check is passed over. Commits the lease and a new
/// token.
pub(super) async fn claim(
    client: &mut Object,
    exclude: &[i64],
    max_tier: i32,
    lease: Duration,
) -> Result<Option<Claimed>, ApiError> {
    let mut passed = exclude.to_vec();
    loop {
        let tx = client.transaction().await?;
        // Sent together: the setting applies to the candidate's statement (see CLAIM_PLAN_SQL).
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&passed, &max_tier];
        let (_, candidate) = tokio::try_join!(
            async { Ok::<_, ApiError>(tx.batch_execute(CLAIM_PLAN_SQL).await?) },
            db::row_opt(&tx, CANDIDATE_SQL, &params)
        )?;
        let Some(candidate) = candidate else {
            tx.rollback().await?;
            return Ok(None);
        };
        let (id, kind, chat, user): (i64, Kind, Option<i64>, i64) = (
            candidate.try_get("id")?,
            candidate.try_get("kind")?,
            candidate.try_get("chat_id")?,
            candidate.try_get("user_id")?,
        );
        if let Some(chat) = chat
            && is_access(kind)
            && !first_of_member(&tx, id, chat, user).await?
        {
            tx.rollback().await?;
            passed.push(id);
            continue;
        }
        let row = db::row_one(&tx, LEASE_SQL, &[&id, &lease.as_secs_f64()]).await?;
        tx.commit().await?;
        return Ok(Some(Claimed {
            effect: db::FromRow::from_row(&row)?,
            token: row.try_get("token")?,
        }));
    }
}

/// Under member (`chat`, `user`)'s advisory lock, held until the claim commits: whether effect
/// `id` is the member's first pending one and none of theirs is leased.
async fn first_of_member(
    tx: &Transaction<'_>,
    id: i64,
    chat: i64,
    user: i64,
) -> Result<bool, ApiError> {
    db::execute(tx, MEMBER_LOCK_SQL, &[&chat, &user]).await?;
    Ok(db::row_one(tx, FIRST_OF_MEMBER_SQL, &[&id, &chat, &user])
        .await?
        .try_get("first")?)
}

/// The batch claim of messages to members (see [`claim_messages`]): the first due ones in the
/// claim's order (the tier of messages to members reads one range of `effects_claim_idx`), not
/// leased and not in `$1`, at most `$2`, leased with a new token each.
const MESSAGES_SQL: &str = concat!(
    "WITH due AS (
         SELECT id AS due_id FROM effects
         WHERE status = 'pending' AND ",
    claim_tier_sql!(),
    " = 2
           AND next_attempt_at <= statement_timestamp()
           AND (lease_until IS NULL OR lease_until <= statement_timestamp())
           AND NOT (id = ANY($1))
         ORDER BY ",
    claim_tier_sql!(),
    ", next_attempt_at, id
         LIMIT $2
         FOR UPDATE SKIP LOCKED)
     UPDATE effects SET lease_until = statement_timestamp() + make_interval(secs => $3),
         lease_token = lease_token + 1
     FROM due WHERE id = due.due_id
     RETURNING ",
    effect_columns!(),
    ", lease_token AS token"
);

/// Claims up to `max` due messages to members (`member_message` effects) at once, in the
/// claim's order, for a lane of a run during a paid broadcast ([`super::PAID_LANES`]): one
/// short transaction for the batch. Messages to members are not ordered per member, so no member's
/// rule is checked. Commits the leases and new tokens; the claims, by id.
pub(super) async fn claim_messages(
    client: &mut Object,
    exclude: &[i64],
    lease: Duration,
    max: i64,
) -> Result<Vec<Claimed>, ApiError> {
    let tx = client.transaction().await?;
    let secs = lease.as_secs_f64();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&exclude, &max, &secs];
    let (_, rows) = tokio::try_join!(
        async { Ok::<_, ApiError>(tx.batch_execute(CLAIM_PLAN_SQL).await?) },
        db::rows(&tx, MESSAGES_SQL, &params)
    )?;
    tx.commit().await?;
    let mut claimed = rows
        .iter()
        .map(|row| {
            Ok(Claimed {
                effect: db::FromRow::from_row(row)?,
                token: row.try_get("token")?,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    claimed.sort_by_key(|c| c.effect.id);
    Ok(claimed)
}

const RELEASE_SQL: &str = "UPDATE effects e SET lease_until = NULL
     FROM unnest($1::bigint[], $2::bigint[]) AS c(id, token)
     WHERE e.id = c.id AND e.lease_token = c.token AND e.status = 'pending'";

/// Gives claims (effect id and token) back after their results could not be recorded, so the
/// effects are due again at once rather than when their leases run out. Best effort: the
/// leases run out anyway.
pub(super) async fn release(state: &AppState, claims: &[(i64, i64)]) {
    let (ids, tokens): (Vec<i64>, Vec<i64>) = claims.iter().copied().unzip();
    let result = async {
        let client = state.db.get().await?;
        db::execute(&client, RELEASE_SQL, &[&ids, &tokens]).await
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(effect_ids = ?ids, error = %e, "leases not given back; they run out by themselves");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claim orders by exactly the leading key of `effects_claim_idx`, so the index serves
    /// it (compared word by word: the migration lays it out on lines of its own).
    #[test]
    fn the_claim_orders_by_the_claim_index_s_key() {
        let words = crate::db::sql_words;
        let migration = words(include_str!(
            "../../../migrations/0024_messages_to_members.sql"
        ));
        let index = migration
            .split("CREATE INDEX effects_claim_idx ON effects (")
            .nth(1)
            .expect("the migration makes the claim index");
        assert!(
            index.trim_start().starts_with(&words(claim_tier_sql!())),
            "{index}"
        );
        assert!(words(CANDIDATE_SQL).contains(&words(concat!(
            "ORDER BY ",
            claim_tier_sql!(),
            ", next_attempt_at, id"
        ))));
        for kind in Kind::ALL {
            let tier = if is_access(kind) {
                "THEN 0"
            } else if kind == Kind::MemberMessage {
                "THEN 2"
            } else {
                "ELSE 1"
            };
            assert!(claim_tier_sql!().contains(tier), "{kind}");
        }
    }
}
