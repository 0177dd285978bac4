//! The transaction of [`apply_payment`]: a stored payment answered, or the locks taken, the
//! payment checked and inserted once, and what it bought granted.

use super::*;

/// Applies one payment in one transaction (API.md "Payment ingestion" 1–4) — the fast path's
/// or the locked path's (see the module doc): locks in the lock
/// order, checks against the order, stores the payment once with its outcome, and on success
/// marks the order paid and extends the membership of every channel of the order's plan by the
/// plan's term (read at apply time) from `GREATEST(current expiry, database now)`; `paid_at` is kept as reported (a future one
/// clamped to now) on the payment and the order, but never moves the term. A repeat of a stored
/// (gateway, external_id) changes nothing and returns the stored payment with
/// `duplicate: true` (a repeat whose amount, currency or order reference differs is logged as a
/// warning); one already committed is answered by the transaction's first statement, without
/// waiting for any lock. Deadlock victims are run again by [`crate::transaction!`]; a failure is
/// an `ApiError` and nothing is stored.
pub async fn apply_payment(pool: &Pool, p: NormalizedPayment) -> Result<Applied, ApiError> {
    apply_payment_as(pool, p, Recurrence::Unknown).await
}

/// [`apply_payment`] of a charge whose place in a Stars subscription the door knows (door 3).
pub async fn apply_payment_as(
    pool: &Pool,
    p: NormalizedPayment,
    recurrence: Recurrence,
) -> Result<Applied, ApiError> {
    apply_with(pool, p, recurrence, None::<std::future::Ready<()>>).await
}

/// [`apply_payment`] with `between` run between the fast path's read and its write (see
/// [`super::fast`]), for tests that change rows in that window. Not an API.
#[doc(hidden)]
pub async fn apply_payment_changing_rows_between(
    pool: &Pool,
    p: NormalizedPayment,
    between: impl std::future::Future<Output = ()>,
) -> Result<Applied, ApiError> {
    apply_with(pool, p, Recurrence::Unknown, Some(between)).await
}

/// [`apply_payment_as`]: the fast path ([`super::fast`]) for the common case, else the locked
/// path, one transaction ([`apply_in`]).
pub(super) async fn apply_with<F>(
    pool: &Pool,
    p: NormalizedPayment,
    recurrence: Recurrence,
    between: Option<F>,
) -> Result<Applied, ApiError>
where
    F: std::future::Future<Output = ()>,
{
    let p = &p;
    let applied = match fast::apply(pool, p, recurrence, between).await? {
        Fast::Done(applied) => *applied,
        Fast::Locked => crate::transaction!(pool, |tx| { apply_in(tx, p, recurrence).await })?,
    };
    if applied.duplicate {
        warn_if_redelivery_differs(p, &applied.payment);
    }
    tracing::info!(
        payment_id = applied.payment.id,
        gateway = %applied.payment.gateway,
        external_id = %applied.payment.external_id,
        order_id = ?applied.payment.order_id,
        outcome = %applied.payment.outcome,
        reason = ?applied.payment.reason.map(Reason::as_str),
        membership_id = ?applied.membership.as_ref().map(|m| m.id),
        duplicate = applied.duplicate,
        "payment ingested"
    );
    crate::common::metrics::payment(
        &applied.payment.gateway,
        applied.duplicate,
        applied.payment.outcome.as_str(),
        applied.payment.reason.map(Reason::as_str),
    );
    Ok(applied)
}

