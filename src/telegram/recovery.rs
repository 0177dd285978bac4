//! Telegram payment recovery: the Stars reconcile. Telegram may fail to deliver a
//! `successful_payment` update, and the answer to a `refundStarPayment` call may be lost;
//! `getStarTransactions` lists what really happened. [`reconcile`] pages it and
//!
//! - applies every incoming Stars payment we never recorded through the one payment core
//!   ([`apply_payment`], whose dedupe on (gateway, charge id) keeps it exactly once, even if the
//!   update arrives later too), oldest first: without door 3's `is_first_recurring` the core
//!   tells a subscription's first charge from a renewal by the order and its subscription (a
//!   charge of a paid order in the second half of its subscription's period or later renews
//!   it), so a charge gets the same outcome whichever way it arrives; a renewal stored before its
//!   first charge is judged again when the first charge starts the subscription;
//! - keeps an unrecorded payment whose refund is listed too — refunded outside subgate (another
//!   tool, or an update we missed) — as a `refunded` payment (reason `refunded_elsewhere`)
//!   that grants nothing ([`refunds::record_refunded_elsewhere`]);
//! - marks `refunded` every `refund_pending` payment whose refund (an outgoing transaction to
//!   its payer carrying its charge id) is listed ([`refunds::confirm`]);
//! - records Telegram's affiliate fee of every incoming payment that carries one
//!   (`source.affiliate`) on its payment, after the payments above are recovered, so a
//!   recovered payment gets its fee in the same run ([`affiliate_fees::record`]: once per
//!   payment, and a fee whose payment is not stored yet is kept for a later run).
//!
//! Telegram documents the list as chronological, so a run resumes where the last one ended
//! (one page back, in case of late inserts; the cursor is the `star_reconcile` row); if the
//! list turns out to be newest-first, the run reads from the start back to a day before the
//! previous run. The effects worker's refund looks a lost answer up here too ([`find_refund`]).
//! This is payment recovery, not an effect: it runs beside the worker (every
//! `STARS_RECONCILE` in `serve`, or `subgate effects reconcile`) but shares nothing with it.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use serde::Serialize;

use crate::telegram_api::client::{BotApi, BotError, DEFAULT_TIMEOUT, StarTransaction};
use crate::{
    common::error::ApiError,
    config::Config,
    db,
    payments::{
        affiliate_fees,
        core::{Gateway, NormalizedPayment, apply_payment},
        refunds,
    },
};

/// Pages of 100 transactions one reconcile reads at most; also the most `getStarTransactions`
/// calls one refund check makes.
pub const MAX_PAGES: usize = 50;
/// Transactions per `getStarTransactions` page.
pub const PAGE: i64 = 100;

/// What one reconcile did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// Transactions read.
    pub transactions: u64,
    /// Incoming Stars payments we had not recorded, now passed through `apply_payment`.
    pub payments_recovered: u64,
    /// Incoming Stars payments we had not recorded whose refund is listed too (refunded outside
    /// subgate): kept as `refunded` payments, granting nothing.
    pub refunded_elsewhere: u64,
    /// `refund_pending` payments confirmed refunded.
    pub refunds_confirmed: u64,
    /// Stars payments whose affiliate fee was recorded (it was new or had changed).
    pub affiliate_fees_recorded: u64,
    /// Affiliate fees read whose payment is not stored yet: kept for a later run.
    pub affiliate_fees_waiting: u64,
}

/// Reconciles Stars transactions once with the configured bot (`TELEGRAM_BOT_TOKEN`,
/// `TELEGRAM_API_URL`); nothing without one, and nothing in dry-run mode.
pub async fn reconcile(pool: &Pool, config: &Config) -> Result<ReconcileReport, ApiError> {
    match BotApi::from_config(config, DEFAULT_TIMEOUT) {
        Some(bot) => reconcile_with(pool, &bot).await,
        None => Ok(ReconcileReport::default()),
    }
}

