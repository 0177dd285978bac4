//! Seats of seat-limited channels, the holds that reserve them, and the locking of an order in
//! the one lock order. Shared by `POST /api/orders/{id}/checkout`, Telegram's
//! `pre_checkout_query` and the payment core, so all three decide alike.
//!
//! The lock order (API.md "Payment ingestion" 1., `docs/locking.md`): the pair's advisory lock
//! → the order row `FOR UPDATE` → its promo code's row `FOR UPDATE` (if it uses one) → the
//! channel row `FOR KEY SHARE`, strengthened to `FOR NO KEY UPDATE` for a seat-limited channel
//! → the membership row. [`lock_order`] and [`lock_order_by_reference`] take the first four,
//! so no caller can get them out of order.
//! The channel lock serializes every seat decision of one channel: two buyers racing for the
//! last seat decide one after the other, and the second sees the first one's hold. A staff
//! PATCH of `seat_limit` locks the channel `FOR UPDATE` first ([`crate::channels::lock_for_change`]),
//! so no decision is made from a limit older than the one it commits.
//!
//! Seats taken = live memberships ([`crate::memberships::live_sql!`]: active or grace and
//! inside its term plus grace by database time) + distinct subscribers who are not live members
//! but hold a live Stars subscription of the channel (`subscription_holds_seat_sql!`: active,
//! and database time before its next renewal plus [`SUBSCRIPTION_SLACK_SECS`]) + distinct
//! subscribers who are neither, holding a pending order whose `hold_until` is still in the
//! future. A seated buyer (a live member or live subscriber, [`is_live_member`]) needs no seat
//! to pay again, so a renewal Telegram charges on its date never finds its seat taken. A hold is
//! set once, never extended, and an expired hold is never renewed (the buyer needs a new order),
//! so a late payment of an old invoice cannot take a seat a newer buyer holds.
//!
//! A new hold also obeys the buyer's hold rules ([`HoldRules`], [`hold_limit`]): after an unpaid
//! hold of a channel runs out the buyer waits `HOLD_COOLDOWN_SECS` before holding a seat of it
//! again, and takes at most `HOLDS_PER_DAY` holds of it in 24 hours, so nobody keeps a seat from
//! paying buyers by asking for a new hold each time the last one runs out. Every hold of a pair
//! is granted under the pair's lock, so the rules hold under concurrent presses.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::{Order, Status, order_columns};
use crate::{
    db::{self, FromRow},
    error::ApiError,
    ids::{ChannelId, SubscriberId},
    promo_codes,
};

/// What the checks need to know of an order's channel, read under the channel lock.
#[derive(Debug, Clone)]
pub struct ChannelTerms {
    pub active: bool,
    pub seat_limit: Option<i32>,
    pub billing_period_days: i32,
}

/// An order locked in the lock order (pair, order, channel), with its channel's
/// terms and its subscriber's Telegram user id (the payer every Telegram check compares with).
#[derive(Debug, Clone)]
pub struct LockedOrder {
    pub order: Order,
    pub channel: ChannelTerms,
    pub subscriber_telegram_id: i64,
}

/// The seat rule's verdict for one order (API.md "Seats"), before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeatCheck {
    /// No seat needed: the channel has no limit, or the buyer is already a live member (a
    /// renewal).
    NotNeeded,
    /// The order's hold is still valid.
    HoldValid,
    /// The order was never held and a seat is free now.
    Free,
    /// The order's hold has expired (whether or not seats are free again).
    HoldExpired,
    /// The order was never held and no seat is free.
    Full,
}

/// The rules of a new seat hold, from the configuration (`HOLD_SECS`, `HOLD_COOLDOWN_SECS`,
/// `HOLDS_PER_DAY`): how long a hold lasts, how long a buyer whose hold ran out unpaid waits
/// before holding a seat of that channel again, and how many holds of one channel a buyer may
/// take in 24 hours. A hold already granted is never affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRules {
    pub hold_secs: i64,
    pub cooldown_secs: i64,
    pub per_day: i64,
}

/// Which hold rule stops a buyer from holding a seat now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldLimit {
    /// An unpaid hold of the channel ran out less than the cooldown ago.
    Cooldown,
    /// The buyer took `HOLDS_PER_DAY` holds of the channel in the last 24 hours.
    DailyCap,
}

