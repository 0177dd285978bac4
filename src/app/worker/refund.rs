//! Performing a Stars refund: `refundStarPayment` while its payment is `refund_pending`, and,
//! after a call whose outcome is unknown, a look in `getStarTransactions` before calling again.

use deadpool_postgres::Object;

use super::{
    Worker,
    failure::{Attempt, Failure},
};
use crate::{
    common::error::ApiError,
    outbox::effects::{Effect, Payload, payload},
    payments::{
        core::Outcome,
        refunds::{self, RefundFacts},
    },
    telegram::recovery::{self, RefundSearch, find_refund},
    telegram_api::client::{BotApi, BotError},
};

/// How much earlier than its effect's creation a refund may be dated (clocks differ).
pub(super) const CLOCK_SKEW_SECS: i64 = 3600;

impl Worker {
    /// `refundStarPayment`, while the payment is `refund_pending`. Success or
    /// `CHARGE_ALREADY_REFUNDED`: `refunded`. A timeout leaves the payment `refund_pending` and
    /// marks the effect to verify first next time: look for the refund in
    /// `getStarTransactions` ([`find_refund`]) before calling again. A definite refusal: a dead
    /// letter, and the record step makes the payment `refund_failed`, for staff.
    pub(super) async fn refund(&self, client: Object, bot: &BotApi, e: &Effect) -> Attempt {
        let Some(payment_id) = e.payment_id else {
            return Attempt::from(Err(Failure::Permanent("the payment was deleted".into())));
        };
        let verify = matches!(
            e.typed_payload(),
            Ok(Payload::Refund(payload::Refund { verify: true, .. }))
        );
        let facts = async {
            let payment = refunds::facts(&client, payment_id).await?;
            let cursor = if verify {
                recovery::cursor(&client).await?
            } else {
                0
            };
            Ok::<_, ApiError>((payment, cursor))
        }
        .await;
        drop(client);
        let (payment, cursor) = match facts {
            Ok(f) => f,
            Err(err) => return Attempt::from(Err(Failure::from(err))),
        };
        let Some(RefundFacts { outcome, charge_id }) = payment else {
            return Attempt::from(Err(Failure::Permanent("the payment was deleted".into())));
        };
        if outcome != Outcome::RefundPending {
            return Attempt::from(Ok(Some(format!(
                "skipped: the payment is {outcome} already"
            ))));
        }
        if bot.is_dry_run() {
            return Attempt::from(Ok(Some(
                "dry run: no refund made; the payment stays refund_pending".into(),
            )));
        }
        let refunded = |note: Option<String>| Attempt {
            result: Ok(note),
            refunded: Some(payment_id),
            verify: false,
            cleared_ban: false,
            message: None,
            receipt: None,
        };
        if verify {
            let search = RefundSearch {
                charge_id: &charge_id,
                user_id: e.user_id,
                cursor,
                since: e.created_at.timestamp() - CLOCK_SKEW_SECS,
            };
            match find_refund(bot, &search).await {
                Ok(true) => {
                    return refunded(Some("refund confirmed in getStarTransactions".into()));
                }
                Ok(false) => {}
                Err(err) => {
                    return Attempt {
                        result: Err(err.into()),
                        refunded: None,
                        verify: true,
                        cleared_ban: false,
                        message: None,
                        receipt: None,
                    };
                }
            }
        }
        match bot.refund_star_payment(e.user_id, &charge_id).await {
            Ok(_) => refunded(None),
            Err(err) if err.mentions("CHARGE_ALREADY_REFUNDED") => {
                refunded(Some("Telegram: charge already refunded".into()))
            }
            Err(err @ BotError::Timeout { .. }) => Attempt {
                result: Err(Failure::Retry(format!(
                    "{err}; the next attempt first looks for the refund in getStarTransactions"
                ))),
                refunded: None,
                verify: true,
                cleared_ban: false,
                message: None,
                receipt: None,
            },
            Err(err) => Attempt {
                result: Err(err.into()),
                refunded: None,
                verify,
                cleared_ban: false,
                message: None,
                receipt: None,
            },
        }
    }
}
