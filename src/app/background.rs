//! Background loops that run inside `subgate serve`. Each `select!`s on its interval and the
//! shutdown signal, and each unit of work is idempotent, so stopping mid-way is harmless.

use std::{sync::Arc, time::Duration};

use tokio::sync::Notify;

use crate::{
    AppState,
    access::sweep,
    app::worker::{Options, Worker, listen},
    catalog::channels,
    common::shutdown::ShutdownSignal,
    reports::stats,
    telegram::{self, audits},
};

/// Runs every configured loop until shutdown.
pub async fn run(state: AppState, shutdown: ShutdownSignal) {
    let mut loops = tokio::task::JoinSet::new();
    if let Some(every) = state.config.sweep_interval {
        loops.spawn(sweep_loop(state.clone(), shutdown.clone(), every));
    }
    loops.spawn(effects_loop(state.clone(), shutdown.clone()));
    loops.spawn(audit_start_up(state.clone()));
    if let Some(every) = state.config.audit_interval {
        loops.spawn(audit_loop(state.clone(), shutdown.clone(), every));
    }
    loops.spawn(telegram::members::probe_loop(
        state.db.clone(),
        state.config.clone(),
        shutdown.clone(),
    ));
    loops.spawn(crate::payments::gateways::wayforpay::reconcile::run_loop(
        state.db.clone(),
        state.config.clone(),
        shutdown.clone(),
    ));
    loops.spawn(crate::payments::gateways::monobank::reconcile::run_loop(
        state.db.clone(),
        state.config.clone(),
        shutdown.clone(),
    ));
    loops.spawn(crate::payments::gateways::cryptopay::reconcile::run_loop(
        state.db.clone(),
        state.config.clone(),
        shutdown.clone(),
    ));
    loops.spawn(crate::outbox::outbound::run_loop(
        state.db.clone(),
        state.config.outbound_allow_private,
        shutdown.clone(),
    ));
    loops.spawn(door_loop(state.clone(), shutdown.clone()));
    loops.spawn(stats_loop(state.clone(), shutdown.clone()));
    loops.spawn(crate::app::metrics::sample_loop(
        state.db.clone(),
        shutdown.clone(),
    ));
    shutdown.wait().await;
    while loops.join_next().await.is_some() {}
}

/// `SWEEP_INTERVAL_SECS`: a full sweep every `every`, the first at start-up. A failed run is
/// logged and the next tick tries again; on shutdown a run in progress stops between batches.
/// A run longer than the interval delays the next tick instead of stacking runs.
pub async fn sweep_loop(state: AppState, shutdown: ShutdownSignal, every: Duration) {
    let mut ticks = shutdown.ticks(every);
    while ticks.next().await {
        let stop = || shutdown.is_triggered();
        let result = sweep::sweep_until(&state.db, sweep::DEFAULT_BATCH_SIZE, stop).await;
        state.last_sweep.record(sweep::Trigger::Schedule, &result);
        if let Err(e) = result {
            tracing::error!(error = %e, "scheduled sweep failed; trying again at the next tick");
        }
    }
}

/// Decides the join requests waiting at Mini App doors ([`telegram::door::settle`]) every
/// [`telegram::door::SETTLE_EVERY`]: a buyer who paid is let in, an unpaid or stale request
/// declined. A failure is logged; the next tick tries again.
pub async fn door_loop(state: AppState, shutdown: ShutdownSignal) {
    let mut ticks = shutdown.ticks(telegram::door::SETTLE_EVERY);
    while ticks.next().await {
        match telegram::door::settle(&state.db, &state.config).await {
            Ok(0) => {}
            Ok(decided) => tracing::info!(decided, "join requests at the door decided"),
            Err(e) => {
                tracing::warn!(error = %e, "join requests at the door: pass failed; trying again")
            }
        }
    }
}

/// How often the statistics' days that ended are rolled up ahead of the reads that need them.
pub const STATS_ROLL_UP: Duration = Duration::from_secs(3600);

/// Rolls up every ended day of the statistics (`stats::roll_up`) at start-up and then hourly,
/// so the first read after an upgrade or after midnight finds its days ready. A failure is
/// logged; the next tick, or the next read, rolls the days.
pub async fn stats_loop(state: AppState, shutdown: ShutdownSignal) {
    let mut ticks = shutdown.ticks(STATS_ROLL_UP);
    let since = chrono::NaiveDate::from_ymd_opt(2000, 1, 1).unwrap_or_default();
    while ticks.next().await {
        match stats::roll_up(&state.stats, since, None).await {
            Ok(0) => {}
            Ok(days) => tracing::info!(days, "statistics: days rolled up"),
            Err(e) => tracing::warn!(error = %e, "statistics: roll-up failed; trying again later"),
        }
    }
}

/// How often the effects worker looks for due effects without being woken: the fallback of the
/// wake-up at commit ([`crate::app::worker::listen`]) and the timer of effects due later (retries,
/// reminders, Telegram's `retry_after`).
pub const EFFECTS_POLL: Duration = Duration::from_secs(2);
/// How often it scans for due reminders (refunds are looked for at every poll).
pub const EFFECTS_SCAN: Duration = Duration::from_secs(60);
/// How often it reconciles Stars transactions with `getStarTransactions`.
pub const STARS_RECONCILE: Duration = Duration::from_secs(600);

/// The Telegram effects worker ([`effects_loop_every`] with [`EFFECTS_POLL`]).
pub async fn effects_loop(state: AppState, shutdown: ShutdownSignal) {
    effects_loop_every(state, shutdown, EFFECTS_POLL).await;
}

