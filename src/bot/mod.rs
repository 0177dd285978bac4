//! The buyer side of the bot: a buyer writes to the bot and gets in without staff.
//!
//! `/start` and `/help` show the catalogue (the active channels, each with its active plans:
//! price, period or lifetime, a buy button per plan that can be bought, a "try free" button for
//! a trial the buyer can still use; a bundle under its first channel), `/start c<id>` (a
//! channel's `buy_link`) one channel's plans, `/start p<id>` (a plan's) one plan, `/start
//! p<id>-<CODE>` that plan with a promo code applied, `/code CODE` keeps a code for the next
//! order ([`codes`]), `/subscriptions` the buyer's memberships with renew and cancel-renewal
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
//!   one). Each conversation update is recorded under its `update_id` in the transaction of its
//!   effects (`bot_updates`), with its reply: a repeat gets the same reply and changes nothing.
//!   A repeated button press (a new update) never sends a second invoice either: the invoice
//!   effect is keyed on the order, and a second press reuses the order. And the conversation
//!   answers 200 for anything but an unavailable database, so no update is re-sent forever.
//!
//! - [`update`]: the conversation's view of an update and what counts as one;
//! - [`render`]: pure rendering and Telegram's limits; [`texts`]: every text buyers read
//!   (both in `crate::present`, which the payment core and the effects worker use too);
//! - [`outbox`]: the bot's messages to buyers, through the effects outbox;
//! - [`conversation`]: commands and buttons; [`buy`]: the buy button; [`codes`]: the buyer's
//!   promo code as the bot keeps and shows it.

mod buy;
mod codes;
mod conversation;
pub mod outbox;
pub mod update;

pub use crate::present::{render, texts};

use serde_json::Value;
use tokio_postgres::error::SqlState;

use crate::{config::Config, error::ApiError, state::AppState};
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

/// How a channel's price can be paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gateway {
    /// Telegram Stars (`XTR`), through door 3.
    Stars,
    /// A card, on a WayForPay Purchase page, through door 2.
    Card,
}

/// The gateway that takes `currency`, if one is configured: Stars always; any other currency
/// when WayForPay is configured with a domain and the service's public URL (its `serviceUrl`).
pub fn gateway(config: &Config, currency: &str) -> Option<Gateway> {
    if currency == "XTR" {
        return Some(Gateway::Stars);
    }
    let card = config.wayforpay.is_some()
        && config.wayforpay_domain.is_some()
        && config.public_url.is_some();
    card.then_some(Gateway::Card)
}

/// Handles an update that no payment door decided: a buyer's command or button press gets the
/// Bot API call to put in the webhook reply (`None`: answer `{}`); anything else is ignored.
/// Fails only when the database is unavailable (Telegram then delivers the update again);
/// any other failure is logged and the update answered `{}`, so Telegram does not re-send it
/// forever.
pub async fn handle(state: &AppState, body: &[u8]) -> Result<Option<Value>, ApiError> {
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
    let action = &action;
    let result = crate::transaction!(state.db, |tx| {
        if let Some(stored) = repeated(tx, update_id).await? {
            tracing::info!(update_id, "Telegram update repeated: stored reply returned");
            return Ok(stored);
        }
        let reply = conversation::act(tx, &state.config, action).await?;
        tx.execute(
            "UPDATE bot_updates SET reply = $2 WHERE update_id = $1",
            &[&update_id, &reply],
        )
        .await?;
        Ok(reply)
    });
    match result {
        Ok(reply) => {
            if update_id % PURGE_EVERY == 0 {
                purge(state).await;
            }
            Ok(reply)
        }
        Err(e) if is_transient(&e) => Err(e),
        Err(e) => {
            tracing::error!(update_id, error = %e, "bot update failed; answered without a reply");
            Ok(None)
        }
    }
}

/// Records `update_id` as handled now; when it already was (within [`DEDUPE_WINDOW`]), returns
/// the reply stored then. A twin delivery running at the same time waits here until the first
/// commits, then reads its reply.
async fn repeated(
    tx: &deadpool_postgres::Transaction<'_>,
    update_id: i64,
) -> Result<Option<Option<Value>>, ApiError> {
    let fresh = tx
        .query_opt(
            &format!(
                "INSERT INTO bot_updates (update_id) VALUES ($1)
                 ON CONFLICT (update_id) DO UPDATE
                     SET reply = NULL, created_at = statement_timestamp()
                     WHERE bot_updates.created_at
                           < statement_timestamp() - interval '{DEDUPE_WINDOW}'
                 RETURNING update_id"
            ),
            &[&update_id],
        )
        .await?;
    if fresh.is_some() {
        return Ok(None);
    }
    let row = tx
        .query_one(
            "SELECT reply FROM bot_updates WHERE update_id = $1",
            &[&update_id],
        )
        .await?;
    Ok(Some(row.try_get("reply")?))
}

async fn purge(state: &AppState) {
    let result = async {
        let client = state.db.get().await?;
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
