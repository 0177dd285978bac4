//! An order's Crypto Pay invoices (door 6): the `cryptopay_invoices` rows, one per order and
//! asset, and what an order costs in a crypto asset.
//!
//! **The price.** A plan carries its owner's prices in crypto assets (`crypto_prices`, exact
//! numbers, never a rate). An order at the plan's list price costs exactly that; an order a
//! promo code (or an upgrade's credit) made cheaper costs the same share of it, rounded down
//! to the asset's minor unit and never below one ([`crypto_amount`]). An invoice stores the
//! amount it asked, and that is what its payment is checked against ([`asked`]), whatever the
//! plan's prices became since.
//!
//! **The rows.** The bot's invoice effect makes an invoice at Crypto Pay and keeps it here
//! ([`keep`]: the first kept for an order and asset wins), so a repeat of the effect sends the
//! same pay URL instead of making a second invoice. An `active` invoice is asked about from
//! `next_check_at` on ([`claim_due`], Crypto Pay's `getInvoices`) until Crypto Pay says it is
//! `paid` or `expired` ([`settle`]); the webhook settles it as `paid` too.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use crate::{catalog::plans::CryptoPrices, common::error::ApiError, db};

crate::text_enum! {
    /// A Crypto Pay invoice's status, as Crypto Pay names it: the `status` column.
    pub enum Status {
        /// Waiting for its payment.
        Active => "active",
        /// Paid (the webhook or `getInvoices` said so).
        Paid => "paid",
        /// Expired unpaid.
        Expired => "expired",
    }
}

/// The amount an order costs in a crypto asset whose plan price is `price_minor`: the price
/// itself for an order at the plan's list price (`amount_minor` = `list_price_minor`), else
/// the same share of it as the order's amount is of its list price, rounded down, at least one
/// minor unit. Pure; exact integer arithmetic.
pub fn crypto_amount(price_minor: i64, amount_minor: i64, list_price_minor: i64) -> i64 {
    if amount_minor == list_price_minor || list_price_minor <= 0 {
        return price_minor;
    }
    let share = i128::from(price_minor) * i128::from(amount_minor) / i128::from(list_price_minor);
    i64::try_from(share).unwrap_or(price_minor).max(1)
}

/// One invoice, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CryptoInvoice {
    pub invoice_id: i64,
    pub order_id: i64,
    pub asset: String,
    pub amount_minor: i64,
    pub status: Status,
    pub pay_url: String,
    pub expires_at: DateTime<Utc>,
}

macro_rules! invoice_columns {
    () => {
        "invoice_id, order_id, asset, amount_minor, status, pay_url, expires_at"
    };
}

crate::from_row!(CryptoInvoice [invoice_columns!()] {
    invoice_id,
    order_id,
    asset,
    amount_minor,
    status,
    pay_url,
    expires_at,
});

/// An invoice Crypto Pay just made, to keep.
#[derive(Debug, Clone)]
pub struct NewInvoice<'a> {
    pub invoice_id: i64,
    pub order_id: i64,
    pub asset: &'a str,
    pub amount_minor: i64,
    pub pay_url: &'a str,
    pub expires_at: DateTime<Utc>,
}

const ORDER_PRICE_SQL: &str = "SELECT (p.crypto_prices ->> $2)::bigint AS price,
            o.amount_minor, o.list_price_minor
     FROM orders o JOIN plans p ON p.id = o.plan_id
     WHERE o.id = $1";

/// What order `order_id` costs in `asset` by its plan's crypto prices now ([`crypto_amount`]);
/// `None` when the plan has no price in it (or there is no such order).
pub async fn order_price(
    client: &impl GenericClient,
    order_id: i64,
    asset: &str,
) -> Result<Option<i64>, ApiError> {
    let Some(row) = db::row_opt(client, ORDER_PRICE_SQL, &[&order_id, &asset]).await? else {
        return Ok(None);
    };
    let price: Option<i64> = row.try_get("price")?;
    Ok(price.map(|price| {
        crypto_amount(
            price,
            row.try_get("amount_minor").unwrap_or(price),
            row.try_get("list_price_minor").unwrap_or(price),
        )
    }))
}