/// The Telegram effects worker: performs due effects as soon as one may have been committed (a
/// commit of this process, or a notification from another one on its listening connection:
/// [`crate::app::worker::listen`]), after every (re)connect of that connection, and every `poll` in
/// any case; enqueues pending refunds at each
/// run, scans for reminders every [`EFFECTS_SCAN`] and reconciles Stars every
/// [`STARS_RECONCILE`] (all three first at start-up). A run that stopped at its cap of effects
/// is followed by the next at once. Without `TELEGRAM_BOT_TOKEN` (and without dry-run) it says
/// so once and stops: effects stay queued until a restart with a token. On shutdown, the
/// effect being performed is finished and recorded; no new one is claimed. An effect left
/// claimed by a process that was killed mid-call is claimed again when its lease (30 s, renewed
/// while a live worker performs it) runs out. The one worker is kept across runs, so an outage
/// it found holds claims back until its probe (at most every few seconds) answers.
pub async fn effects_loop_every(state: AppState, shutdown: ShutdownSignal, poll: Duration) {
    let options = Options::default();
    let max_effects = options.max_effects;
    let worker = Worker::new(state.clone(), options);
    if !worker.is_enabled() {
        tracing::warn!(
            "TELEGRAM_BOT_TOKEN is not set: Telegram effects are queued but not performed \
             (set it, or TELEGRAM_DRY_RUN=true to log them instead)"
        );
        return;
    }
    if state.config.telegram_dry_run {
        tracing::info!("TELEGRAM_DRY_RUN=true: Bot API calls are logged, not made");
    }
    let wake = Arc::new(Notify::new());
    let target = listen::Target {
        database_url: state.config.database_url.clone(),
        ca_cert: state.config.database_ca_cert.clone(),
    };
    let listener = tokio::spawn(listen::listen(target, wake.clone(), shutdown.clone()));
    let mut commits = crate::db::commits();
    let mut ticks = shutdown.ticks(poll);
    let mut last_scan: Option<tokio::time::Instant> = None;
    let mut last_reconcile: Option<tokio::time::Instant> = None;
    loop {
        let go = tokio::select! {
            more = ticks.next() => more,
            () = wake.notified() => !shutdown.is_triggered(),
            Ok(()) = commits.changed() => !shutdown.is_triggered(),
        };
        if !go {
            break;
        }
        let due = |last: Option<tokio::time::Instant>, every: Duration| {
            last.is_none_or(|t| t.elapsed() >= every)
        };
        let scan = due(last_scan, EFFECTS_SCAN);
        if scan {
            last_scan = Some(tokio::time::Instant::now());
        }
        let stop = || shutdown.is_triggered();
        match worker.run(scan, &stop).await {
            // Stopped at its cap with more due, maybe: the next run starts at once.
            Ok(report) if report.attempted() >= max_effects || worker.take_rerun() => {
                wake.notify_one()
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "effects run failed; trying again at the next tick");
            }
        }
        if due(last_reconcile, STARS_RECONCILE) && !shutdown.is_triggered() {
            last_reconcile = Some(tokio::time::Instant::now());
            if let Err(e) = telegram::recovery::reconcile(&state.db, &state.config).await {
                tracing::error!(error = %e, "Stars reconcile failed; trying again later");
            }
        }
    }
    listener.abort();
    let _ = listener.await;
}

/// At start-up: a running audit whose heartbeat stopped was left by a dead process; it is
/// marked failed (`interrupted`, see [`audits`]).
async fn audit_start_up(state: AppState) {
    let result = match state.db.get().await {
        Ok(client) => audits::interrupt_stale(&client, None).await,
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(0) => {}
        Ok(n) => tracing::warn!(
            audits = n,
            "audits left running by a dead process marked failed"
        ),
        Err(e) => tracing::warn!(error = %e, "stale audits could not be looked for"),
    }
}

/// `AUDIT_INTERVAL_SECS`: every `every` (the first at start-up), an audit of every active
/// channel, one channel at a time, with `fix` from `AUDIT_FIX`. A channel whose audit is
/// running (asked for by staff) is skipped this time. Without a bot token (or in dry-run mode)
/// it says so once and stops. On shutdown the audit in progress stops between two users and is
/// recorded failed (interrupted).
pub async fn audit_loop(state: AppState, shutdown: ShutdownSignal, every: Duration) {
    let Some(bot) = audits::bot(&state.config) else {
        tracing::warn!(
            "AUDIT_INTERVAL_SECS is set but TELEGRAM_BOT_TOKEN is not (or TELEGRAM_DRY_RUN is \
             on): scheduled audits are skipped"
        );
        return;
    };
    let fix = state.config.audit_fix;
    let mut ticks = shutdown.ticks(every);
    while ticks.next().await {
        let stop = || shutdown.is_triggered();
        if let Err(e) = audit_every_channel(&state, &bot, fix, &stop).await {
            tracing::error!(error = %e, "scheduled audits failed; trying again at the next tick");
        }
    }
}

/// One scheduled round: an audit of each active channel in id order, each run to its end
/// before the next starts.
async fn audit_every_channel(
    state: &AppState,
    bot: &crate::telegram_api::client::BotApi,
    fix: bool,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), crate::common::error::ApiError> {
    let mut after = 0i64;
    loop {
        let page = {
            let client = state.db.get().await?;
            channels::list(&client, after, Some(true), 100).await?
        };
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = i64::from(last.id);
        for channel in page {
            if stop() {
                return Ok(());
            }
            match audits::start(&state.db, channel.id, fix, None).await? {
                audits::Start::Started(id) => {
                    audits::run(&state.db, bot, id, stop).await?;
                }
                audits::Start::Running(id) => tracing::info!(
                    audit_id = id,
                    channel_id = channel.id,
                    "scheduled audit skipped: one is running"
                ),
                audits::Start::NoChannel => {}
            }
        }
    }
}
