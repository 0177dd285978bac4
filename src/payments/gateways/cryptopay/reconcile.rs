//! A Crypto Pay invoice whose webhook never came is found by asking, and one that expired
//! unpaid gives its order's holds back. The rows being chased are the `active` invoices of
//! [`crypto_invoices`] (first due `RECONCILE_AFTER_SECS` after the invoice was made); the state
//! lives on them rather than in `gateway_checks`, since an order may have one invoice per asset.
//!
//! A pass ([`run_once`], every [`EVERY`] in `subgate serve`):
//! 1. up to [`PASS_MAX`] due invoices are claimed (their `next_check_at` pushed past the call's
//!    timeout, so another process skips them and a killed one's claim runs out) and the
//!    connection is given back;
//! 2. Crypto Pay is asked about all of them in one `getInvoices` (`invoice_ids`);
//! 3. `paid` goes through [`core::apply_payment`] exactly as the webhook would
//!    ([`cryptopay::payment_of`]: gateway `cryptopay`, external id the invoice id, so a late
//!    webhook is a duplicate) and the invoice is `paid`; `expired` releases the order's holds
//!    ([`orders::release_holds`]) unless another invoice of the order is still open, and the
//!    invoice is `expired`; `active`, an invoice missing from the answer, or a failed call is
//!    asked again after a back-off (1 min doubling to 1 h, and soon after the invoice expires).

use std::{collections::HashMap, sync::Arc, time::Duration};

use chrono::Utc;
use deadpool_postgres::Pool;

use crate::{
    common::{error::ApiError, shutdown::ShutdownSignal},
    config::{Config, CryptoPayConfig},
    orders::{
        self,
        crypto_invoices::{self, Status},
    },
    payments::{
        core,
        gateways::{cryptopay, wayforpay},
    },
};

/// How often `subgate serve` runs a pass.
pub const EVERY: Duration = Duration::from_secs(30);
/// How long a claim lasts: past one call's timeout.
pub const LEASE: Duration = Duration::from_secs(60);
/// The most invoices one pass asks about (one `getInvoices` call).
pub const PASS_MAX: i64 = 100;

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Invoices asked about.
    pub checked: usize,
    /// Paid invoices stored as payments by this pass (their webhook never came).
    pub found: usize,
    /// Paid invoices whose payment was stored already (the webhook came meanwhile).
    pub already_paid: usize,
    /// Expired invoices (their order's holds released when no other invoice was open).
    pub expired: usize,
    /// Invoices still active, missing from the answer, or not asked (a failed call).
    pub again: usize,
}

/// The back-off after `checks` checks: WayForPay's reconcile's (1 min doubling to 1 h), without
/// its jitter.
pub fn backoff(checks: u32) -> Duration {
    let attempts = i32::try_from(checks).unwrap_or(i32::MAX).saturating_add(1);
    wayforpay::reconcile::backoff(attempts, 1.0)
}

/// `subgate serve`'s loop: a pass every [`EVERY`] while Crypto Pay is configured.
pub async fn run_loop(db: Pool, config: Arc<Config>, shutdown: ShutdownSignal) {
    let Some(cryptopay) = config.cryptopay.clone() else {
        return;
    };
    let mut ticks = shutdown.ticks(EVERY);
    while ticks.next().await {
        if let Err(e) = run_once(&db, &cryptopay).await {
            tracing::error!(error = %e, "Crypto Pay reconciliation pass failed; trying again at the next tick");
        }
    }
}

/// One pass (see the module documentation); callable from tests.
pub async fn run_once(db: &Pool, config: &CryptoPayConfig) -> Result<Report, ApiError> {
    let due = {
        let client = db.get().await?;
        crypto_invoices::claim_due(&client, PASS_MAX, LEASE).await?
    };
    let mut report = Report {
        checked: due.len(),
        ..Report::default()
    };
    if due.is_empty() {
        return Ok(report);
    }
    let ids: Vec<i64> = due.iter().map(|d| d.invoice_id).collect();
    let answer = cryptopay::get_invoices(&config.api_url, config.token.expose(), &ids).await;
    let invoices: HashMap<i64, cryptopay::Invoice> = match answer {
        Ok(list) => list.into_iter().map(|i| (i.invoice_id, i)).collect(),
        Err(e) => {
            tracing::warn!(error = %e, invoices = ids.len(), "getInvoices failed; asking again later");
            let client = db.get().await?;
            for d in &due {
                crypto_invoices::again(&client, d.invoice_id, backoff(0), Some(&e.to_string()))
                    .await?;
            }
            report.again = due.len();
            return Ok(report);
        }
    };
    for d in &due {
        let invoice = invoices.get(&d.invoice_id);
        match invoice {
            Some(invoice) if invoice.status == "paid" => {
                let payment = match cryptopay::payment_of(invoice, Utc::now()) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::error!(invoice_id = d.invoice_id, error = %e,
                            invoice = ?invoice, "paid Crypto Pay invoice could not be read; asking again later");
                        let client = db.get().await?;
                        crypto_invoices::again(
                            &client,
                            d.invoice_id,
                            wayforpay::reconcile::BACKOFF_MAX,
                            Some(&e.to_string()),
                        )
                        .await?;
                        report.again += 1;
                        continue;
                    }
                };
                let applied = core::apply_payment(db, payment).await?;
                let client = db.get().await?;
                crypto_invoices::settle(&client, d.invoice_id, Status::Paid).await?;
                if applied.duplicate {
                    report.already_paid += 1;
                } else {
                    tracing::warn!(invoice_id = d.invoice_id, order_id = d.order_id,
                        payment_id = applied.payment.id, outcome = %applied.payment.outcome,
                        "Crypto Pay payment found by asking: its webhook never came");
                    report.found += 1;
                }
            }
            Some(invoice) if invoice.status == "expired" => {
                let client = db.get().await?;
                let others =
                    crypto_invoices::others_active(&client, d.order_id, d.invoice_id).await?;
                crypto_invoices::settle(&client, d.invoice_id, Status::Expired).await?;
                drop(client);
                if others {
                    tracing::info!(
                        invoice_id = d.invoice_id,
                        order_id = d.order_id,
                        "Crypto Pay invoice expired; another invoice of the order is open, so its holds stay"
                    );
                } else {
                    let result = orders::release_holds(db, &d.reference).await?;
                    tracing::info!(
                        invoice_id = d.invoice_id,
                        order_id = d.order_id,
                        result = result.as_str(),
                        "Crypto Pay invoice expired: the order's holds released"
                    );
                }
                report.expired += 1;
            }
            other => {
                let error = match other.map(|i| i.status.as_str()) {
                    None => Some("not in getInvoices' answer"),
                    Some("active") => None,
                    Some(_) => Some("an unknown status"),
                };
                let client = db.get().await?;
                let checks = u32::try_from(d.checks - 1).unwrap_or(0);
                crypto_invoices::again(&client, d.invoice_id, backoff(checks), error).await?;
                report.again += 1;
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_an_hour() {
        assert_eq!(backoff(0), Duration::from_secs(60));
        assert_eq!(backoff(1), Duration::from_secs(120));
        assert_eq!(backoff(5), Duration::from_secs(1920));
        assert_eq!(backoff(6), Duration::from_secs(3600));
        assert_eq!(backoff(40), Duration::from_secs(3600));
    }
}
