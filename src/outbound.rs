//! Outbound webhooks: events for the owner's own systems, sent as a Standard Webhooks sender.
//!
//! - **Endpoints** (`webhook_endpoints`, owned here): a URL, the event types it wants, a
//!   `whsec_` secret shown once, and after a rotation the previous secret, which keeps signing
//!   (a second `v1,` signature) for [`ROTATION_OVERLAP_HOURS`].
//! - **Events** are written by the schema's triggers (migration `0013`) in the transaction of
//!   the change they report — a payment stored or re-judged, a membership's history row, a
//!   membership deleted — with one delivery row per enabled endpoint that wants the type. Every
//!   writer (the payment core, refunds, the set-based sweep, staff writes, trials) is covered
//!   without calling anything, and a rolled-back change leaves no event.
//! - **Delivery** ([`deliver_due`], run by [`run_loop`] every [`POLL`]): due deliveries are
//!   claimed with a lease (`FOR UPDATE SKIP LOCKED`, then `next_attempt_at` pushed past the
//!   call), so several processes never send one twice at once and a process killed mid-call is
//!   replaced when the lease ends. Each attempt re-checks the URL ([`check_url`]: `https` only,
//!   every resolved address public, unless `OUTBOUND_ALLOW_PRIVATE`) and connects to exactly
//!   the addresses it checked; 15 s timeout, no redirects. 2xx → delivered. `410 Gone` → the
//!   endpoint is disabled. Anything else → retried on Standard Webhooks' schedule
//!   ([`SCHEDULE_SECS`], `Retry-After` honoured when longer), `failed` after the last; an
//!   endpoint that has failed for [`FAILING_DAYS`] days is disabled. Every attempt is logged
//!   (`webhook_attempts`: status, latency, error).
//!
//! Signing is the `standardwebhooks` crate's (`Webhook::sign`), the reference implementation,
//! so nothing about the signature is written here by hand.

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use base64::Engine as _;
use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use rand::RngCore;
use serde::Serialize;
use tokio_postgres::Row;

use crate::{
    db::{self, FromRow},
    error::ApiError,
    shutdown::ShutdownSignal,
};

/// Every event type an endpoint may ask for (the schema's CHECK lists the same).
pub const EVENT_TYPES: [&str; 10] = [
    "payment.applied",
    "payment.needs_review",
    "payment.refunded",
    "payment.disputed",
    "membership.activated",
    "membership.renewed",
    "membership.grace",
    "membership.expired",
    "membership.deleted",
    "trial.started",
];

/// Waits after the 1st, 2nd, … failed attempt (Standard Webhooks' schedule: 5 s, 5 min,
/// 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h); after the last the delivery has failed.
pub const SCHEDULE_SECS: [i64; 9] = [5, 300, 1800, 7200, 18_000, 36_000, 50_400, 72_000, 86_400];
/// Longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER_SECS: i64 = 86_400;
/// An endpoint failing this long is disabled.
pub const FAILING_DAYS: i64 = 5;
/// A rotated-out secret keeps signing this long.
pub const ROTATION_OVERLAP_HOURS: i64 = 24;
/// Per-attempt timeout.
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// How long a claimed delivery is kept from others (longer than [`TIMEOUT`]).
const LEASE_SECS: f64 = 60.0;
/// How often due deliveries are looked for.
pub const POLL: Duration = Duration::from_secs(1);
/// Deliveries claimed (and sent concurrently) per pass.
const BATCH: i64 = 16;

// ---- endpoints ----

/// An endpoint as the staff API shows it (never its secret).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Endpoint {
    pub id: i64,
    pub url: String,
    pub description: Option<String>,
    pub event_types: Vec<String>,
    /// False once disabled (by staff, `410 Gone`, or five days of failures).
    pub enabled: bool,
    /// `staff`, `gone` or `failing`; null while enabled.
    pub disabled_reason: Option<String>,
    /// Since when every delivery has failed; null after a success.
    pub failing_since: Option<DateTime<Utc>>,
    /// Until when the previous secret still signs too (after a rotation).
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

