//! The effects worker: claims due effects with a lease, performs them on Telegram holding no
//! transaction and no database connection, and records the result.
//!
//! **Lease.** A claim is its own short transaction: it picks a due effect nobody holds
//! (`FOR UPDATE SKIP LOCKED`), sets `lease_until` to now + [`Options::lease`], increments
//! `lease_token` and commits. The reads the effect needs — the membership as it is now, the
//! payment's outcome, the join decision — are made next on the same connection, which goes back
//! to the pool before the first Bot API call. Telegram is then called with nothing held, so a
//! slow or hanging Bot API never keeps a row lock, a transaction or a pool connection: staff
//! edits and payments never wait for Telegram, and lanes cannot starve the pool. The result is
//! recorded in a new short transaction, and only while the effect still carries this claim's
//! token: a worker whose lease ran out and was claimed again records nothing (`superseded`). An
//! attempt is cut off before its lease ends; a lease left behind (a worker that died) expires
//! and the effect is claimed again — which is safe because every effect is harmless when
//! repeated. A database error while recording gives the lease back, so the effect is due again.
//!
//! **Ordering.** The effects of one chat member (`chat_id`, `user_id`) are performed one at a
//! time, in creation (`id`) order: an effect is claimed only when no earlier effect of that
//! member is `pending` and no pending effect of that member is leased. The claim re-checks this
//! under a per-member advisory lock, so two claims racing for one member decide one after the
//! other. A revoke is thus never overtaken by a later grant of the same member (nor the other
//! way round), and a revoke whose membership is live again when it is performed is skipped.
//! Refunds name no chat and are not ordered. Dead letters (`failed`) hold nothing back.
//!
//! **Results.** Done; a transient failure (timeout, transport, 5xx, a 401/404 that means our
//! configuration is wrong) is retried with capped exponential backoff and jitter for
//! [`Options::retry_horizon`] (72 hours) counted from the effect's first failure — not a number
//! of attempts, so a Telegram outage of hours dead-letters nothing — and only then dead-lettered
//! (`failed`); Telegram's 429 reschedules at `retry_after` without counting as a failure; any
//! other refusal (4xx) is definite: `failed` at once, for staff to read
//! (`GET /api/effects?status=failed`) and retry (`POST /api/effects/{id}/retry`, or
//! `POST /api/effects/retry` for every dead letter matching a filter). A refund that is
//! dead-lettered leaves its payment `refund_failed`; sending it back makes it `refund_pending`.
//!
//! Besides effects, [`Worker::reconcile`] pages `getStarTransactions` to apply Stars payments
//! whose update never reached us, to keep charges refunded outside subgate as `refunded` without
//! granting anything, and to confirm refunds whose answer was lost.

use std::{
    collections::HashSet,
    sync::Mutex,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use serde::Serialize;
use tokio_postgres::GenericClient;

use super::{COLUMNS, Effect, Kind};
use crate::{
    bot::texts,
    error::ApiError,
    payments::{
        core::{NormalizedPayment, TELEGRAM_STARS, apply_payment},
        seats,
    },
    state::AppState,
    telegram::{
        JoinDecision,
        bot_api::{BotApi, BotError, DEFAULT_TIMEOUT, StarTransaction},
    },
};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Effects performed at once (lanes). A lane holds a database connection only while it
    /// claims, reads and records, never during Bot API calls.
    pub concurrency: usize,
    /// How long transient failures are retried, counted from an effect's first failure, before
    /// it is dead-lettered.
    pub retry_horizon: Duration,
    /// How long one Bot API call may take.
    pub call_timeout: Duration,
    /// The most effects one run performs.
    pub max_effects: u64,
    /// How long a claim lasts; an attempt is cut off before its lease ends.
    pub lease: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            concurrency: 4,
            retry_horizon: RETRY_HORIZON,
            call_timeout: DEFAULT_TIMEOUT,
            max_effects: 1000,
            lease: LEASE,
        }
    }
}

