//! The effects worker: claims due effects, performs them on Telegram, records the result.
//!
//! Each effect is claimed in its own transaction with `FOR UPDATE SKIP LOCKED` and the row lock
//! is held while the Bot API calls are made and until the result is recorded and committed. So
//! two workers (lanes of one run, several runs, several processes) never perform the same effect
//! at the same time, and a worker that dies after calling Telegram but before committing leaves
//! the row exactly as it was: due, to be performed again — which is why every effect is harmless
//! when repeated. A record step that fails is the same case.
//!
//! Results: done; a transient failure (timeout, transport, 5xx, a 401/404 that means our
//! configuration is wrong) is retried with exponential backoff and jitter, and dead-lettered
//! (`failed`) after [`Options::max_attempts`]; Telegram's 429 reschedules at `retry_after`
//! without counting as an attempt; any other refusal (4xx) is definite: `failed` at once, for
//! staff to read (`GET /api/effects?status=failed`) and retry (`POST /api/effects/{id}/retry`).
//!
//! Besides effects, [`Worker::reconcile`] pages `getStarTransactions` to apply Stars payments
//! whose update never reached us and to confirm refunds whose answer was lost.

use std::{
    collections::HashSet,
    sync::Mutex,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde::Serialize;

use super::{COLUMNS, Effect, Kind};
use crate::{
    error::ApiError,
    payments::core::{NormalizedPayment, TELEGRAM_STARS, apply_payment},
    state::AppState,
    telegram::bot_api::{BotApi, BotError, DEFAULT_TIMEOUT, StarTransaction},
};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Effects performed at once (each holds a database connection while it runs).
    pub concurrency: usize,
    /// Failed attempts before an effect is dead-lettered.
    pub max_attempts: i32,
    /// How long one Bot API call may take.
    pub call_timeout: Duration,
    /// The most effects one run performs.
    pub max_effects: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            concurrency: 4,
            max_attempts: 8,
            call_timeout: DEFAULT_TIMEOUT,
            max_effects: 1000,
        }
    }
}

/// First retry delay; each further attempt doubles it, up to [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_CAP: Duration = Duration::from_secs(3600);
/// Pages of 100 transactions one reconcile (or one refund check) reads at most.
const MAX_PAGES: usize = 50;
const PAGE: i64 = 100;

/// The delay before attempt `attempts + 1`, with "equal jitter": half fixed, half random, so
/// retries of effects that failed together spread out.
pub fn backoff(attempts: i32) -> Duration {
    let exp = attempts.clamp(1, 20) as u32 - 1;
    let full = BACKOFF_BASE
        .saturating_mul(1u32 << exp.min(16))
        .min(BACKOFF_CAP);
    let half = full / 2;
    half + half.mul_f64(rand::random::<f64>())
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// Effects performed and recorded done (skipped ones included).
    pub done: u64,
    /// Rescheduled after a transient failure.
    pub retried: u64,
    /// Rescheduled at Telegram's `retry_after`.
    pub rate_limited: u64,
    /// Dead-lettered now.
    pub failed: u64,
    /// Attempts whose result could not be recorded (or claims that failed): database errors.
    /// The effects stay due and run again.
    pub unrecorded: u64,
    /// Reminders and refunds enqueued by this run's scans.
    pub enqueued: u64,
}

/// What one reconcile did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// Transactions read.
    pub transactions: u64,
    /// Incoming Stars payments we had not recorded, now passed through `apply_payment`.
    pub payments_recovered: u64,
    /// `refund_pending` payments confirmed refunded.
    pub refunds_confirmed: u64,
}

/// Runs once with default options: scans for reminders and refunds, then performs every due
/// effect. With neither a bot token nor dry-run, does nothing (effects stay queued).
pub async fn run_once(state: &AppState) -> Result<RunReport, ApiError> {
    Worker::new(state.clone(), Options::default())
        .run(true, &|| false)
        .await
}

/// Reconciles Stars transactions once with default options (see [`Worker::reconcile`]).
pub async fn reconcile(state: &AppState) -> Result<ReconcileReport, ApiError> {
    Worker::new(state.clone(), Options::default())
        .reconcile()
        .await
}

