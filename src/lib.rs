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

pub mod access;
pub mod api;
pub mod app;
pub mod bot;
pub mod catalog;
pub mod common;
pub mod config;
pub mod db;
pub mod orders;
pub mod outbox;
pub mod payments;
pub mod present;
pub mod reports;
pub mod staff;
pub mod telegram;
pub mod telegram_api;

pub use api::router::router;
pub use app::state::AppState;
pub use app::{bootstrap_admin, init_tracing, init_tracing_stderr};
pub use config::Config;

use app::{metrics, server};
use common::shutdown::ShutdownSignal;
use tokio::net::TcpListener;

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
    let background = tokio::spawn(app::background::run(state.clone(), shutdown.clone()));
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

#[cfg(test)]
mod layers;
