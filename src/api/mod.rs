//! The HTTP layer: every route ([`router`]), every handler — the staff REST API by resource,
//! login ([`auth`]) and the payment doors ([`webhooks`]) — the extractors and list
//! envelope they share, the `Idempotency-Key` wrapper of staff writes ([`idempotency`]) and the
//! rendering of errors as problem documents ([`error`]). Handlers turn requests into plain
//! values, call the domain modules and turn their results into HTTP; nothing outside this
//! module imports it.
//!
//! Bodies and query strings are parsed by our own extractors so that every rejection is an
//! [`ApiError`] (problem+json): malformed JSON, wrong types, unknown fields and unknown query
//! parameters are 400; missing or invalid values are 422 with per-field messages, produced by
//! each resource's validation.

pub mod app_page;
pub mod audit_log;
pub mod audits;
pub mod auth;
pub mod automations;
pub mod broadcasts;
pub mod channels;
pub mod console;
pub mod effects;
pub mod embedded;
pub mod error;
pub mod exemptions;
pub mod exports;
pub mod idempotency;
pub mod invoice_links;
pub mod join_requests;
pub mod memberships;
pub mod mini_app;
pub mod openapi;
pub mod orders;
pub mod overview;
pub mod payments;
pub mod plans;
pub mod promo_codes;
pub mod reconciliation;
pub mod referrals;
pub mod roles;
pub mod router;
pub mod schemas;
pub mod staff;
pub mod star_subscriptions;
pub mod stats;
pub mod subscribers;
pub mod sweep;
pub mod webhook_endpoints;
pub mod webhooks;

use std::collections::BTreeMap;

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::request::Parts,
};
use serde::{Deserialize, Deserializer, Serialize, de::DeserializeOwned};

use crate::common::error::ApiError;

/// A JSON body whose rejection is a 400 problem naming what is wrong (413 when too large). The
/// content type is not required to be `application/json` (gateways and curl users often omit
/// it).
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses a JSON body, which must be an object (an empty body counts as `{}`); every failure is
/// a 400 with serde's description (line, column, field).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    // Every body of this API is an object. serde's derived structs also accept a JSON array
    // (their fields by position; an empty array for a struct without fields), which no client
    // means: refuse anything but an object before serde sees it.
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(ApiError::BadRequest(
            "invalid JSON body: expected a JSON object".into(),
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
}

/// A query string whose rejection (unknown parameter, wrong type) is a 400 problem.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str(query)
            .map(ApiQuery)
            .map_err(|e| ApiError::BadRequest(format!("invalid query string: {e}")))
    }
}

/// A path id; a non-numeric or out-of-range id is a 404 (no such record can exist).
pub struct PathId<T>(pub T);

impl<S: Send + Sync, T: std::str::FromStr + Send> FromRequestParts<S> for PathId<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(raw) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|_| ApiError::NotFound("record"))?;
        raw.parse()
            .map(PathId)
            .map_err(|_| ApiError::NotFound("record"))
    }
}

/// The list envelope: `{"items": [...], "next_after": <id or null>}`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Page<T: Serialize> {
    pub items: Vec<T>,
    /// Pass as `after` for the next page; null on the last one.
    pub next_after: Option<i64>,
}

/// Keyset pagination parameters shared by every list.
pub struct Paging {
    /// Rows to return (1..=200).
    pub limit: i64,
    /// Return ids strictly greater than this.
    pub after: i64,
}

impl Paging {
    /// Validates `limit` (default 50, 1..=200) and `after` (default 0).
    pub fn new(limit: Option<i64>, after: Option<i64>) -> Result<Paging, ApiError> {
        let limit = limit.unwrap_or(50);
        if !(1..=200).contains(&limit) {
            return Err(ApiError::field("limit", "must be from 1 to 200"));
        }
        Ok(Paging {
            limit,
            after: after.unwrap_or(0),
        })
    }