/// One field in which a repeat delivery differs from the stored payment: (field, stored,
/// delivered).
pub(super) type Difference = (&'static str, String, String);

/// The fields a repeat delivery of a stored payment should carry unchanged (amount, currency,
/// order reference) and does not. Pure; an empty list for a faithful repeat.
pub(super) fn redelivery_differences(
    delivered: &NormalizedPayment,
    stored: &Payment,
) -> Vec<Difference> {
    let mut differences = Vec::new();
    if delivered.amount_minor != stored.amount_minor {
        differences.push((
            "amount_minor",
            stored.amount_minor.to_string(),
            delivered.amount_minor.to_string(),
        ));
    }
    if delivered.currency != stored.currency {
        differences.push((
            "currency",
            stored.currency.clone(),
            delivered.currency.clone(),
        ));
    }
    if stored.order_reference.as_deref() != Some(delivered.order_reference.as_str()) {
        differences.push((
            "order_reference",
            stored.order_reference.clone().unwrap_or_default(),
            delivered.order_reference.clone(),
        ));
    }
    differences
}

/// A repeat delivery is still answered with the stored payment (the gateway's id is what
/// identifies a payment), but one that changed its amount, currency or order reference is a
/// gateway bug or tampering that staff should see: a warning naming both values of each
/// differing field. None of them is a secret.
pub(super) fn warn_if_redelivery_differs(delivered: &NormalizedPayment, stored: &Payment) {
    let differences = redelivery_differences(delivered, stored);
    if differences.is_empty() {
        return;
    }
    let text = differences
        .iter()
        .map(|(field, stored, delivered)| {
            format!("{field}: stored {stored:?}, delivered {delivered:?}")
        })
        .collect::<Vec<_>>()
        .join("; ");
    tracing::warn!(
        payment_id = stored.id,
        gateway = %stored.gateway,
        external_id = %stored.external_id,
        differences = %text,
        "repeat delivery differs from the stored payment; answered with the stored payment"
    );
}

/// What the locks of step 1 found: the order (in the lock order) and its subscription, and
/// whether the charge renews that subscription.
pub(super) struct Found {
    pub(super) order: Option<LockedOrder>,
    pub(super) subscription: Option<StarSubscription>,
    pub(super) renewal: bool,
}

/// The body of [`apply_payment`]'s transaction, in API.md's steps: lock (1), check (3, decided
/// first as reads under the locks, so the row is inserted once, final), store once (2), and
/// for a payment that passed, apply it (4).
pub(super) async fn apply_in(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    recurrence: Recurrence,
) -> Result<Applied, ApiError> {
    let pairs = match stored_or_lock_pair(tx, p).await? {
        Start::Stored(payment) => return with_membership(tx, payment).await,
        Start::Order(pairs) => pairs,
    };
    let found = lock(tx, p, recurrence, pairs.as_ref()).await?;
    let reason = check_found(tx, p, &found).await?;
    // A renewal is never refunded by us: Telegram charged a subscription the buyer keeps.
    let outcome = match reason {
        Some(_) if found.renewal => Outcome::NeedsReview,
        _ => outcome_for(&p.gateway, reason),
    };
    let Some(payment) = store(tx, p, &found, outcome, reason, recurrence).await? else {
        return stored(tx, p)
            .await?
            .ok_or_else(|| ApiError::internal("a conflicting payment is not visible"));
    };
    if let Some(reason) = reason {
        // The payer, when the door knows them; else the order's buyer.
        let user = p
            .payer_telegram_id
            .or(found.order.as_ref().map(|l| l.subscriber_telegram_id));
        let stopped = stop_subscription(tx, p, recurrence, &found, reason, user).await?;
        notices::enqueue_payment_notice(tx, &payment, user, stopped).await?;
    }
    let Found {
        order,
        subscription,
        renewal,
    } = found;
    let Some(locked) = order else {
        return Ok(Applied {
            duplicate: false,
            payment,
            membership: None,
        });
    };
    let membership = if reason.is_some() {
        memberships::of_pair(tx, locked.order.subscriber(), locked.order.channel()).await?
    } else {
        Some(
            apply(
                tx,
                p,
                &payment,
                &locked,
                subscription.as_ref(),
                renewal,
                recurrence,
            )
            .await?,
        )
    };
    Ok(Applied {
        duplicate: false,
        payment,
        membership,
    })
}

/// The statements a new payment issues when it pays a pending order of a plan of one unlimited
/// channel with no promo code (door 1's common case: the fast path, [`super::fast`]), each with
/// a name: its read, outside a transaction, then the pair lock, the verified write and the
/// fiscal receipt it owes, sent between `BEGIN` and `COMMIT` in one pipeline. `benches/payments` replays these very
/// constants with pgbench (its "current transaction" reference), so that replay cannot drift
/// from the code. Not an API.
#[doc(hidden)]
pub fn new_payment_statements() -> [(&'static str, &'static str); 4] {
    fast::statements()
}

/// What the transaction's first statement found ([`stored_or_lock_pair`]).
pub(super) enum Start {
    /// This (gateway, external_id) is stored: a repeat, answered from the stored row.
    Stored(Payment),
    /// A new payment; the pairs of the order it names (`None`: no such order), whose first
    /// pair lock is now held.
    Order(Option<seats::Pairs>),
}

pub(super) const STORED_OR_PAIR_SQL: &str = concat!(
    "WITH stored AS (SELECT ",
    payment_columns!(),
    " FROM payments WHERE gateway = $2 AND external_id = $3)
     SELECT s.*, ",
    seats::pair_columns_sql!("o", "s.id IS NULL AND o.id IS NOT NULL"),
    "
     FROM (SELECT 1) AS one
     LEFT JOIN stored s ON true
     LEFT JOIN orders o ON o.reference = $1"
);

/// The transaction's first statement: the stored payment with this (gateway, external_id), if
/// any, else the order the reference names and its pairs (one per channel of its plan), with
/// the first pair's advisory lock taken (the first lock of step 1; a bundle's further pairs are
/// locked next, in ascending channel id, [`seats::lock_order_of_locked_pair`]). A stored payment takes no lock (`CASE` evaluates the lock only when there is
/// none), so repeats never queue on the pair lock behind a renewal, a sweep batch or each other,
/// and write nothing. A repeat racing the first delivery's commit finds nothing yet, waits for
/// the pair lock like a new payment, and the insert's conflict decides.
pub(super) async fn stored_or_lock_pair(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
) -> Result<Start, ApiError> {
    let row = db::row_one(
        tx,
        STORED_OR_PAIR_SQL,
        &[&p.order_reference, &p.gateway, &p.external_id],
    )
    .await?;
    if row.try_get::<_, Option<i64>>("id")?.is_some() {
        return Ok(Start::Stored(Payment::from_row(&row)?));
    }
    Ok(Start::Order(seats::Pairs::from_row(&row)?))
}

/// Step 1: the locks of the lock order (`docs/locking.md`; the first pair lock taken by
/// [`stored_or_lock_pair`]), then the order's subscription, if any. An unknown reference needs
/// none.
pub(super) async fn lock(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    recurrence: Recurrence,
    pairs: Option<&seats::Pairs>,
) -> Result<Found, ApiError> {
    let order = match pairs {
        Some(pairs) => seats::lock_order_of_locked_pair(tx, pairs).await?,
        None => None,
    };
    // Only a Telegram Stars charge (or one whose door knows its place in a subscription) is
    // ever decided by a subscription ([`is_renewal`], [`starts_subscription`]); no other
    // payment reads or writes one, so it need not look one up.
    let subscription = match &order {
        Some(l) if p.gateway == Gateway::TelegramStars || recurrence != Recurrence::Unknown => {
            star_subscriptions::lock_of_order(tx, l.order.id).await?
        }
        _ => None,
    };
    let renewal = is_renewal(p, recurrence, order.as_ref(), subscription.as_ref());
    Ok(Found {
        order,
        subscription,
        renewal,
    })
}

/// The columns a payment is inserted with (beside its id), in the order of [`INSERT_SQL`]'s
/// values; the fast path's insert ([`super::fast`]) lists them alike.
macro_rules! insert_columns {
    () => {
        "gateway, external_id, order_reference, order_id, subscriber_id, channel_id, payer, \
         amount_minor, currency, paid_at, outcome, reason, renewal, subscription_expires_at"
    };
}

pub(in crate::payments) const INSERT_SQL: &str = concat!(
    "WITH inserted AS (
         INSERT INTO payments (",
    insert_columns!(),
    ")
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
                 LEAST($10::timestamptz, statement_timestamp()), $11, $12, $13, $14)
         ON CONFLICT (gateway, external_id) DO NOTHING
         RETURNING ",
    payment_columns!(),
    "
     ), to_mark AS (SELECT order_id, paid_at FROM inserted WHERE $15::boolean), paid AS (
    UPDATE orders o SET status = 'paid', paid_at = m.paid_at, promo_held_until = NULL
    FROM to_mark m WHERE o.id = m.order_id
)
     SELECT ",
    payment_columns!(),
    " FROM inserted"
);

