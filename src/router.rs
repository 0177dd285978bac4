//! Every route of the service, in one place. Handlers live by resource under `crate::api`
//! (staff REST), `crate::auth` (login) and the payment doors.

use axum::{
    Router,
    extract::{DefaultBodyLimit, State},
    http::{HeaderName, Request, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use tower::ServiceBuilder;
use tower_http::{
    catch_panic::CatchPanicLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer},
    timeout::TimeoutLayer,
    trace::TraceLayer,
};

use crate::{
    api::{channels, memberships, subscribers},
    auth,
    error::{ApiError, problem},
    state::AppState,
};

/// Largest request body accepted (webhooks and staff JSON are small).
const BODY_LIMIT: usize = 256 * 1024;

/// Builds the application. Needs no socket: tests drive it with `tower::ServiceExt::oneshot`.
pub fn router(state: AppState) -> Router {
    let timeout = state.config.request_timeout;
    let api = Router::new()
        .route("/auth/login", post(auth::login))
        .route(
            "/subscribers",
            post(subscribers::create).get(subscribers::list),
        )
        .route(
            "/subscribers/{id}",
            get(subscribers::get)
                .patch(subscribers::patch)
                .delete(subscribers::delete),
        )
        .route("/channels", post(channels::create).get(channels::list))
        .route(
            "/channels/{id}",
            get(channels::get)
                .patch(channels::patch)
                .delete(channels::delete),
        )
        .route(
            "/memberships",
            post(memberships::grant).get(memberships::list),
        )
        .route(
            "/memberships/{id}",
            get(memberships::get)
                .patch(memberships::patch)
                .delete(memberships::delete),
        )
        .route("/memberships/{id}/events", get(memberships::events));

    Router::new()
        .nest("/api", api)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(
                    HeaderName::from_static("x-request-id"),
                    MakeRequestUuid,
                ))
                .layer(
                    TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
                        let request_id = req
                            .extensions()
                            .get::<RequestId>()
                            .and_then(|id| id.header_value().to_str().ok())
                            .unwrap_or("-");
                        tracing::info_span!(
                            "request",
                            request_id = %request_id,
                            method = %req.method(),
                            path = %req.uri().path(),
                        )
                    }),
                )
                .layer(PropagateRequestIdLayer::new(HeaderName::from_static(
                    "x-request-id",
                )))
                .layer(CatchPanicLayer::custom(|_| {
                    ApiError::internal("handler panicked").into_response()
                }))
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    timeout,
                )),
        )
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> Response {
    if crate::db::is_ready(&state.db).await {
        (StatusCode::OK, "ready").into_response()
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
