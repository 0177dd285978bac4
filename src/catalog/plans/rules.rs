//! The rules of a plan's fields, pure: its terms ([`term_errors`]), its channels
//! ([`channel_ids_error`]) and a channel's default plan ([`default_plan_errors`]), with the
//! messages a client reads. The schema's CHECKs are the backstop.

use std::collections::BTreeMap;

use super::{Kind, Plan};
use crate::{catalog::channels, common::currency, present::translations::Translations};

/// The most channels a plan may include.
pub const MAX_CHANNELS: usize = 10;
/// The longest period, in days (ten years), as for a channel's billing period.
pub const MAX_PERIOD_DAYS: i32 = 3660;
/// The longest trial, in days.
pub const MAX_TRIAL_DAYS: i32 = 90;
/// Telegram sells Stars subscriptions with a 30-day period only.
pub const RECURRING_PERIOD_DAYS: i32 = channels::RECURRING_PERIOD_DAYS;
/// Why a plan cannot be `recurring`, as the per-field 422 says it.
pub const RECURRING_RULE: &str =
    "is allowed only for paid XTR (Telegram Stars) plans with period_days 30";

/// The fields of a new plan, or of a change. In a new plan an absent field takes its default
/// (`kind` paid, `price_minor` 0 for a trial, `currency` that of the channels, `recurring`
/// false, `active` true, `position` 0, no description); the caller has checked the required
/// ones are present (`title`, `channel_ids`, `period_days`, a paid plan's `price_minor`). In a
/// change an absent field keeps its value; `description: Some(None)` removes the description,
/// `period_days: Some(None)` makes the plan lifetime.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub title: Option<String>,
    pub description: Option<Option<String>>,
    pub channel_ids: Option<Vec<i32>>,
    pub kind: Option<Kind>,
    pub price_minor: Option<i64>,
    pub currency: Option<String>,
    pub period_days: Option<Option<i32>>,
    pub recurring: Option<bool>,
    pub active: Option<bool>,
    pub position: Option<i32>,
    /// Replaces all translations when given.
    pub translations: Option<Translations>,
    /// Replaces the crypto prices when given; `Some(None)` removes them.
    pub crypto_prices: Option<Option<super::CryptoPrices>>,
}

/// What a plan sells and for how much: the fields whose combination has rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub kind: Kind,
    pub price_minor: i64,
    pub currency: String,
    pub period_days: Option<i32>,
    pub recurring: bool,
}

impl Terms {
    /// The terms of `plan` changed by `f`. A change to a trial that names no price makes it
    /// free (a trial costs nothing), rather than refusing the plan's old price.
    pub(super) fn changed(plan: &Plan, f: &Fields) -> Terms {
        let kind = f.kind.unwrap_or(plan.kind);
        let price_minor = match f.price_minor {
            Some(p) => p,
            None if kind == Kind::Trial && plan.kind != Kind::Trial => 0,
            None => plan.price_minor,
        };
        Terms {
            kind,
            price_minor,
            currency: f.currency.clone().unwrap_or_else(|| plan.currency.clone()),
            period_days: f.period_days.unwrap_or(plan.period_days),
            recurring: f.recurring.unwrap_or(plan.recurring),
        }
    }
}