/// Why a checkout (or a pre-checkout) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckoutRefusal {
    /// The order is paid or cancelled.
    NotPending,
    /// The order's hold expired: the buyer needs a new order.
    HoldExpired,
    /// The order was never held and no seat is free.
    ChannelFull,
    /// The channel is not active.
    ChannelInactive,
    /// The order needs a new hold and a hold rule ([`HoldRules`]) refuses one until `until`.
    HoldLimited {
        limit: HoldLimit,
        until: DateTime<Utc>,
    },
    /// The order's promo code use lapsed and the code (or the buyer's share of it) filled up
    /// meanwhile ([`promo_codes::use_still_held`]): its price is no longer available.
    PromoExhausted,
}

/// Locks the order with this id in the lock order; `None` when there is no such order (or it
/// was deleted while we waited for the pair lock).
pub async fn lock_order(
    tx: &Transaction<'_>,
    order_id: i64,
) -> Result<Option<LockedOrder>, ApiError> {
    lock_where(tx, PAIR_BY_ID_SQL, &order_id).await
}

/// Locks the order with this reference in the lock order; `None` when there is none. The
/// payment core and the Telegram door resolve payments by reference.
pub async fn lock_order_by_reference(
    tx: &Transaction<'_>,
    reference: &str,
) -> Result<Option<LockedOrder>, ApiError> {
    lock_where(tx, PAIR_BY_REFERENCE_SQL, &reference).await
}

// The pair is read and its advisory lock taken in one statement (one round trip): the lock
// function runs only for the row the statement returns (the key is unique), never for a row
// a filter later drops.
const PAIR_BY_ID_SQL: &str = "SELECT id, subscriber_id, channel_id,
            pg_advisory_xact_lock(subscriber_id, channel_id) IS NULL AS locked
     FROM orders WHERE id = $1";
const PAIR_BY_REFERENCE_SQL: &str = "SELECT id, subscriber_id, channel_id,
            pg_advisory_xact_lock(subscriber_id, channel_id) IS NULL AS locked
     FROM orders WHERE reference = $1";