/// [`reconcile`] with a given bot: read the cursor, page the transactions, confirm refunds,
/// recover missing payments, move the cursor.
pub async fn reconcile_with(pool: &Pool, bot: &BotApi) -> Result<ReconcileReport, ApiError> {
    let mut report = ReconcileReport::default();
    if bot.is_dry_run() {
        tracing::info!("dry run: Stars reconcile skipped");
        return Ok(report);
    }
    let start = read_start(pool).await?;
    let (seen, next_offset) = read_transactions(bot, &start)
        .await
        .map_err(|e| ApiError::Unavailable(format!("Telegram: {e}")))?;
    report.transactions = seen.len() as u64;
    // Refunds first: a refunded payment must not be mistaken for a missing one later.
    report.refunds_confirmed = confirm_refunds(pool, &seen).await?;
    recover_missing(pool, &seen, start.now, &mut report).await?;
    // After the recovery, so a payment recovered now gets its fee now; before the cursor
    // moves, so fees that could not be noted are read again by the next run.
    let fees = affiliate_fees::record(pool, &affiliate_fees_of(&seen)).await?;
    report.affiliate_fees_recorded = fees.changed;
    report.affiliate_fees_waiting = fees.waiting;
    save_cursor(pool, next_offset, start.now).await?;
    tracing::info!(
        transactions = report.transactions,
        payments_recovered = report.payments_recovered,
        refunded_elsewhere = report.refunded_elsewhere,
        refunds_confirmed = report.refunds_confirmed,
        affiliate_fees_recorded = report.affiliate_fees_recorded,
        affiliate_fees_waiting = report.affiliate_fees_waiting,
        "Stars transactions reconciled"
    );
    Ok(report)
}

/// Where a run starts: the stored cursor, the previous run, and database now.
struct Start {
    offset: i64,
    last_run: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
}

const START_SQL: &str =
    "SELECT next_offset, last_run_at, statement_timestamp() AS now FROM star_reconcile";
const CURSOR_SQL: &str = "SELECT next_offset FROM star_reconcile";
const SAVE_SQL: &str = "UPDATE star_reconcile SET next_offset = $1, last_run_at = $2";

async fn read_start(pool: &Pool) -> Result<Start, ApiError> {
    let client = pool.get().await?;
    let r = db::row_one(&client, START_SQL, &[]).await?;
    Ok(Start {
        offset: r.try_get("next_offset")?,
        last_run: r.try_get("last_run_at")?,
        now: r.try_get("now")?,
    })
}

/// How far the reconcile has read the list (`star_reconcile.next_offset`).
pub async fn cursor(client: &impl GenericClient) -> Result<i64, ApiError> {
    Ok(db::row_one(client, CURSOR_SQL, &[])
        .await?
        .try_get("next_offset")?)
}

async fn save_cursor(pool: &Pool, next_offset: i64, now: DateTime<Utc>) -> Result<(), ApiError> {
    let client = pool.get().await?;
    db::execute(&client, SAVE_SQL, &[&next_offset, &now]).await?;
    Ok(())
}

/// The transactions to look at and the cursor for the next run: from one page before the
/// stored cursor to the end, oldest first — or, if the list is newest first, from the start
/// back to a day before the previous run (and the cursor goes back to 0).
async fn read_transactions(
    bot: &BotApi,
    start: &Start,
) -> Result<(Vec<StarTransaction>, i64), BotError> {
    let mut seen: Vec<StarTransaction> = Vec::new();
    let mut offset = (start.offset - PAGE).max(0);
    for page_no in 0..MAX_PAGES {
        let page = bot.get_star_transactions(offset, PAGE).await?.transactions;
        if page_no == 0 && is_newest_first(&page) {
            return read_newest_first(bot, start.last_run).await.map(|t| (t, 0));
        }
        let n = page.len() as i64;
        seen.extend(page);
        offset += n;
        if n < PAGE {
            break;
        }
    }
    Ok((seen, offset))
}

/// A newest-first list, read from the start until a page reaches a day before `last_run`.
async fn read_newest_first(
    bot: &BotApi,
    last_run: Option<DateTime<Utc>>,
) -> Result<Vec<StarTransaction>, BotError> {
    let horizon = last_run.map(|t| t.timestamp() - 86_400);
    let mut seen = Vec::new();
    let mut offset = 0;
    for _ in 0..MAX_PAGES {
        let page = bot.get_star_transactions(offset, PAGE).await?.transactions;
        let n = page.len() as i64;
        let oldest = page.iter().map(|t| t.date).min();
        seen.extend(page);
        offset += n;
        if n < PAGE || matches!((horizon, oldest), (Some(h), Some(o)) if o < h) {
            break;
        }
    }
    Ok(seen)
}

