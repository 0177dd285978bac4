//! `monobank_invoices`: one row per Monobank invoice — made by us for an order, or first heard
//! of in a signed report — with the newest status reported and its `modifiedDate`, the page
//! given to the buyer, and the chase of an invoice whose webhook has not come. This module owns
//! the rows: their type, their SQL and the rules of their states; [`super::updates`] acts on
//! reports and [`super::reconcile`] asks Monobank.
//!
//! **Newest report wins.** [`observe`] stores a report in one statement, `INSERT … ON
//! CONFLICT (invoice_id) DO UPDATE … WHERE stored modified_date <= the report's`: the row is
//! locked by the statement and the condition is judged on its newest committed version, so of
//! concurrent reports the newest is the one left stored, and a report older than one stored
//! changes nothing (it is stale). A report as new as the stored one passes, so a redelivery of
//! the newest report is acted on again and finds its change made.
//!
//! **One page per order at a time.** Monobank has no idempotency key, so the invoice made for
//! an order is stored ([`hand_out`]) and its page reused while it stays valid ([`reusable`]). Two
//! makers racing for one order (the bot's effect and a Mini App press) may both make an invoice;
//! [`hand_out`] decides under a transaction-scoped advisory lock of the order which of them is
//! given out — the first stored — and the other's page is never shown, so it cannot be paid.
//!
//! **The chase** (`chase`, as WayForPay's `gateway_checks.state`): a page given out is
//! `chasing`, first asked about `RECONCILE_AFTER_SECS` after it was made; a final report acted
//! on makes it `settled` (or `found`, when the reconcile stored the payment); still not final
//! 72 hours after the invoice was made, it is `gave_up`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use serde::Serialize;

use super::{Report, Status};
use crate::{common::error::ApiError, db};

/// How long an invoice is chased, from when it was made.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(72 * 3600);

crate::text_enum! {
    /// Where the chase of an invoice stands: the `chase` column.
    pub enum Chase {
        /// Not final at Monobank's last word; asked again at `next_check_at`.
        Chasing => "chasing",
        /// The reconcile found it paid and stored the payment (`payment_id`).
        Found => "found",
        /// Still not final 72 hours after it was made: no longer asked about.
        GaveUp => "gave_up",
        /// A final report was acted on (or the page was never given out).
        Settled => "settled",
    }
}

/// The select list of [`Invoice`].
macro_rules! invoice_columns {
    () => {
        "id, invoice_id, order_id, reference, amount_minor, page_url, handed_out, valid_until, \
         status, modified_date, chase, attempts, next_check_at, last_checked_at, last_error, \
         payment_id, created_at, updated_at"
    };
}

/// One Monobank invoice, as staff see it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = MonobankInvoice, example = json!({"id": 3, "invoice_id": "p2_9ZgpZVsl3", "order_id": 7,
    "reference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21", "amount_minor": 19900,
    "page_url": "https://pay.mbnk.biz/p2_9ZgpZVsl3", "handed_out": true,
    "valid_until": "2025-01-01T10:05:00Z", "status": "success",
    "modified_date": "2025-01-01T10:03:00Z", "chase": "settled", "attempts": 0,
    "next_check_at": "2025-01-01T10:10:00Z", "last_checked_at": null, "last_error": null,
    "payment_id": 12, "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:03:01Z"}))]
