//! Grants without a payment: a trial plan's order (once per buyer and channel, ever: the
//! `trial_uses` rows) and a free order of a 100 % promo code, through the same locked path as a
//! payment (event causes `trial` and `promo`).
//!
//! A claim takes the payment's lock order ([`seats::lock_order`]: the pairs of every channel of
//! the plan in ascending id → the order → the channels → the memberships), so it is decided
//! one at a time per buyer and channel with every payment, checkout and other claim: of ten
//! presses of one order, or ten orders of one trial plan by one buyer, one claims and the
//! others find the order paid or the trial used; two buyers racing for the last seat of a
//! channel decide one after the other under the channel's lock, and the second finds it full.
//! A refusal writes nothing. `trial_uses`' primary key backs the rule for a caller that forgot
//! the locks.
//!
//! "Ever had a trial or been a member" of a channel: a `trial_uses` row, any `memberships` row
//! (live or ended), or any paid order whose plan includes the channel.

use deadpool_postgres::Transaction;

use super::{Status, seats};
use crate::{
    access::memberships::{self, Cause, Membership},
    catalog::plans,
    common::error::ApiError,
    db,
};

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

impl ClaimRefusal {
    /// What staff read for the refusal (the 409 `detail`).
    pub fn detail(self) -> &'static str {
        match self {
            ClaimRefusal::NotFree => {
                "the order is not free: only a trial's or a 100 % code's order can be claimed"
            }
            ClaimRefusal::NotPending => "the order is not pending: it was claimed or cancelled",
            ClaimRefusal::TrialUsed => {
                "the subscriber already had a trial of, or was a member of, a channel of this plan"
            }
            ClaimRefusal::ChannelFull => "a channel of the plan is full: no seat is free",
            ClaimRefusal::Inactive => "the plan or one of its channels is not active",
            ClaimRefusal::AlreadyLifetime => {
                "the subscriber already has lifetime access to every channel of the plan"
            }
        }
    }
}

const FORMER_MEMBER_SQL: &str = "SELECT
       EXISTS (SELECT 1 FROM trial_uses t WHERE t.subscriber_id = $1 AND t.channel_id = ANY ($2))
    OR EXISTS (SELECT 1 FROM memberships m
               WHERE m.subscriber_id = $1 AND m.channel_id = ANY ($2))
    OR EXISTS (SELECT 1 FROM orders o JOIN plan_channels pc ON pc.plan_id = o.plan_id
               WHERE o.subscriber_id = $1 AND o.status = 'paid' AND pc.channel_id = ANY ($2))
       AS former";
const MARK_CLAIMED_SQL: &str = "UPDATE orders
     SET status = 'paid', paid_at = statement_timestamp(), promo_held_until = NULL
     WHERE id = $1";
const TRIAL_USES_SQL: &str = "INSERT INTO trial_uses (subscriber_id, channel_id, order_id)
     SELECT $1, c, $3 FROM unnest($2::integer[]) AS c";

/// Claims free order `order_id` (a trial's, or one a 100 % code made free): in the lock order,
/// grants every channel of its plan for the plan's period and marks it paid; the memberships
/// after the grant (one per channel of the plan, in ascending channel id), or why not (nothing
/// written). 404 for no such order.
///
/// Checks, in order: the order is free (amount 0), pending, its plan and every channel of it
/// active, a trial's buyer was never a member or trial user of any of its channels, the buyer
/// does not hold every channel for life already, and every seat-limited channel has a seat for
/// the buyer (a trial takes a seat; all or nothing). A trial writes a `trial_uses` row per
/// channel; each membership gets its own event (cause `trial`, or `promo` for a free order of
/// a paid plan) and grant or receipt effect.
pub async fn claim(
    tx: &Transaction<'_>,
    order_id: i64,
) -> Result<Result<Vec<Membership>, ClaimRefusal>, ApiError> {
    let locked = seats::lock_order(tx, order_id)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    let order = &locked.order;
    if order.amount_minor != 0 {
        return Ok(Err(ClaimRefusal::NotFree));
    }
    if order.status != Status::Pending {
        return Ok(Err(ClaimRefusal::NotPending));
    }
    if !locked.plan.active || !locked.channels_active() {
        return Ok(Err(ClaimRefusal::Inactive));
    }
    let trial = locked.plan.kind == plans::Kind::Trial;
    let channel_ids: Vec<i32> = locked.channels.iter().map(|c| c.id.0).collect();
    if trial
        && db::row_one(tx, FORMER_MEMBER_SQL, &[&order.subscriber(), &channel_ids])
            .await?
            .try_get::<_, bool>("former")?
    {
        return Ok(Err(ClaimRefusal::TrialUsed));
    }
    if seats::held_for_life(&locked) {
        return Ok(Err(ClaimRefusal::AlreadyLifetime));
    }
    if !seats::claim_finds_seats(tx, &locked).await? {
        return Ok(Err(ClaimRefusal::ChannelFull));
    }
    db::execute(tx, MARK_CLAIMED_SQL, &[&order.id]).await?;
    if trial {
        db::execute(
            tx,
            TRIAL_USES_SQL,
            &[&order.subscriber(), &channel_ids, &order.id],
        )
        .await?;
    }
    let cause = if trial { Cause::Trial } else { Cause::Promo };
    let mut granted = Vec::with_capacity(locked.channels.len());
    for channel in &locked.channels {
        let (m, _) = memberships::extend_at_least(
            tx,
            order.subscriber(),
            channel.id,
            locked.plan.term(),
            cause,
            None,
        )
        .await?;
        granted.push(m);
    }
    tracing::info!(
        order_id,
        subscriber_id = order.subscriber_id,
        plan_id = order.plan_id,
        channels = ?locked.channels.iter().map(|c| c.id.0).collect::<Vec<_>>(),
        trial,
        "free order claimed"
    );
    Ok(Ok(granted))
}

// ---- whether a buyer may still use a trial (read only; for the bot's catalogue) ----

/// Whether subscriber `subscriber` can still use trial plan `plan`: they never had a trial of
/// any of its channels (`trial_uses`) and were never a member of any of them (a membership of
/// any status). A read without locks, for showing the trial button; [`claim`] decides under
/// the locks.
pub async fn eligible(
    client: &impl deadpool_postgres::GenericClient,
    subscriber: crate::common::ids::SubscriberId,
    plan: &crate::catalog::plans::Plan,
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
