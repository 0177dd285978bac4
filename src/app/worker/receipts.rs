//! Performing a fiscal receipt ([`crate::payments::receipts`]): its row read on the claim's
//! connection, which goes back to the pool, then Checkbox called with nothing held
//! ([`Cashier::issue`](crate::payments::receipts::checkbox::Cashier::issue): sign-in, shift, the receipt under its own id, read until it
//! is done). The record step writes the receipt's outcome with the effect's ([`ReceiptAttempt`]):
//! `done` with its fiscal code and page (and the buyer's message with the link), a failed
//! attempt retried with the worker's backoff, or `failed` with the dead letter.
//!
//! Exactly once rests on the receipt's id, chosen when the row was written: an attempt that
//! crashed after Checkbox accepted the receipt, or one superseded by another worker after its
//! lease ran out, sends the same id again, which Checkbox answers with the receipt it has.

use deadpool_postgres::Object;

use super::{
    Worker,
    failure::{Attempt, Failure},
};
use crate::{
    outbox::effects::{Effect, Payload},
    payments::receipts::{
        self, Kind, State,
        checkbox::{Failed, Issued, Sell},
    },
};

/// What an attempt at a receipt asks the record step to write on its row.
pub(super) struct ReceiptAttempt {
    /// The `fiscal_receipts` row.
    pub(super) id: i64,
    /// Checkbox confirmed it.
    pub(super) issued: Option<Issued>,
    /// Checkbox reported it in `ERROR`: the next attempt issues it under a new id.
    pub(super) new_id: bool,
}

impl Worker {
    /// Issues the receipt of effect `e` at Checkbox (see the module doc).
    pub(super) async fn fiscal_receipt(&self, client: Object, e: &Effect) -> Attempt {
        let Ok(Payload::FiscalReceipt(p)) = e.typed_payload() else {
            return Attempt::from(Err(Failure::Permanent(
                "the effect names no fiscal receipt".into(),
            )));
        };
        let id = p.fiscal_receipt_id;
        let read = receipts::to_issue(&client, id).await;
        drop(client);
        let r = match read {
            Ok(Some(r)) => r,
            Ok(None) => {
                return Attempt::from(Err(Failure::Permanent(
                    "the fiscal receipt's row is gone".into(),
                )));
            }
            Err(err) => return Attempt::from(Err(Failure::Db(err))),
        };
        let attempt = |result, issued, new_id| Attempt {
            receipt: Some(ReceiptAttempt { id, issued, new_id }),
            ..Attempt::from(result)
        };
        if r.state == State::Done {
            return Attempt::from(Ok(Some("skipped: the receipt is done already".into())));
        }
        if r.kind == Kind::Return {
            match r.sale_state {
                Some(State::Done) => {}
                Some(State::Failed) => {
                    let why = "the sale receipt failed: no return receipt is owed".to_string();
                    return attempt(Err(Failure::Permanent(why)), None, false);
                }
                Some(State::Pending) | None => {
                    let why = "the sale receipt is not done yet; the return waits for it";
                    return attempt(Err(Failure::Retry(why.into())), None, false);
                }
            }
        }
        let Some(cashier) = &self.cashier else {
            let why = "Checkbox is not configured (CHECKBOX_LICENSE_KEY, CHECKBOX_LOGIN, \
                       CHECKBOX_PASSWORD): the receipt waits";
            return attempt(Err(Failure::Retry(why.into())), None, false);
        };
        if r.currency != receipts::CURRENCY {
            let why = format!("a receipt in {} cannot be issued", r.currency);
            return attempt(Err(Failure::Permanent(why)), None, false);
        }
        let (code, name) = (r.good_code(), r.good_name());
        let sell = Sell {
            id: &r.receipt_id,
            good_code: &code,
            good_name: &name,
            price: r.amount_minor,
            is_return: r.kind == Kind::Return,
        };
        match cashier.issue(&sell).await {
            Ok(issued) => {
                tracing::info!(
                    fiscal_receipt_id = id,
                    payment_id = r.payment_id,
                    kind = %r.kind,
                    fiscal_code = %issued.fiscal_code,
                    "fiscal receipt registered by Checkbox"
                );
                attempt(Ok(None), Some(issued), false)
            }
            Err(e @ Failed::Transient(_)) => {
                attempt(Err(Failure::Retry(e.to_string())), None, false)
            }
            Err(e @ Failed::Error(_)) => attempt(Err(Failure::Retry(e.to_string())), None, true),
            Err(e @ Failed::Refused(_)) => {
                attempt(Err(Failure::Permanent(e.to_string())), None, false)
            }
        }
    }
}
