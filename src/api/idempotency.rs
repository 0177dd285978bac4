//! Staff writes and the `Idempotency-Key` header, in one wrapper: the HTTP side of
//! [`crate::staff::idempotency`].
//!
//! Every staff `POST` whose effect commits in one transaction (create subscriber, channel and
//! order, manual grant, cancel, checkout, effect retry) takes a [`StaffWrite`] and runs its
//! effect through [`idempotent!`](crate::idempotent). Without a key that is simply
//! "authenticate, parse, run in a transaction". With a key, the key row is claimed first in the
//! effect's transaction and the response saved in it last ([`crate::staff::idempotency`] has the
//! rules), so a repeat replays the saved status and body byte for byte with
//! `Idempotent-Replayed: true`.

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

use super::{auth::Staff, parse_json};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    staff::idempotency::{self, Fingerprint, SavedResponse, parse_key},
};

/// The header's name.
pub const HEADER: &str = "idempotency-key";

/// An authenticated staff write: who, the parsed body, and the idempotency data.
pub struct StaffWrite<T> {
    pub staff: Staff,
    pub body: T,
    key: Option<String>,
    fingerprint: Fingerprint,
}

/// A body for POSTs that take none: empty, or `{}`.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoBody {}

/// The `Idempotency-Key` header of staff writes, as the OpenAPI document describes it.
#[derive(utoipa::IntoParams)]
#[into_params(names("Idempotency-Key"), parameter_in = Header)]
pub struct IdempotencyKey(
    /// Makes the request safe to retry: a repeat with the same key and request answers the saved
    /// response with `Idempotent-Replayed: true` and runs nothing again. Scoped per staff
    /// account, kept 24 hours; 1..255 visible ASCII characters (a quoted structured-field string
    /// is accepted too).
    #[param(pattern = "^[!-~]{1,255}$")]
    #[allow(dead_code)]
    Option<String>,
);

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
            fingerprint: Fingerprint {
                method,
                path,
                body_sha256: Sha256::digest(&bytes).to_vec(),
            },
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
                        $crate::common::error::ApiError,
                    > = async { $body }.await;
                    let (status, value) = effect?;
                    write.save($tx, status, &value).await
                }
            }
        })
        .map($crate::api::idempotency::Saved::into_response)
    }};
}

impl<T> StaffWrite<T> {
    /// Step one inside the transaction: without a key, nothing. With a key, claims it
    /// ([`idempotency::claim`]); when it was claimed before, returns the saved response to
    /// replay.
    pub async fn claim(&self, tx: &Transaction<'_>) -> Result<Option<Saved>, ApiError> {
        let Some(key) = &self.key else {
            return Ok(None);
        };
        let Some(saved) = idempotency::claim(tx, self.staff.id, key, &self.fingerprint).await?
        else {
            return Ok(None);
        };
        self.staff.no_write();
        let status = StatusCode::from_u16(saved.status).map_err(|_| {
            ApiError::Conflict("a request with this Idempotency-Key is in flight".into())
        })?;
        tracing::info!(
            staff_id = self.staff.id,
            status = status.as_u16(),
            "Idempotency-Key seen before: the saved response replayed, nothing run again"
        );
        Ok(Some(Saved {
            status,
            body: saved.body,
            replayed: true,
        }))
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
        let response = SavedResponse {
            status: status.as_u16(),
            body,
        };
        if let Some(key) = &self.key {
            idempotency::save(tx, self.staff.id, key, &response).await?;
        }
        Ok(Saved {
            status,
            body: response.body,
            replayed: false,
        })
    }
}