/// Adds to `e` what is wrong with `t`, by field: a paid plan's price is positive, a trial's is
/// 0; a period is 1..3660 days or none, a trial's 1..90; `recurring` only for paid `XTR` plans of
/// 30 days; the currency is an ISO 4217 code or `XTR`. Pure: the rules of the schema's CHECKs,
/// with the messages a client reads.
pub fn term_errors(t: &Terms, e: &mut BTreeMap<String, String>) {
    let mut add = |field: &str, message: String| {
        e.entry(field.to_string()).or_insert(message);
    };
    match t.kind {
        Kind::Paid if t.price_minor <= 0 => add(
            "price_minor",
            "must be a positive integer of minor units for a paid plan".into(),
        ),
        Kind::Trial if t.price_minor != 0 => add(
            "price_minor",
            "must be 0 (or absent) for a trial: a trial is free".into(),
        ),
        _ => {}
    }
    if let Some(why) = currency::price_over_max(t.price_minor, &t.currency) {
        add("price_minor", why);
    }
    match (t.kind, t.period_days) {
        (_, Some(d)) if !(1..=MAX_PERIOD_DAYS).contains(&d) => add(
            "period_days",
            format!("must be from 1 to {MAX_PERIOD_DAYS}, or null (lifetime)"),
        ),
        (Kind::Trial, Some(d)) if d > MAX_TRIAL_DAYS => add(
            "period_days",
            format!("must be from 1 to {MAX_TRIAL_DAYS} for a trial"),
        ),
        (Kind::Trial, None) => add(
            "period_days",
            format!("a trial lasts 1 to {MAX_TRIAL_DAYS} days; it cannot be lifetime (null)"),
        ),
        _ => {}
    }
    if !currency::is_price_currency(&t.currency) {
        add(
            "currency",
            "must be an ISO 4217 code (e.g. UAH) or XTR".into(),
        );
    }
    if t.recurring
        && !(t.kind == Kind::Paid
            && t.currency == "XTR"
            && t.period_days == Some(RECURRING_PERIOD_DAYS))
    {
        add("recurring", RECURRING_RULE.into());
    }
}

/// Adds to `e` that a plan of `kind` may not have `crypto_prices` (the ones it will have after
/// the write): a trial is free.
pub fn crypto_prices_errors(
    kind: Kind,
    crypto_prices: Option<&super::CryptoPrices>,
    e: &mut BTreeMap<String, String>,
) {
    if kind == Kind::Trial && crypto_prices.is_some() {
        e.entry("crypto_prices".into())
            .or_insert_with(|| "a trial is free: it has no crypto prices (null)".into());
    }
}

/// What is wrong with a list of channel ids, if anything: 1..10 of them, each once.
pub fn channel_ids_error(ids: &[i32]) -> Option<String> {
    if ids.is_empty() || ids.len() > MAX_CHANNELS {
        return Some(format!("must list 1 to {MAX_CHANNELS} channels"));
    }
    let mut seen = std::collections::BTreeSet::new();
    let repeated: Vec<String> = ids
        .iter()
        .filter(|id| !seen.insert(**id))
        .map(i32::to_string)
        .collect();
    (!repeated.is_empty()).then(|| format!("lists channel {} twice", repeated.join(", ")))
}

