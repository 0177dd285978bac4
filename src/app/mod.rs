//! The running service: the shared state every handler receives ([`state`]), the HTTP accept
//! loop with its limits ([`server`]), the background loops of `subgate serve`
//! ([`background`]) and the `/metrics` listener with its database sampler ([`metrics`]).
//!
//! Below `api` and `bot` (they take [`state::AppState`]); may import every domain layer below.

pub mod background;
pub mod metrics;
pub mod server;
pub mod state;
pub mod worker;

use crate::{
    common::error,
    config,
    staff::{self, accounts, passwords},
};
use state::AppState;

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

/// Records whether this service issues fiscal receipts (`CHECKBOX_*` set), which the
/// transactions that apply and refund payments read ([`crate::payments::receipts`]): `subgate
/// serve` runs it at start-up, so the payments of a service without Checkbox owe no receipt.
/// Every replica runs with the same settings; a one-off command (`subgate effects`, `staff`)
/// does not change it. A database that is down (or not migrated yet) does not stop the start:
/// it is written once the database answers, tried again every few seconds.
pub async fn bootstrap_receipts(state: &AppState) {
    let enabled = state.config.checkbox.is_some();
    async fn write(db: deadpool_postgres::Pool, enabled: bool) -> Result<(), error::ApiError> {
        let client = db.get().await?;
        crate::payments::receipts::set_enabled(&client, enabled).await
    }
    match write(state.db.clone(), enabled).await {
        Ok(()) => {
            if enabled {
                tracing::info!(
                    "fiscal receipts on: card payments in UAH are registered with Checkbox"
                );
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "whether fiscal receipts are on is not recorded yet; trying again");
            let db = state.db.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                    match write(db.clone(), enabled).await {
                        Ok(()) => {
                            tracing::info!(enabled, "whether fiscal receipts are on is recorded");
                            return;
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "fiscal receipts' setting not recorded yet")
                        }
                    }
                }
            });
        }
    }
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
    let mut account = accounts::find_account(&state.db.get().await?, &normalized).await?;
    if account.is_none() {
        let cost = state.config.bcrypt_cost;
        if accounts::create_staff(
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
        account = accounts::find_account(&state.db.get().await?, &normalized).await?;
    }
    let (email, password) = (email.clone(), password.expose().to_string());
    tokio::spawn(async move {
        let matches = match account {
            Some((_, hash)) => passwords::password_matches(password, hash).await,
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
