//! The payment core: the one transaction that turns a normalized payment into access, exactly
//! once. Every door (signed webhook, WayForPay, Telegram Stars) authenticates its caller, builds
//! a [`NormalizedPayment`] and calls [`apply_payment`]; no door touches order, membership or
//! payment SQL itself.
//!
//! Exactly once rests on two things, both inside one transaction:
//! - the lock order (`docs/locking.md`), so two payments of one order, a checkout, a claim, a
//!   manual grant and the sweep never interleave on the same membership or seat;
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
//! takes the locked path below (the one transaction described above), which
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
    referrals,
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
         amount_minor, currency, affiliate_fee_minor, paid_at, outcome, reason, created_at"
    };
}

/// The columns of [`Payment`], for queries elsewhere that read payments.
pub const COLUMNS: &str = payment_columns!();

// The parts, declared after `payment_columns!` so that their statements can splice it.
mod apply;
mod checks;
mod renewals;

pub use apply::*;
pub(in crate::payments) use checks::*;
use renewals::*;

/// A stored payment as the API shows it. `order_reference` is shown too (beyond API.md's list)
/// so staff can reconcile an `unknown_order` payment, whose order fields are null.
/// `affiliate_fee_minor` is Telegram's affiliate commission on a Stars payment
/// ([`affiliate_fees`](super::affiliate_fees)), 0 until the Stars reconcile records one.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "gateway": "acme", "external_id": "pay_1",
    "order_reference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21", "order_id": 1, "subscriber_id": 1,
    "channel_id": 1, "amount_minor": 19900, "currency": "UAH", "affiliate_fee_minor": 0,
    "paid_at": "2025-01-01T10:05:00Z",
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
    /// Telegram's affiliate commission taken from this Stars payment, in its minor units
    /// (whole Stars); 0 when none (always 0 for other gateways).
    pub affiliate_fee_minor: i64,
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

crate::from_row!(Payment [payment_columns!()] {
    id,
    gateway,
    external_id,
    order_reference,
    order_id,
    subscriber_id,
    channel_id,
    amount_minor,
    currency,
    affiliate_fee_minor,
    paid_at,
    outcome,
    reason,
    created_at,
});

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
        /// was taken back, as for a refund ([`disputes`](super::refunds::disputes)).
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
            affiliate_fee_minor: 0,
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
