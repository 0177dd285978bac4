//! The buy button: from a press to an order and its invoice (or its free grant), in the
//! update's transaction.
//!
//! The press is decided by [`decide`], which the Mini App's order (`super::mini_app::orders`)
//! calls too: the same reuse, holds, seats, lifetime and code rules, the order invoiced in the
//! chat (the `invoice` effect) or left to the page ([`Invoicing`]).
//!
//! A button buys a plan: `b:<channel>` the channel's default plan (the button every older
//! message carries), `p:<plan>` any plan. The buyer becomes (or is updated as) a subscriber
//! from Telegram's `from`; then, under the pair advisory locks of every channel of the plan
//! (taken in the one lock order, docs/locking.md), the buyer's pending, unexpired order of the
//! plan is reused, or one is made at the plan's price, less the buyer's promo code when one is
//! meant for this plan. Two presses (or two devices) therefore decide one after the other and
//! the second reuses the first's order. Which order is reused, which is superseded or
//! cancelled, and how an order gets its one invoice are the orders layer's rules
//! ([`bot_orders`]); a card order is reusable only while its page can be open a minute, a Stars
//! order while its invoice can be paid ([`super::open_secs`]).
//!
//! **Promo codes.** The code the buyer gave (`/code`, a deep link; [`super::codes`]) is decided
//! under the code's row lock by [`crate::catalog::promo_codes::discount_for_new_order`], in its
//! place in the lock order. When it refuses (the code filled up since it was shown), the buyer
//! is told, the code is forgotten and no order is made: a second press buys at the list price.
//! The bot never charges a price the buyer was not shown. An order made with the code uses it
//! up for the bot (the stored code is forgotten).
//!
//! **Free orders.** A trial plan's order, and an order a 100 % code made free, are not
//! invoiced: they are made and claimed at once ([`trials::claim`]: the locked grant, its join
//! link sent as for any grant), or refused with a reason and no order left (a trial used
//! before, a full channel).
//!
//! A plan that cannot be paid (inactive, a channel of it inactive, no gateway for its
//! currency, a channel of it full — all or nothing) gets a clear answer and no order; so does a
//! buyer with lifetime access to all of it already, and a buyer the hold rules hold back
//! ([`seats::hold_limit`]: a cooldown after an unpaid hold ran out, a daily cap), told when they
//! can try again.
//!
//! A card order of a seat-limited channel holds its seat now, as a checkout would, for
//! `HOLD_SECS`: the card link is valid that long, and the payment core then finds the hold. A
//! Stars order is held at `pre_checkout_query`, as any Stars invoice.

use deadpool_postgres::Transaction;

use super::{
    Gateway, codes, gateway, render,
    texts::{self, Language},
    update::Sender,
};
use crate::{
    access::subscribers,
    catalog::{
        channels,
        plans::{self, Plan},
    },
    common::{error::ApiError, ids::SubscriberId},
    config::Config,
    db,
    orders::{
        self, bot_orders, crypto_invoices,
        seats::{self, CheckoutRefusal, HoldLimit},
        trials::{self, ClaimRefusal},
    },
};

/// The answer to a press: a passing notification, or an alert the buyer must close.
pub(super) struct Answer {
    pub text: String,
    pub alert: bool,
}

fn note(text: impl Into<String>) -> Answer {
    Answer {
        text: text.into(),
        alert: false,
    }
}

fn alert(text: impl Into<String>) -> Answer {
    Answer {
        text: text.into(),
        alert: true,
    }
}

/// What a button buys.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// A channel's default plan (the buy and renew buttons of a channel sold one way).
    Channel(i32),
    /// A plan.
    Plan(i64),
}

/// How a new or reused order reaches its buyer: the bot sends its invoice to the buyer's chat
/// (the `invoice` effect, in this transaction), or the Mini App's page shows it itself (no
/// effect: the page asks for its link after the commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Invoicing {
    /// The buyer's chat with the bot.
    Chat,
    /// The Mini App's page.
    Page,
}

