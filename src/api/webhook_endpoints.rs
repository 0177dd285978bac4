//! `/api/webhook-endpoints` and `/api/webhook-deliveries`: the owner's endpoints for outbound
//! webhooks (the domain is [`crate::outbox::outbound`]). The secret is shown once, when made (create,
//! rotate; a replay of the same `Idempotency-Key` shows the same answer, as for every staff
//! POST); every other answer leaves it out.

use axum::{Json, extract::State, http::StatusCode, response::Response};
use serde::{Deserialize, Serialize};

use super::{
    ApiJson, ApiQuery, Errors, Page, Paging, PathId,
    auth::Staff,
    check_text,
    idempotency::{NoBody, StaffWrite},
    not_null, nullable,
    schemas::Problem,
};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    outbox::outbound::{self, Delivery, EVENT_TYPES, Endpoint},
    staff::audit_log::Entry,
};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"url": "https://crm.example.com/hooks/subgate",
    "event_types": ["payment.applied", "membership.expired"], "description": "CRM"}))]
pub struct CreateEndpoint {
    /// `https://…`, resolving to public addresses only (unless `OUTBOUND_ALLOW_PRIVATE`).
    #[schema(required = true, nullable = false, max_length = 2048)]
    url: Option<String>,
    /// One or more of the event types.
    #[schema(required = true, nullable = false, min_items = 1)]
    event_types: Option<Vec<String>>,
    #[schema(max_length = 500)]
    description: Option<String>,
}

/// The fields to change; `enabled: true` re-enables a disabled endpoint (and forgets its
/// failures), `false` disables it.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"enabled": true}))]
pub struct PatchEndpoint {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, max_length = 2048)]
    url: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Vec<String>, min_items = 1)]
    event_types: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, max_length = 500)]
    description: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    enabled: Option<Option<bool>>,
}

/// An endpoint with its new secret (`whsec_…`), shown this once.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EndpointWithSecret {
    #[serde(flatten)]
    endpoint: Endpoint,
    secret: String,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
}

async fn check_url(e: &mut Errors, state: &AppState, url: &str) {
    if url.chars().count() > 2048 {
        e.add("url", "must be at most 2048 characters");
        return;
    }
    if let Err(why) = outbound::check_url(url, state.config.outbound_allow_private).await {
        e.add("url", why.to_string());
    }
}

fn check_event_types(e: &mut Errors, types: &[String]) -> Vec<String> {
    if types.is_empty() {
        e.add("event_types", "must name at least one event type");
    }
    if let Some(bad) = types.iter().find(|t| !EVENT_TYPES.contains(&t.as_str())) {
        e.add(
            "event_types",
            format!(
                "{bad:?} is not an event type; one of {}",
                EVENT_TYPES.join(", ")
            ),
        );
    }
    let mut unique = types.to_vec();
    unique.sort();
    unique.dedup();
    unique
}

/// `POST /api/webhook-endpoints`.
#[utoipa::path(post, path = "/webhook-endpoints", operation_id = "createWebhookEndpoint",
    tag = "webhook endpoints",
    request_body = CreateEndpoint,
    params(super::idempotency::IdempotencyKey),
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created; `secret` is shown this once (a replay of the same \
            Idempotency-Key shows the same answer).", body = EndpointWithSecret),
        (status = 409, description = "This Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields: a URL that is not https or resolves to a \
            private address, an unknown event type; or an Idempotency-Key reused for another \
            request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    write: StaffWrite<CreateEndpoint>,
) -> Result<Response, ApiError> {
    let b = &write.body;
    let mut e = Errors::default();
    let url = e.required("url", b.url.clone());
    if let Some(url) = &url {
        check_url(&mut e, &state, url).await;
    }
    let types = e
        .required("event_types", b.event_types.clone())
        .map(|t| check_event_types(&mut e, &t));
    check_text(&mut e, "description", b.description.as_deref(), 500);
    e.finish()?;
    let (Some(url), Some(types)) = (url, types) else {
        return Err(ApiError::internal("checked endpoint fields are missing"));
    };
    let description = b.description.as_deref();
    crate::idempotent!(state, write, |tx| {
        let (endpoint, secret) = outbound::create(tx, &url, description, &types).await?;
        let entry = Entry::new("webhook_endpoint.create", Some(endpoint.id)).after(&endpoint);
        write.staff.audit(tx, entry).await?;
        tracing::info!(endpoint_id = endpoint.id, url = %endpoint.url, "webhook endpoint created");
        Ok((
            StatusCode::CREATED,
            serde_json::to_value(EndpointWithSecret { endpoint, secret })
                .map_err(ApiError::internal)?,
        ))
    })
}

