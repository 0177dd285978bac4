//! Every route of the service, in one place. Handlers live by resource in the sibling modules
//! of `crate::api`: the staff REST API, login (`api::auth`) and the payment doors
//! (`api::webhooks`).

use std::time::Duration;

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, MatchedPath, State},
    http::{HeaderName, HeaderValue, Request, StatusCode, header},
    response::{IntoResponse, Response},
};
use tower::ServiceBuilder;
use tower_http::{
    catch_panic::CatchPanicLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer},
    timeout::TimeoutLayer,
    trace::TraceLayer,
};

use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    app_page, audit_log, audits, auth, automations, broadcasts, channels, console, effects,
    error::problem,
    exemptions, invoice_links, join_requests, memberships, mini_app, openapi, orders, overview,
    payments, plans, promo_codes, reconciliation,
    referrals::{affiliates, commissions, payouts, program},
    roles::{needs, needs_or_sweep_token},
    schemas::Health,
    staff, star_subscriptions, stats, subscribers, sweep, webhook_endpoints,
    webhooks::{cryptopay, monobank, standard, stripe, telegram, wayforpay},
};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    staff::Role::{Admin, Owner, Support, Viewer},
};

/// Largest request body accepted (webhooks and staff JSON are small).
const BODY_LIMIT: usize = 256 * 1024;

/// Every operation of the service, registered once: the axum routes and the OpenAPI document's
/// paths both come from these `routes!` calls (each handler's `#[utoipa::path]` names its method
/// and its path, relative to `/api` for the API), so no route can be served undocumented or
/// documented unserved. The order is the document's.
///
/// Each staff operation's least role is declared here, next to it ([`needs`]: the role layer
/// and the document's `x-required-role` in one; docs/staff.md has the table). The routes
/// without a declaration are the public ones: login, the payment doors, this document, the
/// health checks, the console's files, the Mini App's page, and the Mini App's buyer API
/// (authenticated by Telegram's `initData`, [`mini_app::auth::Buyer`]).
pub fn routes() -> OpenApiRouter<AppState> {
    let api = OpenApiRouter::new()
        .routes(routes!(auth::login))
        .routes(needs(Viewer, routes!(staff::change_password)))
        .routes(needs(Owner, routes!(staff::create, staff::list)))
        .routes(needs(Owner, routes!(staff::patch, staff::delete)))
        .routes(needs(Admin, routes!(subscribers::create)))
        .routes(needs(Viewer, routes!(subscribers::list)))
        .routes(needs(Viewer, routes!(subscribers::export)))
        .routes(needs(Viewer, routes!(subscribers::get)))
        .routes(needs(Viewer, routes!(subscribers::messages)))
        .routes(needs(
            Admin,
            routes!(subscribers::patch, subscribers::delete),
        ))
        .routes(needs(Admin, routes!(channels::create)))
        .routes(needs(Viewer, routes!(channels::list)))
        .routes(needs(Viewer, routes!(channels::get)))
        .routes(needs(Admin, routes!(channels::patch, channels::delete)))
        .routes(needs(Admin, routes!(audits::start)))
        .routes(needs(Viewer, routes!(audits::list)))
        .routes(needs(Viewer, routes!(audits::get)))
        .routes(needs(Viewer, routes!(exemptions::list)))
        .routes(needs(Viewer, routes!(join_requests::list)))
        .routes(needs(Admin, routes!(exemptions::create)))
        .routes(needs(Admin, routes!(exemptions::delete)))
        .routes(needs(Admin, routes!(plans::create)))
        .routes(needs(Viewer, routes!(plans::list)))
        .routes(needs(Viewer, routes!(plans::get)))
        .routes(needs(Admin, routes!(plans::patch, plans::delete)))
        .routes(needs(Support, routes!(memberships::grant)))
        .routes(needs(Viewer, routes!(memberships::list)))
        .routes(needs(Viewer, routes!(memberships::export)))
        .routes(needs(Viewer, routes!(memberships::get)))
        .routes(needs(Support, routes!(memberships::patch)))
        .routes(needs(Admin, routes!(memberships::delete)))
        .routes(needs(Viewer, routes!(memberships::events)))
        .routes(needs(Admin, routes!(orders::create)))
        .routes(needs(Viewer, routes!(orders::list)))
        .routes(needs(Viewer, routes!(orders::get)))
        .routes(needs(Support, routes!(orders::cancel)))
        .routes(needs(Admin, routes!(orders::checkout)))
        .routes(needs(Admin, routes!(promo_codes::create)))
        .routes(needs(Viewer, routes!(promo_codes::list)))
        .routes(needs(Viewer, routes!(promo_codes::get)))
        .routes(needs(Admin, routes!(promo_codes::patch)))
        .routes(needs(Admin, routes!(orders::claim)))
        .routes(needs(Admin, routes!(invoice_links::create)))
        .routes(needs(Viewer, routes!(effects::list)))
        .routes(needs(Support, routes!(effects::retry_all)))
        .routes(needs(Viewer, routes!(effects::get)))
        .routes(needs(Support, routes!(effects::retry)))
        .routes(needs(Viewer, routes!(star_subscriptions::list)))
        .routes(needs(Viewer, routes!(star_subscriptions::get)))
        .routes(needs(Admin, routes!(star_subscriptions::cancel)))
        .routes(needs(Viewer, routes!(payments::list)))
        .routes(needs(Viewer, routes!(payments::export)))
        .routes(needs(Viewer, routes!(payments::get)))
        .routes(needs(Admin, routes!(payments::refund)))
        .routes(needs(Viewer, routes!(reconciliation::list)))
        .routes(needs(Viewer, routes!(reconciliation::list_monobank)))
        .routes(needs(Viewer, routes!(automations::list)))
        .routes(needs(Admin, routes!(automations::patch)))
        .routes(needs(Admin, routes!(broadcasts::create)))
        .routes(needs(Viewer, routes!(broadcasts::list)))
        .routes(needs(Viewer, routes!(broadcasts::preview)))
        .routes(needs(Viewer, routes!(broadcasts::get)))
        .routes(needs(Admin, routes!(broadcasts::cancel)))
        .routes(needs(Viewer, routes!(program::get)))
        .routes(needs(Admin, routes!(program::patch)))
        .routes(needs(Viewer, routes!(program::get_plan)))
        .routes(needs(
            Admin,
            routes!(program::put_plan, program::delete_plan),
        ))
        .routes(needs(Admin, routes!(affiliates::create)))
        .routes(needs(Viewer, routes!(affiliates::list)))
        .routes(needs(Viewer, routes!(affiliates::get)))
        .routes(needs(Admin, routes!(affiliates::patch)))
        .routes(needs(Viewer, routes!(affiliates::summary)))
        .routes(needs(Viewer, routes!(commissions::list)))
        .routes(needs(Viewer, routes!(commissions::export)))
        .routes(needs(Admin, routes!(payouts::create)))
        .routes(needs(Viewer, routes!(payouts::list)))
        .routes(needs(Viewer, routes!(payouts::get)))
        .routes(needs(Admin, routes!(webhook_endpoints::create)))
        .routes(needs(Viewer, routes!(webhook_endpoints::list)))
        .routes(needs(Viewer, routes!(webhook_endpoints::get)))
        .routes(needs(
            Admin,
            routes!(webhook_endpoints::patch, webhook_endpoints::delete),
        ))
        .routes(needs(Admin, routes!(webhook_endpoints::rotate)))
        .routes(needs(Viewer, routes!(webhook_endpoints::deliveries)))
        .routes(needs(Admin, routes!(webhook_endpoints::replay)))
        .routes(needs(Admin, routes!(audit_log::list)))
        .routes(needs(Viewer, routes!(stats::revenue)))
        .routes(needs(Viewer, routes!(stats::members)))
        .routes(needs(Viewer, routes!(stats::summary)))
        .routes(routes!(standard::receive))
        .routes(routes!(wayforpay::receive))
        .routes(routes!(telegram::webhook))
        .routes(routes!(stripe::receive))
        .routes(routes!(monobank::receive))
        .routes(routes!(cryptopay::receive))
        .routes(needs_or_sweep_token(Admin, routes!(sweep::run)))
        .routes(needs(Viewer, routes!(overview::get)))
        .routes(routes!(openapi::openapi_json));
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .nest("/api", api)
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        // The Mini App's buyer API (`/app/api/`, authenticated by Telegram's `initData`).
        .routes(routes!(mini_app::get_offer))
        .routes(routes!(mini_app::create_order))
        .routes(routes!(mini_app::get_order))
        .routes(routes!(mini_app::get_me))
        .routes(routes!(mini_app::put_language))
        .routes(routes!(mini_app::cancel_subscription))
        .routes(routes!(mini_app::resume_subscription))
        .merge(console::routes())
        .merge(app_page::routes())
}

