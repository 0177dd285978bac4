//! The payment core: the one transaction that turns a normalized payment into access, exactly
//! once. Every door (signed webhook, WayForPay, Telegram Stars) authenticates its caller, builds
//! a [`NormalizedPayment`] and calls [`apply_payment`]; no door touches order, membership or
//! payment SQL itself.
//!
//! Exactly once rests on two things, both inside one transaction:
//! - the lock order (advisory pair lock → order `FOR UPDATE` → seat-limited channel
//!   `FOR NO KEY UPDATE` → membership; see `docs/locking.md`), so two payments of one order,
//!   a checkout, a manual grant and the sweep never interleave on the same membership or seat;
//! - `INSERT … ON CONFLICT (gateway, external_id) DO NOTHING`, issued after the locks: of any
//!   number of deliveries of one payment, exactly one inserts; every other one finds the stored
//!   row, answers with it and changes nothing.
//!
//! The checks (API.md order: unknown order, cancelled, currency, amount, payer, already paid,
//! channel inactive, seat) are reads under those locks, so they are decided first and the
//! payment row is inserted once, with its final outcome. A payment that fails a check is still
//! kept (money is never lost), grants nothing, and its buyer is told in one message (an outbox
//! effect in the same transaction).
//!
//! A renewal charge of a Telegram Stars subscription ([`star_subscriptions`]) is one more
//! payment of an order that is already paid: it is checked against the subscription instead
//! (known, not cancelled, same amount, currency and payer, channel active, a seat) and extends
//! the membership by one period. It is never `already_paid` and never refunded: a renewal that
//! fails a check is `needs_review`.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde::Serialize;
use tokio_postgres::Row;

use crate::{
    error::ApiError,
    memberships::{self, Cause, Membership},
    payments::{
        seats::{self, LockedOrder, SeatCheck},
        star_subscriptions::{self, StarSubscription},
    },
    state::AppState,
};

/// The gateway name of Telegram Stars payments, the only ones we can refund ourselves.
pub const TELEGRAM_STARS: &str = "telegram_stars";

/// A payment as every door hands it to [`apply_payment`], after authenticating its sender.
#[derive(Debug, Clone)]
pub struct NormalizedPayment {
    /// `[a-z0-9_-]{1,32}`: `wayforpay`, `telegram_stars`, or a door-1 gateway name.
    pub gateway: String,
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

/// The columns of [`Payment::from_row`], in order.
pub const COLUMNS: &str = "id, gateway, external_id, order_reference, order_id, subscriber_id, \
     channel_id, amount_minor, currency, paid_at, outcome, reason, created_at";

/// A stored payment as the API shows it. `order_reference` is shown too (beyond API.md's list)
/// so staff can reconcile an `unknown_order` payment, whose order fields are null.
#[derive(Debug, Clone, Serialize)]
pub struct Payment {
    pub id: i64,
    pub gateway: String,
    pub external_id: String,
    pub order_reference: Option<String>,
    pub order_id: Option<i64>,
    pub subscriber_id: Option<i32>,
    pub channel_id: Option<i32>,
    pub amount_minor: i64,
    pub currency: String,
    pub paid_at: DateTime<Utc>,
    /// `applied`, `needs_review`, `refund_pending`, `refunded` or `refund_failed`.
    pub outcome: String,
    /// Why it was not applied (null when applied).
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl Payment {
    /// Reads a row selected with [`COLUMNS`].
    pub fn from_row(r: &Row) -> Payment {
        Payment {
            id: r.get(0),
            gateway: r.get(1),
            external_id: r.get(2),
            order_reference: r.get(3),
            order_id: r.get(4),
            subscriber_id: r.get(5),
            channel_id: r.get(6),
            amount_minor: r.get(7),
            currency: r.get(8),
            paid_at: r.get(9),
            outcome: r.get(10),
            reason: r.get(11),
            created_at: r.get(12),
        }
    }
}

/// What [`apply_payment`] did.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    /// True when this (gateway, external_id) was already stored: nothing changed, and `payment`
    /// is the stored row (even if this delivery's other fields differ).
    pub duplicate: bool,
    pub payment: Payment,
    /// The membership of the payment's (subscriber, channel) as it stands after this call:
    /// the extended one when applied; the untouched current one (if any) when a check failed or
    /// for a duplicate; `None` when there is no membership or the order is unknown.
    pub membership: Option<Membership>,
}

/// Why a payment was not applied: the `reason` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    UnknownOrder,
    OrderCancelled,
    CurrencyMismatch,
    AmountMismatch,
    PayerMismatch,
    AlreadyPaid,
    ChannelInactive,
    HoldExpired,
    NoSeat,
    /// A renewal charge of an order that started no subscription (or is not paid).
    UnknownSubscription,
    /// A renewal charge of a subscription staff or the buyer cancelled.
    SubscriptionCancelled,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::UnknownOrder => "unknown_order",
            Reason::OrderCancelled => "order_cancelled",
            Reason::CurrencyMismatch => "currency_mismatch",
            Reason::AmountMismatch => "amount_mismatch",
            Reason::PayerMismatch => "payer_mismatch",
            Reason::AlreadyPaid => "already_paid",
            Reason::ChannelInactive => "channel_inactive",
            Reason::HoldExpired => "hold_expired",
            Reason::NoSeat => "no_seat",
            Reason::UnknownSubscription => "unknown_subscription",
            Reason::SubscriptionCancelled => "subscription_cancelled",
        }
    }
}

