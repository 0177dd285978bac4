//! `gateway_checks`: one row per WayForPay order whose purchase link the bot sent, asked about
//! at the gateway (`CHECK_STATUS`) until its payment is found or the order settles, for at most
//! [`GIVE_UP_AFTER`] from when the link was sent. This module owns the rows — their type, their
//! SQL and the rules of their states; [`crate::payments::gateways::wayforpay::reconcile`] makes the calls and decides what an
//! answer means. It stays below the payment code (no `payments`, `metrics` or `state`), so the
//! metrics sampler can read it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use serde::Serialize;

use crate::{
    common::{error::ApiError, vocabulary::Gateway},
    db, orders,
};

/// How long an order is chased, from when its purchase link was sent.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(72 * 3600);

crate::text_enum! {
    /// Where a check stands: the `state` column.
    pub enum State {
        /// Still pending at the gateway's last word; asked again at `next_check_at`.
        Chasing => "chasing",
        /// WayForPay said `Approved` and we stored the payment (`payment_id`).
        Found => "found",
        /// Still not paid 72 hours after the link was sent: no longer asked about.
        GaveUp => "gave_up",
        /// Nothing left to find: the order was paid (its callback came) or cancelled, or the
        /// gateway reported the payment refunded.
        Settled => "settled",
    }
}

/// The select list of [`Check`], over `gateway_checks g JOIN orders o`.
macro_rules! check_columns {
    () => {
        "g.order_id, o.reference, g.gateway, g.state, g.attempts, g.next_check_at, \
         g.last_checked_at, g.last_status, g.last_error, g.payment_id, o.purchase_link_at, \
         g.created_at, g.updated_at"
    };
}

/// One order being (or once) asked about at the gateway, as staff see it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"order_id": 7, "reference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21",
    "gateway": "wayforpay", "state": "found", "attempts": 2,
    "next_check_at": "2025-01-01T10:12:00Z", "last_checked_at": "2025-01-01T10:12:00Z",
    "last_status": "Approved", "last_error": null, "payment_id": 12,
    "purchase_link_at": "2025-01-01T10:00:00Z", "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:12:00Z"}))]
