//! A card payment whose callback never came is found by asking the gateway. This module owns
//! the `gateway_checks` table: one row per WayForPay order whose purchase link the bot sent
//! ([`link_issued`]), first due [`Config::reconcile_after`] later, chased with `CHECK_STATUS`
//! until it settles, for at most [`GIVE_UP_AFTER`] from when the link was sent.
//!
//! A pass ([`run_once`], every [`EVERY`] in `subgate serve`):
//! 1. rows whose order is no longer pending (its callback came, staff cancelled it) become
//!    `settled` without a call;
//! 2. each due row is claimed (its `next_check_at` pushed past the call's timeout, so another
//!    process skips it and a killed one's claim runs out), the connection is given back, and
//!    WayForPay is asked about its order reference — one `POST` to `WAYFORPAY_API_URL`, signed
//!    over `merchantAccount;orderReference`;
//! 3. the answer is believed only when its `merchantSignature` (over the callback's fields) and
//!    `merchantAccount` verify and it names the order asked about. Then `Approved` goes through
//!    [`core::apply_payment`] exactly as the callback would ([`wayforpay::normalize`]: gateway
//!    `wayforpay`, external id = order reference, so the late callback is a duplicate) and the
//!    row is `found`; `Refunded`/`Voided` is handed to [`gateway_refunds::refund_at_gateway`]
//!    and the row is `settled`; any other status (`Declined`, `Expired`, `InProcessing`, …),
//!    an unsigned or badly signed answer, an error or a timeout leaves the order pending and the
//!    row is asked again after a back-off ([`backoff`]: 1 min doubling to 1 h, jittered), the
//!    last one exactly at the deadline; a row past it that is still not paid is `gave_up`.
//!
//! An `Approved` answer that turns out to be a duplicate (the callback came while we asked)
//! settles the row instead: only a payment stored by us counts as found.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use rand::Rng;
use serde::Serialize;
use tokio_postgres::Row;

use super::{
    core,
    gateway_refunds::{self, GatewayRefund},
    wayforpay::{self, Status as WayForPayStatus},
};
use crate::{
    config::{Config, WayForPayConfig},
    db::{self, FromRow},
    error::ApiError,
    orders,
    shutdown::ShutdownSignal,
    state::AppState,
    vocabulary::Gateway,
};

/// How often `subgate serve` runs a pass.
pub const EVERY: Duration = Duration::from_secs(30);
/// How long one `CHECK_STATUS` call may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(15);
/// How long an order is chased, from when its purchase link was sent.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(72 * 3600);
/// The first back-off, doubled at each answer that settles nothing, up to [`BACKOFF_MAX`].
pub const BACKOFF_FIRST: Duration = Duration::from_secs(60);
/// The longest back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(3600);
/// The most checks one pass makes; the rest wait for the next pass.
pub const PASS_MAX: usize = 200;

crate::text_enum! {
    /// Where a check stands: the `state` column.
    pub enum State {
        /// Still pending at the gateway's last word; asked again at `next_check_at`.
        Chasing => "chasing",
        /// WayForPay said `Approved` and we stored the payment (`payment_id`).
        Found => "found",
        /// Still not paid 72 hours after the link was sent: no longer asked about.
        GaveUp => "gave_up",
        /// Nothing left to find: the order was paid (its callback came) or cancelled, or the
        /// gateway reported the payment refunded.
        Settled => "settled",
    }
}

/// The select list of [`Check`], over `gateway_checks g JOIN orders o`.
macro_rules! check_columns {
    () => {
        "g.order_id, o.reference, g.gateway, g.state, g.attempts, g.next_check_at, \
         g.last_checked_at, g.last_status, g.last_error, g.payment_id, o.purchase_link_at, \
         g.created_at, g.updated_at"
    };
}

/// One order being (or once) asked about at the gateway, as staff see it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"order_id": 7, "reference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21",
    "gateway": "wayforpay", "state": "found", "attempts": 2,
    "next_check_at": "2025-01-01T10:12:00Z", "last_checked_at": "2025-01-01T10:12:00Z",
    "last_status": "Approved", "last_error": null, "payment_id": 12,
    "purchase_link_at": "2025-01-01T10:00:00Z", "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:12:00Z"}))]
