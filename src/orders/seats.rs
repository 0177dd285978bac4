//! Seats of seat-limited channels, the holds that reserve them, and the locking of an order in
//! the one lock order. Shared by `POST /api/orders/{id}/checkout`, Telegram's
//! `pre_checkout_query`, the payment core and free claims ([`super::trials`]), so all of them
//! decide alike.
//!
//! The lock order is explained in `docs/locking.md`; [`lock_order`] and
//! [`lock_order_by_reference`] (`super::lock_order`) take everything before the memberships, so
//! no caller can get them out of order. The channel lock serializes
//! every seat decision of one channel: two buyers racing for the last seat decide one after
//! the other, and the second sees the first one's hold. A staff PATCH of `seat_limit` locks the
//! channel `FOR UPDATE` first ([`crate::catalog::channels::lock_for_change`]), so no decision is made
//! from a limit older than the one it commits.
//!
//! **Bundles.** An order of a plan of several channels needs a seat in every seat-limited one,
//! all or nothing ([`seat_check`] judges the order as a whole), and its hold (`hold_until`, one
//! per order) holds a seat in every seat-limited channel of its plan. So the seat count, the
//! hold rules and the holds metric count the orders whose *plan* includes a channel
//! (`plan_channels`), not only those whose `channel_id` is it, and a live Stars subscription
//! holds its seat in every channel of its order's plan.
//!
//! Seats taken in channel C = live memberships of C ([`crate::access::memberships::live_sql!`]: active
//! or grace and inside its term plus grace by database time) + distinct subscribers who are not
//! live members of C but hold a live Stars subscription of a plan including C
//! (`subscription_holds_seat_sql!`: active, and database time before its next renewal plus
//! [`SUBSCRIPTION_SLACK_SECS`]) + distinct subscribers who are neither, holding a pending order
//! of a plan including C whose `hold_until` is still in the future. A seated buyer (a live
//! member or live subscriber, [`is_live_member`]) needs no seat of that channel to pay again,
//! so a renewal Telegram charges on its date never finds its seat taken. A hold is set once,
//! never extended, and an expired hold is never renewed (the buyer needs a new order), so a
//! late payment of an old invoice cannot take a seat a newer buyer holds.
//!
//! A new hold also obeys the buyer's hold rules ([`crate::config::HoldRules`], [`hold_limit`]), in every
//! seat-limited channel it holds a seat of: after an unpaid hold of a channel runs out the
//! buyer waits `HOLD_COOLDOWN_SECS` before holding a seat of it again, and takes at most
//! `HOLDS_PER_DAY` holds of it in 24 hours, so nobody keeps a seat from paying buyers by asking
//! for a new hold each time the last one runs out. Every hold of a pair is granted under the
//! pair's lock, so the rules hold under concurrent presses.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;

use super::Order;
use crate::{
    access::memberships::Term,
    catalog::plans,
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db::{self, FromRow},
};

/// What the checks need to know of a channel, read under the channel lock.
#[derive(Debug, Clone)]
pub struct ChannelTerms {
    pub active: bool,
    pub seat_limit: Option<i32>,
    pub billing_period_days: i32,
}

pub use super::checkout::*;

pub use super::lock_order::*;

/// One channel of a locked order's plan, with its terms read under its lock.
#[derive(Debug, Clone)]
pub struct LockedChannel {
    pub id: ChannelId,
    pub terms: ChannelTerms,
}

/// What a payment or a claim needs to know of an order's plan, read (without a lock: its
/// terms are read at apply time, as the channel's period always was) with the order.
#[derive(Debug, Clone)]
pub struct PlanTerms {
    pub id: i64,
    pub kind: plans::Kind,
    /// `None`: lifetime.
    pub period_days: Option<i32>,
    pub recurring: bool,
    pub active: bool,
}

impl PlanTerms {
    /// What one purchase (or claim) of the plan grants in each of its channels.
    pub fn term(&self) -> Term {
        Term::of_period(self.period_days)
    }
}

