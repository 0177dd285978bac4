//! A refund made at the gateway (WayForPay `Refunded`/`Voided`, later Stripe
//! `charge.refunded`): the applied payment becomes `refunded` (`refunded_at_gateway`) and every
//! membership it extended is shortened by what it bought, once however often it is reported.
//!
//! One transaction ([`crate::transaction!`]) in the lock order of the payment core
//! (`docs/locking.md`): the payment is looked up by `(gateway, external_id)` with a plain read
//! (a repeat of a refund already recorded, or of one that cannot apply, is answered from it
//! without a lock); then its order is locked as a payment of it would be — the pair locks of
//! every channel of the order's plan in ascending channel id, the order `FOR UPDATE`, the
//! plan's channels — and the payment row is claimed with a conditional `UPDATE … WHERE outcome =
//! 'applied'`. Of any number of concurrent reports exactly one claims it: the others wait on the
//! first pair lock, then find it `refunded` and change nothing. Last come the memberships, each
//! `FOR UPDATE` in ascending channel id, shortened by [`memberships::take_back`] with a `refund`
//! event naming the payment (and a revoke keyed on that event when one ends).
//!
//! Every writer of an `applied` payment holds its order's lock (the payment core re-judging a
//! stored renewal, this refund), so a report that waited for the lock reads the outcome the
//! first one committed.
//! The order stays `paid` (it was paid; the money went back), so a late payment of it is
//! `already_paid` and the buyer makes a new order.

use deadpool_postgres::{GenericClient, Pool, Transaction};

use super::core::{Outcome, Reason};
use crate::{
    db,
    error::ApiError,
    ids::{ChannelId, SubscriberId},
    memberships,
    orders::seats,
    vocabulary::Gateway,
};

/// What a reported gateway refund did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayRefund {
    /// The payment was applied and is `refunded` now; `memberships` were shortened, of which
    /// `expired` ended (their members are removed).
    Refunded {
        payment_id: i64,
        memberships: usize,
        expired: usize,
    },
    /// Reported before: nothing changed.
    AlreadyRefunded { payment_id: i64 },
    /// We hold a payment of that id that was never applied (kept for review, or refunded by
    /// us): nothing to take back.
    NotApplied { payment_id: i64 },
    /// No payment of that gateway and external id is recorded.
    UnknownPayment,
}

impl GatewayRefund {
    /// The result's name, for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            GatewayRefund::Refunded { .. } => "refunded",
            GatewayRefund::AlreadyRefunded { .. } => "already_refunded",
            GatewayRefund::NotApplied { .. } => "not_applied",
            GatewayRefund::UnknownPayment => "unknown_payment",
        }
    }
}

/// Takes back what the payment `(gateway, external_id)` bought, in one transaction (see the
/// module doc). A deadlock victim is run again by [`crate::transaction!`]; an error leaves
/// everything as it was.
pub async fn refund_at_gateway(
    pool: &Pool,
    gateway: Gateway,
    external_id: &str,
) -> Result<GatewayRefund, ApiError> {
    let result = take_back(pool, &gateway, external_id, TakenBack::REFUNDED).await?;
    match &result {
        GatewayRefund::Refunded {
            payment_id,
            memberships,
            expired,
        } => tracing::info!(
            payment_id,
            gateway = %gateway,
            external_id,
            memberships,
            expired,
            "payment refunded at the gateway: what it bought was taken back"
        ),
        other => tracing::info!(
            gateway = %gateway,
            external_id,
            result = other.as_str(),
            "refund at the gateway changed nothing"
        ),
    }
    Ok(result)
}

/// The transaction of [`refund_at_gateway`], the payment becoming `target` (a dispute's
/// [`super::disputes`] runs it too), without its logs.
pub(super) async fn take_back(
    pool: &Pool,
    gateway: &Gateway,
    external_id: &str,
    target: TakenBack,
) -> Result<GatewayRefund, ApiError> {
    crate::transaction!(pool, |tx| {
        refund_in(tx, gateway, external_id, target).await
    })
}

/// What the refund needs of the payment, read before and after the locks.
struct Facts {
    id: i64,
    outcome: Outcome,
    reason: Option<Reason>,
    order_id: Option<i64>,
}

