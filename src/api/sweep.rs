//! `POST /api/sweep`: runs one full sweep ([`crate::access::sweep`]) and answers its report.
//!
//! Callable by staff (JWT) or, so cron needs no login, with `Authorization: Bearer
//! <SWEEP_TOKEN>` when that variable is set. Not idempotency-keyed: a sweep is idempotent by
//! nature (running it twice changes nothing the first run did not). The body is ignored.

use axum::{Json, extract::FromRequestParts, extract::State, http::request::Parts};

use super::auth::{Staff, bearer};
use crate::{
    access::sweep::{self, SweepReport},
    app::state::AppState,
    common::error::ApiError,
    staff::audit_log::Entry,
};

/// Who asked for a sweep.
#[derive(Debug, Clone)]
pub enum SweepCaller {
    /// A request bearing the configured `SWEEP_TOKEN`.
    Cron,
    /// A staff account's JWT.
    Staff(Staff),
}

impl FromRequestParts<AppState> for SweepCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let (Some(configured), Some(token)) = (&state.config.sweep_token, bearer(&parts.headers))
            && configured.matches(token.as_bytes())
        {
            return Ok(SweepCaller::Cron);
        }
        Staff::from_request_parts(parts, state)
            .await
            .map(SweepCaller::Staff)
    }
}

/// `POST /api/sweep` → 200 `{"examined", "to_grace", "to_expired", "skipped", "duration_ms"}`.
///
/// The run is spawned, so a client that disconnects (or a request timeout) does not cut it off
/// between batches; each batch commits on its own either way.
#[utoipa::path(post, path = "/sweep", operation_id = "runSweep", tag = "operations",
    security(("staff_jwt" = []), ("sweep_token" = [])),
    responses((status = 200, description = "What the run did.", body = SweepReport)),
)]
pub async fn run(
    State(state): State<AppState>,
    caller: SweepCaller,
) -> Result<Json<SweepReport>, ApiError> {
    let trigger = match caller {
        SweepCaller::Cron => {
            tracing::info!("sweep requested with the sweep token");
            sweep::Trigger::SweepToken
        }
        SweepCaller::Staff(ref staff) => {
            tracing::info!(staff_id = staff.id, "sweep requested");
            sweep::Trigger::Staff
        }
    };
    let pool = state.db.clone();
    let last = state.last_sweep.clone();
    // Recorded inside the spawned run, so a run whose client went away is recorded too.
    let report = tokio::spawn(async move {
        let result = sweep::sweep(&pool, sweep::DEFAULT_BATCH_SIZE).await;
        last.record(trigger, &result);
        result
    })
    .await
    .map_err(ApiError::internal)??;
    // A sweep commits batch by batch, so its record is written after them, in its own
    // transaction: what the run did.
    if let SweepCaller::Staff(staff) = caller {
        crate::transaction!(state.db, |tx| {
            staff
                .audit(tx, Entry::new("sweep.run", None).after(&report))
                .await
        })?;
    }
    Ok(Json(report))
}
