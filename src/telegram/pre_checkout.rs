//! Telegram Stars `pre_checkout_query`: the last moment we can refuse a buyer before Telegram
//! takes their stars, and the moment a seat-limited channel holds a seat for them.
//!
//! Telegram waits at most 10 seconds for the answer, and a missing answer fails the payment
//! without telling the buyer why. So the decision runs in one short transaction with a lock
//! timeout and a statement timeout, and every step has a time bound:
//! - the work before COMMIT (pool wait, statements, deadlock retries) has [`BUDGET`]; past it
//!   the transaction is rolled back and the buyer is asked to try again — an unstored refusal,
//!   so the next query decides afresh;
//! - COMMIT itself is not cut short by that budget: the answer must match what was stored. It
//!   has [`COMMIT_WAIT`]; a commit still running then is cancelled, and like a commit whose
//!   connection failed its outcome is unknown, so the fate of the transaction is read back
//!   (`pg_xact_status`, waiting up to [`READ_BACK`] for it to end): committed → the stored
//!   decision is answered (an approval with its hold), aborted → "try again" with nothing
//!   stored. Only if even that cannot be told is the buyer asked to try again with the outcome
//!   unknown, which is logged as an error.
//!
//! The decision is stored under the query id (`pre_checkout_decisions`) in the same
//! transaction that set the hold: a query Telegram re-sends (our answer was lost) gets the same
//! answer and never extends the hold. Twins of one query serialize on the order's pair lock and
//! the second one reads the first one's stored decision after the lock.
//!
//! Checks, in API.md's order: the order exists and is pending, the payer is the order's
//! subscriber, currency `XTR` and amount match, the buyer has no live lifetime access to the
//! channel already (`already_lifetime`), the channel is active, the seat rule
//! ([`seats::checkout_decide`], which takes the channel lock and may set the hold, within the
//! buyer's hold rules: a cooldown after an unpaid hold ran out, a daily cap — refused as
//! `hold_limited`, telling the buyer when to try again).

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Transaction};
use tokio::time::{Instant, timeout, timeout_at};
use tokio_postgres::{NoTls, error::SqlState};

use crate::telegram_api::types::PreCheckoutQuery;
use deadpool_postgres::Pool;

use crate::{
    access::{memberships, subscribers},
    common::error::ApiError,
    config::HoldRules,
    db::{self, FromRow},
    orders::{
        self,
        seats::{self, CheckoutRefusal, LockedOrder},
    },
    payments::core::Reason,
    present::texts::{self, Language},
};

/// The only currency a Stars invoice can carry.
pub const STARS: &str = "XTR";

/// The decision's limits: one lock wait may take 2 s before the query is refused as busy, one
/// statement 3 s (lock waits included).
const TIMEOUTS_SQL: &str = "SET LOCAL lock_timeout = '2s'; SET LOCAL statement_timeout = '3s'";
/// The decision up to COMMIT: pool wait, statements and retries.
pub const BUDGET: Duration = Duration::from_secs(4);
/// How long COMMIT may take before it is cancelled and its outcome read back.
pub const COMMIT_WAIT: Duration = Duration::from_secs(2);
/// How long reading back the outcome of an unknown commit may take. With [`BUDGET`] and
/// [`COMMIT_WAIT`], the answer is given within 8 s, inside Telegram's 10 s.
pub const READ_BACK: Duration = Duration::from_secs(2);

/// Shown when the decision could not be made in time, in the language of the payer's
/// Telegram app (nothing else is read then); not stored.
fn busy(q: &PreCheckoutQuery) -> Answer {
    Answer::refuse(texts::pre_checkout_busy(Language::choose(
        None,
        q.from.language_code.as_deref(),
    )))
}

/// Whether `message` is the "try again" answer, in any language.
fn is_busy(message: &str) -> bool {
    Language::ALL
        .into_iter()
        .any(|l| texts::pre_checkout_busy(l) == message)
}

/// Why a decision's transaction did not produce an answer of its own.
#[derive(Debug)]
enum DecideError {
    /// A concurrent twin of the query stored its decision first: this transaction (and any
    /// hold it set) is rolled back and the twin's stored answer is given.
    Raced,
    /// A database failure.
    Failed(ApiError),
}

