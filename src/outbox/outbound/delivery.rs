//! Sending deliveries: claim, send, record, and the loop that keeps every endpoint's lane
//! apart.
//!
//! **Isolation.** A receiver that answers slowly (or never, until the timeout) holds only its
//! own endpoint's deliveries back. The claim gives an endpoint at most
//! [`Options::per_endpoint`] deliveries in flight at once, counted over every process from the
//! leases in the database (`leased_until`, migration `0023`), and the deliverer of one process
//! sends at most [`Options::concurrency`] at once over all endpoints. Each delivery is sent in a
//! task of its own that gives its slot back when its attempt is recorded, and a freed slot
//! wakes the loop to claim again, so the other endpoints' deliveries flow through the free
//! slots while a slow one holds its few. Between endpoints the claim takes turns: every
//! endpoint's first due delivery before any endpoint's second.
//!
//! **Claim.** One short transaction: the enabled endpoints with due deliveries are locked
//! (`FOR NO KEY UPDATE SKIP LOCKED`: it blocks no event being written, whose foreign key takes
//! only `KEY SHARE`), then a second statement — whose snapshot sees every claim committed
//! before those locks were granted — counts each endpoint's live leases and leases its next
//! deliveries. Two processes thus never put more than the limit in flight for one endpoint,
//! and never claim one delivery twice. A lease ([`Options::lease`]) outlasts the attempt's
//! timeout; a process killed mid-call leaves it to run out, and the delivery is due again
//! (at least once). The record of the attempt ends the lease.
//!
//! **Sending.** Each attempt checks the URL again ([`check_url`]) and connects to exactly the
//! addresses it checked: the URL's host is pinned to them in the client, and the client uses
//! no proxy, whatever `HTTP_PROXY`, `HTTPS_PROXY` or `ALL_PROXY` say, since a proxy would
//! resolve the name itself and connect where no check looked. No redirects are followed.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use tokio::{
    sync::{Notify, Semaphore},
    task::JoinSet,
};

use super::{check_url, next_wait, signature_header};
use crate::{
    common::{error::ApiError, shutdown::ShutdownSignal},
    db,
};

/// Per-attempt timeout.
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// How long a lease outlasts the attempt's timeout.
const LEASE_MARGIN: Duration = Duration::from_secs(45);
/// How often due deliveries are looked for when no finished attempt wakes the loop.
pub const POLL: Duration = Duration::from_secs(1);
/// Deliveries one [`deliver_due`] pass claims at most.
const BATCH: usize = 16;

/// How the deliverer runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Deliveries this process sends at once, over all endpoints: a bound on its sockets and
    /// on the short transactions that record attempts (each takes a pool connection for
    /// milliseconds; none is held while a request is under way).
    pub concurrency: usize,
    /// Deliveries of one endpoint in flight at once, over all processes.
    pub per_endpoint: usize,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// How often due deliveries are looked for without a wake-up.
    pub poll: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            concurrency: 16,
            per_endpoint: 4,
            timeout: TIMEOUT,
            poll: POLL,
        }
    }
}

impl Options {
    /// How long a claimed delivery is kept from other claims: longer than an attempt.
    pub fn lease(&self) -> Duration {
        self.timeout + LEASE_MARGIN
    }
}

/// A claimed delivery with what sending it needs.
struct Claimed {
    id: i64,
    endpoint_id: i64,
    attempts: i32,
    msg_id: String,
    body: String,
    url: String,
    secret: String,
    previous_secret: Option<String>,
}

/// Locks the enabled endpoints that have due deliveries, skipping any another claim holds.
const LOCK_ENDPOINTS_SQL: &str = "SELECT e.id FROM webhook_endpoints e
     WHERE e.disabled_at IS NULL
       AND EXISTS (SELECT 1 FROM webhook_deliveries d
                   WHERE d.endpoint_id = e.id AND d.status = 'pending'
                     AND d.next_attempt_at <= statement_timestamp())
     ORDER BY e.id
     FOR NO KEY UPDATE OF e SKIP LOCKED";

