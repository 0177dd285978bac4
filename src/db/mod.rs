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

use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Pool, QueueMode, RecyclingMethod, Runtime, Transaction,
};
use tokio_postgres::{Row, types::ToSql};

use crate::common::{
    error::ApiError,
    ids::{ChannelId, SubscriberId},
};

/// The migrations, in order. A new migration is appended here and never edited after release.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("../../migrations/0001_init.sql")),
    (
        2,
        "telegram",
        include_str!("../../migrations/0002_telegram.sql"),
    ),
    (
        3,
        "effects",
        include_str!("../../migrations/0003_effects.sql"),
    ),
    (
        4,
        "effect_leases",
        include_str!("../../migrations/0004_effect_leases.sql"),
    ),
    (
        5,
        "buyer_bot",
        include_str!("../../migrations/0005_buyer_bot.sql"),
    ),
    (
        6,
        "star_subscription_refusals",
        include_str!("../../migrations/0006_star_subscription_refusals.sql"),
    ),
    (
        7,
        "seat_holds",
        include_str!("../../migrations/0007_seat_holds.sql"),
    ),
    (
        8,
        "staff_token_version",
        include_str!("../../migrations/0008_staff_token_version.sql"),
    ),
    (
        9,
        "offers",
        include_str!("../../migrations/0009_offers.sql"),
    ),
    (
        10,
        "telegram_truth",
        include_str!("../../migrations/0010_telegram_truth.sql"),
    ),
    (11, "audit", include_str!("../../migrations/0011_audit.sql")),
    (
        12,
        "languages",
        include_str!("../../migrations/0012_languages.sql"),
    ),
    (
        13,
        "outbound_webhooks",
        include_str!("../../migrations/0013_outbound_webhooks.sql"),
    ),
    (
        14,
        "staff_roles",
        include_str!("../../migrations/0014_staff_roles.sql"),
    ),
    (
        15,
        "cheaper_writes",
        include_str!("../../migrations/0015_cheaper_writes.sql"),
    ),
    (
        16,
        "effects_wake_up",
        include_str!("../../migrations/0016_effects_wake_up.sql"),
    ),
    (
        17,
        "sweep_queue",
        include_str!("../../migrations/0017_sweep_queue.sql"),
    ),
    (
        18,
        "refund_before_payment",
        include_str!("../../migrations/0018_refund_before_payment.sql"),
    ),
    (
        19,
        "subscription_updates_code_guesses",
        include_str!("../../migrations/0019_subscription_updates_code_guesses.sql"),
    ),
    (
        20,
        "stripe_disputes",
        include_str!("../../migrations/0020_stripe_disputes.sql"),
    ),
    (
        21,
        "exact_sums",
        include_str!("../../migrations/0021_exact_sums.sql"),
    ),
    (
        22,
        "cli_audit",
        include_str!("../../migrations/0022_cli_audit.sql"),
    ),
    (
        23,
        "outbound_lanes",
        include_str!("../../migrations/0023_outbound_lanes.sql"),
    ),
];

/// Key of the session advisory lock that serializes migrations (the single-bigint keyspace,
/// distinct from the two-int4 keys the payment path uses).
const MIGRATION_LOCK: i64 = 0x5375_6267_6174_6501;

/// Builds the pool, with no `DATABASE_CA_CERT`; see [`pool_with_ca_cert`].
pub fn pool(database_url: &str, max_size: usize) -> Result<Pool, ApiError> {
    pool_with_ca_cert(database_url, max_size, None)
}

/// How long one attempt to open a TCP connection to one host may take, unless `DATABASE_URL`
/// sets `connect_timeout`: a host that drops packets (powered off, partitioned) must not hold a
/// request for the system's TCP timeout of minutes.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long sent data may stay unacknowledged before the connection is declared dead, unless
/// `DATABASE_URL` sets `tcp_user_timeout`: a pooled connection to a server that vanished without
/// closing it fails its next statement after this instead of the system's ~15 minutes, and is
/// then discarded. Idle time and long queries do not count (nothing is left unacknowledged).
pub const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(15);

/// What opening a connection takes beyond the TCP connects: TLS, login, and the
/// `target_session_attrs` check.
const LOGIN_ALLOWANCE: Duration = Duration::from_secs(5);

