//! `Idempotency-Key` for staff writes: the key rows, without HTTP. The HTTP side (the
//! `StaffWrite` extractor and the `idempotent!` wrapper every keyed handler runs its effect
//! through) is `api::idempotency`; it calls [`claim`] and [`save`] inside the effect's
//! transaction. With a key (Stripe's semantics, IETF `draft-ietf-httpapi-idempotency-key-header`):
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

use deadpool_postgres::Transaction;
use tokio_postgres::error::SqlState;

use crate::common::error::ApiError;

/// How long a key is remembered, as a PostgreSQL interval (a macro, so the SQL constants below
/// can spell it with `concat!`).
macro_rules! key_ttl {
    () => {
        "24 hours"
    };
}
/// How long a request waits for an in-flight request with the same key before 409.
macro_rules! in_flight_wait {
    () => {
        "10s"
    };
}

/// What identifies one request under a key: a reuse of the key for anything else is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub method: String,
    /// The path and query string.
    pub path: String,
    pub body_sha256: Vec<u8>,
}

/// A response saved under a key: its status and the body bytes, exactly as first sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

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

const LOCK_WAIT_SQL: &str = concat!("SET LOCAL lock_timeout = '", in_flight_wait!(), "'");
const DELETE_STALE_SQL: &str = concat!(
    "DELETE FROM idempotency_keys WHERE staff_id = $1 AND key = $2
     AND created_at < statement_timestamp() - interval '",
    key_ttl!(),
    "'"
);
const INSERT_SQL: &str = "INSERT INTO idempotency_keys (staff_id, key, method, path, body_sha256)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (staff_id, key) DO NOTHING";
const SAVED_SQL: &str = "SELECT method, path, body_sha256, response_status, response_body
     FROM idempotency_keys WHERE staff_id = $1 AND key = $2";
const SAVE_SQL: &str = "UPDATE idempotency_keys SET response_status = $3, response_body = $4
     WHERE staff_id = $1 AND key = $2";
const PURGE_SQL: &str = concat!(
    "DELETE FROM idempotency_keys WHERE created_at < statement_timestamp() - interval '",
    key_ttl!(),
    "'"
);

/// Step one inside the effect's transaction: inserts the key row of `staff_id` (waiting for an
/// in-flight twin, 409 after ten seconds). `None`: this request claimed the key, run the
/// effect. `Some`: the key was used before by this very request, replay its saved response.
/// 422 when it was used for a different request; 409 while the first one is still in flight.
pub async fn claim(
    tx: &Transaction<'_>,
    staff_id: i64,
    key: &str,
    fingerprint: &Fingerprint,
) -> Result<Option<SavedResponse>, ApiError> {
    tx.batch_execute(LOCK_WAIT_SQL).await?;
    let delete = tx.prepare_cached(DELETE_STALE_SQL).await?;
    tx.execute(&delete, &[&staff_id, &key])
        .await
        .map_err(in_flight)?;
    let insert = tx.prepare_cached(INSERT_SQL).await?;
    let inserted = tx
        .execute(
            &insert,
            &[
                &staff_id,
                &key,
                &fingerprint.method,
                &fingerprint.path,
                &fingerprint.body_sha256,
            ],
        )
        .await
        .map_err(in_flight)?;
    tx.batch_execute("RESET lock_timeout").await?;
    if inserted == 1 {
        return Ok(None);
    }
    let saved = tx.prepare_cached(SAVED_SQL).await?;
    let row = tx
        .query_opt(&saved, &[&staff_id, &key])
        .await?
        .ok_or_else(|| {
            ApiError::Conflict("a request with this Idempotency-Key is in flight".into())
        })?;
    let stored = Fingerprint {
        method: row.try_get("method")?,
        path: row.try_get("path")?,
        body_sha256: row.try_get("body_sha256")?,
    };
    if stored != *fingerprint {
        return Err(ApiError::Unprocessable(
            "this Idempotency-Key was used for a different request".into(),
        ));
    }
    let status: Option<i16> = row.try_get("response_status")?;
    let body: Option<Vec<u8>> = row.try_get("response_body")?;
    match (status, body) {
        (Some(status), Some(body)) => {
            tracing::info!(staff_id, "idempotent replay");
            Ok(Some(SavedResponse {
                status: status as u16,
                body,
            }))
        }
        _ => Err(ApiError::Conflict(
            "a request with this Idempotency-Key is in flight".into(),
        )),
    }
}

/// Step two, after the effect, in the same transaction: stores the response under the key, so
/// a replay is byte for byte what was sent.
pub async fn save(
    tx: &Transaction<'_>,
    staff_id: i64,
    key: &str,
    response: &SavedResponse,
) -> Result<(), ApiError> {
    let stmt = tx.prepare_cached(SAVE_SQL).await?;
    tx.execute(
        &stmt,
        &[&staff_id, &key, &(response.status as i16), &response.body],
    )
    .await?;
    Ok(())
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
    Ok(client.execute(PURGE_SQL, &[]).await?)
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
