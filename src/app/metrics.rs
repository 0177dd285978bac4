//! The `/metrics` listener on its own address (`METRICS_ADDR`) and the sampler of the gauges
//! read from the database and the pool. The series themselves, their descriptions and the
//! recorder are [`crate::common::metrics`].

use std::net::SocketAddr;

use axum::{
    Router,
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};
use deadpool_postgres::Pool;
use metrics::gauge;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::{
    app::server::ConnectionLimits,
    common::{
        error::ApiError,
        metrics::{
            CHANNELS_NO_RIGHTS, DB_POOL_IN_USE, DB_POOL_MAX, DB_POOL_SIZE, DB_POOL_WAITING,
            EFFECTS, EFFECTS_DEAD_LETTERS, EFFECTS_OLDEST_PENDING, EFFECTS_PAUSED_NO_RIGHTS,
            RECONCILIATION_PENDING, SAMPLE_EVERY, SEATS_HELD, handle, install,
        },
        shutdown::ShutdownSignal,
    },
    outbox::effects::Kind,
};

/// The metrics listener's routes: `GET /metrics` only.
pub fn router(handle: PrometheusHandle, pool: Pool) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state((handle, pool))
}

/// `GET /metrics`: the pool gauges as of now, then every series.
async fn scrape(State((handle, pool)): State<(PrometheusHandle, Pool)>) -> Response {
    sample_pool(&pool);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

/// How many connections the metrics listener serves at once: scrapers are few, and the
/// listener must not take the file descriptors the public one needs.
pub const METRICS_MAX_CONNECTIONS: usize = 16;

/// With `METRICS_ADDR` set: installs the recorder, binds the address and serves [`router`] on
/// it until `shutdown`, under the HTTP server's header and idle timeouts and at most
/// [`METRICS_MAX_CONNECTIONS`] connections. `Ok(None)` when metrics are off; an error when the
/// address cannot be bound (start-up stops, as for `BIND_ADDR`).
pub async fn listen(
    addr: Option<SocketAddr>,
    pool: Pool,
    limits: ConnectionLimits,
    shutdown: ShutdownSignal,
) -> std::io::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let handle = install().map_err(std::io::Error::other)?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "metrics listening");
    let app = router(handle, pool);
    Ok(Some(tokio::spawn(async move {
        let limits = ConnectionLimits {
            max_connections: limits.max_connections.min(METRICS_MAX_CONNECTIONS),
            ..limits
        };
        let served =
            crate::app::server::serve(listener, app, limits, async move { shutdown.wait().await })
                .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "metrics listener failed");
        }
    })))
}

// ---- sampled gauges ----

/// Reads the database gauges every [`SAMPLE_EVERY`] (the first at once) and keeps the
/// recorder's histograms compact, until shutdown. A failed read is logged and tried again at
/// the next tick. Does nothing without a recorder.
pub async fn sample_loop(pool: Pool, shutdown: ShutdownSignal) {
    let Some(handle) = handle() else {
        return;
    };
    let mut ticks = shutdown.ticks(SAMPLE_EVERY);
    while ticks.next().await {
        if let Err(e) = sample_database(&pool).await {
            tracing::warn!(error = %e, "metrics: database gauges not sampled");
        }
        handle.run_upkeep();
    }
}

/// Sets the pool gauges from `Pool::status()` (no I/O).
pub fn sample_pool(pool: &Pool) {
    let s = pool.status();
    gauge!(DB_POOL_MAX).set(s.max_size as f64);
    gauge!(DB_POOL_SIZE).set(s.size as f64);
    gauge!(DB_POOL_IN_USE).set(s.size.saturating_sub(s.available) as f64);
    gauge!(DB_POOL_WAITING).set(s.waiting as f64);
}

/// The effect statuses that make a queue (done effects are history).
const QUEUE_STATUSES: [&str; 2] = ["pending", "failed"];

/// Reads the gauges that live in the database, one cheap query each: effects not done (by
/// kind and status, with the oldest pending one's age) over the status index, and live seat
/// holds over the holds' partial index. Every (kind, status) pair is set, zero when absent,
/// so a drained queue reads 0 rather than its last value.
pub async fn sample_database(pool: &Pool) -> Result<(), ApiError> {
    let client = pool.get().await?;
    let queue = crate::outbox::effects::queue_depths(&client).await?;
    let held = crate::orders::seats::holds_live(&client).await?;
    let no_rights = crate::catalog::channels::without_rights(&client)
        .await?
        .len();
    let paused = crate::outbox::effects::paused_by_rights(&client).await?;
    let chasing = crate::payments::gateways::wayforpay::checks::chasing(&client).await?;

    let mut oldest_pending: f64 = 0.0;
    let mut dead_letters: i64 = 0;
    for kind in Kind::ALL {
        for status in QUEUE_STATUSES {
            let depth = queue
                .iter()
                .find(|q| q.kind == kind && q.status.as_str() == status);
            let count: i64 = depth.map_or(0, |q| q.count);
            gauge!(EFFECTS, "kind" => kind.as_str(), "status" => status).set(count as f64);
            match (status, depth) {
                ("pending", Some(q)) => oldest_pending = oldest_pending.max(q.oldest_secs),
                ("failed", _) => dead_letters += count,
                _ => {}
            }
        }
    }
    gauge!(EFFECTS_OLDEST_PENDING).set(oldest_pending.max(0.0));
    gauge!(EFFECTS_DEAD_LETTERS).set(dead_letters as f64);
    gauge!(SEATS_HELD).set(held as f64);
    gauge!(CHANNELS_NO_RIGHTS).set(no_rights as f64);
    gauge!(EFFECTS_PAUSED_NO_RIGHTS).set(paused as f64);
    gauge!(RECONCILIATION_PENDING).set(chasing as f64);
    Ok(())
}
