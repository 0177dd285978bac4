//! Telegram Stars `pre_checkout_query`: the last moment we can refuse a buyer before Telegram
//! takes their stars, and the moment a seat-limited channel holds a seat for them.
//!
//! Telegram waits at most 10 seconds for the answer, and a missing answer fails the payment
//! without telling the buyer why. So the decision runs in one short transaction with a lock
//! timeout and a statement timeout, inside an overall time budget: a database stall turns into
//! an explicit "try again" refusal, never into a late answer — and that forced refusal is not
//! stored, so the next query decides afresh.
//!
//! The decision is stored under the query id (`pre_checkout_decisions`) in the same
//! transaction that set the hold: a query Telegram re-sends (our answer was lost) gets the same
//! answer and never extends the hold. Twins of one query serialize on the order's pair lock and
//! the second one reads the first one's stored decision after the lock.
//!
//! Checks, in API.md's order: the order exists and is pending, the payer is the order's
//! subscriber, currency `XTR` and amount match, the channel is active, the seat rule
//! ([`seats::checkout_decide`], which takes the channel lock and may set the hold).

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use tokio_postgres::{Row, error::SqlState};

use super::types::PreCheckoutQuery;
use crate::{
    error::ApiError,
    payments::seats::{self, CheckoutRefusal, LockedOrder},
    state::AppState,
};

/// The only currency a Stars invoice can carry.
pub const STARS: &str = "XTR";

/// How long one lock wait may take before the query is refused as busy.
const LOCK_TIMEOUT: &str = "2s";
/// How long one statement may take (lock waits included).
const STATEMENT_TIMEOUT: &str = "3s";
/// The whole decision, pool wait and retries included, stays well inside Telegram's 10 s.
const BUDGET: Duration = Duration::from_secs(5);

/// Shown when the decision could not be made in time; not stored.
pub const BUSY_MESSAGE: &str = "Please try again in a moment.";

/// The marker of a decision that lost the insert race to a concurrent twin.
const RACED: &str = "a concurrent pre-checkout stored its decision first";

/// Why a pre-checkout is refused. The reason codes are those of payments, so staff read one
/// vocabulary for the refusal and for a payment that arrives anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    UnknownOrder,
    OrderCancelled,
    AlreadyPaid,
    PayerMismatch,
    CurrencyMismatch,
    AmountMismatch,
    ChannelInactive,
    HoldExpired,
    NoSeat,
}

impl Refusal {
    /// The stored reason code.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::UnknownOrder => "unknown_order",
            Refusal::OrderCancelled => "order_cancelled",
            Refusal::AlreadyPaid => "already_paid",
            Refusal::PayerMismatch => "payer_mismatch",
            Refusal::CurrencyMismatch => "currency_mismatch",
            Refusal::AmountMismatch => "amount_mismatch",
            Refusal::ChannelInactive => "channel_inactive",
            Refusal::HoldExpired => "hold_expired",
            Refusal::NoSeat => "no_seat",
        }
    }

    /// What the buyer reads in Telegram's payment form: short, human, and saying what to do.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::UnknownOrder => "We could not find this order. Please start a new order.",
            Refusal::OrderCancelled => "This order was cancelled. Please start a new order.",
            Refusal::AlreadyPaid => "This order has already been paid.",
            Refusal::PayerMismatch => "This invoice was issued to another Telegram account.",
            Refusal::CurrencyMismatch => "This order cannot be paid with Telegram Stars.",
            Refusal::AmountMismatch => {
                "The invoice amount does not match the order. Please start a new order."
            }
            Refusal::ChannelInactive => "This channel is not accepting subscriptions right now.",
            Refusal::HoldExpired => "This invoice has expired. Please start a new order.",
            Refusal::NoSeat => {
                "This seat has just been taken. Please choose another channel or try later."
            }
        }
    }
}

/// The answer to one query, as given to Telegram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub ok: bool,
    pub error_message: Option<String>,
}

impl Answer {
    fn approve() -> Answer {
        Answer {
            ok: true,
            error_message: None,
        }
    }

    fn refuse(message: impl Into<String>) -> Answer {
        Answer {
            ok: false,
            error_message: Some(message.into()),
        }
    }
}

/// A decision about to be stored.
struct Decision {
    order_id: Option<i64>,
    refusal: Option<Refusal>,
    hold_until: Option<DateTime<Utc>>,
}

