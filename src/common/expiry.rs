//! When a membership's term ends: at an instant, or never (lifetime access). The column is a
//! `timestamptz` (`memberships.expires_at`, the events' `expires_at_before`/`_after`) and a
//! lifetime term is PostgreSQL's `'infinity'`, which every comparison in SQL already orders
//! after every instant (`expires_at <= now` never holds for it, `infinity + interval` is
//! `infinity`). chrono has no infinity, so a lifetime row read as `DateTime<Utc>` fails to
//! decode; [`Expiry`] is the Rust value of the column instead: `At(instant)` or `Never`,
//! mapped to and from the wire format by hand (a `timestamptz` is microseconds since
//! 2000-01-01 as an `i64`, with `i64::MAX` for `infinity` and `i64::MIN` for `-infinity`).
//! `-infinity` is no expiry (nothing writes it, and the schema refuses it): reading it fails.
//!
//! In JSON an expiry is its RFC 3339 instant (as chrono writes a `DateTime<Utc>`) or the string
//! `"infinity"`, PostgreSQL's own spelling; the OpenAPI schema says so.
//!
//! A leaf below the modules that share it — memberships (the column's owner, which re-exports
//! it), the outbox's payloads, the buyer texts, the sweep — so none depends on another for it.

use std::{borrow::Cow, error::Error, fmt};

use bytes::BytesMut;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, accepts, to_sql_checked};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        KnownFormat, ObjectBuilder, RefOr, Schema, SchemaFormat,
        schema::{AnyOfBuilder, Type as T},
    },
};

/// The end of a membership's term. Ordered as time is: every instant comes before `Never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Expiry {
    /// The term ends at this instant.
    At(DateTime<Utc>),
    /// Lifetime access: `'infinity'` in the database, `"infinity"` in JSON.
    Never,
}

impl Expiry {
    /// The spelling of [`Expiry::Never`] in JSON, payloads and SQL.
    pub const INFINITY: &'static str = "infinity";

    /// The instant, unless it never expires.
    pub fn at(self) -> Option<DateTime<Utc>> {
        match self {
            Expiry::At(t) => Some(t),
            Expiry::Never => None,
        }
    }

    /// Whether this is lifetime access.
    pub fn is_never(self) -> bool {
        self == Expiry::Never
    }

    /// The instant in the outbox payloads' form (UTC, six fractional digits, `Z`; see
    /// `crate::outbox::effects::instant_text_sql!`), or `infinity`.
    pub fn to_payload_text(self) -> String {
        match self {
            Expiry::At(t) => t.to_rfc3339_opts(SecondsFormat::Micros, true),
            Expiry::Never => Expiry::INFINITY.to_string(),
        }
    }
}

impl From<DateTime<Utc>> for Expiry {
    fn from(t: DateTime<Utc>) -> Expiry {
        Expiry::At(t)
    }
}

impl PartialEq<DateTime<Utc>> for Expiry {
    fn eq(&self, other: &DateTime<Utc>) -> bool {
        *self == Expiry::At(*other)
    }
}

impl fmt::Display for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expiry::At(t) => write!(f, "{}", t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            Expiry::Never => f.write_str(Expiry::INFINITY),
        }
    }
}

// ---- the database: `timestamptz` ----

/// `timestamptz` on the wire: microseconds since 2000-01-01 UTC, big-endian `i64`.
const INFINITY_MICROS: i64 = i64::MAX;
const MINUS_INFINITY_MICROS: i64 = i64::MIN;

impl<'a> FromSql<'a> for Expiry {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Expiry, Box<dyn Error + Sync + Send>> {
        let micros =
            i64::from_be_bytes(raw.try_into().map_err(|_| "a timestamptz is eight bytes")?);
        match micros {
            INFINITY_MICROS => Ok(Expiry::Never),
            MINUS_INFINITY_MICROS => Err("-infinity is not an expiry".into()),
            _ => DateTime::<Utc>::from_sql(ty, raw).map(Expiry::At),
        }
    }

    accepts!(TIMESTAMPTZ);
}

