//! Per-language titles and descriptions of channels and plans, as buyers read them: the
//! `translations` jsonb of `channels` and `plans`, `{"uk": {"title": "…", "description": "…"}}`.
//! A language without an entry reads the default title and description; an entry without a
//! description reads the default description. The staff API checks the shape ([`check`]);
//! the schema keeps the column an object.

use std::collections::BTreeMap;

use postgres_types::{FromSql, ToSql, Type};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::present::locale::Language;

/// Longest translated title and description (those of the default ones).
pub const TITLE_MAX: usize = 255;
pub const DESCRIPTION_MAX: usize = 1000;

/// One language's title and (optional) description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Translation {
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
}

/// A channel's or plan's translations, by language.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Translations(pub BTreeMap<Language, Translation>);

impl Translations {
    /// The title in `l`, else `default`.
    pub fn title<'a>(&'a self, l: Language, default: &'a str) -> &'a str {
        self.0.get(&l).map_or(default, |t| t.title.as_str())
    }

    /// The description in `l`, else `default`.
    pub fn description<'a>(&'a self, l: Language, default: Option<&'a str>) -> Option<&'a str> {
        self.0
            .get(&l)
            .and_then(|t| t.description.as_deref())
            .or(default)
    }
}

impl<'a> FromSql<'a> for Translations {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Translations, Box<dyn std::error::Error + Sync + Send>> {
        let value = <postgres_types::Json<Value> as FromSql>::from_sql(ty, raw)?.0;
        // A language the bot does not speak (or a hand-edited row) is skipped, not fatal.
        let Value::Object(map) = value else {
            return Ok(Translations::default());
        };
        Ok(Translations(
            map.into_iter()
                .filter_map(|(code, t)| {
                    Some((Language::parse(&code)?, serde_json::from_value(t).ok()?))
                })
                .collect(),
        ))
    }

    fn accepts(ty: &Type) -> bool {
        <postgres_types::Json<Value> as FromSql>::accepts(ty)
    }
}

impl ToSql for Translations {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        postgres_types::Json(self).to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <postgres_types::Json<Value> as ToSql>::accepts(ty)
    }

    postgres_types::to_sql_checked!();
}

/// Reads staff's `translations`: an object whose keys are languages the bot speaks, each
/// `{"title": 1..255 characters, "description": at most 1000 or null}`. Errors are
/// `(field, message)` pairs, the field named like `translations.uk.title`.
pub fn check(v: &Value) -> Result<Translations, Vec<(String, String)>> {
    let mut errors = Vec::new();
    let mut out = BTreeMap::new();
    let Value::Object(map) = v else {
        return Err(vec![(
            "translations".into(),
            "must be an object keyed by language (en, uk, ru)".into(),
        )]);
    };
    for (code, t) in map {
        let field = format!("translations.{code}");
        let Some(lang) = Language::parse(code) else {
            errors.push((
                field,
                "is not a language the bot speaks (en, uk, ru)".into(),
            ));
            continue;
        };
        let Value::Object(t) = t else {
            errors.push((field, "must be an object with title and description".into()));
            continue;
        };
        if let Some(k) = t.keys().find(|k| *k != "title" && *k != "description") {
            errors.push((
                format!("{field}.{k}"),
                "is not a field of a translation".into(),
            ));
            continue;
        }
        let title = match t.get("title") {
            Some(Value::String(s))
                if !s.trim().is_empty() && s.chars().count() <= TITLE_MAX && !s.contains('\0') =>
            {
                s.clone()
            }
            _ => {
                errors.push((
                    format!("{field}.title"),
                    format!("must be text of 1 to {TITLE_MAX} characters"),
                ));
                continue;
            }
        };
        let description = match t.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= DESCRIPTION_MAX && !s.contains('\0') => {
                Some(s.clone())
            }
            _ => {
                errors.push((
                    format!("{field}.description"),
                    format!("must be text of at most {DESCRIPTION_MAX} characters, or null"),
                ));
                continue;
            }
        };
        out.insert(lang, Translation { title, description });
    }
    if errors.is_empty() {
        Ok(Translations(out))
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_language_without_a_translation_falls_back() {
        let t =
            check(&json!({"uk": {"title": "Клуб"}, "ru": {"title": "Клуб", "description": "О"}}))
                .unwrap();
        assert_eq!(t.title(Language::Uk, "Club"), "Клуб");
        assert_eq!(t.title(Language::En, "Club"), "Club");
        assert_eq!(t.description(Language::Uk, Some("About")), Some("About"));
        assert_eq!(t.description(Language::Ru, Some("About")), Some("О"));
        assert_eq!(t.description(Language::En, None), None);
    }

    #[test]
    fn only_known_languages_and_fields_of_the_right_length_are_taken() {
        for (bad, field) in [
            (json!([]), "translations"),
            (json!({"de": {"title": "X"}}), "translations.de"),
            (json!({"uk": "X"}), "translations.uk"),
            (json!({"uk": {}}), "translations.uk.title"),
            (json!({"uk": {"title": " "}}), "translations.uk.title"),
            (
                json!({"uk": {"title": "я".repeat(256)}}),
                "translations.uk.title",
            ),
            (
                json!({"uk": {"title": "X", "description": "я".repeat(1001)}}),
                "translations.uk.description",
            ),
            (
                json!({"uk": {"title": "X", "note": "?"}}),
                "translations.uk.note",
            ),
        ] {
            let e = check(&bad).unwrap_err();
            assert_eq!(e[0].0, field, "{bad}");
        }
        assert!(check(&json!({"uk": {"title": "я".repeat(255), "description": null}})).is_ok());
        assert_eq!(check(&json!({})).unwrap(), Translations::default());
    }
}
