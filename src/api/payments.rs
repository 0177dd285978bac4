//! `/api/payments`: read-only view of every payment any door stored, so staff can find the ones
//! that need a human (`outcome=needs_review`) or a refund. Payments are written only by
//! [`crate::payments::core::apply_payment`] and never deleted.

use axum::{Json, extract::State, response::Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ApiQuery, Page, Paging, PathId, auth::Staff, exports, schemas::Problem, state_filter};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    payments::{
        core::{self, Outcome, Payment},
        receipts,
    },
};

/// A payment as staff see it: the stored payment and its fiscal receipt.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PaymentView {
    #[serde(flatten)]
    payment: Payment,
    /// The payment's fiscal (sale) receipt at Checkbox; null when it owes none (receipts off,
    /// not a card payment in UAH, not applied).
    receipt: Option<receipts::View>,
}

/// `payments` with their receipts (one statement for the lot).
async fn with_receipts(
    client: &impl deadpool_postgres::GenericClient,
    payments: Vec<Payment>,
) -> Result<Vec<PaymentView>, ApiError> {
    let ids: Vec<i64> = payments.iter().map(|p| p.id).collect();
    let mut views = receipts::views(client, &ids, receipts::Kind::Sale).await?;
    Ok(payments
        .into_iter()
        .map(|payment| PaymentView {
            receipt: views.remove(&payment.id),
            payment,
        })
        .collect())
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListPayments {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    #[param(value_type = Option<Outcome>)]
    outcome: Option<String>,
    order_id: Option<i64>,
    subscriber_id: Option<i32>,
}

/// `GET /api/payments.csv`: the filters of the list, plus `from`/`to`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportPayments {
    #[param(value_type = Option<Outcome>)]
    outcome: Option<String>,
    order_id: Option<i64>,
    subscriber_id: Option<i32>,
    /// Stored at or after this time (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Stored before this time (RFC 3339).
    to: Option<DateTime<Utc>>,
}

/// The columns of `payments.csv`, as [`Payment`] serializes.
const CSV_COLUMNS: &[&str] = &[
    "id",
    "gateway",
    "external_id",
    "order_reference",
    "order_id",
    "subscriber_id",
    "channel_id",
    "amount_minor",
    "currency",
    "affiliate_fee_minor",
    "paid_at",
    "outcome",
    "reason",
    "created_at",
];

/// `GET /api/payments.csv`: every payment the list's filters (and `from`/`to`) select, by id.
#[utoipa::path(get, path = "/payments.csv", operation_id = "exportPayments", tag = "payments",
    params(ExportPayments),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "RFC 4180 CSV with a header row, streamed: the columns of \
            a Payment.", body = String, content_type = "text/csv"),
        (status = 422, description = "An unknown `outcome`, or `from` after `to`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn export(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ExportPayments>,
) -> Result<Response, ApiError> {
    exports::check_window(q.from, q.to)?;
    let filter = core::Filter {
        outcome: state_filter::<Outcome>("outcome", q.outcome.as_deref())?,
        order_id: q.order_id,
        subscriber_id: q.subscriber_id,
        from: q.from,
        to: q.to,
    };
    let pool = state.db.clone();
    exports::csv(
        "payments.csv",
        CSV_COLUMNS,
        move |after| {
            let (pool, filter) = (pool.clone(), filter.clone());
            async move { core::list(&pool.get().await?, &filter, after, exports::PAGE).await }
        },
        |p: &Payment| p.id,
    )
    .await
}

/// `GET /api/payments` (filters `outcome`, `order_id`, `subscriber_id`), by id ascending.
#[utoipa::path(get, path = "/payments", operation_id = "listPayments", tag = "payments",
    params(ListPayments),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of payments, by id, each with its fiscal receipt.", body = Page<PaymentView>),
        (status = 422, description = "`limit` out of range or an unknown `outcome`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListPayments>,
) -> Result<Json<Page<PaymentView>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let outcome = state_filter::<Outcome>("outcome", q.outcome.as_deref())?;
    let filter = core::Filter {
        outcome,
        order_id: q.order_id,
        subscriber_id: q.subscriber_id,
        ..core::Filter::default()
    };
    let client = state.db.get().await?;
    let items = core::list(&client, &filter, paging.after, paging.fetch()).await?;
    let items = with_receipts(&client, items).await?;
    Ok(Json(paging.page(items, |p| p.payment.id)))
}

/// `GET /api/payments/{id}`.
#[utoipa::path(get, path = "/payments/{id}", operation_id = "getPayment", tag = "payments",
    params(("id" = i64, Path, description = "Payment id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The payment, with its fiscal receipt.", body = PaymentView)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<PaymentView>, ApiError> {
    let client = state.db.get().await?;
    let payment = core::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("payment"))?;
    let view = with_receipts(&client, vec![payment]).await?.pop();
    Ok(Json(view.ok_or_else(|| {
        ApiError::internal("a payment without its view")
    })?))
}
