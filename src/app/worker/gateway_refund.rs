//! Performing a refund staff asked for (a `gateway_refund` effect,
//! [`crate::payments::refunds::by_staff`]): the refund made at the payment's gateway, then,
//! once the gateway confirmed it, what the payment bought taken back ([`by_staff::settle`]).
//!
//! Each door's call is harmless when repeated, so a lost answer or a crash between the call
//! and its record only makes the next attempt ask again:
//! - Telegram Stars: `refundStarPayment` to the payer; `CHARGE_ALREADY_REFUNDED` counts as
//!   made; after a timeout the next attempt first looks for the refund in
//!   `getStarTransactions` (as the automatic Stars refund does, [`super::refund`]).
//! - Stripe: `POST /v1/refunds` with an `Idempotency-Key` derived from the payment intent
//!   ([`stripe_refund`]).
//! - WayForPay: `CHECK_STATUS` first, `REFUND` only while the order is not refunded
//!   ([`wayforpay::refund`]).
//! - Monobank: the invoice's status first (a `reversed` invoice is refunded already), then
//!   `POST /api/merchant/invoice/cancel` of the whole invoice with our `extRef`
//!   (`subgate-refund-<payment>`); `processing` is asked about again later, `failure` is a
//!   refusal for good.
//!
//! A refusal for good (the gateway declined, the door is not configured) is a dead letter:
//! the payment stays as it was and the refund's state is `failed` with the gateway's words.
//! A transient failure is retried with the effect's backoff. A payment found `refunded`
//! already (a refund reported by the gateway came first) is done without a call; one that is
//! no longer refundable (disputed meanwhile) is a permanent failure.

use deadpool_postgres::Object;

use super::{
    Worker,
    failure::{Attempt, Failure},
    refund::CLOCK_SKEW_SECS,
};
use crate::{
    common::error::ApiError,
    outbox::effects::{Effect, Payload, payload},
    payments::{
        core::Outcome,
        gateways::{monobank, stripe_refund, wayforpay::refund as wayforpay},
        refunds::by_staff::{self, Door, Facts},
    },
    telegram::recovery::{self, RefundSearch, find_refund},
    telegram_api::client::{BotApi, BotError},
};

/// What a door's call came to: a note (the refund is made) or the attempt to record.
type Made = Result<String, Attempt>;

fn failed(failure: Failure) -> Attempt {
    Attempt::from(Err(failure))
}

impl Worker {
    /// Makes the refund staff asked for of `e`'s payment (see the module doc).
    pub(super) async fn gateway_refund(&self, client: Object, bot: &BotApi, e: &Effect) -> Attempt {
        let Some(payment_id) = e.payment_id else {
            return failed(Failure::Permanent("the payment was deleted".into()));
        };
        let verify = matches!(
            e.typed_payload(),
            Ok(Payload::GatewayRefund(payload::GatewayRefund {
                verify: true
            }))
        );
        let read = async {
            let f = by_staff::facts(&client, payment_id).await?;
            let stars = f.as_ref().and_then(|f| Door::of(&f.gateway)) == Some(Door::TelegramStars);
            let cursor = if verify && stars {
                recovery::cursor(&client).await?
            } else {
                0
            };
            Ok::<_, ApiError>((f, cursor))
        }
        .await;
        drop(client);
        let (f, cursor) = match read {
            Ok((Some(f), cursor)) => (f, cursor),
            Ok((None, _)) => {
                return failed(Failure::Permanent(
                    "no refund of this payment was asked for".into(),
                ));
            }
            Err(err) => return failed(Failure::Db(err)),
        };
        match f.outcome {
            Outcome::Applied | Outcome::NeedsReview => {}
            Outcome::Refunded => {
                return Attempt::from(Ok(Some(
                    "skipped: the payment is refunded already (reported by its gateway)".into(),
                )));
            }
            other => {
                return failed(Failure::Permanent(format!(
                    "the payment is {other} now: nothing was refunded"
                )));
            }
        }
        let Some(door) = Door::of(&f.gateway) else {
            return failed(Failure::Permanent(format!(
                "payments through {} cannot be refunded from subgate",
                f.gateway
            )));
        };
        let made = match door {
            Door::TelegramStars => self.stars(bot, e, &f, verify, cursor).await,
            Door::Stripe => self.stripe(&f).await,
            Door::WayForPay => self.wayforpay(&f).await,
            Door::Monobank => self.monobank(&f).await,
        };
        let note = match made {
            Ok(note) => note,
            Err(attempt) => return attempt,
        };
        match by_staff::settle(&self.state.db, payment_id).await {
            Ok(settled) => Attempt::from(Ok(Some(format!("{note}; {}", settled.note())))),
            // Not recorded: the effect runs again, and its gateway answers the repeat as done.
            Err(err) => failed(Failure::Db(err)),
        }
    }

