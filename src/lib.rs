//! subgate sells access to private Telegram channels and groups: payments come in through five doors
//! (a signed card-gateway webhook, WayForPay's callback, Telegram Stars, Stripe, Monobank), and each
//! payment turns into channel access exactly once.
//!
//! The crate is a library with a thin binary (`main.rs` parses the CLI). One folder per layer,
//! top to bottom; each imports only the folders below it (checked by a unit test over the
//! source, `layers.rs`), and `docs/ARCHITECTURE.md` says what each owns and why the order is so:
//! - [`api`]: HTTP — the router ([`router`]), handlers by resource, the payment doors, the
//!   extractors, `Idempotency-Key`, problem+json, the staff console's files;
//! - [`app`]: the running service — [`AppState`], the accept loop, the background loops, the
//!   effects worker, the `/metrics` listener;
//! - [`bot`]: the buyer side of the bot (catalogue, buy button, `/code`, `/subscriptions`);
//! - [`telegram`]: Telegram decisions (pre-checkout, join requests, chat members, audits) and
//!   the Stars reconcile;
//! - [`payments`]: the one `apply_payment` core, refunds and disputes, one module per gateway;
//! - [`messages`]: messages to members — broadcasts and automations, sent through the outbox;
//! - [`orders`]: orders, the one lock order, seats and holds, trials;
//! - [`reports`]: statistics for staff;
//! - [`catalog`]: channels, plans and promo codes;
//! - [`access`]: subscribers, memberships, the sweep, exemptions;
//! - [`outbox`]: effects rows, the bot's messages, outbound events;
//! - [`staff`]: staff accounts, tokens, the audit log, idempotency keys;
//! - [`telegram_api`]: the Bot API client;
//! - [`config`]: every environment variable, typed;
//! - [`present`]: what a buyer reads;
//! - [`db`]: the pool, migrations, transactions, row mapping;
//! - [`common`]: ids, money, shared words, the error type, metric series.

pub mod access;
pub mod api;
pub mod app;
pub mod bot;
pub mod catalog;
pub mod common;
pub mod config;
pub mod db;
pub mod messages;
pub mod orders;
pub mod outbox;
pub mod payments;
pub mod present;
pub mod referrals;
pub mod reports;
pub mod staff;
pub mod telegram;
pub mod telegram_api;

pub use api::router::router;
pub use app::state::AppState;
pub use app::{bootstrap_admin, bootstrap_receipts, init_tracing, init_tracing_stderr};
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
    let config = state.config.clone();
    tokio::spawn(async move {
        match bot::mini_app::set_menu_button(&config).await {
            Ok(true) => tracing::info!("the bot's menu button opens the member portal"),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "the bot's menu button was not set"),
        }
    });
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