impl From<ApiError> for DecideError {
    fn from(e: ApiError) -> DecideError {
        DecideError::Failed(e)
    }
}

impl From<tokio_postgres::Error> for DecideError {
    fn from(e: tokio_postgres::Error) -> DecideError {
        DecideError::Failed(e.into())
    }
}

/// The answer to one query, as given to Telegram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub ok: bool,
    pub error_message: Option<String>,
}

impl Answer {
    /// The answer's label in the pre-checkout metrics: `approved`, `busy` (asked to try
    /// again) or `refused`.
    pub fn metric_label(&self) -> &'static str {
        match (self.ok, self.error_message.as_deref()) {
            (true, _) => "approved",
            (false, Some(m)) if is_busy(m) => "busy",
            (false, _) => "refused",
        }
    }

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
    refusal: Option<Reason>,
    /// When the buyer may try again, said after the reason ([`texts::pre_checkout_hold_limited`]).
    try_after: Option<DateTime<Utc>>,
    hold_until: Option<DateTime<Utc>>,
}

/// What the transaction decided, before COMMIT.
struct Decided {
    answer: Answer,
    /// The transaction's id (`pg_current_xact_id()` as text) when it stored a new decision;
    /// `None` when it only read a stored one, so its commit changes nothing.
    stored_by: Option<String>,
}

/// Why no decision can be answered; the buyer is asked to try again.
#[derive(Debug)]
enum Unanswered {
    /// The work before COMMIT exceeded [`BUDGET`]; it was rolled back.
    OverBudget,
    /// A database failure before or at COMMIT; nothing was stored.
    Failed(ApiError),
    /// The commit was cancelled or lost, and read back as rolled back: nothing was stored.
    RolledBack(String),
    /// The commit's outcome could not be read back: a decision may be stored.
    OutcomeUnknown(String),
}

/// The checks that need only the locked order and the query, in API.md's order; the channel
/// and the seat are [`seats::checkout_decide`]'s. Pure, so every branch is unit-tested.
pub fn check_order(
    status: orders::Status,
    subscriber_telegram_id: i64,
    order_currency: &str,
    order_amount_minor: i64,
    q: &PreCheckoutQuery,
) -> Result<(), Reason> {
    match status {
        orders::Status::Pending => {}
        orders::Status::Paid => return Err(Reason::AlreadyPaid),
        orders::Status::Cancelled => return Err(Reason::OrderCancelled),
    }
    if q.from.id != subscriber_telegram_id {
        return Err(Reason::PayerMismatch);
    }
    if q.currency != STARS || order_currency != STARS {
        return Err(Reason::CurrencyMismatch);
    }
    if q.total_amount != order_amount_minor {
        return Err(Reason::AmountMismatch);
    }
    Ok(())
}

