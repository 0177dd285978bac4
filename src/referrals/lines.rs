//! The reads of the commission ledger (`commission_lines`, written by [`super::ledger`]): a line
//! as staff see it, its status as it reads now, the staff list and the CSV's pages.
//!
//! A line is stored `pending`, `paid` or `reversed`; a `pending` line whose `payable_at` has
//! passed reads as `payable` (`status_sql!`, the one spelling of that rule in SQL, which the
//! list, its filter, the summary and the payout share; the outbound events' trigger in
//! migration 0025 spells the same).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use crate::{common::error::ApiError, db};

crate::text_enum! {
    /// What a line is for.
    pub enum Kind {
        /// A referred buyer's first purchase.
        First => "first",
        /// A renewal within the program's `renewal_months`.
        Renewal => "renewal",
        /// The negative line of a payment taken back after its line was paid.
        Reversal => "reversal",
    }
}

crate::text_enum! {
    /// Where a line stands, as it reads now.
    pub enum Status {
        /// In its hold: `payable_at` is still ahead.
        Pending => "pending",
        /// Past its hold and not yet paid: the next payout of its currency takes it.
        Payable => "payable",
        /// Paid by a payout (`payout_id`).
        Paid => "paid",
        /// Taken back before it was paid (its payment was refunded or disputed).
        Reversed => "reversed",
    }
}

/// SQL: the status line `$l` reads as now ([`Status`]), for a `commission_lines` row aliased
/// `$l`. `status_sql!("l")`.
macro_rules! status_sql {
    ($l:literal) => {
        concat!(
            "CASE WHEN ",
            $l,
            ".status = 'pending' AND ",
            $l,
            ".payable_at <= statement_timestamp() THEN 'payable' ELSE ",
            $l,
            ".status END"
        )
    };
}
pub(crate) use status_sql;

/// A commission line.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 12, "affiliate_id": 3, "payment_id": 481, "subscriber_id": 77,
    "kind": "first", "amount_minor": 5970, "currency": "UAH", "percent": 30,
    "base_minor": 19900, "status": "payable", "payable_at": "2026-01-15T10:00:00Z",
    "payout_id": null, "created_at": "2026-01-01T10:00:00Z", "reversed_at": null}))]
#[schema(as = CommissionLine)]
pub struct Line {
    pub id: i64,
    pub affiliate_id: i32,
    /// The payment that earned it (or, a `reversal`, that was taken back).
    pub payment_id: i64,
    /// The referred buyer (null once the subscriber is deleted).
    pub subscriber_id: Option<i32>,
    pub kind: Kind,
    /// Negative for a `reversal`, positive otherwise.
    pub amount_minor: i64,
    pub currency: String,
    /// The percent of `base_minor` it earned.
    pub percent: i32,
    /// The payment's amount net of Telegram's affiliate fee, which the percent applies to.
    pub base_minor: i64,
    pub status: Status,
    /// When the line leaves its hold.
    pub payable_at: DateTime<Utc>,
    /// The payout that paid it.
    pub payout_id: Option<i64>,
    pub created_at: DateTime<Utc>,
    /// When it was taken back before it was paid.
    pub reversed_at: Option<DateTime<Utc>>,
}

/// The select list of [`Line`], over `commission_lines l`.
macro_rules! line_columns {
    () => {
        concat!(
            "l.id, l.affiliate_id, l.payment_id, l.subscriber_id, l.kind, l.amount_minor, \
             l.currency, l.percent, l.base_minor, ",
            status_sql!("l"),
            " AS status, l.payable_at, l.payout_id, l.created_at, l.reversed_at"
        )
    };
}

crate::from_row!(Line [line_columns!()] {
    id,
    affiliate_id,
    payment_id,
    subscriber_id,
    kind,
    amount_minor,
    currency,
    percent,
    base_minor,
    status,
    payable_at,
    payout_id,
    created_at,
    reversed_at,
});

/// The filters of [`list`]; `None` matches everything. `from`/`to` bound `created_at`
/// (`from` inclusive, `to` exclusive).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub affiliate_id: Option<i32>,
    pub status: Option<Status>,
    pub kind: Option<Kind>,
    pub currency: Option<String>,
    pub payout_id: Option<i64>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

const LIST_SQL: &str = concat!(
    "SELECT ",
    line_columns!(),
    " FROM commission_lines l
     WHERE l.id > $1
       AND ($2::integer IS NULL OR l.affiliate_id = $2)
       AND ($3::text IS NULL OR ",
    status_sql!("l"),
    " = $3)
       AND ($4::text IS NULL OR l.kind = $4)
       AND ($5::text IS NULL OR l.currency = $5)
       AND ($6::bigint IS NULL OR l.payout_id = $6)
       AND ($7::timestamptz IS NULL OR l.created_at >= $7)
       AND ($8::timestamptz IS NULL OR l.created_at < $8)
     ORDER BY l.id
     LIMIT $9"
);

/// Up to `limit` lines with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Line>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.affiliate_id,
            &filter.status,
            &filter.kind,
            &filter.currency,
            &filter.payout_id,
            &filter.from,
            &filter.to,
            &limit,
        ],
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_reads_payable_once_the_hold_has_passed() {
        assert_eq!(
            status_sql!("l"),
            "CASE WHEN l.status = 'pending' AND l.payable_at <= statement_timestamp() \
             THEN 'payable' ELSE l.status END"
        );
        assert_eq!(Status::spellings(), "pending, payable, paid or reversed");
        assert_eq!(Kind::spellings(), "first, renewal or reversal");
    }
}
