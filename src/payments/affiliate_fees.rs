//! Telegram's affiliate fee on a Stars payment: when one of Telegram's own affiliate programs
//! brought the buyer, Telegram pays the affiliate a commission out of the Stars the bot
//! receives, and lists it on the charge's `StarTransaction` (`source.affiliate.amount`, whole
//! Stars). The Stars reconcile (`telegram::recovery`) reads it there and hands it here; this
//! module writes it on the payment (`payments.affiliate_fee_minor`, in the payment's minor
//! units: one Star is one unit) and owns `star_affiliate_fees`, where a fee waits for its
//! payment.
//!
//! Recorded once: a payment's fee is written only when it differs from the stored one, and in
//! the transaction that writes it the referral ledger computes the payment's unpaid commission
//! again on the amount net of the fee ([`ledger::rebase`]). Nothing is lost between the two
//! sources: every fee read is first noted in `star_affiliate_fees` (one statement, before the
//! reconcile moves its cursor), and each noted fee whose payment is stored is then recorded
//! and forgotten in one transaction. A fee whose payment is not stored yet (its update still
//! on the way, and not recoverable by this run) stays noted, and a later run records it.

use std::collections::BTreeMap;

use deadpool_postgres::Pool;

use crate::{
    common::{error::ApiError, vocabulary::Gateway},
    db,
    referrals::ledger,
};

/// What one [`record`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Payments whose fee was written (it differed from the stored one).
    pub changed: u64,
    /// Noted fees whose payment is not stored yet: kept for a later run.
    pub waiting: u64,
}

const NOTE_SQL: &str = "INSERT INTO star_affiliate_fees (charge_id, amount_minor)
     SELECT * FROM unnest($1::text[], $2::bigint[])
     ON CONFLICT (charge_id) DO UPDATE SET amount_minor = EXCLUDED.amount_minor
     WHERE star_affiliate_fees.amount_minor <> EXCLUDED.amount_minor";

/// Every noted fee, with its payment's id when the payment is stored.
const NOTED_SQL: &str = "SELECT f.charge_id, f.amount_minor, p.id AS payment_id
     FROM star_affiliate_fees f
     LEFT JOIN payments p ON p.gateway = $1 AND p.external_id = f.charge_id
     ORDER BY f.charge_id";

/// Writes the fee only where it differs, so a fee read again changes nothing.
const WRITE_SQL: &str = "UPDATE payments SET affiliate_fee_minor = $2
     WHERE id = $1 AND affiliate_fee_minor <> $2
     RETURNING id";

/// Forgets a noted fee once written, unless a newer run noted another amount meanwhile.
const FORGET_SQL: &str =
    "DELETE FROM star_affiliate_fees WHERE charge_id = $1 AND amount_minor = $2";

/// A noted fee and its payment, if stored.
struct Noted {
    charge_id: String,
    amount_minor: i64,
    payment_id: Option<i64>,
}

crate::from_row!(Noted {
    charge_id,
    amount_minor,
    payment_id,
});

/// Notes `fees` (Telegram Stars charge id, whole Stars of affiliate commission; a charge listed
/// twice keeps its last amount), then records every noted fee whose payment is stored: on
/// the payment when it differs, with the ledger's [`ledger::rebase`] in that transaction.
/// An error while noting is returned (the caller must read the fees again); an error while
/// recording one payment is logged and the fee stays noted for the next call.
pub async fn record(pool: &Pool, fees: &[(String, i64)]) -> Result<Recorded, ApiError> {
    let fees: BTreeMap<&str, i64> = fees.iter().map(|(c, a)| (c.as_str(), *a)).collect();
    let client = pool.get().await?;
    if !fees.is_empty() {
        let (ids, amounts): (Vec<&str>, Vec<i64>) = fees.into_iter().unzip();
        db::execute(&client, NOTE_SQL, &[&ids, &amounts]).await?;
    }
    let noted: Vec<Noted> = db::all(&client, NOTED_SQL, &[&Gateway::TelegramStars]).await?;
    drop(client);
    let mut done = Recorded::default();
    for fee in noted {
        let Some(payment_id) = fee.payment_id else {
            done.waiting += 1;
            continue;
        };
        match write(pool, payment_id, &fee).await {
            Ok(true) => {
                done.changed += 1;
                tracing::info!(payment_id, charge_id = %fee.charge_id,
                    affiliate_fee_minor = fee.amount_minor,
                    "Telegram's affiliate fee recorded on a Stars payment");
            }
            Ok(false) => {}
            Err(e) => tracing::error!(payment_id, charge_id = %fee.charge_id, error = %e,
                "Telegram's affiliate fee could not be recorded; kept for the next run"),
        }
    }
    Ok(done)
}

/// Writes one noted fee on its payment, rebases the payment's commission when it changed, and
/// forgets the note; true when the payment changed.
async fn write(pool: &Pool, payment_id: i64, fee: &Noted) -> Result<bool, ApiError> {
    crate::transaction!(pool, |tx| {
        let changed = db::row_opt(tx, WRITE_SQL, &[&payment_id, &fee.amount_minor])
            .await?
            .is_some();
        if changed {
            ledger::rebase(tx, payment_id).await?;
        }
        db::execute(tx, FORGET_SQL, &[&fee.charge_id, &fee.amount_minor]).await?;
        Ok(changed)
    })
}