const FACTS_SQL: &str = "SELECT id, outcome, reason, order_id FROM payments
     WHERE gateway = $1 AND external_id = $2";

async fn facts(
    client: &impl GenericClient,
    gateway: &Gateway,
    external_id: &str,
) -> Result<Option<Facts>, ApiError> {
    let Some(r) = db::row_opt(client, FACTS_SQL, &[gateway, &external_id]).await? else {
        return Ok(None);
    };
    Ok(Some(Facts {
        id: r.try_get("id")?,
        outcome: r.try_get("outcome")?,
        reason: r.try_get("reason")?,
        order_id: r.try_get("order_id")?,
    }))
}

/// What a payment becomes when the gateway takes its money back: `refunded`
/// (`refunded_at_gateway`) for a refund, `disputed` (`disputed_at_gateway`) for a dispute
/// ([`super::disputes`]). Either way what it bought is taken back alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TakenBack {
    pub outcome: Outcome,
    pub reason: Reason,
}

impl TakenBack {
    /// A refund at the gateway.
    pub const REFUNDED: TakenBack = TakenBack {
        outcome: Outcome::Refunded,
        reason: Reason::RefundedAtGateway,
    };
}

/// The answer for a payment that is not (or no longer) `applied`.
fn settled(f: &Facts, target: TakenBack) -> GatewayRefund {
    if f.outcome == target.outcome && f.reason == Some(target.reason) {
        GatewayRefund::AlreadyRefunded { payment_id: f.id }
    } else {
        GatewayRefund::NotApplied { payment_id: f.id }
    }
}

const CLAIM_SQL: &str = "UPDATE payments
     SET outcome = $2, reason = $3, updated_at = statement_timestamp()
     WHERE id = $1 AND outcome = $4";

async fn refund_in(
    tx: &Transaction<'_>,
    gateway: &Gateway,
    external_id: &str,
    target: TakenBack,
) -> Result<GatewayRefund, ApiError> {
    let Some(f) = facts(tx, gateway, external_id).await? else {
        return Ok(GatewayRefund::UnknownPayment);
    };
    // An applied payment always paid an order (the core applies none without one).
    let Some(order_id) = f.order_id.filter(|_| f.outcome == Outcome::Applied) else {
        return Ok(settled(&f, target));
    };
    // Locks 1–3 (pairs, order, channels), as a payment of this order takes them.
    let Some(locked) = seats::lock_order(tx, order_id).await? else {
        return Err(ApiError::internal("an applied payment's order is missing"));
    };
    let claimed = db::execute(
        tx,
        CLAIM_SQL,
        &[&f.id, &target.outcome, &target.reason, &Outcome::Applied],
    )
    .await?;
    if claimed == 0 {
        // Another report (or change) committed while we waited for the locks.
        let now = facts(tx, gateway, external_id)
            .await?
            .ok_or_else(|| ApiError::internal("a stored payment disappeared"))?;
        return Ok(settled(&now, target));
    }
    // Read after the locks: a membership deleted meanwhile is not listed. Every membership a
    // payment of this order extended is one of its plan's channels' pairs, all locked above.
    let pairs = memberships::extended_by(tx, f.id).await?;
    let locked_pairs: Vec<(SubscriberId, ChannelId)> = locked
        .channel_ids()
        .into_iter()
        .map(|c| (locked.order.subscriber(), c))
        .collect();
    if let Some(stray) = pairs.iter().find(|p| !locked_pairs.contains(p)) {
        return Err(ApiError::internal(format!(
            "payment {} extended a membership outside its order's plan: {stray:?}",
            f.id
        )));
    }
    let (mut shortened, mut expired) = (0, 0);
    for (subscriber, channel) in pairs {
        // Lock 4, ascending channel id (`extended_by`'s order).
        let Some(before) = memberships::lock(tx, subscriber, channel).await? else {
            continue;
        };
        if let Some(after) = memberships::take_back(tx, &before, f.id).await? {
            shortened += 1;
            if !after.status.holds_access() {
                expired += 1;
            }
        }
    }
    Ok(GatewayRefund::Refunded {
        payment_id: f.id,
        memberships: shortened,
        expired,
    })
}
