//! The locking of an order in the one lock order (`docs/locking.md`): [`lock_order`] and
//! [`lock_order_by_reference`] take every lock before the memberships, so no caller can get them
//! out of order; and the read of an order's terms (`lock_order.sql`), which the payment core's
//! read without locks shares.

use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::{Order, seats::*};
use crate::{
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db::{self, FromRow},
};

/// The pairs of an order, as the statement that took the first of their advisory locks read
/// them (without a row lock: an order's subscriber and plan never change, nor do the channels
/// of a plan that has orders).
#[derive(Debug, Clone)]
pub struct Pairs {
    pub order_id: i64,
    pub subscriber: SubscriberId,
    /// The channels of the order's plan, ascending; the first one's pair lock is held.
    pub channels: Vec<ChannelId>,
}

impl Pairs {
    /// Reads the pairs from a row with `order_id`, `order_subscriber_id` and
    /// `order_channel_ids` (see [`pair_columns_sql!`]).
    pub fn from_row(row: &tokio_postgres::Row) -> Result<Option<Pairs>, ApiError> {
        let Some(order_id) = row.try_get::<_, Option<i64>>("order_id_named")? else {
            return Ok(None);
        };
        Ok(Some(Pairs {
            order_id,
            subscriber: SubscriberId(row.try_get("order_subscriber_id")?),
            channels: row
                .try_get::<_, Vec<i32>>("order_channel_ids")?
                .into_iter()
                .map(ChannelId)
                .collect(),
        }))
    }
}

/// SQL: the select list that reads order `$o`'s pairs (its id, subscriber and its plan's
/// channels, ascending) and takes the advisory lock of the first of them — the lowest channel
/// id — evaluated for each row the statement returns, when `$when` holds (`"true"`: always).
/// The statement must return at most one row per order (the locks of a bundle's further
/// channels are taken one statement each, [`lock_further_pairs`], since a lock function in a
/// select list may be evaluated in any order of the rows). `pair_columns_sql!("o", "true")`.
macro_rules! pair_columns_sql {
    ($o:literal, $when:literal) => {
        concat!(
            $o,
            ".id AS order_id_named, ",
            $o,
            ".subscriber_id AS order_subscriber_id,
             ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = ",
            $o,
            ".plan_id ORDER BY pc.channel_id) AS order_channel_ids,
             CASE WHEN ",
            $when,
            " THEN pg_advisory_xact_lock(",
            $o,
            ".subscriber_id, COALESCE((SELECT min(pc.channel_id) FROM plan_channels pc
                                        WHERE pc.plan_id = ",
            $o,
            ".plan_id), ",
            $o,
            ".channel_id)) IS NULL END AS pair_locked"
        )
    };
}
pub(crate) use pair_columns_sql;

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

// The pairs are read and the first advisory lock taken in one statement (one round trip): the
// lock function runs only for the row the statement returns (the key is unique), never for a
// row a filter later drops.
pub(super) const PAIR_BY_ID_SQL: &str = concat!(
    "SELECT ",
    pair_columns_sql!("o", "true"),
    " FROM orders o WHERE o.id = $1"
);
pub(super) const PAIR_BY_REFERENCE_SQL: &str = concat!(
    "SELECT ",
    pair_columns_sql!("o", "true"),
    " FROM orders o WHERE o.reference = $1"
);
// The order `FOR UPDATE` (in its subquery, which locks it first), then its promo code's row
// `FOR UPDATE` (in the lateral subquery, locked as soon as the order is: the code row comes
// between the order and the channels in the lock order, `crate::catalog::promo_codes`), then its own
// channel's terms `FOR KEY SHARE`, its subscriber's Telegram id and its plan's terms and channels (no lock: a
// plan's channels cannot change once it has orders, and its period is read at apply time), in
// one statement. The order's foreign keys keep the channel, the plan and the subscriber alive
// while we hold the order row, so the joins find them whenever the order is found. It also
// counts the plan's channels (the order's own for a plan without rows in `plan_channels`) the
// subscriber holds for life, as `memberships::lifetime_in_every` does: the caller holds every
// pair lock of the order, which each writer of those memberships takes first, so this
// statement's snapshot is as current as a later one's would be ([`held_for_life`]).
//
// The select list (what an order's terms are, `Terms`) is also the start of the payment core's
// read without locks (`payments/fast_read.sql`), so both read the same things alike.
pub(super) const LOCK_ORDER_SQL: &str = include_str!("lock_order.sql");

/// What a row of [`LOCK_ORDER_SQL`] (or the payment core's read without locks) says of an order, besides its subscriber's Telegram id
/// and the count of lifetime memberships.
pub(super) struct Terms {
    order: Order,
    /// The terms of the order's own channel.
    own: ChannelTerms,
    plan: PlanTerms,
    /// The plan's channels, ascending (the order's own for a plan without `plan_channels`).
    channels: Vec<ChannelId>,
}

