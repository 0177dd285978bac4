//! The buyer side of the bot: a buyer writes to the bot and gets in without staff.
//!
//! `/start` and `/help` show the catalogue (the active channels, each with its active plans:
//! price, period or lifetime, a buy button per plan that can be bought, a "try free" button for
//! a trial the buyer can still use; a bundle under its first channel), `/start c<id>` (a
//! channel's `buy_link`) one channel's plans, `/start p<id>` (a plan's) one plan, `/start
//! p<id>-<CODE>` that plan with a promo code applied, `/code CODE` keeps a code for the next
//! order ([`codes`]; wrong codes are limited, [`guesses`]), `/start r_<CODE>` (and `/start
//! r_<CODE>-p<id>`) an affiliate's referral link: the click recorded and the buyer attributed
//! ([`crate::referrals::attribution`]), then the catalogue (or the plan) as without it,
//! `/referral` the buyer's own referral link ([`crate::referrals::buyer_links`]),
//! `/subscriptions` the buyer's memberships with renew and cancel-renewal
//! buttons, `/language` the language the bot writes in (English, Ukrainian, Russian: the one
//! remembered for the buyer, else their Telegram app's, else `BOT_DEFAULT_LANGUAGE`;
//! `crate::present::locale`). A buy button makes (or reuses) the buyer's order of the plan and sends the invoice:
//! Telegram Stars (`sendInvoice`), a Stars subscription link for a `recurring` plan, or a signed
//! WayForPay card link; a free order (a trial, a 100 % code) is claimed at once instead. The
//! money comes back through the doors and the one payment core like any other payment.
//!
//! The shape follows two rules of Telegram's webhook:
//! - **One call in the reply.** A webhook may answer an update with one Bot API call in its
//!   response body. The conversation uses it for the call that must be immediate — the message
//!   answering a command, or `answerCallbackQuery` for a button — and everything else (the
//!   invoice, a second page, a confirmation) goes through the effects outbox, in the same
//!   transaction, with its retries, rate limits, dry-run mode and dead letters.
//! - **Redelivery.** Telegram delivers an update again after any non-2xx answer (or a lost
//!   one). A conversation update that wrote anything is recorded under its `update_id` in the
//!   transaction of its effects (`bot_updates`), with its reply: a repeat gets the same reply
//!   and changes nothing. One that wrote nothing is not recorded — a write and a WAL flush
//!   saved per `/start` — and a repeat of it is answered afresh: a command that only reads (the
//!   catalogue, an offer, `/subscriptions`) runs outside a transaction ([`read`]), any other
//!   step in one, recorded after it only when it wrote ([`deliver`]).
//!   A repeated button press (a new update) never sends a second invoice either: the invoice
//!   effect is keyed on the order, and a second press reuses the order. And the conversation
//!   answers 200 for anything but an unavailable database, so no update is re-sent forever.
//!
//! - [`update`]: the conversation's view of an update and what counts as one;
//! - [`render`]: pure rendering and Telegram's limits; [`texts`]: every text buyers read
//!   (both in `crate::present`, which the payment core and the effects worker use too);
//! - [`crate::outbox::bot_messages`]: the bot's messages to buyers, through the effects outbox;
//! - [`conversation`]: commands and buttons; [`catalogue`]: the catalogue a buyer sees;
//!   [`buy`]: the buy button; [`codes`]: the buyer's promo code as the bot keeps and shows it;
//!   [`guesses`]: the limit on wrong codes. The bot's order rules are the orders layer's
//!   ([`crate::orders::bot_orders`]), what a buyer sees of their memberships the access
//!   layer's ([`crate::access::buyer_view`]).

mod buy;
mod catalogue;
mod codes;
mod conversation;
pub mod guesses;
pub mod mini_app;
pub mod pay_links;
pub mod update;

pub use crate::present::{render, texts};

use deadpool_postgres::Pool;
use serde_json::Value;
use tokio_postgres::error::SqlState;

use crate::{
    access::buyer_view::{self, RenewFacts},
    common::error::ApiError,
    config::Config,
};
use update::{Action, BotUpdate};

