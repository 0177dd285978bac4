//! A broadcast's segment: which buyers it reaches. Every field is optional and they are ANDed;
//! a buyer is in the segment once however many of their memberships match, and a buyer who
//! said `/stop` or blocked the bot is never in one. The whole rule is one statement,
//! `segment.sql`, which both the preview and the start of a broadcast read:
//!
//! - `channel_ids`: a membership of one of these channels;
//! - `plan_ids`: …whose buyer paid an order of one of these plans for that channel;
//! - `statuses`: the membership is `active` (not a trial), `grace`, `trial` (active, from a
//!   trial, never paid for), or `expired` (within `expired_within_days` when given); or the
//!   buyer is `never_paid` (no applied payment, for the channels given);
//! - `expired_within_days` alone: memberships that ended within that many days;
//! - none of `channel_ids`, `plan_ids`, `statuses`, `expired_within_days`: every buyer; with
//!   only channels or plans: their live (active or grace) members;
//! - `languages`: the language the bot speaks to the buyer (theirs, else the default).

use std::collections::{BTreeMap, HashMap};

use deadpool_postgres::GenericClient;
use serde::{Deserialize, Serialize};

use crate::{common::error::ApiError, db, present::locale::Language};

/// The buyers a broadcast reaches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_ids: Option<Vec<i32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_ids: Option<Vec<i64>>,
    /// `active`, `grace`, `trial`, `expired`, `never_paid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statuses: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_within_days: Option<i32>,
    /// `en`, `uk`, `ru`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub languages: Option<Vec<String>>,
}

/// The statuses a segment may ask for.
pub const STATUSES: [&str; 5] = ["active", "grace", "trial", "expired", "never_paid"];
/// The most ids or values in one list.
pub const LIST_MAX: usize = 1000;

impl Segment {
    /// The 422's field errors of the segment (under `segment.<field>`), if any.
    pub fn check(&self, errors: &mut BTreeMap<String, String>) {
        let mut add = |field: &str, message: String| {
            errors.entry(format!("segment.{field}")).or_insert(message);
        };
        if let Some(ids) = &self.channel_ids
            && (ids.is_empty() || ids.len() > LIST_MAX)
        {
            add(
                "channel_ids",
                format!("must list 1 to {LIST_MAX} channels, or be absent"),
            );
        }
        if let Some(ids) = &self.plan_ids
            && (ids.is_empty() || ids.len() > LIST_MAX)
        {
            add(
                "plan_ids",
                format!("must list 1 to {LIST_MAX} plans, or be absent"),
            );
        }
        if let Some(statuses) = &self.statuses {
            if statuses.is_empty() {
                add(
                    "statuses",
                    "must list at least one status, or be absent".into(),
                );
            } else if let Some(bad) = statuses.iter().find(|s| !STATUSES.contains(&s.as_str())) {
                add(
                    "statuses",
                    format!("unknown status {bad:?}: use {}", STATUSES.join(", ")),
                );
            }
        }
        if let Some(days) = self.expired_within_days
            && !(1..=3660).contains(&days)
        {
            add("expired_within_days", "must be from 1 to 3660".into());
        }
        if let Some(languages) = &self.languages {
            if languages.is_empty() {
                add(
                    "languages",
                    "must list at least one language, or be absent".into(),
                );
            } else if let Some(bad) = languages.iter().find(|l| Language::parse(l).is_none()) {
                add(
                    "languages",
                    format!("the bot speaks no language {bad:?} (it speaks en, uk, ru)"),
                );
            }
        }
    }

    /// The parameters of `segment.sql`: `$1`..`$6` (the last, the default language).
    pub fn params(&self, default: Language) -> SegmentParams {
        SegmentParams {
            channel_ids: self.channel_ids.clone(),
            plan_ids: self.plan_ids.clone(),
            statuses: self.statuses.clone(),
            expired_within_days: self.expired_within_days,
            languages: self.languages.clone(),
            default: default.as_str().to_string(),
        }
    }
}

/// The bound parameters of `segment.sql`, in its order.
pub struct SegmentParams {
    channel_ids: Option<Vec<i32>>,
    plan_ids: Option<Vec<i64>>,
    statuses: Option<Vec<String>>,
    expired_within_days: Option<i32>,
    languages: Option<Vec<String>>,
    default: String,
}

impl SegmentParams {
    /// `$1`..`$6`.
    pub fn values(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 6] {
        [
            &self.channel_ids,
            &self.plan_ids,
            &self.statuses,
            &self.expired_within_days,
            &self.languages,
            &self.default,
        ]
    }
}

/// The segment's buyers: `subscriber_id`, `telegram_user_id`, `language` (`$1`..`$6`).
pub const SEGMENT_SQL: &str = include_str!("segment.sql");

const PREVIEW_SQL: &str = concat!(
    "SELECT r.language, count(*) AS recipients\nFROM (\n",
    include_str!("segment.sql"),
    ") r\nGROUP BY r.language"
);

/// How many buyers `segment` reaches now, in all and by language (every language the bot
/// speaks, 0 for none).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"recipients": 1250, "by_language": {"en": 300, "uk": 900, "ru": 50}}))]
pub struct Preview {
    pub recipients: i64,
    #[schema(value_type = Object)]
    pub by_language: BTreeMap<String, i64>,
}

/// [`Preview`] of `segment`, read now (nothing is stored).
pub async fn preview(
    client: &impl GenericClient,
    segment: &Segment,
    default: Language,
) -> Result<Preview, ApiError> {
    let params = segment.params(default);
    let rows = db::rows(client, PREVIEW_SQL, &params.values()).await?;
    let mut counted: HashMap<String, i64> = HashMap::new();
    for row in rows {
        counted.insert(row.try_get("language")?, row.try_get("recipients")?);
    }
    let by_language: BTreeMap<String, i64> = Language::ALL
        .iter()
        .map(|l| {
            (
                l.as_str().to_string(),
                counted.get(l.as_str()).copied().unwrap_or(0),
            )
        })
        .collect();
    Ok(Preview {
        recipients: by_language.values().sum(),
        by_language,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_s_fields_are_checked() {
        let mut e = BTreeMap::new();
        Segment {
            statuses: Some(vec!["active".into(), "lapsed".into()]),
            languages: Some(vec!["de".into()]),
            expired_within_days: Some(0),
            channel_ids: Some(vec![]),
            plan_ids: None,
        }
        .check(&mut e);
        assert!(e["segment.statuses"].contains("\"lapsed\""), "{e:?}");
        assert!(e["segment.languages"].contains("\"de\""), "{e:?}");
        assert!(e.contains_key("segment.expired_within_days"));
        assert!(e.contains_key("segment.channel_ids"));
        let mut e = BTreeMap::new();
        Segment::default().check(&mut e);
        assert!(e.is_empty());
        assert!(
            !SEGMENT_SQL.trim_end().ends_with(';'),
            "spliced into other statements"
        );
    }
}
