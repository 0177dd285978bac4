//! Refunds staff start (`POST /api/payments/{id}/refund`): owns `staff_refunds`, the one
//! request per payment, and decides which payments may be refunded so ([`refusal`], pure).
//!
//! **The request.** One transaction: the payment is read, judged, and a `staff_refunds` row
//! (`ON CONFLICT DO NOTHING`: one per payment, ever) is written with the `gateway_refund`
//! effect that makes the refund (keyed `gateway_refund:{payment}`, so one per payment too). A
//! second request — while the first is in flight, after it is done or failed, or racing it —
//! finds the row and answers it: nothing is queued twice, so nothing is refunded twice. The
//! payment itself is not touched: it stays `applied` (or `needs_review`) until the gateway
//! confirms, and stays so if the gateway refuses.
//!
//! **Where it stands** is its effect's status ([`State`]): `pending` while the worker tries
//! (and retries), `done` once the gateway confirmed and the refund rule ran, `failed` (the dead
//! letter, with the gateway's words) when the gateway refused for good. Sending the effect back
//! from the effects screen (`POST /api/effects/{id}/retry`) makes it `pending` again.
//!
//! **When the gateway confirms** the worker calls [`settle`]: in one transaction, in the lock
//! order of the payment core (the order's pair locks and row first), an `applied` payment
//! becomes `refunded` (`refunded_by_staff`) and what it bought is taken back exactly as a
//! refund reported by the gateway takes it back ([`super::at_gateway`]: the same claim, the same
//! memberships shortened, the same commission reversal); a `needs_review` payment, which
//! bought nothing, becomes `refunded` and nothing else changes. A gateway's later report of the
//! same refund (Stripe `charge.refunded`, WayForPay `Refunded`, the Stars reconcile) finds the
//! payment refunded already and changes nothing; one that came first leaves nothing for
//! [`settle`] to do.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool, Transaction};
use serde::Serialize;

use super::at_gateway::{self, GatewayRefund, TakenBack};
use crate::{
    access::subscribers,
    common::{error::ApiError, vocabulary::Gateway},
    db,
    orders::seats,
    outbox::effects::{self, NewEffect, Payload, payload},
    payments::core::{self, Outcome, Payment, Reason},
};

impl TakenBack {
    /// A refund staff asked for, confirmed by the gateway.
    pub const BY_STAFF: TakenBack = TakenBack {
        outcome: Outcome::Refunded,
        reason: Reason::RefundedByStaff,
    };
}

/// A door that can give a payment's money back, and so how the refund is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// `refundStarPayment`.
    TelegramStars,
    /// Stripe's `POST /v1/refunds` of the payment intent.
    Stripe,
    /// WayForPay's `REFUND` request.
    WayForPay,
    /// Monobank's `POST /api/merchant/invoice/cancel`.
    Monobank,
}

impl Door {
    /// The door of a payment's gateway when it can refund: door 1's gateways (whose money
    /// subgate never held an API for) and Crypto Pay cannot.
    pub fn of(gateway: &Gateway) -> Option<Door> {
        match gateway {
            Gateway::TelegramStars => Some(Door::TelegramStars),
            Gateway::Stripe => Some(Door::Stripe),
            Gateway::WayForPay => Some(Door::WayForPay),
            Gateway::Monobank => Some(Door::Monobank),
            Gateway::CryptoPay | Gateway::Standard(_) => None,
        }
    }
}

/// Why a payment cannot be refunded by staff: a 409 naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Its gateway cannot refund from here (a door-1 gateway, Crypto Pay).
    DoorCannotRefund(Gateway),
    /// It is refunded already (at the gateway, by the Stars reconcile, …).
    AlreadyRefunded,
    /// Its charge is disputed: the bank decides.
    Disputed,
    /// A Stars payment subgate is refunding by itself (it could not be used).
    RefundUnderWay,
    /// That automatic Stars refund failed: it is retried from the effects screen.
    AutomaticRefundFailed,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::DoorCannotRefund(gateway) => write!(
                f,
                "payments through {gateway} cannot be refunded from subgate: give the money \
                 back at the gateway, then end the access here if it should end (correct or \
                 delete the membership)"
            ),
            Refusal::AlreadyRefunded => f.write_str("the payment is refunded already"),
            Refusal::Disputed => f.write_str(
                "the payment is disputed with the buyer's bank: the dispute decides where the \
                 money goes",
            ),
            Refusal::RefundUnderWay => f.write_str(
                "the payment is being refunded already (a Stars payment that could not be used)",
            ),
            Refusal::AutomaticRefundFailed => f.write_str(
                "the payment's automatic Stars refund failed: retry that refund from the effects \
                 screen",
            ),
        }
    }
}