/// Step 2: the dedupe insert, with the final outcome. Of all deliveries of this payment,
/// exactly one inserts (`Some`); the others find it stored (`None`). The same statement marks
/// the order paid when the payment inserted is an applied first payment of it (step 4 for the
/// order: the hold stops counting), so a payment and its order are written in one round trip.
pub(super) async fn store(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    found: &Found,
    outcome: Outcome,
    reason: Option<Reason>,
    recurrence: Recurrence,
) -> Result<Option<Payment>, ApiError> {
    let order = found.order.as_ref().map(|l| &l.order);
    let stored = Stored {
        outcome,
        reason,
        renewal: found.renewal,
        subscription_expires_at: recurrence.expires_at(),
        pays_order: order.is_some() && reason.is_none() && !found.renewal,
    };
    insert(tx, p, order, stored).await
}

/// What the dedupe insert ([`insert`]) stores beside the delivery's own fields.
pub(in crate::payments) struct Stored {
    pub outcome: Outcome,
    pub reason: Option<Reason>,
    /// A renewal charge of a Stars subscription.
    pub renewal: bool,
    pub subscription_expires_at: Option<DateTime<Utc>>,
    /// Mark `order` paid in the same statement, if this delivery is inserted.
    pub pays_order: bool,
}

/// The dedupe insert of one delivery naming `order` (if found), shared by the payment core and
/// the Stars reconcile's record of a charge refunded elsewhere ([`refunds`](crate::payments::refunds)): `Some`
/// when it inserted, `None` when this (gateway, external_id) is already stored.
pub(in crate::payments) async fn insert(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    order: Option<&orders::Order>,
    stored: Stored,
) -> Result<Option<Payment>, ApiError> {
    db::opt(
        tx,
        INSERT_SQL,
        &[
            &p.gateway,
            &p.external_id,
            &p.order_reference,
            &order.map(|o| o.id),
            &order.map(|o| o.subscriber_id),
            &order.map(|o| o.channel_id),
            &p.payer_telegram_id.map(|id| id.to_string()),
            &p.amount_minor,
            &p.currency,
            &p.paid_at,
            &stored.outcome,
            &stored.reason,
            &stored.renewal,
            &stored.subscription_expires_at,
            &stored.pays_order,
        ],
    )
    .await
}