/// `GET /api/webhook-endpoints`.
#[utoipa::path(get, path = "/webhook-endpoints", operation_id = "listWebhookEndpoints",
    tag = "webhook endpoints",
    params(ListParams),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of endpoints, by id.", body = Page<Endpoint>),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListParams>,
) -> Result<Json<Page<Endpoint>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let client = state.db.get().await?;
    let items = outbound::list(&client, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |e| e.id)))
}

/// `GET /api/webhook-endpoints/{id}`.
#[utoipa::path(get, path = "/webhook-endpoints/{id}", operation_id = "getWebhookEndpoint",
    tag = "webhook endpoints",
    params(("id" = i64, Path, description = "Endpoint id.")),
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The endpoint (without its secret).", body = Endpoint)),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
) -> Result<Json<Endpoint>, ApiError> {
    let client = state.db.get().await?;
    outbound::get(&client, id)
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("webhook endpoint"))
}

/// `PATCH /api/webhook-endpoints/{id}`.
#[utoipa::path(patch, path = "/webhook-endpoints/{id}", operation_id = "patchWebhookEndpoint",
    tag = "webhook endpoints",
    params(("id" = i64, Path, description = "Endpoint id.")),
    request_body(content = Option<PatchEndpoint>, description = "The fields to change; none (or an \
        empty body) changes nothing."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The endpoint as changed.", body = Endpoint),
        (status = 422, description = "Invalid fields.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
    ApiJson(b): ApiJson<PatchEndpoint>,
) -> Result<Json<Endpoint>, ApiError> {
    let mut e = Errors::default();
    let url = not_null(&mut e, "url", b.url);
    if let Some(url) = &url {
        check_url(&mut e, &state, url).await;
    }
    let event_types =
        not_null(&mut e, "event_types", b.event_types).map(|t| check_event_types(&mut e, &t));
    let enabled = not_null(&mut e, "enabled", b.enabled);
    check_text(
        &mut e,
        "description",
        b.description.as_ref().and_then(|d| d.as_deref()),
        500,
    );
    e.finish()?;
    let change = outbound::Change {
        url,
        description: b.description,
        event_types,
        enabled,
    };
    let endpoint = crate::transaction!(state.db, |tx| {
        let before = outbound::get(tx, id).await?;
        let endpoint = outbound::change(tx, id, &change)
            .await?
            .ok_or(ApiError::NotFound("webhook endpoint"))?;
        let entry = Entry::new("webhook_endpoint.update", Some(id))
            .before(&before)
            .after(&endpoint);
        staff.audit(tx, entry).await?;
        Ok(endpoint)
    })?;
    tracing::info!(
        endpoint_id = id,
        enabled = endpoint.enabled,
        "webhook endpoint changed"
    );
    Ok(Json(endpoint))
}

/// `DELETE /api/webhook-endpoints/{id}`: the endpoint and its deliveries.
#[utoipa::path(delete, path = "/webhook-endpoints/{id}", operation_id = "deleteWebhookEndpoint",
    tag = "webhook endpoints",
    params(("id" = i64, Path, description = "Endpoint id.")),
    security(("staff_jwt" = [])),
    responses((status = 204, description = "Deleted, with its deliveries.")),
)]
pub async fn delete(
    State(state): State<AppState>,
    staff: Staff,
    PathId(id): PathId<i64>,
) -> Result<StatusCode, ApiError> {
    crate::transaction!(state.db, |tx| {
        let before = outbound::get(tx, id).await?;
        if !outbound::delete(tx, id).await? {
            return Err(ApiError::NotFound("webhook endpoint"));
        }
        let entry = Entry::new("webhook_endpoint.delete", Some(id)).before(&before);
        staff.audit(tx, entry).await
    })?;
    tracing::info!(endpoint_id = id, "webhook endpoint deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/webhook-endpoints/{id}/rotate`: a new secret; the previous one keeps signing
/// (a second `v1,` signature) for 24 hours.
#[utoipa::path(post, path = "/webhook-endpoints/{id}/rotate", operation_id = "rotateWebhookEndpointSecret",
    tag = "webhook endpoints",
    params(("id" = i64, Path, description = "Endpoint id."), super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The new secret, shown this once.", body = EndpointWithSecret),
        (status = 409, description = "This Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn rotate(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        let (endpoint, secret) = outbound::rotate(tx, id)
            .await?
            .ok_or(ApiError::NotFound("webhook endpoint"))?;
        let entry = Entry::new("webhook_endpoint.rotate", Some(id)).after(&endpoint);
        write.staff.audit(tx, entry).await?;
        tracing::info!(endpoint_id = id, "webhook endpoint secret rotated");
        Ok((
            StatusCode::OK,
            serde_json::to_value(EndpointWithSecret { endpoint, secret })
                .map_err(ApiError::internal)?,
        ))
    })
}

/// `GET /api/webhook-endpoints/{id}/deliveries`: each event sent to it, with every attempt.
#[utoipa::path(get, path = "/webhook-endpoints/{id}/deliveries", operation_id = "listWebhookDeliveries",
    tag = "webhook endpoints",
    params(("id" = i64, Path, description = "Endpoint id."), ListParams),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of deliveries, by id.", body = Page<Delivery>),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn deliveries(
    State(state): State<AppState>,
    _: Staff,
    PathId(id): PathId<i64>,
    ApiQuery(q): ApiQuery<ListParams>,
) -> Result<Json<Page<Delivery>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let client = state.db.get().await?;
    if outbound::get(&client, id).await?.is_none() {
        return Err(ApiError::NotFound("webhook endpoint"));
    }
    let items = outbound::deliveries(&client, id, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |d| d.id)))
}

