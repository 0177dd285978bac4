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
//! An order is reusable while it is pending, at the channel's current price, younger than
//! [`ORDER_REUSE_SECS`] and not holding an expired seat hold; a stale one the bot made is cancelled
//! (its old invoice is then refused at pre-checkout) and a new one made. A channel that cannot
//! be paid (inactive, no gateway for its currency, full) gets a clear answer and no order.
//!
//! A card order of a seat-limited channel holds its seat now, as a checkout would, for
//! `HOLD_SECS`: the card link is valid that long, and the payment core then finds the hold. A
//! Stars order is held at `pre_checkout_query`, as any Stars invoice.

use deadpool_postgres::Transaction;

use super::{
    Gateway, ORDER_REUSE_SECS,
    conversation::{ChannelRow, channel},
    gateway, render, texts,
    update::Sender,
};
use crate::{
    config::Config,
    db,
    effects::{self, Kind, NewEffect},
    error::ApiError,
    orders::{new_reference, seats},
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
    let Some(c) = channel(tx, channel_id).await? else {
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
    db::lock_pair(tx, subscriber_id, c.id).await?;

    if c.recurring
        && let Some(renews_at) = live_subscription(tx, subscriber_id, c.id).await?
    {
        return Ok(alert(texts::already_subscribed(
            &name,
            &texts::day(renews_at),
        )));
    }
    if let Some(order_id) = reusable_order(tx, subscriber_id, &c).await? {
        let sent = enqueue_invoice(tx, order_id, from.id).await?;
        tracing::info!(order_id, subscriber_id, sent, "bot order reused");
        return Ok(note(if sent {
            texts::INVOICE_ON_ITS_WAY
        } else {
            texts::INVOICE_ALREADY_SENT
        }));
    }
    cancel_stale_orders(tx, subscriber_id, c.id).await?;

    // Third in the lock order (no order of this pair is locked yet: the new one is ours alone).
    let Some(terms) = seats::lock_channel_terms(tx, c.id).await? else {
        return Ok(alert(texts::CHANNEL_UNAVAILABLE));
    };
    if !terms.active {
        return Ok(alert(texts::CHANNEL_UNAVAILABLE));
    }
    if let Some(limit) = terms.seat_limit
        && !seats::is_live_member(tx, subscriber_id, c.id).await?
        && seats::seats_taken(tx, c.id).await? >= i64::from(limit)
    {
        return Ok(alert(texts::channel_full(&name)));
    }
    let order_id = create_order(tx, subscriber_id, &c).await?;
    if gateway == Gateway::Card && terms.seat_limit.is_some() {
        let locked = seats::lock_order(tx, order_id)
            .await?
            .ok_or_else(|| ApiError::internal("a new order vanished"))?;
        if let Err(refusal) = seats::checkout_decide(tx, locked, config.hold_secs).await? {
            // Decided under the same locks as the count above, so not expected; no order stays.
            tracing::warn!(order_id, ?refusal, "bot card order refused at its hold");
            tx.execute("DELETE FROM orders WHERE id = $1", &[&order_id])
                .await?;
            return Ok(alert(texts::channel_full(&name)));
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

/// Creates or updates the subscriber of Telegram user `from` (username and display name as
/// Telegram has them now); returns its id.
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
    let updated = tx
        .query_opt(
            "INSERT INTO subscribers (telegram_user_id, username, display_name)
             VALUES ($1, $2, $3)
             ON CONFLICT (telegram_user_id) DO UPDATE
                 SET username = EXCLUDED.username, display_name = EXCLUDED.display_name,
                     updated_at = statement_timestamp()
                 WHERE (subscribers.username, subscribers.display_name)
                       IS DISTINCT FROM (EXCLUDED.username, EXCLUDED.display_name)
             RETURNING id",
            &[&from.id, &username, &display_name],
        )
        .await?;
    if let Some(row) = updated {
        return Ok(row.get(0));
    }
    Ok(tx
        .query_one(
            "SELECT id FROM subscribers WHERE telegram_user_id = $1",
            &[&from.id],
        )
        .await?
        .get(0))
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
        .map(|r| r.get(0)))
}

/// The buyer's newest order of the channel that can still be paid as invoiced: pending, at the
/// channel's current price, younger than [`ORDER_REUSE_SECS`], its seat hold (if any) not expired.
/// The caller holds the pair lock, which every writer of these orders' state takes.
async fn reusable_order(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    c: &ChannelRow,
) -> Result<Option<i64>, ApiError> {
    Ok(tx
        .query_opt(
            "SELECT id FROM orders
             WHERE subscriber_id = $1 AND channel_id = $2 AND status = 'pending'
               AND amount_minor = $3 AND currency = $4
               AND (hold_until IS NULL OR hold_until > statement_timestamp())
               AND created_at > statement_timestamp() - make_interval(secs => $5)
             ORDER BY id DESC LIMIT 1",
            &[
                &subscriber_id,
                &c.id,
                &c.price_minor,
                &c.currency,
                &(ORDER_REUSE_SECS as f64),
            ],
        )
        .await?
        .map(|r| r.get(0)))
}

/// Cancels the bot's pending orders of the pair that [`reusable_order`] passed over (expired,
/// outdated price): their invoices are refused from now on, and the unique index on the bot's
/// pending orders makes room for the new one. Staff-made orders are left alone.
async fn cancel_stale_orders(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
) -> Result<(), ApiError> {
    let n = tx
        .execute(
            "UPDATE orders SET status = 'cancelled', hold_until = NULL
             WHERE subscriber_id = $1 AND channel_id = $2 AND status = 'pending' AND via_bot",
            &[&subscriber_id, &channel_id],
        )
        .await?;
    if n > 0 {
        tracing::info!(
            subscriber_id,
            channel_id,
            cancelled = n,
            "stale bot orders cancelled"
        );
    }
    Ok(())
}

async fn create_order(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    c: &ChannelRow,
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
        .get(0))
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
            kind: Kind::Invoice,
            membership_id: None,
            payment_id: None,
            order_id: Some(order_id),
            chat_id: None,
            user_id,
            payload: serde_json::json!({}),
            dedupe_key: Some(format!("invoice:{order_id}")),
        },
    )
    .await?;
    Ok(id.is_some())
}
