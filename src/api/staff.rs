//! `/api/staff` (the owner manages staff accounts) and `POST /api/auth/password` (anyone
//! changes their own password). HTTP only: the accounts and the last-owner rule are
//! [`crate::staff`]'s, passwords [`crate::staff::passwords`]'s. Every write is recorded in the audit log in
//! its transaction; a snapshot never holds a password or its hash.

use axum::{
    Json,
    extract::{ConnectInfo, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use serde::Deserialize;

use super::{
    ApiJson, ApiQuery, Errors, Page, Paging, PathId,
    auth::{Staff, client_ip},
    not_null, nullable,
    schemas::{Problem, Token},
};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    staff::{self, Account, Change, Role, accounts, audit_log::Entry, passwords, tokens},
};

/// A new staff account.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"email": "support@example.com", "role": "support",
    "password": "a long support passphrase"}))]
pub struct NewAccount {
    #[schema(required = true, nullable = false, max_length = 254)]
    email: Option<String>,
    #[schema(required = true, nullable = false, value_type = String,
        pattern = "^(owner|admin|support|viewer)$")]
    role: Option<String>,
    /// 8..72 bytes, at least 5 different characters, not a common password, not containing
    /// the email.
    #[schema(required = true, nullable = false, min_length = 8, max_length = 72)]
    password: Option<String>,
}

/// A change of a staff account.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"role": "viewer", "disabled": false}))]
pub struct AccountPatch {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = String, pattern = "^(owner|admin|support|viewer)$")]
    role: Option<Option<String>>,
    /// A disabled account cannot log in and its tokens end at once.
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = bool)]
    disabled: Option<Option<bool>>,
}

/// A password change.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"current_password": "correct horse battery staple",
    "new_password": "a brand new passphrase"}))]
pub struct PasswordChange {
    #[schema(required = true, nullable = false, min_length = 1, max_length = 72)]
    current_password: Option<String>,
    #[schema(required = true, nullable = false, min_length = 8, max_length = 72)]
    new_password: Option<String>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListStaff {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
}

/// `GET /api/staff`.
#[utoipa::path(get, path = "/staff", operation_id = "listStaff", tag = "staff",
    params(ListStaff),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of staff accounts, by id.", body = Page<Account>),
        (status = 422, description = "`limit` out of range.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListStaff>,
) -> Result<Json<Page<Account>>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let items = staff::list(&state.db.get().await?, paging.after, paging.fetch()).await?;
    Ok(Json(paging.page(items, |a: &Account| a.id)))
}