/// Transient failures are retried for this long after an effect's first failure.
pub const RETRY_HORIZON: Duration = Duration::from_secs(72 * 3600);
/// The default lease of a claim: far longer than an attempt takes (a few calls of at most
/// [`DEFAULT_TIMEOUT`] each), short enough that an effect left by a dead worker is soon retried.
pub const LEASE: Duration = Duration::from_secs(300);
/// First retry delay; each further attempt doubles it, up to [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_CAP: Duration = Duration::from_secs(3600);
/// Pages of 100 transactions one reconcile reads at most; also the most `getStarTransactions`
/// calls one refund check makes.
const MAX_PAGES: usize = 50;
const PAGE: i64 = 100;
/// How much earlier than its effect's creation a refund may be dated (clocks differ).
const CLOCK_SKEW_SECS: i64 = 3600;
/// The `reason` of a Stars charge that was refunded outside subgate before it was recorded.
const REFUNDED_ELSEWHERE: &str = "refunded_elsewhere";

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
    /// The effects are given back (or their lease runs out) and run again.
    pub unrecorded: u64,
    /// Attempts whose lease had run out and been claimed again by another worker: the newer
    /// claim records the result, this one recorded nothing.
    pub superseded: u64,
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
    /// Incoming Stars payments we had not recorded whose refund is listed too (refunded outside
    /// subgate): kept as `refunded` payments, granting nothing.
    pub refunded_elsewhere: u64,
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
    /// A database error: nothing is recorded, the effect runs again.
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

impl From<super::bot::BotFailure> for Failure {
    fn from(e: super::bot::BotFailure) -> Failure {
        match e {
            super::bot::BotFailure::Db(e) => Failure::Db(e),
            super::bot::BotFailure::Bot(e) => Failure::from(e),
            super::bot::BotFailure::Permanent(why) => Failure::Permanent(why),
        }
    }
}

/// Done, with an optional note (why it was skipped, which harmless error counted as done).
type Performed = Result<Option<String>, Failure>;

/// One attempt's result and the writes it asks the record step to make, under the claim.
struct Attempt {
    result: Performed,
    /// The refund of this payment is made (or confirmed): `refund_pending` → `refunded`.
    refunded: Option<i64>,
    /// The refund call's outcome is unknown: look for it before calling again.
    verify: bool,
}

impl From<Performed> for Attempt {
    fn from(result: Performed) -> Attempt {
        Attempt {
            result,
            refunded: None,
            verify: false,
        }
    }
}

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