/// Marks `refunded` the `refund_pending` payments whose refund is among `seen`.
async fn confirm_refunds(pool: &Pool, seen: &[StarTransaction]) -> Result<u64, ApiError> {
    let (charge_ids, users): (Vec<String>, Vec<String>) = seen
        .iter()
        .filter_map(|t| t.refunded_user().map(|u| (t.id.clone(), u.to_string())))
        .unzip();
    if charge_ids.is_empty() {
        return Ok(0);
    }
    let client = pool.get().await?;
    refunds::confirm(&client, &charge_ids, &users).await
}

/// Stores every incoming payment among `seen` that we never recorded: through the payment core,
/// or as refunded elsewhere when its refund is listed too. A payment that cannot be stored is
/// logged and left for the next run.
async fn recover_missing(
    pool: &Pool,
    seen: &[StarTransaction],
    now: DateTime<Utc>,
    report: &mut ReconcileReport,
) -> Result<(), ApiError> {
    let mut incoming: Vec<(&StarTransaction, i64, &str)> = seen
        .iter()
        .filter_map(|t| t.incoming_user_payment().map(|(u, p)| (t, u, p)))
        .collect();
    // Oldest first, whichever way the list is ordered: a subscription's first charge is applied
    // before its renewals, so each is classified as door 3 would have classified it.
    incoming.sort_by_key(|(t, _, _)| t.date);
    let ids: Vec<&str> = incoming.iter().map(|(t, _, _)| t.id.as_str()).collect();
    let known: HashSet<String> = {
        let client = pool.get().await?;
        refunds::known_charges(&client, &ids)
            .await?
            .into_iter()
            .collect()
    };
    // (charge id, user) of every refund listed: a charge refunded to its payer.
    let refunded: HashSet<(&str, i64)> = seen
        .iter()
        .filter_map(|t| t.refunded_user().map(|u| (t.id.as_str(), u)))
        .collect();
    for (t, user, payload) in incoming {
        if known.contains(&t.id) {
            continue;
        }
        let payment = NormalizedPayment {
            gateway: Gateway::TelegramStars,
            external_id: t.id.clone(),
            order_reference: payload.to_string(),
            amount_minor: t.amount,
            currency: "XTR".to_string(),
            paid_at: DateTime::from_timestamp(t.date, 0).unwrap_or(now),
            payer_telegram_id: Some(user),
        };
        if refunded.contains(&(t.id.as_str(), user)) {
            keep_refunded_elsewhere(pool, &payment, report).await;
        } else {
            recover(pool, payment, report).await;
        }
    }
    Ok(())
}

/// (charge id, whole Stars) of Telegram's affiliate fee on every incoming payment among `seen`
/// that carries one.
fn affiliate_fees_of(seen: &[StarTransaction]) -> Vec<(String, i64)> {
    seen.iter()
        .filter_map(|t| t.affiliate_fee().map(|fee| (t.id.clone(), fee)))
        .collect()
}

async fn keep_refunded_elsewhere(
    pool: &Pool,
    payment: &NormalizedPayment,
    report: &mut ReconcileReport,
) {
    match refunds::record_refunded_elsewhere(pool, payment).await {
        Ok(Some(id)) => {
            report.refunded_elsewhere += 1;
            tracing::warn!(
                payment_id = id,
                charge_id = %payment.external_id,
                "Stars payment refunded outside subgate recorded as refunded; no access granted"
            );
        }
        Ok(None) => {}
        Err(e) => {
            tracing::error!(charge_id = %payment.external_id, error = %e,
                "refunded Stars payment could not be recorded");
        }
    }
}

async fn recover(pool: &Pool, payment: NormalizedPayment, report: &mut ReconcileReport) {
    let charge_id = payment.external_id.clone();
    match apply_payment(pool, payment).await {
        Ok(applied) => {
            if !applied.duplicate {
                report.payments_recovered += 1;
                tracing::warn!(
                    payment_id = applied.payment.id,
                    outcome = %applied.payment.outcome,
                    "Stars payment recovered by reconcile (its update never arrived)"
                );
            }
        }
        Err(e) => {
            tracing::error!(charge_id = %charge_id, error = %e,
                "missed Stars payment could not be applied");
        }
    }
}