/// The checks that need only the locked order and the query, in API.md's order; the channel
/// and the seat are [`seats::checkout_decide`]'s. Pure, so every branch is unit-tested.
pub fn check_order(
    status: &str,
    subscriber_telegram_id: i64,
    order_currency: &str,
    order_amount_minor: i64,
    q: &PreCheckoutQuery,
) -> Result<(), Refusal> {
    match status {
        "pending" => {}
        "paid" => return Err(Refusal::AlreadyPaid),
        _ => return Err(Refusal::OrderCancelled),
    }
    if q.from.id != subscriber_telegram_id {
        return Err(Refusal::PayerMismatch);
    }
    if q.currency != STARS || order_currency != STARS {
        return Err(Refusal::CurrencyMismatch);
    }
    if q.total_amount != order_amount_minor {
        return Err(Refusal::AmountMismatch);
    }
    Ok(())
}

/// Decides one `pre_checkout_query` and returns the answer for Telegram. Never fails: anything
/// that keeps the decision from being made in time is an unstored "try again" refusal.
pub async fn answer(state: &AppState, q: &PreCheckoutQuery) -> Answer {
    match tokio::time::timeout(BUDGET, decide(state, q)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            if is_contention(&e) {
                tracing::warn!(query_id = %q.id, sqlstate = ?e.sql_state().map(|s| s.code()),
                    "pre-checkout refused: database busy (decision not stored)");
            } else {
                tracing::error!(query_id = %q.id, error = %e,
                    "pre-checkout refused: decision failed (not stored)");
            }
            Answer::refuse(BUSY_MESSAGE)
        }
        Err(_) => {
            // Dropping the future rolled the transaction back: nothing was stored or held.
            tracing::warn!(query_id = %q.id, budget_ms = BUDGET.as_millis() as u64,
                "pre-checkout refused: decision exceeded its time budget (not stored)");
            Answer::refuse(BUSY_MESSAGE)
        }
    }
}

fn is_contention(e: &ApiError) -> bool {
    matches!(e, ApiError::Pool(_))
        || matches!(e.sql_state(), Some(s) if *s == SqlState::LOCK_NOT_AVAILABLE
            || *s == SqlState::QUERY_CANCELED
            || *s == SqlState::T_R_DEADLOCK_DETECTED
            || *s == SqlState::T_R_SERIALIZATION_FAILURE)
}

async fn decide(state: &AppState, q: &PreCheckoutQuery) -> Result<Answer, ApiError> {
    let hold_secs = state.config.hold_secs;
    let decided = crate::transaction!(state.db, |tx| {
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'; \
             SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'"
        ))
        .await?;
        if let Some(stored) = stored(tx, &q.id).await? {
            return Ok(stored);
        }
        let Some(locked) = seats::lock_order_by_reference(tx, &q.invoice_payload).await? else {
            let decision = Decision {
                order_id: None,
                refusal: Some(Refusal::UnknownOrder),
                hold_until: None,
            };
            return store(tx, q, &decision).await;
        };
        // A twin of this query may have decided while we waited for the pair lock.
        if let Some(stored) = stored(tx, &q.id).await? {
            return Ok(stored);
        }
        let decision = decide_locked(tx, q, locked, hold_secs).await?;
        store(tx, q, &decision).await
    });
    match decided {
        Err(ApiError::Conflict(m)) if m == RACED => {
            // Our transaction (and any hold it set) was rolled back; the twin's answer stands.
            let client = state.db.get().await?;
            let row = client
                .query_opt(STORED, &[&q.id])
                .await?
                .ok_or_else(|| ApiError::internal("raced pre-checkout decision vanished"))?;
            Ok(answer_of(&row))
        }
        other => other,
    }
}

async fn decide_locked(
    tx: &Transaction<'_>,
    q: &PreCheckoutQuery,
    locked: LockedOrder,
    hold_secs: i64,
) -> Result<Decision, ApiError> {
    let order_id = locked.order.id;
    let refused = |refusal| Decision {
        order_id: Some(order_id),
        refusal: Some(refusal),
        hold_until: None,
    };
    let o = &locked.order;
    if let Err(refusal) = check_order(
        &o.status,
        locked.subscriber_telegram_id,
        &o.currency,
        o.amount_minor,
        q,
    ) {
        return Ok(refused(refusal));
    }
    let status = o.status.clone();
    Ok(match seats::checkout_decide(tx, locked, hold_secs).await? {
        Ok(order) => Decision {
            order_id: Some(order_id),
            refusal: None,
            hold_until: order.hold_until,
        },
        // Pending was checked above under the same order lock; kept for completeness.
        Err(CheckoutRefusal::NotPending) if status == "paid" => refused(Refusal::AlreadyPaid),
        Err(CheckoutRefusal::NotPending) => refused(Refusal::OrderCancelled),
        Err(CheckoutRefusal::ChannelInactive) => refused(Refusal::ChannelInactive),
        Err(CheckoutRefusal::HoldExpired) => refused(Refusal::HoldExpired),
        Err(CheckoutRefusal::ChannelFull) => refused(Refusal::NoSeat),
    })
}

