//! Staff writes and the `Idempotency-Key` header, in one wrapper.
//!
//! Every staff `POST` whose effect commits in one transaction (create subscriber, channel and
//! order, manual grant, cancel, checkout) takes a [`StaffWrite`] and runs its effect through
//! [`idempotent!`](crate::idempotent). Without a key that is simply "authenticate, parse, run in a
//! transaction". With a key (Stripe's semantics, IETF `draft-ietf-httpapi-idempotency-key-header`):
//!
//! 1. In the effect's own transaction, first `INSERT` the key row (scoped per staff account) with
//!    the request's fingerprint (method, path, SHA-256 of the body). A concurrent request with
//!    the same key blocks on the primary key until the first one commits or rolls back — that is
//!    the "in flight" wait; past a lock timeout it gets 409.
//! 2. If the row already existed: a different fingerprint is 422; the same one replays the saved
//!    status and body byte for byte with `Idempotent-Replayed: true`. Nothing runs twice.
//! 3. Otherwise run the effect and store its response in the same row before commit, so the
//!    effect and its saved response commit together or not at all. A failing effect rolls the
//!    key back too: a corrected retry with the same key runs.
//!
//! Keys live 24 hours: an older row with the same key is deleted before the insert (so a reuse
//! runs anew), and the sweep purges expired rows in bulk ([`purge_expired`]).

use axum::{
    body::{Body, Bytes},
    extract::{FromRequest, FromRequestParts, Request},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use deadpool_postgres::Transaction;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_postgres::error::SqlState;

use crate::{api::parse_json, auth::Staff, error::ApiError, state::AppState};

/// The header's name.
pub const HEADER: &str = "idempotency-key";
/// How long a key is remembered, as a PostgreSQL interval.
const KEY_TTL: &str = "24 hours";
/// How long a request waits for an in-flight request with the same key before 409.
const IN_FLIGHT_WAIT: &str = "10s";

/// An authenticated staff write: who, the parsed body, and the idempotency data.
pub struct StaffWrite<T> {
    pub staff: Staff,
    pub body: T,
    key: Option<String>,
    method: String,
    path: String,
    body_sha256: Vec<u8>,
}

/// A body for POSTs that take none: empty, or `{}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoBody {}

/// Parses an `Idempotency-Key` value: 1..255 visible ASCII characters, or a structured-field
/// string (`"..."`, with `\"` and `\\` escapes, spaces allowed inside).
pub fn parse_key(value: &[u8]) -> Result<String, &'static str> {
    let key = if value.len() >= 2 && value[0] == b'"' && value[value.len() - 1] == b'"' {
        let inner = &value[1..value.len() - 1];
        let mut out = Vec::with_capacity(inner.len());
        let mut bytes = inner.iter();
        while let Some(&b) = bytes.next() {
            match b {
                b'\\' => match bytes.next() {
                    Some(&e @ (b'"' | b'\\')) => out.push(e),
                    _ => return Err("has an invalid escape in its quoted form"),
                },
                b'"' => return Err("has an unescaped quote in its quoted form"),
                0x20..=0x7e => out.push(b),
                _ => return Err("must be visible ASCII"),
            }
        }
        out
    } else {
        if !value.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err("must be visible ASCII without spaces (or a quoted string)");
        }
        value.to_vec()
    };
    if key.is_empty() {
        return Err("must not be empty");
    }
    if key.len() > 255 {
        return Err("must be at most 255 characters");
    }
    Ok(String::from_utf8(key).expect("ASCII"))
}

fn key_from_headers(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::BadRequest(
            "Idempotency-Key must be sent once".into(),
        ));
    }
    parse_key(value.as_bytes())
        .map(Some)
        .map_err(|why| ApiError::BadRequest(format!("Idempotency-Key {why}")))
}

impl<T: DeserializeOwned> FromRequest<AppState> for StaffWrite<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let staff = Staff::from_request_parts(&mut parts, state).await?;
        let key = key_from_headers(&parts.headers)?;
        let method = parts.method.to_string();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        let bytes = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(ApiError::from)?;
        let body = parse_json(&bytes)?;
        Ok(StaffWrite {
            staff,
            body,
            key,
            method,
            path,
            body_sha256: Sha256::digest(&bytes).to_vec(),
        })
    }
}

/// A response to send: freshly produced (and saved, when keyed) or replayed.
pub struct Saved {
    status: StatusCode,
    body: Vec<u8>,
    replayed: bool,
}

impl Saved {
    /// The HTTP response: the saved status and body bytes, `Idempotent-Replayed: true` on replay.
    pub fn into_response(self) -> Response {
        let mut response = (
            self.status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            Body::from(self.body),
        )
            .into_response();
        if self.replayed {
            response
                .headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
        }
        response
    }
}

/// Runs a staff write's effect in one transaction, honouring its `Idempotency-Key`; evaluates
/// to `Result<Response, ApiError>`.
///
/// `idempotent!(state, write, |tx| { ...; Ok((StatusCode::CREATED, json_value)) })`: `write` is
/// the handler's [`StaffWrite`], the block is the effect and must only return success statuses.
/// With a key, the block runs only if this request claims the key; otherwise the saved response
/// is replayed. Built on [`transaction!`](crate::transaction), so deadlock victims run again.
#[macro_export]
macro_rules! idempotent {
    ($state:expr, $write:expr, |$tx:ident| $body:block) => {{
        let write = &$write;
        $crate::transaction!($state.db, |$tx| {
            match write.claim($tx).await? {
                Some(saved) => Ok(saved),
                None => {
                    let effect: ::std::result::Result<
                        (::axum::http::StatusCode, ::serde_json::Value),
                        $crate::error::ApiError,
                    > = async { $body }.await;
                    let (status, value) = effect?;
                    write.save($tx, status, &value).await
                }
            }
        })
        .map($crate::idempotency::Saved::into_response)
    }};
}

