//! The effects worker: claims due effects with a lease, performs them on Telegram holding no
//! transaction and no database connection, and records the result.
//!
//! **Lease.** A claim is its own short transaction: it picks a due effect nobody holds
//! (`FOR UPDATE SKIP LOCKED`), sets `lease_until` to now + [`Options::lease`] ([`LEASE`], 30 s),
//! increments `lease_token` and commits. The reads the effect needs — the membership as it is
//! now, the payment's outcome, the join decision — are made next on the same connection, which
//! goes back to the pool before the first Bot API call. Telegram is then called with nothing
//! held, so a slow or hanging Bot API never keeps a row lock, a transaction or a pool
//! connection: staff edits and payments never wait for Telegram, and lanes cannot starve the
//! pool. While the attempt runs, a heartbeat renews the lease every third of it (one short
//! statement, under the claim's token); a renewal that finds the claim superseded abandons the
//! attempt. An attempt is capped at [`ATTEMPT_CAP`]. The result is recorded in a new short
//! transaction, and only while the effect still carries this claim's token: a worker whose
//! claim was taken over records nothing (`superseded`). A worker that died (kill -9) renews
//! nothing, so its claim is taken over one lease later — safe, because every effect is harmless
//! when repeated. A database error while recording gives the lease back, so the effect is due
//! again.
//!
//! **Priority and wake-up.** A claim takes access effects ([`is_access`]) before every other
//! kind, then by due time and id, and their Bot API calls take the pacer's next slot before
//! waiting messages ([`Urgency`](crate::telegram_api::client::Urgency)): a buyer who paid is never
//! queued behind invoices, receipts or reminders. Inside `serve` the worker is woken when an
//! effect is committed ([`listen`]), and polls besides.
//!
//! **Ordering.** The access effects of one chat member (`chat_id`, `user_id`) — grant, revoke,
//! join approve and decline, unban ([`is_access`]) — are performed one at a time, in creation
//! (`id`) order: one is claimed only when no earlier access effect of that member is `pending`
//! and none of that member's pending access effects is leased. The claim re-checks this under a
//! per-member advisory lock, so two claims racing for one member decide one after the other. A
//! revoke is thus never overtaken by a later grant of the same member (nor the other way
//! round), and a revoke whose membership is live again when it is performed is skipped.
//! Messages (receipts, reminders, notices, bot messages, invoices) and subscription
//! cancellations are not ordered: a message backing off never holds back an access change, nor
//! the other way round. Refunds name no chat and are not ordered. Dead letters (`failed`) hold
//! nothing back.
//!
//! **Results.** Done; a transient failure (timeout, transport, 5xx, a 401/404 that means our
//! configuration is wrong) first asks whether Telegram answers at all: one `getMe` probe shared
//! by the lanes ([`health`]). If the probe fails too, it is an outage: the effect is put back due
//! at once without counting the failure (`attempts` and `first_failed_at` unchanged), the worker
//! claims nothing more and probes every [`PROBE_EVERY`] until Telegram answers, then the backlog
//! drains at the pacer's rate. If the probe answers, the failure is the effect's own: retried
//! with capped exponential backoff and jitter for [`Options::retry_horizon`] (72 hours) counted
//! from the effect's first failure, and only then dead-lettered (`failed`). Telegram's 429
//! reschedules at `retry_after` without counting as a failure. A chat-management call refused
//! because the bot lacks its admin rights marks the channel `no_rights` and pauses the effect
//! (pending, not counted); claims skip the access effects of such a chat until its status is
//! `ok` again. Any other refusal (4xx) is definite: `failed` at once, for staff to read
//! (`GET /api/effects?status=failed`) and retry (`POST /api/effects/{id}/retry`, or
//! `POST /api/effects/retry` for every dead letter matching a filter). A refund that is
//! dead-lettered leaves its payment `refund_failed`; sending it back makes it `refund_pending`.
//!
//! **Bans.** A grant unbans only a user subgate banned in the chat ([`bans`]: a revoke writes
//! its row before the ban and its record step removes it once the unban is done), so a fresh
//! grant is one `sendMessage`.
//!
//! A run is three named steps per effect — [`claim`], `perform` (the Bot API calls of each kind,
//! [`perform`]) and [`record`] — over lanes that share one report. The worker is
//! its own module, apart from the outbox it drains ([`crate::outbox::effects`]), because it reads
//! memberships, payments and Telegram decisions, all of which enqueue effects: kept apart, no
//! module both enqueues and performs. The Stars reconcile is payment recovery, not an effect:
//! [`crate::telegram::recovery`].