/// What door 3 knows of a Telegram Stars charge's place in a subscription
/// (`successful_payment.is_recurring`, `is_first_recurring`, `subscription_expiration_date`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recurrence {
    /// Not known (doors 1 and 2, the Stars reconcile): a Stars charge of a paid order whose
    /// subscription it did not start is taken as a renewal, and a Stars payment of a pending
    /// order of a `recurring` channel starts a subscription.
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

/// The outcome of a payment failing `reason`: only Telegram Stars failing on the seat or a
/// double payment are refunded by us (`refund_pending`); everything else needs a human.
pub fn outcome_for(gateway: &str, reason: Option<Reason>) -> &'static str {
    match reason {
        None => "applied",
        Some(Reason::HoldExpired | Reason::NoSeat | Reason::AlreadyPaid)
            if gateway == TELEGRAM_STARS =>
        {
            "refund_pending"
        }
        Some(_) => "needs_review",
    }
}

/// Applies one payment in one transaction (API.md "Payment ingestion" 1–4): locks in the lock
/// order, checks against the order, stores the payment once with its outcome, and on success
/// marks the order paid and extends the membership by the channel's billing period from
/// `GREATEST(current expiry, database now)`; `paid_at` is kept as reported (a future one
/// clamped to now) on the payment and the order, but never moves the term. A repeat of a stored
/// (gateway, external_id) changes nothing and returns the stored payment with
/// `duplicate: true` (a repeat whose amount, currency or order reference differs is logged as a
/// warning). Deadlock victims are run again by [`crate::transaction!`]; a failure is an
/// `ApiError` and nothing is stored.
pub async fn apply_payment(state: &AppState, p: NormalizedPayment) -> Result<Applied, ApiError> {
    apply_payment_as(state, p, Recurrence::Unknown).await
}

/// [`apply_payment`] of a charge whose place in a Stars subscription the door knows (door 3).
pub async fn apply_payment_as(
    state: &AppState,
    p: NormalizedPayment,
    recurrence: Recurrence,
) -> Result<Applied, ApiError> {
    let p = &p;
    let applied = crate::transaction!(state.db, |tx| { apply_in(tx, p, recurrence).await })?;
    if applied.duplicate {
        warn_if_redelivery_differs(p, &applied.payment);
    }
    tracing::info!(
        payment_id = applied.payment.id,
        gateway = %applied.payment.gateway,
        external_id = %applied.payment.external_id,
        order_id = ?applied.payment.order_id,
        outcome = %applied.payment.outcome,
        reason = ?applied.payment.reason,
        membership_id = ?applied.membership.as_ref().map(|m| m.id),
        duplicate = applied.duplicate,
        "payment ingested"
    );
    crate::metrics::payment(&applied);
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
            p.gateway == TELEGRAM_STARS
                && locked.is_some_and(|l| l.order.status == "paid")
                && subscription.is_some_and(|s| s.charge_id != p.external_id)
        }
    }
}

