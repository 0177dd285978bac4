//! The buy button: from a press to an order and its invoice, in the update's transaction.
//!
//! The buyer becomes (or is updated as) a subscriber from Telegram's `from`; then, under the
//! pair's advisory lock — the lock every transaction touching the buyer's holds and membership
//! of this channel takes first — the buyer's pending, unexpired order of the channel is reused,
//! or one is made at the channel's price. Two presses (or two devices) therefore decide one
//! after the other and the second reuses the first's order; the schema backs this with a unique
//! index on the bot's pending orders per (subscriber, channel). The invoice is an outbox effect
//! keyed on the order, so however often the button is pressed, one order gets one invoice.
//!
//! An order is reusable while it holds a valid seat hold (whatever its age or price: the hold is
//! the buyer's, and a new order would only extend it), or, holding none, while it is at the
//! channel's current price and can still be paid as invoiced ([`super::open_secs`]: an hour for
//! a Stars invoice, at most `HOLD_SECS` for a card link). A superseded order is never reused.
//!
//! A stale order the bot made is retired before a new one is made. One that may still be paid —
//! a card order (its link may be out), or a Stars order whose pre-checkout was approved (the
//! buyer may be paying right now) — is never cancelled: it is *superseded* (`superseded_at`). It
//! stays pending, so a late payment of it is judged by the core's seat rules like any other
//! (applied; or `hold_expired`, refunded for Stars, reviewed for cards), and it makes room for
//! the new order under the one-pending-bot-order index. A superseded order holds no valid hold
//! (an order holding one is reused instead), so superseding can never give a buyer two seats.
//! Any other stale order (a Stars invoice never approved) is cancelled: its old invoice is then
//! refused at pre-checkout.
//!
//! A channel that cannot be paid (inactive, no gateway for its currency, full) gets a clear
//! answer and no order; so does a buyer the hold rules hold back ([`seats::hold_limit`]: a
//! cooldown after an unpaid hold ran out, a daily cap), told when they can try again.
//!
//! A card order of a seat-limited channel holds its seat now, as a checkout would, for
//! `HOLD_SECS`: the card link is valid that long, and the payment core then finds the hold. A
//! Stars order is held at `pre_checkout_query`, as any Stars invoice.

use deadpool_postgres::Transaction;

use super::{Gateway, gateway, render, texts, update::Sender};
use crate::{
    channels::{self, Offer},
    config::Config,
    db,
    effects::{self, NewEffect, Payload},
    error::ApiError,
    orders::{
        new_reference,
        seats::{self, CheckoutRefusal, HoldLimit},
    },
    subscribers,
};

/// The answer to a press: a passing notification, or an alert the buyer must close.
pub(super) struct Answer {
    pub text: String,
    pub alert: bool,
}

fn note(text: &str) -> Answer {
    Answer {
        text: text.to_string(),
        alert: false,
    }
}

fn alert(text: impl Into<String>) -> Answer {
    Answer {
        text: text.into(),
        alert: true,
    }
}