/// A committed claim: the effect and the token its result must be recorded under.
struct Claimed {
    effect: Effect,
    token: i64,
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
    /// then perform due effects with [`Options::concurrency`] lanes until none is due,
    /// `max_effects` are done or `stop` says so (checked between effects). An effect is
    /// attempted at most once per run.
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
                let performed =
                    r.done + r.retried + r.rate_limited + r.failed + r.unrecorded + r.superseded;
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
                Ok(Some(Recorded::Superseded)) => r.superseded += 1,
                Err(e) => {
                    r.unrecorded += 1;
                    tracing::error!(error = %e, "effect result not recorded; it runs again");
                    // The database is likely unwell: this lane stops, the next run carries on.
                    return;
                }
            }
        }
    }

    /// Claims the next due effect not yet attempted in this run, performs it and records the
    /// result (see the module doc). `Ok(None)`: nothing is due.
    async fn claim_and_perform(
        &self,
        bot: &BotApi,
        seen: &Mutex<HashSet<i64>>,
    ) -> Result<Option<Recorded>, ApiError> {
        let started = Instant::now();
        // The attempt ends before the lease does: its clock starts before the claim commits.
        let deadline = tokio::time::Instant::now() + self.options.lease.mul_f64(0.9);
        let mut client = self.state.db.get().await?;
        let exclude: Vec<i64> = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        let Some(Claimed { effect, token }) =
            claim(&mut client, &exclude, self.options.lease).await?
        else {
            return Ok(None);
        };
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(effect.id);
        let attempt = tokio::time::timeout_at(deadline, self.perform(client, bot, &effect))
            .await
            .unwrap_or_else(|_| {
                Attempt::from(Err(Failure::Retry(format!(
                    "the attempt took longer than its lease ({} s) allows; abandoned",
                    self.options.lease.as_secs()
                ))))
            });
        let recorded = match record(&self.state, &effect, token, attempt, &self.options).await {
            Ok(recorded) => recorded,
            Err(e) => {
                release(&self.state, effect.id, token).await;
                return Err(e);
            }
        };
        tracing::info!(
            effect_id = effect.id,
            kind = %effect.kind,
            result = ?recorded,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "effect attempted"
        );
        Ok(Some(recorded))
    }

    /// Reads what the effect needs on `client`, returns the connection to the pool, then makes
    /// the Bot API calls.
    async fn perform(&self, client: Object, bot: &BotApi, e: &Effect) -> Attempt {
        let Some(kind) = Kind::parse(&e.kind) else {
            return Attempt::from(Err(Failure::Permanent(format!(
                "unknown effect kind {:?}",
                e.kind
            ))));
        };
        match kind {
            Kind::Refund => self.refund(client, bot, e).await,
            Kind::BotMessage | Kind::Invoice | Kind::SubscriptionCancel => {
                let performed = super::bot::perform(&self.state, client, bot, e, kind).await;
                Attempt::from(performed.map_err(Failure::from))
            }
            Kind::JoinApprove | Kind::JoinDecline => {
                let Some(chat) = e.chat_id else {
                    return Attempt::from(Err(no_chat()));
                };
                // Decided now, by the door's rule: the user may have paid, or their
                // membership ended, since the request was answered.
                let decision =
                    crate::telegram::join_request_decision(&**client, chat, e.user_id).await;
                drop(client);
                match decision {
                    Ok(d) => self.join(bot, e, chat, kind, d).await.into(),
                    Err(err) => Attempt::from(Err(Failure::Db(err))),
                }
            }
            _ => {
                // A revoke of a deleted membership names no membership: what counts then is
                // whether the member has a live membership of that chat again (a new grant
                // after the delete), which must not be undone.
                let m = match (kind, e.membership_id, e.chat_id) {
                    (Kind::Revoke, None, Some(chat)) => {
                        live_in_chat(&**client, chat, e.user_id).await
                    }
                    _ => live(&**client, e.membership_id).await,
                };
                drop(client);
                let m = match m {
                    Ok(m) => m,
                    Err(err) => return Attempt::from(Err(Failure::Db(err))),
                };
                let performed = match kind {
                    Kind::Grant => self.grant(bot, e, m).await,
                    Kind::RenewalReceipt => self.receipt(bot, e, m).await,
                    Kind::Revoke => self.revoke(bot, e, m).await,
                    Kind::Reminder => self.notice(bot, e, m, "active").await,
                    _ => self.notice(bot, e, m, "grace").await,
                };
                performed.into()
            }
        }
    }

    /// Unban (only if banned: a member inside stays inside), then the join link.
    async fn grant(&self, bot: &BotApi, e: &Effect, m: Option<Live>) -> Performed {
        let Some(m) = m else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if !m.is_member() {
            return Ok(Some(format!("skipped: the membership is {} now", m.status)));
        }
        let chat = e.chat_id.ok_or_else(no_chat)?;
        bot.unban_chat_member(chat, e.user_id).await?;
        let link = match m.invite_link {
            Some(link) => link,
            None => self.channel_link(bot, m.channel_id, chat).await?,
        };
        let text = texts::grant(&m.title, &texts::day(m.expires_at), &link);
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// The channel's join-request link: the stored one, or a new one stored for every later
    /// grant, in one short statement on a connection taken after the call (none is held
    /// during it). Two grants racing here both create a link; the first stored wins and is
    /// used by both.
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
        // Stored only while the channel is still in that chat: a link must never outlive a
        // change of the channel's chat.
        let row = client
            .query_opt(
                "WITH stored AS (
                     UPDATE channels SET invite_link = $2
                     WHERE id = $1 AND invite_link IS NULL AND telegram_chat_id = $3
                     RETURNING invite_link
                 )
                 SELECT invite_link FROM stored
                 UNION ALL
                 SELECT invite_link FROM channels WHERE id = $1 AND telegram_chat_id = $3
                 LIMIT 1",
                &[&channel_id, &link.invite_link, &chat],
            )
            .await?;
        Ok(row
            .and_then(|r| r.get::<_, Option<String>>(0))
            .unwrap_or(link.invite_link))
    }

    async fn receipt(&self, bot: &BotApi, e: &Effect, m: Option<Live>) -> Performed {
        let Some(m) = m else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if !m.is_member() {
            return Ok(Some(format!("skipped: the membership is {} now", m.status)));
        }
        let text = texts::renewal_receipt(&m.title, &texts::day(m.expires_at));
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// Ban, then unban only if banned: out of the channel now, free to rejoin after paying.
    /// Skipped when the membership is live again (a renewal overtook the expiry).
    async fn revoke(&self, bot: &BotApi, e: &Effect, m: Option<Live>) -> Performed {
        if let Some(m) = m
            && m.is_member()
        {
            return Ok(Some(format!(
                "skipped: the membership is {} again (renewed)",
                m.status
            )));
        }
        let chat = e.chat_id.ok_or_else(no_chat)?;
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
    async fn notice(&self, bot: &BotApi, e: &Effect, m: Option<Live>, status: &str) -> Performed {
        let Some(m) = m else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if m.status != status || e.payload_expires_at() != Some(m.expires_at) {
            return Ok(Some(
                "skipped: the membership changed since (renewed or ended)".into(),
            ));
        }
        let text = if status == "active" {
            texts::reminder(&m.title, &texts::day(m.expires_at))
        } else {
            texts::grace_notice(&m.title, &texts::day(m.expires_at))
        };
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// `refundStarPayment`, while the payment is `refund_pending`. Success or
    /// `CHARGE_ALREADY_REFUNDED`: `refunded`. A timeout leaves the payment `refund_pending` and
    /// marks the effect to verify first next time: look for the refund in
    /// `getStarTransactions` ([`find_refund`]) before calling again. A definite refusal: a dead
    /// letter, and the record step makes the payment `refund_failed`, for staff.
    async fn refund(&self, client: Object, bot: &BotApi, e: &Effect) -> Attempt {
        let Some(payment_id) = e.payment_id else {
            return Attempt::from(Err(Failure::Permanent("the payment was deleted".into())));
        };
        let verify = e.payload.get("verify").and_then(|v| v.as_bool()) == Some(true);
        let facts = async {
            let payment = client
                .query_opt(
                    "SELECT outcome, external_id FROM payments WHERE id = $1",
                    &[&payment_id],
                )
                .await?
                .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)));
            let cursor: i64 = if verify {
                client
                    .query_one("SELECT next_offset FROM star_reconcile", &[])
                    .await?
                    .get(0)
            } else {
                0
            };
            Ok::<_, tokio_postgres::Error>((payment, cursor))
        }
        .await;
        drop(client);
        let (payment, cursor) = match facts {
            Ok(f) => f,
            Err(err) => return Attempt::from(Err(Failure::from(err))),
        };
        let Some((outcome, charge_id)) = payment else {
            return Attempt::from(Err(Failure::Permanent("the payment was deleted".into())));
        };
        if outcome != "refund_pending" {
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
            },
            Err(err) => Attempt {
                result: Err(err.into()),
                refunded: None,
                verify,
            },
        }
    }

    /// Answers a join request by the decision made now, whatever was decided when it arrived:
    /// a member (active or grace, inside term plus grace) is approved, anyone else declined.
    /// Telegram's "no such request" and "already a member" answers mean the goal holds: done.
    async fn join(
        &self,
        bot: &BotApi,
        e: &Effect,
        chat: i64,
        kind: Kind,
        decision: JoinDecision,
    ) -> Performed {
        let approve = decision == JoinDecision::Approve;
        let note = match (kind, approve) {
            (Kind::JoinApprove, false) => {
                Some("declined: the membership ended before the approval was sent".to_string())
            }
            (Kind::JoinDecline, true) => {
                Some("approved: the user became a member before the decline was sent".to_string())
            }
            _ => None,
        };
        let result = if approve {
            bot.approve_join_request(chat, e.user_id).await
        } else {
            bot.decline_join_request(chat, e.user_id).await
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
    /// is listed. An unrecorded payment whose refund is listed too was refunded outside
    /// subgate (another tool, or an update we missed): it is kept as a `refunded` payment
    /// (reason `refunded_elsewhere`) and grants nothing. Telegram documents the list as
    /// chronological, so the run resumes where the last one ended (one page back, in case of
    /// late inserts); if the list turns out to be newest-first, the run reads from the start
    /// back to a day before the previous run.
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
            if page_no == 0 && is_newest_first(&page) {
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
                gateway: TELEGRAM_STARS.to_string(),
                external_id: t.id.clone(),
                order_reference: payload.to_string(),
                amount_minor: t.amount,
                currency: "XTR".to_string(),
                paid_at: DateTime::from_timestamp(t.date, 0).unwrap_or(now),
                payer_telegram_id: Some(user),
            };
            if refunded.contains(&(t.id.as_str(), user)) {
                match record_refunded_elsewhere(&self.state, &payment).await {
                    Ok(Some(id)) => {
                        report.refunded_elsewhere += 1;
                        tracing::warn!(
                            payment_id = id,
                            charge_id = %t.id,
                            "Stars payment refunded outside subgate recorded as refunded; no access granted"
                        );
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!(charge_id = %t.id, error = %e, "refunded Stars payment could not be recorded");
                    }
                }
                continue;
            }
            match apply_payment(&self.state, payment).await {
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
            refunded_elsewhere = report.refunded_elsewhere,
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
    /// The lease had been claimed again: nothing recorded.
    Superseded,
}

/// The test of a claim's ordering rule for effect `$1` of member (`$2`, `$3`): no other pending
/// effect of the member is earlier, and none is leased.
const FIRST_OF_MEMBER: &str = "NOT EXISTS (
    SELECT 1 FROM effects b
    WHERE b.chat_id = $2 AND b.user_id = $3 AND b.status = 'pending' AND b.id <> $1
      AND (b.id < $1 OR b.lease_until > statement_timestamp()))";

/// Claims the next due effect (see the module doc): the first due one, by due time then id,
/// that is not leased, not in `exclude`, and the first pending effect of its chat member with
/// none of that member's effects leased. For an effect naming a chat, the rule is checked
/// again in a fresh statement under the member's advisory lock — held until the claim commits
/// — so of two claims racing for one member, the second sees the first's lease; a candidate
/// that fails the check is passed over. Commits the lease and a new token.
async fn claim(
    client: &mut Object,
    exclude: &[i64],
    lease: Duration,
) -> Result<Option<Claimed>, ApiError> {
    let mut passed = exclude.to_vec();
    loop {
        let tx = client.transaction().await?;
        let candidate = tx
            .query_opt(
                "SELECT id, chat_id, user_id FROM effects e
                 WHERE status = 'pending' AND next_attempt_at <= statement_timestamp()
                   AND (lease_until IS NULL OR lease_until <= statement_timestamp())
                   AND NOT (id = ANY($1))
                   AND NOT EXISTS (
                       SELECT 1 FROM effects b
                       WHERE b.chat_id = e.chat_id AND b.user_id = e.user_id
                         AND b.status = 'pending' AND b.id <> e.id
                         AND (b.id < e.id OR b.lease_until > statement_timestamp()))
                 ORDER BY next_attempt_at, id
                 LIMIT 1
                 FOR UPDATE SKIP LOCKED",
                &[&passed],
            )
            .await?;
        let Some(candidate) = candidate else {
            tx.rollback().await?;
            return Ok(None);
        };
        let (id, chat, user): (i64, Option<i64>, i64) =
            (candidate.get(0), candidate.get(1), candidate.get(2));
        if let Some(chat) = chat {
            tx.execute(
                "SELECT pg_advisory_xact_lock(
                     hashtextextended('subgate effects ' || $1::bigint || ':' || $2::bigint, 0))",
                &[&chat, &user],
            )
            .await?;
            let first: bool = tx
                .query_one(&format!("SELECT {FIRST_OF_MEMBER}"), &[&id, &chat, &user])
                .await?
                .get(0);
            if !first {
                tx.rollback().await?;
                passed.push(id);
                continue;
            }
        }
        let row = tx
            .query_one(
                &format!(
                    "UPDATE effects SET lease_until = statement_timestamp() + make_interval(secs => $2),
                         lease_token = lease_token + 1
                     WHERE id = $1
                     RETURNING {COLUMNS}, lease_token"
                ),
                &[&id, &lease.as_secs_f64()],
            )
            .await?;
        tx.commit().await?;
        let token = row.get(row.len() - 1);
        return Ok(Some(Claimed {
            effect: Effect::from_row(&row),
            token,
        }));
    }
}