// The order `FOR UPDATE` (in its subquery, which locks it first), then its promo code's row
// `FOR UPDATE` (in the lateral subquery, locked as soon as the order is: the code row comes
// between the order and the channel in the lock order, `crate::promo_codes`), then its
// channel's terms `FOR KEY SHARE` and its subscriber's Telegram id, in one statement. The
// order's foreign keys keep the channel and the subscriber alive while we hold the order row,
// so the joins find them whenever the order is found.
const LOCK_ORDER_SQL: &str = concat!(
    "SELECT o.*, c.active, c.seat_limit, c.billing_period_days, s.telegram_user_id
     FROM (SELECT ",
    order_columns!(),
    " FROM orders WHERE id = $1 FOR UPDATE) AS o
     LEFT JOIN LATERAL (SELECT pcl.id FROM promo_codes pcl WHERE pcl.id = o.promo_code_id
                        FOR UPDATE) AS promo_lock ON true
     JOIN channels c ON c.id = o.channel_id
     JOIN subscribers s ON s.id = o.subscriber_id
     FOR KEY SHARE OF c"
);

/// Takes the first three locks of the lock order for the order `pair_sql` finds by `key`.
async fn lock_where(
    tx: &Transaction<'_>,
    pair_sql: &'static str,
    key: &(dyn ToSql + Sync),
) -> Result<Option<LockedOrder>, ApiError> {
    // The pair must be known before its lock can be taken, so it is read by the statement that
    // takes the lock, from a snapshot taken before the lock was granted. An order's pair never
    // changes, so the read cannot go stale; only a deletion can intervene, which the locked
    // re-read below notices.
    let Some(pair) = db::row_opt(tx, pair_sql, &[key]).await? else {
        return Ok(None);
    };
    lock_order_of_locked_pair(tx, pair.try_get("id")?).await
}

/// The rest of the lock order for order `order_id`, whose pair's advisory lock the caller took
/// in the statement that read the pair (as [`lock_order`] does; the payment core reads the pair
/// together with its check for a stored payment): the order `FOR UPDATE`, its channel's terms
/// and its subscriber's Telegram id. `None` when the order was deleted meanwhile.
pub async fn lock_order_of_locked_pair(
    tx: &Transaction<'_>,
    order_id: i64,
) -> Result<Option<LockedOrder>, ApiError> {
    let Some(row) = db::row_opt(tx, LOCK_ORDER_SQL, &[&order_id]).await? else {
        return Ok(None);
    };
    let order = Order::from_row(&row)?;
    let shared = ChannelTerms::from_row(&row)?;
    // A seat-limited channel is locked further and re-read ([`lock_channel_terms`]).
    let channel = match shared.seat_limit {
        None => shared,
        Some(_) => db::opt(tx, TERMS_EXCLUSIVE_SQL, &[&order.channel_id])
            .await?
            .ok_or_else(|| ApiError::internal("an order's channel is missing"))?,
    };
    Ok(Some(LockedOrder {
        order,
        channel,
        subscriber_telegram_id: row.try_get("telegram_user_id")?,
    }))
}

/// Reads the channel's terms under a lock, third in the lock order. Every channel is read
/// `FOR KEY SHARE`: it blocks no other payment, checkout or foreign-key check (they take the
/// same mode), but it conflicts with the `FOR UPDATE` a staff PATCH of `seat_limit` takes first
/// ([`crate::channels::lock_for_change`]), so such a PATCH waits for every transaction that decided
/// from the old terms, and every later one waits for the PATCH and reads the new limit. A
/// seat-limited channel is then locked `FOR NO KEY UPDATE` and re-read (a newer limit may have
/// been committed meanwhile): that serializes its seat decisions. Unlimited channels are not
/// locked further: nothing counts their seats, and a stronger lock would serialize every
/// payment of a popular channel. `None`: no such channel.
/// Every transaction that takes the channel lock (payments, checkout, pre-checkout, cancel,
/// manual grant, membership PATCH/DELETE) takes it here.
pub async fn lock_channel_terms(
    tx: &Transaction<'_>,
    channel_id: i32,
) -> Result<Option<ChannelTerms>, ApiError> {
    let Some(shared) = db::opt::<ChannelTerms>(tx, TERMS_SHARED_SQL, &[&channel_id]).await? else {
        return Ok(None);
    };
    if shared.seat_limit.is_none() {
        return Ok(Some(shared));
    }
    // A concurrent delete cannot get past the order or membership that brought us here, but a
    // manual grant has neither: a channel deleted meanwhile is simply not found.
    db::opt(tx, TERMS_EXCLUSIVE_SQL, &[&channel_id]).await
}

const TERMS_SHARED_SQL: &str =
    "SELECT active, seat_limit, billing_period_days FROM channels WHERE id = $1 FOR KEY SHARE";
const TERMS_EXCLUSIVE_SQL: &str = "SELECT active, seat_limit, billing_period_days FROM channels
     WHERE id = $1 FOR NO KEY UPDATE";

impl FromRow for ChannelTerms {
    const COLUMNS: &'static str = "active, seat_limit, billing_period_days";

    fn from_row(r: &tokio_postgres::Row) -> Result<ChannelTerms, tokio_postgres::Error> {
        Ok(ChannelTerms {
            active: r.try_get("active")?,
            seat_limit: r.try_get("seat_limit")?,
            billing_period_days: r.try_get("billing_period_days")?,
        })
    }
}

/// How long past its next renewal (`expires_at`) a live Stars subscription holds its seat, and
/// its membership lasts at least: one day, for Telegram's renewal charge to arrive.
pub const SUBSCRIPTION_SLACK_SECS: i64 = 86_400;

/// SQL: Stars subscription `$ss` (a `star_subscriptions` row) holds its seat — it is active and
/// database time is before its next renewal plus [`SUBSCRIPTION_SLACK_SECS`].
/// `subscription_holds_seat_sql!("ss")`.
macro_rules! subscription_holds_seat_sql {
    ($ss:literal) => {
        concat!(
            $ss,
            ".status = 'active' AND statement_timestamp() < ",
            $ss,
            ".expires_at + make_interval(secs => 86400)"
        )
    };
}

/// The seat count: live memberships of channel `$1`, plus the distinct subscribers who are not
/// live members but hold a live Stars subscription of it, plus the distinct subscribers who are
/// neither and hold a valid hold on a pending order of it. Membership is tested with the one
/// live predicate ([`crate::memberships::live_sql!`]).
const SEATS_TAKEN_SQL: &str = concat!(
    "SELECT
       (SELECT count(*) FROM memberships m JOIN channels c ON c.id = m.channel_id
         WHERE m.channel_id = $1 AND ",
    crate::memberships::live_sql!("m", "c"),
    ")
     + (SELECT count(DISTINCT ss.subscriber_id) FROM star_subscriptions ss
         WHERE ss.channel_id = $1 AND ",
    subscription_holds_seat_sql!("ss"),
    "
           AND NOT EXISTS (
               SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                WHERE m.subscriber_id = ss.subscriber_id AND m.channel_id = ss.channel_id
                  AND ",
    crate::memberships::live_sql!("m", "c"),
    "))
     + (SELECT count(DISTINCT o.subscriber_id) FROM orders o
         WHERE o.channel_id = $1 AND o.status = 'pending'
           AND o.hold_until > statement_timestamp()
           AND NOT EXISTS (
               SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                WHERE m.subscriber_id = o.subscriber_id AND m.channel_id = o.channel_id
                  AND ",
    crate::memberships::live_sql!("m", "c"),
    ")
           AND NOT EXISTS (
               SELECT 1 FROM star_subscriptions ss
                WHERE ss.subscriber_id = o.subscriber_id AND ss.channel_id = o.channel_id
                  AND ",
    subscription_holds_seat_sql!("ss"),
    ")) AS taken"
);

/// Seats taken in a channel: live memberships, plus live Stars subscribers who are not live
/// members, plus subscribers who are neither with a pending order whose hold is still valid at
/// `statement_timestamp()`. Call it under the
/// channel lock, or the count may be stale by the time it is used.
pub async fn seats_taken(tx: &Transaction<'_>, channel_id: i32) -> Result<i64, ApiError> {
    Ok(db::row_one(tx, SEATS_TAKEN_SQL, &[&channel_id])
        .await?
        .try_get("taken")?)
}

const SEATED_SQL: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                    WHERE m.subscriber_id = $1 AND m.channel_id = $2 AND ",
    crate::memberships::live_sql!("m", "c"),
    ")
         OR EXISTS (SELECT 1 FROM star_subscriptions ss
                    WHERE ss.subscriber_id = $1 AND ss.channel_id = $2 AND ",
    subscription_holds_seat_sql!("ss"),
    ") AS seated"
);

/// True when the subscriber holds a seat of the channel already: a live member (the one
/// definition, [`crate::memberships::live_sql!`]), or the holder of a live Stars subscription of it
/// (`subscription_holds_seat_sql!`). Such a buyer needs no seat. The caller holds the pair
/// lock.
pub async fn is_live_member(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
) -> Result<bool, ApiError> {
    Ok(db::row_one(tx, SEATED_SQL, &[&subscriber_id, &channel_id])
        .await?
        .try_get("seated")?)
}

const HOLDS_LIVE_SQL: &str = "SELECT count(*) AS held FROM orders
     WHERE status = 'pending' AND hold_until > statement_timestamp()";

/// Seat holds in force now, in every channel (pending orders whose hold has not run out), over
/// the holds' partial index: what the metrics sampler reports.
pub async fn holds_live(client: &impl deadpool_postgres::GenericClient) -> Result<i64, ApiError> {
    Ok(db::row_one(client, HOLDS_LIVE_SQL, &[])
        .await?
        .try_get("held")?)
}

/// Applies the seat rule of API.md "Seats" to a locked order, reading database time after the
/// locks. Writes nothing.
pub async fn seat_check(tx: &Transaction<'_>, locked: &LockedOrder) -> Result<SeatCheck, ApiError> {
    let Some(limit) = locked.channel.seat_limit else {
        return Ok(SeatCheck::NotNeeded);
    };
    let order = &locked.order;
    if is_live_member(tx, order.subscriber(), order.channel()).await? {
        return Ok(SeatCheck::NotNeeded);
    }
    if let Some(hold_until) = order.hold_until {
        return Ok(if hold_valid(tx, hold_until).await? {
            SeatCheck::HoldValid
        } else {
            SeatCheck::HoldExpired
        });
    }
    Ok(
        if seats_taken(tx, order.channel_id).await? < i64::from(limit) {
            SeatCheck::Free
        } else {
            SeatCheck::Full
        },
    )
}

const HOLD_VALID_SQL: &str = "SELECT $1::timestamptz > statement_timestamp() AS valid";

async fn hold_valid(tx: &Transaction<'_>, hold_until: DateTime<Utc>) -> Result<bool, ApiError> {
    Ok(db::row_one(tx, HOLD_VALID_SQL, &[&hold_until])
        .await?
        .try_get("valid")?)
}

const HOLD_SQL: &str = concat!(
    "UPDATE orders
     SET hold_until = statement_timestamp() + make_interval(secs => $2::float8),
         held_at = statement_timestamp()
     WHERE id = $1 RETURNING ",
    order_columns!()
);

/// When the subscriber `$1` may next hold a seat of channel `$2`, by each rule (NULL: the rule
/// allows it now). Cooldown: a pending order of the pair (superseded ones included) whose hold
/// ran out less than `$3` seconds ago. Daily cap: with `$4` or more holds granted in the last
/// 24 hours, the time the `$4`-th newest leaves that window.
const HOLD_LIMIT_SQL: &str = "SELECT
       (SELECT max(hold_until) + make_interval(secs => $3::float8) FROM orders
         WHERE subscriber_id = $1 AND channel_id = $2 AND status = 'pending'
           AND hold_until <= statement_timestamp()
           AND hold_until > statement_timestamp() - make_interval(secs => $3::float8))
         AS cooldown_until,
       (SELECT held_at + interval '1 day' FROM orders
         WHERE subscriber_id = $1 AND channel_id = $2
           AND held_at > statement_timestamp() - interval '1 day'
         ORDER BY held_at DESC OFFSET $4::bigint - 1 LIMIT 1)
         AS cap_until";

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
/// a channel without a limit or a buyer who is already a member → approve, no hold; an order
/// never held → hold a free seat for `HOLD_SECS` from `statement_timestamp()` and approve, or
/// refuse with [`CheckoutRefusal::ChannelFull`] (no free seat) or
/// [`CheckoutRefusal::HoldLimited`] (the buyer's cooldown or daily cap of holds, [`hold_limit`]);
/// a valid hold → approve again without extending
/// it; an expired hold → [`CheckoutRefusal::HoldExpired`]. Checks, in order: the order is
/// pending, the channel is active, the seat.
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
        && locked.channel.active
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
async fn seat_decide(
    tx: &Transaction<'_>,
    locked: LockedOrder,
    rules: HoldRules,
) -> Result<Result<Order, CheckoutRefusal>, ApiError> {
    if locked.order.status != Status::Pending {
        return Ok(Err(CheckoutRefusal::NotPending));
    }
    if !locked.channel.active {
        return Ok(Err(CheckoutRefusal::ChannelInactive));
    }
    match seat_check(tx, &locked).await? {
        SeatCheck::NotNeeded | SeatCheck::HoldValid => Ok(Ok(locked.order)),
        SeatCheck::HoldExpired => Ok(Err(CheckoutRefusal::HoldExpired)),
        SeatCheck::Full => Ok(Err(CheckoutRefusal::ChannelFull)),
        SeatCheck::Free => {
            let o = &locked.order;
            if let Some((limit, until)) = hold_limit(tx, o.subscriber(), o.channel(), rules).await?
            {
                return Ok(Err(CheckoutRefusal::HoldLimited { limit, until }));
            }
            let order = db::one(tx, HOLD_SQL, &[&o.id, &(rules.hold_secs as f64)]).await?;
            Ok(Ok(order))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_subscription_holds_its_seat_for_the_slack_past_its_renewal() {
        assert_eq!(
            subscription_holds_seat_sql!("ss"),
            format!(
                "ss.status = 'active' AND statement_timestamp() < \
                 ss.expires_at + make_interval(secs => {})",
                super::SUBSCRIPTION_SLACK_SECS
            )
        );
    }
}
