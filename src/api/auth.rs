//! `POST /api/auth/login` and the [`Staff`] extractor: the HTTP side of staff authentication.
//! Tokens, passwords, the login throttle and the account lookups are [`crate::staff`]'s.
//!
//! Login answers the same 401, in about the same time, for an unknown email and a wrong
//! password (an unknown email is checked against the dummy hash); docs/auth.md has the rules.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    extract::{ConnectInfo, FromRequestParts, State},
    http::{HeaderMap, request::Parts},
};
use serde::Deserialize;

use super::{
    ApiJson,
    schemas::{Problem, Token},
};
use deadpool_postgres::GenericClient;

use crate::{
    app::state::AppState,
    common::error::ApiError,
    staff::{
        Role, accounts,
        audit_log::{self, Actor, Entry},
        passwords,
        throttle::MAX_EMAIL_BYTES,
        tokens,
    },
};

/// The authenticated staff account behind a request, as the role layer
/// ([`super::roles::needs`]) found it.
#[derive(Debug, Clone)]
pub struct Staff {
    pub id: i64,
    pub email: String,
    pub role: Role,
    /// The request's `x-request-id`, for the audit log.
    pub request_id: Option<String>,
    /// Set once the request's write is in the audit log ([`Staff::audit`]); the role layer
    /// checks it after a successful write (`api::roles`).
    pub audited: Arc<AtomicBool>,
}

impl Staff {
    /// Who made a write, as the audit log records it.
    pub fn actor(&self) -> Actor {
        Actor {
            staff_id: self.id,
            email: self.email.clone(),
            request_id: self.request_id.clone(),
        }
    }

    /// Records this request's write in the audit log, in the write's transaction `tx`.
    pub async fn audit(&self, tx: &impl GenericClient, entry: Entry) -> Result<(), ApiError> {
        audit_log::record(tx, &self.actor(), entry).await?;
        self.audited.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Marks the request's write as recorded in the audit log by the domain function that
    /// made it, in its transaction (it took [`Staff::actor`]).
    pub fn recorded(&self) {
        self.audited.store(true, Ordering::Relaxed);
    }

    /// Marks a success that writes nothing now: an `Idempotency-Key` replay (its write ran,
    /// and was recorded, once), or an answer that was already there.
    pub fn no_write(&self) {
        self.audited.store(true, Ordering::Relaxed);
    }
}

/// The bearer token of a request, if it has one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

/// Reads the [`Staff`] the role layer authenticated. A route without a declared role has
/// none: refused (500, logged) rather than served to anyone.
impl<S: Send + Sync> FromRequestParts<S> for Staff {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts.extensions.get::<Staff>().cloned().ok_or_else(|| {
            ApiError::internal(format!(
                "{} declares no role in the router (api::roles::needs)",
                parts.uri.path()
            ))
        })
    }
}

/// The client's address: the socket peer, or with `TRUST_PROXY` the right-most address of the
/// *last* `X-Forwarded-For` line, the one our own proxy wrote (a client may send lines and
/// entries of its own before it, which proxies keep). When that entry is not an address, the
/// peer (the proxy) is the client. The throttle keys IPv6 addresses by their /64
/// ([`crate::staff::throttle::throttle_address`]).
pub fn client_ip(headers: &HeaderMap, peer: Option<SocketAddr>, trust_proxy: bool) -> IpAddr {
    if trust_proxy
        && let Some(ip) = headers
            .get_all("x-forwarded-for")
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(forwarded_address)
    {
        return ip;
    }
    peer.map(|p| p.ip()).unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// One `X-Forwarded-For` entry as an address: `192.0.2.1`, `2001:db8::1`, and the forms with a
/// port or brackets some proxies write (`192.0.2.1:4711`, `[2001:db8::1]:4711`, `[2001:db8::1]`).
fn forwarded_address(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|a| a.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .and_then(|e| e.parse().ok())
        })
}

/// A staff login.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"email": "admin@example.com", "password": "correct horse battery"}))]
pub struct LoginRequest {
    #[schema(required = true, nullable = false, min_length = 1, max_length = 254)]
    email: Option<String>,
    /// At most 72 bytes (bcrypt would truncate a longer one).
    #[schema(required = true, nullable = false, min_length = 1, max_length = 72)]
    password: Option<String>,
}

/// The login's fields, checked: the normalized email and the password (422 naming each field
/// that is missing or too long; an overlong email never reaches the throttle or the database).
fn credentials(req: LoginRequest) -> Result<(String, String), ApiError> {
    let mut errors = BTreeMap::new();
    let email = req
        .email
        .map(|e| e.trim().to_lowercase())
        .unwrap_or_default();
    if email.is_empty() {
        errors.insert("email".to_string(), "is required".to_string());
    } else if email.len() > MAX_EMAIL_BYTES {
        errors.insert(
            "email".to_string(),
            format!("must be at most {MAX_EMAIL_BYTES} bytes"),
        );
    }
    let password = req.password.unwrap_or_default();
    if password.is_empty() {
        errors.insert("password".to_string(), "is required".to_string());
    } else if password.len() > 72 {
        errors.insert(
            "password".to_string(),
            "must be at most 72 bytes (bcrypt would truncate it)".to_string(),
        );
    }
    if errors.is_empty() {
        Ok((email, password))
    } else {
        Err(ApiError::Validation(errors))
    }
}

