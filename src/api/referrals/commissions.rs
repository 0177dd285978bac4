//! `GET /api/commissions` and `GET /api/commissions.csv`: the commission ledger, one line per
//! payment that earned (or was taken back), with its status as it reads now.

use axum::{Json, extract::State, response::Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::super::{ApiQuery, Page, Paging, auth::Staff, exports, schemas::Problem, state_filter};
use crate::{
    app::state::AppState,
    common::{currency, error::ApiError},
    referrals::lines::{self, Kind, Line, Status},
};

/// The filters of the list and the CSV.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListCommissions {
    /// Rows per page (the list only).
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the list only: the previous page's `next_after`).
    after: Option<i64>,
    affiliate_id: Option<i32>,
    /// The status as it reads now: `payable` is a `pending` line past its hold.
    #[param(value_type = Option<Status>)]
    status: Option<String>,
    #[param(value_type = Option<Kind>)]
    kind: Option<String>,
    #[param(pattern = "^[A-Z]{3}$")]
    currency: Option<String>,
    /// The lines a payout paid.
    payout_id: Option<i64>,
    /// Written at or after this time (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Written before this time (RFC 3339).
    to: Option<DateTime<Utc>>,
}

impl ListCommissions {
    fn filter(&self) -> Result<lines::Filter, ApiError> {
        exports::check_window(self.from, self.to)?;
        if let Some(c) = &self.currency
            && !(currency::is_valid_code(c) || currency::is_crypto_asset(c))
        {
            return Err(ApiError::field(
                "currency",
                "must be an ISO 4217 code (e.g. UAH), XTR, or a crypto asset of Crypto Pay (e.g. USDT)",
            ));
        }
        Ok(lines::Filter {
            affiliate_id: self.affiliate_id,
            status: state_filter::<Status>("status", self.status.as_deref())?,
            kind: state_filter::<Kind>("kind", self.kind.as_deref())?,
            currency: self.currency.clone(),
            payout_id: self.payout_id,
            from: self.from,
            to: self.to,
        })
    }
}

/// `GET /api/commissions.csv`: the filters of the list.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportCommissions {
    affiliate_id: Option<i32>,
    #[param(value_type = Option<Status>)]
    status: Option<String>,
    #[param(value_type = Option<Kind>)]
    kind: Option<String>,
    #[param(pattern = "^[A-Z]{3}$")]
    currency: Option<String>,
    payout_id: Option<i64>,
    /// Written at or after this time (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Written before this time (RFC 3339).
    to: Option<DateTime<Utc>>,
}

/// The columns of `commissions.csv`, as [`Line`] serializes.
const CSV_COLUMNS: &[&str] = &[
    "id",
    "affiliate_id",
    "payment_id",
    "subscriber_id",
    "kind",
    "amount_minor",
    "currency",
    "percent",
    "base_minor",
    "status",
    "payable_at",
    "payout_id",
    "created_at",
    "reversed_at",
];

/// `GET /api/commissions` (filters `affiliate_id`, `status`, `kind`, `currency`, `payout_id`,
/// `from`, `to`), by id ascending.
#[utoipa::path(get, path = "/commissions", operation_id = "listCommissions", tag = "referrals",
    params(ListCommissions),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of commission lines, by id.", body = Page<Line>),
        (status = 422, description = "`limit` out of range, an unknown `status` or `kind`, a \
            malformed `currency`, or `from` after `to`.", body = Problem,
            content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListCommissions>,
) -> Result<Json<Page<Line>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let filter = q.filter()?;
    let client = state.db.get().await?;
    let items = lines::list(&client, &filter, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |l| l.id)))
}

/// `GET /api/commissions.csv`: every line the list's filters match, as one file.
#[utoipa::path(get, path = "/commissions.csv", operation_id = "exportCommissions",
    tag = "referrals",
    params(ExportCommissions),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "RFC 4180 CSV with a header row, streamed: the columns of \
            a commission line.", body = String, content_type = "text/csv"),
        (status = 422, description = "An unknown `status` or `kind`, a malformed `currency`, \
            or `from` after `to`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn export(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ExportCommissions>,
) -> Result<Response, ApiError> {
    let filter = ListCommissions {
        limit: None,
        after: None,
        affiliate_id: q.affiliate_id,
        status: q.status,
        kind: q.kind,
        currency: q.currency,
        payout_id: q.payout_id,
        from: q.from,
        to: q.to,
    }
    .filter()?;
    let pool = state.db.clone();
    exports::csv(
        "commissions.csv",
        CSV_COLUMNS,
        move |after| {
            let (pool, filter) = (pool.clone(), filter.clone());
            async move { lines::list(&pool.get().await?, &filter, after, exports::PAGE).await }
        },
        |l: &Line| l.id,
    )
    .await
}