mod bans;
mod bot;
mod health;
pub mod listen;
mod perform;

pub use self::health::PROBE_EVERY;

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use deadpool_postgres::{Object, Transaction};
use serde::Serialize;

use self::{
    health::Health,
    perform::{Attempt, Failure},
};
use crate::{
    access::memberships,
    app::state::AppState,
    catalog::channels::{self, TelegramStatus},
    common::error::ApiError,
    db,
    outbox::effects::{self, Effect, Kind, Status, effect_columns},
    payments::{core::Outcome, refunds},
    telegram_api::client::{BotApi, DEFAULT_TIMEOUT},
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
    /// How long a claim lasts unless renewed: a live worker renews it every third of it while
    /// it performs the effect, so a dead worker's claim is taken over this long after it died.
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
/// The default lease of a claim, renewed every third of it while the attempt runs: an effect
/// left by a dead worker is claimed again within this (plus a poll).
pub const LEASE: Duration = Duration::from_secs(30);
/// The longest one attempt may take (a few calls of at most [`DEFAULT_TIMEOUT`] each, and the
/// pacer's waits); a longer one is abandoned and counted as a transient failure.
pub const ATTEMPT_CAP: Duration = Duration::from_secs(120);
/// First retry delay; each further attempt doubles it, up to [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_CAP: Duration = Duration::from_secs(3600);

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
    /// Put back while Telegram was unreachable (the probe failed too): due again at once, the
    /// failure not counted.
    pub outage: u64,
    /// Paused because the bot lacks its admin rights in the chat (the channel is marked
    /// `no_rights`): they wait, not counted, until the rights are back.
    pub paused: u64,
    /// Reminders and refunds enqueued by this run's scans, and effects it made of the sweep's
    /// queue.
    pub enqueued: u64,
}

impl RunReport {
    /// Effects attempted so far (whatever became of them).
    pub fn attempted(&self) -> u64 {
        self.done
            + self.retried
            + self.rate_limited
            + self.failed
            + self.unrecorded
            + self.superseded
            + self.outage
            + self.paused
    }

    /// Counts one attempt's result.
    fn count(&mut self, recorded: Recorded) {
        match recorded {
            Recorded::Done => self.done += 1,
            Recorded::Retry => self.retried += 1,
            Recorded::RateLimited => self.rate_limited += 1,
            Recorded::Failed => self.failed += 1,
            Recorded::Superseded => self.superseded += 1,
            Recorded::Outage => self.outage += 1,
            Recorded::Paused => self.paused += 1,
        }
    }
}

