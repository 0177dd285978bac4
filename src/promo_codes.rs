//! Promo codes (API.md "Offers"): percent or amount off a plan's price, with limits that hold
//! exactly under racing buyers. A code's uses are its paid orders plus the pending orders that
//! hold one (`orders.promo_held_until`); every decision about a use is taken under a lock on the
//! code's row.
//!
//! The interface the other modules call is fixed here; the bodies are being built.

use deadpool_postgres::Transaction;

use crate::{error::ApiError, ids::SubscriberId, orders::Order, plans::Plan};

/// What a code takes off a new order of a plan, decided under the code's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Discount {
    pub promo_code_id: i64,
    pub discount_minor: i64,
}

/// The discount `code` (any case) gives subscriber `subscriber` on a new order of `plan`, taking
/// one use of it for the order (the caller inserts the order in the same transaction, with
/// `promo_held_until` = database now + `HOLD_SECS`). A 422 naming `promo_code` when the code is
/// unknown, inactive, expired, exhausted, not for this plan, or used up by this buyer.
pub async fn discount_for_new_order(
    _tx: &Transaction<'_>,
    _code: &str,
    _subscriber: SubscriberId,
    _plan: &Plan,
) -> Result<Discount, ApiError> {
    Err(ApiError::field("promo_code", "no such promo code"))
}

/// Whether pending order `order` (locked in the lock order) still holds its code's use, taking
/// it again under the code's lock when its hold lapsed and the code still has room; `true` for
/// an order without a code. Checkout, pre-checkout and the payment core call it.
pub async fn use_still_held(_tx: &Transaction<'_>, _order: &Order) -> Result<bool, ApiError> {
    Ok(true)
}
