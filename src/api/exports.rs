//! CSV exports (`GET /api/payments.csv`, `/api/memberships.csv`, `/api/subscribers.csv`):
//! the rows a list shows, every page of them, as one RFC 4180 file written by the `csv` crate
//! (a header row, fields quoted when they need it, CRLF line ends).
//!
//! Streamed in constant memory: the rows are read by keyset pages of [`PAGE`] (the list's own
//! query, `id > after ORDER BY id`), each page on a pool connection taken for that page only,
//! encoded and handed to the response body before the next is read. A slow client therefore
//! holds no connection and the server at most one page, however many rows there are. The
//! first page is read before the answer starts, so a refused filter or an unavailable database
//! is still a proper 4xx/503; a failure after that ends the body early (the client sees a
//! truncated transfer) and is logged.
//!
//! Pages are separate statements, not one snapshot: a row added while the file is written
//! appears when its id is above the page being read (rows are never deleted from payments; a
//! membership or subscriber deleted meanwhile may be missing).

use std::future::Future;

use axum::{
    body::{Body, Bytes},
    http::header,
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::error::ApiError;

/// Rows read and encoded at a time.
pub const PAGE: i64 = 1000;

/// Checks the `from`/`to` window every export takes (records created at or after `from` and
/// before `to`, RFC 3339): `from` after `to` is refused (422).
pub fn check_window(
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> Result<(), ApiError> {
    match (from, to) {
        (Some(from), Some(to)) if from > to => {
            Err(ApiError::field("from", "must not be after `to`"))
        }
        _ => Ok(()),
    }
}

/// A JSON field as CSV text: a string as it is, a number or boolean as written in JSON,
/// `null` as an empty field.
fn field_text(v: Option<&serde_json::Value>) -> String {
    match v {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Encodes `rows` as CSV records of the fields `columns` (each row as its JSON object, the
/// fields the API shows, by name), after the header row when `with_header`.
fn encode<T: Serialize>(
    columns: &[&str],
    with_header: bool,
    rows: &[T],
) -> Result<Bytes, ApiError> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::with_capacity(rows.len() * 128 + 256));
    let fail = |e: csv::Error| ApiError::internal(format!("CSV encoding failed: {e}"));
    if with_header {
        w.write_record(columns).map_err(fail)?;
    }
    for row in rows {
        let value = serde_json::to_value(row).map_err(ApiError::internal)?;
        w.write_record(columns.iter().map(|c| field_text(value.get(*c))))
            .map_err(fail)?;
    }
    w.into_inner()
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("CSV encoding failed: {e}")))
}

/// The next `after`, or `None` when `rows` was the last page.
fn next_after<T>(rows: &[T], id_of: fn(&T) -> i64) -> Option<i64> {
    if rows.len() < PAGE as usize {
        None
    } else {
        rows.last().map(id_of)
    }
}

/// The streamed CSV answer of `fetch` (the page of rows with ids above its argument, at most
/// [`PAGE`]), named `filename`, whose records have the columns `header` (fields of each row's
/// JSON, by name).
pub async fn csv<T, F, Fut>(
    filename: &'static str,
    header: &'static [&'static str],
    fetch: F,
    id_of: fn(&T) -> i64,
) -> Result<Response, ApiError>
where
    T: Serialize + Send + 'static,
    F: Fn(i64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<T>, ApiError>> + Send + 'static,
{
    let first = fetch(0).await?;
    let head = encode(header, true, &first)?;
    let next = next_after(&first, id_of);
    drop(first);
    let rest = futures::stream::try_unfold((fetch, next), move |(fetch, next)| async move {
        let Some(after) = next else {
            return Ok(None);
        };
        let page = async {
            let rows = fetch(after).await?;
            Ok::<_, ApiError>((encode(header, false, &rows)?, next_after(&rows, id_of)))
        };
        match page.await {
            Ok((bytes, next)) => Ok(Some((bytes, (fetch, next)))),
            Err(e) => {
                tracing::error!(file = filename, after, error = %e,
                    "CSV export ended early: the client gets a truncated file");
                Err(std::io::Error::other(e.to_string()))
            }
        }
    });
    let body = futures::StreamExt::chain(
        futures::stream::once(async move { Ok::<_, std::io::Error>(head) }),
        rest,
    );
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "text/csv; charset=utf-8; header=present".to_string(),
            ),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Row {
        id: i64,
        name: Option<String>,
        at: DateTime<Utc>,
    }

    #[test]
    fn records_follow_rfc_4180() {
        let at = DateTime::parse_from_rfc3339("2025-01-01T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let rows = [
            Row {
                id: 1,
                name: Some("plain".into()),
                at,
            },
            Row {
                id: 2,
                name: Some("a \"quoted\", comma\nand line".into()),
                at,
            },
            Row {
                id: 3,
                name: None,
                at,
            },
        ];
        let bytes = encode(&["id", "name", "at"], true, &rows).unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            "id,name,at\r\n1,plain,2025-01-01T10:00:00Z\r\n\
             2,\"a \"\"quoted\"\", comma\nand line\",2025-01-01T10:00:00Z\r\n3,,2025-01-01T10:00:00Z\r\n"
        );
    }
}
