//! A Monobank payment whose webhook never came is found by asking Monobank, as WayForPay's
//! reconcile asks `CHECK_STATUS` ([`crate::payments::gateways::wayforpay::reconcile`]). The rows
//! chased are the invoices whose page was given out ([`invoices`]), first due
//! `RECONCILE_AFTER_SECS` after the invoice was made; each is asked about until Monobank's
//! answer is final, for at most [`invoices::GIVE_UP_AFTER`] from when it was made.
//!
//! A pass ([`run_once`], every [`EVERY`] in `subgate serve`) claims each due invoice (its
//! `next_check_at` pushed past the call's timeout, so another process skips it and a killed
//! one's claim runs out), gives the connection back, and asks
//! `GET /api/merchant/invoice/status?invoiceId=…`. An answer is a report like a webhook's and
//! goes the same way ([`updates::apply`]): `success` through the payment core (the late webhook
//! is then a duplicate) and the chase is `found`; `reversed` through the refund rule,
//! `failure`/`expired` (for which Monobank sends no webhook) release the order's holds, and the
//! chase is `settled`; a report on the way (`created`, `processing`, `hold`), an older one than
//! a webhook stored, a failed call or an unreadable answer is asked again after a back-off
//! (WayForPay's: a minute doubling to an hour, jittered), the last time at the deadline.

use std::{sync::Arc, time::Duration};

use deadpool_postgres::Pool;
use rand::Rng;

use super::{invoice_status, invoices, invoices::Chase, updates};
use crate::{
    common::{error::ApiError, shutdown::ShutdownSignal},
    config::{Config, MonobankConfig},
    payments::gateways::wayforpay::reconcile::backoff,
};

/// How often `subgate serve` runs a pass.
pub const EVERY: Duration = Duration::from_secs(30);
/// How long a claim lasts: past the call's timeout (15 s), with room for acting on the answer.
pub const LEASE: Duration = Duration::from_secs(90);
/// The most calls one pass makes; the rest wait for the next pass.
pub const PASS_MAX: usize = 200;

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Status calls made.
    pub checked: usize,
    /// Paid answers stored as payments by this pass.
    pub found: usize,
    /// Paid answers of a payment stored already (the webhook came meanwhile).
    pub already_paid: usize,
    /// `reversed` answers handed to the refund rule.
    pub refunded: usize,
    /// `failure` and `expired` answers.
    pub failed: usize,
    /// Answers that settled nothing, and failed calls: asked again later.
    pub retried: usize,
    /// Invoices given up on.
    pub gave_up: usize,
}

/// One pass, callable from tests.
pub async fn run_once(db: &Pool, config: &Config) -> Result<Report, ApiError> {
    run(db, config, &|| false).await
}

/// `subgate serve`'s loop: a pass every [`EVERY`] (the first at start-up) until shutdown, which
/// stops a pass between two calls. Without Monobank configured it does nothing.
pub async fn run_loop(db: Pool, config: Arc<Config>, shutdown: ShutdownSignal) {
    if config.monobank.is_none() {
        return;
    }
    let mut ticks = shutdown.ticks(EVERY);
    while ticks.next().await {
        let stop = || shutdown.is_triggered();
        if let Err(e) = run(&db, &config, &stop).await {
            tracing::error!(error = %e, "Monobank reconcile pass failed; trying again at the next tick");
        }
    }
}

/// One pass (see the module doc); `stop` is asked between calls.
pub async fn run(
    db: &Pool,
    config: &Config,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Report, ApiError> {
    let Some(mono) = config.monobank.as_ref() else {
        return Ok(Report::default());
    };
    let mut report = Report::default();
    while report.checked < PASS_MAX && !stop() {
        let due = {
            let client = db.get().await?;
            invoices::claim(&client, LEASE).await?
        };
        let Some(due) = due else { break };
        report.checked += 1;
        check(db, mono, &due, &mut report).await?;
    }
    Ok(report)
}

/// Asks about one claimed invoice and records what came of it.
async fn check(
    db: &Pool,
    mono: &MonobankConfig,
    due: &invoices::Due,
    report: &mut Report,
) -> Result<(), ApiError> {
    let answer = invoice_status(&mono.api_url, mono.token.expose(), &due.invoice_id).await;
    let error = match answer {
        Err(e) => Some(e.to_string()),
        Ok(status) => {
            let done = updates::apply(db, &status, true).await?;
            let settled = status.status.is_final()
                && !matches!(
                    done,
                    updates::Done::Stale { .. }
                        | updates::Done::Refund(
                            crate::payments::refunds::at_gateway::GatewayRefund::UnknownPayment
                        )
                );
            if settled {
                match &done {
                    updates::Done::Payment(a) if a.duplicate => report.already_paid += 1,
                    updates::Done::Payment(a) => {
                        report.found += 1;
                        tracing::warn!(
                            invoice_id = %due.invoice_id,
                            payment_id = a.payment.id,
                            outcome = %a.payment.outcome,
                            "lost Monobank webhook found by invoice/status; payment stored"
                        );
                    }
                    updates::Done::Refund(_) => report.refunded += 1,
                    _ => report.failed += 1,
                }
                let client = db.get().await?;
                invoices::checked(&client, &due.invoice_id).await?;
                return Ok(());
            }
            None
        }
    };
    report.retried += 1;
    let jitter = rand::thread_rng().gen_range(0.8..1.2);
    let wait = backoff(due.attempts + 1, jitter);
    let client = db.get().await?;
    let now = invoices::again(&client, &due.invoice_id, error.as_deref(), wait).await?;
    if now == Some(Chase::GaveUp) {
        report.gave_up += 1;
        tracing::warn!(
            invoice_id = %due.invoice_id,
            "Monobank invoice still not final 72 hours after it was made; no longer asked about"
        );
    }
    Ok(())
}
