//! A refund made at the gateway (WayForPay `Refunded`/`Voided`, later Stripe
//! `charge.refunded`): the applied payment becomes `refunded` (`refunded_at_gateway`) and every
//! membership it extended is shortened by what it bought, once however often it is reported.

use deadpool_postgres::Pool;

use crate::{error::ApiError, vocabulary::Gateway};

/// What a reported gateway refund did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayRefund {
    /// The payment was applied and is `refunded` now; `memberships` were shortened, of which
    /// `expired` ended (their members are removed).
    Refunded {
        payment_id: i64,
        memberships: usize,
        expired: usize,
    },
    /// Reported before: nothing changed.
    AlreadyRefunded { payment_id: i64 },
    /// We hold a payment of that id that was never applied (kept for review, or refunded by
    /// us): nothing to take back.
    NotApplied { payment_id: i64 },
    /// No payment of that gateway and external id is recorded.
    UnknownPayment,
}

/// Takes back what the payment `(gateway, external_id)` bought, in one transaction.
pub async fn refund_at_gateway(
    _pool: &Pool,
    _gateway: Gateway,
    _external_id: &str,
) -> Result<GatewayRefund, ApiError> {
    Ok(GatewayRefund::UnknownPayment)
}