/// True when a page of transactions is ordered newest first (Telegram documents oldest first).
fn is_newest_first(page: &[StarTransaction]) -> bool {
    matches!((page.first(), page.last()), (Some(first), Some(last)) if first.date > last.date)
}

/// What [`find_refund`] looks for, and where.
pub struct RefundSearch<'a> {
    pub charge_id: &'a str,
    pub user_id: i64,
    /// `star_reconcile.next_offset` ([`cursor`]): the reconcile has read the list up to here,
    /// confirming every refund of a `refund_pending` payment it saw.
    pub cursor: i64,
    /// Unix time before which the refund cannot have been made.
    pub since: i64,
}

/// `getStarTransactions` pages within a budget of calls.
struct Pager<'a> {
    bot: &'a BotApi,
    calls_left: usize,
}

impl Pager<'_> {
    /// The transactions at `offset..offset + limit`; `None` once the budget is spent.
    async fn page(
        &mut self,
        offset: i64,
        limit: i64,
    ) -> Result<Option<Vec<StarTransaction>>, BotError> {
        if self.calls_left == 0 {
            return Ok(None);
        }
        self.calls_left -= 1;
        Ok(Some(
            self.bot
                .get_star_transactions(offset, limit)
                .await?
                .transactions,
        ))
    }
}

/// Looks for the refund of a charge to its payer among the bot's Stars transactions, in at most
/// [`MAX_PAGES`] calls however long the list is. The refund is recent (made after its effect
/// was created) and the list is chronological, so it is near the end: starting one page before
/// the reconcile cursor, the end is found by galloping (pages at doubling distances, then a
/// binary search once a probe lands past the end), and pages are read back from the end until
/// one holds a transaction older than `since`, or back to the start page. Should the list be
/// newest first (as the reconcile also allows for), it is read from the start until `since`.
pub async fn find_refund(bot: &BotApi, s: &RefundSearch<'_>) -> Result<bool, BotError> {
    let ours =
        |page: &[StarTransaction]| page.iter().any(|t| t.is_refund_of(s.charge_id, s.user_id));
    let older = |page: &[StarTransaction]| page.iter().any(|t| t.date < s.since);
    let mut pager = Pager {
        bot,
        calls_left: MAX_PAGES,
    };
    let start = (s.cursor - PAGE).max(0);
    let Some(first) = pager.page(start, PAGE).await? else {
        return Ok(false);
    };
    if ours(&first) {
        return Ok(true);
    }
    let full = |page: &[StarTransaction]| page.len() as i64 == PAGE;
    if start == 0 && is_newest_first(&first) {
        let (mut offset, mut page) = (PAGE, first);
        while full(&page) && !older(&page) {
            let Some(next) = pager.page(offset, PAGE).await? else {
                break;
            };
            if ours(&next) {
                return Ok(true);
            }
            offset += PAGE;
            page = next;
        }
        return Ok(false);
    }
    if !full(&first) {
        return Ok(false);
    }
    // `known` starts a full page; probe at doubling distances until a probe is not full.
    let (mut known, mut step) = (start, PAGE);
    let end = loop {
        let probe = known + step;
        let Some(page) = pager.page(probe, PAGE).await? else {
            return Ok(false);
        };
        if ours(&page) {
            return Ok(true);
        }
        if full(&page) {
            (known, step) = (probe, step * 2);
            continue;
        }
        if !page.is_empty() {
            break probe + page.len() as i64;
        }
        // Past the end: the length is in known + PAGE ..= probe. Binary search for it.
        let (mut lo, mut hi) = (known + PAGE, probe);
        let mut found = None;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let Some(page) = pager.page(mid, PAGE).await? else {
                return Ok(false);
            };
            if ours(&page) {
                return Ok(true);
            }
            if page.is_empty() {
                hi = mid;
            } else if full(&page) {
                lo = mid + PAGE;
            } else {
                found = Some(mid + page.len() as i64);
                break;
            }
        }
        break found.unwrap_or(lo);
    };
    // Back from the end to the start page (read first), newest pages first.
    let floor = start + PAGE;
    let mut upper = end;
    while upper > floor {
        let offset = (upper - PAGE).max(floor);
        let Some(page) = pager.page(offset, upper - offset).await? else {
            break;
        };
        if ours(&page) {
            return Ok(true);
        }
        if page.is_empty() || older(&page) {
            break;
        }
        upper = offset;
    }
    Ok(false)
}