/// Whether staff may refund a payment through `gateway` whose outcome is `outcome`: `None`
/// when they may (`applied` or `needs_review`, through a door that can refund), else why not.
/// The door is judged first: a payment of a door that cannot refund is refused whatever it is.
pub fn refusal(gateway: &Gateway, outcome: Outcome) -> Option<Refusal> {
    if Door::of(gateway).is_none() {
        return Some(Refusal::DoorCannotRefund(gateway.clone()));
    }
    match outcome {
        Outcome::Applied | Outcome::NeedsReview => None,
        Outcome::Refunded => Some(Refusal::AlreadyRefunded),
        Outcome::Disputed => Some(Refusal::Disputed),
        Outcome::RefundPending => Some(Refusal::RefundUnderWay),
        Outcome::RefundFailed => Some(Refusal::AutomaticRefundFailed),
    }
}

crate::text_enum! {
    /// Where a refund staff asked for stands: its `gateway_refund` effect's status.
    pub enum State {
        /// Queued, or being tried and retried.
        Pending => "pending",
        /// The gateway confirmed it and the payment is `refunded`.
        Done => "done",
        /// The gateway refused it for good (or it failed past the retry horizon): the payment
        /// is unchanged; staff may send the effect back to the queue.
        Failed => "failed",
    }
}

impl From<effects::Status> for State {
    fn from(s: effects::Status) -> State {
        match s {
            effects::Status::Pending => State::Pending,
            effects::Status::Done => State::Done,
            effects::Status::Failed => State::Failed,
        }
    }
}

/// A refund staff asked for, as the API shows it (`refund` of a payment, the answer of
/// `POST /api/payments/{id}/refund`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"payment_id": 7, "state": "pending", "reason": "Bought twice by mistake",
    "requested_by": "owner@example.com", "requested_at": "2026-01-31T12:00:00Z", "effect_id": 42}))]
pub struct StaffRefund {
    pub payment_id: i64,
    pub state: State,
    /// Why, as staff wrote it.
    pub reason: String,
    /// The email of the staff account that asked, as it was then.
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
    /// The `gateway_refund` effect making it (`GET /api/effects/{id}`; retried with
    /// `POST /api/effects/{id}/retry` once failed).
    pub effect_id: i64,
    /// What the gateway (or the attempt) last said, while the refund is not done: a refusal's
    /// words when `failed`, the last transient failure while `pending`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What [`request`] did.
#[derive(Debug, Clone)]
pub enum Requested {
    /// Asked now: the request is written and its effect queued. `payment` as it was.
    New {
        refund: StaffRefund,
        payment: Box<Payment>,
    },
    /// Asked before (in flight, done or failed): nothing changed.
    Existing(StaffRefund),
}

/// The request row, as written.
struct Row {
    payment_id: i64,
    reason: String,
    staff_email: String,
    requested_at: DateTime<Utc>,
}

crate::from_row!(Row ["payment_id, reason, staff_email, requested_at"] {
    payment_id,
    reason,
    staff_email,
    requested_at,
});

const ROW_SQL: &str = "SELECT payment_id, reason, staff_email, requested_at
     FROM staff_refunds WHERE payment_id = $1";

/// The refund staff asked for of payment `payment_id`, if any, with where it stands.
pub async fn of_payment(
    client: &impl GenericClient,
    payment_id: i64,
) -> Result<Option<StaffRefund>, ApiError> {
    let Some(row) = db::opt::<Row>(client, ROW_SQL, &[&payment_id]).await? else {
        return Ok(None);
    };
    let key = effects::gateway_refund_key(payment_id);
    let effect = effects::by_key(client, &key).await?.ok_or_else(|| {
        ApiError::internal(format!("the refund of payment {payment_id} has no effect"))
    })?;
    let state = State::from(effect.status);
    Ok(Some(StaffRefund {
        payment_id: row.payment_id,
        state,
        reason: row.reason,
        requested_by: row.staff_email,
        requested_at: row.requested_at,
        effect_id: effect.id,
        error: effect.last_error.filter(|_| state != State::Done),
    }))
}

const INSERT_SQL: &str = "INSERT INTO staff_refunds (payment_id, reason, staff_id, staff_email)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (payment_id) DO NOTHING
     RETURNING payment_id";

const PAYER_SQL: &str = "SELECT CASE WHEN payer ~ '^[0-9]{1,18}$' THEN payer::bigint END AS payer
     FROM payments WHERE id = $1";

/// Who the staff member asking is: their account and email.
#[derive(Debug, Clone)]
pub struct AskedBy<'a> {
    pub staff_id: i64,
    pub email: &'a str,
}