    /// `refundStarPayment` to the payer (the effect's user), after looking for it first when
    /// an earlier attempt's outcome is unknown.
    async fn stars(&self, bot: &BotApi, e: &Effect, f: &Facts, verify: bool, cursor: i64) -> Made {
        if bot.is_dry_run() {
            return Err(failed(Failure::Permanent(
                "dry run (TELEGRAM_DRY_RUN): no Stars refund is made".into(),
            )));
        }
        let unknown = |failure: Failure| Attempt {
            result: Err(failure),
            refunded: None,
            verify: true,
            cleared_ban: false,
            message: None,
            receipt: None,
        };
        if verify {
            let search = RefundSearch {
                charge_id: &f.external_id,
                user_id: e.user_id,
                cursor,
                since: e.created_at.timestamp() - CLOCK_SKEW_SECS,
            };
            match find_refund(bot, &search).await {
                Ok(true) => return Ok("refund found in getStarTransactions".into()),
                Ok(false) => {}
                Err(err) => return Err(unknown(err.into())),
            }
        }
        match bot.refund_star_payment(e.user_id, &f.external_id).await {
            Ok(_) => Ok("refunded by refundStarPayment".into()),
            Err(err) if err.mentions("CHARGE_ALREADY_REFUNDED") => {
                Ok("Telegram: charge already refunded".into())
            }
            Err(err @ BotError::Timeout { .. }) => Err(unknown(Failure::Retry(format!(
                "{err}; the next attempt first looks for the refund in getStarTransactions"
            )))),
            Err(err) => Err(Attempt {
                result: Err(err.into()),
                refunded: None,
                verify,
                cleared_ban: false,
                message: None,
                receipt: None,
            }),
        }
    }

    /// Monobank: the invoice's status, then `invoice/cancel` unless it is reversed already.
    async fn monobank(&self, f: &Facts) -> Made {
        let Some(mono) = &self.state.config.monobank else {
            return Err(failed(Failure::Permanent(
                "Monobank is not configured (MONOBANK_TOKEN)".into(),
            )));
        };
        let call_failed = |err: monobank::ApiCallError| match err {
            monobank::ApiCallError::Transient(_) => failed(Failure::Retry(err.to_string())),
            monobank::ApiCallError::Refused(_) => failed(Failure::Permanent(err.to_string())),
        };
        let token = mono.token.expose();
        let report = monobank::invoice_status(&mono.api_url, token, &f.external_id)
            .await
            .map_err(call_failed)?;
        if report.status == monobank::Status::Reversed {
            return Ok("Monobank: the invoice is reversed already".into());
        }
        let ext_ref = format!("subgate-refund-{}", f.payment_id);
        let cancel = monobank::Cancel {
            invoice_id: &f.external_id,
            ext_ref: Some(&ext_ref),
            amount: None,
        };
        let cancelled = monobank::cancel_invoice(&mono.api_url, token, &cancel)
            .await
            .map_err(call_failed)?;
        match cancelled.status {
            monobank::CancelStatus::Success => {
                Ok(format!("Monobank: invoice {} cancelled", f.external_id))
            }
            monobank::CancelStatus::Processing => Err(failed(Failure::Retry(
                "Monobank is processing the cancel: asked about again later".into(),
            ))),
            monobank::CancelStatus::Failure => Err(failed(Failure::Permanent(
                "Monobank refused to cancel the invoice".into(),
            ))),
        }
    }

    /// Stripe's `POST /v1/refunds` of the payment intent.
    async fn stripe(&self, f: &Facts) -> Made {
        let Some(stripe) = &self.state.config.stripe else {
            return Err(failed(Failure::Permanent(
                "Stripe is not configured (STRIPE_SECRET_KEY)".into(),
            )));
        };
        let answer = stripe_refund::refund(
            &stripe.api_url,
            stripe.secret_key.expose(),
            &f.external_id,
            f.payment_id,
            &f.reason,
        )
        .await;
        match answer {
            Ok(stripe_refund::Refunded::Made { id, status }) => {
                Ok(format!("Stripe refund {id} ({status})"))
            }
            Ok(stripe_refund::Refunded::AlreadyRefunded) => {
                Ok("Stripe: the charge is refunded already".into())
            }
            Err(err @ stripe_refund::RefundError::Transient(_)) => {
                Err(failed(Failure::Retry(err.to_string())))
            }
            Err(err @ stripe_refund::RefundError::Refused(_)) => {
                Err(failed(Failure::Permanent(err.to_string())))
            }
        }
    }

    /// WayForPay's `CHECK_STATUS`, then `REFUND` unless the order is refunded already.
    async fn wayforpay(&self, f: &Facts) -> Made {
        let config = &self.state.config;
        let Some(wfp) = &config.wayforpay else {
            return Err(failed(Failure::Permanent(
                "WayForPay is not configured (WAYFORPAY_SECRET_KEY)".into(),
            )));
        };
        let answer = wayforpay::refund(
            &config.wayforpay_api_url,
            wfp,
            &f.external_id,
            f.amount_minor,
            &f.currency,
            &f.reason,
        )
        .await;
        match answer {
            Ok(wayforpay::Refunded::Made { status }) => Ok(format!("WayForPay: {status}")),
            Ok(wayforpay::Refunded::AlreadyRefunded { status }) => Ok(format!(
                "WayForPay: the order is {status} already; no REFUND sent"
            )),
            Err(err @ wayforpay::RefundError::Transient(_)) => {
                Err(failed(Failure::Retry(err.to_string())))
            }
            Err(err @ wayforpay::RefundError::Refused(_)) => {
                Err(failed(Failure::Permanent(err.to_string())))
            }
        }
    }
}