/// Fills in the connection settings `DATABASE_URL` left out (connect and TCP user timeouts, the
/// application name) and returns how long making one pooled connection may take: each host of
/// a multi-host URL is tried in turn (the next after a refusal, a timeout or, with
/// `target_session_attrs=read-write`, a read-only server), so the bound grows with the hosts
/// and an unreachable first host never uses up the time the second one needs.
pub fn complete_config(pg: &mut tokio_postgres::Config) -> Duration {
    if pg.get_connect_timeout().is_none() {
        pg.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    if pg.get_tcp_user_timeout().is_none() {
        pg.tcp_user_timeout(DEFAULT_TCP_USER_TIMEOUT);
    }
    if pg.get_application_name().is_none() {
        pg.application_name("subgate");
    }
    create_timeout(pg)
}

/// How long making one connection of `pg` may take: its connect timeout once per host, plus the
/// login's allowance.
fn create_timeout(pg: &tokio_postgres::Config) -> Duration {
    let hosts = pg.get_hosts().len().max(pg.get_hostaddrs().len()).max(1);
    let per_host = pg
        .get_connect_timeout()
        .copied()
        .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    per_host.saturating_mul(hosts as u32) + LOGIN_ALLOWANCE
}

/// Builds the pool. Connections are made lazily, so a database that is down at start-up or
/// later only makes requests fail with 503 until it returns. TLS follows the URL's `sslmode`,
/// with the roots of the PEM file `ca_cert` (`DATABASE_CA_CERT`) when given ([`tls`]); that
/// file is read here, so a missing or unusable one is an error now, not at the first request.
///
/// `DATABASE_URL` may name several hosts (`postgres://u@h1:5432,h2:5432/db?
/// target_session_attrs=read-write`): a new connection goes to the first host that accepts it
/// (and, with `read-write`, is the primary). A pooled connection whose server died is closed
/// and is dropped when next checked out ([`RecyclingMethod::Fast`] checks exactly that); one
/// that failed a transaction because the server went away or turned read-only is discarded at
/// once ([`discard_if_lost`]). So after a failover the pool refills on the new primary without a
/// restart.
///
/// The pool hands out the connection returned last ([`QueueMode::Lifo`]): under light load the
/// same few backends stay busy, warm in their process's caches and scheduled, instead of every
/// request waking the backend that idled longest (deadpool's default, first in first out);
/// measured on the payment path at one connection: about a fifth more payments a second.
pub fn pool_with_ca_cert(
    database_url: &str,
    max_size: usize,
    ca_cert: Option<&Path>,
) -> Result<Pool, ApiError> {
    let (pg, connector) = connect_config(database_url, ca_cert)?;
    let create_timeout = create_timeout(&pg);
    let manager = Manager::from_config(
        pg,
        connector,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .queue_mode(QueueMode::Lifo)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(create_timeout))
        .recycle_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(ApiError::internal)
}

/// How every connection of the process is made: the PostgreSQL configuration of `database_url`
/// (its hosts, `target_session_attrs`, …) completed by [`complete_config`] (connect and TCP user
/// timeouts, the application name `subgate`, unless the URL sets them), and the TLS connector its
/// `sslmode` asks for (with the roots of `ca_cert`). The pool's connections and the effects worker's listening connection
/// ([`crate::app::worker::listen`]) are both made from it.
pub fn connect_config(
    database_url: &str,
    ca_cert: Option<&Path>,
) -> Result<
    (
        tokio_postgres::Config,
        tokio_postgres_rustls::MakeRustlsConnect,
    ),
    ApiError,
> {
    let tls::Target {
        config: mut pg,
        ssl_mode,
    } = tls::parse_url(database_url).map_err(ApiError::internal)?;
    let connector = tls::connector(ssl_mode, ca_cert).map_err(ApiError::internal)?;
    complete_config(&mut pg);
    Ok((pg, connector))
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

/// A type read from a row by column name (never by position), so a query may select its
/// [`FromRow::COLUMNS`] in any order and among other columns.
pub trait FromRow: Sized {
    /// The columns [`FromRow::from_row`] reads, as a select list.
    const COLUMNS: &'static str;

    /// Reads the columns by name; a missing column or a wrong type is an error, not a panic.
    fn from_row(row: &Row) -> Result<Self, tokio_postgres::Error>;
}

/// Parameters of a statement.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Runs `sql` as a statement prepared once per connection (`prepare_cached`) and reads every
/// row as a `T`.
pub async fn all<T: FromRow>(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<T>, ApiError> {
    let rows = rows(client, sql, params).await?;
    rows.iter()
        .map(|r| T::from_row(r).map_err(ApiError::from))
        .collect()
}

/// Like [`all`], for at most one row.
pub async fn opt<T: FromRow>(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<T>, ApiError> {
    match row_opt(client, sql, params).await? {
        Some(r) => Ok(Some(T::from_row(&r)?)),
        None => Ok(None),
    }
}

/// Like [`all`], for exactly one row.
pub async fn one<T: FromRow>(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<T, ApiError> {
    Ok(T::from_row(&row_one(client, sql, params).await?)?)
}

/// Runs a prepared-once statement and returns its rows.
pub async fn rows(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, ApiError> {
    let stmt = client.prepare_cached(sql).await?;
    Ok(client.query(&stmt, params).await?)
}

/// Runs a prepared-once statement that returns at most one row.
pub async fn row_opt(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<Row>, ApiError> {
    let stmt = client.prepare_cached(sql).await?;
    Ok(client.query_opt(&stmt, params).await?)
}

/// Runs a prepared-once statement that returns exactly one row.
pub async fn row_one(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Row, ApiError> {
    let stmt = client.prepare_cached(sql).await?;
    Ok(client.query_one(&stmt, params).await?)
}

/// Runs a prepared-once statement; returns how many rows it changed.
pub async fn execute(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, ApiError> {
    let stmt = client.prepare_cached(sql).await?;
    Ok(client.execute(&stmt, params).await?)
}

/// An exact sum of `bigint` amounts, selected as `sum(…)::text` (PostgreSQL sums `bigint` as
/// `numeric`, which never overflows). Sums are `i128`: `bigint`'s range times any row count
/// PostgreSQL can hold fits, so a sum beyond `i64` is still answered exactly (as a JSON integer)
/// rather than failing the whole answer. A null sum (no rows) is 0.
pub fn exact_sum(row: &Row, column: &str) -> Result<i128, ApiError> {
    let text: Option<String> = row.try_get(column)?;
    match text {
        None => Ok(0),
        Some(t) => t
            .parse()
            .map_err(|_| ApiError::internal(format!("{column} is not an integer sum: {t}"))),
    }
}

/// Whether a column or parameter of type `ty` holds text: the state enums of [`text_enum!`](crate::text_enum!)
/// are stored in `text` columns (with CHECK constraints listing their spellings), and a
/// parameter compared with one may be typed `varchar` too.
pub fn is_text(ty: &tokio_postgres::types::Type) -> bool {
    use tokio_postgres::types::Type;
    *ty == Type::TEXT || *ty == Type::VARCHAR || *ty == Type::BPCHAR || *ty == Type::NAME
}

/// "a, b or c": a list of words for a message.
pub fn list_words<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let words: Vec<&str> = words.into_iter().collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// What every [`text_enum!`](crate::text_enum!) can do, for code generic over them (parsing a query filter).
pub trait TextEnum: Sized + Copy + 'static {
    /// Parses the spelling.
    fn parse_text(s: &str) -> Option<Self>;
    /// Every spelling as a phrase: "a, b or c".
    fn spellings_text() -> String;
}

/// Declares a state enum stored in a `text` column: each variant with its one spelling, used
/// in the database (`ToSql`/`FromSql` for `text` and `varchar`) and in JSON (serde), plus
/// `ALL`, `as_str`, `parse` and `Display`.
///
/// `postgres-types`' derive would map the enum to a PostgreSQL `ENUM` type instead, which
/// needs the columns retyped (a table-rewriting migration) and every parameter typed to match;
/// the columns stay `text` with CHECK constraints, and this maps them once.
///
/// ```ignore
/// text_enum! {
///     /// An order's status.
///     pub enum Status { Pending => "pending", Paid => "paid", Cancelled => "cancelled" }
/// }
/// ```
#[macro_export]
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order (the column's CHECK lists the same).
            pub const ALL: [$name; { [$($text),+].len() }] = [$($name::$variant),+];

            /// The spelling, in the database and in JSON.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text ),+
                }
            }

            /// Parses the spelling.
            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    $( $text => Some($name::$variant), )+
                    _ => None,
                }
            }

            /// Every spelling as a phrase: "a, b or c".
            pub fn spellings() -> String {
                $crate::db::list_words($name::ALL.iter().map(|v| v.as_str()))
            }
        }

        impl $crate::db::TextEnum for $name {
            fn parse_text(s: &str) -> Option<$name> {
                $name::parse(s)
            }

            fn spellings_text() -> String {
                $name::spellings()
            }
        }

        /// Compares with a spelling, as a client reads it (`status == "active"`).
        impl ::std::cmp::PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                $name::parse(&s).ok_or_else(|| {
                    <D::Error as ::serde::de::Error>::custom(format!(
                        "must be {}",
                        $name::spellings()
                    ))
                })
            }
        }

        impl ::tokio_postgres::types::ToSql for $name {
            fn to_sql(
                &self,
                ty: &::tokio_postgres::types::Type,
                out: &mut ::bytes::BytesMut,
            ) -> ::std::result::Result<
                ::tokio_postgres::types::IsNull,
                Box<dyn ::std::error::Error + Sync + Send>,
            > {
                <&str as ::tokio_postgres::types::ToSql>::to_sql(&self.as_str(), ty, out)
            }

            fn accepts(ty: &::tokio_postgres::types::Type) -> bool {
                $crate::db::is_text(ty)
            }

            ::tokio_postgres::types::to_sql_checked!();
        }

        impl<'a> ::tokio_postgres::types::FromSql<'a> for $name {
            fn from_sql(
                ty: &::tokio_postgres::types::Type,
                raw: &'a [u8],
            ) -> ::std::result::Result<Self, Box<dyn ::std::error::Error + Sync + Send>> {
                let s = <&str as ::tokio_postgres::types::FromSql>::from_sql(ty, raw)?;
                $name::parse(s).ok_or_else(|| {
                    format!("not a {}: {s:?}", stringify!($name)).into()
                })
            }

            fn accepts(ty: &::tokio_postgres::types::Type) -> bool {
                $crate::db::is_text(ty)
            }
        }
    };
}

