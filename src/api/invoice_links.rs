//! `POST /api/orders/{id}/invoice-link`: a Telegram Stars invoice for an `XTR` order, made with
//! `createInvoiceLink` (payload = the order reference, currency `XTR`, one price of the order's
//! amount) and stored on the order, so the buyer can pay from any chat and the payment comes
//! back through door 3 naming the order.
//!
//! The link is made once: a stored link is returned as it is, so repeating the request (with
//! or without `Idempotency-Key`) never makes a second invoice. The Bot API call cannot share a
//! transaction with the store; two requests racing both call Telegram, the first stored link
//! wins and both answer it (the other invoice is never shown to anyone).

use axum::{Json, extract::State};

use super::{
    ApiJson, PathId,
    auth::Staff,
    idempotency::NoBody,
    schemas::{OrderEnvelope, Problem},
};
use crate::{
    app::state::AppState,
    bot::pay_links::StarsWords,
    common::error::ApiError,
    orders::{self, Order},
    present::texts::Language,
    staff::audit_log::Entry,
    telegram_api::client::{BotApi, DEFAULT_TIMEOUT},
};

/// `POST /api/orders/{id}/invoice-link` → 200 `{"order": Order}` with `invoice_link` set.
/// 404 unknown order; 422 not an `XTR` order; 409 order not pending (and no link yet);
/// 503 without a bot token, in dry-run mode, or when Telegram does not answer.
#[utoipa::path(post, path = "/orders/{id}/invoice-link", operation_id = "createInvoiceLink",
    tag = "orders",
    params(("id" = i64, Path, description = "Order id.")),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The order with its `invoice_link` (made once; a stored \
            link is answered as it is).", body = OrderEnvelope),
        (status = 409, description = "The order is not pending (and has no link yet).", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not an `XTR` (Telegram Stars) order.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
    ApiJson(_): ApiJson<NoBody>,
) -> Result<Json<OrderEnvelope>, ApiError> {
    let client = state.db.get().await?;
    let order = read_order(&client, id).await?;
    if order.currency != "XTR" {
        return Err(ApiError::Unprocessable(
            "invoice links are made for XTR (Telegram Stars) orders only".into(),
        ));
    }
    if order.invoice_link.is_some() {
        // Made before: nothing is written now.
        staff.no_write();
        return Ok(Json(OrderEnvelope { order }));
    }
    if order.status != orders::Status::Pending {
        return Err(ApiError::Conflict(format!(
            "the order is {}; an invoice is made only for a pending order",
            order.status
        )));
    }
    // The invoice says what the bot's own invoice says: the order's plan (title, description,
    // period or lifetime) and the order's amount.
    let f = orders::invoice_facts(&client, id, state.config.hold_secs)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    drop(client);

    let bot = BotApi::from_config(&state.config, DEFAULT_TIMEOUT).ok_or_else(|| {
        ApiError::Unavailable("TELEGRAM_BOT_TOKEN is not set: no invoice link can be made".into())
    })?;
    if bot.is_dry_run() {
        return Err(ApiError::Unavailable(
            "TELEGRAM_DRY_RUN is on: no invoice link is made".into(),
        ));
    }
    let words = StarsWords::of(Language::choose(f.language, None), &f);
    let link = bot
        .create_stars_invoice_link(
            &words.title,
            &words.description,
            &order.reference,
            &words.label,
            order.amount_minor,
        )
        .await
        .map_err(|e| ApiError::Unavailable(format!("Telegram made no invoice link: {e}")))?;

    let order = crate::transaction!(state.db, |tx| {
        let order = orders::set_invoice_link(tx, id, &link)
            .await?
            .ok_or(ApiError::NotFound("order"))?;
        let entry = Entry::new("order.invoice_link", Some(id)).after(&order);
        staff.audit(tx, entry).await?;
        Ok(order)
    })?;
    tracing::info!(
        order_id = id,
        staff_id = staff.id,
        "Stars invoice link made"
    );
    Ok(Json(OrderEnvelope { order }))
}

async fn read_order(client: &deadpool_postgres::Object, id: i64) -> Result<Order, ApiError> {
    orders::get(client, id)
        .await?
        .ok_or(ApiError::NotFound("order"))
}
