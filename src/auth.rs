//! Staff authentication: bcrypt passwords, HS256 JWTs, the `Staff` extractor, the login
//! throttle, and staff-account creation (start-up admin and CLI).
//!
//! Login answers the same 401, in about the same time, for an unknown email and a wrong
//! password: an unknown email is still checked against a dummy bcrypt hash of the configured
//! cost. Failures are counted per (email, client address) so a stranger elsewhere cannot lock
//! the admin out; the count lives in process memory (one server process per deployment).

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    extract::{ConnectInfo, FromRequestParts, State},
    http::{HeaderMap, request::Parts},
};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{api::ApiJson, error::ApiError, state::AppState};

/// The authenticated staff account behind a request.
#[derive(Debug, Clone, Copy)]
pub struct Staff {
    pub id: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    iat: i64,
    exp: i64,
}

/// Issues a token for a staff account.
pub fn issue_token(secret: &[u8], staff_id: i64, ttl: Duration) -> Result<String, ApiError> {
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        sub: staff_id.to_string(),
        iat: now,
        exp: now + ttl.as_secs() as i64,
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .map_err(ApiError::internal)
}

/// Validates a token: HS256 only (so `alg: none` and every other algorithm fail), signature,
/// `exp` with zero leeway. Returns the staff id in `sub`.
pub fn verify_token(secret: &[u8], token: &str) -> Option<i64> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 0;
    validation.validate_exp = true;
    validation.set_required_spec_claims(&["exp", "sub"]);
    let data =
        jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(secret), &validation)
            .ok()?;
    // jsonwebtoken treats exp == now as valid; the contract says past exp, so this is exact.
    if data.claims.exp <= chrono::Utc::now().timestamp() {
        return None;
    }
    data.claims.sub.parse().ok()
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

impl FromRequestParts<AppState> for Staff {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer(&parts.headers).ok_or(ApiError::Unauthorized)?;
        let id = verify_token(state.config.jwt_secret.expose().as_bytes(), token)
            .ok_or(ApiError::Unauthorized)?;
        let client = state.db.get().await?;
        let exists = client
            .query_opt("SELECT 1 FROM staff_accounts WHERE id = $1", &[&id])
            .await?
            .is_some();
        if !exists {
            return Err(ApiError::Unauthorized);
        }
        Ok(Staff { id })
    }
}

/// A syntactic email check: something@something.tld, no spaces or control characters,
/// ≤ 254 bytes.
pub fn valid_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else {
        return false;
    };
    email.len() <= 254
        && !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !email.contains(|c: char| c.is_whitespace() || c.is_control())
        && !domain.contains('@')
}

/// Hashes a password with bcrypt on the blocking pool.
pub async fn hash_password(password: String, cost: u32) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}

async fn verify_password(password: String, hash: String) -> Result<bool, ApiError> {
    tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
        .await
        .map_err(ApiError::internal)
}

/// Creates a staff account unless one with that email exists. Returns whether it was created.
pub async fn create_staff(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    cost: u32,
) -> Result<bool, ApiError> {
    let email = email.trim().to_lowercase();
    if !valid_email(&email) {
        return Err(ApiError::field("email", "must be a valid email address"));
    }
    if password.len() < 8 || password.len() > 72 {
        return Err(ApiError::field("password", "must be 8..72 bytes"));
    }
    let hash = hash_password(password.to_string(), cost).await?;
    let client = pool.get().await?;
    let inserted = client
        .execute(
            "INSERT INTO staff_accounts (email, password_hash) VALUES ($1, $2)
             ON CONFLICT (email) DO NOTHING",
            &[&email, &hash],
        )
        .await?;
    Ok(inserted == 1)
}

/// (email, client address) → (failures, start of the counting window).
type FailureCounts = HashMap<(String, IpAddr), (u32, Instant)>;

/// Failed-login counts per (email, client address).
#[derive(Clone, Default)]
pub struct LoginThrottle {
    inner: Arc<Mutex<FailureCounts>>,
}

impl LoginThrottle {
    /// `Err(retry_after_secs)` while the pair is locked out.
    fn check(&self, key: &(String, IpAddr), max: u32, window: Duration) -> Result<(), u64> {
        let map = self.inner.lock().expect("throttle lock");
        match map.get(key) {
            Some(&(count, since)) if count >= max && since.elapsed() < window => {
                Err((window - since.elapsed()).as_secs().max(1))
            }
            _ => Ok(()),
        }
    }

    fn fail(&self, key: (String, IpAddr), window: Duration) {
        let mut map = self.inner.lock().expect("throttle lock");
        if map.len() > 100_000 {
            map.retain(|_, (_, since)| since.elapsed() < window);
        }
        let entry = map.entry(key).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= window {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
    }

    fn succeed(&self, key: &(String, IpAddr)) {
        self.inner.lock().expect("throttle lock").remove(key);
    }
}

/// The client's address: the socket peer, or with `TRUST_PROXY` the right-most
/// `X-Forwarded-For` entry (the one our own proxy appended).
fn client_ip(parts_headers: &HeaderMap, peer: Option<SocketAddr>, trust_proxy: bool) -> IpAddr {
    if trust_proxy
        && let Some(ip) = parts_headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse().ok())
    {
        return ip;
    }
    peer.map(|p| p.ip()).unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    email: Option<String>,
    password: Option<String>,
}

/// `POST /api/auth/login`.
pub async fn login(
    State(state): State<AppState>,
    peer: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LoginRequest>,
) -> Result<axum::Json<Value>, ApiError> {
    let mut errors = std::collections::BTreeMap::new();
    let email = req
        .email
        .map(|e| e.trim().to_lowercase())
        .unwrap_or_default();
    if email.is_empty() {
        errors.insert("email".to_string(), "is required".to_string());
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
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }

    let peer = peer.map(|axum::Extension(ConnectInfo(addr))| addr);
    let key = (
        email.clone(),
        client_ip(&headers, peer, state.config.trust_proxy),
    );
    let cfg = &state.config;
    state
        .login_throttle
        .check(&key, cfg.login_max_failures, cfg.login_window)
        .map_err(|retry_after_secs| ApiError::TooManyRequests { retry_after_secs })?;

    // PostgreSQL text cannot hold NUL, so no account has such an email: treat it as unknown
    // (same 401, same dummy-hash time) instead of sending it to the database.
    let row = if email.contains('\0') {
        None
    } else {
        let client = state.db.get().await?;
        client
            .query_opt(
                "SELECT id, password_hash FROM staff_accounts WHERE email = $1",
                &[&email],
            )
            .await?
    };
    let (id, hash) = match row {
        Some(r) => (Some(r.get::<_, i64>(0)), r.get::<_, String>(1)),
        None => (None, state.dummy_hash.as_ref().clone()),
    };
    let ok = verify_password(password, hash).await? && id.is_some();
    let Some(id) = id.filter(|_| ok) else {
        state.login_throttle.fail(key, cfg.login_window);
        tracing::info!("login failed");
        return Err(ApiError::Unauthorized);
    };
    state.login_throttle.succeed(&key);
    let token = issue_token(cfg.jwt_secret.expose().as_bytes(), id, cfg.jwt_ttl)?;
    tracing::info!(staff_id = id, "login succeeded");
    Ok(axum::Json(json!({
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": cfg.jwt_ttl.as_secs(),
    })))
}