macro_rules! endpoint_columns {
    () => {
        "id, url, description, event_types, disabled_at IS NULL AS enabled, disabled_reason,
         failing_since,
         CASE WHEN previous_secret_until > statement_timestamp() THEN previous_secret_until END
             AS previous_secret_until,
         created_at, updated_at"
    };
}

impl FromRow for Endpoint {
    const COLUMNS: &'static str = endpoint_columns!();

    fn from_row(r: &Row) -> Result<Endpoint, tokio_postgres::Error> {
        Ok(Endpoint {
            id: r.try_get("id")?,
            url: r.try_get("url")?,
            description: r.try_get("description")?,
            event_types: r.try_get("event_types")?,
            enabled: r.try_get("enabled")?,
            disabled_reason: r.try_get("disabled_reason")?,
            failing_since: r.try_get("failing_since")?,
            previous_secret_until: r.try_get("previous_secret_until")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }
}

/// A new `whsec_` secret: 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut key);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

const CREATE_SQL: &str = concat!(
    "INSERT INTO webhook_endpoints (url, description, event_types, secret)
     VALUES ($1, $2, $3, $4) RETURNING ",
    endpoint_columns!()
);

/// Creates an endpoint; returns it and its secret.
pub async fn create(
    client: &impl GenericClient,
    url: &str,
    description: Option<&str>,
    event_types: &[String],
) -> Result<(Endpoint, String), ApiError> {
    let secret = new_secret();
    let endpoint = db::one(
        client,
        CREATE_SQL,
        &[&url, &description, &event_types, &secret],
    )
    .await?;
    Ok((endpoint, secret))
}

const LIST_SQL: &str = concat!(
    "SELECT ",
    endpoint_columns!(),
    " FROM webhook_endpoints WHERE id > $1 ORDER BY id LIMIT $2"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    endpoint_columns!(),
    " FROM webhook_endpoints WHERE id = $1"
);

/// Up to `limit` endpoints with an id above `after`.
pub async fn list(
    client: &impl GenericClient,
    after: i64,
    limit: i64,
) -> Result<Vec<Endpoint>, ApiError> {
    db::all(client, LIST_SQL, &[&after, &limit]).await
}

/// Endpoint `id`.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Endpoint>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// A staff change of an endpoint: `None` leaves a field as it is.
#[derive(Debug, Default)]
pub struct Change {
    pub url: Option<String>,
    /// `Some(None)` clears it.
    pub description: Option<Option<String>>,
    pub event_types: Option<Vec<String>>,
    /// `true` re-enables (and forgets the failures), `false` disables (`staff`).
    pub enabled: Option<bool>,
}

const CHANGE_SQL: &str = concat!(
    "UPDATE webhook_endpoints SET
         url = COALESCE($2, url),
         description = CASE WHEN $3 THEN $4 ELSE description END,
         event_types = COALESCE($5, event_types),
         disabled_at = CASE WHEN $6::boolean IS NULL THEN disabled_at
                            WHEN $6 THEN NULL
                            ELSE COALESCE(disabled_at, statement_timestamp()) END,
         disabled_reason = CASE WHEN $6::boolean IS NULL THEN disabled_reason
                                WHEN $6 THEN NULL
                                ELSE COALESCE(disabled_reason, 'staff') END,
         failing_since = CASE WHEN $6 THEN NULL ELSE failing_since END,
         updated_at = statement_timestamp()
     WHERE id = $1 RETURNING ",
    endpoint_columns!()
);

/// Applies `c` to endpoint `id`; `None` when there is none.
pub async fn change(
    client: &impl GenericClient,
    id: i64,
    c: &Change,
) -> Result<Option<Endpoint>, ApiError> {
    let description = c.description.clone().flatten();
    db::opt(
        client,
        CHANGE_SQL,
        &[
            &id,
            &c.url,
            &c.description.is_some(),
            &description,
            &c.event_types,
            &c.enabled,
        ],
    )
    .await
}

/// Deletes endpoint `id` with its deliveries; false when there was none.
pub async fn delete(client: &impl GenericClient, id: i64) -> Result<bool, ApiError> {
    Ok(db::execute(
        client,
        "DELETE FROM webhook_endpoints WHERE id = $1",
        &[&id],
    )
    .await?
        > 0)
}

const ROTATE_SQL: &str = concat!(
    "UPDATE webhook_endpoints SET
         previous_secret = secret,
         previous_secret_until = statement_timestamp() + make_interval(hours => $3),
         secret = $2, updated_at = statement_timestamp()
     WHERE id = $1 RETURNING ",
    endpoint_columns!()
);

/// Gives endpoint `id` a new secret; the old one signs too for [`ROTATION_OVERLAP_HOURS`].
pub async fn rotate(
    client: &impl GenericClient,
    id: i64,
) -> Result<Option<(Endpoint, String)>, ApiError> {
    let secret = new_secret();
    let hours = ROTATION_OVERLAP_HOURS as i32;
    let endpoint: Option<Endpoint> = db::opt(client, ROTATE_SQL, &[&id, &secret, &hours]).await?;
    Ok(endpoint.map(|e| (e, secret)))
}

// ---- deliveries ----

/// One attempt to send a delivery.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Attempt {
    pub at: DateTime<Utc>,
    /// The HTTP status answered; null when there was no answer.
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    /// Why it failed (no answer, refused address, …); null when an answer came.
    pub error: Option<String>,
}

/// One event's delivery to one endpoint, with its attempts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    pub id: i64,
    pub endpoint_id: i64,
    pub event_id: i64,
    /// The `webhook-id` header: the same on every attempt.
    pub msg_id: String,
    pub event_type: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub attempts: Vec<Attempt>,
}

