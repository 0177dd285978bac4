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
//! While a paid broadcast is sending, messages to members are claimed and recorded in batches
//! instead (after every other kind is served; [`PAID_LANES`], and `messages` for how a batch
//! keeps at most once).
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
//! A run is three named steps per effect — claim ([`claim`](mod@claim): the claim, its lease and
//! heartbeat), perform ([`perform`]: the Bot API calls of each kind, with what an attempt comes to
//! in [`failure`]) and record ([`record`](mod@record): results, retries and backoff) — over lanes
//! that share one report. The worker is its own module, apart from the outbox it drains
//! ([`crate::outbox::effects`]), because it reads memberships, payments and Telegram decisions, all
//! of which enqueue effects: kept apart, no module both enqueues and performs. The Stars reconcile
//! is payment recovery, not an effect: [`crate::telegram::recovery`].

mod access;
mod bans;
mod bot;
mod claim;
mod failure;
mod gateway_refund;
mod health;
pub mod listen;
mod messages;
mod notices;
mod perform;
mod receipts;
mod record;
mod refund;

pub use self::{claim::is_access, health::PROBE_EVERY, record::backoff};

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde::Serialize;

use self::{
    claim::{Claimed, claim, release},
    failure::{Attempt, Failure},
    health::Health,
    record::{Recorded, record, record_all},
};
use crate::{
    access::memberships,
    app::state::AppState,
    common::error::ApiError,
    messages::{automations, broadcasts},
    outbox::effects,
    outbox::effects::Effect,
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

/// A worker over the application's pool and configured bot.
pub struct Worker {
    state: AppState,
    bot: Option<BotApi>,
    /// The Checkbox cashier who signs fiscal receipts (`CHECKBOX_*`), with the token they hold.
    cashier: Option<crate::payments::receipts::checkbox::Cashier>,
    options: Options,
    /// Whether Telegram answers, shared by the lanes and kept across runs.
    health: Health,
    /// Per channel, held while its join link is made: lanes granting in a channel that has
    /// none wait for the first to make and store it, instead of each making one.
    link_locks: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<()>>>>,
    /// Paid broadcasts' budget this process reserved and has not spent.
    paid: messages::PaidAllowance,
    /// When the broadcasts' start and finish were last checked.
    broadcasts_checked: Mutex<Option<Instant>>,
    /// A paid broadcast was sending when last checked: runs take [`PAID_LANES`] more lanes.
    paid_sending: AtomicBool,
    /// The paid broadcasts sending when last checked.
    paid_seen: Mutex<Vec<i64>>,
    /// The run going on has the [`PAID_LANES`].
    run_paid: AtomicBool,
    /// A run without them met a paid broadcast's message: it ends, so the next run, at once,
    /// takes them.
    rerun: AtomicBool,
}

/// Lanes a run adds while a paid broadcast is sending. In such a run every lane claims effects
/// of other kinds one at a time first, and messages to members [`MESSAGE_BATCH`] at a time when
/// none of those is due, so a paid message costs the database one statement (its mark, with the
/// record of the message before it) and a share of its batch's claim and read, and a grant or
/// an invoice waits at most for a lane's batch. Each lane holds a pooled connection only while
/// it claims, reads, marks or records.
pub const PAID_LANES: usize = 8;

/// Messages to members a lane of [`PAID_LANES`] claims at once. A batch's messages are sent one
/// after another, each marked just before its call, so a crash still cuts off at most one
/// message per lane; the rest of the batch is claimed again once its leases run out.
pub const MESSAGE_BATCH: i64 = 20;

/// How often a worker starts due broadcasts and finishes done ones.
pub const BROADCASTS_EVERY: Duration = Duration::from_secs(1);

impl Worker {
    /// A worker with the configured bot (`TELEGRAM_BOT_TOKEN`, `TELEGRAM_API_URL`,
    /// `TELEGRAM_DRY_RUN`); cheap, so one per run is fine.
    pub fn new(state: AppState, options: Options) -> Worker {
        let bot = BotApi::from_config(&state.config, options.call_timeout);
        let cashier = state
            .config
            .checkbox
            .clone()
            .map(crate::payments::receipts::checkbox::Cashier::new);
        Worker {
            state,
            bot,
            cashier,
            options,
            health: Health::default(),
            link_locks: Mutex::default(),
            paid: messages::PaidAllowance::default(),
            broadcasts_checked: Mutex::default(),
            paid_sending: AtomicBool::new(false),
            paid_seen: Mutex::default(),
            run_paid: AtomicBool::new(false),
            rerun: AtomicBool::new(false),
        }
    }

    /// Whether the last run ended early to let the next take [`PAID_LANES`] more lanes: the
    /// next run is due at once (and checks the broadcasts then).
    pub fn take_rerun(&self) -> bool {
        let rerun = self.rerun.swap(false, Ordering::Relaxed);
        if rerun {
            *self
                .broadcasts_checked
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
        }
        rerun
    }

    /// Notes that a paid broadcast's message came up: a run without its extra lanes ends.
    fn paid_message_met(&self) {
        if !self.run_paid.load(Ordering::Relaxed) {
            self.rerun.store(true, Ordering::Relaxed);
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
        // While a paid broadcast sends (its budget not all reserved, or this process holding
        // some unspent), more lanes: its messages are not held to the free pace, and the
        // database work per message, not Telegram, sets its rate.
        let paid_run = self.paid_sending.load(Ordering::Relaxed) || self.paid.holds_any();
        self.run_paid.store(paid_run, Ordering::Relaxed);
        let extra = if paid_run { PAID_LANES } else { 0 };
        let lanes = (0..self.options.concurrency.max(1) + extra)
            .map(|_| self.lane(bot, &seen, &report, &drained, stop, extra > 0));
        futures::future::join_all(lanes).await;
        Ok(report.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    /// The scans of a run: refunds of `refund_pending` payments every run (cheap: an index
    /// range), due reminders with `scan`. Returns how many effects they enqueued.
    async fn enqueue_scans(&self, scan: bool) -> Result<u64, ApiError> {
        let mut client = self.state.db.get().await?;
        let mut enqueued = effects::enqueue_pending_refunds(&client).await?;
        let language = crate::present::locale::default_language();
        // Broadcasts: the due ones start, the done ones finish (cheap: partial indexes), at
        // most every BROADCASTS_EVERY, however often commits wake the worker.
        if self.broadcasts_due() {
            enqueued += broadcasts::start_due(&mut client, language).await?;
            broadcasts::finish_done(&mut client).await?;
            let (paid, sending) = broadcasts::paid_sending(&client).await?;
            // Budget reserved for a broadcast no longer sending is never spent.
            self.paid.retain(&sending);
            let began = {
                let mut seen = self.paid_seen.lock().unwrap_or_else(|p| p.into_inner());
                let began = sending.iter().any(|b| !seen.contains(b));
                *seen = sending;
                began
            };
            if began {
                // A paid broadcast began: its rows are fresh, its pace is high.
                broadcasts::refresh_statistics(&client).await?;
            }
            self.paid_sending.store(paid, Ordering::Relaxed);
        }
        if scan {
            enqueued +=
                memberships::enqueue_due_reminders(&client, self.state.config.reminder_days)
                    .await?;
            let tx = client.transaction().await?;
            enqueued += automations::enqueue_due(&tx, language).await?;
            tx.commit().await?;
        }
        Ok(enqueued)
    }

    /// Whether the broadcasts' start and finish are due in this run: at most once every
    /// [`BROADCASTS_EVERY`].
    fn broadcasts_due(&self) -> bool {
        let mut last = self
            .broadcasts_checked
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= BROADCASTS_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// A chunk of the sweep's queue made effects ([`effects::materialize_sweep_queue`]).
    async fn materialize(&self) -> Result<u64, ApiError> {
        let client = self.state.db.get().await?;
        effects::materialize_sweep_queue(&client).await
    }

    /// One lane: claims, performs and records until nothing is due, the run's cap is reached
    /// or `stop` says so. With `messages` (a run during a paid broadcast), messages to members
    /// are claimed in batches ([`MESSAGE_BATCH`]) when no effect of another kind is due.
    async fn lane(
        &self,
        bot: &BotApi,
        seen: &Mutex<HashSet<i64>>,
        report: &Mutex<RunReport>,
        drained: &AtomicBool,
        stop: &(dyn Fn() -> bool + Sync),
        messages: bool,
    ) {
        loop {
            {
                let r = report.lock().unwrap_or_else(|p| p.into_inner());
                if stop()
                    || r.attempted() >= self.options.max_effects
                    || (!messages && self.rerun.load(Ordering::Relaxed))
                {
                    return;
                }
            }
            // In batches, messages to members go after every other kind: each round claims
            // one effect of another kind if one is due, else a batch of messages.
            let single = self
                .claim_and_perform(bot, seen, if messages { 1 } else { 2 })
                .await
                .map(|r| r.map(|(id, r)| vec![(id, Ok(r))]));
            let result = match single {
                Ok(None) if messages => self.claim_and_send(bot, seen).await,
                other => other,
            };
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
            let results = match result {
                Ok(None) => return,
                Ok(Some(results)) => results,
                Err(e) => {
                    r.unrecorded += 1;
                    tracing::error!(error = %e, "effect result not recorded; it runs again");
                    // The database is likely unwell: this lane stops, the next run carries on.
                    return;
                }
            };
            // What is done cannot be claimed again: only the rest stays excluded, so the
            // claims' list of exclusions stays short.
            {
                let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                for (id, result) in &results {
                    if matches!(result, Ok(Recorded::Done)) {
                        seen.remove(id);
                    }
                }
            }
            let results = results.into_iter().map(|(_, r)| r);
            let mut unwell = false;
            for result in results {
                match result {
                    Ok(recorded) => r.count(recorded),
                    Err(e) => {
                        r.unrecorded += 1;
                        unwell = true;
                        tracing::error!(error = %e, "effect result not recorded; it runs again");
                    }
                }
            }
            if unwell {
                // The database is likely unwell: this lane stops, the next run carries on.
                return;
            }
        }
    }

    /// Claims a batch of due messages to members not yet attempted in this run and sends them,
    /// each sent one recorded with the next one's mark and the rest at the batch's end, in one
    /// transaction ([`messages`] says how): each message's effect and result, in the batch's
    /// order. `Ok(None)`: none is due.
    async fn claim_and_send(
        &self,
        bot: &BotApi,
        seen: &Mutex<HashSet<i64>>,
    ) -> Result<Option<Vec<(i64, Result<Recorded, ApiError>)>>, ApiError> {
        if !self.health.may_claim(bot).await {
            return Ok(None);
        }
        let started = Instant::now();
        let mut client = self.state.db.get().await?;
        let exclude = excluded(seen);
        let batch =
            claim::claim_messages(&mut client, &exclude, self.options.lease, MESSAGE_BATCH).await?;
        if batch.is_empty() {
            return Ok(None);
        }
        let claims: Vec<(i64, i64)> = batch.iter().map(|c| (c.effect.id, c.token)).collect();
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(claims.iter().map(|(id, _)| *id));
        let since = tokio::time::Instant::now();
        let work = self.member_messages(client, bot, &batch);
        let sent = tokio::select! {
            sent = work => sent,
            () = self.heartbeat(&claims) => {
                tracing::warn!(
                    effect_ids = ?claims.iter().map(|(id, _)| id).collect::<Vec<_>>(),
                    "messages claimed again by another worker while being sent; the rest of \
                     the batch is abandoned"
                );
                return Ok(Some(
                    claims.iter().map(|(id, _)| (*id, Ok(Recorded::Superseded))).collect(),
                ));
            }
        };
        let messages::Sent {
            mut recorded,
            to_record,
        } = match sent {
            Ok(sent) => sent,
            Err(e) => {
                release(&self.state, &claims).await;
                return Err(e);
            }
        };
        let (places, mut attempts): (Vec<usize>, Vec<Attempt>) = to_record.into_iter().unzip();
        self.outages(bot, since, &mut attempts).await;
        let items: Vec<(&Effect, i64, Attempt)> = places
            .iter()
            .zip(attempts)
            .map(|(&i, a)| (&batch[i].effect, batch[i].token, a))
            .collect();
        match record_all(&self.state, items, &self.options).await {
            Ok(results) => recorded.extend(places.into_iter().zip(results)),
            Err(e) => {
                let given_back: Vec<(i64, i64)> = places.iter().map(|&i| claims[i]).collect();
                release(&self.state, &given_back).await;
                let why = e.to_string();
                recorded.extend(
                    places
                        .into_iter()
                        .map(|i| (i, Err(ApiError::internal(format!("not recorded: {why}"))))),
                );
            }
        }
        recorded.sort_by_key(|(i, _)| *i);
        tracing::info!(
            effects = claims.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "batch of messages to members attempted"
        );
        Ok(Some(
            recorded
                .into_iter()
                .map(|(i, r)| (claims[i].0, r))
                .collect(),
        ))
    }

    /// Claims the next due effect of a tier up to `max_tier` ([`claim()`]) not yet attempted in
    /// this run, performs it and records the result (see the module doc). `Ok(None)`: nothing
    /// is due.
    async fn claim_and_perform(
        &self,
        bot: &BotApi,
        seen: &Mutex<HashSet<i64>>,
        max_tier: i32,
    ) -> Result<Option<(i64, Recorded)>, ApiError> {
        if !self.health.may_claim(bot).await {
            return Ok(None);
        }
        let started = Instant::now();
        let mut client = self.state.db.get().await?;
        let exclude = excluded(seen);
        let Some(Claimed { effect, token }) =
            claim(&mut client, &exclude, max_tier, self.options.lease).await?
        else {
            return Ok(None);
        };
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(effect.id);
        let since = tokio::time::Instant::now();
        let claims = [(effect.id, token)];
        let work = tokio::time::timeout(ATTEMPT_CAP, self.perform(client, bot, &effect));
        let mut attempt = tokio::select! {
            attempt = work => attempt.unwrap_or_else(|_| Attempt::abandoned()),
            () = self.heartbeat(&claims) => {
                tracing::warn!(
                    effect_id = effect.id,
                    kind = %effect.kind,
                    "effect claimed again by another worker while being performed; attempt \
                     abandoned, nothing recorded"
                );
                return Ok(Some((effect.id, Recorded::Superseded)));
            }
        };
        self.outages(bot, since, std::slice::from_mut(&mut attempt))
            .await;
        let recorded = match record(&self.state, &effect, token, attempt, &self.options).await {
            Ok(recorded) => recorded,
            Err(e) => {
                release(&self.state, &claims).await;
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
        Ok(Some((effect.id, recorded)))
    }

    /// Transient failures among `attempts` (begun at `since`): Telegram's, or the effects' own?
    /// One shared probe decides; while Telegram answers nothing they are an outage.
    async fn outages(&self, bot: &BotApi, since: tokio::time::Instant, attempts: &mut [Attempt]) {
        let transient = |a: &Attempt| matches!(a.result, Err(Failure::Retry(_)));
        if attempts.iter().any(transient) && !self.health.answers(bot, since).await {
            for a in attempts {
                if let Err(Failure::Retry(error)) = &a.result {
                    a.result = Err(Failure::Outage(error.clone()));
                }
            }
        }
    }
}

/// The effects a run's claims pass over: those attempted in it and not done.
fn excluded(seen: &Mutex<HashSet<i64>>) -> Vec<i64> {
    seen.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .copied()
        .collect()
}
