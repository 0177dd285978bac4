//! Wake-ups: the worker performs an effect as soon as it is committed instead of at its next
//! poll.
//!
//! **In this process.** Every commit of the transaction runner is announced
//! ([`db::commits`]): the worker of the process that committed wakes at once, without asking
//! the database (a commit that enqueued nothing costs one empty run; commits during a run fold
//! into one more run).
//!
//! **In other processes.** The worker keeps one connection of its own, outside the pool, that
//! `LISTEN`s on [`CHANNEL`] and wakes the worker at each notification from another process.
//! The same connection tells the other processes about this one's commits: at most one
//! `NOTIFY` every [`FORWARD_EVERY`], in a statement of its own. Not a trigger on `effects`, nor a
//! `NOTIFY` in the writing transaction: PostgreSQL then takes a cluster-wide lock at commit and
//! holds it through the commit's WAL flush, which serializes every payment's commit (measured:
//! 16 clients inserting one row each went from about 5,800 to about 390 commits per second).
//! A `NOTIFY` alone in its transaction writes no WAL and holds that lock for a moment.
//!
//! The connection is made from the same configuration as the pool ([`db::connect_config`]:
//! TLS, every host of `DATABASE_URL`, `target_session_attrs`). When it drops — the database
//! restarted, the primary failed over to a standby, an operator terminated it — it is made
//! again with capped exponential backoff, and every (re)connect wakes the worker for a full
//! pass, since notifications sent while nobody listened are lost. A probe every [`PROBE`] on
//! the connection finds one that hangs without an error (a host gone from the network). The
//! worker's poll stays as the fallback and as the timer of effects due later.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use crate::{common::shutdown::ShutdownSignal, config::Secret, db};

/// The channel on which processes tell each other that they committed (effects may be due).
pub const CHANNEL: &str = "subgate_effects";
/// The listening connection's `application_name` (unless `DATABASE_URL` names one), so it can
/// be told apart in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = "subgate effects listener";
/// This process tells the others about its commits at most once per this interval.
pub const FORWARD_EVERY: Duration = Duration::from_millis(5);
/// How often the listening connection is checked with a `SELECT 1`.
pub const PROBE: Duration = Duration::from_secs(5);
/// The first reconnect delay; each failure doubles it up to [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Where the listening connection goes: the pool's `DATABASE_URL` and `DATABASE_CA_CERT`.
#[derive(Clone)]
pub struct Target {
    pub database_url: Secret,
    pub ca_cert: Option<PathBuf>,
}

/// Listens until shutdown, waking `wake` at every notification and after every (re)connect.
pub async fn listen(target: Target, wake: Arc<Notify>, shutdown: ShutdownSignal) {
    // Made once, like the pool's (the CA file is read at start-up only): every reconnect uses it.
    let (mut pg, tls) = match db::connect_config(
        target.database_url.expose(),
        target.ca_cert.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "effects listener: no connection settings; the worker polls");
            return;
        }
    };
    if pg.get_application_name() == Some("subgate") {
        pg.application_name(APPLICATION_NAME);
    }
    let mut failures: u32 = 0;
    while !shutdown.is_triggered() {
        let ended = tokio::select! {
            ended = session(&pg, &tls, &wake) => ended,
            () = shutdown.wait() => return,
        };
        // A session that listened starts the count again: its loss is the first failure.
        failures = if ended.listened { 1 } else { failures + 1 };
        let delay = BACKOFF_BASE
            .saturating_mul(1 << (failures - 1).min(10))
            .min(BACKOFF_CAP);
        if failures == 1 {
            tracing::warn!(
                error = %ended.error,
                retry_in_ms = delay.as_millis() as u64,
                "effects listener: connection lost or refused; reconnecting (the worker polls \
                 meanwhile)"
            );
        } else {
            tracing::debug!(error = %ended.error, failures, "effects listener: reconnect failed");
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.wait() => return,
        }
    }
}

/// Why a session ended, and whether it had been listening.
struct Ended {
    listened: bool,
    error: String,
}

impl Ended {
    fn new(listened: bool, error: impl std::fmt::Display) -> Ended {
        Ended {
            listened,
            error: error.to_string(),
        }
    }
}

/// One connection: connect, `LISTEN`, wake the worker for a full pass, then wake it at every
/// notification until the connection fails (or stops answering the probe).
async fn session(
    pg: &tokio_postgres::Config,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
    wake: &Notify,
) -> Ended {
    let (client, mut connection) = match pg.connect(tls.clone()).await {
        Ok(c) => c,
        Err(e) => return Ended::new(false, e),
    };
    // The connection's messages: each notification wakes the worker; the stream's end (an
    // error, or the server closing it) ends the session.
    let listened = AtomicBool::new(false);
    // This connection's own notifications (its forwarded commits) come back to it too.
    let token = format!("{:016x}", rand::random::<u64>());
    let messages = async {
        let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        loop {
            match stream.next().await {
                Some(Ok(AsyncMessage::Notification(n))) if n.payload() != token => {
                    wake.notify_one();
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return e.to_string(),
                None => return "the server closed the connection".to_string(),
            }
        }
    };
    let listening = async {
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
            return Ended::new(false, e);
        }
        listened.store(true, Ordering::Relaxed);
        tracing::info!("effects listener: listening; a full pass runs now");
        wake.notify_one();
        let mut commits = db::commits();
        let notify = format!("SELECT pg_notify('{CHANNEL}', '{token}')");
        let mut probe_at = tokio::time::Instant::now() + PROBE;
        loop {
            // The probe, or a commit of this process to tell the others about.
            let statement = tokio::select! {
                () = tokio::time::sleep_until(probe_at) => {
                    probe_at = tokio::time::Instant::now() + PROBE;
                    "SELECT 1"
                }
                changed = commits.changed() => {
                    if changed.is_err() {
                        return Ended::new(true, "the commit announcements ended");
                    }
                    notify.as_str()
                }
            };
            match tokio::time::timeout(PROBE, client.simple_query(statement)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Ended::new(true, e),
                Err(_) => return Ended::new(true, "no answer in time"),
            }
            if statement != "SELECT 1" {
                // Commits meanwhile are folded into the next notification.
                tokio::time::sleep(FORWARD_EVERY).await;
            }
        }
    };
    tokio::select! {
        why = messages => Ended::new(listened.load(Ordering::Relaxed), why),
        ended = listening => ended,
    }
}