/// What a press came to. The bot and the Mini App decide through [`decide`] alike and differ
/// only in what they say and how the order is invoiced ([`Invoicing`]).
#[derive(Debug)]
pub(super) enum Decision {
    /// A new order, paid through `gateway`.
    Made { order_id: i64, gateway: Gateway },
    /// The buyer's pending order of the plan, reused; `sent`: its invoice was enqueued again
    /// now (never for [`Invoicing::Page`]).
    Reused {
        order_id: i64,
        gateway: Gateway,
        sent: bool,
    },
    /// A free order (a trial, a 100 % code), made and claimed: access granted; `text` says so.
    Granted { order_id: i64, text: String },
    /// Nothing made; `text` says why.
    Refused(String),
}

/// The buy (renew, or try-free) button of `target`, pressed by `from`.
pub(super) async fn buy(
    tx: &Transaction<'_>,
    config: &Config,
    l: Language,
    from: &Sender,
    target: Target,
) -> Result<Answer, ApiError> {
    Ok(
        match decide(tx, config, l, from, target, Invoicing::Chat).await? {
            Decision::Made { .. } => note(texts::invoice_on_its_way(l)),
            Decision::Reused { sent: true, .. } => note(texts::invoice_on_its_way(l)),
            Decision::Reused { sent: false, .. } => note(texts::invoice_already_sent(l)),
            Decision::Granted { text, .. } => note(text),
            Decision::Refused(text) => alert(text),
        },
    )
}