const STORED: &str = "SELECT ok, error_message FROM pre_checkout_decisions WHERE query_id = $1";

fn answer_of(row: &Row) -> Answer {
    Answer {
        ok: row.get(0),
        error_message: row.get(1),
    }
}

async fn stored(tx: &Transaction<'_>, query_id: &str) -> Result<Option<Answer>, ApiError> {
    let row = tx.query_opt(STORED, &[&query_id]).await?;
    if row.is_some() {
        tracing::info!(query_id, "pre-checkout repeated: stored decision returned");
    }
    Ok(row.as_ref().map(answer_of))
}

/// Stores the decision; if a twin stored one first (only possible for a query naming no
/// order, or a forged twin naming another), fails with the [`RACED`] marker so the transaction
/// rolls back whatever this one did.
async fn store(
    tx: &Transaction<'_>,
    q: &PreCheckoutQuery,
    d: &Decision,
) -> Result<Answer, ApiError> {
    let answer = match d.refusal {
        None => Answer::approve(),
        Some(r) => Answer::refuse(r.message()),
    };
    let inserted = tx
        .execute(
            "INSERT INTO pre_checkout_decisions
                 (query_id, order_id, order_reference, telegram_user_id, ok, error_message,
                  reason, hold_until)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (query_id) DO NOTHING",
            &[
                &q.id,
                &d.order_id,
                &q.invoice_payload,
                &q.from.id,
                &answer.ok,
                &answer.error_message,
                &d.refusal.map(Refusal::reason),
                &d.hold_until,
            ],
        )
        .await?;
    if inserted == 0 {
        return Err(ApiError::Conflict(RACED.into()));
    }
    tracing::info!(
        query_id = %q.id,
        order_id = ?d.order_id,
        ok = answer.ok,
        reason = d.refusal.map(Refusal::reason),
        hold_until = ?d.hold_until,
        "pre-checkout decided"
    );
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telegram::types::User;

    fn query(from: i64, currency: &str, amount: i64) -> PreCheckoutQuery {
        PreCheckoutQuery {
            id: "q".into(),
            from: User {
                id: from,
                username: None,
            },
            currency: currency.into(),
            total_amount: amount,
            invoice_payload: "ord_x".into(),
        }
    }

    #[test]
    fn checks_run_in_api_order() {
        let ok = query(7, "XTR", 100);
        assert_eq!(check_order("pending", 7, "XTR", 100, &ok), Ok(()));
        // Status first, even when everything else is wrong too.
        let bad = query(8, "USD", 1);
        assert_eq!(
            check_order("paid", 7, "XTR", 100, &bad),
            Err(Refusal::AlreadyPaid)
        );
        assert_eq!(
            check_order("cancelled", 7, "XTR", 100, &bad),
            Err(Refusal::OrderCancelled)
        );
        // Then the payer, then currency, then amount.
        assert_eq!(
            check_order("pending", 7, "XTR", 100, &bad),
            Err(Refusal::PayerMismatch)
        );
        assert_eq!(
            check_order("pending", 7, "XTR", 100, &query(7, "USD", 1)),
            Err(Refusal::CurrencyMismatch)
        );
        assert_eq!(
            check_order("pending", 7, "XTR", 100, &query(7, "XTR", 99)),
            Err(Refusal::AmountMismatch)
        );
    }

    #[test]
    fn an_order_priced_in_another_currency_cannot_be_paid_in_stars() {
        assert_eq!(
            check_order("pending", 7, "UAH", 100, &query(7, "XTR", 100)),
            Err(Refusal::CurrencyMismatch)
        );
    }

    #[test]
    fn refusal_messages_are_short_and_reasons_match_the_schema() {
        let all = [
            Refusal::UnknownOrder,
            Refusal::OrderCancelled,
            Refusal::AlreadyPaid,
            Refusal::PayerMismatch,
            Refusal::CurrencyMismatch,
            Refusal::AmountMismatch,
            Refusal::ChannelInactive,
            Refusal::HoldExpired,
            Refusal::NoSeat,
        ];
        let schema = include_str!("../../migrations/0002_telegram.sql");
        for r in all {
            assert!(r.message().len() <= 100, "{r:?} message too long");
            assert!(schema.contains(&format!("'{}'", r.reason())), "{r:?}");
        }
    }
}