/// Step 4 for a payment that passed (a first payment's order [`store`] already marked paid):
/// a renewal charge records the subscription's next renewal, and a first charge of a Stars
/// subscription starts it (the subscription row comes before the membership in the lock
/// order); then the membership of every channel of the plan is extended by the plan's term, to
/// at least that next renewal plus [`star_subscriptions::SLACK_SECS`] for a subscription
/// charge. A subscription
/// just started then judges again the renewals that arrived before it ([`rejudge_renewals`]).
pub(super) async fn apply(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    payment: &Payment,
    locked: &LockedOrder,
    subscription: Option<&StarSubscription>,
    renewal: bool,
    recurrence: Recurrence,
) -> Result<Membership, ApiError> {
    let charge = star_subscriptions::Charge {
        charge_id: &p.external_id,
        expires_at: recurrence.expires_at(),
        paid_at: p.paid_at,
    };
    let mut started = None;
    let renews_at = if renewal {
        match subscription {
            Some(s) => Some(star_subscriptions::renewed(tx, s.id, charge).await?),
            None => None,
        }
    } else if subscription.is_none() && starts_subscription(p, recurrence, locked) {
        let s = star_subscriptions::start(tx, locked.order.id, charge).await?;
        let at = s.expires_at;
        started = Some(s);
        Some(at)
    } else {
        None
    };
    // The term starts now (or at the current expiry), not at `paid_at`: API.md step 4.
    let mut membership = extend_every_channel(
        tx,
        locked,
        Cause::Payment(payment.id),
        renews_at.map(slack_after),
    )
    .await?;
    earn(tx, payment, locked).await?;
    // A card payment in hryvnias owes its fiscal receipt, written with it (the statement
    // decides; only a payment that may owe one sends it).
    if super::super::receipts::may_owe(payment) {
        super::super::receipts::enqueue_sale(tx, payment.id).await?;
    }
    if let Some(s) = started
        && let Some(m) = rejudge_renewals(tx, locked, s).await?
    {
        membership = m;
    }
    Ok(membership)
}