    /// The `LIMIT` to ask for: one more row than returned tells whether a next page exists.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// Trims the extra row and computes `next_after`.
    pub fn page<T: Serialize>(&self, mut items: Vec<T>, id: impl Fn(&T) -> i64) -> Page<T> {
        let next_after = if items.len() as i64 > self.limit {
            items.truncate(self.limit as usize);
            items.last().map(id)
        } else {
            None
        };
        Page { items, next_after }
    }
}

/// For PATCH bodies: distinguishes an absent field (`None`) from an explicit `null`
/// (`Some(None)`). Use with `#[serde(default, deserialize_with = "nullable")]`.
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A nested object field: absent or `null` is `None`, an object its value; anything else is
/// refused — an array too, which serde's derived `Deserialize` would read as the struct's fields
/// in order. Use with `#[serde(default, deserialize_with = "object")]`.
pub fn object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    match Option::<serde_json::Value>::deserialize(d)? {
        None => Ok(None),
        Some(v @ serde_json::Value::Object(_)) => serde_json::from_value(v)
            .map(Some)
            .map_err(D::Error::custom),
        Some(_) => Err(D::Error::custom("expected an object")),
    }
}

/// [`object`] for PATCH: an absent field is `None`, an explicit `null` `Some(None)`.
pub fn nullable_object<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    object(d).map(Some)
}

/// For PATCH fields that cannot be null: absent (`None`) means "leave alone"; an explicit `null`
/// is recorded as an error instead of being silently ignored. Read the field with
/// `#[serde(default, deserialize_with = "nullable")]`.
pub fn not_null<T>(e: &mut Errors, field: &str, value: Option<Option<T>>) -> Option<T> {
    if matches!(value, Some(None)) {
        e.add(field, "must not be null");
    }
    value.flatten()
}

/// Collects per-field validation messages; `finish` turns any into a 422.
#[derive(Default)]
pub struct Errors(BTreeMap<String, String>);

impl Errors {
    pub fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0
            .entry(field.to_string())
            .or_insert_with(|| message.into());
    }

    /// A required field: records "is required" when absent.
    pub fn required<T>(&mut self, field: &str, value: Option<T>) -> Option<T> {
        if value.is_none() {
            self.add(field, "is required");
        }
        value
    }

    /// An optional state filter or field: records "must be a, b or c" when the value is not a
    /// spelling of `T`.
    pub fn state<T: crate::db::TextEnum>(&mut self, field: &str, value: Option<&str>) -> Option<T> {
        let v = value?;
        let parsed = T::parse_text(v);
        if parsed.is_none() {
            self.add(field, format!("must be {}", T::spellings_text()));
        }
        parsed
    }

    pub fn finish(self) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::Validation(self.0))
        }
    }
}

/// Parses an optional query filter of a state enum; an unknown value is a 422 naming the field
/// and every accepted spelling ("must be a, b or c").
pub fn state_filter<T: crate::db::TextEnum>(
    field: &str,
    value: Option<&str>,
) -> Result<Option<T>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) => T::parse_text(v)
            .map(Some)
            .ok_or_else(|| ApiError::field(field, format!("must be {}", T::spellings_text()))),
    }
}

/// Checks optional text a client sent: at most `max` characters and no NUL (which PostgreSQL
/// text cannot hold; without this check it would surface as a database error).
pub fn check_text(e: &mut Errors, field: &str, v: Option<&str>, max: usize) {
    if let Some(v) = v {
        if v.contains('\0') {
            e.add(field, "must not contain NUL characters");
        } else if chars(v) > max {
            e.add(field, format!("must be at most {max} characters"));
        }
    }
}

/// Checks a channel's or plan's `translations` ([`crate::present::translations::check`]).
pub fn check_translations(e: &mut Errors, v: Option<&serde_json::Value>) {
    if let Some(Err(errors)) = v.map(crate::present::translations::check) {
        for (field, message) in errors {
            e.add(&field, message);
        }
    }
}

/// Length of text in characters, as the schema's `char_length` counts it.
pub fn chars(s: &str) -> usize {
    s.chars().count()
}