/// The buy (or renew) button of channel `channel_id`, pressed by `from`.
pub(super) async fn buy(
    tx: &Transaction<'_>,
    config: &Config,
    from: &Sender,
    channel_id: i32,
) -> Result<Answer, ApiError> {
    let Some(c) = channels::offer(tx, channel_id).await? else {
        return Ok(alert(texts::BUTTON_INVALID));
    };
    if !c.active {
        return Ok(alert(texts::CHANNEL_UNAVAILABLE));
    }
    let name = render::title(&c.title, c.id);
    let Some(gateway) = gateway(config, &c.currency) else {
        return Ok(alert(texts::cannot_be_paid(&name)));
    };
    let subscriber_id = upsert_subscriber(tx, from).await?;
    let pair = (
        crate::ids::SubscriberId(subscriber_id),
        crate::ids::ChannelId(c.id),
    );
    db::lock_pair(tx, pair.0, pair.1).await?;

    if c.recurring
        && let Some(renews_at) = live_subscription(tx, subscriber_id, c.id).await?
    {
        return Ok(alert(texts::already_subscribed(
            &name,
            &texts::day(renews_at),
        )));
    }
    let open_secs = super::open_secs(gateway, config.hold_secs);
    if let Some(order_id) = reusable_order(tx, subscriber_id, &c, open_secs).await? {
        let sent = enqueue_invoice(tx, order_id, from.id).await?;
        tracing::info!(order_id, subscriber_id, sent, "bot order reused");
        return Ok(note(if sent {
            texts::INVOICE_ON_ITS_WAY
        } else {
            texts::INVOICE_ALREADY_SENT
        }));
    }
    retire_stale_orders(tx, subscriber_id, c.id).await?;

    // Third in the lock order (no order of this pair is locked yet: the new one is ours alone).
    let Some(terms) = seats::lock_channel_terms(tx, c.id).await? else {
        return Ok(alert(texts::CHANNEL_UNAVAILABLE));
    };
    if !terms.active {
        return Ok(alert(texts::CHANNEL_UNAVAILABLE));
    }
    if let Some(limit) = terms.seat_limit
        && !seats::is_live_member(tx, pair.0, pair.1).await?
    {
        // The hold rules first: they say when this buyer may try again. A Stars order is held
        // at pre-checkout, which applies them again; refusing now spares the buyer an invoice
        // that would be refused there.
        if let Some((rule, until)) =
            seats::hold_limit(tx, pair.0, pair.1, config.hold_rules()).await?
        {
            tracing::info!(subscriber_id, channel_id = c.id, ?rule, %until,
                "bot order refused: hold rules");
            return Ok(refused(
                &name,
                CheckoutRefusal::HoldLimited { limit: rule, until },
            ));
        }
        if seats::seats_taken(tx, c.id).await? >= i64::from(limit) {
            return Ok(alert(texts::channel_full(&name)));
        }
    }
    let order_id = create_order(tx, subscriber_id, &c).await?;
    if gateway == Gateway::Card && terms.seat_limit.is_some() {
        let locked = seats::lock_order(tx, order_id)
            .await?
            .ok_or_else(|| ApiError::internal("a new order vanished"))?;
        if let Err(refusal) = seats::checkout_decide(tx, locked, config.hold_rules()).await? {
            // Decided under the same locks as the checks above, so not expected; no order stays.
            tracing::warn!(order_id, ?refusal, "bot card order refused at its hold");
            tx.execute("DELETE FROM orders WHERE id = $1", &[&order_id])
                .await?;
            return Ok(refused(&name, refusal));
        }
    }
    enqueue_invoice(tx, order_id, from.id).await?;
    tracing::info!(
        order_id,
        subscriber_id,
        channel_id = c.id,
        ?gateway,
        "bot order made"
    );
    Ok(note(texts::INVOICE_ON_ITS_WAY))
}

/// The alert for a refused hold: the channel is full, or the buyer may try again at a given time.
fn refused(name: &str, refusal: CheckoutRefusal) -> Answer {
    match refusal {
        CheckoutRefusal::HoldLimited { limit, until } => alert(render::hold_limited_answer(
            name,
            &texts::not_before(until),
            limit == HoldLimit::Cooldown,
        )),
        CheckoutRefusal::ChannelInactive | CheckoutRefusal::NotPending => {
            alert(texts::CHANNEL_UNAVAILABLE)
        }
        CheckoutRefusal::ChannelFull | CheckoutRefusal::HoldExpired => {
            alert(texts::channel_full(name))
        }
        CheckoutRefusal::PromoExhausted => alert(texts::PROMO_PRICE_GONE),
    }
}