/// An order locked in the lock order (pairs, order, channels), with its plan's terms, its
/// channels' terms and its subscriber's Telegram user id (the payer every Telegram check
/// compares with).
#[derive(Debug, Clone)]
pub struct LockedOrder {
    pub order: Order,
    /// The terms of the order's own channel (`order.channel_id`, the plan's first channel).
    pub channel: ChannelTerms,
    /// Every channel of the order's plan (the order's own among them), in ascending id: the
    /// order their locks were taken in and their memberships are written in.
    pub channels: Vec<LockedChannel>,
    pub plan: PlanTerms,
    pub subscriber_telegram_id: i64,
    /// How many of the plan's channels the subscriber holds for life (read under the pair
    /// locks by the statement that locked the order; see [`held_for_life`]).
    pub(super) lifetime_channels: i64,
}

impl LockedOrder {
    /// Every channel of the plan is active.
    pub fn channels_active(&self) -> bool {
        self.channels.iter().all(|c| c.terms.active)
    }

    /// The plan's channels, ascending.
    pub fn channel_ids(&self) -> Vec<ChannelId> {
        self.channels.iter().map(|c| c.id).collect()
    }
}

/// The seat rule's verdict for one order (API.md "Seats"), before anything is written; for a
/// bundle, the verdict of the whole order over its seat-limited channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeatCheck {
    /// No seat needed: no channel of the plan has a limit, or the buyer is already a live
    /// member of every one that has (a renewal).
    NotNeeded,
    /// The order's hold is still valid.
    HoldValid,
    /// The order was never held and a seat is free now (in every channel that needs one).
    Free,
    /// The order's hold has expired (whether or not seats are free again).
    HoldExpired,
    /// The order was never held and no seat is free (in at least one channel).
    Full,
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
    /// The order was never held and no seat is free (in some channel of its plan).
    ChannelFull,
    /// A channel of the order's plan is not active.
    ChannelInactive,
    /// The order needs a new hold and a hold rule ([`crate::config::HoldRules`]) refuses one until `until`.
    HoldLimited {
        limit: HoldLimit,
        until: DateTime<Utc>,
    },
    /// The order's promo code use lapsed and the code (or the buyer's share of it) filled up
    /// meanwhile ([`crate::catalog::promo_codes::use_still_held`]): its price is no longer available.
    PromoExhausted,
}

/// The channel locks of an order whose own channel (`own`, read `FOR KEY SHARE` with the order)
/// is one of `ids` (the plan's channels, ascending): the others `FOR KEY SHARE` in ascending id,
/// then every seat-limited one `FOR NO KEY UPDATE` in ascending id, re-read (a newer limit may
/// have been committed meanwhile). A plan of one unlimited channel takes no further statement,
/// one of one seat-limited channel one, as before bundles.
pub(super) async fn lock_channels(
    tx: &Transaction<'_>,
    order: &Order,
    own: ChannelTerms,
    ids: &[ChannelId],
) -> Result<Vec<LockedChannel>, ApiError> {
    let mut channels = vec![LockedChannel {
        id: order.channel(),
        terms: own,
    }];
    if ids.len() > 1 {
        let others: Vec<i32> = ids
            .iter()
            .filter(|c| **c != order.channel())
            .map(|c| c.0)
            .collect();
        let rows = db::rows(tx, TERMS_MANY_SHARED_SQL, &[&others]).await?;
        for r in &rows {
            channels.push(LockedChannel {
                id: ChannelId(r.try_get("id")?),
                terms: ChannelTerms::from_row(r)?,
            });
        }
        channels.sort_by_key(|c| c.id);
    }
    let limited: Vec<i32> = channels
        .iter()
        .filter(|c| c.terms.seat_limit.is_some())
        .map(|c| c.id.0)
        .collect();
    if !limited.is_empty() {
        let rows = db::rows(tx, TERMS_MANY_EXCLUSIVE_SQL, &[&limited]).await?;
        for r in &rows {
            let id = ChannelId(r.try_get("id")?);
            if let Some(c) = channels.iter_mut().find(|c| c.id == id) {
                c.terms = ChannelTerms::from_row(r)?;
            }
        }
    }
    if channels.len() != ids.len() {
        return Err(ApiError::internal(
            "a channel of an order's plan is missing",
        ));
    }
    Ok(channels)
}

