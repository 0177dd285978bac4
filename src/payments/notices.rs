//! The buyer's notice of a payment that could not be used, enqueued by the payment core in the
//! payment's transaction (one `bot_message` effect, keyed `payment_notice:{payment}`): it will
//! be refunded, or reviewed by staff, or could not be matched to an order. The words are
//! `crate::present::texts`'.

use deadpool_postgres::Transaction;

use super::core::{Outcome, Payment, Reason};
use crate::{
    access::subscribers,
    catalog::channels,
    common::error::ApiError,
    outbox::effects::{NewEffect, Payload, enqueue, payload::BotMessage},
    present::{
        render,
        texts::{self, Language},
    },
};

/// Tells the buyer, once, that payment `p` could not be used: it will be refunded (a Stars
/// payment we refund), or reviewed by staff (any other), or could not be matched to an order,
/// or was not needed (lifetime access the buyer already has);
/// and, when `subscription_stopped` (a refused Stars subscription charge), that the
/// subscription is cancelled and will not be charged again. `user` is the payer when the door
/// knows them, else the order's buyer; without one (a card payment naming no order) nobody can
/// be told. Call it in the payment's transaction.
pub async fn enqueue_payment_notice(
    tx: &Transaction<'_>,
    p: &Payment,
    user: Option<i64>,
    subscription_stopped: bool,
) -> Result<(), ApiError> {
    let Some(user) = user.filter(|u| *u > 0) else {
        return Ok(());
    };
    // Said in the buyer's language as remembered now (the notice is written once, here).
    let l = Language::choose(
        subscribers::language_of_telegram_user(tx, user).await?,
        None,
    );
    let price = render::price(l, &p.money());
    let title = match p.channel_id {
        Some(id) => channels::titles(tx, id)
            .await?
            .map(|(t, translations)| render::title(l, translations.title(l, &t), id)),
        None => None,
    };
    let seat_taken = p.reason == Some(Reason::NoSeat);
    let mut text = match (title, p.outcome) {
        (None, _) => texts::payment_unknown_order(l, &price),
        (Some(t), outcome) if p.reason == Some(Reason::AlreadyLifetime) => {
            texts::payment_already_lifetime(l, &t, &price, outcome == Outcome::RefundPending)
        }
        (Some(t), Outcome::RefundPending) => texts::payment_refunded(l, &t, &price, seat_taken),
        (Some(t), _) => texts::payment_in_review(l, &t, &price, seat_taken),
    };
    if subscription_stopped {
        text = texts::with_subscription_stopped(l, &text, p.reason);
    }
    enqueue(
        &**tx,
        &NewEffect {
            membership_id: None,
            payment_id: Some(p.id),
            order_id: p.order_id,
            chat_id: None,
            user_id: user,
            payload: Payload::BotMessage(BotMessage {
                text,
                reply_markup: None,
            }),
            dedupe_key: Some(format!("payment_notice:{}", p.id)),
        },
    )
    .await?;
    Ok(())
}
