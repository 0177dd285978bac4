//! Grants without a payment: a trial plan's order (once per buyer and channel, ever: the
//! `trial_uses` rows) and a free order of a 100 % promo code, through the same locked path as a
//! payment (event causes `trial` and `promo`).
//!
//! The interface the other modules call is fixed here; the bodies are being built.

use deadpool_postgres::Transaction;

use crate::{error::ApiError, memberships::Membership};

/// Why an order cannot be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimRefusal {
    /// The order is not a trial or a free order.
    NotFree,
    /// The order is paid (claimed already) or cancelled.
    NotPending,
    /// The buyer had a trial of, or was a member of, one of the plan's channels.
    TrialUsed,
    /// A channel of the plan is full.
    ChannelFull,
    /// A channel of the plan (or the plan) is not active.
    Inactive,
    /// The buyer has lifetime access to every channel of the plan already.
    AlreadyLifetime,
}

/// Claims free order `order_id` (a trial's, or one a 100 % code made free): in the lock order,
/// grants every channel of its plan for the plan's period and marks it paid; the memberships
/// after the grant, or why not (nothing written). 404 for no such order.
pub async fn claim(
    _tx: &Transaction<'_>,
    _order_id: i64,
) -> Result<Result<Vec<Membership>, ClaimRefusal>, ApiError> {
    Err(ApiError::internal("trials are not built yet"))
}

// ---- whether a buyer may still use a trial (read only; for the bot's catalogue) ----

/// Whether subscriber `subscriber` can still use trial plan `plan`: they never had a trial of
/// any of its channels (`trial_uses`) and were never a member of any of them (a membership of
/// any status). A read without locks, for showing the trial button; [`claim`] decides under
/// the locks.
pub async fn eligible(
    client: &impl deadpool_postgres::GenericClient,
    subscriber: crate::ids::SubscriberId,
    plan: &crate::plans::Plan,
) -> Result<bool, ApiError> {
    let row = crate::db::row_one(
        client,
        "SELECT NOT EXISTS (SELECT 1 FROM trial_uses
                            WHERE subscriber_id = $1 AND channel_id = ANY($2))
            AND NOT EXISTS (SELECT 1 FROM memberships
                            WHERE subscriber_id = $1 AND channel_id = ANY($2)) AS eligible",
        &[&subscriber, &plan.channel_ids],
    )
    .await?;
    Ok(row.try_get("eligible")?)
}
