//! Staff tokens: HS256 JWTs that carry the account's id and its token version. Whether a token
//! still opens the API (the account exists, is enabled, and its version is still the token's)
//! is [`crate::staff::session`]'s question, asked of the database on every request.

use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::common::error::ApiError;

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    iat: i64,
    exp: i64,
    /// The account's `token_version` when the token was issued. A token without it counts as
    /// version 0, the column's default: it opens the API until the account's first bump.
    #[serde(default)]
    ver: i32,
}

/// Who a valid token speaks for: the staff account and the token version it was issued under
/// (checked against the account's current `token_version`, [`crate::staff::session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenSubject {
    pub staff_id: i64,
    pub version: i32,
}

/// Issues a token for a staff account whose `token_version` is `version`.
pub fn issue_token(
    secret: &[u8],
    staff_id: i64,
    version: i32,
    ttl: Duration,
) -> Result<String, ApiError> {
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        sub: staff_id.to_string(),
        iat: now,
        exp: now + ttl.as_secs() as i64,
        ver: version,
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .map_err(ApiError::internal)
}

/// Validates a token: HS256 only (so `alg: none` and every other algorithm fail), signature,
/// `exp` with zero leeway, `iat` not in the future (zero leeway: this server issued it, by its
/// own clock), and a lifetime `exp - iat` of at most `max_ttl` (`JWT_TTL_SECS`: no token lives
/// longer than this server would issue one for). Returns the staff id in `sub` and the token
/// version in `ver`; whether they still match the account is [`crate::staff::session`]'s question.
pub fn verify_token(secret: &[u8], token: &str, max_ttl: Duration) -> Option<TokenSubject> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 0;
    validation.validate_exp = true;
    validation.set_required_spec_claims(&["exp", "sub", "iat"]);
    let data =
        jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(secret), &validation)
            .ok()?;
    let claims = data.claims;
    let now = chrono::Utc::now().timestamp();
    // jsonwebtoken treats exp == now as valid; the contract says past exp, so this is exact.
    if claims.exp <= now || claims.iat > now {
        return None;
    }
    let lifetime = claims.exp.checked_sub(claims.iat)?;
    if lifetime > i64::try_from(max_ttl.as_secs()).unwrap_or(i64::MAX) {
        return None;
    }
    Some(TokenSubject {
        staff_id: claims.sub.parse().ok()?,
        version: claims.ver,
    })
}