/// Records an attempt in a new short transaction, only while the effect still carries `token`
/// and is pending; otherwise nothing is written (`Superseded`). The payment writes of a refund
/// are made in the same transaction: `refunded` when the refund is made or confirmed,
/// `refund_failed` when its effect is dead-lettered (both only from `refund_pending`). A
/// database failure during the attempt records nothing and is returned.
async fn record(
    state: &AppState,
    e: &Effect,
    token: i64,
    attempt: Attempt,
    options: &Options,
) -> Result<Recorded, ApiError> {
    let Attempt {
        result,
        refunded,
        verify,
    } = attempt;
    let mut client = state.db.get().await?;
    let tx = client.transaction().await?;
    let (row, recorded, error) = match result {
        Err(Failure::Db(err)) => return Err(err),
        Ok(note) => {
            let row = tx
                .query_opt(
                    "UPDATE effects SET status = 'done', attempts = attempts + 1,
                         done_at = statement_timestamp(), updated_at = statement_timestamp(),
                         lease_until = NULL,
                         payload = CASE WHEN $2::text IS NULL THEN payload
                                        ELSE payload || jsonb_build_object('note', $2::text) END
                     WHERE id = $1 AND lease_token = $3 AND status = 'pending'
                     RETURNING status",
                    &[&e.id, &note, &token],
                )
                .await?;
            (row, Recorded::Done, None)
        }
        Err(Failure::RateLimited { secs, error }) => {
            // Telegram's pace, not the effect's fault: not a failure. A little jitter on top,
            // so effects told to wait together do not all come back in the same instant.
            let delay = secs as f64 + rand::random::<f64>();
            let row = tx
                .query_opt(
                    "UPDATE effects SET
                         next_attempt_at = statement_timestamp() + make_interval(secs => $2),
                         last_error = $3, lease_until = NULL, updated_at = statement_timestamp()
                     WHERE id = $1 AND lease_token = $4 AND status = 'pending'
                     RETURNING status",
                    &[&e.id, &delay, &error, &token],
                )
                .await?;
            (row, Recorded::RateLimited, Some(error))
        }
        Err(failure @ (Failure::Retry(_) | Failure::Permanent(_))) => {
            let (permanent, error) = match failure {
                Failure::Permanent(error) => (true, error),
                Failure::Retry(error) => (false, error),
                _ => unreachable!("matched above"),
            };
            // Dead-lettered when refused for good, or when the first failure is older than
            // the retry horizon; else rescheduled with backoff.
            let delay = backoff(e.attempts + 1).as_secs_f64();
            let horizon = options.retry_horizon.as_secs_f64();
            let row = tx
                .query_opt(
                    "UPDATE effects SET attempts = attempts + 1, last_error = $2,
                         first_failed_at = COALESCE(first_failed_at, statement_timestamp()),
                         status = CASE WHEN $3 OR COALESCE(first_failed_at, statement_timestamp())
                                                  <= statement_timestamp() - make_interval(secs => $4)
                                       THEN 'failed' ELSE 'pending' END,
                         next_attempt_at = statement_timestamp() + make_interval(secs => $5),
                         payload = CASE WHEN $6 THEN payload || '{\"verify\": true}'
                                        ELSE payload END,
                         lease_until = NULL, updated_at = statement_timestamp()
                     WHERE id = $1 AND lease_token = $7 AND status = 'pending'
                     RETURNING status",
                    &[&e.id, &error, &permanent, &horizon, &delay, &verify, &token],
                )
                .await?;
            (row, Recorded::Retry, Some(error))
        }
    };
    let Some(row) = row else {
        tx.rollback().await?;
        tracing::warn!(
            effect_id = e.id,
            kind = %e.kind,
            "effect attempted after its lease was claimed again; its result is not recorded"
        );
        return Ok(Recorded::Superseded);
    };
    let status: String = row.get(0);
    let recorded = if status == "failed" {
        Recorded::Failed
    } else {
        recorded
    };
    if let Some(payment_id) = refunded
        && recorded == Recorded::Done
    {
        set_refund_outcome(&tx, payment_id, "refunded").await?;
    }
    if recorded == Recorded::Failed
        && e.kind == Kind::Refund.as_str()
        && let Some(payment_id) = e.payment_id
    {
        set_refund_outcome(&tx, payment_id, "refund_failed").await?;
    }
    tx.commit().await?;
    let error = error.unwrap_or_default();
    match recorded {
        Recorded::RateLimited => {
            tracing::info!(effect_id = e.id, kind = %e.kind, error = %error, "effect rate-limited; rescheduled");
        }
        Recorded::Retry => {
            tracing::warn!(effect_id = e.id, kind = %e.kind, attempts = e.attempts + 1, error = %error, "effect failed; retrying later");
        }
        Recorded::Failed => {
            tracing::warn!(effect_id = e.id, kind = %e.kind, error = %error, "effect dead-lettered");
        }
        Recorded::Done | Recorded::Superseded => {}
    }
    Ok(recorded)
}

