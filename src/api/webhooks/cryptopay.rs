//! Door 6, `POST /api/webhook/cryptopay`: Crypto Pay's webhook updates.
//!
//! Order of work, as at the other doors: the door must be configured (`CRYPTOPAY_TOKEN`, else
//! 503); `crypto-pay-api-signature` must verify over the raw bytes (else 401, nothing read or
//! stored); then the body is read ([`cryptopay::read_update`]): not an update or a field of the
//! wrong type → 400, a paid invoice without what a payment needs → 422, both logged in full for
//! reconciliation and nothing stored. `invoice_paid` goes through the payment core, which
//! checks the money against the order's crypto price in the asset paid; the invoice row is
//! then settled as paid, so the reconcile stops asking about it. Any other update type is
//! answered `{"ignored": true}`.
//!
//! A redelivered update changes nothing: the payment of `(cryptopay, invoice_id)` is stored
//! once, and a repeat is answered with it (`duplicate: true`).

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
};

use crate::{
    api::schemas::{CryptoPayAnswer, CryptoPayUpdate, Ignored, Problem},
    app::state::AppState,
    common::error::ApiError,
    orders::crypto_invoices::{self, Status},
    payments::{
        core,
        gateways::cryptopay::{self, Update, UpdateError},
    },
};

/// `POST /api/webhook/cryptopay`.
#[utoipa::path(post, path = "/webhook/cryptopay", operation_id = "receiveCryptoPayUpdate",
    tag = "payment doors",
    description = "Crypto Pay's webhook updates (@CryptoBot), authenticated by \
        `crypto-pay-api-signature`. `invoice_paid` is a payment (gateway `cryptopay`, external \
        id the `invoice_id`, order the invoice's `payload`) in the asset paid, checked against \
        the order's crypto price in that asset; other update types are ignored. A repeat of an \
        update changes nothing.",
    request_body = CryptoPayUpdate,
    security(("cryptopay_signature" = [])),
    responses(
        (status = 200, description = "Stored (applied, needs review or a duplicate), or an \
            update ignored.", body = CryptoPayAnswer),
        (status = 400, description = "Signed, but not an update or a field of the wrong type \
            (logged for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`crypto-pay-api-signature` missing or not matching.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Signed, but a paid invoice lacks what a payment needs \
            (logged for reconciliation; nothing stored).", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Crypto Pay is not configured (`CRYPTOPAY_TOKEN`).", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn receive(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(config) = state.config.cryptopay.as_ref() else {
        return Err(ApiError::Unavailable(
            "the Crypto Pay door is not configured (CRYPTOPAY_TOKEN)".into(),
        ));
    };
    cryptopay::verify(
        config.token.expose(),
        headers
            .get(cryptopay::SIGNATURE_HEADER)
            .and_then(|v| v.to_str().ok()),
        &body,
    )
    .map_err(|e| ApiError::WebhookUnauthorized(e.to_string()))?;

    let update = cryptopay::read_update(&body).map_err(|e| {
        tracing::warn!(
            update_id = cryptopay::update_id(&body).unwrap_or_default(),
            error = %e,
            body = %String::from_utf8_lossy(&body),
            "signed Crypto Pay update refused; logged for reconciliation"
        );
        match e {
            UpdateError::Malformed(why) => {
                ApiError::BadRequest(format!("invalid Crypto Pay update: {why}"))
            }
            UpdateError::Invalid { field, message } => {
                ApiError::Validation([(field.to_string(), message)].into())
            }
        }
    })?;
    let answer = match update {
        Update::Paid(payment) => {
            let invoice_id = payment.external_id.parse::<i64>().ok();
            let applied = core::apply_payment(&state.db, payment).await?;
            if let Some(invoice_id) = invoice_id {
                let client = state.db.get().await?;
                crypto_invoices::settle(&client, invoice_id, Status::Paid).await?;
            }
            CryptoPayAnswer::Applied(Box::new(applied))
        }
        Update::Ignored(why) => {
            tracing::info!(why, "Crypto Pay update ignored");
            CryptoPayAnswer::Ignored(Ignored { ignored: true })
        }
    };
    Ok(Json(answer).into_response())
}