/// Reads the channel's terms under a lock, third in the lock order. Every channel is read
/// `FOR KEY SHARE`: it blocks no other payment, checkout or foreign-key check (they take the
/// same mode), but it conflicts with the `FOR UPDATE` a staff PATCH of `seat_limit` takes first
/// ([`crate::catalog::channels::lock_for_change`]), so such a PATCH waits for every transaction that decided
/// from the old terms, and every later one waits for the PATCH and reads the new limit. A
/// seat-limited channel is then locked `FOR NO KEY UPDATE` and re-read (a newer limit may have
/// been committed meanwhile): that serializes its seat decisions. Unlimited channels are not
/// locked further: nothing counts their seats, and a stronger lock would serialize every
/// payment of a popular channel. `None`: no such channel.
/// Every transaction that takes the lock of one channel (manual grant, membership
/// PATCH/DELETE) takes it here; an order's channels are locked by [`lock_order`] the same way.
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
// A locking `SELECT … ORDER BY` locks the rows as the sort returns them (the row locks are
// taken above the sort), so these lock in ascending id.
const TERMS_MANY_SHARED_SQL: &str = "SELECT id, active, seat_limit, billing_period_days
     FROM channels WHERE id = ANY($1) ORDER BY id FOR KEY SHARE";
const TERMS_MANY_EXCLUSIVE_SQL: &str = "SELECT id, active, seat_limit, billing_period_days
     FROM channels WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE";

crate::from_row!(ChannelTerms ["active, seat_limit, billing_period_days"] {
    active,
    seat_limit,
    billing_period_days,
});

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

/// SQL: order `$o` is of a plan that includes channel `$c`: its own channel, or a further
/// channel of its (bundle) plan. For one subscriber's orders (few rows).
/// `order_covers_sql!("o", "$2")`.
macro_rules! order_covers_sql {
    ($o:literal, $c:literal) => {
        concat!(
            "(",
            $o,
            ".channel_id = ",
            $c,
            " OR EXISTS (SELECT 1 FROM plan_channels cpc WHERE cpc.plan_id = ",
            $o,
            ".plan_id AND cpc.channel_id = ",
            $c,
            "))"
        )
    };
}
pub(crate) use order_covers_sql;

/// SQL: Stars subscription `$ss` is of an order whose plan includes channel `$c`: it holds its
/// seat there. For one subscriber's subscriptions (few rows).
macro_rules! subscription_covers_sql {
    ($ss:literal, $c:literal) => {
        concat!(
            "(",
            $ss,
            ".channel_id = ",
            $c,
            " OR EXISTS (SELECT 1 FROM orders so JOIN plan_channels spc ON spc.plan_id = so.plan_id
                         WHERE so.id = ",
            $ss,
            ".order_id AND spc.channel_id = ",
            $c,
            "))"
        )
    };
}

/// SQL: the bundle plans that include channel `$1` after their first channel (whose orders'
/// `channel_id` is another channel), as an array for an index condition.
macro_rules! further_plans_of_sql {
    () => {
        "ARRAY(SELECT bpc.plan_id FROM plan_channels bpc
               WHERE bpc.channel_id = $1 AND bpc.position > 0)"
    };
}

