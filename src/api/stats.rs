//! `GET /api/stats/revenue`, `/api/stats/members` and `/api/stats/summary`: the statistics of
//! [`crate::reports::stats`], computed in SQL. Read-only.

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ApiQuery, Errors, auth::Staff, schemas::Problem};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    reports::stats::{self, Interval, MAX_INTERVALS, Members, Revenue, Summary},
};

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SeriesQuery {
    /// The first instant, rounded down to the start of its interval (UTC): a date
    /// (`2026-12-01`, its midnight UTC) or an RFC 3339 time.
    #[param(required = true, value_type = String, example = "2026-12-01")]
    from: Option<String>,
    /// The end (exclusive): a date (its midnight UTC) or an RFC 3339 time.
    #[param(required = true, value_type = String, example = "2027-01-01")]
    to: Option<String>,
    /// `day` (default), `week` (ISO, from Monday) or `month`.
    #[param(value_type = Option<String>, pattern = "^(day|week|month)$")]
    interval: Option<String>,
    /// Members only: one channel.
    channel_id: Option<i32>,
}

/// `{"items": [...]}`: a series, by interval start.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Series<T: Serialize> {
    pub items: Vec<T>,
}

/// An instant of a query string: a date (`2026-12-01`, its midnight UTC) or an RFC 3339 time;
/// anything else is recorded against `field`.
fn instant(e: &mut Errors, field: &str, value: Option<&str>) -> Option<DateTime<Utc>> {
    let v = e.required(field, value)?;
    let parsed = match chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        Ok(day) => Some(day.and_time(chrono::NaiveTime::MIN).and_utc()),
        Err(_) => DateTime::parse_from_rfc3339(v)
            .ok()
            .map(|t| t.with_timezone(&Utc)),
    };
    if parsed.is_none() {
        e.add(
            field,
            "must be a date (2026-12-01) or an RFC 3339 time (2026-12-01T00:00:00Z)",
        );
    }
    parsed
}

/// The checked range: 422 naming the field when `from` or `to` is missing or not a date or
/// time, `to` is not after `from`, the interval is unknown, or the range spans more than
/// [`MAX_INTERVALS`] intervals.
fn range(q: &SeriesQuery) -> Result<(DateTime<Utc>, DateTime<Utc>, Interval), ApiError> {
    let mut e = Errors::default();
    let from = instant(&mut e, "from", q.from.as_deref());
    let to = instant(&mut e, "to", q.to.as_deref());
    let interval = match q.interval.as_deref() {
        None => Some(Interval::Day),
        Some(i) => e.state::<Interval>("interval", Some(i)),
    };
    e.finish()?;
    let (Some(from), Some(to), Some(interval)) = (from, to, interval) else {
        return Err(ApiError::internal("checked fields are missing"));
    };
    match stats::intervals(from, to, interval) {
        None => Err(ApiError::field("to", "must be after `from`")),
        Some(n) if n > MAX_INTERVALS => Err(ApiError::field(
            "to",
            format!("the range spans {n} intervals; at most {MAX_INTERVALS}"),
        )),
        Some(_) => Ok((from, to, interval)),
    }
}

/// `GET /api/stats/revenue?from&to&interval`: per interval and currency, gross, refunded and
/// net (minor units) and the payments counted.
#[utoipa::path(get, path = "/stats/revenue", operation_id = "statsRevenue", tag = "statistics",
    params(SeriesQuery),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "Every interval of every currency with revenue in the \
            range, by start then currency.", body = Series<Revenue>),
        (status = 422, description = "`from`/`to` missing, not a date or time, or reversed, an \
            unknown interval, or more than 400 intervals.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn revenue(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<SeriesQuery>,
) -> Result<Json<Series<Revenue>>, ApiError> {
    if q.channel_id.is_some() {
        return Err(ApiError::field(
            "channel_id",
            "revenue is by currency; channel_id filters members only",
        ));
    }
    let (from, to, interval) = range(&q)?;
    let items = stats::revenue(&state.stats, from, to, interval).await?;
    Ok(Json(Series { items }))
}

/// `GET /api/stats/members?from&to&interval[&channel_id]`: per interval and channel, live
/// members at the end, new, renewed, expired (churned), trials started and converted.
#[utoipa::path(get, path = "/stats/members", operation_id = "statsMembers", tag = "statistics",
    params(SeriesQuery),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "Every interval of every channel (or of `channel_id`), \
            by start then channel.", body = Series<Members>),
        (status = 422, description = "`from`/`to` missing, not a date or time, or reversed, an \
            unknown interval, or more than 400 intervals.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn members(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<SeriesQuery>,
) -> Result<Json<Series<Members>>, ApiError> {
    let (from, to, interval) = range(&q)?;
    let items = stats::members(&state.stats, from, to, interval, q.channel_id).await?;
    Ok(Json(Series { items }))
}

/// `GET /api/stats/summary`: MRR by currency, active members, 30-day churn and renewal rate.
#[utoipa::path(get, path = "/stats/summary", operation_id = "statsSummary", tag = "statistics",
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The business now.", body = Summary)),
)]
pub async fn summary(State(state): State<AppState>, _: Staff) -> Result<Json<Summary>, ApiError> {
    Ok(Json(stats::summary(&state.stats).await?))
}