/// Builds the application. Needs no socket: tests drive it with `tower::ServiceExt::oneshot`.
pub fn router(state: AppState) -> Router {
    let timeout = state.config.request_timeout;
    let (routes, _document) = routes().split_for_parts();
    routes
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(
            ServiceBuilder::new()
                .map_request(drop_unfit_request_id)
                .layer(SetRequestIdLayer::new(
                    HeaderName::from_static("x-request-id"),
                    MakeRequestUuid,
                ))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(request_span)
                        .on_response(log_response)
                        // A 5xx is logged once, with its cause, where it is made (`ApiError`,
                        // the panic and timeout layers); the response line above has its status.
                        .on_failure(()),
                )
                .layer(PropagateRequestIdLayer::new(HeaderName::from_static(
                    "x-request-id",
                )))
                .layer(axum::middleware::map_response(problem_for_bare_errors))
                .layer(CatchPanicLayer::custom(panic_response))
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    timeout,
                )),
        )
        .layer(axum::middleware::from_fn(
            crate::common::metrics::track_http,
        ))
        // For the role layer of staff routes (`api::roles`), declared before the state exists.
        .layer(axum::Extension(state.clone()))
        .with_state(state)
}

/// Longest client-chosen `x-request-id` kept, in bytes.
const MAX_REQUEST_ID_LEN: usize = 64;

