//! A card payment disputed with the buyer's bank (Stripe's `charge.dispute.created` and
//! `charge.dispute.closed`).
//!
//! **Opened.** The money is withdrawn while the dispute runs, so the payment is treated as a
//! refund at the gateway ([`gateway_refunds`]), in the same transaction and lock order, with
//! one difference: it becomes `disputed` (`disputed_at_gateway`) instead of `refunded`. Every
//! membership it extended is shortened by what it bought, a membership that ends loses its
//! member, once however often the dispute is reported. Only an `applied` payment is disputed:
//! one refunded already (or never applied) is answered `not_applied` and left alone, as a
//! refund after a dispute is.
//!
//! **Won.** The money comes back, but the access it bought was taken: the payment goes to
//! staff (`needs_review`, `dispute_won`), who grant again by hand (`POST /api/memberships`, or
//! the console's "Grant by hand" on the payment). Nothing is granted by itself: the term the
//! dispute took may have been used up, or the buyer may have bought again meanwhile. One
//! conditional `UPDATE … WHERE outcome = 'disputed'`: of concurrent reports exactly one moves
//! it, and no other writer touches a disputed payment, so no lock is needed. A lost dispute
//! leaves the payment `disputed`.

use deadpool_postgres::{GenericClient, Pool};

use crate::payments::{
    core::{Outcome, Reason},
    refunds::{
        at_gateway as gateway_refunds,
        at_gateway::{GatewayRefund, TakenBack},
    },
};
use crate::{
    common::{error::ApiError, vocabulary::Gateway},
    db,
};

impl TakenBack {
    /// A dispute opened at the gateway.
    pub const DISPUTED: TakenBack = TakenBack {
        outcome: Outcome::Disputed,
        reason: Reason::DisputedAtGateway,
    };
}

/// What a reported dispute did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// The payment was applied and is `disputed` now; `memberships` were shortened, of which
    /// `expired` ended (their members are removed).
    Disputed {
        payment_id: i64,
        memberships: usize,
        expired: usize,
    },
    /// Reported before: nothing changed.
    AlreadyDisputed { payment_id: i64 },
    /// The payment is not applied (refunded, in review, a dispute already won): nothing to
    /// take back.
    NotApplied { payment_id: i64 },
    /// No payment of that gateway and external id is recorded (yet).
    UnknownPayment,
}

impl Opened {
    /// The result's name, as door 4 answers it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Opened::Disputed { .. } => "disputed",
            Opened::AlreadyDisputed { .. } => "already_disputed",
            Opened::NotApplied { .. } => "not_applied",
            Opened::UnknownPayment => "unknown_payment",
        }
    }
}

/// Takes back what the payment `(gateway, external_id)` bought because its charge is disputed,
/// and marks it `disputed` (see the module doc). A deadlock victim is run again; an error
/// leaves everything as it was.
pub async fn dispute_at_gateway(
    pool: &Pool,
    gateway: Gateway,
    external_id: &str,
) -> Result<Opened, ApiError> {
    let result =
        gateway_refunds::take_back(pool, &gateway, external_id, TakenBack::DISPUTED, None).await?;
    let opened = match result {
        GatewayRefund::Refunded {
            payment_id,
            memberships,
            expired,
        } => Opened::Disputed {
            payment_id,
            memberships,
            expired,
        },
        GatewayRefund::AlreadyRefunded { payment_id } => Opened::AlreadyDisputed { payment_id },
        // A dispute reports nothing to record (`None` above), so it never records a payment.
        GatewayRefund::NotApplied { payment_id }
        | GatewayRefund::RecordedBeforePayment { payment_id } => Opened::NotApplied { payment_id },
        GatewayRefund::UnknownPayment => Opened::UnknownPayment,
    };
    match &opened {
        Opened::Disputed {
            payment_id,
            memberships,
            expired,
        } => tracing::warn!(
            payment_id,
            gateway = %gateway,
            external_id,
            memberships,
            expired,
            "payment disputed at the gateway: what it bought was taken back"
        ),
        Opened::UnknownPayment => tracing::warn!(
            gateway = %gateway,
            external_id,
            "dispute of a payment we have not recorded: nothing taken back; check the \
             gateway's record"
        ),
        other => tracing::info!(
            gateway = %gateway,
            external_id,
            result = other.as_str(),
            "dispute at the gateway changed nothing"
        ),
    }
    Ok(opened)
}

/// What a dispute decided for us did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Won {
    /// The disputed payment is `needs_review` (`dispute_won`) now.
    InReview { payment_id: i64 },
    /// Reported before: nothing changed.
    AlreadyInReview { payment_id: i64 },
    /// The payment is not `disputed` (its dispute never reached us, or it was refunded):
    /// nothing changed.
    NotDisputed { payment_id: i64 },
    /// No payment of that gateway and external id is recorded.
    UnknownPayment,
}

impl Won {
    /// The result's name, as door 4 answers it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Won::InReview { .. } => "in_review",
            Won::AlreadyInReview { .. } => "already_in_review",
            Won::NotDisputed { .. } => "not_disputed",
            Won::UnknownPayment => "unknown_payment",
        }
    }
}

const WON_SQL: &str = "UPDATE payments
     SET outcome = $3, reason = $4, updated_at = statement_timestamp()
     WHERE gateway = $1 AND external_id = $2 AND outcome = $5
     RETURNING id";

/// Puts the disputed payment `(gateway, external_id)` in review because its dispute was won
/// (see the module doc).
pub async fn dispute_won(
    client: &impl GenericClient,
    gateway: Gateway,
    external_id: &str,
) -> Result<Won, ApiError> {
    let moved = db::row_opt(
        client,
        WON_SQL,
        &[
            &gateway,
            &external_id,
            &Outcome::NeedsReview,
            &Reason::DisputeWon,
            &Outcome::Disputed,
        ],
    )
    .await?;
    let won = match moved {
        Some(r) => Won::InReview {
            payment_id: r.try_get("id")?,
        },
        None => match gateway_refunds::facts(client, &gateway, external_id).await? {
            None => Won::UnknownPayment,
            Some(f)
                if f.outcome == Outcome::NeedsReview && f.reason == Some(Reason::DisputeWon) =>
            {
                Won::AlreadyInReview { payment_id: f.id }
            }
            Some(f) => Won::NotDisputed { payment_id: f.id },
        },
    };
    match &won {
        Won::InReview { payment_id } => tracing::warn!(
            payment_id,
            gateway = %gateway,
            external_id,
            "dispute won: the payment waits for staff to grant again what the dispute took back"
        ),
        other => tracing::info!(
            gateway = %gateway,
            external_id,
            result = other.as_str(),
            "won dispute changed nothing"
        ),
    }
    Ok(won)
}
