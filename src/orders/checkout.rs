//! The checkout decision: a seat held in every seat-limited channel of an order's plan, within
//! the buyer's hold rules, or a refusal.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;

use super::{Order, Status, order_columns, seats::*};
use crate::{
    catalog::promo_codes,
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    config::HoldRules,
    db,
};

pub(super) const HOLD_VALID_SQL: &str = "SELECT $1::timestamptz > statement_timestamp() AS valid";

pub(super) async fn hold_valid(
    tx: &Transaction<'_>,
    hold_until: DateTime<Utc>,
) -> Result<bool, ApiError> {
    Ok(db::row_one(tx, HOLD_VALID_SQL, &[&hold_until])
        .await?
        .try_get("valid")?)
}

pub(super) const HOLD_SQL: &str = concat!(
    "UPDATE orders
     SET hold_until = statement_timestamp() + make_interval(secs => $2::float8),
         held_at = statement_timestamp()
     WHERE id = $1 RETURNING ",
    order_columns!()
);

/// When the subscriber `$1` may next hold a seat of channel `$2`, by each rule (NULL: the rule
/// allows it now), counting the orders of every plan that includes the channel (a bundle's
/// hold holds a seat there too). Cooldown: a pending order (superseded ones included) whose
/// hold ran out less than `$3` seconds ago. Daily cap: with `$4` or more holds granted in the
/// last 24 hours, the time the `$4`-th newest leaves that window.
pub(super) const HOLD_LIMIT_SQL: &str = concat!(
    "SELECT
       (SELECT max(hold_until) + make_interval(secs => $3::float8) FROM orders o
         WHERE subscriber_id = $1 AND ",
    order_covers_sql!("o", "$2"),
    " AND status = 'pending'
           AND hold_until <= statement_timestamp()
           AND hold_until > statement_timestamp() - make_interval(secs => $3::float8))
         AS cooldown_until,
       (SELECT held_at + interval '1 day' FROM orders o
         WHERE subscriber_id = $1 AND ",
    order_covers_sql!("o", "$2"),
    " AND held_at > statement_timestamp() - interval '1 day'
         ORDER BY held_at DESC OFFSET $4::bigint - 1 LIMIT 1)
         AS cap_until"
);

/// Whether the hold rules let subscriber `subscriber_id` hold a seat of `channel_id` now:
/// `Some((rule, until))` when not, with the time they may try again (the later of the two
/// rules when both apply). The caller holds the pair lock, which every hold of the pair is
/// granted under, so concurrent presses and pre-checkouts of one buyer decide one after the
/// other and the count cannot be raced past.
pub async fn hold_limit(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
    rules: HoldRules,
) -> Result<Option<(HoldLimit, DateTime<Utc>)>, ApiError> {
    let row = db::row_one(
        tx,
        HOLD_LIMIT_SQL,
        &[
            &subscriber_id,
            &channel_id,
            &(rules.cooldown_secs as f64),
            &rules.per_day.max(1),
        ],
    )
    .await?;
    let cooldown: Option<DateTime<Utc>> = row.try_get("cooldown_until")?;
    let cap: Option<DateTime<Utc>> = row.try_get("cap_until")?;
    Ok(match (cooldown, cap) {
        (Some(c), Some(d)) if c > d => Some((HoldLimit::Cooldown, c)),
        (_, Some(d)) => Some((HoldLimit::DailyCap, d)),
        (Some(c), None) => Some((HoldLimit::Cooldown, c)),
        (None, None) => None,
    })
}

/// The checkout decision (API.md "Seats"), taking the locks itself in the lock order:
/// no seat-limited channel, or a buyer who is already a member of every one → approve, no
/// hold; an order never held → hold a free seat (in every seat-limited channel of its plan it
/// needs one in, by one hold) for `HOLD_SECS` from `statement_timestamp()` and approve, or
/// refuse with [`CheckoutRefusal::ChannelFull`] (no free seat in one of them: the whole bundle
/// is refused) or [`CheckoutRefusal::HoldLimited`] (the buyer's cooldown or daily cap of holds
/// in one of them, [`hold_limit`]); a valid hold → approve again without extending it; an
/// expired hold → [`CheckoutRefusal::HoldExpired`]. Checks, in order: the order is pending,
/// every channel is active, the seats.
///
/// `Err(ApiError::NotFound("order"))` when there is no such order. The outer `Result` carries
/// database failures (roll back); the inner one the refusal (nothing was written, commit or
/// roll back as the caller likes).
pub async fn checkout_locked(
    tx: &Transaction<'_>,
    order_id: i64,
    rules: HoldRules,
) -> Result<Result<Order, CheckoutRefusal>, ApiError> {
    let locked = lock_order(tx, order_id)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    checkout_decide(tx, locked, rules).await
}

/// [`checkout_locked`] for an order already locked with [`lock_order`] or
/// [`lock_order_by_reference`] (the Telegram door finds orders by reference).
///
/// An order with a promo code is refused with [`CheckoutRefusal::PromoExhausted`] (after the
/// pending and active checks, before the seat) when its use lapsed and the code filled up
/// ([`promo_codes::use_still_held`]); an approved order whose use lapsed holds it again for
/// `HOLD_SECS` ([`promo_codes::hold_again`]), so a refusal still writes nothing.
pub async fn checkout_decide(
    tx: &Transaction<'_>,
    locked: LockedOrder,
    rules: HoldRules,
) -> Result<Result<Order, CheckoutRefusal>, ApiError> {
    let promo_use = locked.order.promo_use();
    if promo_use.pending
        && locked.channels_active()
        && !promo_codes::use_still_held(tx, promo_use).await?
    {
        return Ok(Err(CheckoutRefusal::PromoExhausted));
    }
    let decision = seat_decide(tx, locked, rules).await?;
    if decision.is_ok() {
        promo_codes::hold_again(tx, promo_use, rules.hold_secs).await?;
    }
    Ok(decision)
}

/// The seat part of [`checkout_decide`]: pending, active, the seat and its hold.
pub(super) async fn seat_decide(
    tx: &Transaction<'_>,
    locked: LockedOrder,
    rules: HoldRules,
) -> Result<Result<Order, CheckoutRefusal>, ApiError> {
    if locked.order.status != Status::Pending {
        return Ok(Err(CheckoutRefusal::NotPending));
    }
    if !locked.channels_active() {
        return Ok(Err(CheckoutRefusal::ChannelInactive));
    }
    let (verdict, needed) = seat_needs(tx, &locked).await?;
    match verdict {
        SeatCheck::NotNeeded | SeatCheck::HoldValid => Ok(Ok(locked.order)),
        SeatCheck::HoldExpired => Ok(Err(CheckoutRefusal::HoldExpired)),
        SeatCheck::Full => Ok(Err(CheckoutRefusal::ChannelFull)),
        SeatCheck::Free => {
            let o = &locked.order;
            for channel in needed {
                if let Some((limit, until)) = hold_limit(tx, o.subscriber(), channel, rules).await?
                {
                    return Ok(Err(CheckoutRefusal::HoldLimited { limit, until }));
                }
            }
            let order = db::one(tx, HOLD_SQL, &[&o.id, &(rules.hold_secs as f64)]).await?;
            Ok(Ok(order))
        }
    }
}