impl<T> StaffWrite<T> {
    /// Step one inside the transaction: without a key, nothing. With a key, inserts the key
    /// row (waiting for an in-flight twin); when it already existed, returns the saved response
    /// to replay, or 422 when it was used for a different request.
    pub async fn claim(&self, tx: &Transaction<'_>) -> Result<Option<Saved>, ApiError> {
        let Some(key) = &self.key else {
            return Ok(None);
        };
        tx.batch_execute(&format!("SET LOCAL lock_timeout = '{IN_FLIGHT_WAIT}'"))
            .await?;
        tx.execute(
            &format!(
                "DELETE FROM idempotency_keys WHERE staff_id = $1 AND key = $2
                 AND created_at < statement_timestamp() - interval '{KEY_TTL}'"
            ),
            &[&self.staff.id, key],
        )
        .await
        .map_err(in_flight)?;
        let inserted = tx
            .execute(
                "INSERT INTO idempotency_keys (staff_id, key, method, path, body_sha256)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (staff_id, key) DO NOTHING",
                &[
                    &self.staff.id,
                    key,
                    &self.method,
                    &self.path,
                    &self.body_sha256,
                ],
            )
            .await
            .map_err(in_flight)?;
        tx.batch_execute("RESET lock_timeout").await?;
        if inserted == 1 {
            return Ok(None);
        }
        let row = tx
            .query_opt(
                "SELECT method, path, body_sha256, response_status, response_body
                 FROM idempotency_keys WHERE staff_id = $1 AND key = $2",
                &[&self.staff.id, key],
            )
            .await?
            .ok_or_else(|| {
                ApiError::Conflict("a request with this Idempotency-Key is in flight".into())
            })?;
        let same = row.get::<_, String>(0) == self.method
            && row.get::<_, String>(1) == self.path
            && row.get::<_, Vec<u8>>(2) == self.body_sha256;
        if !same {
            return Err(ApiError::Unprocessable(
                "this Idempotency-Key was used for a different request".into(),
            ));
        }
        let status: Option<i16> = row.get(3);
        let body: Option<Vec<u8>> = row.get(4);
        match (
            status.and_then(|s| StatusCode::from_u16(s as u16).ok()),
            body,
        ) {
            (Some(status), Some(body)) => {
                tracing::info!(staff_id = self.staff.id, "idempotent replay");
                Ok(Some(Saved {
                    status,
                    body,
                    replayed: true,
                }))
            }
            _ => Err(ApiError::Conflict(
                "a request with this Idempotency-Key is in flight".into(),
            )),
        }
    }

    /// Step two, after the effect: serializes the response once and, with a key, stores it in
    /// the key row in the same transaction, so a replay is byte for byte what was sent.
    pub async fn save(
        &self,
        tx: &Transaction<'_>,
        status: StatusCode,
        value: &Value,
    ) -> Result<Saved, ApiError> {
        let body = serde_json::to_vec(value).map_err(ApiError::internal)?;
        if let Some(key) = &self.key {
            tx.execute(
                "UPDATE idempotency_keys SET response_status = $3, response_body = $4
                 WHERE staff_id = $1 AND key = $2",
                &[&self.staff.id, key, &(status.as_u16() as i16), &body],
            )
            .await?;
        }
        Ok(Saved {
            status,
            body,
            replayed: false,
        })
    }
}

fn in_flight(e: tokio_postgres::Error) -> ApiError {
    if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
        ApiError::Conflict("a request with this Idempotency-Key is in flight; retry later".into())
    } else {
        ApiError::Db(e)
    }
}

/// Deletes keys older than 24 hours; returns how many.
pub async fn purge_expired(client: &impl tokio_postgres::GenericClient) -> Result<u64, ApiError> {
    Ok(client
        .execute(
            &format!(
                "DELETE FROM idempotency_keys WHERE created_at < statement_timestamp() - interval '{KEY_TTL}'"
            ),
            &[],
        )
        .await?)
}

#[cfg(test)]
mod tests {
    use super::parse_key;

    #[test]
    fn plain_keys() {
        assert_eq!(parse_key(b"abc-123").unwrap(), "abc-123");
        assert!(parse_key(b"").is_err());
        assert!(parse_key(b"has space").is_err());
        assert!(parse_key(b"tab\there").is_err());
        assert!(parse_key(&[b'a'; 255]).is_ok());
        assert!(parse_key(&[b'a'; 256]).is_err());
        assert!(parse_key("ключ".as_bytes()).is_err());
    }

    #[test]
    fn quoted_keys() {
        assert_eq!(parse_key(br#""abc""#).unwrap(), "abc");
        assert_eq!(parse_key(br#""a b""#).unwrap(), "a b");
        assert_eq!(parse_key(br#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert!(parse_key(br#""""#).is_err());
        assert!(parse_key(br#""a\nb""#).is_err());
        assert!(parse_key(br#""a"b""#).is_err());
    }
}