/// The body of [`apply_payment`]'s transaction.
async fn apply_in(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    recurrence: Recurrence,
) -> Result<Applied, ApiError> {
    // 1. Locks: pair → order → channel (if seat-limited) → the order's subscription, if any.
    // An unknown reference needs none.
    let locked = seats::lock_order_by_reference(tx, &p.order_reference).await?;
    let subscription = match &locked {
        Some(l) => star_subscriptions::lock_of_order(tx, l.order.id).await?,
        None => None,
    };
    let renewal = is_renewal(p, recurrence, locked.as_ref(), subscription.as_ref());

    // 3. (decided before 2., as reads under the locks, so the row is inserted once, final.)
    let reason = match &locked {
        None => Some(Reason::UnknownOrder),
        Some(l) if renewal => check_renewal(tx, p, l, subscription.as_ref()).await?,
        Some(l) => check(tx, p, l).await?,
    };
    // A renewal is never refunded by us: Telegram charged a subscription the buyer keeps.
    let outcome = match reason {
        Some(_) if renewal => "needs_review",
        _ => outcome_for(&p.gateway, reason),
    };

    // 2. Dedupe: of all deliveries of this payment, exactly one inserts.
    let order = locked.as_ref().map(|l| &l.order);
    let inserted = tx
        .query_opt(
            &format!(
                "INSERT INTO payments (gateway, external_id, order_reference, order_id,
                     subscriber_id, channel_id, payer, amount_minor, currency, paid_at,
                     outcome, reason, renewal, subscription_expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
                         LEAST($10::timestamptz, statement_timestamp()), $11, $12, $13, $14)
                 ON CONFLICT (gateway, external_id) DO NOTHING
                 RETURNING {COLUMNS}"
            ),
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
                &outcome,
                &reason.map(Reason::as_str),
                &renewal,
                &recurrence.expires_at(),
            ],
        )
        .await?;
    let Some(row) = inserted else {
        return duplicate(tx, p).await;
    };
    let payment = Payment::from_row(&row);
    if reason.is_some() {
        // The payer, when the door knows them; else the order's buyer.
        let user = p
            .payer_telegram_id
            .or(locked.as_ref().map(|l| l.subscriber_telegram_id));
        crate::effects::bot::enqueue_payment_notice(&**tx, &payment, user).await?;
    }

    let Some(locked) = locked else {
        return Ok(Applied {
            duplicate: false,
            payment,
            membership: None,
        });
    };
    let (subscriber_id, channel_id) = (locked.order.subscriber_id, locked.order.channel_id);
    if reason.is_some() {
        let membership = current_membership(tx, subscriber_id, channel_id).await?;
        return Ok(Applied {
            duplicate: false,
            payment,
            membership,
        });
    }

    if renewal {
        // 4'. A renewal: the order stays paid, the membership is extended by one more period.
        let (membership, _) = memberships::extend(
            tx,
            subscriber_id,
            channel_id,
            locked.channel.billing_period_days,
            Cause::Payment(payment.id),
        )
        .await?;
        if let Some(s) = &subscription {
            star_subscriptions::renewed(tx, s.id, recurrence.expires_at()).await?;
        }
        return Ok(Applied {
            duplicate: false,
            payment,
            membership: Some(membership),
        });
    }

    // 4. Success: the order is paid (its hold stops counting), the membership extended.
    tx.execute(
        "UPDATE orders SET status = 'paid', paid_at = $2 WHERE id = $1",
        &[&locked.order.id, &payment.paid_at],
    )
    .await?;
    // The term starts now (or at the current expiry), not at `paid_at`: API.md step 4.
    let (membership, _) = memberships::extend(
        tx,
        subscriber_id,
        channel_id,
        locked.channel.billing_period_days,
        Cause::Payment(payment.id),
    )
    .await?;
    if starts_subscription(tx, p, recurrence, &locked).await? && subscription.is_none() {
        star_subscriptions::start(tx, locked.order.id, &p.external_id, recurrence.expires_at())
            .await?;
    }
    Ok(Applied {
        duplicate: false,
        payment,
        membership: Some(membership),
    })
}

/// Whether an applied first payment starts a Stars subscription: the door says so, or (door
/// unknown, e.g. the reconcile of a missed update) it is a Stars payment of a `recurring`
/// channel, whose invoices are subscription links.
async fn starts_subscription(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    recurrence: Recurrence,
    locked: &LockedOrder,
) -> Result<bool, ApiError> {
    Ok(match recurrence {
        Recurrence::First(_) => true,
        Recurrence::OneOff | Recurrence::Renewal(_) => false,
        Recurrence::Unknown if p.gateway != TELEGRAM_STARS => false,
        Recurrence::Unknown => tx
            .query_one(
                "SELECT recurring FROM channels WHERE id = $1",
                &[&locked.order.channel_id],
            )
            .await?
            .get(0),
    })
}

