//! The payment core: the one transaction that turns a normalized payment into access, exactly
//! once. Every door (signed webhook, WayForPay, Telegram Stars) authenticates its caller, builds
//! a [`NormalizedPayment`] and calls [`apply_payment`]; no door touches order, membership or
//! payment SQL itself.
//!
//! Exactly once rests on two things, both inside one transaction:
//! - the lock order (the advisory pair locks of every channel of the order's plan, in ascending
//!   channel id → order `FOR UPDATE` → the plan's channels, key share and, if seat-limited,
//!   `FOR NO KEY UPDATE`, ascending → memberships; see `docs/locking.md`), so two payments of
//!   one order, a checkout, a claim, a manual grant and the sweep never interleave on the same
//!   membership or seat;
//! - `INSERT … ON CONFLICT (gateway, external_id) DO NOTHING`, issued after the locks: of any
//!   number of deliveries of one payment, exactly one inserts; every other one finds the stored
//!   row, answers with it and changes nothing.
//!
//! A delivery of a payment that is already stored (the common retry) is answered before any of
//! that: the transaction's first statement reads the stored row and takes the (first) pair
//! lock only when there is none ([`stored_or_lock_pair`]), and the answer is built from the stored row and
//! the pair's current membership, with no lock taken and nothing written. So re-deliveries
//! never queue on the pair lock behind each other, a renewal or a sweep batch. Only a delivery
//! that finds no stored row (a new payment, or a repeat racing the first delivery's commit)
//! goes on to the locks, where the insert's conflict still decides. The same statement reads
//! the order's pair and takes its lock, so a new payment costs one round trip less.
//!
//! **The fast path.** The common case — a payment that passes every check, of an order of a plan
//! of one channel without a seat limit or a promo code, through a door that names no payer (doors
//! 1, 2 and 4) — is applied by [`super::fast`] instead, in two round trips: a read without locks,
//! these checks in Rust, then one pipeline of `BEGIN`, the pair lock, one statement that takes
//! the rest of the lock order and writes everything only if every row the checks read is still
//! the version they read, and `COMMIT`. Anything else, and anything that changed in between,
//! takes the locked path below (the same transaction as before the fast path existed), which
//! decides from the rows as they are then. Both paths write the same rows. Through those doors a
//! repeat of a stored payment is answered after the fast path's read, from the stored row, as
//! above but without a transaction.
//!
//! What a payment buys comes from the order's plan, read under those locks: the plan's term
//! (`period_days`, or lifetime) in **every** channel of the plan — a bundle's payment extends
//! each membership once, with its own event and effect. The checks (API.md order: unknown
//! order, cancelled, currency, amount, payer, already paid, channel inactive, the promo code's use, seat) judge a
//! bundle as a whole (any channel inactive, any channel without a seat, an expired hold: the
//! payment grants nothing anywhere). They are reads under those locks, so they are decided first and the
//! payment row is inserted once, with its final outcome. A payment that fails a check is still
//! kept (money is never lost), grants nothing, and its buyer is told in one message (an outbox
//! effect in the same transaction).
//!
//! A renewal charge of a Telegram Stars subscription ([`star_subscriptions`]) is one more
//! payment of an order that is already paid: it is checked against the subscription instead
//! (known, not cancelled, same amount, currency and payer, every channel active, a seat in
//! every seat-limited one) and extends the membership of every channel of the plan by one
//! period, to at least the subscription's next renewal plus a day. It is
//! never `already_paid` and never refunded: a renewal that fails a check is `needs_review`.
//! Any subscription charge that fails a check stops its subscription in the same transaction
//! ([`stop_subscription`]), and a renewal that arrived before its subscription's first charge
//! was recorded is judged again when that charge starts the subscription
//! ([`rejudge_renewals`]).

use chrono::{DateTime, Utc};
use deadpool_postgres::{Pool, Transaction};
use serde::Serialize;
use tokio_postgres::Row;