pub struct Invoice {
    /// The row's place in lists.
    pub id: i64,
    pub invoice_id: String,
    pub order_id: Option<i64>,
    pub reference: String,
    pub amount_minor: i64,
    pub page_url: Option<String>,
    /// The page was given to the buyer.
    pub handed_out: bool,
    pub valid_until: Option<DateTime<Utc>>,
    /// The newest status reported.
    pub status: Status,
    /// Monobank's `modifiedDate` of that report.
    pub modified_date: Option<DateTime<Utc>>,
    pub chase: Chase,
    /// Status calls made by the reconcile.
    pub attempts: i32,
    pub next_check_at: DateTime<Utc>,
    pub last_checked_at: Option<DateTime<Utc>>,
    /// Why the last call told us nothing.
    pub last_error: Option<String>,
    /// The payment the invoice's report stored or refunded.
    pub payment_id: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

crate::from_row!(Invoice [invoice_columns!()] {
    id,
    invoice_id,
    order_id,
    reference,
    amount_minor,
    page_url,
    handed_out,
    valid_until,
    status,
    modified_date,
    chase,
    attempts,
    next_check_at,
    last_checked_at,
    last_error,
    payment_id,
    created_at,
    updated_at,
});

// ---- pages ----

const REUSABLE_SQL: &str = "SELECT page_url FROM monobank_invoices
     WHERE order_id = $1 AND handed_out AND page_url IS NOT NULL
       AND status IN ('created', 'processing')
       AND valid_until > statement_timestamp() + make_interval(secs => $2)
     ORDER BY created_at DESC LIMIT 1";

/// The page of order `order_id`'s invoice given out before, when it can still be paid for at
/// least `margin_secs`.
pub async fn reusable(
    client: &impl GenericClient,
    order_id: i64,
    margin_secs: i64,
) -> Result<Option<String>, ApiError> {
    Ok(
        db::row_opt(client, REUSABLE_SQL, &[&order_id, &(margin_secs as f64)])
            .await?
            .map(|r| r.try_get("page_url"))
            .transpose()?,
    )
}

/// An invoice Monobank just made for an order.
#[derive(Debug, Clone)]
pub struct Made<'a> {
    pub invoice_id: &'a str,
    pub order_id: i64,
    pub reference: &'a str,
    pub amount_minor: i64,
    pub page_url: &'a str,
    /// Seconds it can be paid (its `validity`).
    pub validity_secs: i64,
}

const ORDER_LOCK_SQL: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('subgate monobank order ' || $1::bigint, 0))";

/// Stores a made invoice and says which page of the order to give the buyer: a page given out
/// before that can still be paid for `margin_secs` (another maker's, stored first), else this
/// one's, now marked given out and chased from `chase_after` on. Under the order's advisory
/// lock, so of two makers racing for one order, both give out the same page.
pub async fn hand_out(
    pool: &Pool,
    made: &Made<'_>,
    margin_secs: i64,
    chase_after: Duration,
) -> Result<String, ApiError> {
    let chase_after = chase_after.as_secs_f64();
    crate::transaction!(pool, |tx| {
        db::execute(tx, ORDER_LOCK_SQL, &[&made.order_id]).await?;
        let earlier = reusable(tx, made.order_id, margin_secs).await?;
        let handed_out = earlier.is_none();
        db::execute(
            tx,
            INSERT_MADE_SQL,
            &[
                &made.invoice_id,
                &made.order_id,
                &made.reference,
                &made.amount_minor,
                &made.page_url,
                &handed_out,
                &(made.validity_secs as f64),
                &chase_after,
            ],
        )
        .await?;
        Ok(earlier.unwrap_or_else(|| made.page_url.to_string()))
    })
}

// A report may have come before the answer of `create` was stored: the row it made is kept
// with its status, and given the order and the page.
const INSERT_MADE_SQL: &str = "INSERT INTO monobank_invoices AS m
         (invoice_id, order_id, reference, amount_minor, page_url, handed_out, valid_until,
          chase, next_check_at)
     VALUES ($1, $2, $3, $4, $5, $6, statement_timestamp() + make_interval(secs => $7),
             CASE WHEN $6 THEN 'chasing' ELSE 'settled' END,
             statement_timestamp() + make_interval(secs => $8))
     ON CONFLICT (invoice_id) DO UPDATE SET
         order_id = EXCLUDED.order_id, page_url = EXCLUDED.page_url,
         handed_out = EXCLUDED.handed_out, valid_until = EXCLUDED.valid_until,
         chase = CASE WHEN EXCLUDED.handed_out AND m.status IN ('created', 'processing', 'hold')
                      THEN 'chasing' ELSE m.chase END,
         next_check_at = EXCLUDED.next_check_at, updated_at = statement_timestamp()";

const OTHER_OPEN_SQL: &str = "SELECT EXISTS (
         SELECT 1 FROM monobank_invoices
         WHERE order_id = $1 AND invoice_id <> $2 AND handed_out
           AND status IN ('created', 'processing', 'hold')
           AND valid_until > statement_timestamp()) AS open";

