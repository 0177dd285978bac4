//! A card payment whose callback never came is found by asking the gateway. The rows being
//! chased are [`crate::payments::gateways::wayforpay::checks`] (one per WayForPay order whose purchase link the bot
//! sent, first due `RECONCILE_AFTER_SECS` later); this module makes the calls and acts on the
//! answers, for at most [`GIVE_UP_AFTER`] from when the link was sent.
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
//!    [`crate::payments::core::apply_payment`] exactly as the callback would ([`crate::payments::gateways::wayforpay::normalize`]: gateway
//!    `wayforpay`, external id = order reference, so the late callback is a duplicate) and the
//!    row is `found`; `Refunded`/`Voided` is handed to [`crate::payments::refunds::at_gateway::refund_at_gateway`]
//!    (which takes back what the payment bought, or records the refund as the payment when it
//!    has not come, so its late callback grants nothing) and the row is `settled` naming that
//!    payment — a refund it could not record (its money cannot be stored) settles nothing and
//!    is asked about again; any other status (`Declined`, `Expired`, `InProcessing`, …),
//!    an unsigned or badly signed answer, an error or a timeout leaves the order pending and the
//!    row is asked again after a back-off ([`backoff`]: 1 min doubling to 1 h, jittered), the
//!    last one exactly at the deadline; a row past it that is still not paid is `gave_up`.
//!
//! An `Approved` answer that turns out to be a duplicate (the callback came while we asked)
//! settles the row instead: only a payment stored by us counts as found.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use deadpool_postgres::Pool;
use rand::Rng;

use crate::{
    common::{error::ApiError, shutdown::ShutdownSignal, vocabulary::Gateway},
    config::{Config, WayForPayConfig},
    payments::{
        core,
        gateways::wayforpay::{
            self, Status as WayForPayStatus, checks as gateway_checks,
            checks::{Due, State},
        },
        refunds::at_gateway as gateway_refunds,
    },
};

pub use crate::payments::gateways::wayforpay::checks::GIVE_UP_AFTER;

/// How often `subgate serve` runs a pass.
pub const EVERY: Duration = Duration::from_secs(30);
/// How long one `CHECK_STATUS` call may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(15);
/// The first back-off, doubled at each answer that settles nothing, up to [`BACKOFF_MAX`].
pub const BACKOFF_FIRST: Duration = Duration::from_secs(60);
/// The longest back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(3600);
/// The most checks one pass makes; the rest wait for the next pass.
pub const PASS_MAX: usize = 200;

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
pub async fn run_once(db: &Pool, config: &Config) -> Result<Report, ApiError> {
    Checker::new(CHECK_TIMEOUT).run(db, config, &|| false).await
}

/// `subgate serve`'s loop: a pass every [`EVERY`] (the first at start-up) until shutdown,
/// which stops a pass between two checks. Without WayForPay configured it does nothing.
pub async fn run_loop(db: Pool, config: Arc<Config>, shutdown: ShutdownSignal) {
    if config.wayforpay.is_none() {
        return;
    }
    let checker = Checker::new(CHECK_TIMEOUT);
    let mut ticks = shutdown.ticks(EVERY);
    while ticks.next().await {
        let stop = || shutdown.is_triggered();
        if let Err(e) = checker.run(&db, &config, &stop).await {
            tracing::error!(error = %e, "reconciliation pass failed; trying again at the next tick");
        }
    }
}

/// Asks WayForPay over one HTTP client, with a per-call timeout.
pub struct Checker {
    http: reqwest::Client,
    timeout: Duration,
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
        db: &Pool,
        config: &Config,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<Report, ApiError> {
        let Some(wfp) = config.wayforpay.as_ref() else {
            return Ok(Report::default());
        };
        let mut report = Report::default();
        {
            let client = db.get().await?;
            report.settled_unasked = gateway_checks::settle_unasked(&client).await?;
        }
        // A claim outlasts the call, so no other process asks about the same order meanwhile.
        let lease = self.timeout + Duration::from_secs(60);
        while report.checked < PASS_MAX && !stop() {
            let due = {
                let client = db.get().await?;
                gateway_checks::claim(&client, lease).await?
            };
            let Some(due) = due else { break };
            report.checked += 1;
            let answer = self.ask(config, wfp, &due.reference).await;
            self.settle(db, &due, answer, &mut report).await?;
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
        db: &Pool,
        due: &Due,
        answer: Answer,
        report: &mut Report,
    ) -> Result<(), ApiError> {
        let cb = match answer {
            Answer::Unbelieved(error) => {
                crate::common::metrics::reconciliation_check("error");
                tracing::info!(order_id = due.order_id, error = %error, "CHECK_STATUS told us nothing; asking again later");
                report.retried += 1;
                let record = Record::Again {
                    status: None,
                    error: Some(&error),
                };
                return self.record(db, due, record, report).await;
            }
            Answer::Verified(cb) => cb,
        };
        let status = cb.transaction_status.as_str();
        let record = match cb.status() {
            WayForPayStatus::Approved => {
                crate::common::metrics::reconciliation_check("approved");
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
                        return self.record(db, due, record, report).await;
                    }
                };
                let applied = core::apply_payment(db, payment).await?;
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
                    crate::common::metrics::reconciliation_found();
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
                crate::common::metrics::reconciliation_check("refunded");
                report.refunded += 1;
                let reported = wayforpay::refund_report(&cb, Utc::now());
                let refund = gateway_refunds::refund_at_gateway(
                    db,
                    Gateway::WayForPay,
                    &due.reference,
                    reported.as_ref(),
                )
                .await?;
                tracing::info!(order_id = due.order_id, status, result = ?refund, "WayForPay reports the order refunded");
                match refund.payment_id() {
                    Some(payment_id) => Record::Closed {
                        state: State::Settled,
                        status,
                        payment_id: Some(payment_id),
                    },
                    // Matched to no payment and not recorded: the order is not settled by it.
                    None => {
                        report.retried += 1;
                        Record::Again {
                            status: Some(status),
                            error: Some("refunded, but its money cannot be stored"),
                        }
                    }
                }
            }
            WayForPayStatus::NotPaid => {
                crate::common::metrics::reconciliation_check("not_paid");
                report.retried += 1;
                Record::Again {
                    status: Some(status),
                    error: None,
                }
            }
        };
        self.record(db, due, record, report).await
    }

    async fn record(
        &self,
        db: &Pool,
        due: &Due,
        record: Record<'_>,
        report: &mut Report,
    ) -> Result<(), ApiError> {
        let client = db.get().await?;
        match record {
            Record::Again { status, error } => {
                let attempts = gateway_checks::attempts(&client, due.order_id).await? + 1;
                let jitter = rand::thread_rng().gen_range(0.8..1.2);
                let wait = backoff(attempts, jitter);
                let now = gateway_checks::again(&client, due.order_id, status, error, wait).await?;
                if now == Some(State::GaveUp) {
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
                gateway_checks::close(&client, due.order_id, state, status, payment_id).await?;
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
