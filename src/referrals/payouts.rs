//! Payouts (`payouts`): a record that an affiliate was paid the payable lines of one currency,
//! netted, and the mark of those lines as paid by it.
//!
//! A payout locks the affiliate's row first ([`affiliates::lock`]), the lock the ledger's
//! reversal of a line takes too, so a line is never paid and taken back at once and two
//! payouts of one affiliate run one after the other. Then one statement (`payout.sql`) sums
//! every payable line of the currency — the `pending` lines whose hold has passed, earning
//! lines and negative `reversal` lines alike — and, when there is at least one and the net is
//! positive, writes the payout and marks exactly those lines paid by it. Otherwise nothing
//! changes: a negative net stays on the lines and is netted by the next payout.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;

use super::affiliates;
use crate::{
    common::error::ApiError,
    db::{self, FromRow},
};

/// A payout.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 4, "affiliate_id": 3, "currency": "UAH",
    "amount_minor": 11940, "lines": 3, "created_at": "2026-02-01T10:00:00Z"}))]
pub struct Payout {
    pub id: i64,
    pub affiliate_id: i32,
    pub currency: String,
    /// The net of the lines it paid (> 0): earning lines less reversals.
    pub amount_minor: i64,
    /// How many lines it paid (reversals included).
    pub lines: i32,
    pub created_at: DateTime<Utc>,
}

crate::from_row!(Payout {
    id,
    affiliate_id,
    currency,
    amount_minor,
    lines,
    created_at
});

const RECORD_SQL: &str = include_str!("payout.sql");

/// Pays affiliate `affiliate_id`'s payable lines of `currency` (see the module doc), recorded
/// as staff account `staff_id`'s. 404 when there is no such affiliate; 409 naming the balance
/// when there is nothing to pay (no payable line, or a net of zero or less).
pub async fn record(
    tx: &Transaction<'_>,
    affiliate_id: i32,
    currency: &str,
    staff_id: Option<i32>,
) -> Result<Payout, ApiError> {
    if affiliates::lock(tx, affiliate_id).await?.is_none() {
        return Err(ApiError::NotFound("affiliate"));
    }
    let row = db::row_one(tx, RECORD_SQL, &[&affiliate_id, &currency, &staff_id]).await?;
    let net = db::exact_sum(&row, "net")?;
    let n: i64 = row.try_get("n")?;
    let id: Option<i64> = row.try_get("id")?;
    if id.is_none() {
        return Err(ApiError::Conflict(if n == 0 {
            format!("nothing to pay: affiliate {affiliate_id} has no payable {currency} lines")
        } else {
            format!(
                "nothing to pay: the payable balance of affiliate {affiliate_id} in {currency} \
                 is {net} over {n} lines; a balance of zero or less carries into the next payout"
            )
        }));
    }
    let paid: i64 = row.try_get("paid")?;
    if paid != n {
        // The affiliate's lock keeps the lines still; a difference is a bug, and rolls back.
        return Err(ApiError::internal(format!(
            "a payout summed {n} lines but marked {paid} paid"
        )));
    }
    let payout = Payout::from_row(&row)?;
    tracing::info!(
        payout_id = payout.id,
        affiliate_id,
        currency,
        amount_minor = payout.amount_minor,
        lines = payout.lines,
        "payout recorded"
    );
    Ok(payout)
}

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub affiliate_id: Option<i32>,
    pub currency: Option<String>,
}

const LIST_SQL: &str = "SELECT id, affiliate_id, currency, amount_minor, lines, created_at
     FROM payouts
     WHERE id > $1
       AND ($2::integer IS NULL OR affiliate_id = $2)
       AND ($3::text IS NULL OR currency = $3)
     ORDER BY id
     LIMIT $4";

/// Up to `limit` payouts with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Payout>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[&after, &filter.affiliate_id, &filter.currency, &limit],
    )
    .await
}

const GET_SQL: &str = "SELECT id, affiliate_id, currency, amount_minor, lines, created_at
     FROM payouts WHERE id = $1";

/// Payout `id`, if any.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Payout>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}