/// `POST /api/staff` → 201 with the account; a taken email → 409.
#[utoipa::path(post, path = "/staff", operation_id = "createStaff", tag = "staff",
    request_body = NewAccount,
    security(("staff_jwt" = [])),
    responses(
        (status = 201, description = "Created.", body = Account),
        (status = 409, description = "A staff account with this email exists.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An invalid email, an unknown role, a weak or over-long \
            password.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    who: Staff,
    ApiJson(b): ApiJson<NewAccount>,
) -> Result<Response, ApiError> {
    let mut e = Errors::default();
    let email = e.required("email", b.email);
    let role_text = e.required("role", b.role.as_deref());
    let role = e.state::<Role>("role", role_text);
    let password = e.required("password", b.password);
    e.finish()?;
    let (Some(email), Some(role), Some(password)) = (email, role, password) else {
        return Err(ApiError::internal("checked fields are missing"));
    };
    let (email, hash) = accounts::new_account(&email, &password, state.config.bcrypt_cost).await?;
    crate::transaction!(state.db, |tx| {
        let account = staff::create(tx, &email, &hash, role).await?;
        who.audit(
            tx,
            Entry::new("staff.create", Some(account.id)).after(&account),
        )
        .await?;
        Ok((StatusCode::CREATED, Json(account)).into_response())
    })
}

/// `PATCH /api/staff/{id}`: `role` and/or `disabled`. A new role or a disabling ends the
/// account's tokens at once. 409 when it would leave no enabled owner.
#[utoipa::path(patch, path = "/staff/{id}", operation_id = "patchStaff", tag = "staff",
    params(("id" = i64, Path, description = "Staff account id.")),
    request_body(content = Option<AccountPatch>, description = "The fields to change."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The account as changed.", body = Account),
        (status = 409, description = "It is the last enabled owner.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An unknown role, or a `null`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    who: Staff,
    PathId(id): PathId<i64>,
    ApiJson(b): ApiJson<AccountPatch>,
) -> Result<Json<Account>, ApiError> {
    let mut e = Errors::default();
    let role = not_null(&mut e, "role", b.role);
    let disabled = not_null(&mut e, "disabled", b.disabled);
    let change = Change {
        role: e.state::<Role>("role", role.as_deref()),
        disabled,
    };
    e.finish()?;
    crate::transaction!(state.db, |tx| {
        let (before, after) = staff::change(tx, id, change).await?;
        who.audit(
            tx,
            Entry::new("staff.update", Some(id))
                .before(&before)
                .after(&after),
        )
        .await?;
        Ok(Json(after))
    })
}

/// `DELETE /api/staff/{id}` → 204; the last enabled owner → 409.
#[utoipa::path(delete, path = "/staff/{id}", operation_id = "deleteStaff", tag = "staff",
    params(("id" = i64, Path, description = "Staff account id.")),
    security(("staff_jwt" = [])),
    responses(
        (status = 204, description = "Deleted; its audit log rows stay."),
        (status = 409, description = "It is the last enabled owner.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    who: Staff,
    PathId(id): PathId<i64>,
) -> Result<Response, ApiError> {
    crate::transaction!(state.db, |tx| {
        let before = staff::delete(tx, id).await?;
        who.audit(tx, Entry::new("staff.delete", Some(id)).before(&before))
            .await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}

/// `POST /api/auth/password`: changes the caller's own password. Every token of the account
/// ends, the caller's included; the answer is a new token, so the caller stays logged in.
/// A wrong `current_password` is a 422 on that field, counted by the login throttle like a
/// failed login (429 past its limit).
#[utoipa::path(post, path = "/auth/password", operation_id = "changePassword", tag = "auth",
    request_body = PasswordChange,
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "Changed; the account's other tokens are ended. A new \
            token for the caller.", body = Token),
        (status = 422, description = "`current_password` is wrong, or `new_password` is weak \
            or over-long.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many wrong current passwords.", body = Problem,
            content_type = "application/problem+json",
            headers(("Retry-After" = String, description = "Seconds to wait."))),
    ),
)]
pub async fn change_password(
    State(state): State<AppState>,
    who: Staff,
    peer: Option<axum::Extension<ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<PasswordChange>,
) -> Result<Json<Token>, ApiError> {
    let mut e = Errors::default();
    let current = e.required("current_password", b.current_password);
    let new = e.required("new_password", b.new_password);
    if let Some(c) = &current
        && c.len() > 72
    {
        e.add("current_password", "must be at most 72 bytes");
    }
    if let Some(n) = &new
        && let Err(why) = passwords::check_new_password(n, &who.email)
    {
        e.add("new_password", why);
    }
    e.finish()?;
    let (Some(current), Some(new)) = (current, new) else {
        return Err(ApiError::internal("checked fields are missing"));
    };
    let cfg = &state.config;
    let peer = peer.map(|axum::Extension(ConnectInfo(addr))| addr);
    let key = (
        who.email.clone(),
        client_ip(&headers, peer, cfg.trust_proxy),
    );
    let too_many = |retry_after_secs| ApiError::TooManyRequests { retry_after_secs };
    state
        .login_throttle
        .check(&key, cfg.login_max_failures, cfg.login_window)
        .map_err(too_many)?;
    let hash = accounts::password_hash(&state.db.get().await?, who.id)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let permit = state.hash_permits.acquire().await.ok_or_else(|| {
        ApiError::Unavailable("too many passwords are being checked; retry shortly".into())
    })?;
    let attempt = state
        .login_throttle
        .reserve(key, cfg.login_max_failures, cfg.login_window)
        .map_err(too_many)?;
    if !passwords::verify_login(permit, attempt, current, hash, true).await? {
        return Err(ApiError::field(
            "current_password",
            "is not this account's password",
        ));
    }
    let new_hash = passwords::hash_password(new, cfg.bcrypt_cost).await?;
    let version = crate::transaction!(state.db, |tx| {
        let version = accounts::change_password(tx, who.id, &new_hash).await?;
        // No password, old or new, in the record: only that it changed.
        who.audit(tx, Entry::new("staff.change_password", Some(who.id)))
            .await?;
        Ok(version)
    })?;
    tracing::info!(staff_id = who.id, "password changed; sessions ended");
    let token = tokens::issue_token(
        cfg.jwt_secret.expose().as_bytes(),
        who.id,
        version,
        cfg.jwt_ttl,
    )?;
    Ok(Json(Token {
        access_token: token,
        token_type: "Bearer".into(),
        expires_in: cfg.jwt_ttl.as_secs(),
        role: who.role,
    }))
}