/// Why an effect was not done.
enum Failure {
    /// A database error: nothing is recorded, the effect stays due.
    Db(ApiError),
    /// Worth trying again later.
    Retry(String),
    /// Telegram asked to wait.
    RateLimited { secs: u64, error: String },
    /// Telegram refused for good: dead letter.
    Permanent(String),
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Failure {
        Failure::Db(e)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Failure {
        Failure::Db(e.into())
    }
}

impl From<BotError> for Failure {
    fn from(e: BotError) -> Failure {
        if let Some(secs) = e.retry_after() {
            return Failure::RateLimited {
                secs: secs.max(1),
                error: e.to_string(),
            };
        }
        match &e {
            // 401: the token is wrong; 404: the API URL is. Configuration, not this effect.
            BotError::Api { code, .. } if *code >= 500 || *code == 401 || *code == 404 => {
                Failure::Retry(e.to_string())
            }
            BotError::Api { .. } => Failure::Permanent(e.to_string()),
            _ => Failure::Retry(e.to_string()),
        }
    }
}

/// Done, with an optional note (why it was skipped, which harmless error counted as done).
type Performed = Result<Option<String>, Failure>;

/// The membership an effect is about, as it is now.
struct Live {
    status: String,
    expires_at: DateTime<Utc>,
    channel_id: i32,
    title: String,
    invite_link: Option<String>,
}

impl Live {
    fn is_member(&self) -> bool {
        self.status == "active" || self.status == "grace"
    }
}

/// A worker over the application's pool and configured bot.
pub struct Worker {
    state: AppState,
    bot: Option<BotApi>,
    options: Options,
}

impl Worker {
    /// A worker with the configured bot (`TELEGRAM_BOT_TOKEN`, `TELEGRAM_API_URL`,
    /// `TELEGRAM_DRY_RUN`); cheap, so one per run is fine.
    pub fn new(state: AppState, options: Options) -> Worker {
        let bot = BotApi::from_config(&state.config, options.call_timeout);
        Worker {
            state,
            bot,
            options,
        }
    }

    /// False without a bot token and without dry-run: effects then stay queued.
    pub fn is_enabled(&self) -> bool {
        self.bot.is_some()
    }

