//! Rows read by column name: the [`FromRow`] projections (written with
//! [`from_row!`](crate::from_row!)) and the helpers that run a statement prepared once per
//! connection and read its rows.

use deadpool_postgres::GenericClient;
use tokio_postgres::{Row, types::ToSql};

use crate::common::error::ApiError;

/// A type read from a row by column name (never by position), so a query may select its
/// [`FromRow::COLUMNS`] in any order and among other columns.
pub trait FromRow: Sized {
    /// The columns [`FromRow::from_row`] reads, as a select list.
    const COLUMNS: &'static str;

    /// Reads the columns by name; a missing column or a wrong type is an error, not a panic.
    fn from_row(row: &Row) -> Result<Self, tokio_postgres::Error>;
}

/// Parameters of a statement.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Runs `sql` as a statement prepared once per connection (`prepare_cached`) and reads every
/// row as a `T`.
pub async fn all<T: FromRow>(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<T>, ApiError> {
    let rows = rows(client, sql, params).await?;
    rows.iter()
        .map(|r| T::from_row(r).map_err(ApiError::from))
        .collect()
}

/// Like [`all`], for at most one row.
pub async fn opt<T: FromRow>(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<T>, ApiError> {
    match row_opt(client, sql, params).await? {
        Some(r) => Ok(Some(T::from_row(&r)?)),
        None => Ok(None),
    }
}

/// Like [`all`], for exactly one row.
pub async fn one<T: FromRow>(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<T, ApiError> {
    Ok(T::from_row(&row_one(client, sql, params).await?)?)
}

/// Runs a prepared-once statement and returns its rows.
pub async fn rows(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, ApiError> {
    let stmt = client.prepare_cached(sql).await?;
    Ok(client.query(&stmt, params).await?)
}

/// Runs a prepared-once statement that returns at most one row.
pub async fn row_opt(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<Row>, ApiError> {
    let stmt = client.prepare_cached(sql).await?;
    Ok(client.query_opt(&stmt, params).await?)
}

/// Runs a prepared-once statement that returns exactly one row.
pub async fn row_one(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Row, ApiError> {
    let stmt = client.prepare_cached(sql).await?;
    Ok(client.query_one(&stmt, params).await?)
}

/// Runs a prepared-once statement; returns how many rows it changed.
pub async fn execute(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, ApiError> {
    let stmt = client.prepare_cached(sql).await?;
    Ok(client.execute(&stmt, params).await?)
}

/// `sql` word by word (its whitespace runs made one space): how the unit tests compare a whole
/// statement laid out on lines with a rule's spelling of a part of it.
#[cfg(test)]
pub(crate) fn sql_words(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An exact sum of `bigint` amounts, selected as `sum(…)::text` (PostgreSQL sums `bigint` as
/// `numeric`, which never overflows). Sums are `i128`: `bigint`'s range times any row count
/// PostgreSQL can hold fits, so a sum beyond `i64` is still answered exactly (as a JSON integer)
/// rather than failing the whole answer. A null sum (no rows) is 0.
pub fn exact_sum(row: &Row, column: &str) -> Result<i128, ApiError> {
    let text: Option<String> = row.try_get(column)?;
    match text {
        None => Ok(0),
        Some(t) => t
            .parse()
            .map_err(|_| ApiError::internal(format!("{column} is not an integer sum: {t}"))),
    }
}

/// Implements [`FromRow`] for a struct read by column name: `field` reads column `field`,
/// `field: "column"` reads `column`, `field = Type` reads a nested [`FromRow`] from the same
/// row, and `field => value` is not read (a field the caller fills in later). `COLUMNS` lists the columns in field order, or is given whole in brackets when the
/// select list computes some of them or holds a nested type's:
///
/// ```ignore
/// from_row!(Price { price_minor, currency, active });
/// from_row!(Preview [PREVIEW_COLUMNS] { code, terms = Terms, uses });
/// ```
#[macro_export]
macro_rules! from_row {
    (@col $field:ident) => { stringify!($field) };
    (@col $field:ident $col:literal) => { $col };
    (@get $row:ident $field:ident) => { $row.try_get(stringify!($field))? };
    (@get $row:ident $field:ident : $col:literal) => { $row.try_get($col)? };
    (@get $row:ident $field:ident = $inner:ty) => { <$inner as $crate::db::FromRow>::from_row($row)? };
    (@get $row:ident $field:ident => $value:expr) => { $value };
    (
        $ty:ident [$columns:expr]
        { $( $field:ident $(: $col:literal)? $(= $inner:ty)? $(=> $value:expr)? ),+ $(,)? }
    ) => {
        impl $crate::db::FromRow for $ty {
            const COLUMNS: &'static str = $columns;

            fn from_row(
                row: &::tokio_postgres::Row,
            ) -> ::std::result::Result<$ty, ::tokio_postgres::Error> {
                Ok($ty {
                    $( $field: $crate::from_row!(@get row $field $(: $col)? $(= $inner)? $(=> $value)?) ),+
                })
            }
        }
    };
    (
        $ty:ident
        { $first:ident $(: $fcol:literal)? $( , $field:ident $(: $col:literal)? )* $(,)? }
    ) => {
        $crate::from_row!(
            $ty [concat!(
                $crate::from_row!(@col $first $($fcol)?)
                $( , ", ", $crate::from_row!(@col $field $($col)?) )*
            )]
            { $first $(: $fcol)? $( , $field $(: $col)? )* }
        );
    };
}