use super::{
    fast::{self, Fast},
    notices,
    star_subscriptions::{self, StarSubscription},
};
use crate::{
    access::memberships::{self, Cause, Membership},
    catalog::promo_codes,
    common::{
        currency::{Mismatch, Money},
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db::{self, FromRow},
    orders::{
        self,
        seats::{self, LockedOrder, SeatCheck},
    },
};

pub use crate::common::vocabulary::{Gateway, Reason};

/// A payment as every door hands it to [`apply_payment`], after authenticating its sender.
#[derive(Debug, Clone)]
pub struct NormalizedPayment {
    /// `[a-z0-9_-]{1,32}`: `wayforpay`, `telegram_stars`, or a door-1 gateway name.
    pub gateway: Gateway,
    /// The gateway's id of this payment, 1..255 characters; unique per gateway.
    pub external_id: String,
    /// Our order reference, as the gateway echoes it.
    pub order_reference: String,
    /// Amount in minor units, ≥ 0.
    pub amount_minor: i64,
    /// Three upper-case letters.
    pub currency: String,
    /// When the gateway says it was paid; a future time is clamped to database now. Kept on
    /// the payment and the order as reported; the term starts when the payment is applied.
    pub paid_at: DateTime<Utc>,
    /// The payer's Telegram user id, when the door knows it (Telegram Stars only).
    pub payer_telegram_id: Option<i64>,
}

impl NormalizedPayment {
    /// The money the gateway says was paid.
    pub fn money(&self) -> Money {
        Money::new(self.amount_minor, &self.currency)
    }
}

/// The select list of [`Payment`] (a macro, so SQL constants can splice it).
macro_rules! payment_columns {
    () => {
        "id, gateway, external_id, order_reference, order_id, subscriber_id, channel_id, \
         amount_minor, currency, paid_at, outcome, reason, created_at"
    };
}

/// The columns of [`Payment`], for queries elsewhere that read payments.
pub const COLUMNS: &str = payment_columns!();

/// A stored payment as the API shows it. `order_reference` is shown too (beyond API.md's list)
/// so staff can reconcile an `unknown_order` payment, whose order fields are null.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "gateway": "acme", "external_id": "pay_1",
    "order_reference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21", "order_id": 1, "subscriber_id": 1,
    "channel_id": 1, "amount_minor": 19900, "currency": "UAH", "paid_at": "2025-01-01T10:05:00Z",
    "outcome": "applied", "reason": null, "created_at": "2025-01-01T10:05:01Z"}))]
pub struct Payment {
    pub id: i64,
    #[schema(value_type = String)]
    pub gateway: Gateway,
    pub external_id: String,
    pub order_reference: Option<String>,
    pub order_id: Option<i64>,
    pub subscriber_id: Option<i32>,
    pub channel_id: Option<i32>,
    pub amount_minor: i64,
    pub currency: String,
    pub paid_at: DateTime<Utc>,
    pub outcome: Outcome,
    /// Why it was not applied (null when applied).
    pub reason: Option<Reason>,
    pub created_at: DateTime<Utc>,
}

impl Payment {
    /// The money paid, as stored.
    pub fn money(&self) -> Money {
        Money::new(self.amount_minor, &self.currency)
    }
}

impl FromRow for Payment {
    const COLUMNS: &'static str = payment_columns!();

    fn from_row(r: &Row) -> Result<Payment, tokio_postgres::Error> {
        Ok(Payment {
            id: r.try_get("id")?,
            gateway: r.try_get("gateway")?,
            external_id: r.try_get("external_id")?,
            order_reference: r.try_get("order_reference")?,
            order_id: r.try_get("order_id")?,
            subscriber_id: r.try_get("subscriber_id")?,
            channel_id: r.try_get("channel_id")?,
            amount_minor: r.try_get("amount_minor")?,
            currency: r.try_get("currency")?,
            paid_at: r.try_get("paid_at")?,
            outcome: r.try_get("outcome")?,
            reason: r.try_get("reason")?,
            created_at: r.try_get("created_at")?,
        })
    }
}

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub outcome: Option<Outcome>,
    pub order_id: Option<i64>,
    pub subscriber_id: Option<i32>,
    /// Stored at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Stored before this time.
    pub to: Option<DateTime<Utc>>,
}

const LIST_SQL: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payments
     WHERE id > $1
       AND ($2::text IS NULL OR outcome = $2::text)
       AND ($3::bigint IS NULL OR order_id = $3)
       AND ($4::integer IS NULL OR subscriber_id = $4)
       AND ($6::timestamptz IS NULL OR created_at >= $6)
       AND ($7::timestamptz IS NULL OR created_at < $7)
     ORDER BY id LIMIT $5"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payments WHERE id = $1"
);

/// Up to `limit` payments with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl deadpool_postgres::GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Payment>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.outcome,
            &filter.order_id,
            &filter.subscriber_id,
            &limit,
            &filter.from,
            &filter.to,
        ],
    )
    .await
}