/// Gives a claim back after its result could not be recorded, so the effect is due again at
/// once rather than when its lease runs out. Best effort: the lease runs out anyway.
async fn release(state: &AppState, id: i64, token: i64) {
    let result = async {
        let client = state.db.get().await?;
        client
            .execute(
                "UPDATE effects SET lease_until = NULL
                 WHERE id = $1 AND lease_token = $2 AND status = 'pending'",
                &[&id, &token],
            )
            .await?;
        Ok::<_, ApiError>(())
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(effect_id = id, error = %e, "lease not given back; it runs out by itself");
    }
}

fn no_chat() -> Failure {
    Failure::Permanent("the effect names no chat".into())
}

/// The membership as it is now, with its channel's title and join link.
async fn live(
    client: &impl GenericClient,
    membership_id: Option<i64>,
) -> Result<Option<Live>, ApiError> {
    let Some(id) = membership_id else {
        return Ok(None);
    };
    let row = client
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

/// The membership of Telegram user `user_id` in the channel of chat `chat_id`, if any, as
/// [`live`] reads it.
async fn live_in_chat(
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
) -> Result<Option<Live>, ApiError> {
    let row = client
        .query_opt(
            "SELECT m.status, m.expires_at, c.id, c.title, c.invite_link
             FROM memberships m
             JOIN channels c ON c.id = m.channel_id
             JOIN subscribers s ON s.id = m.subscriber_id
             WHERE c.telegram_chat_id = $1 AND s.telegram_user_id = $2",
            &[&chat_id, &user_id],
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
    tx: &deadpool_postgres::Transaction<'_>,
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

/// Stores an unrecorded Stars charge whose refund is listed next to it as a `refunded` payment
/// (reason `refunded_elsewhere`): the money record is kept, nothing is granted, nothing is
/// refunded. Taken in the payment core's lock order (pair, order, seat-limited channel), so it
/// cannot deadlock with a late delivery of the same charge through `apply_payment`; whichever
/// stores the charge first wins the dedupe on (gateway, external id). Returns the new payment's
/// id, or `None` when the charge was stored meanwhile.
async fn record_refunded_elsewhere(
    state: &AppState,
    p: &NormalizedPayment,
) -> Result<Option<i64>, ApiError> {
    crate::transaction!(state.db, |tx| {
        let locked = seats::lock_order_by_reference(tx, &p.order_reference).await?;
        let order = locked.as_ref().map(|l| &l.order);
        let row = tx
            .query_opt(
                "INSERT INTO payments (gateway, external_id, order_reference, order_id,
                     subscriber_id, channel_id, payer, amount_minor, currency, paid_at,
                     outcome, reason)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
                         LEAST($10::timestamptz, statement_timestamp()), 'refunded', $11)
                 ON CONFLICT (gateway, external_id) DO NOTHING
                 RETURNING id",
                &[
                    &p.gateway,
                    &p.external_id,
                    &p.order_reference,
                    &order.map(|o| o.id),
                    &order.map(|o| o.subscriber_id),
                    &order.map(|o| o.channel_id),
                    &p.payer_telegram_id.map(|id| id.to_string()),
                    &p.amount_minor,
                    &p.currency,
                    &p.paid_at,
                    &REFUNDED_ELSEWHERE,
                ],
            )
            .await?;
        Ok(row.map(|r| r.get::<_, i64>(0)))
    })
}

/// True when a page of transactions is ordered newest first (Telegram documents oldest first).
fn is_newest_first(page: &[StarTransaction]) -> bool {
    matches!((page.first(), page.last()), (Some(first), Some(last)) if first.date > last.date)
}

/// What [`find_refund`] looks for, and where.
struct RefundSearch<'a> {
    charge_id: &'a str,
    user_id: i64,
    /// `star_reconcile.next_offset`: the reconcile has read the list up to here, confirming
    /// every refund of a `refund_pending` payment it saw.
    cursor: i64,
    /// Unix time before which the refund cannot have been made.
    since: i64,
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
async fn find_refund(bot: &BotApi, s: &RefundSearch<'_>) -> Result<bool, BotError> {
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