/// Telegram stops re-delivering an update within a day: an older record deduplicates nothing
/// (Telegram may reuse ids after a quiet week).
const DEDUPE_WINDOW: &str = "1 day";
/// Records older than this are deleted, every [`PURGE_EVERY`]th update.
const KEEP: &str = "2 days";
const PURGE_EVERY: i64 = 1000;

/// How long the bot reuses a buyer's pending Stars order without a seat hold (and its invoice)
/// for another press of the buy button.
pub const ORDER_REUSE_SECS: i64 = 3600;

/// How long after it was made a bot order without a seat hold can be paid as invoiced, and so is
/// reused: a Stars invoice [`ORDER_REUSE_SECS`]; a card link no longer than a hold lasts
/// (`HOLD_SECS`), since WayForPay's `orderTimeout` is not covered by the link's signature and
/// the page must not promise more than a hold would. An order holding a seat can be paid as
/// invoiced until its hold runs out.
pub fn open_secs(gateway: Gateway, hold_secs: i64) -> i64 {
    match gateway {
        Gateway::Stars => ORDER_REUSE_SECS,
        Gateway::Card => ORDER_REUSE_SECS.min(hold_secs),
    }
}

/// The shortest time a card page is sent for: the worker sends no page that would close
/// sooner (`worker::bot`), so a press promises one only when it can be open at least this long.
pub const MIN_CARD_PAGE_SECS: i64 = 60;

/// Whether a new card order's page can be open for [`MIN_CARD_PAGE_SECS`] at least: it is open
/// no longer than [`open_secs`], which `HOLD_SECS` (`hold_secs`) bounds.
pub fn card_page_opens(hold_secs: i64) -> bool {
    open_secs(Gateway::Card, hold_secs) >= MIN_CARD_PAGE_SECS
}

/// The start-up warning of a bot that sells card plans (a bot token, `PUBLIC_URL` and a card
/// page configured) with `HOLD_SECS` too short for any card page to be sent: every card press
/// is then answered that card payment is not available.
pub fn card_page_warning(config: &Config) -> Option<String> {
    let pages = card_pages(config);
    let sells_cards = config.telegram_bot_token.is_some()
        && config.public_url.is_some()
        && (pages.wayforpay || pages.stripe || pages.monobank);
    (sells_cards && !card_page_opens(config.hold_secs)).then(|| {
        format!(
            "HOLD_SECS={} is under {MIN_CARD_PAGE_SECS}: no card payment page can stay open that \
             long, so the bot sends none and answers every card purchase that card payment is \
             not available; set HOLD_SECS to {MIN_CARD_PAGE_SECS} or more to sell by card",
            config.hold_secs
        )
    })
}

/// What a renew button of a membership of `channel_id` buys: the plan its buyer last paid for
/// the channel when that plan still renews ([`RenewFacts`]), else the channel's default plan.
pub fn renew_target(
    channel_id: i32,
    last_plan: Option<i64>,
    last_plan_renews: Option<bool>,
) -> render::Callback {
    match last_plan {
        Some(plan) if last_plan_renews == Some(true) => render::Callback::Plan(plan),
        _ => render::Callback::Buy(channel_id),
    }
}

/// The renew button's callback of membership `membership_id`, when its channel can be bought
/// now (active, a gateway takes its currency); `None` otherwise.
pub async fn renew_callback(
    client: &impl deadpool_postgres::GenericClient,
    config: &Config,
    membership_id: i64,
) -> Result<Option<render::Callback>, ApiError> {
    let Some(facts) = buyer_view::renew_facts(client, membership_id).await? else {
        return Ok(None);
    };
    Ok(renew_of(config, &facts))
}

/// The renew button's callback from a membership's [`RenewFacts`], when its channel can be
/// bought now (active, a gateway takes its currency).
pub(super) fn renew_of(config: &Config, facts: &RenewFacts) -> Option<render::Callback> {
    (facts.active && gateway(config, &facts.currency).is_some())
        .then(|| renew_target(facts.channel_id, facts.last_plan_id, facts.last_plan_renews))
}