/// Leases, for each locked endpoint ($1), its next due deliveries up to the per-endpoint limit
/// ($2) less its live leases, at most $3 in all by turns, for $4 seconds.
const CLAIM_SQL: &str = "WITH picked AS (
         SELECT next.id
         FROM unnest($1::bigint[]) AS e (id)
         CROSS JOIN LATERAL (
             SELECT count(*) AS n FROM webhook_deliveries f
             WHERE f.endpoint_id = e.id AND f.status = 'pending'
               AND f.leased_until > statement_timestamp()
         ) AS flying
         CROSS JOIN LATERAL (
             SELECT due.id, due.next_attempt_at,
                    row_number() OVER (ORDER BY due.next_attempt_at, due.id) AS turn
             FROM (SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
                   WHERE d.endpoint_id = e.id AND d.status = 'pending'
                     AND d.next_attempt_at <= statement_timestamp()
                   ORDER BY d.next_attempt_at, d.id
                   LIMIT greatest($2 - flying.n, 0)) AS due
         ) AS next
         ORDER BY next.turn, next.next_attempt_at, next.id
         LIMIT $3
     )
     UPDATE webhook_deliveries d
     SET next_attempt_at = statement_timestamp() + make_interval(secs => $4),
         leased_until = statement_timestamp() + make_interval(secs => $4),
         updated_at = statement_timestamp()
     FROM picked, webhook_events ev, webhook_endpoints e
     WHERE d.id = picked.id AND ev.id = d.event_id AND e.id = d.endpoint_id
       AND d.status = 'pending' AND d.next_attempt_at <= statement_timestamp()
     RETURNING d.id, d.endpoint_id, d.attempts, ev.msg_id, ev.body, e.url, e.secret,
         CASE WHEN e.previous_secret_until > statement_timestamp() THEN e.previous_secret END
             AS previous_secret";

/// Claims up to `max` due deliveries (see the module doc).
async fn claim(pool: &Pool, options: &Options, max: usize) -> Result<Vec<Claimed>, ApiError> {
    let per_endpoint = options.per_endpoint as i64;
    let max = max as i64;
    let lease = options.lease().as_secs_f64();
    crate::transaction!(pool, |tx| {
        let endpoints: Vec<i64> = tx
            .query(LOCK_ENDPOINTS_SQL, &[])
            .await?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        if endpoints.is_empty() {
            return Ok(Vec::new());
        }
        let rows = tx
            .query(CLAIM_SQL, &[&endpoints, &per_endpoint, &max, &lease])
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                Ok(Claimed {
                    id: r.try_get("id")?,
                    endpoint_id: r.try_get("endpoint_id")?,
                    attempts: r.try_get("attempts")?,
                    msg_id: r.try_get("msg_id")?,
                    body: r.try_get("body")?,
                    url: r.try_get("url")?,
                    secret: r.try_get("secret")?,
                    previous_secret: r.try_get("previous_secret")?,
                })
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()?)
    })
}

/// What an attempt came to.
#[derive(Debug)]
pub struct Outcome {
    pub status_code: Option<u16>,
    pub error: Option<String>,
    /// `Retry-After`, in seconds, when the answer had one.
    pub retry_after: Option<i64>,
    pub latency: Duration,
}

impl Outcome {
    fn delivered(&self) -> bool {
        self.status_code.is_some_and(|c| (200..300).contains(&c))
    }
}

/// `Retry-After` in seconds (delta seconds or an HTTP date).
fn retry_after(headers: &reqwest::header::HeaderMap, now: DateTime<Utc>) -> Option<i64> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<i64>() {
        return Some(secs.max(0));
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    Some((at.with_timezone(&Utc) - now).num_seconds().max(0))
}

/// The client of one attempt: the URL's host pinned to the checked `addrs`, no proxy, no
/// redirects, `timeout`.
pub fn http_client(
    url: &url::Url,
    addrs: &[SocketAddr],
    timeout: Duration,
) -> reqwest::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("subgate/", env!("CARGO_PKG_VERSION")));
    if let Some(domain) = url.domain() {
        builder = builder.resolve_to_addrs(domain, addrs);
    }
    builder.build()
}