/// Asks for the refund of payment `payment_id` in transaction `tx` (see the module doc):
/// `None` when there is no such payment, `Err` when it may not be refunded, else what was done.
pub async fn request(
    tx: &Transaction<'_>,
    payment_id: i64,
    reason: &str,
    by: &AskedBy<'_>,
) -> Result<Option<Result<Requested, Refusal>>, ApiError> {
    if let Some(existing) = of_payment(tx, payment_id).await? {
        return Ok(Some(Ok(Requested::Existing(existing))));
    }
    let Some(payment) = core::get(tx, payment_id).await? else {
        return Ok(None);
    };
    if let Some(refusal) = refusal(&payment.gateway, payment.outcome) {
        return Ok(Some(Err(refusal)));
    }
    let inserted = db::row_opt(
        tx,
        INSERT_SQL,
        &[&payment_id, &reason, &by.staff_id, &by.email],
    )
    .await?;
    if inserted.is_none() {
        // Another request committed it while this one waited on the row.
        let existing = of_payment(tx, payment_id)
            .await?
            .ok_or_else(|| ApiError::internal("a conflicting staff refund disappeared"))?;
        return Ok(Some(Ok(Requested::Existing(existing))));
    }
    let effect = NewEffect {
        membership_id: None,
        payment_id: Some(payment_id),
        order_id: payment.order_id,
        chat_id: None,
        user_id: buyer(tx, &payment).await?,
        payload: Payload::GatewayRefund(payload::GatewayRefund { verify: false }),
        dedupe_key: Some(effects::gateway_refund_key(payment_id)),
    };
    effects::enqueue(&**tx, &effect).await?;
    let refund = of_payment(tx, payment_id)
        .await?
        .ok_or_else(|| ApiError::internal("a staff refund written now is missing"))?;
    Ok(Some(Ok(Requested::New {
        refund,
        payment: Box::new(payment),
    })))
}

/// The Telegram user the refund concerns (the effect's `user_id`): the payer the door
/// recorded (the one a Stars refund must go to), else the buyer's account, else 0 (a payment
/// of an unknown order through a card door).
async fn buyer(client: &impl GenericClient, p: &Payment) -> Result<i64, ApiError> {
    let payer: Option<i64> = db::row_one(client, PAYER_SQL, &[&p.id])
        .await?
        .try_get("payer")?;
    if let Some(payer) = payer {
        return Ok(payer);
    }
    match p.subscriber_id {
        Some(s) => subscribers::telegram_user_id(client, s).await,
        None => Ok(0),
    }
}

/// What the worker needs to make a refund staff asked for.
#[derive(Debug, Clone)]
pub struct Facts {
    pub payment_id: i64,
    pub gateway: Gateway,
    /// The gateway's id of the payment: the Stars charge, Stripe's payment intent,
    /// WayForPay's order reference, Monobank's invoice.
    pub external_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub outcome: Outcome,
    /// Why staff refund it.
    pub reason: String,
}

crate::from_row!(Facts ["id, gateway, external_id, amount_minor, currency, outcome, reason"] {
    payment_id: "id",
    gateway,
    external_id,
    amount_minor,
    currency,
    outcome,
    reason,
});

const FACTS_SQL: &str = "SELECT p.id, p.gateway, p.external_id, p.amount_minor, p.currency,
            p.outcome, r.reason
     FROM payments p JOIN staff_refunds r ON r.payment_id = p.id
     WHERE p.id = $1";

/// The payment of the refund staff asked for, as it is now; `None` when no refund of it was
/// asked for.
pub async fn facts(
    client: &impl GenericClient,
    payment_id: i64,
) -> Result<Option<Facts>, ApiError> {
    db::opt(client, FACTS_SQL, &[&payment_id]).await
}

/// What [`settle`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The applied payment is `refunded`; `memberships` were shortened, of which `expired`
    /// ended (their members are removed).
    Refunded { memberships: usize, expired: usize },
    /// The payment in review is `refunded`; it had bought nothing.
    ReviewRefunded,
    /// The payment is no longer `applied` or `needs_review` (its refund reported by the
    /// gateway came first, or it was disputed meanwhile): nothing changed.
    Unchanged(Outcome),
}

impl Settled {
    /// A note for the effect's record.
    pub fn note(&self) -> String {
        match self {
            Settled::Refunded {
                memberships,
                expired,
            } => format!(
                "refunded at the gateway; {memberships} membership(s) shortened, {expired} ended"
            ),
            Settled::ReviewRefunded => {
                "refunded at the gateway; the payment had bought nothing".to_string()
            }
            Settled::Unchanged(outcome) => format!(
                "refunded at the gateway; the payment was {outcome} already, so nothing more \
                 changed"
            ),
        }
    }
}

const LOCATE_SQL: &str = "SELECT gateway, external_id, order_id FROM payments WHERE id = $1";

const REVIEW_REFUNDED_SQL: &str = "UPDATE payments
     SET outcome = $2, reason = $3, updated_at = statement_timestamp()
     WHERE id = $1 AND outcome = $4";