impl ToSql for Expiry {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Expiry::At(t) => t.to_sql(ty, out),
            Expiry::Never => {
                out.extend_from_slice(&INFINITY_MICROS.to_be_bytes());
                Ok(IsNull::No)
            }
        }
    }

    accepts!(TIMESTAMPTZ);
    to_sql_checked!();
}

// ---- JSON ----

impl Serialize for Expiry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Expiry::At(t) => t.serialize(s),
            Expiry::Never => s.serialize_str(Expiry::INFINITY),
        }
    }
}

impl<'de> Deserialize<'de> for Expiry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Expiry, D::Error> {
        let text = Cow::<'de, str>::deserialize(d)?;
        if text == Expiry::INFINITY {
            return Ok(Expiry::Never);
        }
        DateTime::parse_from_rfc3339(&text)
            .map(|t| Expiry::At(t.with_timezone(&Utc)))
            .map_err(|_| serde::de::Error::custom("expected an RFC 3339 date-time or \"infinity\""))
    }
}

impl PartialSchema for Expiry {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(T::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(T::String)
                    .enum_values(Some([Expiry::INFINITY])),
            )
            .description(Some(
                "When a membership's term ends: an RFC 3339 date-time, or `infinity` for \
                 lifetime access (it never ends).",
            ))
            .examples(["2025-01-31T10:00:00Z", Expiry::INFINITY])
            .into()
    }
}

impl ToSchema for Expiry {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Expiry")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_come_before_never() {
        let t = DateTime::<Utc>::MAX_UTC;
        assert!(Expiry::At(t) < Expiry::Never);
        assert!(Expiry::At(DateTime::<Utc>::MIN_UTC) < Expiry::At(t));
        assert_eq!(Expiry::At(t).at(), Some(t));
        assert_eq!(Expiry::Never.at(), None);
    }

    #[test]
    fn json_is_the_instant_or_infinity() {
        let t: DateTime<Utc> = "2025-01-31T10:00:00Z".parse().unwrap();
        assert_eq!(
            serde_json::to_value(Expiry::At(t)).unwrap(),
            serde_json::to_value(t).unwrap(),
            "an instant is written as chrono writes it"
        );
        assert_eq!(
            serde_json::to_value(Expiry::Never).unwrap(),
            serde_json::json!("infinity")
        );
        for (text, want) in [
            ("\"infinity\"", Some(Expiry::Never)),
            ("\"2025-01-31T10:00:00Z\"", Some(Expiry::At(t))),
            ("\"2025-01-31T12:00:00+02:00\"", Some(Expiry::At(t))),
            ("\"Infinity\"", None),
            ("\"-infinity\"", None),
            ("\"2025-01-31\"", None),
            ("42", None),
        ] {
            assert_eq!(serde_json::from_str::<Expiry>(text).ok(), want, "{text}");
        }
        assert_eq!(Expiry::Never.to_payload_text(), "infinity");
        assert_eq!(
            Expiry::At(t).to_payload_text(),
            "2025-01-31T10:00:00.000000Z"
        );
    }

    #[test]
    fn the_wire_format_maps_infinity_to_never() {
        let ty = Type::TIMESTAMPTZ;
        let mut buf = BytesMut::new();
        Expiry::Never.to_sql(&ty, &mut buf).unwrap();
        assert_eq!(&buf[..], &i64::MAX.to_be_bytes());
        assert_eq!(Expiry::from_sql(&ty, &buf).unwrap(), Expiry::Never);
        assert!(Expiry::from_sql(&ty, &i64::MIN.to_be_bytes()).is_err());
        let t: DateTime<Utc> = "2025-01-31T10:00:00.123456Z".parse().unwrap();
        let mut buf = BytesMut::new();
        Expiry::At(t).to_sql(&ty, &mut buf).unwrap();
        assert_eq!(Expiry::from_sql(&ty, &buf).unwrap(), Expiry::At(t));
        assert!(Expiry::from_sql(&ty, &[0, 1]).is_err());
        assert!(<Expiry as FromSql>::accepts(&Type::TIMESTAMPTZ));
        assert!(!<Expiry as FromSql>::accepts(&Type::TIMESTAMP));
    }
}