/// Whether a client-chosen request id may be echoed and logged as it is: 1..=64 of
/// `A-Z a-z 0-9 - _ .`. Anything else (spaces, control or non-ASCII bytes, an overlong id)
/// could forge or break log lines, so it is replaced.
fn fit_request_id(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Removes the client's `x-request-id` unless it is one line that [`fit_request_id`] accepts,
/// so that `SetRequestIdLayer` generates a UUID instead.
fn drop_unfit_request_id<B>(mut req: Request<B>) -> Request<B> {
    let name = HeaderName::from_static("x-request-id");
    let mut ids = req.headers().get_all(&name).iter();
    let keep = match (ids.next(), ids.next()) {
        (None, _) => return req,
        (Some(id), None) => fit_request_id(id.as_bytes()),
        (Some(_), Some(_)) => false,
    };
    if !keep {
        req.headers_mut().remove(&name);
    }
    req
}

/// The span of one request: every line logged while serving it carries its request id and
/// matched route (the pattern, `/api/orders/{id}`; `unmatched` when no route matched).
fn request_span<B>(req: &Request<B>) -> tracing::Span {
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or("-");
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %req.method(),
        route = %route,
        path = %req.uri().path(),
    )
}

/// One line per request, when its response is ready: status and latency (the span adds the
/// request id and route).
fn log_response<B>(response: &axum::http::Response<B>, latency: Duration, _span: &tracing::Span) {
    tracing::info!(
        status = response.status().as_u16(),
        latency_ms = (latency.as_secs_f64() * 1e6).round() / 1e3,
        "request finished"
    );
}

/// A handler panicked: a 500 whose cause (the panic message) is logged once, like any
/// internal error.
fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    ApiError::internal(format!("handler panicked: {message}")).into_response()
}

/// `GET /healthz`: the process answers (no database check).
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "operations", security(()),
    responses((status = 200, description = "Alive.", body = Health,
        example = json!({"status": "ok"}))),
)]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// `GET /readyz`: the database answers and is migrated.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "operations", security(()),
    responses((status = 200, description = "Ready to serve.", body = Health,
        example = json!({"status": "ready"}))),
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if crate::db::is_ready(&state.db).await {
        Json(Health {
            status: "ready".into(),
        })
        .into_response()
    } else {
        ApiError::Unavailable("database unreachable or not migrated".into()).into_response()
    }
}

async fn not_found() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "/problems/not-found",
        "no such route",
        None,
    )
}

/// Error responses produced by layers rather than handlers carry no body: axum's 405 (with
/// `Allow`) and the request timeout's 503. Give them a problem document like every other error,
/// keeping their headers.
async fn problem_for_bare_errors<B>(response: axum::http::Response<B>) -> Response
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error())
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response.map(axum::body::Body::new);
    }
    let (kind, detail) = match status {
        StatusCode::SERVICE_UNAVAILABLE => {
            // The cause of this 5xx, logged once (no handler saw it).
            tracing::warn!("request timed out; answered 503");
            (
                "/problems/unavailable",
                "the request took too long and was abandoned; retry later",
            )
        }
        StatusCode::METHOD_NOT_ALLOWED => (
            "/problems/method-not-allowed",
            "this route does not accept that method; see the Allow header",
        ),
        _ if status.is_server_error() => {
            tracing::error!(
                status = status.as_u16(),
                "server error answered without a body"
            );
            ("about:blank", status.canonical_reason().unwrap_or("error"))
        }
        _ => ("about:blank", status.canonical_reason().unwrap_or("error")),
    };
    let (parts, _) = response.into_parts();
    let mut problem = problem(status, kind, detail, None);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH {
            problem.headers_mut().append(name, value.clone());
        }
    }
    if status == StatusCode::SERVICE_UNAVAILABLE
        && !problem.headers().contains_key(header::RETRY_AFTER)
    {
        problem
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    problem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_plain_request_ids_are_kept() {
        for id in ["a", "client-chosen-id-42", "A.b_c-9", &"x".repeat(64)] {
            assert!(fit_request_id(id.as_bytes()), "{id:?}");
        }
        for id in [
            "",
            &"x".repeat(65),
            "two words",
            "tab\tid",
            "id\r\nforged: line",
            "quote\"id",
            "slash/id",
            "id=1",
            "\u{e9}t\u{e9}",
        ] {
            assert!(!fit_request_id(id.as_bytes()), "{id:?}");
        }
        assert!(!fit_request_id(b"obs\xfftext"));
    }

    #[test]
    fn an_unfit_or_repeated_request_id_is_removed() {
        let with = |ids: &[&[u8]]| {
            let mut req = Request::new(());
            for id in ids {
                req.headers_mut().append(
                    "x-request-id",
                    HeaderValue::from_bytes(id).expect("a header value"),
                );
            }
            drop_unfit_request_id(req)
                .headers()
                .get_all("x-request-id")
                .iter()
                .map(|v| v.as_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(with(&[b"good-id"]), vec![b"good-id".to_vec()]);
        assert!(with(&[b"bad id"]).is_empty());
        assert!(with(&[b"good-id", b"other-id"]).is_empty());
        assert!(with(&[]).is_empty());
    }
}
