//! subgate sells access to private Telegram channels: payments come in through four doors
//! (a signed card-gateway webhook, WayForPay's callback, Telegram Stars, Stripe), and each
//! payment turns into channel access exactly once.
//!
//! The crate is a library with a thin binary (`main.rs` parses the CLI). Layers point down:
//! [`api`] (HTTP: every route and handler, the doors included) → the domain modules → [`db`].
//! `docs/ARCHITECTURE.md` names every module with what it owns and may call.
//! - [`api`]: the router ([`router`]), handlers by resource, login, the payment doors, the
//!   extractors, `Idempotency-Key`, problem+json rendering;
//! - [`plans`]: the ways a channel is sold (plans, bundles, trials, lifetime);
//! - [`promo_codes`]: promo codes and their exact uses;
//! - [`orders`]: orders, the one lock order, seats and holds;
//! - [`payments`]: the one `apply_payment` core and the pure signature and money code;
//! - [`memberships`]: every read and write of membership rows (the sweep's batch write aside)
//!   and the events and effects of their changes; [`expiry`]: when a term ends (an instant, or
//!   never: lifetime access);
//! - [`sweep`]: the batched, lock-respecting move of overdue memberships to grace and expired;
//! - [`bot`]: the buyer side of the bot (catalogue, buy button, invoices, `/subscriptions`);
//! - [`effects`]: the outbox of Telegram effects; [`worker`]: the effects worker that performs
//!   them;
//! - [`telegram`]: the Telegram decisions (pre-checkout, join requests), the Stars reconcile
//!   (payment recovery) and the Bot API client;
//! - [`server`]: the HTTP accept loop with its connection cap and header and idle timeouts;
//! - [`metrics`]: Prometheus metrics on their own listener (`METRICS_ADDR`);
//! - [`api::console`]: the staff console at `/console`, a static client of the staff API;
//! - [`auth`], [`idempotency`]: staff accounts and tokens, idempotency keys, without HTTP;
//! - [`config`], [`state`], [`db`], [`error`]: configuration, shared state, the database, the
//!   one error type.

pub mod api;
pub mod audit_log;
pub mod audits;
pub mod auth;
pub mod bot;
pub mod channels;
pub mod config;
pub mod currency;
pub mod db;
pub mod effects;
pub mod error;
pub mod exemptions;
pub mod expiry;
pub mod gateway_checks;
pub mod idempotency;
pub mod ids;
pub mod memberships;
pub mod metrics;
pub mod orders;
pub mod outbound;
pub mod payments;
pub mod plans;
pub mod present;
pub mod promo_codes;
pub mod reconcile;
pub mod server;
pub mod staff;
pub mod state;
pub mod stats;
pub mod subscribers;
pub mod sweep;
pub mod telegram;
pub mod translations;
pub mod vocabulary;
pub mod worker;

use shutdown::ShutdownSignal;
use tokio::net::TcpListener;

pub use api::router::router;
pub use config::Config;
pub use state::AppState;

/// Sets up logging to standard output by `LOG_FORMAT`; the filter comes from `RUST_LOG`
/// (default `info`).
pub fn init_tracing(format: config::LogFormat) {
    init_tracing_to(format, std::io::stdout);
}

/// Like [`init_tracing`], but logs go to standard error: for CLI commands whose standard output
/// is their result (`subgate sweep` prints its JSON report there).
pub fn init_tracing_stderr(format: config::LogFormat) {
    init_tracing_to(format, std::io::stderr);
}

/// Pretty logs are coloured only when `writer` is a terminal: logs redirected to a file or a
/// pipe stay plain text. JSON logs are one object per line: the event's fields at the top, the
/// request's (request id, route, …) under `span` (the innermost span; no `spans` list, which
/// would repeat them).
fn init_tracing_to<W>(format: config::LogFormat, writer: fn() -> W)
where
    W: std::io::Write + std::io::IsTerminal + 'static,
{
    use tracing_subscriber::{EnvFilter, fmt};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(writer().is_terminal())
        .with_writer(writer);
    let _ = match format {
        config::LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_span_list(false)
            .try_init(),
        config::LogFormat::Pretty => builder.try_init(),
    };
}

/// Creates the first staff account from `ADMIN_EMAIL`/`ADMIN_PASSWORD` once; never overwrites.
/// When the account already exists, says whether `ADMIN_PASSWORD` is its password, so nobody
/// is left trying a password that was never applied: that check is a bcrypt run, so it runs in
/// the background and its log line may follow the server's "listening" line. Only the very
/// first start (which creates the account) hashes on the start path.
pub async fn bootstrap_admin(state: &AppState) -> Result<(), error::ApiError> {
    let (Some(email), Some(password)) = (&state.config.admin_email, &state.config.admin_password)
    else {
        return Ok(());
    };
    let normalized = email.trim().to_lowercase();
    let mut account = auth::find_account(&state.db.get().await?, &normalized).await?;
    if account.is_none() {
        let cost = state.config.bcrypt_cost;
        if auth::create_staff(
            &state.db,
            email,
            password.expose(),
            staff::Role::Owner,
            cost,
        )
        .await?
        {
            tracing::info!(email = %email, "admin account created from ADMIN_EMAIL");
            return Ok(());
        }
        // Created meanwhile by another process starting at the same time.
        account = auth::find_account(&state.db.get().await?, &normalized).await?;
    }
    let (email, password) = (email.clone(), password.expose().to_string());
    tokio::spawn(async move {
        let matches = match account {
            Some((_, hash)) => auth::password_matches(password, hash).await,
            None => false,
        };
        if matches {
            tracing::info!(
                email = %email,
                "admin account exists; ADMIN_PASSWORD is its password"
            );
        } else {
            tracing::warn!(
                email = %email,
                "admin account exists with another password; ADMIN_PASSWORD was NOT applied \
                 (it is used only to create the account, never to change a password)"
            );
        }
    });
    Ok(())
}

/// Serves HTTP until SIGTERM or Ctrl-C, then lets in-flight requests finish. Connections are
/// served under `MAX_CONNECTIONS`, `HEADER_READ_TIMEOUT_SECS` and `IDLE_TIMEOUT_SECS`
/// ([`server`]).
pub async fn serve(state: AppState) -> std::io::Result<()> {
    if let Some(warning) = bot::card_page_warning(&state.config) {
        tracing::warn!("{warning}");
    }
    let addr = state.config.bind_addr;
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(%addr, "listening");
    let shutdown = ShutdownSignal::new();
    let limits = server::ConnectionLimits {
        header_read_timeout: state.config.header_read_timeout,
        idle_timeout: state.config.idle_timeout,
        max_connections: state.config.max_connections,
    };
    let metrics = metrics::listen(
        state.config.metrics_addr,
        state.db.clone(),
        limits,
        shutdown.clone(),
    )
    .await?;
    let background = tokio::spawn(background::run(state.clone(), shutdown.clone()));
    let signal = shutdown.clone();
    let served = server::serve(listener, router(state), limits, async move {
        wait_for_signal().await;
        tracing::info!("shutting down: finishing in-flight requests");
        signal.trigger();
    })
    .await;
    // However serving ended, the background loops stop too, and are waited for.
    shutdown.trigger();
    let _ = background.await;
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    match &served {
        Ok(()) => tracing::info!("stopped"),
        Err(e) => tracing::error!(error = %e, "server failed; background loops stopped"),
    }
    served
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

pub mod background;
#[cfg(test)]
mod layers;
pub mod shutdown;
