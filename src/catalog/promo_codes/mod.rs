//! Promo codes (API.md "Offers"): percent or amount off a plan's price, with limits that hold
//! exactly under racing buyers. This module owns the `promo_codes` rows, their rules of change,
//! and every decision about a use.
//!
//! A code's **uses** are its paid orders plus the pending orders that hold one
//! (`orders.promo_held_until` in the future, `holds_use_sql!`): a new order takes a use and
//! holds it for `HOLD_SECS` like a seat hold ([`discount_for_new_order`]); a checkout,
//! pre-checkout or payment of an order whose hold lapsed takes it again only while the code has
//! room ([`use_still_held`], then [`hold_again`] for an approved checkout); paying the order makes the use permanent (and clears the hold),
//! cancelling it gives the use back. Every one of these decisions is taken under
//! `SELECT … FROM promo_codes WHERE id = $1 FOR UPDATE`, so two buyers racing for the last use
//! decide one after the other and the second sees the first one's order: a code never has more
//! paid orders than `max_redemptions`, nor a buyer more than `per_buyer_limit`.
//!
//! The code row comes after the order row and before the channel rows in the lock order
//! (`docs/locking.md`): the order lock takes it in the same statement
//! (`orders::seats::lock_order_of_locked_pair`), order creation takes only it.
//!
//! Once an order uses a code, its text and its discount (`code`, `percent_off`,
//! `amount_off_minor`, `currency`) are fixed (409): orders show the code's text and were priced
//! by its discount. Its limits, plans, expiry and `active` may change at any time; they bind new
//! uses only (an order already made keeps its price and its held use).
//!
//! By concern: the rules of a use, pure (`rules`); the uses themselves, taken, held again
//! and previewed (`uses`); staff's creating, changing and reading of codes (`changes`).

use chrono::{DateTime, Utc};
use serde::Serialize;

/// SQL: order `$o` (an `orders` row) counts as a use of its code: paid, or pending and holding
/// its use at database time. `holds_use_sql!("o")`.
macro_rules! holds_use_sql {
    ($o:literal) => {
        concat!(
            "(",
            $o,
            ".status = 'paid' OR (",
            $o,
            ".status = 'pending' AND ",
            $o,
            ".promo_held_until > statement_timestamp()))"
        )
    };
}

/// The select list of [`PromoCode`] over `promo_codes pc`.
macro_rules! promo_code_columns {
    () => {
        "pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, \
         pc.max_redemptions, pc.per_buyer_limit, pc.expires_at, pc.first_purchase_only, \
         pc.active, pc.created_at, pc.updated_at, \
         (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'paid') \
           AS redemptions, \
         (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'pending' \
            AND o.promo_held_until > statement_timestamp()) AS held"
    };
}

/// The [`Terms`]' select list (a macro, for `concat!`).
macro_rules! terms_columns {
    () => {
        "id, percent_off, amount_off_minor, currency, plan_ids, max_redemptions, \
         per_buyer_limit, first_purchase_only, active"
    };
}

mod changes;
mod rules;
mod uses;

pub use changes::{BuyerOffer, Fields, Filter, change, create, create_for_buyer, get, list};
pub use rules::{Refusal, Terms};
pub use uses::{
    OrderUse, Preview, discount_for_new_order, hold_again, preview, preview_by_id, use_still_held,
};

/// The shortest and longest code, in characters.
pub const CODE_LEN: std::ops::RangeInclusive<usize> = 3..=32;
/// What a code is made of, as staff and buyers are told.
pub const CODE_RULE: &str = "must be 3 to 32 characters of A-Z, 0-9, _ and -";
/// At most this many plans in `plan_ids`.
pub const PLAN_IDS_MAX: usize = 100;

/// A code as it is stored: upper case (a buyer's text is upper-cased before it is matched), or
/// `None` when it is not 3..32 of `A-Z 0-9 _ -` once upper-cased.
pub fn normalize(code: &str) -> Option<String> {
    let upper = code.to_ascii_uppercase();
    let fits = CODE_LEN.contains(&upper.len())
        && upper
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    fits.then_some(upper)
}

/// A promo code as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "code": "SPRING25", "percent_off": 25,
    "amount_off_minor": null, "currency": null, "plan_ids": null, "max_redemptions": 100,
    "per_buyer_limit": 1, "expires_at": "2025-06-01T00:00:00Z", "first_purchase_only": false,
    "active": true, "redemptions": 3, "held": 1, "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:00:00Z"}))]