const ORDER_PRICES_SQL: &str = "SELECT p.crypto_prices, o.amount_minor, o.list_price_minor
     FROM orders o JOIN plans p ON p.id = o.plan_id
     WHERE o.id = $1";

/// Every crypto asset order `order_id` can be paid in by its plan's crypto prices now, with
/// what it costs in each ([`crypto_amount`]), by asset; empty when the plan has none.
pub async fn order_prices(
    client: &impl GenericClient,
    order_id: i64,
) -> Result<Vec<(String, i64)>, ApiError> {
    let Some(row) = db::row_opt(client, ORDER_PRICES_SQL, &[&order_id]).await? else {
        return Ok(Vec::new());
    };
    let prices: Option<CryptoPrices> = row.try_get("crypto_prices")?;
    let (amount, list): (i64, i64) = (
        row.try_get("amount_minor")?,
        row.try_get("list_price_minor")?,
    );
    Ok(prices
        .iter()
        .flat_map(CryptoPrices::iter)
        .map(|(asset, price)| (asset.to_string(), crypto_amount(price, amount, list)))
        .collect())
}

const STORED_SQL: &str = concat!(
    "SELECT ",
    invoice_columns!(),
    " FROM cryptopay_invoices WHERE order_id = $1 AND asset = $2"
);

/// Order `order_id`'s invoice in `asset`, if one was made.
pub async fn stored(
    client: &impl GenericClient,
    order_id: i64,
    asset: &str,
) -> Result<Option<CryptoInvoice>, ApiError> {
    db::opt(client, STORED_SQL, &[&order_id, &asset]).await
}

/// What a Crypto Pay payment of order `order_id` in `asset` must be: the amount its invoice in
/// that asset asked, else (no invoice of ours: one made elsewhere for the order) what the
/// order costs in it now ([`order_price`]); `None`: the order has no price in that asset.
pub async fn asked(
    client: &impl GenericClient,
    order_id: i64,
    asset: &str,
) -> Result<Option<i64>, ApiError> {
    match stored(client, order_id, asset).await? {
        Some(invoice) => Ok(Some(invoice.amount_minor)),
        None => order_price(client, order_id, asset).await,
    }
}

const KEEP_SQL: &str = concat!(
    "WITH kept AS (
         INSERT INTO cryptopay_invoices (invoice_id, order_id, asset, amount_minor, pay_url,
                                         expires_at, next_check_at)
         VALUES ($1, $2, $3, $4, $5, $6, statement_timestamp() + make_interval(secs => $7))
         ON CONFLICT DO NOTHING
         RETURNING ",
    invoice_columns!(),
    ")
     SELECT ",
    invoice_columns!(),
    " FROM kept
     UNION ALL
     SELECT ",
    invoice_columns!(),
    " FROM cryptopay_invoices WHERE order_id = $2 AND asset = $3
     LIMIT 1"
);

/// Keeps invoice `new` unless the order has one in that asset already, and returns the one
/// the order keeps (the first kept wins, so a repeated effect sends the same pay URL). It is
/// first asked about `first_check` from now.
pub async fn keep(
    client: &impl GenericClient,
    new: &NewInvoice<'_>,
    first_check: Duration,
) -> Result<CryptoInvoice, ApiError> {
    db::one(
        client,
        KEEP_SQL,
        &[
            &new.invoice_id,
            &new.order_id,
            &new.asset,
            &new.amount_minor,
            &new.pay_url,
            &new.expires_at,
            &first_check.as_secs_f64(),
        ],
    )
    .await
}

/// An active invoice due to be asked about, with its order's reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub invoice_id: i64,
    pub order_id: i64,
    pub reference: String,
    pub asset: String,
    pub amount_minor: i64,
    pub expires_at: DateTime<Utc>,
    /// How often it was claimed, this time included.
    pub checks: i32,
}

crate::from_row!(Due ["invoice_id, order_id, reference, asset, amount_minor, expires_at, checks"] {
    invoice_id,
    order_id,
    reference,
    asset,
    amount_minor,
    expires_at,
    checks,
});