const DELIVERIES_SQL: &str = "SELECT d.id, d.endpoint_id, d.event_id, ev.msg_id,
         ev.type AS event_type, d.status,
         CASE WHEN d.status = 'pending' THEN d.next_attempt_at END AS next_attempt_at,
         d.created_at,
         COALESCE((SELECT jsonb_agg(jsonb_build_object(
                      'at', webhook_time(a.at), 'status_code', a.status_code,
                      'latency_ms', a.latency_ms, 'error', a.error) ORDER BY a.id)
                   FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]') AS attempts
     FROM webhook_deliveries d JOIN webhook_events ev ON ev.id = d.event_id
     WHERE ($1::bigint IS NULL OR d.endpoint_id = $1) AND ($2::bigint IS NULL OR d.id = $2)
       AND d.id > $3
     ORDER BY d.id LIMIT $4";

fn delivery(r: &Row) -> Result<Delivery, ApiError> {
    let attempts: serde_json::Value = r.try_get("attempts")?;
    let attempts = attempts
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| Attempt {
                    at: v["at"]
                        .as_str()
                        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                        .map_or_else(Utc::now, |t| t.with_timezone(&Utc)),
                    status_code: v["status_code"].as_i64().map(|c| c as i32),
                    latency_ms: v["latency_ms"].as_i64().unwrap_or_default() as i32,
                    error: v["error"].as_str().map(str::to_string),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Delivery {
        id: r.try_get("id")?,
        endpoint_id: r.try_get("endpoint_id")?,
        event_id: r.try_get("event_id")?,
        msg_id: r.try_get("msg_id")?,
        event_type: r.try_get("event_type")?,
        status: r.try_get("status")?,
        next_attempt_at: r.try_get("next_attempt_at")?,
        created_at: r.try_get("created_at")?,
        attempts,
    })
}

/// Up to `limit` deliveries to endpoint `endpoint_id` with an id above `after`.
pub async fn deliveries(
    client: &impl GenericClient,
    endpoint_id: i64,
    after: i64,
    limit: i64,
) -> Result<Vec<Delivery>, ApiError> {
    let rows = client
        .query(
            DELIVERIES_SQL,
            &[&Some(endpoint_id), &None::<i64>, &after, &limit],
        )
        .await?;
    rows.iter().map(delivery).collect()
}

/// Delivery `id`.
pub async fn get_delivery(
    client: &impl GenericClient,
    id: i64,
) -> Result<Option<Delivery>, ApiError> {
    let row = client
        .query_opt(DELIVERIES_SQL, &[&None::<i64>, &Some(id), &0i64, &1i64])
        .await?;
    row.as_ref().map(delivery).transpose()
}

/// Why a replay was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplayRefusal {
    /// Pending and due now or being sent: it will be sent anyway.
    InFlight,
}