/// The seat count: live memberships of channel `$1`, plus the distinct subscribers who are not
/// live members but hold a live Stars subscription of a plan including it, plus the distinct
/// subscribers who are neither and hold a valid hold on a pending order of a plan including
/// it. Membership is tested with the one live predicate ([`crate::access::memberships::live_sql!`]).
/// An order or subscription covers `$1` by its own `channel_id` or as a further channel of its
/// bundle plan (`OR … = ANY (…)`, so each half can use its index: the holds' and `plan_id`'s).
const SEATS_TAKEN_SQL: &str = concat!(
    "SELECT
       (SELECT count(*) FROM memberships m JOIN channels c ON c.id = m.channel_id
         WHERE m.channel_id = $1 AND ",
    crate::access::memberships::live_sql!("m", "c"),
    ")
     + (SELECT count(DISTINCT ss.subscriber_id) FROM star_subscriptions ss
         WHERE (ss.channel_id = $1 OR ss.order_id = ANY (ARRAY(
                  SELECT bo.id FROM orders bo WHERE bo.plan_id = ANY (",
    further_plans_of_sql!(),
    "))))
           AND ",
    subscription_holds_seat_sql!("ss"),
    "
           AND NOT EXISTS (
               SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                WHERE m.subscriber_id = ss.subscriber_id AND m.channel_id = $1
                  AND ",
    crate::access::memberships::live_sql!("m", "c"),
    "))
     + (SELECT count(DISTINCT o.subscriber_id) FROM orders o
         WHERE (o.channel_id = $1 OR o.plan_id = ANY (",
    further_plans_of_sql!(),
    "))
           AND o.status = 'pending'
           AND o.hold_until > statement_timestamp()
           AND NOT EXISTS (
               SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                WHERE m.subscriber_id = o.subscriber_id AND m.channel_id = $1
                  AND ",
    crate::access::memberships::live_sql!("m", "c"),
    ")
           AND NOT EXISTS (
               SELECT 1 FROM star_subscriptions ss
                WHERE ss.subscriber_id = o.subscriber_id AND ",
    subscription_covers_sql!("ss", "$1"),
    " AND ",
    subscription_holds_seat_sql!("ss"),
    ")) AS taken"
);

/// Seats taken in a channel: live memberships, plus live Stars subscribers (of any plan
/// including the channel) who are not live members, plus subscribers who are neither with a
/// pending order of a plan including the channel whose hold is still valid at
/// `statement_timestamp()`. Call it under the channel lock, or the count may be stale by the
/// time it is used.
pub async fn seats_taken(
    tx: &impl deadpool_postgres::GenericClient,
    channel_id: i32,
) -> Result<i64, ApiError> {
    Ok(db::row_one(tx, SEATS_TAKEN_SQL, &[&channel_id])
        .await?
        .try_get("taken")?)
}

const SEATED_SQL: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                    WHERE m.subscriber_id = $1 AND m.channel_id = $2 AND ",
    crate::access::memberships::live_sql!("m", "c"),
    ")
         OR EXISTS (SELECT 1 FROM star_subscriptions ss
                    WHERE ss.subscriber_id = $1 AND ",
    subscription_covers_sql!("ss", "$2"),
    " AND ",
    subscription_holds_seat_sql!("ss"),
    ") AS seated"
);

/// True when the subscriber holds a seat of the channel already: a live member (the one
/// definition, [`crate::access::memberships::live_sql!`]), or the holder of a live Stars subscription
/// of a plan including it (`subscription_holds_seat_sql!`). Such a buyer needs no seat. The
/// caller holds the pair lock.
pub async fn is_live_member(
    tx: &impl deadpool_postgres::GenericClient,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
) -> Result<bool, ApiError> {
    Ok(db::row_one(tx, SEATED_SQL, &[&subscriber_id, &channel_id])
        .await?
        .try_get("seated")?)
}

// One seat per seat-limited channel of the held order's plan.
const HOLDS_LIVE_SQL: &str = "SELECT count(*) AS held FROM orders o
     JOIN plan_channels pc ON pc.plan_id = o.plan_id
     JOIN channels c ON c.id = pc.channel_id
     WHERE o.status = 'pending' AND o.hold_until > statement_timestamp()
       AND c.seat_limit IS NOT NULL";

/// Seats held now, in every channel: pending orders whose hold has not run out, one seat in
/// each seat-limited channel of their plan (a plan of one channel: one per order): what the metrics sampler reports.
pub async fn holds_live(client: &impl deadpool_postgres::GenericClient) -> Result<i64, ApiError> {
    Ok(db::row_one(client, HOLDS_LIVE_SQL, &[])
        .await?
        .try_get("held")?)
}

/// Whether every channel of the order's plan is held for life already (`expires_at =
/// 'infinity'`, in a status that holds access): one more purchase or claim would buy nothing.
/// Read by the statement that locked the order, under every pair lock of the order (so no
/// membership of those pairs can change until the caller commits), as
/// [`crate::access::memberships::lifetime_in_every`] would read it; no round trip of its own.
pub fn held_for_life(locked: &LockedOrder) -> bool {
    locked.lifetime_channels == locked.channels.len() as i64
}

/// The seat rule of one channel of an order.
async fn channel_seat_check(
    tx: &Transaction<'_>,
    order: &Order,
    channel: &LockedChannel,
) -> Result<SeatCheck, ApiError> {
    let Some(limit) = channel.terms.seat_limit else {
        return Ok(SeatCheck::NotNeeded);
    };
    if is_live_member(tx, order.subscriber(), channel.id).await? {
        return Ok(SeatCheck::NotNeeded);
    }
    if let Some(hold_until) = order.hold_until {
        return Ok(if hold_valid(tx, hold_until).await? {
            SeatCheck::HoldValid
        } else {
            SeatCheck::HoldExpired
        });
    }
    Ok(if seats_taken(tx, channel.id.0).await? < i64::from(limit) {
        SeatCheck::Free
    } else {
        SeatCheck::Full
    })
}

/// Applies the seat rule of API.md "Seats" to a locked order, reading database time after the
/// locks, in every seat-limited channel of its plan, all or nothing: an expired hold or a full
/// channel anywhere decides the whole order (one hold serves every channel, so an order is
/// either held everywhere it needs a seat or nowhere). Writes nothing.
pub async fn seat_check(tx: &Transaction<'_>, locked: &LockedOrder) -> Result<SeatCheck, ApiError> {
    Ok(seat_needs(tx, locked).await?.0)
}

/// [`seat_check`], with the channels in which the order needs a seat of its own (not a live
/// member or subscriber there).
pub(super) async fn seat_needs(
    tx: &Transaction<'_>,
    locked: &LockedOrder,
) -> Result<(SeatCheck, Vec<ChannelId>), ApiError> {
    let mut verdict = SeatCheck::NotNeeded;
    let mut needed = Vec::new();
    for channel in &locked.channels {
        match channel_seat_check(tx, &locked.order, channel).await? {
            SeatCheck::NotNeeded => {}
            refused @ (SeatCheck::HoldExpired | SeatCheck::Full) => return Ok((refused, needed)),
            v @ (SeatCheck::HoldValid | SeatCheck::Free) => {
                verdict = v;
                needed.push(channel.id);
            }
        }
    }
    Ok((verdict, needed))
}

/// Whether a claim of a free order ([`super::trials`]) finds a seat in every seat-limited
/// channel of its plan: a live member needs none, a valid hold is its seat, and otherwise (no
/// hold, or one that ran out: a claim is decided now, not by an old invoice) a seat must be
/// free now. Writes nothing.
pub async fn claim_finds_seats(
    tx: &Transaction<'_>,
    locked: &LockedOrder,
) -> Result<bool, ApiError> {
    for channel in &locked.channels {
        let Some(limit) = channel.terms.seat_limit else {
            continue;
        };
        match channel_seat_check(tx, &locked.order, channel).await? {
            SeatCheck::NotNeeded | SeatCheck::HoldValid | SeatCheck::Free => {}
            SeatCheck::Full => return Ok(false),
            SeatCheck::HoldExpired => {
                if seats_taken(tx, channel.id.0).await? >= i64::from(limit) {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    /// The payment core's read without locks reads an order's terms as the lock order does.
    #[test]
    fn the_read_without_locks_selects_the_lock_order_s_terms() {
        let lock_order = include_str!("lock_order.sql");
        let terms = &lock_order[..lock_order.find(" AS lifetime_channels").unwrap()];
        assert!(include_str!("../payments/fast_read.sql").starts_with(terms));
    }

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