/// The gateway confirmed the refund staff asked for of payment `payment_id`: takes back what
/// it bought, in one transaction (see the module doc). A deadlock victim runs again; an error
/// leaves everything as it was (and the effect runs again: the gateway answers a repeat of the
/// same refund as done).
pub async fn settle(pool: &Pool, payment_id: i64) -> Result<Settled, ApiError> {
    let settled = crate::transaction!(pool, |tx| { settle_in(tx, payment_id).await })?;
    match &settled {
        Settled::Refunded {
            memberships,
            expired,
        } => tracing::info!(
            payment_id,
            memberships,
            expired,
            "payment refunded by staff: what it bought was taken back"
        ),
        other => tracing::info!(payment_id, result = ?other, "payment refunded by staff"),
    }
    Ok(settled)
}

async fn settle_in(tx: &Transaction<'_>, payment_id: i64) -> Result<Settled, ApiError> {
    let row = db::row_opt(tx, LOCATE_SQL, &[&payment_id])
        .await?
        .ok_or_else(|| ApiError::internal("a refunded payment is missing"))?;
    let gateway: Gateway = row.try_get("gateway")?;
    let external_id: String = row.try_get("external_id")?;
    let order_id: Option<i64> = row.try_get("order_id")?;
    // Locks 1–3 (pairs, order, channels) first, as every writer of the payment's order takes
    // them, so the outcome read next cannot change under us.
    if let Some(order_id) = order_id {
        seats::lock_order(tx, order_id).await?;
    }
    let f = at_gateway::facts(tx, &gateway, &external_id)
        .await?
        .ok_or_else(|| ApiError::internal("a refunded payment is missing"))?;
    match f.outcome {
        Outcome::Applied => {
            let done =
                at_gateway::take_back_applied(tx, &gateway, &external_id, f, TakenBack::BY_STAFF)
                    .await?;
            Ok(match done {
                GatewayRefund::Refunded {
                    memberships,
                    expired,
                    ..
                } => Settled::Refunded {
                    memberships,
                    expired,
                },
                _ => Settled::Unchanged(Outcome::Applied),
            })
        }
        Outcome::NeedsReview => {
            let moved = db::execute(
                tx,
                REVIEW_REFUNDED_SQL,
                &[
                    &payment_id,
                    &Outcome::Refunded,
                    &Reason::RefundedByStaff,
                    &Outcome::NeedsReview,
                ],
            )
            .await?;
            Ok(if moved == 1 {
                Settled::ReviewRefunded
            } else {
                Settled::Unchanged(Outcome::NeedsReview)
            })
        }
        other => Ok(Settled::Unchanged(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doors_that_can_refund() {
        assert_eq!(Door::of(&Gateway::TelegramStars), Some(Door::TelegramStars));
        assert_eq!(Door::of(&Gateway::Stripe), Some(Door::Stripe));
        assert_eq!(Door::of(&Gateway::WayForPay), Some(Door::WayForPay));
        assert_eq!(Door::of(&Gateway::named("monobank")), Some(Door::Monobank));
        assert_eq!(Door::of(&Gateway::named("cryptopay")), None);
        assert_eq!(Door::of(&Gateway::named("acme")), None);
    }

    /// The decision table of `POST /api/payments/{id}/refund`: every outcome through every
    /// kind of door.
    #[test]
    fn who_may_be_refunded() {
        let refundable = [
            Gateway::TelegramStars,
            Gateway::Stripe,
            Gateway::WayForPay,
            Gateway::named("monobank"),
        ];
        for g in &refundable {
            for outcome in Outcome::ALL {
                let expected = match outcome {
                    Outcome::Applied | Outcome::NeedsReview => None,
                    Outcome::Refunded => Some(Refusal::AlreadyRefunded),
                    Outcome::Disputed => Some(Refusal::Disputed),
                    Outcome::RefundPending => Some(Refusal::RefundUnderWay),
                    Outcome::RefundFailed => Some(Refusal::AutomaticRefundFailed),
                };
                assert_eq!(refusal(g, outcome), expected, "{g} {outcome}");
            }
        }
        for g in [Gateway::named("acme"), Gateway::named("cryptopay")] {
            for outcome in Outcome::ALL {
                assert_eq!(
                    refusal(&g, outcome),
                    Some(Refusal::DoorCannotRefund(g.clone())),
                    "{g} {outcome}"
                );
            }
        }
        assert!(
            Refusal::DoorCannotRefund(Gateway::named("acme"))
                .to_string()
                .contains("acme")
        );
    }

    #[test]
    fn a_state_is_its_effect_s_status() {
        for s in effects::Status::ALL {
            assert_eq!(State::from(s).as_str(), s.as_str());
        }
    }
}
