//! Door 5, `POST /api/webhook/monobank`: Monobank acquiring's invoice status reports.
//!
//! Order of work, as at the other doors: the door must be configured (`MONOBANK_TOKEN`, else
//! 503); `X-Sign` must verify over the raw bytes with Monobank's public key, cached and fetched
//! again once when it does not ([`PublicKeys`]; a missing, malformed or still failing
//! signature is 401, nothing read or stored; a key that cannot be fetched is 503); then the
//! body is read ([`monobank::read_report`]): not JSON or a field of the wrong type → 400, a
//! required field missing or invalid → 422, both logged in full for reconciliation and nothing
//! stored. A report is acted on by [`updates::apply`] — the path the reconcile's answers take
//! too: `success` through the payment core, `reversed` through the refund rule, `failure` and
//! `expired` release the order's holds, the rest do nothing, and a report older
//! (`modifiedDate`) than one stored before changes nothing. Every report read is answered
//! 200 with what it came to, so Monobank stops delivering it.
//!
//! [`PublicKeys`]: crate::payments::gateways::monobank::keys::PublicKeys

use axum::{Json, body::Bytes, extract::State, http::HeaderMap};

use crate::{
    api::schemas::{MonobankAnswer, MonobankReport, Problem},
    app::state::AppState,
    common::error::ApiError,
    payments::gateways::monobank::{self, ReportError, keys::KeyCheck, updates},
};

/// `POST /api/webhook/monobank`.
#[utoipa::path(post, path = "/webhook/monobank", operation_id = "receiveMonobankReport",
    tag = "payment doors",
    description = "Monobank acquiring's invoice status reports (its `webHookUrl`), \
        authenticated by `X-Sign`. `success` is a payment of the invoice (gateway `monobank`, \
        external id the `invoiceId`, order the `reference`); `reversed` takes back what it \
        bought (or is recorded first, so the payment grants nothing); `failure` and `expired` \
        release the order's holds; `created`, `processing` and `hold` do nothing. A report \
        older (`modifiedDate`) than one already stored for the invoice changes nothing; a \
        repeat changes nothing.",
    request_body = MonobankReport,
    security(("monobank_signature" = [])),
    responses(
        (status = 200, description = "What the report came to.", body = MonobankAnswer),
        (status = 400, description = "Signed, but not a report or a field of the wrong type \
            (logged for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`X-Sign` missing, malformed, or not Monobank's (checked \
            again with a freshly fetched key first).", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Signed, but a required field is missing or invalid \
            (logged for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`MONOBANK_TOKEN` is not set, or Monobank's public key \
            could not be fetched.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn receive(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<MonobankAnswer>, ApiError> {
    let Some(config) = state.config.monobank.as_ref() else {
        return Err(ApiError::Unavailable(
            "the Monobank door is not configured (MONOBANK_TOKEN)".into(),
        ));
    };
    let header = headers.get("x-sign").and_then(|v| v.to_str().ok());
    state
        .monobank_keys
        .verify(config, header, &body)
        .await
        .map_err(|e| match e {
            KeyCheck::Refused(why) => ApiError::WebhookUnauthorized(why.to_string()),
            KeyCheck::Unavailable(why) => ApiError::Unavailable(why.to_string()),
        })?;
    let report = monobank::read_report(&body).map_err(|e| {
        tracing::warn!(
            invoice_id = monobank::invoice_id_of(&body).as_deref().unwrap_or("-"),
            error = %e,
            body = %String::from_utf8_lossy(&body),
            "signed Monobank report refused; logged for reconciliation"
        );
        match e {
            ReportError::Malformed(why) => {
                ApiError::BadRequest(format!("invalid Monobank report: {why}"))
            }
            ReportError::Invalid { field, message } => {
                ApiError::Validation([(field.to_string(), message)].into())
            }
        }
    })?;
    let done = updates::apply(&state.db, &report, false).await?;
    Ok(Json(MonobankAnswer {
        invoice_id: report.invoice_id,
        status: report.status,
        result: done.as_str().to_string(),
        payment_id: done.payment_id(),
    }))
}