pub struct Check {
    pub order_id: i64,
    /// The order's reference: what WayForPay is asked about (`orderReference`).
    pub reference: String,
    #[schema(value_type = String)]
    pub gateway: Gateway,
    pub state: State,
    /// Calls made (answers, errors and timeouts alike).
    pub attempts: i32,
    /// When it is asked next (while `chasing`).
    pub next_check_at: DateTime<Utc>,
    pub last_checked_at: Option<DateTime<Utc>>,
    /// The last believed `transactionStatus` (`Declined`, `Approved`, …).
    pub last_status: Option<String>,
    /// Why the last call told us nothing: a transport error, a timeout, an HTTP status, an
    /// unsigned or badly signed answer (`null` after a believed answer).
    pub last_error: Option<String>,
    /// The payment stored from the gateway's answer (`found`).
    pub payment_id: Option<i64>,
    /// When the buyer was sent the purchase link.
    pub purchase_link_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl FromRow for Check {
    const COLUMNS: &'static str = check_columns!();

    fn from_row(r: &Row) -> Result<Check, tokio_postgres::Error> {
        Ok(Check {
            order_id: r.try_get("order_id")?,
            reference: r.try_get("reference")?,
            gateway: r.try_get("gateway")?,
            state: r.try_get("state")?,
            attempts: r.try_get("attempts")?,
            next_check_at: r.try_get("next_check_at")?,
            last_checked_at: r.try_get("last_checked_at")?,
            last_status: r.try_get("last_status")?,
            last_error: r.try_get("last_error")?,
            payment_id: r.try_get("payment_id")?,
            purchase_link_at: r.try_get("purchase_link_at")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }
}

/// How many checks are in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Counts {
    pub chasing: i64,
    pub found: i64,
    pub gave_up: i64,
    pub settled: i64,
}

// ---- the link ----

const INSERT_SQL: &str = "INSERT INTO gateway_checks (order_id, gateway, next_check_at)
     VALUES ($1, $2, statement_timestamp() + make_interval(secs => $3))
     ON CONFLICT (order_id) DO NOTHING";

/// The bot sent the buyer a WayForPay purchase link for order `order_id`: records when on the
/// order (the first time counts) and starts chasing it `after` from now, in one transaction.
/// A resent link changes nothing.
pub async fn link_issued(
    pool: &deadpool_postgres::Pool,
    order_id: i64,
    after: Duration,
) -> Result<(), ApiError> {
    let after = after.as_secs_f64();
    crate::transaction!(pool, |tx| {
        if orders::record_purchase_link(tx, order_id).await?.is_some() {
            db::execute(tx, INSERT_SQL, &[&order_id, &Gateway::WayForPay, &after]).await?;
        }
        Ok(())
    })
}

// ---- reading ----

const LIST_SQL: &str = concat!(
    "SELECT ",
    check_columns!(),
    " FROM gateway_checks g JOIN orders o ON o.id = g.order_id
     WHERE g.order_id > $1 AND ($2::text IS NULL OR g.state = $2::text)
     ORDER BY g.order_id LIMIT $3"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    check_columns!(),
    " FROM gateway_checks g JOIN orders o ON o.id = g.order_id WHERE g.order_id = $1"
);
const COUNTS_SQL: &str = "SELECT state, count(*) AS n FROM gateway_checks GROUP BY state";

/// Up to `limit` checks with an order id above `after`, by order id, in `state` if given.
pub async fn list(
    client: &impl GenericClient,
    state: Option<State>,
    after: i64,
    limit: i64,
) -> Result<Vec<Check>, ApiError> {
    db::all(client, LIST_SQL, &[&after, &state, &limit]).await
}

/// The check of order `order_id`, if it was ever chased.
pub async fn get(client: &impl GenericClient, order_id: i64) -> Result<Option<Check>, ApiError> {
    db::opt(client, GET_SQL, &[&order_id]).await
}

/// How many checks are in each state (a scan of a table that holds one row per card order).
pub async fn counts(client: &impl GenericClient) -> Result<Counts, ApiError> {
    let mut counts = Counts::default();
    for r in db::rows(client, COUNTS_SQL, &[]).await? {
        let n: i64 = r.try_get("n")?;
        match r.try_get::<_, State>("state")? {
            State::Chasing => counts.chasing = n,
            State::Found => counts.found = n,
            State::GaveUp => counts.gave_up = n,
            State::Settled => counts.settled = n,
        }
    }
    Ok(counts)
}

const CHASING_SQL: &str = "SELECT count(*) AS n FROM gateway_checks WHERE state = 'chasing'";

/// How many orders are being chased (the metrics' pending gauge), over the due index.
pub async fn chasing(client: &impl GenericClient) -> Result<i64, ApiError> {
    Ok(db::row_one(client, CHASING_SQL, &[]).await?.try_get("n")?)
}

// ---- the pass ----

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Rows settled because their order was no longer pending (no call made).
    pub settled_unasked: u64,
    /// `CHECK_STATUS` calls made.
    pub checked: usize,
    /// Approved answers stored as payments.
    pub found: usize,
    /// Refunded or voided answers handed to the refund rule.
    pub refunded: usize,
    /// Approved answers of a payment already stored (the callback came meanwhile).
    pub already_paid: usize,
    /// Answers that settled nothing, and failed calls: asked again later.
    pub retried: usize,
    /// Rows given up on.
    pub gave_up: usize,
}

/// One pass with the default timeout, callable from tests.
pub async fn run_once(state: &AppState) -> Result<Report, ApiError> {
    Checker::new(CHECK_TIMEOUT).run(state, &|| false).await
}

/// `subgate serve`'s loop: a pass every [`EVERY`] (the first at start-up) until shutdown,
/// which stops a pass between two checks. Without WayForPay configured it does nothing.
pub async fn run_loop(state: AppState, shutdown: ShutdownSignal) {
    if state.config.wayforpay.is_none() {
        return;
    }
    let checker = Checker::new(CHECK_TIMEOUT);
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => break,
        }
        let stop = || shutdown.is_triggered();
        if let Err(e) = checker.run(&state, &stop).await {
            tracing::error!(error = %e, "reconciliation pass failed; trying again at the next tick");
        }
    }
}

