//! `/referral`: the buyer's own referral link and what it earns them, or why there is none.

use fluent_bundle::FluentValue;

use super::{Language, s};
use crate::present::locale::{say, say_with};

/// The buyer's link; a friend's first purchase through it earns them `days` free days.
pub fn referral_link_days(l: Language, link: &str, days: i32) -> String {
    say_with(
        l,
        "referral-link-days",
        &[("link", s(link)), ("days", FluentValue::from(days))],
    )
}

/// The buyer's link; a friend's first purchase through it earns them `percent` of it (already
/// formatted: [`percent`](super::percent)).
pub fn referral_link_percent(l: Language, link: &str, percent: &str) -> String {
    say_with(
        l,
        "referral-link-percent",
        &[("link", s(link)), ("percent", s(percent))],
    )
}

/// The buyer's link, when the program sets nothing for them to earn.
pub fn referral_link(l: Language, link: &str) -> String {
    say_with(l, "referral-link", &[("link", s(link))])
}

/// The program is off, buyers get no links of their own, or the bot has no username to make
/// a link with.
pub fn referral_unavailable(l: Language) -> String {
    say(l, "referral-unavailable", None)
}

/// The buyer's own affiliate row was deactivated.
pub fn referral_refused(l: Language) -> String {
    say(l, "referral-refused", None)
}
