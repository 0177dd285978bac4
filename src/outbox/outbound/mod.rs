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
//! - **Delivery** ([`delivery`](mod@delivery)): due deliveries are claimed with a lease counted in the
//!   database, and sent each in a task of its own, so one endpoint's slow receiver holds back
//!   only its own deliveries: at most [`Options::per_endpoint`] of one endpoint are in flight
//!   over every process, and at most [`Options::concurrency`] of all endpoints per process.
//!   Each attempt re-checks the URL ([`check_url`]: `https` only, every resolved address public
//!   by the policy of [`address`], unless `OUTBOUND_ALLOW_PRIVATE`) and connects to exactly
//!   the addresses it checked, through no proxy; 15 s timeout, no redirects. 2xx → delivered.
//!   `410 Gone` → the endpoint is disabled. Anything else → retried on Standard Webhooks'
//!   schedule ([`SCHEDULE_SECS`], `Retry-After` honoured when longer), `failed` after the last;
//!   an endpoint that has failed for [`FAILING_DAYS`] days is disabled. Every attempt is logged
//!   (`webhook_attempts`: status, latency, error).
//!
//!   `broadcast.finished` and `automation.sent` are written by the code that finishes a
//!   broadcast and records an automation's message ([`emit`]), in that transaction.
//!
//! Signing is the `standardwebhooks` crate's (`Webhook::sign`), the reference implementation,
//! so nothing about the signature is written here by hand.

pub mod address;
pub mod delivery;

pub use self::{
    address::{UrlRefusal, check_url, is_public},
    delivery::{Options, Outcome, POLL, TIMEOUT, deliver_due, run, run_loop},
};

use base64::Engine as _;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use rand::RngCore;
use serde::Serialize;
use tokio_postgres::Row;

use crate::{common::error::ApiError, db};

/// Every event type an endpoint may ask for (the schema's CHECK lists the same).
pub const EVENT_TYPES: [&str; 16] = [
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
    "broadcast.finished",
    "automation.sent",
    "referral.attributed",
    "commission.created",
    "commission.reversed",
    "payout.recorded",
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

const EMIT_SQL: &str = "SELECT webhook_emit($1, $2::jsonb)";

/// Writes event `kind` about `data` (the resource as the staff API shows it) in the caller's
/// transaction, with a delivery to every enabled endpoint that wants it (nothing when none
/// does): the schema's `webhook_emit`, which the triggers use too.
pub async fn emit(
    client: &impl GenericClient,
    kind: &str,
    data: &serde_json::Value,
) -> Result<(), ApiError> {
    db::execute(client, EMIT_SQL, &[&kind, &data]).await?;
    Ok(())
}

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

crate::from_row!(Endpoint [endpoint_columns!()] {
    id,
    url,
    description,
    event_types,
    enabled,
    disabled_reason,
    failing_since,
    previous_secret_until,
    created_at,
    updated_at,
});

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

crate::text_enum! {
    /// A delivery's status: `pending` until an endpoint answers 2xx (`delivered`) or its retries
    /// run out or it answers 410 (`failed`).
    pub enum DeliveryStatus {
        Pending => "pending",
        Delivered => "delivered",
        Failed => "failed",
    }
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
    #[schema(value_type = String)]
    pub status: DeliveryStatus,
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
     WHERE id = $1
       AND (status <> 'pending'
            OR (next_attempt_at > statement_timestamp()
                AND (leased_until IS NULL OR leased_until <= statement_timestamp())))
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

// ---- signing and the schedule ----

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

/// When to try again after the `attempts`-th failed attempt (1-based), or `None` when that was
/// the last: the schedule's wait, or a longer `Retry-After` (at most a day).
pub fn next_wait(attempts: i32, retry_after: Option<i64>) -> Option<i64> {
    let scheduled = *SCHEDULE_SECS.get(usize::try_from(attempts).ok()?.checked_sub(1)?)?;
    Some(scheduled.max(retry_after.unwrap_or(0).min(MAX_RETRY_AFTER_SECS)))
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