/// How a channel's price can be paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gateway {
    /// Telegram Stars (`XTR`), through door 3.
    Stars,
    /// A card, on a WayForPay Purchase page (door 2), a Stripe Checkout page (door 4) or a
    /// Monobank invoice's page (door 5, hryvnias only), whichever are configured
    /// ([`card_pages`]); the buyer picks when several are.
    Card,
}

/// The card payment pages the bot can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardPages {
    /// WayForPay is configured with a domain and the service's public URL (its `serviceUrl`).
    pub wayforpay: bool,
    /// Stripe is configured, and the buyer can be sent back somewhere after paying (the bot's
    /// chat, else `PUBLIC_URL`).
    pub stripe: bool,
    /// Monobank is configured with the service's public URL (its `webHookUrl`); it takes
    /// hryvnias only ([`CardPages::monobank_takes`]).
    pub monobank: bool,
}

impl CardPages {
    /// Whether a Monobank page is made for an order in `currency`.
    pub fn monobank_takes(&self, currency: &str) -> bool {
        self.monobank && currency == "UAH"
    }
}

/// Which card pages are configured.
pub fn card_pages(config: &Config) -> CardPages {
    CardPages {
        wayforpay: config.wayforpay.is_some()
            && config.wayforpay_domain.is_some()
            && config.public_url.is_some(),
        stripe: config.stripe.is_some() && stripe_return_url(config).is_some(),
        monobank: config.monobank.is_some() && config.public_url.is_some(),
    }
}

/// Where a Stripe Checkout page sends the buyer afterwards: the bot's chat, else the service's
/// public URL.
pub fn stripe_return_url(config: &Config) -> Option<String> {
    config
        .telegram_bot_username
        .as_ref()
        .map(|u| format!("https://t.me/{u}"))
        .or_else(|| config.public_url.clone())
}

/// The gateway that takes `currency`, if one is configured: Stars always; any other currency
/// when WayForPay or Stripe is configured, hryvnias when Monobank is ([`card_pages`]).
pub fn gateway(config: &Config, currency: &str) -> Option<Gateway> {
    if currency == "XTR" {
        return Some(Gateway::Stars);
    }
    let pages = card_pages(config);
    (pages.wayforpay || pages.stripe || pages.monobank_takes(currency)).then_some(Gateway::Card)
}

/// Handles an update that no payment door decided: a buyer's command or button press gets the
/// Bot API call to put in the webhook reply (`None`: answer `{}`); anything else is ignored.
/// Fails only when the database is unavailable (Telegram then delivers the update again);
/// any other failure is logged and the update answered `{}`, so Telegram does not re-send it
/// forever.
pub async fn handle(db: &Pool, config: &Config, body: &[u8]) -> Result<Option<Value>, ApiError> {
    let update: BotUpdate = match serde_json::from_slice(body) {
        Ok(u) => u,
        Err(e) => {
            tracing::info!(error = %e, "Telegram update without a readable conversation part ignored");
            return Ok(None);
        }
    };
    let Some(action) = Action::of(&update) else {
        tracing::debug!(update_id = update.update_id, "Telegram update ignored");
        return Ok(None);
    };
    let update_id = update.update_id;
    let delivery = if conversation::reads_only(&action) {
        read(db, config, &action).await
    } else {
        step(db, config, update_id, &action).await
    };
    match delivery {
        Ok(Delivery::Answered(reply)) => {
            if update_id % PURGE_EVERY == 0 {
                purge(db).await;
            }
            Ok(reply)
        }
        Ok(Delivery::Repeated(reply)) => {
            tracing::info!(update_id, "Telegram update repeated: stored reply returned");
            Ok(reply)
        }
        Ok(Delivery::Twin) => unreachable!("a twin delivery is answered in step"),
        Err(e) if is_transient(&e) => Err(e),
        Err(e) => {
            tracing::error!(update_id, error = %e, "bot update failed; answered without a reply");
            Ok(None)
        }
    }
}