/// Decides one `pre_checkout_query` and returns the answer for Telegram; an approved one holds
/// a free seat for `rules.hold_secs` (within the buyer's hold rules). Never fails: anything that keeps the decision from being made
/// in time is a "try again" refusal, never given while an approval (and its hold) is known to
/// be stored.
pub async fn answer(db: &Pool, rules: HoldRules, q: &PreCheckoutQuery) -> Answer {
    match decide(db, rules, q).await {
        Ok(answer) => answer,
        Err(Unanswered::Failed(e)) => {
            if is_contention(&e) {
                tracing::warn!(query_id = %q.id, sqlstate = ?e.sql_state().map(|s| s.code()),
                    "pre-checkout refused: database busy (decision not stored)");
            } else {
                tracing::error!(query_id = %q.id, error = %e,
                    "pre-checkout refused: decision failed (not stored)");
            }
            busy(q)
        }
        Err(Unanswered::OverBudget) => {
            tracing::warn!(query_id = %q.id, budget_ms = BUDGET.as_millis() as u64,
                "pre-checkout refused: decision exceeded its time budget (not stored)");
            busy(q)
        }
        Err(Unanswered::RolledBack(why)) => {
            tracing::warn!(query_id = %q.id, why = %why,
                "pre-checkout refused: its commit was rolled back (decision not stored)");
            busy(q)
        }
        Err(Unanswered::OutcomeUnknown(why)) => {
            tracing::error!(query_id = %q.id, why = %why,
                "pre-checkout refused: the outcome of its commit is unknown (a decision and a \
                 hold may be stored)");
            busy(q)
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

/// Runs the decision's transaction: everything before COMMIT within [`BUDGET`] (deadlock
/// victims run again, like [`crate::transaction!`]), then COMMIT (see [`commit`]).
async fn decide(db: &Pool, rules: HoldRules, q: &PreCheckoutQuery) -> Result<Answer, Unanswered> {
    let deadline = Instant::now() + BUDGET;
    let mut client = timeout_at(deadline, db.get())
        .await
        .map_err(|_| Unanswered::OverBudget)?
        .map_err(|e| Unanswered::Failed(e.into()))?;
    let mut attempt = 0;
    let ended = loop {
        attempt += 1;
        let work = async {
            let tx = client.transaction().await?;
            let decided = decide_in(&tx, q, rules).await;
            Ok::<_, ApiError>((tx, decided))
        };
        let (tx, decided) = match timeout_at(deadline, work).await {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => return Err(Unanswered::Failed(e)),
            Err(_) => break Ended::Detach(Err(Unanswered::OverBudget)),
        };
        let e = match decided {
            Ok(decided) => {
                break match commit(tx, decided).await {
                    Committed::Answered(answer) => Ended::Done(Ok(answer)),
                    Committed::AnsweredUnfinished(answer) => Ended::Detach(Ok(answer)),
                    Committed::RolledBack(e) => Ended::Done(Err(Unanswered::Failed(e))),
                    Committed::Unknown { xact, why } => Ended::Unknown { xact, why },
                };
            }
            Err(e) => e,
        };
        // Dropping would roll back too; doing it here leaves the connection clean now.
        let _ = tx.rollback().await;
        let e = match e {
            DecideError::Failed(e) => e,
            DecideError::Raced => {
                // Our transaction (and any hold it set) was rolled back; the twin's answer
                // stands, committed before our insert returned.
                let row = timeout_at(deadline, client.query_opt(STORED, &[&q.id]))
                    .await
                    .map_err(|_| Unanswered::OverBudget)?
                    .map_err(|e| Unanswered::Failed(e.into()))?
                    .ok_or_else(|| {
                        Unanswered::Failed(ApiError::internal(
                            "raced pre-checkout decision vanished",
                        ))
                    })?;
                return Answer::from_row(&row).map_err(|e| Unanswered::Failed(e.into()));
            }
        };
        match e {
            e if e.is_retryable() && attempt < db::MAX_ATTEMPTS => {
                tracing::info!(query_id = %q.id, attempt,
                    "pre-checkout aborted by contention; deciding again");
                let jitter = rand::random::<u64>() % 20;
                let pause = Duration::from_millis(10 * attempt as u64 + jitter);
                if timeout_at(deadline, tokio::time::sleep(pause))
                    .await
                    .is_err()
                {
                    return Err(Unanswered::OverBudget);
                }
            }
            e => return Err(Unanswered::Failed(e)),
        }
    };
    match ended {
        Ended::Done(answered) => answered,
        Ended::Detach(answered) => {
            // A statement may still be running on this connection: keep it out of the pool.
            // Closing it rolls back whatever is not committed.
            drop(Object::take(client));
            answered
        }
        Ended::Unknown { xact, why } => {
            // The connection's state is unknown: never hand it to another request.
            drop(Object::take(client));
            tracing::warn!(query_id = %q.id, why = %why,
                "pre-checkout commit outcome unknown; reading it back");
            match read_back(db, &xact, &q.id).await {
                Ok(Some(answer)) => Ok(answer),
                Ok(None) => Err(Unanswered::RolledBack(why)),
                Err(e) => Err(Unanswered::OutcomeUnknown(format!(
                    "{why}; reading it back: {e}"
                ))),
            }
        }
    }
}

/// How the decision's transaction ended, before its connection is let go.
enum Ended {
    /// Answered or refused; the connection is clean.
    Done(Result<Answer, Unanswered>),
    /// Answered or refused, but a statement may still be running on the connection (the budget
    /// ran out mid-statement, or a commit that changes nothing did not finish).
    Detach(Result<Answer, Unanswered>),
    /// The commit's outcome is unknown ([`Committed::Unknown`]).
    Unknown { xact: String, why: String },
}

/// The body of the decision's transaction.
async fn decide_in(
    tx: &Transaction<'_>,
    q: &PreCheckoutQuery,
    rules: HoldRules,
) -> Result<Decided, DecideError> {
    let repeat = |answer| Decided {
        answer,
        stored_by: None,
    };
    tx.batch_execute(TIMEOUTS_SQL).await?;
    if let Some(stored) = stored(tx, &q.id).await? {
        return Ok(repeat(stored));
    }
    let Some(locked) = seats::lock_order_by_reference(tx, &q.invoice_payload).await? else {
        let decision = Decision {
            order_id: None,
            refusal: Some(Reason::UnknownOrder),
            try_after: None,
            hold_until: None,
        };
        return store(tx, q, &decision).await;
    };
    // A twin of this query may have decided while we waited for the pair lock.
    if let Some(stored) = stored(tx, &q.id).await? {
        return Ok(repeat(stored));
    }
    let decision = decide_locked(tx, q, locked, rules).await?;
    store(tx, q, &decision).await
}

/// What became of a decision's COMMIT.
enum Committed {
    /// Committed: this is the answer.
    Answered(Answer),
    /// The transaction wrote nothing (it read a stored decision), so its answer stands, but its
    /// commit did not finish.
    AnsweredUnfinished(Answer),
    /// The server refused the commit: the transaction was rolled back, nothing stored.
    RolledBack(ApiError),
    /// The commit was cancelled after [`COMMIT_WAIT`] or its connection failed: transaction
    /// `xact` may or may not have committed.
    Unknown { xact: String, why: String },
}

/// Commits the decision. A commit still running after [`COMMIT_WAIT`] is cancelled (a commit
/// cancelled before it completes is rolled back, but it may complete first).
async fn commit(tx: Transaction<'_>, decided: Decided) -> Committed {
    let Some(xact) = decided.stored_by else {
        // Nothing written: the stored answer holds whatever becomes of this commit.
        return match timeout(COMMIT_WAIT, tx.commit()).await {
            Ok(_) => Committed::Answered(decided.answer),
            Err(_) => Committed::AnsweredUnfinished(decided.answer),
        };
    };
    let cancel = tx.cancel_token();
    let why = match timeout(COMMIT_WAIT, tx.commit()).await {
        Ok(Ok(())) => return Committed::Answered(decided.answer),
        Ok(Err(e)) if e.as_db_error().is_some() => return Committed::RolledBack(e.into()),
        Ok(Err(e)) => format!("the commit got no answer from the server: {e}"),
        Err(_) => {
            let _ = timeout(READ_BACK, cancel.cancel_query(NoTls)).await;
            format!("the commit was still running after {COMMIT_WAIT:?} and was cancelled")
        }
    };
    Committed::Unknown { xact, why }
}

/// Reads back what became of transaction `xact` once it has ended (waiting up to
/// [`READ_BACK`]): `Some(answer)` stored under the query id if it committed, `None` if it was
/// rolled back.
async fn read_back(db: &Pool, xact: &str, query_id: &str) -> Result<Option<Answer>, String> {
    let work = async {
        let client = db.get().await.map_err(|e| e.to_string())?;
        loop {
            let status: Option<String> = client
                .query_one("SELECT pg_xact_status($1::text::xid8) AS status", &[&xact])
                .await
                .map_err(|e| e.to_string())?
                .try_get("status")
                .map_err(|e| e.to_string())?;
            match status.as_deref() {
                Some("in progress") => tokio::time::sleep(Duration::from_millis(20)).await,
                Some("aborted") => return Ok(None),
                Some("committed") => {
                    let row = client
                        .query_opt(STORED, &[&query_id])
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or("committed, but no decision is stored under the query id")?;
                    return Answer::from_row(&row).map(Some).map_err(|e| e.to_string());
                }
                other => return Err(format!("transaction status {other:?}")),
            }
        }
    };
    timeout(READ_BACK, work)
        .await
        .map_err(|_| format!("the transaction had not ended after {READ_BACK:?}"))?
}

async fn decide_locked(
    tx: &Transaction<'_>,
    q: &PreCheckoutQuery,
    locked: LockedOrder,
    rules: HoldRules,
) -> Result<Decision, ApiError> {
    let order_id = locked.order.id;
    let refused = |refusal| Decision {
        order_id: Some(order_id),
        refusal: Some(refusal),
        try_after: None,
        hold_until: None,
    };
    let o = &locked.order;
    if let Err(refusal) = check_order(
        o.status,
        locked.subscriber_telegram_id,
        &o.currency,
        o.amount_minor,
        q,
    ) {
        return Ok(refused(refusal));
    }
    // Lifetime access the buyer already has (asked under the pair lock): nothing to buy.
    if memberships::lifetime_in_every(tx, o.subscriber(), &[o.channel_id]).await? {
        return Ok(refused(Reason::AlreadyLifetime));
    }
    let status = o.status;
    Ok(match seats::checkout_decide(tx, locked, rules).await? {
        Ok(order) => Decision {
            order_id: Some(order_id),
            refusal: None,
            try_after: None,
            hold_until: order.hold_until,
        },
        // Pending was checked above under the same order lock; kept for completeness.
        Err(CheckoutRefusal::NotPending) if status == orders::Status::Paid => {
            refused(Reason::AlreadyPaid)
        }
        Err(CheckoutRefusal::NotPending) => refused(Reason::OrderCancelled),
        Err(CheckoutRefusal::ChannelInactive) => refused(Reason::ChannelInactive),
        Err(CheckoutRefusal::HoldExpired) => refused(Reason::HoldExpired),
        Err(CheckoutRefusal::ChannelFull) => refused(Reason::NoSeat),
        Err(CheckoutRefusal::PromoExhausted) => refused(Reason::PromoExhausted),
        Err(CheckoutRefusal::HoldLimited { until, .. }) => Decision {
            try_after: Some(until),
            ..refused(Reason::HoldLimited)
        },
    })
}

const STORED: &str = "SELECT ok, error_message FROM pre_checkout_decisions WHERE query_id = $1";
const STORE_SQL: &str = "INSERT INTO pre_checkout_decisions
         (query_id, order_id, order_reference, telegram_user_id, ok, error_message, reason,
          hold_until)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (query_id) DO NOTHING
     RETURNING pg_current_xact_id()::text AS xact";

crate::from_row!(Answer ["ok, error_message"] {
    ok,
    error_message,
});

async fn stored(tx: &Transaction<'_>, query_id: &str) -> Result<Option<Answer>, ApiError> {
    let row = db::row_opt(tx, STORED, &[&query_id]).await?;
    if row.is_some() {
        tracing::info!(query_id, "pre-checkout repeated: stored decision returned");
    }
    Ok(row.as_ref().map(Answer::from_row).transpose()?)
}

/// Stores the decision; if a twin stored one first (only possible for a query naming no
/// order, or a forged twin naming another), fails with [`DecideError::Raced`] so the
/// transaction rolls back whatever this one did.
async fn store(
    tx: &Transaction<'_>,
    q: &PreCheckoutQuery,
    d: &Decision,
) -> Result<Decided, DecideError> {
    // In the payer's remembered language, else their Telegram app's.
    let l = Language::choose(
        subscribers::language_of_telegram_user(tx, q.from.id).await?,
        q.from.language_code.as_deref(),
    );
    let answer = match (d.refusal, d.try_after) {
        (None, _) => Answer::approve(),
        (Some(_), Some(until)) => Answer::refuse(texts::pre_checkout_hold_limited(
            l,
            &texts::not_before(l, until),
        )),
        (Some(r), None) => Answer::refuse(texts::pre_checkout_refusal(l, r)),
    };
    // The transaction id identifies this transaction should the outcome of its commit have to
    // be read back.
    let inserted = db::row_opt(
        tx,
        STORE_SQL,
        &[
            &q.id,
            &d.order_id,
            &q.invoice_payload,
            &q.from.id,
            &answer.ok,
            &answer.error_message,
            &d.refusal,
            &d.hold_until,
        ],
    )
    .await?;
    let Some(inserted) = inserted else {
        return Err(DecideError::Raced);
    };
    tracing::info!(
        query_id = %q.id,
        order_id = ?d.order_id,
        ok = answer.ok,
        reason = d.refusal.map(Reason::as_str),
        hold_until = ?d.hold_until,
        "pre-checkout decided"
    );
    Ok(Decided {
        answer,
        stored_by: Some(inserted.try_get("xact").map_err(ApiError::from)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telegram_api::types::User;

    fn query(from: i64, currency: &str, amount: i64) -> PreCheckoutQuery {
        PreCheckoutQuery {
            id: "q".into(),
            from: User {
                id: from,
                username: None,
                language_code: None,
            },
            currency: currency.into(),
            total_amount: amount,
            invoice_payload: "ord_x".into(),
        }
    }

    #[test]
    fn checks_run_in_api_order() {
        let ok = query(7, "XTR", 100);
        assert_eq!(
            check_order(orders::Status::Pending, 7, "XTR", 100, &ok),
            Ok(())
        );
        // Status first, even when everything else is wrong too.
        let bad = query(8, "USD", 1);
        assert_eq!(
            check_order(orders::Status::Paid, 7, "XTR", 100, &bad),
            Err(Reason::AlreadyPaid)
        );
        assert_eq!(
            check_order(orders::Status::Cancelled, 7, "XTR", 100, &bad),
            Err(Reason::OrderCancelled)
        );
        // Then the payer, then currency, then amount.
        assert_eq!(
            check_order(orders::Status::Pending, 7, "XTR", 100, &bad),
            Err(Reason::PayerMismatch)
        );
        assert_eq!(
            check_order(orders::Status::Pending, 7, "XTR", 100, &query(7, "USD", 1)),
            Err(Reason::CurrencyMismatch)
        );
        assert_eq!(
            check_order(orders::Status::Pending, 7, "XTR", 100, &query(7, "XTR", 99)),
            Err(Reason::AmountMismatch)
        );
    }

    #[test]
    fn an_order_priced_in_another_currency_cannot_be_paid_in_stars() {
        assert_eq!(
            check_order(
                orders::Status::Pending,
                7,
                "UAH",
                100,
                &query(7, "XTR", 100)
            ),
            Err(Reason::CurrencyMismatch)
        );
    }

    #[test]
    fn refusal_messages_are_short() {
        // That the reasons match the schema is checked against the migrated database
        // (tests/api/ops/schema.rs).
        let en = Language::En;
        for r in Reason::ALL {
            if r.is_pre_checkout_refusal() {
                assert!(
                    texts::pre_checkout_refusal(en, r).len() <= 100,
                    "{r:?} message too long"
                );
                for l in Language::ALL {
                    assert!(
                        crate::present::render::units(&texts::pre_checkout_refusal(l, r)) <= 100,
                        "{l} {r:?} message too long"
                    );
                    assert!(
                        !is_busy(&texts::pre_checkout_refusal(l, r)),
                        "{l} {r:?} has its own text"
                    );
                }
            }
        }
        let until = chrono::DateTime::<Utc>::MAX_UTC;
        assert!(texts::pre_checkout_hold_limited(en, &texts::not_before(en, until)).len() <= 100);
        // The longest date of each language (a long month name, two-digit day).
        let long = chrono::DateTime::parse_from_rfc3339("2030-11-30T23:59:00Z")
            .unwrap()
            .with_timezone(&Utc);
        for l in Language::ALL {
            let text = texts::pre_checkout_hold_limited(l, &texts::not_before(l, long));
            assert!(crate::present::render::units(&text) <= 100, "{text}");
        }
    }

    #[test]
    fn the_hold_limit_is_answered_with_when_to_try_again() {
        let en = Language::En;
        let until = chrono::DateTime::parse_from_rfc3339("2030-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        // Rounded up: at the minute shown the buyer is allowed.
        let text = texts::pre_checkout_hold_limited(en, &texts::not_before(en, until));
        assert!(text.contains("2030-01-02 03:05 UTC"), "{text}");
        let on_the_minute = until - chrono::Duration::seconds(5);
        assert_eq!(texts::not_before(en, on_the_minute), "2030-01-02 03:04 UTC");
        let uk =
            texts::pre_checkout_hold_limited(Language::Uk, &texts::not_before(Language::Uk, until));
        assert!(uk.ends_with("після 2 січня 2030 р. о 03:05 (UTC)."), "{uk}");
    }
}
