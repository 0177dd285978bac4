//! The transaction runner ([`transaction!`](crate::transaction)): a block run in one
//! transaction and run again, a bounded number of times, when PostgreSQL aborts it as a
//! deadlock victim or a serialization failure (its effects were rolled back, so running it
//! again is safe); the commit announcement the effects worker wakes on; the pair lock.

use std::time::Duration;

use deadpool_postgres::Transaction;

use crate::common::{
    error::ApiError,
    ids::{ChannelId, SubscriberId},
};

use super::execute;

/// How often a deadlock victim or serialization failure is run again before the caller gets 503.
pub const MAX_ATTEMPTS: usize = 5;

/// What [`transaction!`](crate::transaction) does after one attempt.
pub enum Step<T> {
    Done(Result<T, ApiError>),
    Retry,
}

/// Counts the commits of [`transaction!`](crate::transaction) in this process; see [`commits`].
fn commit_counter() -> &'static tokio::sync::watch::Sender<u64> {
    static COMMITS: std::sync::OnceLock<tokio::sync::watch::Sender<u64>> =
        std::sync::OnceLock::new();
    COMMITS.get_or_init(|| tokio::sync::watch::channel(0).0)
}

/// Says that a transaction of this process committed (the runner does it after each commit;
/// code that commits a transaction of its own that may enqueue effects calls it too). An
/// atomic update and a wake-up of the waiting receivers, nothing more.
pub fn announce_commit() {
    commit_counter().send_modify(|n| *n = n.wrapping_add(1));
}

/// A receiver that sees a change after every commit announced from now on ([`announce_commit`]):
/// how the effects worker of this process learns, without asking the database, that effects
/// may have been committed. Changes are folded: a receiver that was busy sees one.
pub fn commits() -> tokio::sync::watch::Receiver<u64> {
    commit_counter().subscribe()
}

/// Ends one attempt of [`transaction!`](crate::transaction): commits on success, rolls back on
/// error, and asks for another attempt after a deadlock or serialization failure (with a short,
/// growing, jittered pause) while attempts remain.
pub async fn finish<T>(
    tx: Transaction<'_>,
    result: Result<T, ApiError>,
    attempt: usize,
) -> Step<T> {
    let outcome = match result {
        Ok(v) => {
            let committed = tx.commit().await.map(|_| v).map_err(ApiError::from);
            if committed.is_ok() {
                announce_commit();
            }
            committed
        }
        Err(e) => {
            // Dropping would roll back too; doing it here leaves the connection clean now.
            let _ = tx.rollback().await;
            Err(e)
        }
    };
    match outcome {
        Err(e) if e.is_retryable() && attempt < MAX_ATTEMPTS => {
            tracing::info!(
                attempt,
                sqlstate = ?e.sql_state().map(|s| s.code()),
                "transaction aborted by contention; running it again"
            );
            let jitter = rand::random::<u64>() % 20;
            tokio::time::sleep(Duration::from_millis(10 * attempt as u64 + jitter)).await;
            Step::Retry
        }
        other => Step::Done(other),
    }
}

/// Takes `client` out of the pool when `result` says its connection is lost
/// ([`ApiError::is_connection_lost`]): a closed connection would be dropped at its next checkout
/// anyway, but a read-only one (the server is no longer the primary) would be handed out again
/// and fail every write. A new connection goes through `target_session_attrs` again.
pub fn discard_if_lost<T>(client: deadpool_postgres::Object, result: &Result<T, ApiError>) {
    if let Err(e) = result
        && e.is_connection_lost()
    {
        tracing::warn!(error = %e, "database connection lost; discarding it");
        drop(deadpool_postgres::Object::take(client));
    }
}

/// Runs a block inside one transaction and commits; evaluates to `Result<T, ApiError>`.
///
/// `transaction!(pool, |tx| { ...; Ok(value) })`: inside the block `tx` is a
/// `&deadpool_postgres::Transaction` and `?` leaves the block (rolling back). A deadlock or
/// serialization failure rolls back and runs the block again (at most [`MAX_ATTEMPTS`] times):
/// its effects were undone, so that is safe. A macro rather than a function taking an async
/// closure, because the futures of such closures cannot be proven `Send` for axum handlers.
#[macro_export]
macro_rules! transaction {
    ($pool:expr, |$tx:ident| $body:block) => {{
        async {
            let mut client = $pool.get().await?;
            let mut attempt = 0usize;
            loop {
                attempt += 1;
                let tx = client.transaction().await?;
                let result: ::std::result::Result<_, $crate::common::error::ApiError> = async {
                    let $tx = &tx;
                    $body
                }
                .await;
                match $crate::db::finish(tx, result, attempt).await {
                    $crate::db::Step::Done(r) => {
                        $crate::db::discard_if_lost(client, &r);
                        break r;
                    }
                    $crate::db::Step::Retry => continue,
                }
            }
        }
        .await
    }};
}

/// The pair's advisory lock ([`lock_pair`]).
pub(crate) const LOCK_PAIR_SQL: &str = "SELECT pg_advisory_xact_lock($1, $2)";

/// Takes the lock every transaction touching a hold or a membership takes first.
pub async fn lock_pair(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
) -> Result<(), ApiError> {
    execute(tx, LOCK_PAIR_SQL, &[&subscriber_id, &channel_id]).await?;
    Ok(())
}
