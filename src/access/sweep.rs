//! The sweep: moves memberships whose term has run out from `active` to `grace` to `expired`.
//!
//! The decision is the pure [`next_sweep_status`]; everything else here exists to apply it to a
//! million overdue rows without ever fighting a payment:
//!
//! - **Small batches, one transaction each.** Candidates (memberships that still hold access by
//!   their status — [`crate::access::memberships::holds_access_sql!`] — and `expires_at <=` the run's
//!   start) are found a window at a time ([`due_window`]: up to [`WINDOW_SIZE`] ids by keyset on
//!   `(expires_at, id)` — the partial index `memberships_sweep_idx` — a plain read), and each
//!   window is sorted by id and cut into batches of a few hundred. By id, a batch's rows are
//!   neighbours in the table and its indexes (ids are handed out in insertion order), so a
//!   batch touches a few pages instead of one per row (walked by `expires_at`, the same run
//!   took about half as long again: `docs/benchmarks.md`). One transaction for the whole run would hold one
//!   advisory lock per row and exhaust the shared lock table (~12,500 rows), and one
//!   transaction per row costs a round trip and a commit per row (~190 s per million). A
//!   renewal that arrives mid-sweep waits for at most one batch.
//! - **The same lock as a payment, never waited for.** Each batch takes
//!   `pg_try_advisory_xact_lock(subscriber_id, channel_id)` for those of its rows that are still
//!   candidates, in one statement that also reads what the decision needs (status, `expires_at`,
//!   the channel's grace period, database time). The statement has no `LIMIT`, so the function
//!   runs only for rows it returns. A row whose lock is held is being renewed (or swept by a
//!   concurrent sweep): it is skipped. A window is a finite list, so a run always terminates.
//! - **Decide from the read, write only if it still holds.** Under READ COMMITTED the statement
//!   that took the lock read the row from a snapshot taken before the lock was granted, so a
//!   renewal may have committed in between and the decision ([`decide`], pure) may be stale.
//!   The write is conditional on the status and `expires_at` the decision was made from, so a
//!   stale decision writes nothing (the row is left to the next run, if it is still due then).
//! - **Decide in Rust, write back set-based.** [`apply_batch`] writes every decision with one
//!   `UPDATE … FROM unnest(…)` that is conditional on the exact status and `expires_at` the
//!   decision was made from (the `UPDATE` reads each row's newest version after locking it),
//!   and writes the `membership_events` rows (cause `sweep`) and the Telegram effects (revoke,
//!   grace notice, each keyed on its event) for exactly the rows it updated, in the same
//!   statement. The effects go to the `sweep_queue`, one narrow row each, which the effects
//!   worker makes `effects` rows of a chunk at a time
//!   ([`crate::outbox::effects::materialize_sweep_queue`]): the batch, which holds pair locks, writes
//!   only what the transition needs to be decided and never lost, not a full outbox row with
//!   its indexes for an effect Telegram's pace will reach only later. This batch write is the one membership write outside
//!   [`crate::access::memberships`]: moving it there would split one statement (and one round trip per
//!   batch) across modules; it uses the same status vocabulary and predicate.
//!
//! **Lifetime access** (`expires_at = 'infinity'`, [`crate::common::expiry::Expiry::Never`]) is never a
//! candidate: `expires_at <= cutoff` never holds for infinity (the cutoff is the run's start, a
//! finite database time), so the window's range scan of `memberships_sweep_idx` ends before
//! the first lifetime row and no statement here reads, locks or writes one. That is also why
//! the candidates' expiries are plain instants (`DateTime<Utc>`): every row they are read from
//! is finite.
//!
//! A run also purges expired idempotency keys. Every batch is idempotent and commits on its own,
//! so stopping a run between (or even inside) batches is harmless: the next run carries on.
//!
//! **Batches commit without waiting for the WAL flush** (`synchronous_commit = off` for the
//! batch transaction only): a batch's state is derived entirely from `expires_at` and the
//! clock, so if PostgreSQL crashes before the last batches' commit records reach disk (at most
//! three `wal_writer_delay`s, 600 ms by default), those batches are lost whole — transition,
//! event and effect together, never a part — and the next run makes them again. Nothing that
//! saw a batch's writes can outlive it: a renewal that waited for a batch's pair lock, and the
//! worker's making and claim of a batch's effect (committed before it calls Telegram), commit
//! synchronously, and flushing such a commit flushes the batch's commit before it (WAL is one
//! sequence). What this saves is one disk flush wait per batch.

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use chrono::{DateTime, Duration, Utc};
use deadpool_postgres::{Pool, Transaction};
use futures::TryStreamExt;
use serde::Serialize;