/// The payment with this id, if any.
pub async fn get(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<Option<Payment>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// What [`apply_payment`] did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Applied {
    /// True when this (gateway, external_id) was already stored: nothing changed, and `payment`
    /// is the stored row (even if this delivery's other fields differ).
    pub duplicate: bool,
    pub payment: Payment,
    /// The membership of the payment's (subscriber, channel) — for a bundle, of the order's own
    /// channel (the plan's first; the others are extended alike) — as it stands after this call:
    /// the extended one when applied; the untouched current one (if any) when a check failed or
    /// for a duplicate; `None` when there is no membership or the order is unknown.
    pub membership: Option<Membership>,
}

crate::text_enum! {
    /// What became of a stored payment: the `outcome` column.
    pub enum Outcome {
        /// It paid its order and extended the membership.
        Applied => "applied",
        /// A check failed and we cannot refund it ourselves: a human decides.
        NeedsReview => "needs_review",
        /// A Telegram Stars payment that failed on the seat or paid a paid order: the effects
        /// worker refunds it.
        RefundPending => "refund_pending",
        /// Refunded (confirmed by Telegram).
        Refunded => "refunded",
        /// Telegram refused the refund: a human decides.
        RefundFailed => "refund_failed",
        /// The buyer disputed the charge with their bank (a Stripe chargeback): what it bought
        /// was taken back, as for a refund ([`super::disputes`]).
        Disputed => "disputed",
    }
}

/// What door 3 knows of a Telegram Stars charge's place in a subscription
/// (`successful_payment.is_recurring`, `is_first_recurring`, `subscription_expiration_date`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recurrence {
    /// Not known (doors 1 and 2, the Stars reconcile): a Stars charge of a paid order whose
    /// subscription it did not start, made in the second half of that subscription's period or
    /// later, is taken as a renewal (Telegram charges a renewal at the subscription's date; an
    /// earlier charge is another subscription's first), and a Stars payment of a `recurring`
    /// channel that is not a renewal is a subscription's first charge — as door 3 would
    /// classify the same charge.
    #[default]
    Unknown,
    /// A one-off payment.
    OneOff,
    /// The first charge of a subscription, renewing at the given time.
    First(Option<DateTime<Utc>>),
    /// A renewal charge, renewing again at the given time.
    Renewal(Option<DateTime<Utc>>),
}

impl Recurrence {
    /// Telegram's `subscription_expiration_date`, when the door had one.
    fn expires_at(self) -> Option<DateTime<Utc>> {
        match self {
            Recurrence::First(t) | Recurrence::Renewal(t) => t,
            Recurrence::Unknown | Recurrence::OneOff => None,
        }
    }
}