/// Whether order `order_id` has a page given out, other than invoice `invoice_id`'s, that can
/// still be paid: a failed or expired invoice then leaves the order's holds to it.
pub async fn other_page_open(
    client: &impl GenericClient,
    order_id: i64,
    invoice_id: &str,
) -> Result<bool, ApiError> {
    Ok(
        db::row_one(client, OTHER_OPEN_SQL, &[&order_id, &invoice_id])
            .await?
            .try_get("open")?,
    )
}

// ---- reports ----

/// What storing a report found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// The newest report of the invoice (or as new as the newest): act on it. `order_id`: the
    /// invoice's order, when known.
    Newest { order_id: Option<i64> },
    /// Older than a report stored before: nothing to do.
    Stale { stored: Status },
}

// An invoice first heard of in a report is not chased: its page was not given out by us (when
// the answer of `create` is stored after it, [`hand_out`] starts the chase).
const OBSERVE_SQL: &str = "WITH stored AS (
         INSERT INTO monobank_invoices AS m
             (invoice_id, order_id, reference, amount_minor, status, modified_date, chase,
              next_check_at)
         VALUES ($1, (SELECT id FROM orders WHERE reference = $2), COALESCE($2, ''), $3, $4,
                 $5, 'settled', statement_timestamp())
         ON CONFLICT (invoice_id) DO UPDATE SET
             status = EXCLUDED.status, modified_date = EXCLUDED.modified_date,
             updated_at = statement_timestamp()
         WHERE m.modified_date IS NULL OR m.modified_date <= EXCLUDED.modified_date
         RETURNING m.order_id
     )
     SELECT order_id FROM stored";

const STORED_SQL: &str = "SELECT status FROM monobank_invoices WHERE invoice_id = $1";

/// Stores `report` as the invoice's newest, unless a newer one is stored (see the module doc).
pub async fn observe(client: &impl GenericClient, report: &Report) -> Result<Observed, ApiError> {
    let newest = db::row_opt(
        client,
        OBSERVE_SQL,
        &[
            &report.invoice_id,
            &report.reference,
            &report.amount_minor,
            &report.status,
            &report.modified_date,
        ],
    )
    .await?;
    if let Some(row) = newest {
        return Ok(Observed::Newest {
            order_id: row.try_get("order_id")?,
        });
    }
    // Read in a statement of its own: the newer row may have been committed after the
    // statement above began.
    let stored = db::row_one(client, STORED_SQL, &[&report.invoice_id])
        .await?
        .try_get("status")?;
    Ok(Observed::Stale { stored })
}

const SETTLE_SQL: &str = "UPDATE monobank_invoices SET
         chase = $2, payment_id = COALESCE($3, payment_id), last_error = NULL,
         updated_at = statement_timestamp()
     WHERE invoice_id = $1 AND chase = 'chasing'";

/// A final report of the invoice was acted on: its chase ends as `chase` (`settled`, or
/// `found` by the reconcile), naming the payment it stored or refunded.
pub async fn settle(
    client: &impl GenericClient,
    invoice_id: &str,
    chase: Chase,
    payment_id: Option<i64>,
) -> Result<(), ApiError> {
    db::execute(client, SETTLE_SQL, &[&invoice_id, &chase, &payment_id]).await?;
    Ok(())
}

// ---- the reconcile's statements ----

const CLAIM_SQL: &str = "UPDATE monobank_invoices
     SET next_check_at = statement_timestamp() + make_interval(secs => $1)
     WHERE invoice_id = (
         SELECT invoice_id FROM monobank_invoices
         WHERE chase = 'chasing' AND next_check_at <= statement_timestamp()
         ORDER BY next_check_at LIMIT 1
         FOR UPDATE SKIP LOCKED)
     RETURNING invoice_id, attempts";

/// A claimed invoice to ask about, and the calls made about it so far.
#[derive(Debug, Clone)]
pub struct Due {
    pub invoice_id: String,
    pub attempts: i32,
}

/// Claims the next due invoice, pushing its `next_check_at` `lease` ahead so no other process
/// asks about it meanwhile (and a killed one's claim runs out).
pub async fn claim(client: &impl GenericClient, lease: Duration) -> Result<Option<Due>, ApiError> {
    let Some(row) = db::row_opt(client, CLAIM_SQL, &[&lease.as_secs_f64()]).await? else {
        return Ok(None);
    };
    Ok(Some(Due {
        invoice_id: row.try_get("invoice_id")?,
        attempts: row.try_get("attempts")?,
    }))
}

