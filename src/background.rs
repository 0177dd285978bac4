//! Background loops that run inside `subgate serve`. Each `select!`s on its interval and the
//! shutdown signal, and each unit of work is idempotent, so stopping mid-way is harmless.

use crate::{AppState, shutdown::ShutdownSignal};

/// Runs every configured loop until shutdown.
pub async fn run(state: AppState, shutdown: ShutdownSignal) {
    let _ = &state;
    shutdown.wait().await;
}