pub use crate::access::memberships::Status;
use crate::common::error::ApiError;

/// Rows per batch transaction unless the caller says otherwise: small enough that a renewal
/// waiting on one of them waits milliseconds, large enough that per-transaction costs vanish.
pub const DEFAULT_BATCH_SIZE: usize = 500;
/// Candidates found per window (see the module doc): their ids are held in memory (8 bytes
/// each, so at most 8 MB) and sorted, so that batches take neighbouring rows.
pub const WINDOW_SIZE: usize = 1_000_000;
/// The largest batch accepted: each row holds an advisory lock until its batch commits, and the
/// shared lock table is finite (the default configuration runs out near 12,500).
pub const MAX_BATCH_SIZE: usize = 5_000;

/// What the sweep makes of a membership at `now` (API.md "Membership lifecycle"):
/// `expired` stays `expired`; before `expires_at` nothing changes; from `expires_at` until
/// `expires_at + grace` it is `grace`; from `expires_at + grace` on it is `expired` (with zero
/// grace, `active` goes straight to `expired`). It never moves backwards: a `grace` membership
/// whose `expires_at` was pushed into the future stays `grace` until a payment or staff makes it
/// `active`. A grace day is 24 hours; a negative grace counts as zero.
pub fn next_sweep_status(
    status: Status,
    expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
    grace_period_days: i32,
) -> Status {
    if status == Status::Expired || now < expires_at {
        return status;
    }
    let grace = Duration::days(i64::from(grace_period_days.max(0)));
    match expires_at.checked_add_signed(grace) {
        Some(grace_end) if now >= grace_end => Status::Expired,
        // Past the end of representable time the grace never ends.
        _ => Status::Grace,
    }
}

/// What one run did; the body of `POST /api/sweep` and the output of `subgate sweep`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"examined": 12, "to_grace": 3, "to_expired": 2, "skipped": 0, "duration_ms": 41}))]
pub struct SweepReport {
    /// Candidates looked at: not expired and `expires_at` at or before the run's start
    /// (skipped ones included; a `grace` membership inside its window is examined every run).
    pub examined: u64,
    /// Memberships moved to `grace`.
    pub to_grace: u64,
    /// Memberships moved to `expired` (from `active` or `grace`).
    pub to_expired: u64,
    /// Candidates whose pair lock was held by another transaction (a renewal in progress, or a
    /// concurrent sweep): left alone this run.
    pub skipped: u64,
    /// Wall time of the run.
    pub duration_ms: u64,
}

/// Who started a sweep run, as [`LastSweep`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = SweepTrigger)]
pub enum Trigger {
    /// The in-process schedule (`SWEEP_INTERVAL_SECS`).
    Schedule,
    /// A staff account (`POST /api/sweep` with a JWT).
    Staff,
    /// Cron with the `SWEEP_TOKEN` (`POST /api/sweep`).
    SweepToken,
}

/// One finished run, as the staff overview shows it. A failed run has no report; its cause is
/// in the log, not here (it may carry database detail staff pages must not show).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SweepRun {
    pub finished_at: DateTime<Utc>,
    pub trigger: Trigger,
    pub ok: bool,
    pub report: Option<SweepReport>,
}

/// The last run this server process finished, scheduled or asked for through the API. It lives
/// in memory (the schema keeps no log of runs): a restart forgets it, and runs of
/// `subgate sweep` (another process) are not in it. What a run changed is in
/// `membership_events` (cause `sweep`) either way.
#[derive(Debug, Clone, Default)]
pub struct LastSweep(Arc<Mutex<Option<SweepRun>>>);

impl LastSweep {
    /// Records a finished run.
    pub fn record(&self, trigger: Trigger, result: &Result<SweepReport, ApiError>) {
        let run = SweepRun {
            finished_at: Utc::now(),
            trigger,
            ok: result.is_ok(),
            report: result.as_ref().ok().cloned(),
        };
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(run);
    }

    /// The last run recorded, if any.
    pub fn get(&self) -> Option<SweepRun> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One decision of a batch: move membership `id` from `from` to `to`, provided it still has
/// status `from` and this `expires_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub id: i64,
    pub from: Status,
    pub to: Status,
    pub expires_at: DateTime<Utc>,
}

