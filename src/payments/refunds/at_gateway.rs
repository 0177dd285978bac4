//! A refund made at the gateway (WayForPay `Refunded`/`Voided`, Stripe
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
//!
//! **A refund before its payment.** A gateway may report the refund first (Stripe's events
//! and WayForPay's callbacks are not ordered), or while the payment waits for its locks. A
//! refund that finds no payment, and whose report says what the payment was ([`Reported`]),
//! is recorded *as* that payment: a row under the payment's own `(gateway, external_id)`,
//! `refunded`, reason `refunded_before_payment`, granting nothing. The payment's delivery, on
//! either of the core's paths, then conflicts on that key and is answered as a duplicate: the
//! buyer gets nothing, whichever of the two came first. When the report names a known order,
//! the row is written under that order's locks (the pair locks, the order, its channels — as a
//! payment of it takes them) and, if the order is pending and the money is its price, marks
//! it `paid` as the payment would have: the order ends as it does when the refund follows the
//! payment. Against a payment racing it:
//! - the payment holds the pair lock first: the refund waits for it, reads the payment
//!   committed, and takes back what it bought (the refund runs again from the start);
//! - the refund holds it first: the payment waits, then its insert conflicts (the fast path's
//!   write finds the order changed or the key taken and falls back to the locked path, which
//!   answers the stored row);
//! - without an order to lock (a report that names none), the unique index decides: an insert
//!   waits for the other transaction's insert of the same key, and the loser finds the
//!   winner's row (a refund that lost runs again and takes back).

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool, Transaction};

use crate::payments::core::{NormalizedPayment, Outcome, Reason};
use crate::{
    access::memberships,
    common::{
        currency::Money,
        error::ApiError,
        ids::{ChannelId, SubscriberId},
        vocabulary::Gateway,
    },
    db,
    orders::{self, seats},
    referrals,
};

/// What a refund's report says of the payment it refunds: enough to record the refund as
/// that payment when it comes first (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    /// Our order reference, when the report names it (WayForPay's `orderReference`; Stripe's
    /// charge `metadata.order`).
    pub order_reference: Option<String>,
    /// The payment's amount, in minor units of `currency`.
    pub amount_minor: i64,
    /// Three upper-case letters.
    pub currency: String,
    /// When the gateway says it was paid (or, failing that, reported); a future time is
    /// clamped to database now.
    pub paid_at: DateTime<Utc>,
}

impl Reported {
    /// What a door's normalized report of the payment says of it.
    pub fn of(p: &NormalizedPayment) -> Reported {
        Reported {
            order_reference: Some(p.order_reference.clone()),
            amount_minor: p.amount_minor,
            currency: p.currency.clone(),
            paid_at: p.paid_at,
        }
    }

    fn money(&self) -> Money {
        Money::new(self.amount_minor, &self.currency)
    }
}

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
    /// No payment of that gateway and external id was recorded: the refund is recorded as it
    /// (`refunded`, `refunded_before_payment`), so its later delivery grants nothing.
    RecordedBeforePayment { payment_id: i64 },
    /// No payment of that gateway and external id is recorded, and the report says too little
    /// of it to record the refund: nothing changed.
    UnknownPayment,
}

impl GatewayRefund {
    /// The result's name, for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            GatewayRefund::Refunded { .. } => "refunded",
            GatewayRefund::AlreadyRefunded { .. } => "already_refunded",
            GatewayRefund::NotApplied { .. } => "not_applied",
            GatewayRefund::RecordedBeforePayment { .. } => "recorded_before_payment",
            GatewayRefund::UnknownPayment => "unknown_payment",
        }
    }

    /// The payment the refund is stored on, when there is one.
    pub fn payment_id(&self) -> Option<i64> {
        match *self {
            GatewayRefund::Refunded { payment_id, .. }
            | GatewayRefund::AlreadyRefunded { payment_id }
            | GatewayRefund::NotApplied { payment_id }
            | GatewayRefund::RecordedBeforePayment { payment_id } => Some(payment_id),
            GatewayRefund::UnknownPayment => None,
        }
    }
}

