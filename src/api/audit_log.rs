//! `GET /api/audit-log`: the record of every staff write ([`crate::staff::audit_log`]), read-only.

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{ApiQuery, Errors, Page, Paging, auth::Staff, check_text, schemas::Problem};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    staff::audit_log::{self, Filter, Record},
};

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListAuditLog {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    /// The staff account that made the writes.
    staff_id: Option<i64>,
    /// `<target_type>.<verb>`, e.g. `channel.update`.
    #[param(max_length = 64)]
    action: Option<String>,
    /// e.g. `channel`, `membership`, `staff`.
    #[param(max_length = 64)]
    target_type: Option<String>,
    target_id: Option<i64>,
    /// Rows at or after this instant (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Rows before this instant (RFC 3339).
    to: Option<DateTime<Utc>>,
}

/// `GET /api/audit-log` (filters `staff_id`, `action`, `target_type`, `target_id`, `from`,
/// `to`), by id ascending.
#[utoipa::path(get, path = "/audit-log", operation_id = "listAuditLog", tag = "audit log",
    params(ListAuditLog),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of audit log rows, by id.", body = Page<Record>),
        (status = 422, description = "`limit` out of range, an over-long filter, or `from` after `to`.",
            body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListAuditLog>,
) -> Result<Json<Page<Record>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let mut e = Errors::default();
    check_text(&mut e, "action", q.action.as_deref(), 64);
    check_text(&mut e, "target_type", q.target_type.as_deref(), 64);
    if let (Some(from), Some(to)) = (q.from, q.to)
        && from > to
    {
        e.add("to", "must not be before `from`");
    }
    e.finish()?;
    let filter = Filter {
        staff_id: q.staff_id,
        action: q.action,
        target_type: q.target_type,
        target_id: q.target_id,
        from: q.from,
        to: q.to,
    };
    let items = audit_log::list(
        &state.db.get().await?,
        &filter,
        paging.after,
        paging.fetch(),
    )
    .await?;
    Ok(Json(paging.page(items, |r: &Record| r.id)))
}