/// Decides a press of the buy button of `target` by `from`, speaking `l`: an order made,
/// reused or granted, or a refusal; the order invoiced as `invoicing` says.
pub(super) async fn decide(
    tx: &Transaction<'_>,
    config: &Config,
    l: Language,
    from: &Sender,
    target: Target,
    invoicing: Invoicing,
) -> Result<Decision, ApiError> {
    // Reads that do not depend on each other go out together (tokio-postgres pipelines them
    // on the connection), and a channel read once is not read again.
    let (plan, read) = match target {
        Target::Channel(channel_id) => {
            let (offer, plan) = tokio::try_join!(
                channels::offer(tx, channel_id),
                plans::default_of(tx, channel_id)
            )?;
            match offer {
                None => return Ok(Decision::Refused(texts::button_invalid(l))),
                Some(c) if !c.active => {
                    return Ok(Decision::Refused(texts::channel_unavailable(l)));
                }
                Some(c) => (plan, Some(c)),
            }
        }
        Target::Plan(plan_id) => (plans::get(tx, plan_id).await?, None),
    };
    let Some(plan) = plan else {
        return Ok(Decision::Refused(texts::button_invalid(l)));
    };
    let read = read.filter(|c| plan.channel_ids.contains(&c.id));
    let mut offers = futures::future::try_join_all(plan.channel_ids.iter().map(|id| {
        let known = read.as_ref().filter(|c| c.id == *id).cloned();
        async move {
            match known {
                Some(c) => Ok(Some(c)),
                None => channels::offer(tx, *id).await,
            }
        }
    }))
    .await?
    .into_iter()
    .map(|c| c.filter(|c| c.active))
    .collect::<Option<Vec<_>>>();
    let Some(offers) = offers.take() else {
        return Ok(Decision::Refused(texts::channel_unavailable(l)));
    };
    if !plan.active || offers.is_empty() {
        return Ok(Decision::Refused(texts::channel_unavailable(l)));
    }
    let first = &offers[0];
    let name = if plan.is_default {
        render::title(l, first.title_in(l), first.id)
    } else {
        render::title(l, plan.title_in(l), first.id)
    };
    let first_name = render::title(l, first.title_in(l), first.id);
    // A free grant's confirmation names what it gives access to: the channels, not the plan.
    let channel_names: Vec<String> = offers
        .iter()
        .map(|o| render::title(l, o.title_in(l), o.id))
        .collect();
    let trial = plan.kind == plans::Kind::Trial;
    let gateway = gateway(config, &plan.currency);
    if !trial && gateway.is_none() {
        return Ok(Decision::Refused(texts::cannot_be_paid(l, &name)));
    }
    let subscriber_id = upsert_subscriber(tx, from).await?;
    let buyer = SubscriberId(subscriber_id);
    // The pair locks first (docs/locking.md). The read under them goes out with them: the
    // statements of one connection run in the order they were sent, so it runs once the locks
    // are held.
    let locks = futures::future::try_join_all(
        plan.channels_ascending()
            .into_iter()
            .map(|channel| db::lock_pair(tx, buyer, channel)),
    );
    let (_, state) = tokio::try_join!(locks, buyer_state(tx, buyer, plan.id))?;
    let BuyerState {
        lifetime,
        stored_code,
        pending,
    } = state;
    let stored_code = codes::of_stored(tx, buyer, stored_code).await?;
    if plan.channel_ids.iter().all(|c| lifetime.contains(c)) {
        return Ok(Decision::Refused(texts::already_lifetime(l, &name)));
    }
    if trial {
        return free(
            tx,
            l,
            buyer,
            &plan,
            (&name, &first_name, &channel_names),
            None,
            config.hold_secs,
        )
        .await;
    }
    let gateway = gateway.expect("checked above for a paid plan");
    if plan.recurring
        && let Some(renews_at) = live_subscription(tx, subscriber_id, first.id).await?
    {
        return Ok(Decision::Refused(texts::already_subscribed(
            l,
            &name,
            &texts::day(l, renews_at),
        )));
    }

    // The buyer's promo code, when it is meant for this plan (a code meant for other plans is
    // kept for them). One meant for it that cannot be used now is explained and forgotten, and
    // no order is made: the next press buys at the list price the buyer is then told.
    let mut free_with_code = false;
    let code = match stored_code {
        Some(code) if code.covers(&plan) => match code.price_for(tx, Some(buyer), &plan).await? {
            Ok(price) => {
                free_with_code = price <= 0;
                Some(code)
            }
            Err(why) => {
                codes::forget(tx, buyer).await?;
                return Ok(Decision::Refused(texts::code_refused_at_order(
                    l,
                    code.text(),
                    &why.text(l),
                    &render::price(l, &plan.price()),
                )));
            }
        },
        _ => None,
    };

    // A card order is paid on a page the worker sends only while it can be open a minute
    // ([`super::MIN_CARD_PAGE_SECS`]): when `HOLD_SECS` is shorter, no page would follow, so the
    // press says card payment is not available instead of promising one. A free order needs none.
    if gateway == Gateway::Card && !free_with_code && !super::card_page_opens(config.hold_secs) {
        tracing::warn!(
            subscriber_id,
            plan_id = plan.id,
            hold_secs = config.hold_secs,
            "bot card order refused: HOLD_SECS is too short for a card page"
        );
        return Ok(Decision::Refused(texts::card_unavailable(l, &name)));
    }

    let open_secs = super::open_secs(gateway, config.hold_secs);
    let code_id = code.as_ref().map(codes::Code::id);
    // Without a pending order of the plan (a new buyer's first press) there is nothing to
    // reuse or retire.
    // A card order is reused only while its page can still be open a minute, as a new order's
    // would be: an older one is retired and a new page sent.
    let reuse_secs = match gateway {
        Gateway::Card => open_secs - super::MIN_CARD_PAGE_SECS,
        Gateway::Stars => open_secs,
    };
    let reusable = if pending {
        bot_orders::reusable(tx, subscriber_id, &plan, reuse_secs, code_id).await?
    } else {
        None
    };
    if let Some(bot_orders::Reusable {
        id: order_id,
        promo_code_id: order_code,
    }) = reusable
    {
        let sent = match invoicing {
            Invoicing::Chat => bot_orders::enqueue_invoice(tx, order_id, from.id).await?,
            Invoicing::Page => false,
        };
        if code_id.is_some() && order_code == code_id {
            codes::forget(tx, buyer).await?;
        }
        tracing::info!(
            order_id,
            subscriber_id,
            sent,
            ?invoicing,
            "bot order reused"
        );
        return Ok(Decision::Reused {
            order_id,
            gateway,
            sent,
        });
    }
    if pending {
        bot_orders::retire_stale(tx, subscriber_id, plan.id).await?;
    }

    // The code's row next (docs/locking.md). The decision runs inside a savepoint, so a refusal
    // leaves nothing of it behind.
    let discount = match &code {
        Some(code) => match discount(tx, code, buyer, &plan).await? {
            Ok(d) => Some(d),
            Err(()) => {
                codes::forget(tx, buyer).await?;
                return Ok(Decision::Refused(texts::code_refused_at_order(
                    l,
                    code.text(),
                    &texts::CodeRefusal::Taken.text(l),
                    &render::price(l, &plan.price()),
                )));
            }
        },
        None => None,
    };
    if discount.is_some_and(|d| d.discount_minor >= plan.price_minor) {
        return free(
            tx,
            l,
            buyer,
            &plan,
            (&name, &first_name, &channel_names),
            discount,
            config.hold_secs,
        )
        .await;
    }

    // Then each channel's row (docs/locking.md; no order of these pairs is locked yet: the new
    // one is ours alone). All or nothing: one full channel refuses the whole plan.
    let mut seat_limited = false;
    for channel in plan.channels_ascending() {
        let Some(terms) = seats::lock_channel_terms(tx, channel.0).await? else {
            return Ok(Decision::Refused(texts::channel_unavailable(l)));
        };
        if !terms.active {
            return Ok(Decision::Refused(texts::channel_unavailable(l)));
        }
        let Some(limit) = terms.seat_limit else {
            continue;
        };
        seat_limited = true;
        if seats::is_live_member(tx, buyer, channel).await? {
            continue;
        }
        let channel_name = offers
            .iter()
            .find(|o| o.id == channel.0)
            .map_or_else(|| name.clone(), |o| render::title(l, o.title_in(l), o.id));
        // The hold rules first: they say when this buyer may try again. A Stars order is held
        // at pre-checkout, which applies them again; refusing now spares the buyer an invoice
        // that would be refused there.
        if let Some((rule, until)) =
            seats::hold_limit(tx, buyer, channel, config.hold_rules()).await?
        {
            tracing::info!(subscriber_id, channel_id = channel.0, ?rule, %until,
                "bot order refused: hold rules");
            return Ok(Decision::Refused(refused(
                l,
                &channel_name,
                CheckoutRefusal::HoldLimited { limit: rule, until },
            )));
        }
        if seats::seats_taken(tx, channel.0).await? >= i64::from(limit) {
            return Ok(Decision::Refused(texts::channel_full(l, &channel_name)));
        }
    }
    let order_id = if gateway == Gateway::Card && seat_limited {
        let order_id = bot_orders::create(tx, buyer, &plan, discount, config.hold_secs).await?;
        if discount.is_some() {
            codes::forget(tx, buyer).await?;
        }
        let locked = seats::lock_order(tx, order_id)
            .await?
            .ok_or_else(|| ApiError::internal("a new order vanished"))?;
        if let Err(refusal) = seats::checkout_decide(tx, locked, config.hold_rules()).await? {
            // Decided under the same locks as the checks above, so not expected; no order stays.
            tracing::warn!(order_id, ?refusal, "bot card order refused at its hold");
            bot_orders::delete_refused(tx, order_id).await?;
            return Ok(Decision::Refused(refused(l, &name, refusal)));
        }
        if invoicing == Invoicing::Chat {
            bot_orders::enqueue_invoice(tx, order_id, from.id).await?;
        }
        order_id
    } else {
        let order_id = match invoicing {
            // Nothing to decide between the order and its invoice: one statement makes both.
            Invoicing::Chat => {
                bot_orders::create_invoiced(tx, buyer, &plan, discount, config.hold_secs, from.id)
                    .await?
            }
            Invoicing::Page => {
                bot_orders::create(tx, buyer, &plan, discount, config.hold_secs).await?
            }
        };
        if discount.is_some() {
            codes::forget(tx, buyer).await?;
        }
        order_id
    };
    tracing::info!(
        order_id,
        subscriber_id,
        plan_id = plan.id,
        channel_id = first.id,
        ?gateway,
        ?invoicing,
        "bot order made"
    );
    Ok(Decision::Made { order_id, gateway })
}

