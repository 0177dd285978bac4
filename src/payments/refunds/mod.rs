//! The payment side of Telegram Stars refunds: what the effects worker and the Stars reconcile
//! read and write on `payments`. A `refund_pending` payment is the durable intent to refund
//! (the payment core sets it in its own transaction); it ends `refunded` (made or confirmed)
//! or `refund_failed` (Telegram refused, for staff). A charge we never recorded whose refund
//! Telegram lists too is kept as `refunded` with reason `refunded_elsewhere`.
//!
//! Beside it: [`at_gateway`] (a refund the gateway reports), [`disputes`] (a chargeback) and
//! [`by_staff`] (a refund staff ask for, made at the payment's gateway), which all take back
//! what a payment bought alike.

pub mod at_gateway;
pub mod by_staff;
pub mod disputes;

use deadpool_postgres::{GenericClient, Pool, Transaction};

use crate::payments::core::{self, Gateway, NormalizedPayment, Outcome, Reason};
use crate::{common::error::ApiError, db, orders::seats};

/// What a refund needs to know of its payment.
#[derive(Debug, Clone)]
pub struct RefundFacts {
    pub outcome: Outcome,
    /// The Telegram charge id (the payment's `external_id`).
    pub charge_id: String,
}

const FACTS_SQL: &str = "SELECT outcome, external_id FROM payments WHERE id = $1";

/// The outcome and charge id of payment `id`; `None` when it is gone.
pub async fn facts(client: &impl GenericClient, id: i64) -> Result<Option<RefundFacts>, ApiError> {
    let row = db::row_opt(client, FACTS_SQL, &[&id]).await?;
    Ok(match row {
        Some(r) => Some(RefundFacts {
            outcome: r.try_get("outcome")?,
            charge_id: r.try_get("external_id")?,
        }),
        None => None,
    })
}

const SETTLE_SQL: &str = "UPDATE payments SET outcome = $2, updated_at = statement_timestamp()
     WHERE id = $1 AND outcome = $3";

/// Ends a refund: payment `id` goes from `refund_pending` to `outcome` (`refunded` or
/// `refund_failed`); a payment no longer pending is left alone.
pub async fn settle(tx: &Transaction<'_>, id: i64, outcome: Outcome) -> Result<(), ApiError> {
    db::execute(tx, SETTLE_SQL, &[&id, &outcome, &Outcome::RefundPending]).await?;
    Ok(())
}

const CONFIRM_SQL: &str = "UPDATE payments p SET outcome = $3, updated_at = statement_timestamp()
     FROM unnest($1::text[], $2::text[]) AS r(id, payer)
     WHERE p.gateway = $4 AND p.external_id = r.id
       AND p.outcome = $5
       AND (p.payer = r.payer OR (p.payer IS NULL AND EXISTS (
           SELECT 1 FROM subscribers s
           WHERE s.id = p.subscriber_id AND s.telegram_user_id::text = r.payer)))";

/// Marks `refunded` every `refund_pending` Stars payment among `refunds` — (charge id, the
/// user the refund went to) — whose payer is that user. Returns how many.
pub async fn confirm(
    client: &impl GenericClient,
    charge_ids: &[String],
    users: &[String],
) -> Result<u64, ApiError> {
    db::execute(
        client,
        CONFIRM_SQL,
        &[
            &charge_ids,
            &users,
            &Outcome::Refunded,
            &Gateway::TelegramStars,
            &Outcome::RefundPending,
        ],
    )
    .await
}

const KNOWN_SQL: &str = "SELECT external_id FROM payments
     WHERE gateway = $2 AND external_id = ANY($1)";

/// The Stars charge ids among `charge_ids` that are stored payments.
pub async fn known_charges(
    client: &impl GenericClient,
    charge_ids: &[&str],
) -> Result<Vec<String>, ApiError> {
    db::rows(client, KNOWN_SQL, &[&charge_ids, &Gateway::TelegramStars])
        .await?
        .iter()
        .map(|r| r.try_get("external_id").map_err(ApiError::from))
        .collect()
}

/// Stores an unrecorded Stars charge whose refund is listed next to it as a `refunded` payment
/// (reason `refunded_elsewhere`): the money record is kept, nothing is granted, nothing is
/// refunded. Taken in the payment core's lock order (pair, order, seat-limited channel), so it
/// cannot deadlock with a late delivery of the same charge through
/// [`apply_payment`](crate::payments::core::apply_payment); whichever stores the charge first wins the
/// dedupe on (gateway, external id). Returns the new payment's id, or `None` when the charge
/// was stored meanwhile.
pub async fn record_refunded_elsewhere(
    pool: &Pool,
    p: &NormalizedPayment,
) -> Result<Option<i64>, ApiError> {
    crate::transaction!(pool, |tx| {
        let locked = seats::lock_order_by_reference(tx, &p.order_reference).await?;
        let stored = core::Stored {
            outcome: Outcome::Refunded,
            reason: Some(Reason::RefundedElsewhere),
            renewal: false,
            subscription_expires_at: None,
            pays_order: false,
        };
        let order = locked.as_ref().map(|l| &l.order);
        Ok(core::insert(tx, p, order, stored)
            .await?
            .map(|payment| payment.id))
    })
}