/// Whether `action` is `/start`, which takes the buyer back into broadcasts and automations
/// (any update makes a buyer who blocked the bot reachable again:
/// [`crate::access::subscribers::heard_from_cte`], in the update's first read).
fn starts(action: &Action) -> bool {
    matches!(action, Action::Text { text, .. }
        if matches!(render::parse_command(text), render::Command::Start(_)))
}

/// What a delivery of an update came to.
enum Delivery {
    /// Acted on now; the reply to send.
    Answered(Option<Value>),
    /// Handled before (within [`DEDUPE_WINDOW`]): the reply stored then.
    Repeated(Option<Value>),
    /// A twin delivery, running at the same time, recorded the update first while this one
    /// also wrote: this one's writes are rolled back and the twin's reply is returned.
    Twin,
}

/// A command that only reads (the catalogue, an offer, `/subscriptions`, help): answered on a
/// pooled connection without a transaction and without a record — it changes nothing, so a
/// repeat is answered afresh. (Inside a transaction its reads would see no more together: each
/// statement of a read-committed transaction takes its own snapshot.)
async fn read(db: &Pool, config: &Config, action: &Action) -> Result<Delivery, ApiError> {
    let client = db.get().await?;
    let remembered =
        crate::access::subscribers::heard_from(&client, action.from().id, starts(action)).await?;
    let reply = conversation::answer_reading(&client, config, remembered, action).await?;
    Ok(Delivery::Answered(reply))
}

/// One delivery in its transaction (run again after a deadlock or serialization failure, as
/// [`crate::transaction!`] does).
async fn step(
    db: &Pool,
    config: &Config,
    update_id: i64,
    action: &Action,
) -> Result<Delivery, ApiError> {
    let mut client = db.get().await?;
    let mut attempt = 0usize;
    loop {
        attempt += 1;
        let tx = client.transaction().await?;
        let result = deliver(&tx, config, update_id, action).await;
        if let Ok(Delivery::Twin) = result {
            tx.rollback().await?;
            let stored = stored_reply(&client, update_id).await?;
            tracing::info!(
                update_id,
                "Telegram update delivered twice at once: the first's reply returned"
            );
            return Ok(Delivery::Repeated(stored.unwrap_or_default()));
        }
        match crate::db::finish(tx, result, attempt).await {
            crate::db::Step::Done(r) => return r,
            crate::db::Step::Retry => continue,
        }
    }
}

/// Acts on `action` unless update `update_id` was handled before, and records the update with
/// its reply when acting on it wrote anything (an order, an invoice, a kept code, a language):
/// what is recorded is what a repeat must not do again (a row lock counts: every press upserts
/// its buyer, which locks the buyer's row, so every press is recorded). A step that wrote
/// nothing — a cancel-renewal button pressed by someone else — is not recorded, and a repeat of
/// it is answered afresh, changing nothing either. Two deliveries of one update
/// at the same time: the one that records second (its insert waits for the first's commit)
/// rolls back what it wrote and answers the first's reply ([`Delivery::Twin`]).
async fn deliver(
    tx: &deadpool_postgres::Transaction<'_>,
    config: &Config,
    update_id: i64,
    action: &Action,
) -> Result<Delivery, ApiError> {
    // Both reads in one statement.
    let row = crate::db::row_one(
        tx,
        &FIRST_SQL,
        &[&action.from().id, &update_id, &starts(action)],
    )
    .await?;
    let remembered: Option<texts::Language> = row.try_get("language")?;
    if row.try_get("found")? {
        return Ok(Delivery::Repeated(row.try_get("reply")?));
    }
    let reply = conversation::act(tx, config, remembered, action).await?;
    let row = crate::db::row_one(tx, &RECORD_SQL, &[&update_id, &reply]).await?;
    let (wrote, recorded, found): (bool, bool, bool) = (
        row.try_get("wrote")?,
        row.try_get("recorded")?,
        row.try_get("found")?,
    );
    Ok(match (wrote, recorded, found) {
        (true, true, _) | (false, _, false) => Delivery::Answered(reply),
        (false, _, true) => Delivery::Repeated(row.try_get("reply")?),
        (true, false, _) => Delivery::Twin,
    })
}