const AGAIN_SQL: &str = "UPDATE monobank_invoices SET
         attempts = attempts + 1,
         last_checked_at = statement_timestamp(),
         last_error = $2,
         chase = CASE WHEN statement_timestamp() >= created_at + make_interval(secs => $3)
                      THEN 'gave_up' ELSE 'chasing' END,
         next_check_at = LEAST(statement_timestamp() + make_interval(secs => $4),
                               created_at + make_interval(secs => $3)),
         updated_at = statement_timestamp()
     WHERE invoice_id = $1 AND chase = 'chasing'
     RETURNING chase";

/// Records a call that settled nothing (`error`: why it told us nothing; `None` after an
/// answer that was not final): asked again after `wait`, never after the deadline
/// ([`GIVE_UP_AFTER`] from when the invoice was made); past it, `gave_up`. Returns the chase
/// now (`None`: it was no longer chasing).
pub async fn again(
    client: &impl GenericClient,
    invoice_id: &str,
    error: Option<&str>,
    wait: Duration,
) -> Result<Option<Chase>, ApiError> {
    let give_up = GIVE_UP_AFTER.as_secs_f64();
    db::row_opt(
        client,
        AGAIN_SQL,
        &[&invoice_id, &error, &give_up, &wait.as_secs_f64()],
    )
    .await?
    .map(|r| r.try_get("chase"))
    .transpose()
    .map_err(ApiError::from)
}

const CHECKED_SQL: &str = "UPDATE monobank_invoices SET
         attempts = attempts + 1, last_checked_at = statement_timestamp(),
         updated_at = statement_timestamp()
     WHERE invoice_id = $1";

/// Counts a call whose answer was acted on.
pub async fn checked(client: &impl GenericClient, invoice_id: &str) -> Result<(), ApiError> {
    db::execute(client, CHECKED_SQL, &[&invoice_id]).await?;
    Ok(())
}

// ---- reading ----

const LIST_SQL: &str = concat!(
    "SELECT ",
    invoice_columns!(),
    " FROM monobank_invoices
     WHERE id > $1 AND ($2::text IS NULL OR chase = $2::text)
       AND ($3::bigint IS NULL OR order_id = $3)
     ORDER BY id LIMIT $4"
);

/// Up to `limit` invoices with an id above `after`, by id, in `chase` and of `order_id` if
/// given.
pub async fn list(
    client: &impl GenericClient,
    chase: Option<Chase>,
    order_id: Option<i64>,
    after: i64,
    limit: i64,
) -> Result<Vec<Invoice>, ApiError> {
    db::all(client, LIST_SQL, &[&after, &chase, &order_id, &limit]).await
}

const COUNTS_SQL: &str =
    "SELECT chase, count(*) AS n FROM monobank_invoices WHERE handed_out GROUP BY chase";

/// How many invoices whose page was given out are in each state of the chase.
pub async fn counts(client: &impl GenericClient) -> Result<ChaseCounts, ApiError> {
    let mut counts = ChaseCounts::default();
    for r in db::rows(client, COUNTS_SQL, &[]).await? {
        let n: i64 = r.try_get("n")?;
        match r.try_get::<_, Chase>("chase")? {
            Chase::Chasing => counts.chasing = n,
            Chase::Found => counts.found = n,
            Chase::GaveUp => counts.gave_up = n,
            Chase::Settled => counts.settled = n,
        }
    }
    Ok(counts)
}

/// How many given-out invoices are in each state of the chase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = MonobankChaseCounts)]
pub struct ChaseCounts {
    pub chasing: i64,
    pub found: i64,
    pub gave_up: i64,
    pub settled: i64,
}

const GET_SQL: &str = concat!(
    "SELECT ",
    invoice_columns!(),
    " FROM monobank_invoices WHERE invoice_id = $1"
);

/// Invoice `invoice_id`, if we know it.
pub async fn get(
    client: &impl GenericClient,
    invoice_id: &str,
) -> Result<Option<Invoice>, ApiError> {
    db::opt(client, GET_SQL, &[&invoice_id]).await
}