pub struct Check {
    pub order_id: i64,
    /// The order's reference: what WayForPay is asked about (`orderReference`).
    pub reference: String,
    #[schema(value_type = String)]
    pub gateway: Gateway,
    pub state: State,
    /// Calls made (answers, errors and timeouts alike).
    pub attempts: i32,
    /// When it is asked next (while `chasing`).
    pub next_check_at: DateTime<Utc>,
    pub last_checked_at: Option<DateTime<Utc>>,
    /// The last believed `transactionStatus` (`Declined`, `Approved`, …).
    pub last_status: Option<String>,
    /// Why the last call told us nothing: a transport error, a timeout, an HTTP status, an
    /// unsigned or badly signed answer (`null` after a believed answer).
    pub last_error: Option<String>,
    /// The payment stored from the gateway's answer (`found`).
    pub payment_id: Option<i64>,
    /// When the buyer was sent the purchase link.
    pub purchase_link_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

crate::from_row!(Check [check_columns!()] {
    order_id,
    reference,
    gateway,
    state,
    attempts,
    next_check_at,
    last_checked_at,
    last_status,
    last_error,
    payment_id,
    purchase_link_at,
    created_at,
    updated_at,
});

/// How many checks are in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = ReconciliationCounts)]
pub struct Counts {
    pub chasing: i64,
    pub found: i64,
    pub gave_up: i64,
    pub settled: i64,
}

// ---- the link ----

const INSERT_SQL: &str = "INSERT INTO gateway_checks (order_id, gateway, next_check_at)
     VALUES ($1, $2, statement_timestamp() + make_interval(secs => $3))
     ON CONFLICT (order_id) DO NOTHING";

/// The bot sent the buyer a WayForPay purchase link for order `order_id`: records when on the
/// order (the first time counts) and starts chasing it `after` from now, in one transaction.
/// A resent link changes nothing.
pub async fn link_issued(pool: &Pool, order_id: i64, after: Duration) -> Result<(), ApiError> {
    let after = after.as_secs_f64();
    crate::transaction!(pool, |tx| {
        if orders::record_purchase_link(tx, order_id).await?.is_some() {
            db::execute(tx, INSERT_SQL, &[&order_id, &Gateway::WayForPay, &after]).await?;
        }
        Ok(())
    })
}

// ---- reading ----

const LIST_SQL: &str = concat!(
    "SELECT ",
    check_columns!(),
    " FROM gateway_checks g JOIN orders o ON o.id = g.order_id
     WHERE g.order_id > $1 AND ($2::text IS NULL OR g.state = $2::text)
     ORDER BY g.order_id LIMIT $3"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    check_columns!(),
    " FROM gateway_checks g JOIN orders o ON o.id = g.order_id WHERE g.order_id = $1"
);
const COUNTS_SQL: &str = "SELECT state, count(*) AS n FROM gateway_checks GROUP BY state";

/// Up to `limit` checks with an order id above `after`, by order id, in `state` if given.
pub async fn list(
    client: &impl GenericClient,
    state: Option<State>,
    after: i64,
    limit: i64,
) -> Result<Vec<Check>, ApiError> {
    db::all(client, LIST_SQL, &[&after, &state, &limit]).await
}

/// The check of order `order_id`, if it was ever chased.
pub async fn get(client: &impl GenericClient, order_id: i64) -> Result<Option<Check>, ApiError> {
    db::opt(client, GET_SQL, &[&order_id]).await
}

/// How many checks are in each state (a scan of a table that holds one row per card order).
pub async fn counts(client: &impl GenericClient) -> Result<Counts, ApiError> {
    let mut counts = Counts::default();
    for r in db::rows(client, COUNTS_SQL, &[]).await? {
        let n: i64 = r.try_get("n")?;
        match r.try_get::<_, State>("state")? {
            State::Chasing => counts.chasing = n,
            State::Found => counts.found = n,
            State::GaveUp => counts.gave_up = n,
            State::Settled => counts.settled = n,
        }
    }
    Ok(counts)
}

const CHASING_SQL: &str = "SELECT count(*) AS n FROM gateway_checks WHERE state = 'chasing'";

/// How many orders are being chased (the metrics' pending gauge), over the due index.
pub async fn chasing(client: &impl GenericClient) -> Result<i64, ApiError> {
    Ok(db::row_one(client, CHASING_SQL, &[]).await?.try_get("n")?)
}

// ---- the pass's statements ----

/// A claimed row: the order to ask about.
#[derive(Debug, Clone)]
pub struct Due {
    pub order_id: i64,
    pub reference: String,
}

/// The deadline of a row, over `gateway_checks g JOIN orders o` (`$2` is [`GIVE_UP_AFTER`] in
/// seconds).
macro_rules! deadline {
    () => {
        "(COALESCE(o.purchase_link_at, g.created_at) + make_interval(secs => $2))"
    };
}

const SETTLE_UNASKED_SQL: &str = "UPDATE gateway_checks g
     SET state = 'settled', updated_at = statement_timestamp()
     FROM orders o
     WHERE o.id = g.order_id AND g.state = 'chasing' AND o.status <> 'pending'";

const CLAIM_SQL: &str = "UPDATE gateway_checks g
     SET next_check_at = statement_timestamp() + make_interval(secs => $1)
     FROM orders o
     WHERE o.id = g.order_id
       AND g.order_id = (
           SELECT c.order_id FROM gateway_checks c JOIN orders p ON p.id = c.order_id
           WHERE c.state = 'chasing' AND c.next_check_at <= statement_timestamp()
             AND p.status = 'pending'
           ORDER BY c.next_check_at LIMIT 1
           FOR UPDATE OF c SKIP LOCKED)
     RETURNING g.order_id, o.reference";

const AGAIN_SQL: &str = concat!(
    "UPDATE gateway_checks g SET
         attempts = g.attempts + 1,
         last_checked_at = statement_timestamp(),
         last_status = COALESCE($3, g.last_status),
         last_error = $4,
         state = CASE WHEN statement_timestamp() >= ",
    deadline!(),
    " THEN 'gave_up' ELSE 'chasing' END,
         next_check_at = LEAST(statement_timestamp() + make_interval(secs => $5), ",
    deadline!(),
    "),
         updated_at = statement_timestamp()
     FROM orders o
     WHERE o.id = g.order_id AND g.order_id = $1 AND g.state = 'chasing'
     RETURNING g.state"
);

const CLOSE_SQL: &str = "UPDATE gateway_checks SET
         state = $2, last_status = $3, payment_id = $4, last_error = NULL,
         attempts = attempts + 1,
         last_checked_at = statement_timestamp(), updated_at = statement_timestamp()
     WHERE order_id = $1 AND state = 'chasing'";

/// Settles every chasing row whose order is no longer pending (paid, cancelled): no call is
/// needed. Returns how many.
pub async fn settle_unasked(client: &impl GenericClient) -> Result<u64, ApiError> {
    db::execute(client, SETTLE_UNASKED_SQL, &[]).await
}

/// Claims the next due row whose order is still pending, pushing its `next_check_at` `lease`
/// ahead so no other process asks about it meanwhile (and a killed one's claim runs out).
pub async fn claim(client: &impl GenericClient, lease: Duration) -> Result<Option<Due>, ApiError> {
    let lease = lease.as_secs_f64();
    let Some(row) = db::row_opt(client, CLAIM_SQL, &[&lease]).await? else {
        return Ok(None);
    };
    Ok(Some(Due {
        order_id: row.try_get("order_id")?,
        reference: row.try_get("reference")?,
    }))
}

const ATTEMPTS_SQL: &str = "SELECT attempts FROM gateway_checks WHERE order_id = $1";

/// The calls made so far about order `order_id`'s row.
pub async fn attempts(client: &impl GenericClient, order_id: i64) -> Result<i32, ApiError> {
    Ok(db::row_opt(client, ATTEMPTS_SQL, &[&order_id])
        .await?
        .map(|r| r.try_get("attempts"))
        .transpose()?
        .unwrap_or(0))
}

/// Records a call that settled nothing: `status` (a believed `transactionStatus`, else the
/// last one is kept) or `error`; asked again after `wait`, but never after the deadline
/// ([`GIVE_UP_AFTER`] from the link); a row at or past it is `gave_up`. Returns the state now
/// (`None`: the row was no longer chasing).
pub async fn again(
    client: &impl GenericClient,
    order_id: i64,
    status: Option<&str>,
    error: Option<&str>,
    wait: Duration,
) -> Result<Option<State>, ApiError> {
    let give_up = GIVE_UP_AFTER.as_secs_f64();
    let wait = wait.as_secs_f64();
    db::row_opt(
        client,
        AGAIN_SQL,
        &[&order_id, &give_up, &status, &error, &wait],
    )
    .await?
    .map(|r| r.try_get("state"))
    .transpose()
    .map_err(ApiError::from)
}

/// Closes a chasing row as `found` (with the payment stored from the answer) or `settled`.
pub async fn close(
    client: &impl GenericClient,
    order_id: i64,
    state: State,
    status: &str,
    payment_id: Option<i64>,
) -> Result<(), ApiError> {
    db::execute(
        client,
        CLOSE_SQL,
        &[&order_id, &state, &status, &payment_id],
    )
    .await?;
    Ok(())
}