const REPLAY_SQL: &str = "UPDATE webhook_deliveries
     SET status = 'pending', attempts = 0, next_attempt_at = statement_timestamp(),
         updated_at = statement_timestamp()
     WHERE id = $1 AND (status <> 'pending' OR next_attempt_at > statement_timestamp())
     RETURNING id";

/// Sends delivery `id` again now, from the start of the schedule (the same `webhook-id` and
/// body). `None`: no such delivery.
pub async fn replay(
    client: &impl GenericClient,
    id: i64,
) -> Result<Option<Result<Delivery, ReplayRefusal>>, ApiError> {
    if db::execute(client, REPLAY_SQL, &[&id]).await? == 0 {
        return Ok(get_delivery(client, id)
            .await?
            .map(|_| Err(ReplayRefusal::InFlight)));
    }
    Ok(get_delivery(client, id).await?.map(Ok))
}

/// Deliveries waiting to be sent to enabled endpoints (the queue depth).
pub async fn queue_depth(client: &impl GenericClient) -> Result<i64, ApiError> {
    Ok(client
        .query_one(
            "SELECT count(*) AS depth FROM webhook_deliveries d
             JOIN webhook_endpoints e ON e.id = d.endpoint_id
             WHERE d.status = 'pending' AND e.disabled_at IS NULL",
            &[],
        )
        .await?
        .try_get("depth")?)
}

// ---- the URL check ----

/// Why an endpoint URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefusal {
    #[error("must be an absolute URL")]
    NotAUrl,
    #[error("must use https")]
    NotHttps,
    #[error("must not carry a user name or password")]
    Credentials,
    #[error("does not resolve: {0}")]
    Unresolvable(String),
    #[error("resolves to a private, loopback or link-local address ({0})")]
    Private(IpAddr),
}

/// Whether `ip` may receive our webhooks: not loopback, private, link-local, unspecified,
/// shared (CGNAT), multicast, broadcast or documentation space, in either family.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                || (s[0] == 0x64 && s[1] == 0xff9b))
        }
    }
}

/// Checks an endpoint URL and resolves it: `https` (or, with `allow_private`, `http` too), no
/// credentials, and every address it resolves to public unless `allow_private`. Returns the
/// parsed URL and the addresses to connect to (only these: a second lookup could answer
/// otherwise).
pub async fn check_url(
    url: &str,
    allow_private: bool,
) -> Result<(url::Url, Vec<SocketAddr>), UrlRefusal> {
    let parsed = url::Url::parse(url).map_err(|_| UrlRefusal::NotAUrl)?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err(UrlRefusal::NotHttps),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlRefusal::Credentials);
    }
    let host = parsed.host_str().ok_or(UrlRefusal::NotAUrl)?.to_string();
    let port = parsed.port_or_known_default().ok_or(UrlRefusal::NotAUrl)?;
    let host_for_lookup = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host_for_lookup.as_str(), port))
        .await
        .map_err(|e| UrlRefusal::Unresolvable(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(UrlRefusal::Unresolvable("no address".into()));
    }
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(UrlRefusal::Private(bad.ip()));
    }
    Ok((parsed, addrs))
}

// ---- sending ----

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

const CLAIM_SQL: &str = "WITH due AS (
         SELECT d.id FROM webhook_deliveries d
         JOIN webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.status = 'pending' AND d.next_attempt_at <= statement_timestamp()
           AND e.disabled_at IS NULL
         ORDER BY d.next_attempt_at, d.id LIMIT $1
         FOR UPDATE OF d SKIP LOCKED
     )
     UPDATE webhook_deliveries d
     SET next_attempt_at = statement_timestamp() + make_interval(secs => $2),
         updated_at = statement_timestamp()
     FROM due, webhook_events ev, webhook_endpoints e
     WHERE d.id = due.id AND ev.id = d.event_id AND e.id = d.endpoint_id
     RETURNING d.id, d.endpoint_id, d.attempts, ev.msg_id, ev.body, e.url, e.secret,
         CASE WHEN e.previous_secret_until > statement_timestamp() THEN e.previous_secret END
             AS previous_secret";

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