/// A crypto asset's button under an order's invoice (`c:<order>:<asset>`), pressed by `from`:
/// the order's Crypto Pay invoice in that asset is enqueued (once per order and asset; the
/// worker makes it and sends its pay URL). Only the order's own buyer may ask, only while
/// Crypto Pay is configured, the order can still be paid as invoiced (pending, not
/// superseded, open a minute more as a card page would be) and its plan has a price in the
/// asset; otherwise the buyer is told to press buy again.
pub(super) async fn crypto(
    tx: &Transaction<'_>,
    config: &Config,
    l: Language,
    from: &Sender,
    order_id: i64,
    asset: &str,
) -> Result<Answer, ApiError> {
    if config.cryptopay.is_none() {
        return Ok(alert(texts::crypto_unavailable(l)));
    }
    let buyer = upsert_subscriber(tx, from).await?;
    let order = orders::get(tx, order_id).await?;
    if order.is_none_or(|o| o.subscriber_id != buyer) {
        return Ok(alert(texts::button_invalid(l)));
    }
    let payable = super::pay_links::facts(tx, config, order_id)
        .await?
        .is_some_and(|f| {
            f.status == orders::Status::Pending
                && !f.superseded
                && f.open_secs >= super::MIN_CARD_PAGE_SECS
        });
    if !payable
        || crypto_invoices::order_price(tx, order_id, asset)
            .await?
            .is_none()
    {
        return Ok(alert(texts::crypto_unavailable(l)));
    }
    let sent = bot_orders::enqueue_crypto_invoice(tx, order_id, from.id, asset).await?;
    tracing::info!(order_id, asset, sent, "bot crypto invoice asked for");
    Ok(note(if sent {
        texts::invoice_on_its_way(l)
    } else {
        texts::invoice_already_sent(l)
    }))
}

