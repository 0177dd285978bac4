//! Connecting: the pool, its connect, login and TCP timeouts, and the connection settings
//! every connection gets (TLS as `DATABASE_URL`'s `sslmode` says: [`super::tls`]).

use std::{path::Path, time::Duration};

use deadpool_postgres::{Manager, ManagerConfig, Pool, QueueMode, RecyclingMethod, Runtime};

use crate::common::error::ApiError;

use super::tls;

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
/// once ([`discard_if_lost`](super::discard_if_lost)). So after a failover the pool refills on the new primary without a
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