/// The checks of a renewal charge, in order; the first failure wins: the order started a
/// subscription (and is paid), which is not cancelled; currency, amount and payer match; the
/// channel is active; the buyer is still a member or a seat is free.
async fn check_renewal(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    l: &LockedOrder,
    subscription: Option<&StarSubscription>,
) -> Result<Option<Reason>, ApiError> {
    let o = &l.order;
    let Some(s) = subscription.filter(|_| o.status == "paid") else {
        return Ok(Some(Reason::UnknownSubscription));
    };
    if !s.is_active() {
        return Ok(Some(Reason::SubscriptionCancelled));
    }
    if let Some(reason) = mismatch(p, l) {
        return Ok(Some(reason));
    }
    if !l.channel.active {
        return Ok(Some(Reason::ChannelInactive));
    }
    // No hold: the order's hold (if any) belonged to its first payment. A member renews
    // without a seat; someone whose membership already ended needs a free one.
    let Some(limit) = l.channel.seat_limit else {
        return Ok(None);
    };
    if seats::is_live_member(tx, o.subscriber_id, o.channel_id).await?
        || seats::seats_taken(tx, o.channel_id).await? < i64::from(limit)
    {
        return Ok(None);
    }
    Ok(Some(Reason::NoSeat))
}

/// The payment against its order, in API.md's order: currency, amount, payer (when the door
/// knows it).
fn mismatch(p: &NormalizedPayment, l: &LockedOrder) -> Option<Reason> {
    if p.currency != l.order.currency {
        return Some(Reason::CurrencyMismatch);
    }
    if p.amount_minor != l.order.amount_minor {
        return Some(Reason::AmountMismatch);
    }
    if p.payer_telegram_id
        .is_some_and(|payer| payer != l.subscriber_telegram_id)
    {
        return Some(Reason::PayerMismatch);
    }
    None
}

/// The checks of API.md step 3 against a locked order, in order; the first failure wins.
async fn check(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    l: &LockedOrder,
) -> Result<Option<Reason>, ApiError> {
    let o = &l.order;
    if o.status == "cancelled" {
        return Ok(Some(Reason::OrderCancelled));
    }
    if let Some(reason) = mismatch(p, l) {
        return Ok(Some(reason));
    }
    // Duplicates of the payment that paid it never get here (they conflict on insert), so a
    // paid order means another payment paid it.
    if o.status == "paid" {
        return Ok(Some(Reason::AlreadyPaid));
    }
    if !l.channel.active {
        return Ok(Some(Reason::ChannelInactive));
    }
    Ok(match seats::seat_check(tx, l).await? {
        SeatCheck::NotNeeded | SeatCheck::HoldValid | SeatCheck::Free => None,
        SeatCheck::HoldExpired => Some(Reason::HoldExpired),
        SeatCheck::Full => Some(Reason::NoSeat),
    })
}

/// A repeat delivery: the stored payment, and its pair's current membership. The stored row is
/// committed (`ON CONFLICT DO NOTHING` waited for its inserter), so this new statement sees it.
async fn duplicate(tx: &Transaction<'_>, p: &NormalizedPayment) -> Result<Applied, ApiError> {
    let row = tx
        .query_one(
            &format!("SELECT {COLUMNS} FROM payments WHERE gateway = $1 AND external_id = $2"),
            &[&p.gateway, &p.external_id],
        )
        .await?;
    let payment = Payment::from_row(&row);
    let membership = match (payment.subscriber_id, payment.channel_id) {
        (Some(s), Some(c)) => current_membership(tx, s, c).await?,
        _ => None,
    };
    Ok(Applied {
        duplicate: true,
        payment,
        membership,
    })
}

async fn current_membership(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
) -> Result<Option<Membership>, ApiError> {
    let row = tx
        .query_opt(
            &format!(
                "SELECT {} FROM memberships WHERE subscriber_id = $1 AND channel_id = $2",
                memberships::COLUMNS
            ),
            &[&subscriber_id, &channel_id],
        )
        .await?;
    Ok(row.as_ref().map(Membership::from_row))
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
            outcome: "applied".into(),
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