/// Asks WayForPay over one HTTP client, with a per-call timeout.
pub struct Checker {
    http: reqwest::Client,
    timeout: Duration,
}

/// A claimed row.
struct Due {
    order_id: i64,
    reference: String,
}

/// What a call told us.
enum Answer {
    /// A verified answer (its signature and merchant account checked).
    Verified(Box<wayforpay::Callback>),
    /// Nothing to believe: why, for the log and `last_error`.
    Unbelieved(String),
}

/// How a check is recorded after its call.
enum Record<'a> {
    /// Nothing settled: `last_status` (when believed) or `last_error`, and asked again.
    Again {
        status: Option<&'a str>,
        error: Option<&'a str>,
    },
    /// Closed as `found` or `settled`.
    Closed {
        state: State,
        status: &'a str,
        payment_id: Option<i64>,
    },
}

/// The deadline of a row, over `gateway_checks g JOIN orders o` (`$2` is [`GIVE_UP_AFTER`] in
/// seconds).
macro_rules! deadline {
    () => {
        "(COALESCE(o.purchase_link_at, g.created_at) + make_interval(secs => $2))"
    };
}

const SETTLE_UNASKED_SQL: &str = "UPDATE gateway_checks g
     SET state = 'settled', updated_at = statement_timestamp()
     FROM orders o
     WHERE o.id = g.order_id AND g.state = 'chasing' AND o.status <> 'pending'";

const CLAIM_SQL: &str = "UPDATE gateway_checks g
     SET next_check_at = statement_timestamp() + make_interval(secs => $1)
     FROM orders o
     WHERE o.id = g.order_id
       AND g.order_id = (
           SELECT c.order_id FROM gateway_checks c JOIN orders p ON p.id = c.order_id
           WHERE c.state = 'chasing' AND c.next_check_at <= statement_timestamp()
             AND p.status = 'pending'
           ORDER BY c.next_check_at LIMIT 1
           FOR UPDATE OF c SKIP LOCKED)
     RETURNING g.order_id, o.reference";

