//! State enums stored as text: [`TextEnum`] and [`text_enum!`](crate::text_enum!), which give
//! each variant its one spelling in the database, in JSON and in messages.

/// Whether a column or parameter of type `ty` holds text: the state enums of [`text_enum!`](crate::text_enum!)
/// are stored in `text` columns (with CHECK constraints listing their spellings), and a
/// parameter compared with one may be typed `varchar` too.
pub fn is_text(ty: &tokio_postgres::types::Type) -> bool {
    use tokio_postgres::types::Type;
    *ty == Type::TEXT || *ty == Type::VARCHAR || *ty == Type::BPCHAR || *ty == Type::NAME
}

/// "a, b or c": a list of words for a message.
pub fn list_words<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let words: Vec<&str> = words.into_iter().collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// What every [`text_enum!`](crate::text_enum!) can do, for code generic over them (parsing a query filter).
pub trait TextEnum: Sized + Copy + 'static {
    /// Parses the spelling.
    fn parse_text(s: &str) -> Option<Self>;
    /// Every spelling as a phrase: "a, b or c".
    fn spellings_text() -> String;
}

/// Declares a state enum stored in a `text` column: each variant with its one spelling, used
/// in the database (`ToSql`/`FromSql` for `text` and `varchar`) and in JSON (serde), plus
/// `ALL`, `as_str`, `parse` and `Display`.
///
/// `postgres-types`' derive would map the enum to a PostgreSQL `ENUM` type instead, which
/// needs the columns retyped (a table-rewriting migration) and every parameter typed to match;
/// the columns stay `text` with CHECK constraints, and this maps them once.
///
/// ```ignore
/// text_enum! {
///     /// An order's status.
///     pub enum Status { Pending => "pending", Paid => "paid", Cancelled => "cancelled" }
/// }
/// ```
#[macro_export]
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order (the column's CHECK lists the same).
            pub const ALL: [$name; { [$($text),+].len() }] = [$($name::$variant),+];

            /// The spelling, in the database and in JSON.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text ),+
                }
            }

            /// Parses the spelling.
            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    $( $text => Some($name::$variant), )+
                    _ => None,
                }
            }

            /// Every spelling as a phrase: "a, b or c".
            pub fn spellings() -> String {
                $crate::db::list_words($name::ALL.iter().map(|v| v.as_str()))
            }
        }

        impl $crate::db::TextEnum for $name {
            fn parse_text(s: &str) -> Option<$name> {
                $name::parse(s)
            }

            fn spellings_text() -> String {
                $name::spellings()
            }
        }

        /// Compares with a spelling, as a client reads it (`status == "active"`).
        impl ::std::cmp::PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                $name::parse(&s).ok_or_else(|| {
                    <D::Error as ::serde::de::Error>::custom(format!(
                        "must be {}",
                        $name::spellings()
                    ))
                })
            }
        }

        impl ::tokio_postgres::types::ToSql for $name {
            fn to_sql(
                &self,
                ty: &::tokio_postgres::types::Type,
                out: &mut ::bytes::BytesMut,
            ) -> ::std::result::Result<
                ::tokio_postgres::types::IsNull,
                Box<dyn ::std::error::Error + Sync + Send>,
            > {
                <&str as ::tokio_postgres::types::ToSql>::to_sql(&self.as_str(), ty, out)
            }

            fn accepts(ty: &::tokio_postgres::types::Type) -> bool {
                $crate::db::is_text(ty)
            }

            ::tokio_postgres::types::to_sql_checked!();
        }

        impl<'a> ::tokio_postgres::types::FromSql<'a> for $name {
            fn from_sql(
                ty: &::tokio_postgres::types::Type,
                raw: &'a [u8],
            ) -> ::std::result::Result<Self, Box<dyn ::std::error::Error + Sync + Send>> {
                let s = <&str as ::tokio_postgres::types::FromSql>::from_sql(ty, raw)?;
                $name::parse(s).ok_or_else(|| {
                    format!("not a {}: {s:?}", stringify!($name)).into()
                })
            }

            fn accepts(ty: &::tokio_postgres::types::Type) -> bool {
                $crate::db::is_text(ty)
            }
        }
    };
}