/// `POST /api/webhook-deliveries/{id}/replay`: sends the event again now (same `webhook-id`
/// and body), from the start of the retry schedule.
#[utoipa::path(post, path = "/webhook-deliveries/{id}/replay", operation_id = "replayWebhookDelivery",
    tag = "webhook endpoints",
    params(("id" = i64, Path, description = "Delivery id."), super::idempotency::IdempotencyKey),
    request_body(content = Option<NoBody>, description = "None, or `{}`."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "Queued to be sent now.", body = Delivery),
        (status = 409, description = "It is due now or being sent already, or this \
            Idempotency-Key is in flight.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An Idempotency-Key reused for another request.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn replay(
    State(state): State<AppState>,
    PathId(id): PathId<i64>,
    write: StaffWrite<NoBody>,
) -> Result<Response, ApiError> {
    crate::idempotent!(state, write, |tx| {
        match outbound::replay(tx, id).await? {
            None => Err(ApiError::NotFound("webhook delivery")),
            Some(Err(outbound::ReplayRefusal::InFlight)) => Err(ApiError::Conflict(
                "the delivery is due now or being sent already".into(),
            )),
            Some(Ok(d)) => {
                let entry = Entry::new("webhook_delivery.replay", Some(id)).after(&d);
                write.staff.audit(tx, entry).await?;
                tracing::info!(delivery_id = id, "webhook delivery replayed");
                Ok((
                    StatusCode::OK,
                    serde_json::to_value(d).map_err(ApiError::internal)?,
                ))
            }
        }
    })
}