pub struct PromoCode {
    pub id: i64,
    /// 3..32 of `A-Z 0-9 _ -`, stored upper case and matched case-insensitively.
    pub code: String,
    /// 1..100; null for an amount-off code.
    pub percent_off: Option<i32>,
    /// Minor units off (> 0, never below one minor unit left); null for a percent-off code.
    pub amount_off_minor: Option<i64>,
    /// The currency of `amount_off_minor`; null for a percent-off code.
    pub currency: Option<String>,
    /// The paid plans it applies to; null: every paid plan (of its currency, for an amount).
    pub plan_ids: Option<Vec<i64>>,
    /// Uses allowed in all (paid orders plus pending orders holding one); null: unlimited.
    pub max_redemptions: Option<i32>,
    /// Uses allowed per buyer.
    pub per_buyer_limit: i32,
    /// No new use from this time on; null: never expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// Only for buyers with no paid order of any channel of the plan.
    pub first_purchase_only: bool,
    pub active: bool,
    /// Read-only: paid orders using it.
    pub redemptions: i64,
    /// Read-only: pending orders holding a use of it now (uses = `redemptions` + `held`).
    pub held: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

crate::from_row!(PromoCode [promo_code_columns!()] {
    id,
    code,
    percent_off,
    amount_off_minor,
    currency,
    plan_ids,
    max_redemptions,
    per_buyer_limit,
    expires_at,
    first_purchase_only,
    active,
    redemptions,
    held,
    created_at,
    updated_at,
});

/// What a code takes off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Off {
    /// 1..100 percent.
    Percent(i32),
    /// Minor units of the plan's currency.
    Amount(i64),
}

/// What `off` takes off a list price of `list_minor`: a percent rounds down
/// (`floor(list × pct / 100)`), an amount is at most the price; either leaves at least one minor
/// unit to pay, except exactly 100 %, which makes the order free. Pure.
pub fn discount_minor(list_minor: i64, off: Off) -> i64 {
    let off = match off {
        Off::Percent(100) => return list_minor.max(0),
        Off::Percent(p) => (i128::from(list_minor) * i128::from(p.clamp(0, 100)) / 100) as i64,
        Off::Amount(a) => a.min(list_minor),
    };
    off.min(list_minor - 1).max(0)
}

/// What a code takes off a new order of a plan, decided under the code's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Discount {
    pub promo_code_id: i64,
    pub discount_minor: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percent_rounds_down_and_leaves_at_least_one_unit() {
        assert_eq!(discount_minor(19900, Off::Percent(25)), 4975);
        assert_eq!(discount_minor(999, Off::Percent(10)), 99);
        assert_eq!(discount_minor(1, Off::Percent(99)), 0);
        assert_eq!(discount_minor(100, Off::Percent(99)), 99);
        assert_eq!(discount_minor(3, Off::Percent(50)), 1);
        assert_eq!(discount_minor(i64::MAX, Off::Percent(50)), i64::MAX / 2);
    }

    #[test]
    fn exactly_one_hundred_percent_is_free() {
        assert_eq!(discount_minor(19900, Off::Percent(100)), 19900);
        assert_eq!(discount_minor(1, Off::Percent(100)), 1);
    }

    #[test]
    fn an_amount_is_at_most_the_price_less_one_unit() {
        assert_eq!(discount_minor(19900, Off::Amount(5000)), 5000);
        assert_eq!(discount_minor(19900, Off::Amount(19899)), 19899);
        assert_eq!(discount_minor(19900, Off::Amount(19900)), 19899);
        assert_eq!(discount_minor(19900, Off::Amount(i64::MAX)), 19899);
        assert_eq!(discount_minor(1, Off::Amount(5)), 0);
    }
    #[test]
    fn codes_are_upper_cased_and_checked() {
        assert_eq!(normalize("spring-25_x").as_deref(), Some("SPRING-25_X"));
        assert_eq!(normalize("ABC").as_deref(), Some("ABC"));
        assert_eq!(
            normalize(&"A".repeat(32)).as_deref(),
            Some(&*"A".repeat(32))
        );
        for bad in [
            "",
            "A",
            "AB",
            &"A".repeat(33),
            "A B C",
            "ÄBC",
            "ab.c",
            "abc\0",
        ] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
    }
}