    /// One run: enqueue refunds of `refund_pending` payments and, with `scan`, due reminders;
    /// then perform due
    /// effects with [`Options::concurrency`] lanes until none is due, `max_effects` are done or
    /// `stop` says so (checked between effects). An effect is attempted at most once per run.
    pub async fn run(
        &self,
        scan: bool,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<RunReport, ApiError> {
        let Some(bot) = &self.bot else {
            return Ok(RunReport::default());
        };
        let mut first = RunReport::default();
        {
            let client = self.state.db.get().await?;
            // Cheap (an index range over refund_pending payments): every run.
            first.enqueued += super::enqueue_pending_refunds(&**client).await?;
            if scan {
                first.enqueued +=
                    super::enqueue_due_reminders(&**client, self.state.config.reminder_days)
                        .await?;
            }
        }
        let seen = Mutex::new(HashSet::new());
        let report = Mutex::new(first);
        let lanes =
            (0..self.options.concurrency.max(1)).map(|_| self.lane(bot, &seen, &report, stop));
        futures::future::join_all(lanes).await;
        Ok(report.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    async fn lane(
        &self,
        bot: &BotApi,
        seen: &Mutex<HashSet<i64>>,
        report: &Mutex<RunReport>,
        stop: &(dyn Fn() -> bool + Sync),
    ) {
        loop {
            {
                let r = report.lock().unwrap_or_else(|p| p.into_inner());
                let performed = r.done + r.retried + r.rate_limited + r.failed + r.unrecorded;
                if stop() || performed >= self.options.max_effects {
                    return;
                }
            }
            let result = self.claim_and_perform(bot, seen).await;
            let mut r = report.lock().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok(None) => return,
                Ok(Some(Recorded::Done)) => r.done += 1,
                Ok(Some(Recorded::Retry)) => r.retried += 1,
                Ok(Some(Recorded::RateLimited)) => r.rate_limited += 1,
                Ok(Some(Recorded::Failed)) => r.failed += 1,
                Err(e) => {
                    r.unrecorded += 1;
                    tracing::error!(error = %e, "effect result not recorded; it stays due and runs again");
                    // The database is likely unwell: this lane stops, the next run carries on.
                    return;
                }
            }
        }
    }

    /// Claims the next due effect not yet attempted in this run, performs it and records the
    /// result, all in one transaction holding the row lock. `Ok(None)`: nothing is due.
    async fn claim_and_perform(
        &self,
        bot: &BotApi,
        seen: &Mutex<HashSet<i64>>,
    ) -> Result<Option<Recorded>, ApiError> {
        let mut client = self.state.db.get().await?;
        let tx = client.transaction().await?;
        let exclude: Vec<i64> = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        let row = tx
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM effects
                     WHERE status = 'pending' AND next_attempt_at <= statement_timestamp()
                       AND NOT (id = ANY($1))
                     ORDER BY next_attempt_at, id
                     LIMIT 1
                     FOR UPDATE SKIP LOCKED"
                ),
                &[&exclude],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let effect = Effect::from_row(&row);
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(effect.id);
        let started = Instant::now();
        let performed = self.perform(&tx, bot, &effect).await;
        let recorded = record(&tx, &effect, performed, self.options.max_attempts).await?;
        tx.commit().await?;
        tracing::info!(
            effect_id = effect.id,
            kind = %effect.kind,
            result = ?recorded,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "effect attempted"
        );
        Ok(Some(recorded))
    }

    async fn perform(&self, tx: &Transaction<'_>, bot: &BotApi, e: &Effect) -> Performed {
        let Some(kind) = Kind::parse(&e.kind) else {
            return Err(Failure::Permanent(format!(
                "unknown effect kind {:?}",
                e.kind
            )));
        };
        match kind {
            Kind::Grant => self.grant(tx, bot, e).await,
            Kind::RenewalReceipt => self.receipt(tx, bot, e).await,
            Kind::Revoke => self.revoke(tx, bot, e).await,
            Kind::Reminder => self.notice(tx, bot, e, "active").await,
            Kind::GraceNotice => self.notice(tx, bot, e, "grace").await,
            Kind::Refund => self.refund(tx, bot, e).await,
            Kind::JoinApprove => self.join(tx, bot, e, true).await,
            Kind::JoinDecline => self.join(tx, bot, e, false).await,
        }
    }

    /// Unban (only if banned: a member inside stays inside), then the join link.
    async fn grant(&self, tx: &Transaction<'_>, bot: &BotApi, e: &Effect) -> Performed {
        let Some(m) = live(tx, e.membership_id).await? else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if !m.is_member() {
            return Ok(Some(format!("skipped: the membership is {} now", m.status)));
        }
        let chat = chat_of(e)?;
        bot.unban_chat_member(chat, e.user_id).await?;
        let link = match m.invite_link {
            Some(link) => link,
            None => self.channel_link(bot, m.channel_id, chat).await?,
        };
        let text = format!(
            "Payment received, thank you! Your access to «{}» is active until {}.\n\n\
             Join here: {link}\n\
             Tap the link and send a join request: it is approved automatically for members.",
            m.title,
            day(m.expires_at)
        );
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// The channel's join-request link: the stored one, or a new one stored for every later
    /// grant. Stored in its own short statement, not in the effect's transaction, so the
    /// channel row is never locked across a Bot API call (payments lock it for seat checks).
    /// Two grants racing here both create a link; the first stored wins and is used by both.
    async fn channel_link(
        &self,
        bot: &BotApi,
        channel_id: i32,
        chat: i64,
    ) -> Result<String, Failure> {
        let link = bot
            .create_join_request_link(chat, "subgate members")
            .await?;
        if bot.is_dry_run() {
            return Ok(link.invite_link);
        }
        let client = self.state.db.get().await.map_err(ApiError::from)?;
        let row = client
            .query_one(
                "WITH stored AS (
                     UPDATE channels SET invite_link = $2
                     WHERE id = $1 AND invite_link IS NULL
                     RETURNING invite_link
                 )
                 SELECT invite_link FROM stored
                 UNION ALL
                 SELECT invite_link FROM channels WHERE id = $1
                 LIMIT 1",
                &[&channel_id, &link.invite_link],
            )
            .await?;
        Ok(row.get::<_, Option<String>>(0).unwrap_or(link.invite_link))
    }

    async fn receipt(&self, tx: &Transaction<'_>, bot: &BotApi, e: &Effect) -> Performed {
        let Some(m) = live(tx, e.membership_id).await? else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if !m.is_member() {
            return Ok(Some(format!("skipped: the membership is {} now", m.status)));
        }
        let text = format!(
            "Payment received, thank you! Your access to «{}» now lasts until {}.",
            m.title,
            day(m.expires_at)
        );
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// Ban, then unban only if banned: out of the channel now, free to rejoin after paying.
    /// Skipped when the membership is live again (a renewal overtook the expiry).
    async fn revoke(&self, tx: &Transaction<'_>, bot: &BotApi, e: &Effect) -> Performed {
        if let Some(m) = live(tx, e.membership_id).await?
            && m.is_member()
        {
            return Ok(Some(format!(
                "skipped: the membership is {} again (renewed)",
                m.status
            )));
        }
        let chat = chat_of(e)?;
        match bot.ban_chat_member(chat, e.user_id).await {
            Ok(_) => {}
            // Never in the chat (or gone from Telegram): nothing to remove.
            Err(err)
                if err.mentions("PARTICIPANT_ID_INVALID") || err.mentions("user not found") =>
            {
                return Ok(Some(format!("nothing to remove: {err}")));
            }
            Err(err) => return Err(err.into()),
        }
        bot.unban_chat_member(chat, e.user_id).await?;
        Ok(None)
    }

    /// A reminder (`status` active) or grace notice (`status` grace): sent only while the
    /// membership is still in the state and term it was enqueued for.
    async fn notice(
        &self,
        tx: &Transaction<'_>,
        bot: &BotApi,
        e: &Effect,
        status: &str,
    ) -> Performed {
        let Some(m) = live(tx, e.membership_id).await? else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if m.status != status || e.payload_expires_at() != Some(m.expires_at) {
            return Ok(Some(
                "skipped: the membership changed since (renewed or ended)".into(),
            ));
        }
        let text = if status == "active" {
            format!(
                "Your access to «{}» ends on {}. Renew before then to keep it.",
                m.title,
                day(m.expires_at)
            )
        } else {
            format!(
                "Your access to «{}» expired on {}. You are in a short grace period: renew now to keep your place.",
                m.title,
                day(m.expires_at)
            )
        };
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// `refundStarPayment`. Success or `CHARGE_ALREADY_REFUNDED`: `refunded`. A timeout leaves
    /// the payment `refund_pending` and marks the effect to verify first next time: look for
    /// the refund in `getStarTransactions` before calling again. A definite refusal:
    /// `refund_failed` and a dead letter, for staff.
    async fn refund(&self, tx: &Transaction<'_>, bot: &BotApi, e: &Effect) -> Performed {
        let payment_id = e
            .payment_id
            .ok_or_else(|| Failure::Permanent("the payment was deleted".into()))?;
        let row = tx
            .query_opt(
                "SELECT outcome, external_id FROM payments WHERE id = $1",
                &[&payment_id],
            )
            .await?
            .ok_or_else(|| Failure::Permanent("the payment was deleted".into()))?;
        let (outcome, charge_id): (String, String) = (row.get(0), row.get(1));
        if outcome != "refund_pending" {
            return Ok(Some(format!("skipped: the payment is {outcome} already")));
        }
        if bot.is_dry_run() {
            return Ok(Some(
                "dry run: no refund made; the payment stays refund_pending".into(),
            ));
        }
        let verify = e.payload.get("verify").and_then(|v| v.as_bool()) == Some(true);
        if verify && find_refund(bot, &charge_id, e.user_id).await? {
            set_refund_outcome(tx, payment_id, "refunded").await?;
            return Ok(Some("refund confirmed in getStarTransactions".into()));
        }
        match bot.refund_star_payment(e.user_id, &charge_id).await {
            Ok(_) => {
                set_refund_outcome(tx, payment_id, "refunded").await?;
                Ok(None)
            }
            Err(err) if err.mentions("CHARGE_ALREADY_REFUNDED") => {
                set_refund_outcome(tx, payment_id, "refunded").await?;
                Ok(Some("Telegram: charge already refunded".into()))
            }
            Err(err @ BotError::Timeout { .. }) => {
                tx.execute(
                    "UPDATE effects SET payload = payload || '{\"verify\": true}' WHERE id = $1",
                    &[&e.id],
                )
                .await?;
                Err(Failure::Retry(format!(
                    "{err}; the next attempt first looks for the refund in getStarTransactions"
                )))
            }
            Err(err) => match Failure::from(err) {
                Failure::Permanent(msg) => {
                    set_refund_outcome(tx, payment_id, "refund_failed").await?;
                    Err(Failure::Permanent(msg))
                }
                other => Err(other),
            },
        }
    }

    /// Approve (re-checked: only a member still active or in grace is approved; otherwise the
    /// request is declined) or decline a join request. Telegram's "no such request" and
    /// "already a member" answers mean the goal holds: done.
    async fn join(
        &self,
        tx: &Transaction<'_>,
        bot: &BotApi,
        e: &Effect,
        approve: bool,
    ) -> Performed {
        let chat = chat_of(e)?;
        // Decided again now, by the door's rule: the membership may have ended meanwhile.
        let member = approve
            && crate::telegram::join_request_decision(&**tx, chat, e.user_id).await?
                == crate::telegram::JoinDecision::Approve;
        let (result, note) = if member {
            (bot.approve_join_request(chat, e.user_id).await, None)
        } else if approve {
            (
                bot.decline_join_request(chat, e.user_id).await,
                Some("declined: the membership ended before the approval was sent".to_string()),
            )
        } else {
            (bot.decline_join_request(chat, e.user_id).await, None)
        };
        match result {
            Ok(_) => Ok(note),
            Err(err)
                if err.mentions("HIDE_REQUESTER_MISSING")
                    || err.mentions("USER_ALREADY_PARTICIPANT") =>
            {
                Ok(Some(format!("already settled: {err}")))
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Pages `getStarTransactions`: applies every incoming Stars payment we never recorded
    /// through [`apply_payment`] (whose dedupe on (gateway, charge id) keeps it exactly once,
    /// even if the update arrives later too), and marks `refunded` every `refund_pending`
    /// payment whose refund — an outgoing transaction to its payer carrying its charge id —
    /// is listed. Telegram documents the list as chronological, so the run resumes where the
    /// last one ended (one page back, in case of late inserts); if the list turns out to be
    /// newest-first, the run reads from the start back to a day before the previous run.
    pub async fn reconcile(&self) -> Result<ReconcileReport, ApiError> {
        let mut report = ReconcileReport::default();
        let Some(bot) = &self.bot else {
            return Ok(report);
        };
        if bot.is_dry_run() {
            tracing::info!("dry run: Stars reconcile skipped");
            return Ok(report);
        }
        let unavailable = |e: BotError| ApiError::Unavailable(format!("Telegram: {e}"));
        let (stored_offset, last_run, now): (i64, Option<DateTime<Utc>>, DateTime<Utc>) = {
            let client = self.state.db.get().await?;
            let r = client
                .query_one(
                    "SELECT next_offset, last_run_at, statement_timestamp() FROM star_reconcile",
                    &[],
                )
                .await?;
            (r.get(0), r.get(1), r.get(2))
        };
        let mut seen: Vec<StarTransaction> = Vec::new();
        let mut offset = (stored_offset - PAGE).max(0);
        let mut newest_first = false;
        for page_no in 0..MAX_PAGES {
            let page = bot
                .get_star_transactions(offset, PAGE)
                .await
                .map_err(unavailable)?
                .transactions;
            if page_no == 0
                && let (Some(first), Some(last)) = (page.first(), page.last())
                && first.date > last.date
            {
                newest_first = true;
                break;
            }
            let n = page.len() as i64;
            seen.extend(page);
            offset += n;
            if n < PAGE {
                break;
            }
        }
        let next_offset = if newest_first {
            seen.clear();
            let horizon = last_run.map(|t| t.timestamp() - 86_400);
            let mut offset = 0;
            for _ in 0..MAX_PAGES {
                let page = bot
                    .get_star_transactions(offset, PAGE)
                    .await
                    .map_err(unavailable)?
                    .transactions;
                let n = page.len() as i64;
                let oldest = page.iter().map(|t| t.date).min();
                seen.extend(page);
                offset += n;
                if n < PAGE || matches!((horizon, oldest), (Some(h), Some(o)) if o < h) {
                    break;
                }
            }
            0
        } else {
            offset
        };
        report.transactions = seen.len() as u64;

        // Refunds first: a refunded payment must not be mistaken for a missing one later.
        let (refund_ids, refund_users): (Vec<String>, Vec<String>) = seen
            .iter()
            .filter_map(|t| t.refunded_user().map(|u| (t.id.clone(), u.to_string())))
            .unzip();
        let client = self.state.db.get().await?;
        if !refund_ids.is_empty() {
            report.refunds_confirmed = client
                .execute(
                    "UPDATE payments p SET outcome = 'refunded', updated_at = statement_timestamp()
                     FROM unnest($1::text[], $2::text[]) AS r(id, payer)
                     WHERE p.gateway = 'telegram_stars' AND p.external_id = r.id
                       AND p.outcome = 'refund_pending'
                       AND (p.payer = r.payer OR (p.payer IS NULL AND EXISTS (
                           SELECT 1 FROM subscribers s
                           WHERE s.id = p.subscriber_id AND s.telegram_user_id::text = r.payer)))",
                    &[&refund_ids, &refund_users],
                )
                .await?;
        }

        let incoming: Vec<(&StarTransaction, i64, &str)> = seen
            .iter()
            .filter_map(|t| t.incoming_user_payment().map(|(u, p)| (t, u, p)))
            .collect();
        let ids: Vec<&str> = incoming.iter().map(|(t, _, _)| t.id.as_str()).collect();
        let known: HashSet<String> = client
            .query(
                "SELECT external_id FROM payments
                 WHERE gateway = 'telegram_stars' AND external_id = ANY($1)",
                &[&ids],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        drop(client);
        for (t, user, payload) in incoming {
            if known.contains(&t.id) {
                continue;
            }
            let payment = NormalizedPayment {
                gateway: TELEGRAM_STARS.to_string(),
                external_id: t.id.clone(),
                order_reference: payload.to_string(),
                amount_minor: t.amount,
                currency: "XTR".to_string(),
                paid_at: DateTime::from_timestamp(t.date, 0).unwrap_or(now),
                payer_telegram_id: Some(user),
            };
            match apply_payment(&self.state.db, payment).await {
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
                    tracing::error!(charge_id = %t.id, error = %e, "missed Stars payment could not be applied");
                }
            }
        }
        let client = self.state.db.get().await?;
        client
            .execute(
                "UPDATE star_reconcile SET next_offset = $1, last_run_at = $2",
                &[&next_offset, &now],
            )
            .await?;
        tracing::info!(
            transactions = report.transactions,
            payments_recovered = report.payments_recovered,
            refunds_confirmed = report.refunds_confirmed,
            "Stars transactions reconciled"
        );
        Ok(report)
    }
}

/// How an attempt was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recorded {
    Done,
    Retry,
    RateLimited,
    Failed,
}

/// Records an attempt in the claiming transaction. A database failure during the attempt
/// records nothing (the caller rolls back; the effect runs again).
async fn record(
    tx: &Transaction<'_>,
    e: &Effect,
    performed: Performed,
    max_attempts: i32,
) -> Result<Recorded, ApiError> {
    match performed {
        Ok(note) => {
            tx.execute(
                "UPDATE effects SET status = 'done', attempts = attempts + 1,
                     done_at = statement_timestamp(), updated_at = statement_timestamp(),
                     payload = CASE WHEN $2::text IS NULL THEN payload
                                    ELSE payload || jsonb_build_object('note', $2::text) END
                 WHERE id = $1",
                &[&e.id, &note],
            )
            .await?;
            Ok(Recorded::Done)
        }
        Err(Failure::Db(err)) => Err(err),
        Err(Failure::RateLimited { secs, error }) => {
            // Telegram's pace, not the effect's fault: not an attempt. A little jitter on top,
            // so effects told to wait together do not all come back in the same instant.
            let delay = secs as f64 + rand::random::<f64>();
            tx.execute(
                "UPDATE effects SET next_attempt_at = statement_timestamp() + make_interval(secs => $2),
                     last_error = $3, updated_at = statement_timestamp()
                 WHERE id = $1",
                &[&e.id, &delay, &error],
            )
            .await?;
            tracing::info!(effect_id = e.id, kind = %e.kind, error = %error, "effect rate-limited; rescheduled");
            Ok(Recorded::RateLimited)
        }
        Err(Failure::Retry(error)) if e.attempts + 1 < max_attempts => {
            let delay = backoff(e.attempts + 1).as_secs_f64();
            tx.execute(
                "UPDATE effects SET attempts = attempts + 1, last_error = $3,
                     next_attempt_at = statement_timestamp() + make_interval(secs => $2),
                     updated_at = statement_timestamp()
                 WHERE id = $1",
                &[&e.id, &delay, &error],
            )
            .await?;
            tracing::warn!(effect_id = e.id, kind = %e.kind, attempts = e.attempts + 1, error = %error, "effect failed; retrying later");
            Ok(Recorded::Retry)
        }
        Err(Failure::Retry(error) | Failure::Permanent(error)) => {
            tx.execute(
                "UPDATE effects SET status = 'failed', attempts = attempts + 1, last_error = $2,
                     updated_at = statement_timestamp()
                 WHERE id = $1",
                &[&e.id, &error],
            )
            .await?;
            tracing::warn!(effect_id = e.id, kind = %e.kind, error = %error, "effect dead-lettered");
            Ok(Recorded::Failed)
        }
    }
}

fn chat_of(e: &Effect) -> Result<i64, Failure> {
    e.chat_id
        .ok_or_else(|| Failure::Permanent("the effect names no chat".into()))
}

/// The membership as it is now, with its channel's title and join link.
async fn live(tx: &Transaction<'_>, membership_id: Option<i64>) -> Result<Option<Live>, ApiError> {
    let Some(id) = membership_id else {
        return Ok(None);
    };
    let row = tx
        .query_opt(
            "SELECT m.status, m.expires_at, c.id, c.title, c.invite_link
             FROM memberships m JOIN channels c ON c.id = m.channel_id
             WHERE m.id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| Live {
        status: r.get(0),
        expires_at: r.get(1),
        channel_id: r.get(2),
        title: r.get(3),
        invite_link: r.get(4),
    }))
}

async fn set_refund_outcome(
    tx: &Transaction<'_>,
    payment_id: i64,
    outcome: &str,
) -> Result<(), ApiError> {
    tx.execute(
        "UPDATE payments SET outcome = $2, updated_at = statement_timestamp()
         WHERE id = $1 AND outcome = 'refund_pending'",
        &[&payment_id, &outcome],
    )
    .await?;
    Ok(())
}

/// Looks for the refund of `charge_id` to `user_id` in the bot's Stars transactions.
async fn find_refund(bot: &BotApi, charge_id: &str, user_id: i64) -> Result<bool, Failure> {
    let mut offset = 0;
    for _ in 0..MAX_PAGES {
        let page = bot.get_star_transactions(offset, PAGE).await?.transactions;
        if page.iter().any(|t| t.is_refund_of(charge_id, user_id)) {
            return Ok(true);
        }
        if (page.len() as i64) < PAGE {
            break;
        }
        offset += page.len() as i64;
    }
    Ok(false)
}

/// A time as members read it.
fn day(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_is_capped() {
        for attempts in 1..=30 {
            let full = BACKOFF_BASE
                .saturating_mul(1u32 << (attempts.min(17) as u32 - 1).min(16))
                .min(BACKOFF_CAP);
            for _ in 0..50 {
                let d = backoff(attempts);
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempts}: {d:?} vs {full:?}"
                );
            }
        }
        assert!(backoff(1) <= Duration::from_secs(10));
        assert!(backoff(30) <= BACKOFF_CAP);
        assert!(backoff(30) >= BACKOFF_CAP / 2);
    }

    #[test]
    fn bot_errors_are_classified() {
        let api = |code, description: &str, retry_after| BotError::Api {
            method: "m".into(),
            code,
            description: description.into(),
            retry_after,
        };
        assert!(matches!(
            Failure::from(api(429, "Too Many Requests", Some(7))),
            Failure::RateLimited { secs: 7, .. }
        ));
        assert!(matches!(
            Failure::from(api(500, "Internal", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(502, "Bad Gateway", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(401, "Unauthorized", None)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(api(400, "Bad Request: chat not found", None)),
            Failure::Permanent(_)
        ));
        assert!(matches!(
            Failure::from(api(403, "Forbidden: bot was blocked by the user", None)),
            Failure::Permanent(_)
        ));
        assert!(matches!(
            Failure::from(BotError::Timeout {
                method: "m".into(),
                secs: 10
            }),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(BotError::Paused {
                method: "m".into(),
                retry_after: 3
            }),
            Failure::RateLimited { secs: 3, .. }
        ));
    }
}