/// A transition [`apply_batch`] actually wrote (its event row and effect are written too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub membership_id: i64,
    pub subscriber_id: i32,
    pub channel_id: i32,
    pub from: Status,
    pub to: Status,
    pub expires_at: DateTime<Utc>,
}

/// Runs one full sweep in batches of `batch_size` rows (clamped to `1..=`[`MAX_BATCH_SIZE`]).
pub async fn sweep(pool: &Pool, batch_size: usize) -> Result<SweepReport, ApiError> {
    sweep_until(pool, batch_size, || false).await
}

/// Like [`sweep`], but checks `stop` before each batch and ends the run early (with the counts so
/// far) when it says so; the in-process schedule passes its shutdown signal.
pub async fn sweep_until(
    pool: &Pool,
    batch_size: usize,
    stop: impl Fn() -> bool,
) -> Result<SweepReport, ApiError> {
    sweep_windowed(pool, batch_size, WINDOW_SIZE, stop).await
}

/// [`sweep_until`] with windows of `window_size` candidates (at least one); public so tests can
/// run a sweep over several windows without a million rows.
pub async fn sweep_windowed(
    pool: &Pool,
    batch_size: usize,
    window_size: usize,
    stop: impl Fn() -> bool,
) -> Result<SweepReport, ApiError> {
    let window_size = window_size.max(1);
    let started = Instant::now();
    let run = crate::common::metrics::SweepRun::start();
    let batch_size = batch_size.clamp(1, MAX_BATCH_SIZE);
    // The run's horizon is fixed at its start, so a run always ends even while time moves on;
    // rows that fall due during the run are the next run's.
    let cutoff: DateTime<Utc> = {
        let client = pool.get().await?;
        let purged = crate::staff::idempotency::purge_expired(&**client).await?;
        if purged > 0 {
            tracing::info!(purged, "expired idempotency keys purged");
        }
        client
            .query_one("SELECT statement_timestamp() AS now", &[])
            .await?
            .try_get("now")?
    };
    let mut report = SweepReport::default();
    let mut cursor: Option<(DateTime<Utc>, i64)> = None;
    'run: loop {
        let Window { mut ids, last } = {
            let client = pool.get().await?;
            due_window(&client, cutoff, cursor, window_size).await?
        };
        let Some(last) = last else { break };
        cursor = Some(last);
        // Batches of neighbouring rows: by id, the order the rows were inserted in.
        ids.sort_unstable();
        for chunk in ids.chunks(batch_size) {
            if stop() {
                tracing::info!("sweep stopped early");
                break 'run;
            }
            let batch = sweep_batch(pool, cutoff, chunk).await?;
            report.examined += batch.examined as u64;
            report.skipped += batch.skipped;
            for t in &batch.transitions {
                match t.to {
                    Status::Grace => report.to_grace += 1,
                    Status::Expired => report.to_expired += 1,
                    Status::Active => {}
                }
            }
        }
        if ids.len() < window_size {
            break;
        }
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    run.finished(
        report.duration_ms,
        report.to_grace,
        report.to_expired,
        report.skipped,
    );
    tracing::info!(
        examined = report.examined,
        to_grace = report.to_grace,
        to_expired = report.to_expired,
        skipped = report.skipped,
        duration_ms = report.duration_ms,
        "sweep finished"
    );
    Ok(report)
}

/// What one batch transaction did.
struct BatchOutcome {
    examined: usize,
    skipped: u64,
    transitions: Vec<Transition>,
}

/// One batch in one transaction: try-lock (and read) the given candidates that are still due,
/// decide for the locked ones, write. A deadlock victim runs again (`transaction!`).
async fn sweep_batch(
    pool: &Pool,
    cutoff: DateTime<Utc>,
    ids: &[i64],
) -> Result<BatchOutcome, ApiError> {
    crate::transaction!(pool, |tx| {
        // The sweep never waits for a lock it could skip; this bounds the one wait it has (a
        // membership row held by a writer outside the lock order, e.g. a cascading delete).
        // A batch's commit does not wait for its WAL flush (see the module doc): what a crash
        // could lose of the last batches, the next run does again.
        tx.batch_execute("SET LOCAL lock_timeout = '5s'; SET LOCAL synchronous_commit = off")
            .await?;
        let candidates = lock_candidates(tx, cutoff, ids).await?;
        let skipped = candidates.iter().filter(|c| !c.locked).count() as u64;
        let decisions = decide(&candidates);
        // Also enqueues the transitions' Telegram effects (kicks, notices), in this transaction.
        let transitions = apply_batch(tx, &decisions).await?;
        Ok(BatchOutcome {
            examined: candidates.len(),
            skipped,
            transitions,
        })
    })
}