/// The reply stored for update `update_id` when it was handled within [`DEDUPE_WINDOW`]
/// (`Some(None)`: answered `{}`).
async fn stored_reply(
    client: &impl deadpool_postgres::GenericClient,
    update_id: i64,
) -> Result<Option<Option<Value>>, ApiError> {
    let row = crate::db::row_opt(client, &STORED_SQL, &[&update_id]).await?;
    Ok(match row {
        Some(r) => Some(r.try_get("reply")?),
        None => None,
    })
}

static STORED_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT reply FROM bot_updates
         WHERE update_id = $1 AND created_at >= statement_timestamp() - interval '{DEDUPE_WINDOW}'"
    )
});

/// What a delivery reads first: the language remembered for Telegram user `$1`
/// ([`crate::access::subscribers::language_of_telegram_user`]) and the reply stored for update `$2`
/// (as [`STORED_SQL`] reads it: `found`, `reply`); and the user heard from (`$3`: the update
/// is `/start`; [`crate::access::subscribers::heard_from_cte`]).
static FIRST_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH {heard}
         SELECT b.update_id IS NOT NULL AS found, b.reply,
                ({language}) AS language
         FROM (VALUES (true)) AS one (x) LEFT JOIN bot_updates b
             ON b.update_id = $2
            AND b.created_at >= statement_timestamp() - interval '{DEDUPE_WINDOW}'",
        language = crate::access::subscribers::LANGUAGE_OF_TELEGRAM_USER_SQL,
        heard = crate::access::subscribers::heard_from_cte("$3::boolean"),
    )
});

/// Records the update with its reply when the transaction wrote anything
/// (`pg_current_xact_id_if_assigned()`: a transaction gets an id at its first write); an older
/// record than [`DEDUPE_WINDOW`] is taken over. `recorded` says whether it was; `found` and
/// `reply` are a record there already (as of the statement's start).
static RECORD_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH w AS MATERIALIZED (
             SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS wrote
         ), recorded AS (
             INSERT INTO bot_updates (update_id, reply)
             SELECT $1, $2 FROM w WHERE w.wrote
             ON CONFLICT (update_id) DO UPDATE
                 SET reply = EXCLUDED.reply, created_at = statement_timestamp()
                 WHERE bot_updates.created_at
                       < statement_timestamp() - interval '{DEDUPE_WINDOW}'
             RETURNING update_id
         )
         SELECT w.wrote, EXISTS (SELECT 1 FROM recorded) AS recorded,
                b.update_id IS NOT NULL AS found, b.reply
         FROM w LEFT JOIN bot_updates b
             ON b.update_id = $1
            AND b.created_at >= statement_timestamp() - interval '{DEDUPE_WINDOW}'"
    )
});

async fn purge(db: &Pool) {
    let result = async {
        let client = db.get().await?;
        let n = client
            .execute(
                &format!(
                    "DELETE FROM bot_updates
                     WHERE created_at < statement_timestamp() - interval '{KEEP}'"
                ),
                &[],
            )
            .await?;
        Ok::<_, ApiError>(n)
    }
    .await;
    match result {
        Ok(n) => tracing::info!(deleted = n, "old bot update records deleted"),
        Err(e) => tracing::warn!(error = %e, "old bot update records not deleted"),
    }
}

/// A failure worth Telegram's redelivery: the database is unreachable, overloaded, or busy.
fn is_transient(e: &ApiError) -> bool {
    match e {
        ApiError::Pool(_) | ApiError::Unavailable(_) => true,
        ApiError::Db(db) => match db.code() {
            None => true,
            Some(code) => {
                matches!(&code.code()[..2], "08" | "40" | "53" | "57" | "58")
                    || *code == SqlState::LOCK_NOT_AVAILABLE
            }
        },
        _ => false,
    }
}
