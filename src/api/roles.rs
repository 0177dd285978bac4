//! Who may call which staff route: the one mechanism that authenticates staff and enforces
//! roles.
//!
//! The router declares each staff operation's role next to it ([`needs`]), e.g.
//! `.routes(needs(Admin, routes!(channels::patch, channels::delete)))`. The declaration does
//! two things from one value:
//! - it puts a route layer ([`authorize`]) in front of those handlers: the bearer token is
//!   verified, its account must exist, be enabled and still be on the token's version, and its
//!   role must allow the route ([`Role::allows`]) — else 401 or 403, **before** the handler or
//!   any of its extractors run, so a 403 never depends on (or reveals) whether the target
//!   exists;
//! - it marks the operations in the OpenAPI document with `x-required-role`.
//!
//! After a successful staff write it checks that the write recorded itself in the audit log
//! (see [`authorize`]).
//!
//! The layer hands the authenticated [`Staff`] to the handler in the request's extensions;
//! the `Staff` extractor only reads it there, and refuses (500, logged) on a route that
//! declared no role, so a route cannot be served to staff without a declaration. The test
//! `roles::every_operation_enforces_its_declared_role` walks every operation of the document
//! with a token of every role.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::{
    extract::Request,
    http::Method,
    middleware::Next,
    response::{IntoResponse, Response},
};
use tower_http::request_id::RequestId;
use utoipa::openapi::extensions::Extensions;
use utoipa_axum::router::UtoipaMethodRouter;

use super::auth::{Staff, bearer};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    staff::{self, Role, tokens},
};

/// The OpenAPI extension naming an operation's least role.
pub const EXTENSION: &str = "x-required-role";

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A staff token whose role allows this one.
    Staff(Role),
    /// The same, or `Authorization: Bearer <SWEEP_TOKEN>` when it is configured (cron).
    StaffOrSweepToken(Role),
}

impl Access {
    fn role(self) -> Role {
        match self {
            Access::Staff(r) | Access::StaffOrSweepToken(r) => r,
        }
    }
}

/// Declares that the routes of `routes` (one `routes!` call) need a staff token of `role` or
/// higher: layers them with [`authorize`] and marks their operations `x-required-role`.
pub fn needs(role: Role, routes: UtoipaMethodRouter<AppState>) -> UtoipaMethodRouter<AppState> {
    declare(Access::Staff(role), routes)
}

/// Like [`needs`], also letting the sweep token in (`POST /api/sweep`).
pub fn needs_or_sweep_token(
    role: Role,
    routes: UtoipaMethodRouter<AppState>,
) -> UtoipaMethodRouter<AppState> {
    declare(Access::StaffOrSweepToken(role), routes)
}

fn declare(access: Access, routes: UtoipaMethodRouter<AppState>) -> UtoipaMethodRouter<AppState> {
    let (schemas, mut paths, method_router) = routes;
    for item in paths.paths.values_mut() {
        for op in super::schemas::operations_mut(item) {
            op.extensions
                .get_or_insert_with(Extensions::default)
                .insert(EXTENSION.into(), access.role().as_str().into());
        }
    }
    let layer =
        axum::middleware::from_fn(move |req: Request, next: Next| authorize(access, req, next));
    (schemas, paths, method_router.route_layer(layer))
}

/// The route layer of [`needs`]: authenticates, checks the role, then runs the handler with
/// the [`Staff`] in the request's extensions. The application state comes from the request's
/// extensions too (the router adds it once), since the routes are declared before the state
/// exists.
///
/// A staff write (any method but GET, HEAD and OPTIONS) that succeeds must have recorded itself in the audit log
/// ([`Staff::audit`]); one that did not is a bug, logged, and in debug builds (the tests) a
/// panic, so a write handler that forgets its record fails the tests that call it.
async fn authorize(access: Access, mut req: Request, next: Next) -> Response {
    let audited = match authenticate(access, &mut req).await {
        Ok(audited) => audited,
        Err(e) => return e.into_response(),
    };
    let write = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let response = next.run(req).await;
    if let Some(audited) = audited
        && write
        && response.status().is_success()
        && !audited.load(Ordering::Relaxed)
    {
        tracing::error!("a staff write succeeded without an audit log record");
        debug_assert!(false, "a staff write succeeded without an audit log record");
    }
    response
}

/// Authenticates the request and checks its role; returns the write's audit flag when a staff
/// account (not the sweep token) made it.
async fn authenticate(
    access: Access,
    req: &mut Request,
) -> Result<Option<Arc<AtomicBool>>, ApiError> {
    let Some(state) = req.extensions().get::<AppState>().cloned() else {
        return Err(ApiError::internal("the router did not add the state"));
    };
    let token = bearer(req.headers()).ok_or(ApiError::Unauthorized)?;
    if let (Access::StaffOrSweepToken(_), Some(configured)) = (access, &state.config.sweep_token)
        && configured.matches(token.as_bytes())
    {
        return Ok(None);
    }
    let subject = tokens::verify_token(
        state.config.jwt_secret.expose().as_bytes(),
        token,
        state.config.jwt_ttl,
    )
    .ok_or(ApiError::Unauthorized)?;
    let session = staff::session(&state.db.get().await?, subject.staff_id, subject.version)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let required = access.role();
    if !session.role.allows(required) {
        tracing::info!(
            staff_id = session.id,
            role = %session.role,
            required = %required,
            "refused: role too low"
        );
        return Err(ApiError::Forbidden(format!(
            "this needs the {required} role or higher; this account is {}",
            session.role
        )));
    }
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .map(str::to_string);
    let audited = Arc::new(AtomicBool::new(false));
    req.extensions_mut().insert(Staff {
        id: session.id,
        email: session.email,
        role: session.role,
        request_id,
        audited: audited.clone(),
    });
    Ok(Some(audited))
}