async fn send(c: &Claimed, allow_private: bool, timeout: Duration) -> Outcome {
    let started = Instant::now();
    let fail = |error: String| Outcome {
        status_code: None,
        error: Some(error),
        retry_after: None,
        latency: started.elapsed(),
    };
    let (url, addrs) = match check_url(&c.url, allow_private).await {
        Ok(checked) => checked,
        Err(e) => return fail(format!("not sent: the URL {e}")),
    };
    let client = match http_client(&url, &addrs, timeout) {
        Ok(c) => c,
        Err(e) => return fail(format!("no HTTP client: {e}")),
    };
    let timestamp = Utc::now().timestamp();
    let mut secrets = vec![c.secret.as_str()];
    secrets.extend(c.previous_secret.as_deref());
    let signature = match signature_header(&secrets, &c.msg_id, timestamp, c.body.as_bytes()) {
        Ok(s) => s,
        Err(e) => return fail(format!("not signed: {e}")),
    };
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", &c.msg_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(c.body.clone())
        .send()
        .await;
    match response {
        Ok(r) => Outcome {
            status_code: Some(r.status().as_u16()),
            error: None,
            retry_after: retry_after(r.headers(), Utc::now()),
            latency: started.elapsed(),
        },
        Err(e) if e.is_timeout() => fail(format!("no answer within {} s", timeout.as_secs())),
        Err(e) => fail(format!("not sent: {e}")),
    }
}

const ATTEMPT_SQL: &str =
    "INSERT INTO webhook_attempts (delivery_id, status_code, latency_ms, error)
     VALUES ($1, $2, $3, $4)";
const DELIVERED_SQL: &str = "WITH d AS (
         UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1,
             last_status = $2, last_error = NULL, leased_until = NULL,
             updated_at = statement_timestamp()
         WHERE id = $1 RETURNING endpoint_id
     )
     UPDATE webhook_endpoints e SET failing_since = NULL
     FROM d WHERE e.id = d.endpoint_id AND e.failing_since IS NOT NULL";
const FAILED_SQL: &str = "UPDATE webhook_deliveries SET
         attempts = attempts + 1, last_status = $2, last_error = $3,
         status = CASE WHEN $4::bigint IS NULL THEN 'failed' ELSE 'pending' END,
         next_attempt_at = CASE WHEN $4::bigint IS NULL THEN next_attempt_at
             ELSE statement_timestamp() + make_interval(secs => $4::bigint) END,
         leased_until = NULL,
         updated_at = statement_timestamp()
     WHERE id = $1";
/// Marks the endpoint failing (since now, unless it was already), and disables it with
/// `gone` on a 410 or `failing` after [`super::FAILING_DAYS`]; returns the reason it was
/// disabled.
const ENDPOINT_FAILED_SQL: &str = "UPDATE webhook_endpoints SET
         failing_since = COALESCE(failing_since, statement_timestamp()),
         disabled_reason = CASE
             WHEN disabled_at IS NOT NULL THEN disabled_reason
             WHEN $2 THEN 'gone'
             WHEN COALESCE(failing_since, statement_timestamp())
                  <= statement_timestamp() - make_interval(days => $3) THEN 'failing'
         END,
         disabled_at = CASE
             WHEN disabled_at IS NOT NULL THEN disabled_at
             WHEN $2 OR COALESCE(failing_since, statement_timestamp())
                  <= statement_timestamp() - make_interval(days => $3)
                 THEN statement_timestamp()
         END,
         updated_at = statement_timestamp()
     WHERE id = $1 RETURNING disabled_reason";

/// Records an attempt's outcome, in one transaction, and ends the delivery's lease.
async fn record(pool: &Pool, c: &Claimed, o: &Outcome) -> Result<(), ApiError> {
    let status = o.status_code.map(i32::from);
    let latency = o.latency.as_millis().min(i32::MAX as u128) as i32;
    let error = o
        .error
        .clone()
        .or_else(|| (!o.delivered()).then(|| format!("answered HTTP {}", status.unwrap_or(0))));
    let days = super::FAILING_DAYS as i32;
    let delivered = o.delivered();
    let gone = o.status_code == Some(410);
    let attempts = c.attempts + 1;
    let wait = if gone {
        None
    } else {
        next_wait(attempts, o.retry_after)
    };
    let disabled: Option<String> = crate::transaction!(pool, |tx| {
        db::execute(tx, ATTEMPT_SQL, &[&c.id, &status, &latency, &o.error]).await?;
        if delivered {
            db::execute(tx, DELIVERED_SQL, &[&c.id, &status]).await?;
            return Ok(None);
        }
        db::execute(tx, FAILED_SQL, &[&c.id, &status, &error, &wait]).await?;
        let row = tx
            .query_one(ENDPOINT_FAILED_SQL, &[&c.endpoint_id, &gone, &days])
            .await?;
        Ok(row.try_get::<_, Option<String>>("disabled_reason")?)
    })?;
    crate::common::metrics::outbound_attempt(if delivered {
        "delivered"
    } else if wait.is_some() {
        "retry"
    } else {
        "failed"
    });
    if delivered {
        tracing::info!(
            delivery_id = c.id,
            endpoint_id = c.endpoint_id,
            status,
            "webhook delivered"
        );
    } else {
        tracing::warn!(
            delivery_id = c.id,
            endpoint_id = c.endpoint_id,
            status,
            error = error.as_deref().unwrap_or(""),
            attempts,
            retry_in_secs = wait,
            "webhook delivery failed"
        );
    }
    if let Some(reason) = disabled {
        tracing::warn!(
            endpoint_id = c.endpoint_id,
            reason,
            "webhook endpoint disabled"
        );
    }
    Ok(())
}