/// What one run of the refund's transaction came to.
enum Attempt {
    Done(GatewayRefund),
    /// The payment was stored meanwhile by a transaction this one waited for: run again, and
    /// take back what it bought.
    Again,
}

/// How often the transaction runs when a payment keeps appearing under it (once is the race;
/// more would be a bug, reported as an error).
const ATTEMPTS: usize = 3;

/// Takes back what the payment `(gateway, external_id)` bought, in one transaction (see the
/// module doc); with no such payment, records the refund as it when `reported` says what it
/// was. A deadlock victim is run again by [`crate::transaction!`]; an error leaves everything
/// as it was.
pub async fn refund_at_gateway(
    pool: &Pool,
    gateway: Gateway,
    external_id: &str,
    reported: Option<&Reported>,
) -> Result<GatewayRefund, ApiError> {
    let result = take_back(pool, &gateway, external_id, TakenBack::REFUNDED, reported).await?;
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
        GatewayRefund::RecordedBeforePayment { payment_id } => tracing::warn!(
            payment_id,
            gateway = %gateway,
            external_id,
            order_reference = ?reported.and_then(|r| r.order_reference.as_deref()),
            "refund at the gateway reported before its payment: recorded as the payment, \
             which will grant nothing when it comes"
        ),
        GatewayRefund::UnknownPayment => tracing::warn!(
            gateway = %gateway,
            external_id,
            "refund at the gateway of a payment we never recorded, and its report says too \
             little to record it: nothing changed"
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
/// [`crate::payments::refunds::disputes`] runs it too), without its logs.
/// With no such payment, a refund whose `reported` says what it was is recorded as it (see the
/// module doc); a dispute passes `None`. The transaction runs again when the payment was stored
/// while it waited.
pub(super) async fn take_back(
    pool: &Pool,
    gateway: &Gateway,
    external_id: &str,
    target: TakenBack,
    reported: Option<&Reported>,
) -> Result<GatewayRefund, ApiError> {
    for _ in 0..ATTEMPTS {
        let attempt = crate::transaction!(pool, |tx| {
            refund_in(tx, gateway, external_id, target, reported).await
        })?;
        if let Attempt::Done(r) = attempt {
            return Ok(r);
        }
        tracing::info!(
            gateway = %gateway,
            external_id,
            "the payment taken back was stored while its refund waited; taking it back"
        );
    }
    Err(ApiError::internal(
        "a refund at the gateway kept finding its payment changed",
    ))
}

/// What the refund needs of the payment, read before and after the locks.
pub(super) struct Facts {
    pub id: i64,
    pub outcome: Outcome,
    pub reason: Option<Reason>,
    pub order_id: Option<i64>,
}

const FACTS_SQL: &str = "SELECT id, outcome, reason, order_id FROM payments
     WHERE gateway = $1 AND external_id = $2";

/// The payment `(gateway, external_id)` as a refund (or a dispute) judges it; `None` when none
/// is stored.
pub(super) async fn facts(
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
/// ([`crate::payments::refunds::disputes`]). Either way what it bought is taken back alike.
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
    // A refund recorded before its payment is that refund too.
    let before_payment =
        target == TakenBack::REFUNDED && f.reason == Some(Reason::RefundedBeforePayment);
    if f.outcome == target.outcome && (f.reason == Some(target.reason) || before_payment) {
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
    reported: Option<&Reported>,
) -> Result<Attempt, ApiError> {
    let Some(f) = facts(tx, gateway, external_id).await? else {
        return match reported {
            Some(r) => record_before_payment(tx, gateway, external_id, r).await,
            None => Ok(Attempt::Done(GatewayRefund::UnknownPayment)),
        };
    };
    take_back_applied(tx, gateway, external_id, f, target)
        .await
        .map(Attempt::Done)
}

/// Takes back what the stored payment `f` bought, if it is `applied` (a refund staff asked
/// for runs it too, [`super::by_staff`], after taking the same locks).
pub(super) async fn take_back_applied(
    tx: &Transaction<'_>,
    gateway: &Gateway,
    external_id: &str,
    f: Facts,
    target: TakenBack,
) -> Result<GatewayRefund, ApiError> {
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
    // The payment's commission line and reward days, reversed once: the claim above is once.
    referrals::ledger::reverse(tx, f.id).await?;
    // The return receipt its sale receipt owes, once, with the claim.
    crate::payments::receipts::enqueue_return(tx, f.id).await?;
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

/// A refund recorded as the payment it names: the payment inserted and, when `$12`, its order
/// marked paid as the payment would have marked it (the same `paid` step as the core's
/// insert, checked by a unit test below).
const RECORD_SQL: &str = "WITH inserted AS (
         INSERT INTO payments (gateway, external_id, order_reference, order_id, subscriber_id,
                               channel_id, amount_minor, currency, paid_at, outcome, reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, LEAST($9::timestamptz, statement_timestamp()),
                 $10, $11)
         ON CONFLICT (gateway, external_id) DO NOTHING
         RETURNING id, order_id, paid_at
     ), to_mark AS (SELECT order_id, paid_at FROM inserted WHERE $12::boolean), paid AS (
    UPDATE orders o SET status = 'paid', paid_at = m.paid_at, promo_held_until = NULL
    FROM to_mark m WHERE o.id = m.order_id
)
     SELECT id FROM inserted";

/// Records a refund that found no payment as that payment (`refunded`,
/// `refunded_before_payment`), under the locks of the order the report names, if any (see the
/// module doc). A pending order whose price is the reported money is marked `paid`, as the
/// payment would have marked it. [`Attempt::Again`] when the payment was stored meanwhile.
async fn record_before_payment(
    tx: &Transaction<'_>,
    gateway: &Gateway,
    external_id: &str,
    r: &Reported,
) -> Result<Attempt, ApiError> {
    let locked = match r.order_reference.as_deref() {
        Some(reference) => seats::lock_order_by_reference(tx, reference).await?,
        None => None,
    };
    if locked.is_some() && facts(tx, gateway, external_id).await?.is_some() {
        // The payment committed while we waited for its order's locks.
        return Ok(Attempt::Again);
    }
    let order = locked.as_ref().map(|l| &l.order);
    let pays_order = order.is_some_and(|o| {
        o.status == orders::Status::Pending && r.money().mismatch(&o.price()).is_none()
    });
    let row = db::row_opt(
        tx,
        RECORD_SQL,
        &[
            gateway,
            &external_id,
            &r.order_reference,
            &order.map(|o| o.id),
            &order.map(|o| o.subscriber_id),
            &order.map(|o| o.channel_id),
            &r.amount_minor,
            &r.currency,
            &r.paid_at,
            &Outcome::Refunded,
            &Reason::RefundedBeforePayment,
            &pays_order,
        ],
    )
    .await?;
    Ok(match row {
        Some(row) => Attempt::Done(GatewayRefund::RecordedBeforePayment {
            payment_id: row.try_get("id")?,
        }),
        // Stored by a transaction our insert waited for.
        None => Attempt::Again,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement that stores a payment and pays its order marks the order paid with the
    /// same step: `'paid'` is [`crate::orders::Status::Paid`], the hold and the code's hold
    /// cleared, `paid_at` the payment's.
    #[test]
    fn the_statements_that_pay_an_order_mark_it_paid_alike() {
        const PAID: &str = "paid AS (
    UPDATE orders o SET status = 'paid', paid_at = m.paid_at, promo_held_until = NULL
    FROM to_mark m WHERE o.id = m.order_id
)";
        assert_eq!(crate::orders::Status::Paid.to_string(), "paid");
        for statement in [
            crate::payments::core::INSERT_SQL,
            RECORD_SQL,
            include_str!("../fast_write.sql"),
        ] {
            assert_eq!(statement.matches(PAID).count(), 1, "{statement}");
        }
    }
}