/// Adds to `e` what a change `f` of the default plan of channel `channel_id` may not do: it is
/// that channel's own price, so it stays paid, with a period, for that channel only.
pub fn default_plan_errors(channel_id: i32, f: &Fields, e: &mut BTreeMap<String, String>) {
    if f.kind == Some(Kind::Trial) {
        e.insert(
            "kind".into(),
            "the default plan of a channel is paid (it is the channel's price); create another \
             plan for a trial"
                .into(),
        );
    }
    if f.period_days == Some(None) {
        e.insert(
            "period_days".into(),
            "the default plan of a channel has a period (the channel's billing_period_days); \
             create another plan for lifetime access"
                .into(),
        );
    }
    if f.channel_ids
        .as_ref()
        .is_some_and(|ids| ids[..] != [channel_id])
    {
        e.insert(
            "channel_ids".into(),
            format!(
                "the default plan of channel {channel_id} sells that channel only; create \
                 another plan for a bundle or another channel"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn terms(
        kind: Kind,
        price: i64,
        currency: &str,
        period: Option<i32>,
        recurring: bool,
    ) -> Terms {
        Terms {
            kind,
            price_minor: price,
            currency: currency.into(),
            period_days: period,
            recurring,
        }
    }

    fn fields_of(t: &Terms) -> Vec<String> {
        let mut e = BTreeMap::new();
        term_errors(t, &mut e);
        e.into_keys().collect()
    }

    #[test]
    fn valid_terms_pass() {
        for t in [
            terms(Kind::Paid, 19900, "UAH", Some(30), false),
            terms(Kind::Paid, 1, "UAH", None, false),
            terms(Kind::Paid, 1, "UAH", Some(3660), false),
            terms(Kind::Paid, 250, "XTR", Some(30), true),
            terms(Kind::Trial, 0, "UAH", Some(1), false),
            terms(Kind::Trial, 0, "XTR", Some(90), false),
        ] {
            assert!(fields_of(&t).is_empty(), "{t:?}: {:?}", fields_of(&t));
        }
    }

    #[test]
    fn each_broken_rule_names_its_field() {
        let cases = [
            (terms(Kind::Paid, 0, "UAH", Some(30), false), "price_minor"),
            (terms(Kind::Paid, -5, "UAH", Some(30), false), "price_minor"),
            (
                terms(Kind::Trial, 100, "UAH", Some(7), false),
                "price_minor",
            ),
            (terms(Kind::Paid, 1, "UAH", Some(0), false), "period_days"),
            (
                terms(Kind::Paid, 1, "UAH", Some(3661), false),
                "period_days",
            ),
            (terms(Kind::Trial, 0, "UAH", Some(91), false), "period_days"),
            (terms(Kind::Trial, 0, "UAH", None, false), "period_days"),
            (terms(Kind::Paid, 1, "uah", Some(30), false), "currency"),
            (terms(Kind::Paid, 1, "ZZZ", Some(30), false), "currency"),
            (terms(Kind::Paid, 1, "UAH", Some(30), true), "recurring"),
            (terms(Kind::Paid, 1, "XTR", Some(31), true), "recurring"),
            (terms(Kind::Paid, 1, "XTR", None, true), "recurring"),
            (terms(Kind::Trial, 0, "XTR", Some(30), true), "recurring"),
        ];
        for (t, field) in cases {
            assert_eq!(fields_of(&t), vec![field.to_string()], "{t:?}");
        }
    }

    #[test]
    fn channel_lists_are_one_to_ten_distinct_ids() {
        assert!(channel_ids_error(&[1]).is_none());
        assert!(channel_ids_error(&(1..=10).collect::<Vec<_>>()).is_none());
        assert!(channel_ids_error(&[]).is_some());
        assert!(channel_ids_error(&(1..=11).collect::<Vec<_>>()).is_some());
        assert!(channel_ids_error(&[1, 2, 1]).unwrap().contains('1'));
    }

    #[test]
    fn a_default_plan_stays_paid_timed_and_its_channels_own() {
        let mut e = BTreeMap::new();
        default_plan_errors(
            3,
            &Fields {
                kind: Some(Kind::Paid),
                period_days: Some(Some(60)),
                channel_ids: Some(vec![3]),
                ..Fields::default()
            },
            &mut e,
        );
        assert!(e.is_empty(), "{e:?}");
        default_plan_errors(
            3,
            &Fields {
                kind: Some(Kind::Trial),
                period_days: Some(None),
                channel_ids: Some(vec![3, 4]),
                ..Fields::default()
            },
            &mut e,
        );
        let fields: Vec<&str> = e.keys().map(String::as_str).collect();
        assert_eq!(fields, ["channel_ids", "kind", "period_days"]);
    }

    #[test]
    fn a_change_to_a_trial_without_a_price_makes_it_free() {
        let plan = Plan {
            id: 1,
            title: "t".into(),
            description: None,
            channel_ids: vec![1],
            kind: Kind::Paid,
            price_minor: 500,
            currency: "UAH".into(),
            period_days: Some(7),
            recurring: false,
            active: true,
            position: 0,
            is_default: false,
            buy_link: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
            translations: Default::default(),
            crypto_prices: None,
        };
        let to_trial = Fields {
            kind: Some(Kind::Trial),
            ..Fields::default()
        };
        assert_eq!(Terms::changed(&plan, &to_trial).price_minor, 0);
        let price_only = Fields {
            price_minor: Some(700),
            ..Fields::default()
        };
        assert_eq!(Terms::changed(&plan, &price_only).price_minor, 700);
    }
}
