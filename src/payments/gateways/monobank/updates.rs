//! What a report of a Monobank invoice does, whether the webhook delivered it or the reconcile
//! asked for it — the one path, so a late webhook after the reconcile (or the reverse) is a
//! repeat:
//!
//! 1. the report is stored as the invoice's newest ([`invoices::observe`]); one older than a
//!    report stored before is stale and does nothing (Monobank's webhooks are not ordered, and
//!    a signed body can be replayed: its `modifiedDate` orders it);
//! 2. `success` goes through the payment core (gateway `monobank`, external id the invoice id:
//!    a repeat is a duplicate); `reversed` through the refund rule (recorded as the payment
//!    when it comes first, so the payment that follows grants nothing); `failure` and
//!    `expired` release the order's holds, unless another page of the order given out can
//!    still be paid; `created`, `processing`, `hold` do nothing;
//! 3. a final report acted on ends the invoice's chase.
//!
//! Step 1 is its own statement, committed before step 2 runs in the core's (or the refund's)
//! own transaction: two reports of different statuses delivered at once are each judged on the
//! newest stored, and whatever both go on to do is ordered by the core's locks — a payment and
//! its refund end the same whichever runs first ([`gateway_refunds`]). A failure in step 2
//! leaves the report stored but the chase open; the webhook answers 5xx and Monobank (or the
//! reconcile) brings it again, as new as the stored one, so it is acted on again.

use deadpool_postgres::Pool;

use super::{Action, Report, invoices, invoices::Chase, invoices::Observed};
use crate::{
    common::{error::ApiError, vocabulary::Gateway},
    orders::{self, HoldRelease},
    payments::{
        core::{self, Applied},
        refunds::at_gateway::{self as gateway_refunds, GatewayRefund},
    },
};

/// What a report came to.
#[derive(Debug)]
pub enum Done {
    /// Older than a report stored before (`stored` is the newest status): nothing changed.
    Stale { stored: super::Status },
    /// The payment core's answer to a `success`.
    Payment(Box<Applied>),
    /// The refund rule's answer to a `reversed`.
    Refund(GatewayRefund),
    /// What releasing the order's holds found (`failure`, `expired`).
    Hold(HoldRelease),
    /// A `failure` or `expired` invoice of an order with another page still open: its holds
    /// are left to that page.
    HoldKept,
    /// Nothing to do; why.
    Nothing(String),
}

impl Done {
    /// The result's name (the answer's `result`, logs): the payment's outcome, `duplicate`, the
    /// refund's or the release's result, `hold_kept`, `nothing` or `stale`.
    pub fn as_str(&self) -> &str {
        match self {
            Done::Stale { .. } => "stale",
            Done::Payment(a) if a.duplicate => "duplicate",
            Done::Payment(a) => a.payment.outcome.as_str(),
            Done::Refund(r) => r.as_str(),
            Done::Hold(h) => h.as_str(),
            Done::HoldKept => "hold_kept",
            Done::Nothing(_) => "nothing",
        }
    }

    /// The payment stored or refunded, when there is one.
    pub fn payment_id(&self) -> Option<i64> {
        match self {
            Done::Payment(a) => Some(a.payment.id),
            Done::Refund(r) => r.payment_id(),
            _ => None,
        }
    }
}

/// Acts on `report` (see the module doc). `found_by_reconcile`: the reconcile asked for it, so
/// a payment it stores ends the chase as `found` rather than `settled`.
pub async fn apply(
    pool: &Pool,
    report: &Report,
    found_by_reconcile: bool,
) -> Result<Done, ApiError> {
    let observed = {
        let client = pool.get().await?;
        invoices::observe(&client, report).await?
    };
    let order_id = match observed {
        Observed::Stale { stored } => {
            tracing::info!(
                invoice_id = %report.invoice_id,
                status = %report.status,
                modified_date = %report.modified_date,
                stored = %stored,
                "Monobank report older than one stored: nothing changed"
            );
            return Ok(Done::Stale { stored });
        }
        Observed::Newest { order_id } => order_id,
    };
    let done = match report.action() {
        Action::Pay(payment) => Done::Payment(Box::new(core::apply_payment(pool, payment).await?)),
        Action::Refund(reported) => Done::Refund(
            gateway_refunds::refund_at_gateway(
                pool,
                Gateway::Monobank,
                &report.invoice_id,
                Some(&reported),
            )
            .await?,
        ),
        Action::Release(reference) => {
            let open = match order_id {
                Some(order_id) => {
                    let client = pool.get().await?;
                    invoices::other_page_open(&client, order_id, &report.invoice_id).await?
                }
                None => false,
            };
            if open {
                Done::HoldKept
            } else {
                Done::Hold(orders::release_holds(pool, &reference).await?)
            }
        }
        Action::Nothing(why) => Done::Nothing(why),
    };
    if report.status.is_final() {
        let chase = match &done {
            Done::Payment(a) if found_by_reconcile && !a.duplicate => Chase::Found,
            _ => Chase::Settled,
        };
        let settles = !matches!(done, Done::Refund(GatewayRefund::UnknownPayment));
        if settles {
            let client = pool.get().await?;
            invoices::settle(&client, &report.invoice_id, chase, done.payment_id()).await?;
        }
    }
    tracing::info!(
        invoice_id = %report.invoice_id,
        status = %report.status,
        result = done.as_str(),
        payment_id = ?done.payment_id(),
        "Monobank report acted on"
    );
    Ok(done)
}