/// Runs once with default options: scans for reminders and refunds, then performs every due
/// effect. With neither a bot token nor dry-run, does nothing (effects stay queued).
pub async fn run_once(state: &AppState) -> Result<RunReport, ApiError> {
    Worker::new(state.clone(), Options::default())
        .run(true, &|| false)
        .await
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
    /// Whether Telegram answers, shared by the lanes and kept across runs.
    health: Health,
    /// Per channel, held while its join link is made: lanes granting in a channel that has
    /// none wait for the first to make and store it, instead of each making one.
    link_locks: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<()>>>>,
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
            health: Health::default(),
            link_locks: Mutex::default(),
        }
    }

    /// The lock held while channel `channel`'s join link is made.
    fn link_lock(&self, channel: i32) -> Arc<tokio::sync::Mutex<()>> {
        self.link_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(channel)
            .or_default()
            .clone()
    }

    /// False without a bot token and without dry-run: effects then stay queued.
    pub fn is_enabled(&self) -> bool {
        self.bot.is_some()
    }

    /// One run: enqueue refunds of `refund_pending` payments and, with `scan`, due reminders;
    /// then perform due effects with [`Options::concurrency`] lanes until none is due,
    /// `max_effects` are done or `stop` says so (checked between effects). An effect is
    /// attempted at most once per run. While Telegram is unreachable nothing is claimed; a
    /// probe, at most every [`PROBE_EVERY`], decides when to resume.
    pub async fn run(
        &self,
        scan: bool,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<RunReport, ApiError> {
        let Some(bot) = &self.bot else {
            return Ok(RunReport::default());
        };
        // The run's first chunk of the sweep's queue. A chunk short of full means the queue is
        // empty now: the lanes do not ask again this run (rows queued meanwhile are the next
        // run's), so an empty queue costs one statement a run.
        let made = self.materialize().await?;
        let drained = AtomicBool::new(made < effects::SWEEP_QUEUE_CHUNK as u64);
        let first = RunReport {
            enqueued: made + self.enqueue_scans(scan).await?,
            ..RunReport::default()
        };
        let seen = Mutex::new(HashSet::new());
        let report = Mutex::new(first);
        let lanes = (0..self.options.concurrency.max(1))
            .map(|_| self.lane(bot, &seen, &report, &drained, stop));
        futures::future::join_all(lanes).await;
        Ok(report.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    /// The scans of a run: refunds of `refund_pending` payments every run (cheap: an index
    /// range), due reminders with `scan`. Returns how many effects they enqueued.
    async fn enqueue_scans(&self, scan: bool) -> Result<u64, ApiError> {
        let client = self.state.db.get().await?;
        let mut enqueued = effects::enqueue_pending_refunds(&client).await?;
        if scan {
            enqueued +=
                memberships::enqueue_due_reminders(&client, self.state.config.reminder_days)
                    .await?;
        }
        Ok(enqueued)
    }

    /// A chunk of the sweep's queue made effects ([`effects::materialize_sweep_queue`]).
    async fn materialize(&self) -> Result<u64, ApiError> {
        let client = self.state.db.get().await?;
        effects::materialize_sweep_queue(&client).await
    }

    async fn lane(
        &self,
        bot: &BotApi,
        seen: &Mutex<HashSet<i64>>,
        report: &Mutex<RunReport>,
        drained: &AtomicBool,
        stop: &(dyn Fn() -> bool + Sync),
    ) {
        loop {
            {
                let r = report.lock().unwrap_or_else(|p| p.into_inner());
                if stop() || r.attempted() >= self.options.max_effects {
                    return;
                }
            }
            let result = self.claim_and_perform(bot, seen).await;
            if let Ok(None) = result {
                // Nothing due: the next chunk of the sweep's queue, if any, and on. Made only
                // when the lanes run dry, so a grant committed meanwhile waits behind a chunk
                // or two of revokes, not behind a whole sweep's.
                if drained.load(Ordering::Relaxed) {
                    return;
                }
                match self.materialize().await {
                    Ok(made) => {
                        if made < effects::SWEEP_QUEUE_CHUNK as u64 {
                            drained.store(true, Ordering::Relaxed);
                        }
                        if made == 0 {
                            return;
                        }
                        report.lock().unwrap_or_else(|p| p.into_inner()).enqueued += made;
                        continue;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the sweep's queue not made effects; the next run carries on");
                        return;
                    }
                }
            }
            let mut r = report.lock().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok(None) => return,
                Ok(Some(recorded)) => r.count(recorded),
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
        if !self.health.may_claim(bot).await {
            return Ok(None);
        }
        let started = Instant::now();
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
        let since = tokio::time::Instant::now();
        let work = tokio::time::timeout(ATTEMPT_CAP, self.perform(client, bot, &effect));
        let mut attempt = tokio::select! {
            attempt = work => attempt.unwrap_or_else(|_| {
                Attempt::from(Err(Failure::Retry(format!(
                    "the attempt took longer than {} s; abandoned",
                    ATTEMPT_CAP.as_secs()
                ))))
            }),
            () = self.heartbeat(effect.id, token) => {
                tracing::warn!(
                    effect_id = effect.id,
                    kind = %effect.kind,
                    "effect claimed again by another worker while being performed; attempt \
                     abandoned, nothing recorded"
                );
                return Ok(Some(Recorded::Superseded));
            }
        };
        // A transient failure: Telegram's, or this effect's own? One shared probe decides.
        if let Err(Failure::Retry(error)) = &attempt.result
            && !self.health.answers(bot, since).await
        {
            attempt.result = Err(Failure::Outage(error.clone()));
        }
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
}

impl Worker {
    /// Renews the claim (`lease_until` = now + lease) every third of the lease while the
    /// attempt runs; returns only when the claim was found superseded (claimed again, after
    /// this worker failed to renew it in time). A renewal that fails on a database error is
    /// tried again at the next beat.
    async fn heartbeat(&self, id: i64, token: i64) {
        let lease = self.options.lease;
        let every = lease / 3;
        loop {
            tokio::time::sleep(every).await;
            let renewed = async {
                let client = self.state.db.get().await?;
                db::row_opt(&client, RENEW_SQL, &[&id, &token, &lease.as_secs_f64()]).await
            }
            .await;
            match renewed {
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(effect_id = id, error = %e, "lease not renewed; trying again");
                }
            }
        }
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
    /// Put back, uncounted, while Telegram was unreachable.
    Outage,
    /// Paused: the bot lacks its rights in the chat.
    Paused,
}

const RENEW_SQL: &str =
    "UPDATE effects SET lease_until = statement_timestamp() + make_interval(secs => $3)
     WHERE id = $1 AND lease_token = $2 AND status = 'pending'
     RETURNING id";

/// The access kinds, which are ordered per member and claimed before every other kind (as a
/// SQL list; the partial index `effects_member_access_idx` covers exactly these, and the claim
/// index `effects_claim_idx` leads with `kind NOT IN` this list).
macro_rules! access_kinds_sql {
    () => {
        "('grant', 'revoke', 'join_approve', 'join_decline', 'unban')"
    };
}

/// Whether effects of `kind` change who is in a chat, and so are ordered per member.
pub fn is_access(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Grant | Kind::Revoke | Kind::JoinApprove | Kind::JoinDecline | Kind::Unban
    )
}

/// The test of a claim's ordering rule for access effect `$1` of member (`$2`, `$3`): no other
/// pending access effect of the member is earlier, and none is leased.
const FIRST_OF_MEMBER_SQL: &str = concat!(
    "SELECT NOT EXISTS (
    SELECT 1 FROM effects b
    WHERE b.chat_id = $2 AND b.user_id = $3 AND b.status = 'pending' AND b.id <> $1
      AND b.kind IN ",
    access_kinds_sql!(),
    "
      AND (b.id < $1 OR b.lease_until > statement_timestamp())) AS first"
);

const CANDIDATE_SQL: &str = concat!(
    "SELECT id, kind, chat_id, user_id FROM effects e
     WHERE status = 'pending' AND next_attempt_at <= statement_timestamp()
       AND (lease_until IS NULL OR lease_until <= statement_timestamp())
       AND NOT (id = ANY($1))
       AND NOT (e.kind IN ",
    access_kinds_sql!(),
    " AND EXISTS (
           SELECT 1 FROM effects b
           WHERE b.chat_id = e.chat_id AND b.user_id = e.user_id
             AND b.status = 'pending' AND b.kind IN ",
    access_kinds_sql!(),
    " AND b.id <> e.id
             AND (b.id < e.id OR b.lease_until > statement_timestamp())))
       AND NOT (e.kind IN ",
    access_kinds_sql!(),
    " AND e.chat_id IN (",
    channels::no_rights_chats_sql!(),
    "))
     ORDER BY (kind NOT IN ",
    access_kinds_sql!(),
    "), next_attempt_at, id
     LIMIT 1
     FOR UPDATE SKIP LOCKED"
);

/// The claim reads its candidate through `effects_claim_idx`, which returns pending effects in
/// the claim's order, so `LIMIT 1` reads one entry however many are pending. The planner would
/// rather read every pending effect through another index and sort them when the statistics
/// say few are pending (taken in a quiet hour, or of an empty table): it estimates one row and
/// keeps the plan for the connection's prepared statement. During a backlog (an invoice storm
/// of the bot) each claim then read and sorted the whole backlog: 6.5 ms a claim at 10,000
/// pending invoices, 0.6 ms through the claim index. Sorting is therefore off for the claim's
/// transaction (`SET LOCAL`): with the claim index there is nothing to sort.
const CLAIM_PLAN_SQL: &str = "SET LOCAL enable_sort = off";

const MEMBER_LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(
         hashtextextended('subgate effects ' || $1::bigint || ':' || $2::bigint, 0))";

const LEASE_SQL: &str = concat!(
    "UPDATE effects SET lease_until = statement_timestamp() + make_interval(secs => $2),
         lease_token = lease_token + 1
     WHERE id = $1
     RETURNING ",
    effect_columns!(),
    ", lease_token AS token"
);

/// Claims the next due effect (see the module doc): the first due one, by due time then id,
/// that is not leased, not in `exclude`, and — for an access effect — the first pending access
/// effect of its chat member with none of that member's access effects leased. For an access
/// effect the rule is checked again in a fresh statement under the member's advisory lock —
/// held until the claim commits — so of two claims racing for one member, the second sees the
/// first's lease; a candidate that fails the check is passed over. Commits the lease and a new
/// token.
async fn claim(
    client: &mut Object,
    exclude: &[i64],
    lease: Duration,
) -> Result<Option<Claimed>, ApiError> {
    let mut passed = exclude.to_vec();
    loop {
        let tx = client.transaction().await?;
        // Sent together: the setting applies to the candidate's statement (see CLAIM_PLAN_SQL).
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&passed];
        let (_, candidate) = tokio::try_join!(
            async { Ok::<_, ApiError>(tx.batch_execute(CLAIM_PLAN_SQL).await?) },
            db::row_opt(&tx, CANDIDATE_SQL, &params)
        )?;
        let Some(candidate) = candidate else {
            tx.rollback().await?;
            return Ok(None);
        };
        let (id, kind, chat, user): (i64, Kind, Option<i64>, i64) = (
            candidate.try_get("id")?,
            candidate.try_get("kind")?,
            candidate.try_get("chat_id")?,
            candidate.try_get("user_id")?,
        );
        if let Some(chat) = chat
            && is_access(kind)
            && !first_of_member(&tx, id, chat, user).await?
        {
            tx.rollback().await?;
            passed.push(id);
            continue;
        }
        let row = db::row_one(&tx, LEASE_SQL, &[&id, &lease.as_secs_f64()]).await?;
        tx.commit().await?;
        return Ok(Some(Claimed {
            effect: db::FromRow::from_row(&row)?,
            token: row.try_get("token")?,
        }));
    }
}

/// Under member (`chat`, `user`)'s advisory lock, held until the claim commits: whether effect
/// `id` is the member's first pending one and none of theirs is leased.
async fn first_of_member(
    tx: &Transaction<'_>,
    id: i64,
    chat: i64,
    user: i64,
) -> Result<bool, ApiError> {
    db::execute(tx, MEMBER_LOCK_SQL, &[&chat, &user]).await?;
    Ok(db::row_one(tx, FIRST_OF_MEMBER_SQL, &[&id, &chat, &user])
        .await?
        .try_get("first")?)
}

const DONE_SQL: &str = "UPDATE effects SET status = 'done', attempts = attempts + 1,
         done_at = statement_timestamp(), updated_at = statement_timestamp(),
         lease_until = NULL,
         payload = CASE WHEN $2::text IS NULL THEN payload
                        ELSE payload || jsonb_build_object('note', $2::text) END
     WHERE id = $1 AND lease_token = $3 AND status = 'pending'
     RETURNING status,
         extract(epoch FROM statement_timestamp() - created_at)::float8 AS age_secs";

/// Put back due now, neither `attempts` nor `first_failed_at` touched (an outage; a pause for
/// missing rights, only while the chat is marked `no_rights`: `$5`).
const PUT_BACK_SQL: &str = concat!(
    "UPDATE effects SET next_attempt_at = statement_timestamp(), last_error = $2,
         payload = CASE WHEN $3 THEN payload || '{\"verify\": true}' ELSE payload END,
         lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $4 AND status = 'pending'
       AND (NOT $5 OR chat_id IN (",
    channels::no_rights_chats_sql!(),
    "))
     RETURNING status"
);

const RATE_LIMITED_SQL: &str = "UPDATE effects SET
         next_attempt_at = statement_timestamp() + make_interval(secs => $2),
         last_error = $3, lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $4 AND status = 'pending'
     RETURNING status";

const FAILURE_SQL: &str = "UPDATE effects SET attempts = attempts + 1, last_error = $2,
         first_failed_at = COALESCE(first_failed_at, statement_timestamp()),
         status = CASE WHEN $3 OR COALESCE(first_failed_at, statement_timestamp())
                                  <= statement_timestamp() - make_interval(secs => $4)
                       THEN 'failed' ELSE 'pending' END,
         next_attempt_at = statement_timestamp() + make_interval(secs => $5),
         payload = CASE WHEN $6 THEN payload || '{\"verify\": true}' ELSE payload END,
         lease_until = NULL, updated_at = statement_timestamp()
     WHERE id = $1 AND lease_token = $7 AND status = 'pending'
     RETURNING status";

const RELEASE_SQL: &str = "UPDATE effects SET lease_until = NULL
     WHERE id = $1 AND lease_token = $2 AND status = 'pending'";

/// Records an attempt in a new short transaction, only while the effect still carries `token`
/// and is pending; otherwise nothing is written (`Superseded`). The payment writes of a refund
/// are made in the same transaction ([`settle_refund`]). A database failure during the attempt
/// records nothing and is returned.
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
        cleared_ban,
    } = attempt;
    let mut client = state.db.get().await?;
    let tx = client.transaction().await?;
    let (written, recorded, error) = match result {
        Err(Failure::Db(err)) => return Err(err),
        Ok(note) => {
            let written = db::row_opt(&tx, DONE_SQL, &[&e.id, &note, &token]).await?;
            if let Some(row) = &written {
                if cleared_ban && let Some(chat) = e.chat_id {
                    bans::clear(&tx, chat, e.user_id).await?;
                }
                if e.kind == Kind::Grant && e.payment_id.is_some() {
                    crate::common::metrics::payment_granted(row.try_get("age_secs")?);
                }
            }
            (written, Recorded::Done, None)
        }
        Err(Failure::Outage(error)) => {
            let error = format!(
                "Telegram is unreachable (getMe failed too); not counted as a failure: {error}"
            );
            let written =
                db::row_opt(&tx, PUT_BACK_SQL, &[&e.id, &error, &verify, &token, &false]).await?;
            (written, Recorded::Outage, Some(error))
        }
        Err(Failure::NoRights(error)) => {
            let error = format!(
                "paused: the bot lacks its admin rights in the chat; resumes when they are \
                 back: {error}"
            );
            if let Some(chat) = e.chat_id
                && let Some(channel) =
                    channels::set_telegram_status(&tx, chat, TelegramStatus::NoRights).await?
            {
                tracing::warn!(
                    channel_id = channel,
                    chat_id = chat,
                    "the bot lacks its admin rights in the chat: its access effects pause"
                );
            }
            match db::row_opt(&tx, PUT_BACK_SQL, &[&e.id, &error, &verify, &token, &true]).await? {
                Some(written) => (Some(written), Recorded::Paused, Some(error)),
                // No channel in that chat (or the claim is gone): an ordinary refusal.
                None => {
                    let written =
                        record_failure(&tx, e, token, true, &error, verify, options).await?;
                    (written, Recorded::Retry, Some(error))
                }
            }
        }
        Err(Failure::RateLimited { secs, error }) => {
            // Telegram's pace, not the effect's fault: not a failure. A little jitter on top,
            // so effects told to wait together do not all come back in the same instant.
            let delay = secs as f64 + rand::random::<f64>();
            let written =
                db::row_opt(&tx, RATE_LIMITED_SQL, &[&e.id, &delay, &error, &token]).await?;
            (written, Recorded::RateLimited, Some(error))
        }
        Err(Failure::Retry(error)) => {
            let written = record_failure(&tx, e, token, false, &error, verify, options).await?;
            (written, Recorded::Retry, Some(error))
        }
        Err(Failure::Permanent(error)) => {
            let written = record_failure(&tx, e, token, true, &error, verify, options).await?;
            (written, Recorded::Retry, Some(error))
        }
    };
    let Some(written) = written else {
        tx.rollback().await?;
        tracing::warn!(
            effect_id = e.id,
            kind = %e.kind,
            "effect attempted after its lease was claimed again; its result is not recorded"
        );
        return Ok(Recorded::Superseded);
    };
    let recorded = if written.try_get::<_, Status>("status")? == Status::Failed {
        Recorded::Failed
    } else {
        recorded
    };
    settle_refund(&tx, e, refunded, recorded).await?;
    tx.commit().await?;
    log_recorded(e, recorded, &error.unwrap_or_default());
    Ok(recorded)
}

/// A failed attempt: dead-lettered when refused for good (`permanent`), or when the first
/// failure is older than the retry horizon; else rescheduled with backoff. `verify`: the next
/// attempt of a refund first looks for it. Returns the written row (its status), if the claim
/// still held.
async fn record_failure(
    tx: &Transaction<'_>,
    e: &Effect,
    token: i64,
    permanent: bool,
    error: &str,
    verify: bool,
    options: &Options,
) -> Result<Option<tokio_postgres::Row>, ApiError> {
    let delay = backoff(e.attempts + 1).as_secs_f64();
    let horizon = options.retry_horizon.as_secs_f64();
    db::row_opt(
        tx,
        FAILURE_SQL,
        &[&e.id, &error, &permanent, &horizon, &delay, &verify, &token],
    )
    .await
}

/// The payment side of a recorded refund, in the recording transaction: `refunded` when the
/// refund was made or confirmed, `refund_failed` when its effect was dead-lettered (both only
/// from `refund_pending`).
async fn settle_refund(
    tx: &Transaction<'_>,
    e: &Effect,
    refunded: Option<i64>,
    recorded: Recorded,
) -> Result<(), ApiError> {
    if let Some(payment_id) = refunded
        && recorded == Recorded::Done
    {
        refunds::settle(tx, payment_id, Outcome::Refunded).await?;
    }
    if recorded == Recorded::Failed
        && e.kind == Kind::Refund
        && let Some(payment_id) = e.payment_id
    {
        refunds::settle(tx, payment_id, Outcome::RefundFailed).await?;
    }
    Ok(())
}

fn log_recorded(e: &Effect, recorded: Recorded, error: &str) {
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
        Recorded::Outage => {
            tracing::info!(effect_id = e.id, kind = %e.kind, error = %error, "Telegram unreachable; effect put back, not counted");
        }
        Recorded::Paused => {
            tracing::info!(effect_id = e.id, kind = %e.kind, error = %error, "effect paused until the bot's rights are back");
        }
        Recorded::Done | Recorded::Superseded => {}
    }
}

/// Gives a claim back after its result could not be recorded, so the effect is due again at
/// once rather than when its lease runs out. Best effort: the lease runs out anyway.
async fn release(state: &AppState, id: i64, token: i64) {
    let result = async {
        let client = state.db.get().await?;
        db::execute(&client, RELEASE_SQL, &[&id, &token]).await
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(effect_id = id, error = %e, "lease not given back; it runs out by itself");
    }
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
}
