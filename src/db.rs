//! The database: connection pool, embedded migrations, and the transaction runner.
//!
//! Migrations are the ordered `migrations/*.sql` files, embedded in the binary. They run under a
//! session advisory lock, so two processes starting together apply each migration once; an
//! applied migration is never edited, a change is a new file.
//!
//! [`transaction!`](crate::transaction) runs a block in one transaction and runs it again (a bounded number of
//! times) when PostgreSQL aborts it as a deadlock victim or a serialization failure: the
//! block's effects were rolled back, so running it again is safe.
//!
//! Connections use TLS as the `sslmode` of `DATABASE_URL` says, `disable` to `verify-full`
//! ([`tls`]).

pub mod tls;

use std::{path::Path, time::Duration};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Transaction};

use crate::error::ApiError;

/// The migrations, in order. A new migration is appended here and never edited after release.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (
        2,
        "telegram",
        include_str!("../migrations/0002_telegram.sql"),
    ),
    (3, "effects", include_str!("../migrations/0003_effects.sql")),
    (
        4,
        "effect_leases",
        include_str!("../migrations/0004_effect_leases.sql"),
    ),
    (
        5,
        "buyer_bot",
        include_str!("../migrations/0005_buyer_bot.sql"),
    ),
];

/// Key of the session advisory lock that serializes migrations (the single-bigint keyspace,
/// distinct from the two-int4 keys the payment path uses).
const MIGRATION_LOCK: i64 = 0x5375_6267_6174_6501;

/// Builds the pool, with no `DATABASE_CA_CERT`; see [`pool_with_ca_cert`].
pub fn pool(database_url: &str, max_size: usize) -> Result<Pool, ApiError> {
    pool_with_ca_cert(database_url, max_size, None)
}

/// Builds the pool. Connections are made lazily, so a database that is down at start-up or
/// later only makes requests fail with 503 until it returns. TLS follows the URL's `sslmode`,
/// with the roots of the PEM file `ca_cert` (`DATABASE_CA_CERT`) when given ([`tls`]); that
/// file is read here, so a missing or unusable one is an error now, not at the first request.
pub fn pool_with_ca_cert(
    database_url: &str,
    max_size: usize,
    ca_cert: Option<&Path>,
) -> Result<Pool, ApiError> {
    let tls::Target {
        config: mut pg,
        ssl_mode,
    } = tls::parse_url(database_url).map_err(ApiError::internal)?;
    let connector = tls::connector(ssl_mode, ca_cert).map_err(ApiError::internal)?;
    if pg.get_connect_timeout().is_none() {
        pg.connect_timeout(Duration::from_secs(5));
    }
    if pg.get_application_name().is_none() {
        pg.application_name("subgate");
    }
    let manager = Manager::from_config(
        pg,
        connector,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .recycle_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(ApiError::internal)
}

/// Applies every migration not yet applied, each in its own transaction, under an advisory lock.
/// Returns how many were applied now.
pub async fn migrate(pool: &Pool) -> Result<usize, ApiError> {
    let mut client = pool.get().await?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply_pending(&mut client).await;
    // Unlock even when a migration failed; the connection goes back to the pool.
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply_pending(client: &mut deadpool_postgres::Object) -> Result<usize, ApiError> {
    // Checked first rather than `CREATE … IF NOT EXISTS`, whose notice would be logged at every
    // start; the advisory lock held by the caller makes check-then-create safe.
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        client
            .batch_execute(
                "CREATE TABLE schema_migrations (
                     version    integer PRIMARY KEY,
                     name       text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now()
                 )",
            )
            .await?;
    }
    let mut applied = 0;
    for &(version, name, sql) in MIGRATIONS {
        let tx = client.transaction().await?;
        let done = tx
            .query_opt(
                "SELECT 1 FROM schema_migrations WHERE version = $1",
                &[&version],
            )
            .await?
            .is_some();
        if done {
            continue;
        }
        tracing::info!(version, name, "applying migration");
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[&version, &name],
        )
        .await?;
        tx.commit().await?;
        applied += 1;
    }
    Ok(applied)
}

/// The newest migration this binary knows.
pub fn latest_migration() -> i32 {
    MIGRATIONS.last().map(|m| m.0).unwrap_or(0)
}

/// True when the database answers and every migration this binary knows is applied.
pub async fn is_ready(pool: &Pool) -> bool {
    let Ok(client) = pool.get().await else {
        return false;
    };
    let latest = latest_migration();
    let query = async {
        client
            .query_opt(
                "SELECT max(version) FROM schema_migrations HAVING max(version) >= $1",
                &[&latest],
            )
            .await
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), query).await,
        Ok(Ok(Some(_)))
    )
}

/// How often a deadlock victim or serialization failure is run again before the caller gets 503.
pub const MAX_ATTEMPTS: usize = 5;

/// What [`transaction!`](crate::transaction) does after one attempt.
pub enum Step<T> {
    Done(Result<T, ApiError>),
    Retry,
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
        Ok(v) => tx.commit().await.map(|_| v).map_err(ApiError::from),
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
                let result: ::std::result::Result<_, $crate::error::ApiError> = async {
                    let $tx = &tx;
                    $body
                }
                .await;
                match $crate::db::finish(tx, result, attempt).await {
                    $crate::db::Step::Done(r) => break r,
                    $crate::db::Step::Retry => continue,
                }
            }
        }
        .await
    }};
}

/// Takes the lock every transaction touching a hold or a membership takes first.
pub async fn lock_pair(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
) -> Result<(), ApiError> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&subscriber_id, &channel_id],
    )
    .await?;
    Ok(())
}