/// A window of a run's candidates, as [`due_window`] finds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// Their ids, in keyset order.
    pub ids: Vec<i64>,
    /// The keyset position `(expires_at, id)` of the last one; `None` when there are none.
    pub last: Option<(DateTime<Utc>, i64)>,
}

/// The next `limit` candidates of a run after the keyset position `after`, in keyset order
/// `(expires_at, id)`: memberships that still hold access by their status and fell due at or
/// before `cutoff`. A plain read of the partial index `memberships_sweep_idx`, no lock; each
/// batch checks its rows again under the locks. Streamed: a window holds 8 bytes a candidate.
pub async fn due_window(
    client: &impl deadpool_postgres::GenericClient,
    cutoff: DateTime<Utc>,
    after: Option<(DateTime<Utc>, i64)>,
    limit: usize,
) -> Result<Window, ApiError> {
    let (after_expires, after_id) = match after {
        Some((e, id)) => (Some(e), id),
        None => (None, 0),
    };
    let stmt = client.prepare_cached(DUE_SQL).await?;
    let limit = limit as i64;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&cutoff, &after_expires, &after_id, &limit];
    let rows = client.query_raw(&stmt, params).await?;
    futures::pin_mut!(rows);
    let mut window = Window::default();
    while let Some(r) = rows.try_next().await? {
        let id = r.try_get("id")?;
        window.ids.push(id);
        window.last = Some((r.try_get("expires_at")?, id));
    }
    Ok(window)
}

const DUE_SQL: &str = concat!(
    "SELECT m.id, m.expires_at
     FROM memberships m
     WHERE ",
    crate::access::memberships::holds_access_sql!("m"),
    "
       AND m.expires_at <= $1
       AND (m.expires_at, m.id) > (COALESCE($2::timestamptz, '-infinity'), $3::bigint)
     ORDER BY m.expires_at, m.id
     LIMIT $4"
);

/// A candidate of a batch, by id, as the statement that tried its lock read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub id: i64,
    pub status: Status,
    pub expires_at: DateTime<Utc>,
    /// Its channel's grace period, in days.
    pub grace_period_days: i32,
    /// Database time of the statement (`statement_timestamp()`).
    pub now: DateTime<Utc>,
    /// Whether this transaction now holds the pair's advisory lock; `false`: skipped.
    pub locked: bool,
}

/// Step one of a batch: those of `ids` that are still candidates (holding access by their
/// status, due at or before `cutoff`), by id, with their channel's grace and database time,
/// each with whether its pair lock was taken (never waited for). One statement; the lock
/// function runs only for the rows it returns (no `LIMIT` sits above it to discard any).
/// Public, like [`decide`] and [`apply_batch`], so tests can commit a concurrent change between
/// the steps.
pub async fn lock_candidates(
    tx: &Transaction<'_>,
    cutoff: DateTime<Utc>,
    ids: &[i64],
) -> Result<Vec<Candidate>, ApiError> {
    let rows = crate::db::rows(tx, CANDIDATES_SQL, &[&cutoff, &ids]).await?;
    rows.iter()
        .map(|r| {
            Ok(Candidate {
                id: r.try_get("id")?,
                status: r.try_get("status")?,
                expires_at: r.try_get("expires_at")?,
                grace_period_days: r.try_get("grace_period_days")?,
                now: r.try_get("now")?,
                locked: r.try_get("locked")?,
            })
        })
        .collect()
}

const CANDIDATES_SQL: &str = concat!(
    "SELECT m.id, m.status, m.expires_at, ch.grace_period_days,
            statement_timestamp() AS now,
            pg_try_advisory_xact_lock(m.subscriber_id, m.channel_id) AS locked
     FROM memberships m JOIN channels ch ON ch.id = m.channel_id
     WHERE m.id = ANY($2)
       AND ",
    crate::access::memberships::holds_access_sql!("m"),
    "
       AND m.expires_at <= $1
     ORDER BY m.id"
);

/// Step two of a batch (pure): the changes [`next_sweep_status`] asks for, for the candidates
/// whose lock was taken, by id (so the write locks rows in one order). Each is decided from the
/// row as the locking statement read it, which may be older than the lock: [`apply_batch`]
/// writes it only if the row still has that status and `expires_at`.
pub fn decide(candidates: &[Candidate]) -> Vec<Decision> {
    candidates
        .iter()
        .filter(|c| c.locked)
        .filter_map(|c| {
            let to = next_sweep_status(c.status, c.expires_at, c.now, c.grace_period_days);
            (to != c.status).then_some(Decision {
                id: c.id,
                from: c.status,
                to,
                expires_at: c.expires_at,
            })
        })
        .collect()
}