/// Sends one claimed delivery and records the attempt. A record that fails leaves the lease
/// to run out, and the delivery is sent again then.
async fn attempt(pool: &Pool, c: Claimed, allow_private: bool, timeout: Duration) {
    let outcome = send(&c, allow_private, timeout).await;
    if let Err(e) = record(pool, &c, &outcome).await {
        tracing::error!(
            delivery_id = c.id,
            endpoint_id = c.endpoint_id,
            error = %e,
            "webhook attempt not recorded; sent again when its lease ends"
        );
    }
}

/// One pass, as a test or a one-off run wants it: claims the due deliveries (up to a batch,
/// within the per-endpoint limit of [`Options::default`]), sends them concurrently and records
/// each; returns how many were attempted.
pub async fn deliver_due(pool: &Pool, allow_private: bool) -> Result<usize, ApiError> {
    let options = Options::default();
    let claimed = claim(pool, &options, BATCH).await?;
    let n = claimed.len();
    futures::future::join_all(
        claimed
            .into_iter()
            .map(|c| attempt(pool, c, allow_private, options.timeout)),
    )
    .await;
    Ok(n)
}

/// [`run`] with [`Options::default`]: the deliverer of `subgate serve`.
pub async fn run_loop(pool: Pool, allow_private: bool, shutdown: ShutdownSignal) {
    run(pool, allow_private, Options::default(), shutdown).await;
}

/// Delivers due webhooks until shutdown: claims whenever a slot is free and a delivery may be
/// due (every [`Options::poll`], and at once when an attempt ends), sends each in a task of its
/// own, and samples the queue depth for the metrics every [`crate::common::metrics::SAMPLE_EVERY`]. On
/// shutdown nothing more is claimed and the attempts under way are finished and recorded.
pub async fn run(pool: Pool, allow_private: bool, options: Options, shutdown: ShutdownSignal) {
    let slots = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let finished = Arc::new(Notify::new());
    let mut sending = JoinSet::new();
    let mut ticks = shutdown.ticks(options.poll);
    let mut sampled: Option<Instant> = None;
    loop {
        let go = tokio::select! {
            more = ticks.next() => more,
            () = finished.notified() => !shutdown.is_triggered(),
        };
        if !go {
            break;
        }
        while sending.try_join_next().is_some() {}
        let free = slots.available_permits();
        if free > 0 {
            match claim(&pool, &options, free).await {
                Ok(claimed) => {
                    for c in claimed {
                        let Ok(slot) = slots.clone().acquire_owned().await else {
                            break;
                        };
                        let (pool, finished) = (pool.clone(), finished.clone());
                        let timeout = options.timeout;
                        sending.spawn(async move {
                            attempt(&pool, c, allow_private, timeout).await;
                            drop(slot);
                            finished.notify_one();
                        });
                    }
                }
                Err(e) => tracing::error!(error = %e, "webhook claim failed; trying again"),
            }
        }
        if sampled.is_none_or(|t| t.elapsed() >= crate::common::metrics::SAMPLE_EVERY) {
            sampled = Some(Instant::now());
            let depth = async { super::queue_depth(&pool.get().await?).await }.await;
            match depth {
                Ok(depth) => crate::common::metrics::outbound_queue(depth),
                Err(e) => tracing::warn!(error = %e, "webhook queue depth not sampled"),
            }
        }
    }
    while sending.join_next().await.is_some() {}
}