/// Implements [`FromRow`] for a struct read by column name: `field` reads column `field`,
/// `field: "column"` reads `column`, `field = Type` reads a nested [`FromRow`] from the same
/// row, and `field => value` is not read (a field the caller fills in later). `COLUMNS` lists the columns in field order, or is given whole in brackets when the
/// select list computes some of them or holds a nested type's:
///
/// ```ignore
/// from_row!(Price { price_minor, currency, active });
/// from_row!(Preview [PREVIEW_COLUMNS] { code, terms = Terms, uses });
/// ```
#[macro_export]
macro_rules! from_row {
    (@col $field:ident) => { stringify!($field) };
    (@col $field:ident $col:literal) => { $col };
    (@get $row:ident $field:ident) => { $row.try_get(stringify!($field))? };
    (@get $row:ident $field:ident : $col:literal) => { $row.try_get($col)? };
    (@get $row:ident $field:ident = $inner:ty) => { <$inner as $crate::db::FromRow>::from_row($row)? };
    (@get $row:ident $field:ident => $value:expr) => { $value };
    (
        $ty:ident [$columns:expr]
        { $( $field:ident $(: $col:literal)? $(= $inner:ty)? $(=> $value:expr)? ),+ $(,)? }
    ) => {
        impl $crate::db::FromRow for $ty {
            const COLUMNS: &'static str = $columns;

            fn from_row(
                row: &::tokio_postgres::Row,
            ) -> ::std::result::Result<$ty, ::tokio_postgres::Error> {
                Ok($ty {
                    $( $field: $crate::from_row!(@get row $field $(: $col)? $(= $inner)? $(=> $value)?) ),+
                })
            }
        }
    };
    (
        $ty:ident
        { $first:ident $(: $fcol:literal)? $( , $field:ident $(: $col:literal)? )* $(,)? }
    ) => {
        $crate::from_row!(
            $ty [concat!(
                $crate::from_row!(@col $first $($fcol)?)
                $( , ", ", $crate::from_row!(@col $field $($col)?) )*
            )]
            { $first $(: $fcol)? $( , $field $(: $col)? )* }
        );
    };
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TCP_USER_TIMEOUT, complete_config, tls};

    fn completed(url: &str) -> (tokio_postgres::Config, Duration) {
        let mut pg = tls::parse_url(url).unwrap().config;
        let create = complete_config(&mut pg);
        (pg, create)
    }

    /// Unset timeouts get the defaults, and making a connection may take one connect timeout
    /// per host plus the login: an unreachable first host leaves the second its full time.
    #[test]
    fn timeouts_default_and_grow_with_the_hosts() {
        let (pg, one) = completed("postgres://u@db:5432/app");
        assert_eq!(pg.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(pg.get_tcp_user_timeout(), Some(&DEFAULT_TCP_USER_TIMEOUT));
        assert_eq!(pg.get_application_name(), Some("subgate"));
        let (pg, two) =
            completed("postgres://u@db-a:5432,db-b:5432/app?target_session_attrs=read-write");
        assert_eq!(pg.get_hosts().len(), 2);
        assert_eq!(two - one, DEFAULT_CONNECT_TIMEOUT);
        assert!(one > DEFAULT_CONNECT_TIMEOUT);
    }

    /// What the URL sets is kept, and the bound follows its `connect_timeout`.
    #[test]
    fn the_url_settings_win() {
        let (pg, create) = completed(
            "postgres://u@a,b,c/app?connect_timeout=2&tcp_user_timeout=7&application_name=x",
        );
        assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(2)));
        assert_eq!(pg.get_tcp_user_timeout(), Some(&Duration::from_secs(7)));
        assert_eq!(pg.get_application_name(), Some("x"));
        let (_, single) = completed("postgres://u@a/app?connect_timeout=2");
        assert_eq!(create - single, Duration::from_secs(4));
    }
}