impl Terms {
    fn from_row(row: &tokio_postgres::Row) -> Result<Terms, ApiError> {
        let order = Order::from_row(row)?;
        let own = ChannelTerms::from_row(row)?;
        let plan = PlanTerms {
            id: order.plan_id,
            kind: row.try_get("plan_kind")?,
            period_days: row.try_get("plan_period_days")?,
            recurring: row.try_get("plan_recurring")?,
            active: row.try_get("plan_active")?,
        };
        let mut channels: Vec<ChannelId> = row
            .try_get::<_, Vec<i32>>("plan_channel_ids")?
            .into_iter()
            .map(ChannelId)
            .collect();
        if channels.is_empty() {
            channels.push(order.channel());
        }
        Ok(Terms {
            order,
            own,
            plan,
            channels,
        })
    }
}

/// The order of a row of [`LOCK_ORDER_SQL`]'s select list read **without locks**, as the checks would see it
/// if it were locked now — for a plan of one channel only (`None` for a bundle). Nothing may be
/// decided from it unless the write that follows verifies, under the locks, that every row it
/// was read from is unchanged (the payment core's fast path, `crate::payments::fast`).
pub(crate) fn unlocked_of_one_channel(
    row: &tokio_postgres::Row,
) -> Result<Option<LockedOrder>, ApiError> {
    let Terms {
        order,
        own,
        plan,
        channels,
    } = Terms::from_row(row)?;
    if channels != [order.channel()] {
        return Ok(None);
    }
    Ok(Some(LockedOrder {
        channels: vec![LockedChannel {
            id: order.channel(),
            terms: own.clone(),
        }],
        channel: own,
        order,
        plan,
        subscriber_telegram_id: row.try_get("telegram_user_id")?,
        lifetime_channels: row.try_get("lifetime_channels")?,
    }))
}

/// Takes the locks of the lock order for the order `pair_sql` finds by `key`.
pub(super) async fn lock_where(
    tx: &Transaction<'_>,
    pair_sql: &'static str,
    key: &(dyn ToSql + Sync),
) -> Result<Option<LockedOrder>, ApiError> {
    // The pairs must be known before their locks can be taken, so they are read by the
    // statement that takes the first lock, from a snapshot taken before the lock was granted.
    // An order's pairs never change, so the read cannot go stale; only a deletion can
    // intervene, which the locked re-read below notices.
    let Some(row) = db::row_opt(tx, pair_sql, &[key]).await? else {
        return Ok(None);
    };
    let Some(pairs) = Pairs::from_row(&row)? else {
        return Ok(None);
    };
    lock_order_of_locked_pair(tx, &pairs).await
}

/// The advisory locks of a bundle's further pairs (every channel after the first, whose lock
/// the statement that read the pairs took), one statement each, in ascending channel id: a
/// lock function over several rows of one statement has no guaranteed order of evaluation
/// (not even under an `ORDER BY`, which may sort after the select list is computed), and a
/// wrong order could deadlock two bundles of one buyer. Nothing for a plan of one channel.
pub async fn lock_further_pairs(tx: &Transaction<'_>, pairs: &Pairs) -> Result<(), ApiError> {
    for channel in pairs.channels.iter().skip(1) {
        db::lock_pair(tx, pairs.subscriber, *channel).await?;
    }
    Ok(())
}

/// The rest of the lock order for the order of `pairs`, whose first pair lock the caller took
/// in the statement that read them (as [`lock_order`] does; the payment core reads the pairs
/// together with its check for a stored payment): the further pair locks of a bundle, the
/// order `FOR UPDATE`, its plan's channels' terms (see [`lock_channels`]) and its subscriber's
/// Telegram id. `None` when the order was deleted meanwhile.
pub async fn lock_order_of_locked_pair(
    tx: &Transaction<'_>,
    pairs: &Pairs,
) -> Result<Option<LockedOrder>, ApiError> {
    lock_further_pairs(tx, pairs).await?;
    let Some(row) = db::row_opt(tx, LOCK_ORDER_SQL, &[&pairs.order_id]).await? else {
        return Ok(None);
    };
    let Terms {
        order,
        own,
        plan,
        channels: ids,
    } = Terms::from_row(&row)?;
    let locked_ids: &[ChannelId] = if pairs.channels.is_empty() {
        &[ChannelId(order.channel_id)]
    } else {
        &pairs.channels
    };
    if ids != locked_ids {
        // Forbidden by the plans' rules (channels are fixed once a plan has orders); the
        // locks taken do not cover the plan any more, so nothing is decided from them.
        return Err(ApiError::internal(
            "the channels of an order's plan changed while it was being locked",
        ));
    }
    // (The promo code row of the order, when it has one, is locked here: after the order,
    // before the channels' stronger locks.)
    let channels = lock_channels(tx, &order, own, &ids).await?;
    let channel = channels
        .iter()
        .find(|c| c.id == order.channel())
        .map(|c| c.terms.clone())
        .ok_or_else(|| ApiError::internal("an order's channel is not in its plan"))?;
    Ok(Some(LockedOrder {
        order,
        channel,
        channels,
        plan,
        subscriber_telegram_id: row.try_get("telegram_user_id")?,
        lifetime_channels: row.try_get("lifetime_channels")?,
    }))
}