/// The sweep's `membership_events` rows, as the data-modifying CTE of [`APPLY_BATCH_SQL`] after
/// `updated` (the rows the batch's `UPDATE` changed): one `sweep` event per transition, returning
/// `(id, membership_id)` so [`crate::outbox::effects::SWEEP_EFFECTS_CTE`] keys each queued effect
/// on its event. The statement spells it whole; this copy serves the benchmarks that time the
/// statement's parts (a unit test keeps the two alike).
pub const SWEEP_EVENTS_CTE: &str = "events AS (
    INSERT INTO membership_events
        (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause)
    SELECT id, from_status, status, expires_at, expires_at, 'sweep' FROM updated
    RETURNING id, membership_id
)";

/// The batch write: the conditional `UPDATE`, then, for exactly the rows it changed, their
/// events ([`SWEEP_EVENTS_CTE`]) and their Telegram effects keyed on those events, queued
/// ([`crate::outbox::effects::SWEEP_EFFECTS_CTE`]) — one statement, so one round trip and one
/// pass over the updated rows. `$1`–`$4` are the decisions' ids, from and to statuses and
/// `expires_at`, in id order ([`apply_batch`]).
const APPLY_BATCH_SQL: &str = include_str!("sweep_apply_batch.sql");

/// Step three of a batch: writes its decisions in one statement, inside the batch transaction
/// (which holds the rows' pair locks): the `UPDATE` applies a decision only if the row still has
/// the status and `expires_at` it was made from; for each row actually updated one
/// `membership_events` row (cause `sweep`, `expires_at_before = expires_at_after`) is inserted,
/// and its revoke or grace notice is queued for the effects outbox, keyed on that event (so the
/// effects commit exactly when the transitions do, one per transition). Returns those
/// transitions.
pub async fn apply_batch(
    tx: &Transaction<'_>,
    decisions: &[Decision],
) -> Result<Vec<Transition>, ApiError> {
    if decisions.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = decisions.iter().map(|d| d.id).collect();
    let from: Vec<Status> = decisions.iter().map(|d| d.from).collect();
    let to: Vec<Status> = decisions.iter().map(|d| d.to).collect();
    let expires: Vec<DateTime<Utc>> = decisions.iter().map(|d| d.expires_at).collect();
    let stmt = tx.prepare_cached(APPLY_BATCH_SQL).await?;
    let rows = tx.query(&stmt, &[&ids, &from, &to, &expires]).await?;
    rows.iter()
        .map(|r| {
            Ok(Transition {
                membership_id: r.try_get("id")?,
                subscriber_id: r.try_get("subscriber_id")?,
                channel_id: r.try_get("channel_id")?,
                from: r.try_get("from_status")?,
                to: r.try_get("status")?,
                expires_at: r.try_get("expires_at")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn the_batch_write_holds_the_ctes_the_benchmarks_time() {
        let ctes = format!(
            "), {SWEEP_EVENTS_CTE}, {}\n",
            crate::outbox::effects::SWEEP_EFFECTS_CTE
        );
        assert!(APPLY_BATCH_SQL.contains(&ctes));
    }

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 30, 12, 0, 0).unwrap()
    }

    /// The moments that matter relative to `expires_at` for a grace of `grace` days.
    fn moments(grace: i32) -> Vec<(&'static str, DateTime<Utc>)> {
        let e = t0();
        let g = Duration::days(i64::from(grace));
        let mut m = vec![
            ("long before expires_at", e - Duration::days(400)),
            ("just before expires_at", e - Duration::microseconds(1)),
            ("exactly at expires_at", e),
        ];
        if grace > 0 {
            m.push(("just inside grace", e + Duration::microseconds(1)));
            m.push(("middle of grace", e + g / 2));
            m.push(("last moment of grace", e + g - Duration::microseconds(1)));
        }
        m.push(("exactly at expires_at + grace", e + g));
        m.push(("just after grace", e + g + Duration::microseconds(1)));
        m.push(("long after grace", e + g + Duration::days(4000)));
        m
    }

    /// The table the contract describes, written out independently of the implementation.
    fn expected(status: Status, moment: &str, grace: i32) -> Status {
        use Status::*;
        match (status, moment) {
            (Expired, _) => Expired,
            (s, "long before expires_at" | "just before expires_at") => s,
            (_, "exactly at expires_at") if grace == 0 => Expired,
            (_, "exactly at expires_at")
            | (_, "just inside grace" | "middle of grace" | "last moment of grace") => Grace,
            (_, "exactly at expires_at + grace" | "just after grace" | "long after grace") => {
                Expired
            }
            other => panic!("moment not covered: {other:?}"),
        }
    }

    #[test]
    fn every_status_at_every_moment_with_and_without_grace() {
        let mut checked = 0;
        for grace in [0, 1, 3, 7, 365] {
            for status in Status::ALL {
                for (name, now) in moments(grace) {
                    let got = next_sweep_status(status, t0(), now, grace);
                    assert_eq!(
                        got,
                        expected(status, name, grace),
                        "{status} {name} with {grace} days of grace"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 3 * (6 + 4 * 9));
    }

    #[test]
    fn zero_grace_goes_straight_from_active_to_expired() {
        let e = t0();
        assert_eq!(
            next_sweep_status(Status::Active, e, e - Duration::seconds(1), 0),
            Status::Active
        );
        assert_eq!(next_sweep_status(Status::Active, e, e, 0), Status::Expired);
        assert_eq!(
            next_sweep_status(Status::Active, e, e + Duration::days(1), 0),
            Status::Expired
        );
    }

    #[test]
    fn grace_boundaries_with_grace() {
        let e = t0();
        assert_eq!(next_sweep_status(Status::Active, e, e, 3), Status::Grace);
        assert_eq!(
            next_sweep_status(Status::Active, e, e + Duration::days(3), 3),
            Status::Expired
        );
        assert_eq!(
            next_sweep_status(
                Status::Grace,
                e,
                e + Duration::days(3) - Duration::microseconds(1),
                3
            ),
            Status::Grace
        );
        assert_eq!(
            next_sweep_status(Status::Grace, e, e + Duration::days(3), 3),
            Status::Expired
        );
    }

    #[test]
    fn expired_is_terminal() {
        let e = t0();
        for grace in [0, 5] {
            for now in [e - Duration::days(30), e, e + Duration::days(30)] {
                assert_eq!(
                    next_sweep_status(Status::Expired, e, now, grace),
                    Status::Expired
                );
            }
        }
    }

    #[test]
    fn never_moves_backwards() {
        let rank = |s: Status| match s {
            Status::Active => 0,
            Status::Grace => 1,
            Status::Expired => 2,
        };
        for grace in [0, 1, 30] {
            for status in Status::ALL {
                for (_, now) in moments(grace) {
                    let next = next_sweep_status(status, t0(), now, grace);
                    assert!(
                        rank(next) >= rank(status),
                        "{status} → {next} at {now} with grace {grace}"
                    );
                }
            }
        }
        // A grace membership whose expires_at was pushed into the future stays grace.
        let e = t0();
        assert_eq!(
            next_sweep_status(Status::Grace, e, e - Duration::days(10), 3),
            Status::Grace
        );
    }

    #[test]
    fn applying_twice_changes_nothing_more() {
        for grace in [0, 2] {
            for status in Status::ALL {
                for (_, now) in moments(grace) {
                    let once = next_sweep_status(status, t0(), now, grace);
                    assert_eq!(next_sweep_status(once, t0(), now, grace), once);
                }
            }
        }
    }

    #[test]
    fn negative_grace_counts_as_zero() {
        let e = t0();
        assert_eq!(next_sweep_status(Status::Active, e, e, -5), Status::Expired);
    }

    #[test]
    fn grace_past_the_end_of_time_never_ends() {
        let e = DateTime::<Utc>::MAX_UTC - Duration::days(1);
        assert_eq!(
            next_sweep_status(Status::Active, e, DateTime::<Utc>::MAX_UTC, 365),
            Status::Grace
        );
    }

    #[test]
    fn status_round_trips() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
        assert_eq!(Status::parse("Active"), None);
        assert_eq!(Status::parse(""), None);
    }

    #[test]
    fn report_serializes_as_the_contract_says() {
        let r = SweepReport {
            examined: 5,
            to_grace: 1,
            to_expired: 2,
            skipped: 1,
            duration_ms: 7,
        };
        assert_eq!(
            serde_json::to_value(r).unwrap(),
            serde_json::json!({"examined": 5, "to_grace": 1, "to_expired": 2, "skipped": 1, "duration_ms": 7})
        );
    }
}