const CLAIM_DUE_SQL: &str = "WITH due AS (
         SELECT invoice_id FROM cryptopay_invoices
         WHERE status = 'active' AND next_check_at <= statement_timestamp()
         ORDER BY next_check_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
     )
     UPDATE cryptopay_invoices i
     SET next_check_at = statement_timestamp() + make_interval(secs => $2),
         checks = i.checks + 1
     FROM due, orders o
     WHERE i.invoice_id = due.invoice_id AND o.id = i.order_id
     RETURNING i.invoice_id, i.order_id, o.reference, i.asset, i.amount_minor, i.expires_at,
               i.checks";

/// Claims up to `limit` active invoices due to be asked about: each one's `next_check_at` is
/// pushed `lease` ahead, so another process passes it over and a killed one's claim runs out.
pub async fn claim_due(
    client: &impl GenericClient,
    limit: i64,
    lease: Duration,
) -> Result<Vec<Due>, ApiError> {
    db::all(client, CLAIM_DUE_SQL, &[&limit, &lease.as_secs_f64()]).await
}

const AGAIN_SQL: &str = "UPDATE cryptopay_invoices
     SET next_check_at = LEAST(
             statement_timestamp() + make_interval(secs => $2),
             GREATEST(expires_at + interval '5 seconds',
                      statement_timestamp() + interval '30 seconds')),
         last_error = $3
     WHERE invoice_id = $1 AND status = 'active'";

/// Invoice `invoice_id` is still active (or the call failed: `error`): asked again after
/// `backoff`, or soon after it expires if that is sooner.
pub async fn again(
    client: &impl GenericClient,
    invoice_id: i64,
    backoff: Duration,
    error: Option<&str>,
) -> Result<(), ApiError> {
    db::execute(
        client,
        AGAIN_SQL,
        &[&invoice_id, &backoff.as_secs_f64(), &error],
    )
    .await?;
    Ok(())
}

const SETTLE_SQL: &str = "UPDATE cryptopay_invoices SET status = $2, last_error = NULL
     WHERE invoice_id = $1 AND status = 'active'";

/// Invoice `invoice_id` is `status` now (`paid` or `expired`); `false` when it was settled
/// already (or is not ours).
pub async fn settle(
    client: &impl GenericClient,
    invoice_id: i64,
    status: Status,
) -> Result<bool, ApiError> {
    Ok(db::execute(client, SETTLE_SQL, &[&invoice_id, &status]).await? > 0)
}

const OTHERS_ACTIVE_SQL: &str = "SELECT EXISTS (
         SELECT 1 FROM cryptopay_invoices
         WHERE order_id = $1 AND invoice_id <> $2 AND status = 'active'
           AND expires_at > statement_timestamp()) AS others";

/// Whether order `order_id` has an invoice other than `invoice_id` still open for payment
/// (the buyer chose another asset too): its holds then stay.
pub async fn others_active(
    client: &impl GenericClient,
    order_id: i64,
    invoice_id: i64,
) -> Result<bool, ApiError> {
    Ok(
        db::row_one(client, OTHERS_ACTIVE_SQL, &[&order_id, &invoice_id])
            .await?
            .try_get("others")?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_at_list_price_costs_the_owners_number() {
        assert_eq!(crypto_amount(4_990_000, 19900, 19900), 4_990_000);
        assert_eq!(crypto_amount(1_500_000_000, 500, 500), 1_500_000_000);
    }

    #[test]
    fn a_discounted_order_costs_the_same_share_rounded_down() {
        // 20 % off.
        assert_eq!(crypto_amount(4_990_000, 15920, 19900), 3_992_000);
        // A third off: 4.99 × 2/3 = 3.326666…, rounded down to the minor unit.
        assert_eq!(crypto_amount(4_990_000, 2, 3), 3_326_666);
        // Never below one minor unit.
        assert_eq!(crypto_amount(5, 1, 1_000_000), 1);
        // Large numbers do not overflow.
        assert_eq!(
            crypto_amount(10_000_000_000_000, 99_999_999_999, 100_000_000_000),
            9_999_999_999_900
        );
    }
}