/// `POST /api/auth/login`.
///
/// In order: field checks (422); a locked-out pair, or an account at its account-wide limit
/// from an address not known to it, is refused at once (429); the account is looked up; a
/// password-hashing permit is taken (503 when none frees up quickly); the attempt is counted
/// (429 if parallel attempts used an allowance); bcrypt runs on the blocking
/// pool, and the attempt is judged there, so a dropped request cannot un-count a guess that
/// was checked.
#[utoipa::path(post, path = "/auth/login", operation_id = "login", tag = "auth",
    request_body = LoginRequest,
    security(()),
    responses(
        (status = 200, description = "Logged in.", body = Token),
        (status = 401, description = "Wrong email or password (the same answer, in about the same \
            time, for both).", body = Problem, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String, description = "`Bearer`."))),
        (status = 422, description = "A field is missing or too long.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many failed logins for this email from this address, or \
            for this email from everywhere (then addresses that logged in to it before are still let through).",
            body = Problem, content_type = "application/problem+json", headers(("Retry-After" = String, description = "Seconds to wait."))),
    ),
)]
pub async fn login(
    State(state): State<AppState>,
    peer: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LoginRequest>,
) -> Result<axum::Json<Token>, ApiError> {
    let (email, password) = credentials(req)?;
    let peer = peer.map(|axum::Extension(ConnectInfo(addr))| addr);
    let key = (
        email.clone(),
        client_ip(&headers, peer, state.config.trust_proxy),
    );
    let cfg = &state.config;
    let too_many = |retry_after_secs| ApiError::TooManyRequests { retry_after_secs };
    state
        .login_throttle
        .check(&key, cfg.login_max_failures, cfg.login_window)
        .map_err(too_many)?;

    // PostgreSQL text cannot hold NUL, so no account has such an email: treat it as unknown
    // (same 401, same dummy-hash time) instead of sending it to the database.
    let account = if email.contains('\0') {
        None
    } else {
        accounts::find_login(&state.db.get().await?, &email).await?
    };
    let (id, version, hash, role) = match account {
        Some(a) => (Some(a.id), a.token_version, a.password_hash, Some(a.role)),
        None => (None, 0, state.dummy_hash.get().await?, None),
    };

    let permit = state.hash_permits.acquire().await.ok_or_else(|| {
        ApiError::Unavailable("too many logins are being checked; retry shortly".into())
    })?;
    let attempt = state
        .login_throttle
        .reserve(key, cfg.login_max_failures, cfg.login_window)
        .map_err(too_many)?;
    let ok = passwords::verify_login(permit, attempt, password, hash, id.is_some()).await?;
    let (Some(id), Some(role)) = (id.filter(|_| ok), role) else {
        tracing::info!("login failed");
        return Err(ApiError::Unauthorized);
    };
    let token = tokens::issue_token(cfg.jwt_secret.expose().as_bytes(), id, version, cfg.jwt_ttl)?;
    tracing::info!(staff_id = id, "login succeeded");
    Ok(axum::Json(Token {
        access_token: token,
        token_type: "Bearer".into(),
        expires_in: cfg.jwt_ttl.as_secs(),
        role,
    }))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append("x-forwarded-for", HeaderValue::from_str(line).unwrap());
        }
        headers
    }

    const PEER: &str = "10.0.0.2:5000";

    fn ip_of(lines: &[&str], trust_proxy: bool) -> IpAddr {
        client_ip(&headers(lines), Some(PEER.parse().unwrap()), trust_proxy)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_client_is_the_last_lines_right_most_address() {
        assert_eq!(ip_of(&["192.0.2.1"], true), ip("192.0.2.1"));
        assert_eq!(ip_of(&["198.51.100.7, 192.0.2.1"], true), ip("192.0.2.1"));
        // A client-sent first line, then the line our proxy appended.
        assert_eq!(ip_of(&["198.51.100.7", "192.0.2.1"], true), ip("192.0.2.1"));
        assert_eq!(
            ip_of(&["198.51.100.7, 203.0.113.1", "10.1.1.1,192.0.2.1 "], true),
            ip("192.0.2.1")
        );
        assert_eq!(ip_of(&["2001:db8::1"], true), ip("2001:db8::1"));
        assert_eq!(ip_of(&["192.0.2.1:4711"], true), ip("192.0.2.1"));
        assert_eq!(ip_of(&["[2001:db8::1]:4711"], true), ip("2001:db8::1"));
        assert_eq!(ip_of(&["[2001:db8::1]"], true), ip("2001:db8::1"));
    }

    #[test]
    fn without_a_usable_forwarded_address_the_peer_is_the_client() {
        let peer = ip("10.0.0.2");
        // Not behind a trusted proxy: the header is the client's own words.
        assert_eq!(ip_of(&["192.0.2.1"], false), peer);
        assert_eq!(ip_of(&[], true), peer);
        // The last line's right-most entry is no address: never an earlier, client-sent one.
        assert_eq!(ip_of(&["192.0.2.1", "unknown"], true), peer);
        assert_eq!(ip_of(&["192.0.2.1, "], true), peer);
        assert_eq!(ip_of(&["192.0.2.1", ""], true), peer);
        assert_eq!(
            client_ip(&headers(&[]), None, true),
            IpAddr::from([127, 0, 0, 1])
        );
    }
}