/// A free order — a trial's, or one a 100 % code made free — is not invoiced: it is made and
/// claimed at once ([`trials::claim`], which grants through the locked path and sends the join
/// link as any grant does). A refused claim leaves no order. `names`: the plan's, its first
/// channel's (what a refusal names), and every channel's (what the confirmation names).
async fn free(
    tx: &Transaction<'_>,
    l: Language,
    buyer: SubscriberId,
    plan: &Plan,
    (name, channel, channels): (&str, &str, &[String]),
    discount: Option<crate::catalog::promo_codes::Discount>,
    hold_secs: i64,
) -> Result<Decision, ApiError> {
    if plan.kind == plans::Kind::Trial && !trials::eligible(tx, buyer, plan).await? {
        return Ok(Decision::Refused(texts::trial_used(l, channel)));
    }
    let order_id = bot_orders::create(tx, buyer, plan, discount, hold_secs).await?;
    match trials::claim(tx, order_id).await? {
        Ok(memberships) => {
            if discount.is_some() {
                codes::forget(tx, buyer).await?;
            }
            tracing::info!(
                order_id,
                subscriber_id = buyer.0,
                plan_id = plan.id,
                granted = memberships.len(),
                "bot free order granted"
            );
            Ok(Decision::Granted {
                order_id,
                text: texts::free_access_granted(l, channels),
            })
        }
        Err(refusal) => {
            tracing::info!(
                order_id,
                subscriber_id = buyer.0,
                plan_id = plan.id,
                ?refusal,
                "bot free order refused"
            );
            bot_orders::delete_refused(tx, order_id).await?;
            Ok(Decision::Refused(match refusal {
                ClaimRefusal::TrialUsed => texts::trial_used(l, channel),
                ClaimRefusal::ChannelFull => texts::channel_full(l, channel),
                ClaimRefusal::AlreadyLifetime => texts::already_lifetime(l, name),
                ClaimRefusal::Inactive => texts::channel_unavailable(l),
                ClaimRefusal::NotFree | ClaimRefusal::NotPending => texts::button_invalid(l),
            }))
        }
    }
}