/// The `webhook-signature` header for `body`: one `v1,` signature per secret (two during a
/// rotation), space-separated, made by the `standardwebhooks` crate.
pub fn signature_header(
    secrets: &[&str],
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, String> {
    let mut signatures = Vec::with_capacity(secrets.len());
    for secret in secrets {
        let webhook = standardwebhooks::Webhook::new(secret).map_err(|e| e.to_string())?;
        signatures.push(
            webhook
                .sign(msg_id, timestamp, body)
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(signatures.join(" "))
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

async fn send(c: &Claimed, allow_private: bool) -> Outcome {
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
    let mut builder = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("subgate/", env!("CARGO_PKG_VERSION")));
    if let Some(domain) = url.domain() {
        builder = builder.resolve_to_addrs(domain, &addrs);
    }
    let client = match builder.build() {
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
        Err(e) if e.is_timeout() => fail(format!("no answer within {} s", TIMEOUT.as_secs())),
        Err(e) => fail(format!("not sent: {e}")),
    }
}

/// When to try again after the `attempts`-th failed attempt (1-based), or `None` when that was
/// the last: the schedule's wait, or a longer `Retry-After` (at most a day).
pub fn next_wait(attempts: i32, retry_after: Option<i64>) -> Option<i64> {
    let scheduled = *SCHEDULE_SECS.get(usize::try_from(attempts).ok()?.checked_sub(1)?)?;
    Some(scheduled.max(retry_after.unwrap_or(0).min(MAX_RETRY_AFTER_SECS)))
}

const ATTEMPT_SQL: &str =
    "INSERT INTO webhook_attempts (delivery_id, status_code, latency_ms, error)
     VALUES ($1, $2, $3, $4)";
const DELIVERED_SQL: &str = "WITH d AS (
         UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1,
             last_status = $2, last_error = NULL, updated_at = statement_timestamp()
         WHERE id = $1 RETURNING endpoint_id
     )
     UPDATE webhook_endpoints e SET failing_since = NULL FROM d WHERE e.id = d.endpoint_id";
const FAILED_SQL: &str = "UPDATE webhook_deliveries SET
         attempts = attempts + 1, last_status = $2, last_error = $3,
         status = CASE WHEN $4::bigint IS NULL THEN 'failed' ELSE 'pending' END,
         next_attempt_at = CASE WHEN $4::bigint IS NULL THEN next_attempt_at
             ELSE statement_timestamp() + make_interval(secs => $4::bigint) END,
         updated_at = statement_timestamp()
     WHERE id = $1";
/// Marks the endpoint failing (since now, unless it was already), and disables it with
/// `gone` on a 410 or `failing` after [`FAILING_DAYS`]; returns the reason it was disabled.
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

/// Records an attempt's outcome, in one transaction.
async fn record(pool: &Pool, c: &Claimed, o: &Outcome) -> Result<(), ApiError> {
    let status = o.status_code.map(i32::from);
    let latency = o.latency.as_millis().min(i32::MAX as u128) as i32;
    let error = o
        .error
        .clone()
        .or_else(|| (!o.delivered()).then(|| format!("answered HTTP {}", status.unwrap_or(0))));
    let days = FAILING_DAYS as i32;
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
    crate::metrics::outbound_attempt(if delivered {
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

/// Claims the due deliveries (up to a batch), sends them concurrently and records each;
/// returns how many were attempted.
pub async fn deliver_due(pool: &Pool, allow_private: bool) -> Result<usize, ApiError> {
    let claimed: Vec<Claimed> = {
        let client = pool.get().await?;
        let rows = client.query(CLAIM_SQL, &[&BATCH, &LEASE_SECS]).await?;
        rows.iter()
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
            .collect::<Result<_, tokio_postgres::Error>>()?
    };
    let n = claimed.len();
    let results = futures::future::join_all(claimed.iter().map(|c| async move {
        let outcome = send(c, allow_private).await;
        record(pool, c, &outcome).await
    }))
    .await;
    for r in results {
        r?;
    }
    Ok(n)
}

/// Delivers due webhooks every [`POLL`] until shutdown, and samples the queue depth for the
/// metrics every [`crate::metrics::SAMPLE_EVERY`].
pub async fn run_loop(pool: Pool, allow_private: bool, shutdown: ShutdownSignal) {
    let mut ticks = shutdown.ticks(POLL);
    let mut sampled: Option<Instant> = None;
    while ticks.next().await {
        if let Err(e) = deliver_due(&pool, allow_private).await {
            tracing::error!(error = %e, "webhook deliveries failed; trying again");
        }
        if sampled.is_none_or(|t| t.elapsed() >= crate::metrics::SAMPLE_EVERY) {
            sampled = Some(Instant::now());
            let depth = async { queue_depth(&pool.get().await?).await }.await;
            match depth {
                Ok(depth) => crate::metrics::outbound_queue(depth),
                Err(e) => tracing::warn!(error = %e, "webhook queue depth not sampled"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_ends_after_nine_retries_and_retry_after_can_only_lengthen_it() {
        assert_eq!(next_wait(1, None), Some(5));
        assert_eq!(next_wait(2, None), Some(300));
        assert_eq!(next_wait(9, None), Some(86_400));
        assert_eq!(next_wait(10, None), None);
        assert_eq!(next_wait(1, Some(120)), Some(120));
        assert_eq!(next_wait(2, Some(1)), Some(300));
        assert_eq!(next_wait(1, Some(10_000_000)), Some(86_400));
        assert_eq!(next_wait(0, None), None);
    }

    #[test]
    fn only_public_addresses_pass() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn urls_must_be_https_and_public_unless_allowed() {
        assert_eq!(
            check_url("http://1.1.1.1/hook", false).await.unwrap_err(),
            UrlRefusal::NotHttps
        );
        assert_eq!(
            check_url("https://127.0.0.1/hook", false)
                .await
                .unwrap_err(),
            UrlRefusal::Private("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            check_url("https://[::1]:8443/hook", false)
                .await
                .unwrap_err(),
            UrlRefusal::Private("::1".parse().unwrap())
        );
        assert_eq!(
            check_url("https://u:p@1.1.1.1/", false).await.unwrap_err(),
            UrlRefusal::Credentials
        );
        assert_eq!(
            check_url("not a url", false).await.unwrap_err(),
            UrlRefusal::NotAUrl
        );
        assert!(check_url("https://1.1.1.1/hook", false).await.is_ok());
        assert!(check_url("http://127.0.0.1:9/hook", true).await.is_ok());
    }

    #[test]
    fn the_official_verifier_accepts_both_signatures_of_a_rotation() {
        let (old, new) = (new_secret(), new_secret());
        let body = br#"{"type":"payment.applied","timestamp":"x","data":{}}"#;
        let now = Utc::now().timestamp();
        let header = signature_header(&[&new, &old], "msg_1", now, body).unwrap();
        assert_eq!(header.split(' ').count(), 2);
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("webhook-id", "msg_1".parse().unwrap());
        headers.insert("webhook-timestamp", now.to_string().parse().unwrap());
        headers.insert("webhook-signature", header.parse().unwrap());
        for secret in [&old, &new] {
            standardwebhooks::Webhook::new(secret)
                .unwrap()
                .verify(body, &headers)
                .unwrap();
        }
        assert!(
            standardwebhooks::Webhook::new(&new_secret())
                .unwrap()
                .verify(body, &headers)
                .is_err()
        );
    }

    #[test]
    fn the_signature_matches_the_specification_vector() {
        assert_eq!(
            signature_header(
                &["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"],
                "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                1_649_367_553,
                br#"{"email":"test@example.com","username":"test_user"}"#
            )
            .unwrap(),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
    }
}