/// What applied payment `payment` of the locked order earns its buyer's affiliate — a
/// commission line or a buyer-referrer's reward days ([`referrals::ledger::on_applied`]) —
/// written in this, the payment's, transaction.
pub(super) async fn earn(
    tx: &Transaction<'_>,
    payment: &Payment,
    locked: &LockedOrder,
) -> Result<(), ApiError> {
    let paid = referrals::ledger::Paid {
        payment_id: payment.id,
        subscriber: locked.order.subscriber(),
        channel: locked.order.channel(),
        plan_id: locked.order.plan_id,
        amount_minor: payment.amount_minor,
        currency: payment.currency.clone(),
    };
    referrals::ledger::on_applied(tx, &paid).await?;
    Ok(())
}

/// Extends the membership of every channel of the locked order's plan by the plan's term
/// (read under the locks, at apply time), in ascending channel id (the order of their pair and
/// channel locks), each with its own event and grant or receipt effect
/// ([`memberships::extend_at_least`]); returns the membership of the order's own channel, the
/// one the payment's answer shows. A plan of one channel extends one membership.
pub(super) async fn extend_every_channel(
    tx: &Transaction<'_>,
    locked: &LockedOrder,
    cause: Cause,
    at_least: Option<DateTime<Utc>>,
) -> Result<Membership, ApiError> {
    let mut own = None;
    for channel in &locked.channels {
        let (m, _) = memberships::extend_at_least(
            tx,
            locked.order.subscriber(),
            channel.id,
            locked.plan.term(),
            cause,
            at_least,
        )
        .await?;
        if channel.id == locked.order.channel() {
            own = Some(m);
        }
    }
    own.ok_or_else(|| ApiError::internal("an order's channel is not in its plan"))
}

pub(super) const STORED_SQL: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payments WHERE gateway = $1 AND external_id = $2"
);

/// The answer to a repeat delivery: the stored payment, and its pair's current membership;
/// `None` when this (gateway, external_id) is not stored. Used for a repeat the fast path's read
/// found stored, and for one that raced the first delivery on the locked path: after the
/// insert found the conflict, the stored row is committed (`ON CONFLICT DO NOTHING` waited for
/// its inserter), so this new statement sees it.
pub(in crate::payments) async fn stored(
    client: &impl deadpool_postgres::GenericClient,
    p: &NormalizedPayment,
) -> Result<Option<Applied>, ApiError> {
    let Some(payment) =
        db::opt::<Payment>(client, STORED_SQL, &[&p.gateway, &p.external_id]).await?
    else {
        return Ok(None);
    };
    Ok(Some(with_membership(client, payment).await?))
}

/// The answer to a repeat delivery: the stored payment and its pair's current membership (a
/// plain read, no lock).
pub(super) async fn with_membership(
    client: &impl deadpool_postgres::GenericClient,
    payment: Payment,
) -> Result<Applied, ApiError> {
    let membership = match (payment.subscriber_id, payment.channel_id) {
        (Some(s), Some(c)) => memberships::of_pair(client, SubscriberId(s), ChannelId(c)).await?,
        _ => None,
    };
    Ok(Applied {
        duplicate: true,
        payment,
        membership,
    })
}