/// Creates or updates the subscriber of Telegram user `from` (username and display name as
/// Telegram has them now, fit for their columns); returns its id.
async fn upsert_subscriber(tx: &Transaction<'_>, from: &Sender) -> Result<i32, ApiError> {
    let username = from
        .username
        .as_deref()
        .map(|u| clean(u, 64))
        .filter(|u| !u.is_empty());
    let names = [from.first_name.as_deref(), from.last_name.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    let display_name = Some(clean(&render::one_line(&names), 128)).filter(|n| !n.is_empty());
    subscribers::upsert_from_telegram(tx, from.id, username.as_deref(), display_name.as_deref())
        .await
}

/// Text PostgreSQL can store within a `char_length` limit: no NUL, at most `max` characters.
fn clean(s: &str, max: usize) -> String {
    s.chars().filter(|c| *c != '\0').take(max).collect()
}

/// When the buyer's live Stars subscription of the channel renews next, if they have one.
async fn live_subscription(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
    Ok(tx
        .query_opt(
            "SELECT expires_at FROM star_subscriptions
             WHERE subscriber_id = $1 AND channel_id = $2 AND status = 'active'
               AND expires_at > statement_timestamp()
             ORDER BY id DESC LIMIT 1",
            &[&subscriber_id, &channel_id],
        )
        .await?
        .map(|r| r.try_get("expires_at"))
        .transpose()?)
}

/// The buyer's newest order of the channel that can still be paid as invoiced: pending, not
/// superseded, and either holding a valid seat hold, or holding none, at the channel's current
/// price and younger than `open_secs`. The caller holds the pair lock, which every writer of
/// these orders' state takes.
async fn reusable_order(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    c: &Offer,
    open_secs: i64,
) -> Result<Option<i64>, ApiError> {
    Ok(tx
        .query_opt(
            "SELECT id FROM orders
             WHERE subscriber_id = $1 AND channel_id = $2 AND status = 'pending'
               AND superseded_at IS NULL
               AND (hold_until > statement_timestamp()
                    OR (hold_until IS NULL AND amount_minor = $3 AND currency = $4
                        AND created_at > statement_timestamp() - make_interval(secs => $5)))
             ORDER BY id DESC LIMIT 1",
            &[
                &subscriber_id,
                &c.id,
                &c.price_minor,
                &c.currency,
                &(open_secs as f64),
            ],
        )
        .await?
        .map(|r| r.try_get("id"))
        .transpose()?)
}

/// Retires the bot's pending orders of the pair that [`reusable_order`] passed over (hold ran
/// out, too old, outdated price), making room for the new one under the unique index on the
/// bot's pending orders. One that may still be paid is superseded, never cancelled: a card order
/// (its link may have been sent, or be sent by a worker that read it before this), or a Stars
/// order with an approved pre-checkout (the buyer may be paying). Any other is cancelled; its
/// invoice is refused at pre-checkout from now on (pre-checkout takes the pair lock held here,
/// so none can be approved in between). Staff-made orders are left alone.
async fn retire_stale_orders(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
) -> Result<(), ApiError> {
    let row = tx
        .query_one(RETIRE_SQL, &[&subscriber_id, &channel_id])
        .await?;
    let (superseded, cancelled): (i64, i64) =
        (row.try_get("superseded")?, row.try_get("cancelled")?);
    if superseded + cancelled > 0 {
        tracing::info!(
            subscriber_id,
            channel_id,
            superseded,
            cancelled,
            "stale bot orders retired"
        );
    }
    Ok(())
}

const RETIRE_SQL: &str = "WITH stale AS (
         SELECT o.id,
                o.currency <> 'XTR'
                OR EXISTS (SELECT 1 FROM pre_checkout_decisions d
                           WHERE d.order_id = o.id AND d.ok) AS may_be_paid
         FROM orders o
         WHERE o.subscriber_id = $1 AND o.channel_id = $2 AND o.status = 'pending'
           AND o.via_bot AND o.superseded_at IS NULL
     ), superseded AS (
         UPDATE orders o SET superseded_at = statement_timestamp()
         FROM stale s WHERE o.id = s.id AND s.may_be_paid
         RETURNING o.id
     ), cancelled AS (
         UPDATE orders o SET status = 'cancelled', hold_until = NULL
         FROM stale s WHERE o.id = s.id AND NOT s.may_be_paid
         RETURNING o.id
     )
     SELECT (SELECT count(*) FROM superseded) AS superseded,
            (SELECT count(*) FROM cancelled) AS cancelled";

async fn create_order(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    c: &Offer,
) -> Result<i64, ApiError> {
    Ok(tx
        .query_one(
            "INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency,
                                 via_bot)
             VALUES ($1, $2, $3, $4, $5, true) RETURNING id",
            &[
                &new_reference(),
                &subscriber_id,
                &c.id,
                &c.price_minor,
                &c.currency,
            ],
        )
        .await?
        .try_get("id")?)
}

/// Enqueues the order's invoice for Telegram user `user_id`, once per order; `false` when it
/// was enqueued before.
async fn enqueue_invoice(
    tx: &Transaction<'_>,
    order_id: i64,
    user_id: i64,
) -> Result<bool, ApiError> {
    let id = effects::enqueue(
        &**tx,
        &NewEffect {
            membership_id: None,
            payment_id: None,
            order_id: Some(order_id),
            chat_id: None,
            user_id,
            payload: Payload::Invoice(effects::payload::Invoice {}),
            dedupe_key: Some(format!("invoice:{order_id}")),
        },
    )
    .await?;
    Ok(id.is_some())
}
