//! Background loops that run inside `subgate serve`. Each `select!`s on its interval and the
//! shutdown signal, and each unit of work is idempotent, so stopping mid-way is harmless.

use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::{
    AppState,
    shutdown::ShutdownSignal,
    sweep, telegram,
    worker::{Options, Worker},
};

/// Runs every configured loop until shutdown.
pub async fn run(state: AppState, shutdown: ShutdownSignal) {
    let mut loops = tokio::task::JoinSet::new();
    if let Some(every) = state.config.sweep_interval {
        loops.spawn(sweep_loop(state.clone(), shutdown.clone(), every));
    }
    loops.spawn(effects_loop(state.clone(), shutdown.clone()));
    loops.spawn(crate::metrics::sample_loop(
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
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => break,
        }
        let stop = || shutdown.is_triggered();
        let result = sweep::sweep_until(&state.db, sweep::DEFAULT_BATCH_SIZE, stop).await;
        state.last_sweep.record(sweep::Trigger::Schedule, &result);
        if let Err(e) = result {
            tracing::error!(error = %e, "scheduled sweep failed; trying again at the next tick");
        }
    }
}

/// How often the effects worker looks for due effects.
pub const EFFECTS_POLL: Duration = Duration::from_secs(2);
/// How often it scans for due reminders (refunds are looked for at every poll).
pub const EFFECTS_SCAN: Duration = Duration::from_secs(60);
/// How often it reconciles Stars transactions with `getStarTransactions`.
pub const STARS_RECONCILE: Duration = Duration::from_secs(600);

/// The Telegram effects worker: enqueues pending refunds and performs due effects every
/// [`EFFECTS_POLL`], scans for reminders every [`EFFECTS_SCAN`] and reconciles Stars every
/// [`STARS_RECONCILE`] (all three first at start-up). Without `TELEGRAM_BOT_TOKEN` (and without dry-run) it says
/// so once and stops: effects stay queued until a restart with a token. On shutdown, the
/// effect being performed is finished and recorded; no new one is claimed. An effect left
/// claimed by a process that was killed mid-call is claimed again when its lease (30 s, renewed
/// while a live worker performs it) runs out. The one worker is kept across polls, so an outage
/// it found holds claims back until its probe (at most every few seconds) answers.
pub async fn effects_loop(state: AppState, shutdown: ShutdownSignal) {
    let worker = Worker::new(state.clone(), Options::default());
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
    let mut tick = tokio::time::interval(EFFECTS_POLL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_scan: Option<tokio::time::Instant> = None;
    let mut last_reconcile: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => break,
        }
        let due = |last: Option<tokio::time::Instant>, every: Duration| {
            last.is_none_or(|t| t.elapsed() >= every)
        };
        let scan = due(last_scan, EFFECTS_SCAN);
        if scan {
            last_scan = Some(tokio::time::Instant::now());
        }
        let stop = || shutdown.is_triggered();
        if let Err(e) = worker.run(scan, &stop).await {
            tracing::error!(error = %e, "effects run failed; trying again at the next tick");
        }
        if due(last_reconcile, STARS_RECONCILE) && !shutdown.is_triggered() {
            last_reconcile = Some(tokio::time::Instant::now());
            if let Err(e) = telegram::recovery::reconcile(&state.db, &state.config).await {
                tracing::error!(error = %e, "Stars reconcile failed; trying again later");
            }
        }
    }
}
