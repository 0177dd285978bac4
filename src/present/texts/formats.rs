//! Formats every text uses: dates as each language writes them ([`day`], [`not_before`]), a
//! channel with no printable title, prices, periods and percentages.

use chrono::{DateTime, Utc};
use fluent_bundle::FluentValue;

use super::{Language, s};
use crate::present::locale::{DATE_FORMAT, say, say_with};

/// A time as buyers of `l` read it (`2026-12-01 14:30 UTC`, `1 грудня 2026 р. о 14:30 (UTC)`):
/// the language's pattern (`date-time-format`) with the locale's month names.
pub fn day(l: Language, t: DateTime<Utc>) -> String {
    let pattern = say(l, DATE_FORMAT, None);
    t.format_localized(&pattern, l.chrono_locale()).to_string()
}

/// A time from which something is allowed, as buyers read it: [`day`] rounded up to the minute,
/// so a buyer who comes back at the minute shown is never refused again.
pub fn not_before(l: Language, t: DateTime<Utc>) -> String {
    use chrono::{DurationRound, TimeDelta};
    let minute = TimeDelta::minutes(1);
    let down = t.duration_trunc(minute).unwrap_or(t);
    day(l, if down < t { down + minute } else { down })
}

/// A channel whose title has nothing printable: `Channel 3`.
pub fn channel_fallback(l: Language, id: i32) -> String {
    say_with(l, "channel-fallback", &[("id", FluentValue::from(id))])
}

/// A price in Stars; `amount` already formatted for the language.
pub fn price_stars(l: Language, amount: &str) -> String {
    say_with(l, "price-stars", &[("amount", s(amount))])
}

/// A price in a currency (its ISO code); `amount` already formatted for the language.
pub fn price_money(l: Language, amount: &str, currency: &str) -> String {
    say_with(
        l,
        "price-money",
        &[("amount", s(amount)), ("currency", s(currency))],
    )
}

/// A number of days, with the language's plural form.
pub fn period(l: Language, days: i32) -> String {
    say_with(l, "period", &[("days", FluentValue::from(days))])
}

/// A percentage off.
pub fn percent(l: Language, percent: i32) -> String {
    say_with(l, "percent", &[("percent", FluentValue::from(percent))])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::present::texts::card_offer;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn dates_read_as_each_language_writes_them() {
        let t = at("2026-12-01T14:30:00Z");
        assert_eq!(day(Language::En, t), "2026-12-01 14:30 UTC");
        assert_eq!(day(Language::Uk, t), "1 грудня 2026 р. о 14:30 (UTC)");
        assert_eq!(day(Language::Ru, t), "1 декабря 2026 г. в 14:30 (UTC)");
    }

    #[test]
    fn plurals_follow_each_language() {
        let en: Vec<String> = [1, 2, 5, 21].map(|d| period(Language::En, d)).to_vec();
        assert_eq!(en, ["1 day", "2 days", "5 days", "21 days"]);
        let uk: Vec<String> = [1, 2, 5, 11, 21, 22, 30]
            .map(|d| period(Language::Uk, d))
            .to_vec();
        assert_eq!(
            uk,
            [
                "1 день",
                "2 дні",
                "5 днів",
                "11 днів",
                "21 день",
                "22 дні",
                "30 днів"
            ]
        );
        let ru: Vec<String> = [1, 3, 7, 14, 31, 365]
            .map(|d| period(Language::Ru, d))
            .to_vec();
        assert_eq!(
            ru,
            [
                "1 день",
                "3 дня",
                "7 дней",
                "14 дней",
                "31 день",
                "365 дней"
            ]
        );
        assert!(card_offer(Language::Uk, "T", "1 ⭐", None, 1).ends_with("1 хвилину."));
        assert!(card_offer(Language::Ru, "T", "1 ⭐", None, 5).ends_with("5 минут."));
        assert!(card_offer(Language::En, "T", "1 ⭐", None, 5).ends_with("5 minutes."));
    }
}