/// The outcome of a payment failing `reason`: only Telegram Stars failing on the seat, a
/// double payment or a payment for lifetime access the buyer already has are refunded by us
/// (`refund_pending`); everything else needs a human.
pub fn outcome_for(gateway: &Gateway, reason: Option<Reason>) -> Outcome {
    match reason {
        None => Outcome::Applied,
        Some(
            Reason::HoldExpired | Reason::NoSeat | Reason::AlreadyPaid | Reason::AlreadyLifetime,
        ) if *gateway == Gateway::TelegramStars => Outcome::RefundPending,
        Some(_) => Outcome::NeedsReview,
    }
}

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
async fn apply_with<F>(
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
type Difference = (&'static str, String, String);

/// The fields a repeat delivery of a stored payment should carry unchanged (amount, currency,
/// order reference) and does not. Pure; an empty list for a faithful repeat.
fn redelivery_differences(delivered: &NormalizedPayment, stored: &Payment) -> Vec<Difference> {
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
fn warn_if_redelivery_differs(delivered: &NormalizedPayment, stored: &Payment) {
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
struct Found {
    order: Option<LockedOrder>,
    subscription: Option<StarSubscription>,
    renewal: bool,
}

/// The body of [`apply_payment`]'s transaction, in API.md's steps: lock (1), check (3, decided
/// first as reads under the locks, so the row is inserted once, final), store once (2), and
/// for a payment that passed, apply it (4).
async fn apply_in(
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
/// a name: its read, outside a transaction, then the pair lock and the verified write, sent
/// between `BEGIN` and `COMMIT` in one pipeline. `benches/payments` replays these very
/// constants with pgbench (its "current transaction" reference), so that replay cannot drift
/// from the code. Not an API.
#[doc(hidden)]
pub fn new_payment_statements() -> [(&'static str, &'static str); 3] {
    fast::statements()
}

/// What the transaction's first statement found ([`stored_or_lock_pair`]).
enum Start {
    /// This (gateway, external_id) is stored: a repeat, answered from the stored row.
    Stored(Payment),
    /// A new payment; the pairs of the order it names (`None`: no such order), whose first
    /// pair lock is now held.
    Order(Option<seats::Pairs>),
}

const STORED_OR_PAIR_SQL: &str = concat!(
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
async fn stored_or_lock_pair(
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

/// Step 1: pairs (the first taken by [`stored_or_lock_pair`], a bundle's further ones in
/// ascending channel id) → order → channels (key share; no key update if seat-limited) → the
/// order's subscription, if any. An unknown reference needs none.
async fn lock(
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

/// Step 3: the first failed check, if any (a renewal is checked against its subscription).
async fn check_found(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    found: &Found,
) -> Result<Option<Reason>, ApiError> {
    match &found.order {
        None => Ok(Some(Reason::UnknownOrder)),
        Some(l) if found.renewal => check_renewal(tx, p, l, found.subscription.as_ref()).await,
        Some(l) => check(tx, p, l).await,
    }
}

/// The columns a payment is inserted with (beside its id), in the order of [`INSERT_SQL`]'s
/// values; the fast path's insert ([`super::fast`]) lists them alike.
macro_rules! insert_columns {
    () => {
        "gateway, external_id, order_reference, order_id, subscriber_id, channel_id, payer, \
         amount_minor, currency, paid_at, outcome, reason, renewal, subscription_expires_at"
    };
}

const INSERT_SQL: &str = concat!(
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
     ), to_mark AS (SELECT order_id, paid_at FROM inserted WHERE $15::boolean), ",
    orders::mark_paid_cte!(),
    "
     SELECT ",
    payment_columns!(),
    " FROM inserted"
);

/// Step 2: the dedupe insert, with the final outcome. Of all deliveries of this payment,
/// exactly one inserts (`Some`); the others find it stored (`None`). The same statement marks
/// the order paid when the payment inserted is an applied first payment of it (step 4 for the
/// order: the hold stops counting), so a payment and its order are written in one round trip.
async fn store(
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
pub(super) struct Stored {
    pub outcome: Outcome,
    pub reason: Option<Reason>,
    /// A renewal charge of a Stars subscription.
    pub renewal: bool,
    pub subscription_expires_at: Option<DateTime<Utc>>,
    /// Mark `order` paid in the same statement, if this delivery is inserted.
    pub pays_order: bool,
}

/// The dedupe insert of one delivery naming `order` (if found), shared by the payment core and
/// the Stars reconcile's record of a charge refunded elsewhere ([`super::refunds`]): `Some`
/// when it inserted, `None` when this (gateway, external_id) is already stored.
pub(super) async fn insert(
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
async fn apply(
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
    if let Some(s) = started
        && let Some(m) = rejudge_renewals(tx, locked, s).await?
    {
        membership = m;
    }
    Ok(membership)
}

/// Extends the membership of every channel of the locked order's plan by the plan's term
/// (read under the locks, at apply time), in ascending channel id (the order of their pair and
/// channel locks), each with its own event and grant or receipt effect
/// ([`memberships::extend_at_least`]); returns the membership of the order's own channel, the
/// one the payment's answer shows. A plan of one channel extends one membership.
async fn extend_every_channel(
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

/// The end of a subscription charge's membership at the earliest: the subscription's next
/// renewal plus [`star_subscriptions::SLACK_SECS`].
fn slack_after(renews_at: DateTime<Utc>) -> DateTime<Utc> {
    renews_at + chrono::Duration::seconds(star_subscriptions::SLACK_SECS)
}

/// Stops the subscription a refused charge belongs to, in the payment's transaction, and says
/// whether it did (the buyer's notice says so): a refused renewal cancels the order's active
/// subscription — unless its payer is not the subscription's buyer, or no subscription is known
/// yet (`unknown_subscription`: judged again when its first charge arrives) or it is cancelled
/// already; a refused first charge of a subscription gets a row of its own, cancelled from the
/// start. Either way an `editUserStarSubscription(is_canceled = true)` effect is enqueued, so
/// Telegram stops charging for access subgate did not give. `user`: whom to tell Telegram about
/// (the payer, else the order's buyer).
async fn stop_subscription(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    recurrence: Recurrence,
    found: &Found,
    reason: Reason,
    user: Option<i64>,
) -> Result<bool, ApiError> {
    let Some(locked) = &found.order else {
        return Ok(false);
    };
    if found.renewal {
        let Some(s) = found.subscription.as_ref().filter(|s| s.is_active()) else {
            return Ok(false);
        };
        if reason == Reason::PayerMismatch {
            return Ok(false);
        }
        star_subscriptions::stop(tx, s, reason).await?;
        return Ok(true);
    }
    if !starts_subscription(p, recurrence, locked) {
        return Ok(false);
    }
    let Some(user) = user.filter(|u| *u > 0) else {
        return Ok(false);
    };
    let charge = star_subscriptions::Charge {
        charge_id: &p.external_id,
        expires_at: recurrence.expires_at(),
        paid_at: p.paid_at,
    };
    star_subscriptions::refused(tx, locked.order.id, charge, reason, user).await?;
    Ok(true)
}

const EARLIER_RENEWALS_SQL: &str = concat!(
    "SELECT ",
    payment_columns!(),
    ", payer, subscription_expires_at FROM payments
     WHERE order_id = $1 AND gateway = $2 AND renewal AND outcome = $3 AND reason = $4
     ORDER BY paid_at, id"
);
const REJUDGED_SQL: &str = "UPDATE payments
     SET outcome = $2, reason = $3, updated_at = statement_timestamp()
     WHERE id = $1";

/// When a first charge starts subscription `s`: the renewals of its order that arrived before
/// (stored `needs_review`, `unknown_subscription`: no subscription was known then — the first
/// charge's update came late, or only through the reconcile) are judged again, oldest first, as
/// renewals of `s`. One that passes now is applied in place (the same payment row, so a repeat
/// delivery or the reconcile still finds it stored and changes nothing) and extends the
/// membership; one that fails keeps `needs_review` with its new reason and stops the
/// subscription like any refused renewal. Returns the membership after the last one applied.
/// The caller holds the order's locks and has just applied the first charge; the renewals are
/// read without a row lock, since only the payment core writes a stored `needs_review` payment,
/// under its order's lock.
async fn rejudge_renewals(
    tx: &Transaction<'_>,
    locked: &LockedOrder,
    s: StarSubscription,
) -> Result<Option<Membership>, ApiError> {
    let rows = db::rows(
        tx,
        EARLIER_RENEWALS_SQL,
        &[
            &locked.order.id,
            &Gateway::TelegramStars,
            &Outcome::NeedsReview,
            &Reason::UnknownSubscription,
        ],
    )
    .await?;
    let mut subscription = s;
    let mut membership = None;
    // The first charge marked the order paid; the locked copy predates that.
    let mut paid = locked.clone();
    paid.order.status = orders::Status::Paid;
    for row in rows {
        let earlier = Payment::from_row(&row)?;
        let payer: Option<String> = row.try_get("payer")?;
        let p = NormalizedPayment {
            gateway: earlier.gateway.clone(),
            external_id: earlier.external_id.clone(),
            order_reference: earlier.order_reference.clone().unwrap_or_default(),
            amount_minor: earlier.amount_minor,
            currency: earlier.currency.clone(),
            paid_at: earlier.paid_at,
            payer_telegram_id: payer.and_then(|p| p.parse().ok()),
        };
        let expires_at: Option<DateTime<Utc>> = row.try_get("subscription_expires_at")?;
        let reason = check_renewal(tx, &p, &paid, Some(&subscription)).await?;
        let outcome = if reason.is_some() {
            Outcome::NeedsReview
        } else {
            Outcome::Applied
        };
        db::execute(tx, REJUDGED_SQL, &[&earlier.id, &outcome, &reason]).await?;
        tracing::info!(
            payment_id = earlier.id,
            subscription_id = subscription.id,
            outcome = %outcome,
            reason = ?reason.map(Reason::as_str),
            "renewal that arrived before its subscription judged again"
        );
        if let Some(reason) = reason {
            if subscription.is_active() && reason != Reason::PayerMismatch {
                subscription = star_subscriptions::stop(tx, &subscription, reason).await?;
            }
            continue;
        }
        let charge = star_subscriptions::Charge {
            charge_id: &p.external_id,
            expires_at,
            paid_at: p.paid_at,
        };
        let renews_at = star_subscriptions::renewed(tx, subscription.id, charge).await?;
        subscription.expires_at = renews_at;
        let m = extend_every_channel(
            tx,
            locked,
            Cause::Payment(earlier.id),
            Some(slack_after(renews_at)),
        )
        .await?;
        membership = Some(m);
    }
    Ok(membership)
}

/// Whether a charge is a subscription's renewal: the door says so, or (door unknown) it is a
/// Stars charge of a paid order whose subscription another charge started.
fn is_renewal(
    p: &NormalizedPayment,
    recurrence: Recurrence,
    locked: Option<&LockedOrder>,
    subscription: Option<&StarSubscription>,
) -> bool {
    match recurrence {
        Recurrence::Renewal(_) => true,
        Recurrence::First(_) | Recurrence::OneOff => false,
        Recurrence::Unknown => {
            p.gateway == Gateway::TelegramStars
                && locked.is_some_and(|l| l.order.status == orders::Status::Paid)
                && subscription.is_some_and(|s| {
                    s.charge_id != p.external_id
                        && p.paid_at
                            >= s.expires_at
                                - chrono::Duration::seconds(star_subscriptions::PERIOD_SECS / 2)
                })
        }
    }
}

/// Whether an applied first payment starts a Stars subscription: the door says so, or (door
/// unknown, e.g. the reconcile of a missed update) it is a Stars payment of a `recurring`
/// plan, whose invoices are subscription links.
fn starts_subscription(
    p: &NormalizedPayment,
    recurrence: Recurrence,
    locked: &LockedOrder,
) -> bool {
    match recurrence {
        Recurrence::First(_) => true,
        Recurrence::OneOff | Recurrence::Renewal(_) => false,
        Recurrence::Unknown if p.gateway != Gateway::TelegramStars => false,
        Recurrence::Unknown => locked.plan.recurring,
    }
}

/// The checks of a renewal charge, in order; the first failure wins: the order started a
/// subscription (and is paid), which is not cancelled; currency, amount and payer match; every
/// channel of the plan is active; the buyer's access is not lifetime by now; in every
/// seat-limited one the buyer is still a member (or its subscription still holds the seat) or a
/// seat is free.
async fn check_renewal(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    l: &LockedOrder,
    subscription: Option<&StarSubscription>,
) -> Result<Option<Reason>, ApiError> {
    let o = &l.order;
    let Some(s) = subscription.filter(|_| o.status == orders::Status::Paid) else {
        return Ok(Some(Reason::UnknownSubscription));
    };
    if !s.is_active() {
        return Ok(Some(Reason::SubscriptionCancelled));
    }
    if let Some(reason) = mismatch(p, l) {
        return Ok(Some(reason));
    }
    if !l.channels_active() {
        return Ok(Some(Reason::ChannelInactive));
    }
    // A renewal of access that is lifetime by now would buy nothing (and stops the
    // subscription, like any refused renewal).
    if seats::held_for_life(l) {
        return Ok(Some(Reason::AlreadyLifetime));
    }
    // No hold: the order's hold (if any) belonged to its first payment. A live member renews
    // without a seat, and so does a buyer whose subscription still holds its seat (until its
    // renewal date plus a day, in every channel of its plan); someone whose membership already
    // ended needs a free one — in every seat-limited channel of the plan, or the renewal
    // extends none of them.
    for channel in &l.channels {
        let Some(limit) = channel.terms.seat_limit else {
            continue;
        };
        if !seats::is_live_member(tx, o.subscriber(), channel.id).await?
            && seats::seats_taken(tx, channel.id.0).await? >= i64::from(limit)
        {
            return Ok(Some(Reason::NoSeat));
        }
    }
    Ok(None)
}

/// The payment against its order, in API.md's order: currency, amount, payer (when the door
/// knows it).
fn mismatch(p: &NormalizedPayment, l: &LockedOrder) -> Option<Reason> {
    match p.money().mismatch(&l.order.price()) {
        Some(Mismatch::Currency) => return Some(Reason::CurrencyMismatch),
        Some(Mismatch::Amount) => return Some(Reason::AmountMismatch),
        None => {}
    }
    if p.payer_telegram_id
        .is_some_and(|payer| payer != l.subscriber_telegram_id)
    {
        return Some(Reason::PayerMismatch);
    }
    None
}

/// The checks of API.md step 3 against a locked order, in order; the first failure wins. After
/// the channel's: the buyer has no live lifetime access to the order's channel already
/// (`already_lifetime`), then the seat.
async fn check(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    l: &LockedOrder,
) -> Result<Option<Reason>, ApiError> {
    if let Some(reason) = check_order(p, l) {
        return Ok(Some(reason));
    }
    let o = &l.order;
    // A promo price is paid only while the order holds its code's use, or may take it again.
    if !promo_codes::use_still_held(tx, o.promo_use()).await? {
        return Ok(Some(Reason::PromoExhausted));
    }
    Ok(match seats::seat_check(tx, l).await? {
        SeatCheck::NotNeeded | SeatCheck::HoldValid | SeatCheck::Free => None,
        SeatCheck::HoldExpired => Some(Reason::HoldExpired),
        SeatCheck::Full => Some(Reason::NoSeat),
    })
}

/// The checks of [`check`] that read nothing but the order as locked, in order (the promo
/// code's use and the seat come after them, and read the database): cancelled, currency,
/// amount, payer, already paid, a channel inactive, lifetime access held already.
pub(super) fn check_order(p: &NormalizedPayment, l: &LockedOrder) -> Option<Reason> {
    let o = &l.order;
    if o.status == orders::Status::Cancelled {
        return Some(Reason::OrderCancelled);
    }
    if let Some(reason) = mismatch(p, l) {
        return Some(reason);
    }
    // Duplicates of the payment that paid it never get here (they conflict on insert), so a
    // paid order means another payment paid it.
    if o.status == orders::Status::Paid {
        return Some(Reason::AlreadyPaid);
    }
    if !l.channels_active() {
        return Some(Reason::ChannelInactive);
    }
    // The buyer already has lifetime access: the payment would buy nothing (under the pair
    // lock, so no grant can come between this and the extension).
    if seats::held_for_life(l) {
        return Some(Reason::AlreadyLifetime);
    }
    None
}

const STORED_SQL: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payments WHERE gateway = $1 AND external_id = $2"
);

/// The answer to a repeat delivery: the stored payment, and its pair's current membership;
/// `None` when this (gateway, external_id) is not stored. Used for a repeat the fast path's read
/// found stored, and for one that raced the first delivery on the locked path: after the
/// insert found the conflict, the stored row is committed (`ON CONFLICT DO NOTHING` waited for
/// its inserter), so this new statement sees it.
pub(super) async fn stored(
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
async fn with_membership(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn delivered() -> NormalizedPayment {
        NormalizedPayment {
            gateway: "acme".into(),
            external_id: "pay_1".into(),
            order_reference: "ord_a".into(),
            amount_minor: 19900,
            currency: "UAH".into(),
            paid_at: Utc::now(),
            payer_telegram_id: None,
        }
    }

    fn stored() -> Payment {
        Payment {
            id: 7,
            gateway: "acme".into(),
            external_id: "pay_1".into(),
            order_reference: Some("ord_a".into()),
            order_id: Some(1),
            subscriber_id: Some(1),
            channel_id: Some(1),
            amount_minor: 19900,
            currency: "UAH".into(),
            paid_at: Utc::now(),
            outcome: Outcome::Applied,
            reason: None,
            created_at: Utc::now(),
        }
    }

    #[test]
    fn only_amount_currency_and_order_reference_are_compared() {
        let mut p = delivered();
        // paid_at and the payer are not compared: gateways re-stamp deliveries.
        p.paid_at = Utc::now() - chrono::Duration::days(1);
        p.payer_telegram_id = Some(5);
        assert!(redelivery_differences(&p, &stored()).is_empty());
    }

    #[test]
    fn each_differing_field_is_named_with_both_values() {
        let mut p = delivered();
        p.amount_minor = 1;
        p.currency = "USD".into();
        p.order_reference = "ord_b".into();
        assert_eq!(
            redelivery_differences(&p, &stored()),
            vec![
                ("amount_minor", "19900".to_string(), "1".to_string()),
                ("currency", "UAH".to_string(), "USD".to_string()),
                ("order_reference", "ord_a".to_string(), "ord_b".to_string()),
            ]
        );
        let mut p = delivered();
        p.currency = "EUR".into();
        assert_eq!(
            redelivery_differences(&p, &stored()),
            vec![("currency", "UAH".to_string(), "EUR".to_string())]
        );
    }
}