const AGAIN_SQL: &str = concat!(
    "UPDATE gateway_checks g SET
         attempts = g.attempts + 1,
         last_checked_at = statement_timestamp(),
         last_status = COALESCE($3, g.last_status),
         last_error = $4,
         state = CASE WHEN statement_timestamp() >= ",
    deadline!(),
    " THEN 'gave_up' ELSE 'chasing' END,
         next_check_at = LEAST(statement_timestamp() + make_interval(secs => $5), ",
    deadline!(),
    "),
         updated_at = statement_timestamp()
     FROM orders o
     WHERE o.id = g.order_id AND g.order_id = $1 AND g.state = 'chasing'
     RETURNING g.state"
);

const CLOSE_SQL: &str = "UPDATE gateway_checks SET
         state = $2, last_status = $3, payment_id = $4, last_error = NULL,
         attempts = attempts + 1,
         last_checked_at = statement_timestamp(), updated_at = statement_timestamp()
     WHERE order_id = $1 AND state = 'chasing'";

/// The wait before asking again after `attempts` calls (≥ 1): [`BACKOFF_FIRST`] doubled per
/// call up to [`BACKOFF_MAX`], times `jitter` (drawn from 0.8..1.2, so many orders whose links
/// went out together are not asked in one burst).
#[must_use]
pub fn backoff(attempts: i32, jitter: f64) -> Duration {
    let doublings = attempts.saturating_sub(1).clamp(0, 16) as u32;
    let secs = BACKOFF_FIRST
        .as_secs()
        .saturating_mul(1u64 << doublings)
        .min(BACKOFF_MAX.as_secs());
    Duration::from_secs_f64(secs as f64 * jitter.clamp(0.5, 1.5))
}

impl Checker {
    /// A checker whose calls time out after `timeout`.
    pub fn new(timeout: Duration) -> Checker {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with rustls builds");
        Checker { http, timeout }
    }

    /// One pass (see the module doc); `stop` is asked between checks.
    pub async fn run(
        &self,
        state: &AppState,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<Report, ApiError> {
        let Some(wfp) = state.config.wayforpay.as_ref() else {
            return Ok(Report::default());
        };
        let mut report = Report::default();
        {
            let client = state.db.get().await?;
            report.settled_unasked = db::execute(&client, SETTLE_UNASKED_SQL, &[]).await?;
        }
        // A claim outlasts the call, so no other process asks about the same order meanwhile.
        let lease = (self.timeout + Duration::from_secs(60)).as_secs_f64();
        while report.checked < PASS_MAX && !stop() {
            let due = {
                let client = state.db.get().await?;
                db::row_opt(&client, CLAIM_SQL, &[&lease]).await?
            };
            let Some(row) = due else { break };
            let due = Due {
                order_id: row.try_get("order_id")?,
                reference: row.try_get("reference")?,
            };
            report.checked += 1;
            let answer = self.ask(&state.config, wfp, &due.reference).await;
            self.settle(state, &due, answer, &mut report).await?;
        }
        Ok(report)
    }

    /// Asks WayForPay about `reference`; no connection is held meanwhile.
    async fn ask(&self, config: &Config, wfp: &WayForPayConfig, reference: &str) -> Answer {
        let key = wfp.secret_key.expose().as_bytes();
        let body = wayforpay::check_status_request(key, &wfp.merchant_account, reference);
        let sent = self
            .http
            .post(&config.wayforpay_api_url)
            .json(&body)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Answer::Unbelieved(format!(
                    "no answer within {} s",
                    self.timeout.as_secs_f64()
                ));
            }
            Err(e) => return Answer::Unbelieved(format!("request failed: {}", without_url(e))),
        };
        let status = response.status();
        if !status.is_success() {
            return Answer::Unbelieved(format!("WayForPay answered HTTP {}", status.as_u16()));
        }
        let bytes = match response.bytes().await {
            Ok(b) => b,
            Err(e) if e.is_timeout() => {
                return Answer::Unbelieved(format!(
                    "no answer within {} s",
                    self.timeout.as_secs_f64()
                ));
            }
            Err(e) => return Answer::Unbelieved(format!("answer unread: {}", without_url(e))),
        };
        let cb = match wayforpay::parse_check_status(&bytes) {
            Ok(cb) => cb,
            Err(e) => {
                return Answer::Unbelieved(match wayforpay::answer_reason(&bytes) {
                    Some(reason) => format!("no status in the answer: {reason}"),
                    None => format!("not a status answer: {e}"),
                });
            }
        };
        if !wayforpay::verify_signature(key, &cb) {
            tracing::warn!(
                order_reference = %reference,
                answer = ?cb,
                "WayForPay CHECK_STATUS answer's merchantSignature does not verify; not believed"
            );
            return Answer::Unbelieved("merchantSignature does not verify".into());
        }
        if cb.merchant_account != wfp.merchant_account {
            tracing::warn!(order_reference = %reference, "CHECK_STATUS answer names another merchant account");
            return Answer::Unbelieved("merchantAccount is not ours".into());
        }
        if cb.order_reference != reference {
            tracing::warn!(order_reference = %reference, "CHECK_STATUS answer is about another order");
            return Answer::Unbelieved("the answer is about another order".into());
        }
        Answer::Verified(Box::new(cb))
    }

    /// Acts on an answer and records it.
    async fn settle(
        &self,
        state: &AppState,
        due: &Due,
        answer: Answer,
        report: &mut Report,
    ) -> Result<(), ApiError> {
        let cb = match answer {
            Answer::Unbelieved(error) => {
                crate::metrics::reconciliation_check("error");
                tracing::info!(order_id = due.order_id, error = %error, "CHECK_STATUS told us nothing; asking again later");
                report.retried += 1;
                let record = Record::Again {
                    status: None,
                    error: Some(&error),
                };
                return self.record(state, due, record, report).await;
            }
            Answer::Verified(cb) => cb,
        };
        let status = cb.transaction_status.as_str();
        let record = match cb.status() {
            WayForPayStatus::Approved => {
                crate::metrics::reconciliation_check("approved");
                let payment = match wayforpay::normalize(&cb, Utc::now()) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::warn!(error = %e, answer = ?cb, "approved CHECK_STATUS answer cannot be stored; asking again later");
                        report.retried += 1;
                        let error = format!("approved, but not storable: {e}");
                        let record = Record::Again {
                            status: Some(status),
                            error: Some(&error),
                        };
                        return self.record(state, due, record, report).await;
                    }
                };
                let applied = core::apply_payment(&state.db, payment).await?;
                if applied.duplicate {
                    report.already_paid += 1;
                    tracing::info!(
                        order_id = due.order_id,
                        payment_id = applied.payment.id,
                        "approved at WayForPay and already stored"
                    );
                    Record::Closed {
                        state: State::Settled,
                        status,
                        payment_id: None,
                    }
                } else {
                    report.found += 1;
                    crate::metrics::reconciliation_found();
                    tracing::warn!(
                        order_id = due.order_id,
                        payment_id = applied.payment.id,
                        outcome = %applied.payment.outcome,
                        "lost WayForPay callback found by CHECK_STATUS; payment stored"
                    );
                    Record::Closed {
                        state: State::Found,
                        status,
                        payment_id: Some(applied.payment.id),
                    }
                }
            }
            WayForPayStatus::Refunded => {
                crate::metrics::reconciliation_check("refunded");
                report.refunded += 1;
                let refund = gateway_refunds::refund_at_gateway(
                    &state.db,
                    Gateway::WayForPay,
                    &due.reference,
                )
                .await?;
                let payment_id = match refund {
                    GatewayRefund::Refunded { payment_id, .. }
                    | GatewayRefund::AlreadyRefunded { payment_id }
                    | GatewayRefund::NotApplied { payment_id } => Some(payment_id),
                    GatewayRefund::UnknownPayment => None,
                };
                tracing::info!(order_id = due.order_id, status, result = ?refund, "WayForPay reports the order refunded");
                Record::Closed {
                    state: State::Settled,
                    status,
                    payment_id,
                }
            }
            WayForPayStatus::NotPaid => {
                crate::metrics::reconciliation_check("not_paid");
                report.retried += 1;
                Record::Again {
                    status: Some(status),
                    error: None,
                }
            }
        };
        self.record(state, due, record, report).await
    }

    async fn record(
        &self,
        state: &AppState,
        due: &Due,
        record: Record<'_>,
        report: &mut Report,
    ) -> Result<(), ApiError> {
        let client = state.db.get().await?;
        match record {
            Record::Again { status, error } => {
                let attempts: i32 = db::row_opt(
                    &client,
                    "SELECT attempts + 1 AS n FROM gateway_checks WHERE order_id = $1",
                    &[&due.order_id],
                )
                .await?
                .map_or(Ok(1), |r| r.try_get("n"))?;
                let jitter = rand::thread_rng().gen_range(0.8..1.2);
                let wait = backoff(attempts, jitter).as_secs_f64();
                let give_up = GIVE_UP_AFTER.as_secs_f64();
                let row = db::row_opt(
                    &client,
                    AGAIN_SQL,
                    &[&due.order_id, &give_up, &status, &error, &wait],
                )
                .await?;
                if let Some(row) = row
                    && row.try_get::<_, State>("state")? == State::GaveUp
                {
                    report.gave_up += 1;
                    tracing::warn!(
                        order_id = due.order_id,
                        last_status = ?status,
                        "card order still not paid 72 hours after its purchase link; no longer asked about"
                    );
                }
            }
            Record::Closed {
                state,
                status,
                payment_id,
            } => {
                db::execute(
                    &client,
                    CLOSE_SQL,
                    &[&due.order_id, &state, &status, &payment_id],
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// A reqwest error's text without the URL (which may carry a token for other APIs; here it is
/// only noise).
fn without_url(e: reqwest::Error) -> String {
    e.without_url().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_from_a_minute_to_an_hour() {
        let secs = |n| backoff(n, 1.0).as_secs();
        assert_eq!(
            [1, 2, 3, 4, 5, 6, 7, 8, 100].map(secs),
            [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
        );
        assert_eq!(secs(0), 60);
        assert_eq!(backoff(1, 0.8).as_secs(), 48);
        assert_eq!(backoff(50, 1.2).as_secs(), 4320);
    }

    #[test]
    fn states_are_spelled_as_the_schema_checks() {
        assert_eq!(
            State::ALL.map(State::as_str),
            ["chasing", "found", "gave_up", "settled"]
        );
    }
}