/// The discount `code` gives the new order, decided under the code's lock
/// ([`crate::catalog::promo_codes::discount_for_new_order`]) inside a savepoint; `Err(())` when it
/// refuses (nothing of the decision stays). Other failures are the caller's.
async fn discount(
    tx: &Transaction<'_>,
    code: &codes::Code,
    buyer: SubscriberId,
    plan: &Plan,
) -> Result<Result<crate::catalog::promo_codes::Discount, ()>, ApiError> {
    tx.batch_execute("SAVEPOINT bot_promo_code").await?;
    match crate::catalog::promo_codes::discount_for_new_order(tx, code.text(), buyer, plan).await {
        Ok(d) => {
            tx.batch_execute("RELEASE SAVEPOINT bot_promo_code").await?;
            Ok(Ok(d))
        }
        Err(ApiError::Validation(errors)) => {
            tracing::info!(
                promo_code_id = code.id(),
                ?errors,
                "bot promo code refused at the order"
            );
            tx.batch_execute("ROLLBACK TO SAVEPOINT bot_promo_code")
                .await?;
            Ok(Err(()))
        }
        Err(e) => Err(e),
    }
}

/// The words of a refused hold: the channel is full, or the buyer may try again at a given time.
fn refused(l: Language, name: &str, refusal: CheckoutRefusal) -> String {
    match refusal {
        CheckoutRefusal::HoldLimited { limit, until } => render::hold_limited_answer(
            l,
            name,
            &texts::not_before(l, until),
            limit == HoldLimit::Cooldown,
        ),
        CheckoutRefusal::ChannelInactive | CheckoutRefusal::NotPending => {
            texts::channel_unavailable(l)
        }
        CheckoutRefusal::ChannelFull | CheckoutRefusal::HoldExpired => texts::channel_full(l, name),
        CheckoutRefusal::PromoExhausted => texts::promo_price_gone(l),
    }
}

/// Creates or updates the subscriber of Telegram user `from` (username and display name as
/// Telegram has them now, fit for their columns); returns its id.
pub(super) async fn upsert_subscriber(
    tx: &Transaction<'_>,
    from: &Sender,
) -> Result<i32, ApiError> {
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
    let language = from.language_code.as_deref().and_then(Language::of_tag);
    subscribers::upsert_from_telegram(
        tx,
        from.id,
        username.as_deref(),
        display_name.as_deref(),
        language,
    )
    .await
}

/// Text PostgreSQL can store within a `char_length` limit: no NUL, at most `max` characters.
fn clean(s: &str, max: usize) -> String {
    s.chars().filter(|c| *c != '\0').take(max).collect()
}

/// What a press decides from, read in one statement under the pair locks.
struct BuyerState {
    /// The channels the buyer holds for life ([`crate::access::memberships::lifetime_channels`]).
    lifetime: Vec<i32>,
    /// The code the buyer gave the bot, if one is kept ([`codes::stored`]).
    stored_code: Option<i64>,
    /// Whether the buyer has a pending order of the plan that is not superseded: only then can
    /// [`bot_orders::reusable`] find one, or [`bot_orders::retire_stale`] retire one.
    pending: bool,
}

const BUYER_STATE_SQL: &str = concat!(
    "SELECT ARRAY(",
    crate::access::memberships::lifetime_channels_sql!("$1"),
    ") AS lifetime,
            ",
    codes::stored_code_id_sql!("$1"),
    " AS promo_code_id,
            EXISTS (SELECT 1 FROM orders o
                    WHERE o.subscriber_id = $1 AND o.plan_id = $2 AND o.status = 'pending'
                      AND o.superseded_at IS NULL) AS pending"
);

async fn buyer_state(
    tx: &Transaction<'_>,
    buyer: SubscriberId,
    plan_id: i64,
) -> Result<BuyerState, ApiError> {
    let row = db::row_one(tx, BUYER_STATE_SQL, &[&buyer, &plan_id]).await?;
    Ok(BuyerState {
        lifetime: row.try_get("lifetime")?,
        stored_code: row.try_get("promo_code_id")?,
        pending: row.try_get("pending")?,
    })
}

/// When the buyer's live Stars subscription of the channel renews next, if they have one.
async fn live_subscription(
    tx: &Transaction<'_>,
    subscriber_id: i32,
    channel_id: i32,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
    Ok(db::row_opt(
        tx,
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
