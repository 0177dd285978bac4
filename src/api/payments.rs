//! `/api/payments`: every payment any door stored, so staff can find the ones that need a human
//! (`outcome=needs_review`) or a refund, and the one write staff make on a payment: asking for
//! its refund (`POST /api/payments/{id}/refund`, [`crate::payments::refunds::by_staff`]).
//! Payments are written only by the payment core and the refunds, and never deleted.

use axum::{Json, extract::State, http::StatusCode, response::Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    ApiQuery, Errors, Page, Paging, PathId, auth::Staff, exports, idempotency::StaffWrite,
    schemas::Problem, state_filter,
};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    payments::{
        core::{self, Outcome, Payment},
        receipts,
        refunds::by_staff::{self, AskedBy, Requested, StaffRefund},
    },
    staff::audit_log::Entry,
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

/// A payment as `GET /api/payments/{id}` answers it: the payment and its fiscal receipt (as
/// lists show them) and the refund staff asked for of it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PaymentDetail {
    #[serde(flatten)]
    pub payment: Payment,
    /// The payment's fiscal (sale) receipt at Checkbox; null when it owes none (receipts off,
    /// not a card payment in UAH, not applied).
    pub receipt: Option<receipts::View>,
    /// The refund staff asked for (`POST /api/payments/{id}/refund`), with where it stands;
    /// null when none was.
    pub refund: Option<StaffRefund>,
}

/// The body of `POST /api/payments/{id}/refund`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundRequest {
    /// Why the money goes back (1..500 characters, trimmed); kept with the refund, and sent to
    /// WayForPay as the refund's comment.
    #[schema(min_length = 1, max_length = 500, example = "Bought twice by mistake")]
    reason: Option<String>,
}

/// The longest reason, in characters.
const REASON_MAX: usize = 500;

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

/// `GET /api/payments/{id}`: the payment and the refund staff asked for of it.
#[utoipa::path(get, path = "/payments/{id}", operation_id = "getPayment", tag = "payments",
    params(("id" = i64, Path, description = "Payment id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The payment, with its fiscal `receipt` and `refund`.", body = PaymentDetail)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<PaymentDetail>, ApiError> {
    let client = state.db.get().await?;
    let payment = core::get(&client, id)
        .await?
        .ok_or(ApiError::NotFound("payment"))?;
    let receipt = receipts::views(&client, &[id], receipts::Kind::Sale)
        .await?
        .remove(&id);
    let refund = by_staff::of_payment(&client, id).await?;
    Ok(Json(PaymentDetail {
        payment,
        receipt,
        refund,
    }))
}

/// `POST /api/payments/{id}/refund {"reason"}` → 202 with the refund: the money goes back
/// through the payment's gateway (Telegram Stars, Stripe, WayForPay, Monobank) by an outbox
/// effect, and once the gateway confirms, the payment is `refunded` and what it bought is taken
/// back (a payment in review bought nothing). A second request answers the refund already
/// asked for (pending, done or failed), never a second one. 409 when the payment cannot be
/// refunded so (its door cannot refund, it is refunded already, disputed, or being refunded
/// by subgate itself), naming why.
#[utoipa::path(post, path = "/payments/{id}/refund", operation_id = "refundPayment",
    tag = "payments",
    params(("id" = i64, Path, description = "Payment id."), super::idempotency::IdempotencyKey),
    request_body = RefundRequest,
    security(("staff_jwt" = [])),
    responses(
        (status = 202, description = "The refund, asked for now or before: `pending` until the \
            gateway answers.", body = StaffRefund),
        (status = 400, description = "Malformed JSON, or an unknown field.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such payment.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The payment cannot be refunded (the detail says why), or \
            this Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`reason` missing, empty or too long, or an \
            Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn refund(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<RefundRequest>,
) -> Result<Response, ApiError> {
    let mut e = Errors::default();
    let reason = e
        .required("reason", write.body.reason.as_deref().map(str::trim))
        .unwrap_or_default()
        .to_string();
    if write.body.reason.is_some() {
        if reason.is_empty() {
            e.add("reason", "must not be empty");
        } else if reason.chars().count() > REASON_MAX {
            e.add("reason", format!("must be at most {REASON_MAX} characters"));
        }
    }
    e.finish()?;
    crate::idempotent!(state, write, |tx| {
        let by = AskedBy {
            staff_id: write.staff.id,
            email: &write.staff.email,
        };
        let refund = match by_staff::request(tx, id, &reason, &by).await? {
            None => return Err(ApiError::NotFound("payment")),
            Some(Err(refusal)) => return Err(ApiError::Conflict(refusal.to_string())),
            Some(Ok(Requested::Existing(refund))) => {
                // Asked before: this request changes nothing, so it writes no record.
                write.staff.no_write();
                refund
            }
            Some(Ok(Requested::New { refund, payment })) => {
                tracing::info!(
                    payment_id = id,
                    staff_id = write.staff.id,
                    gateway = %payment.gateway,
                    "refund asked for by staff"
                );
                let entry = Entry::new("payment.refund", Some(id))
                    .before(&*payment)
                    .after(&refund);
                write.staff.audit(tx, entry).await?;
                refund
            }
        };
        Ok((
            StatusCode::ACCEPTED,
            serde_json::to_value(refund).map_err(ApiError::internal)?,
        ))
    })
}
