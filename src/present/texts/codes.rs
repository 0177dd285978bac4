//! Promo codes (`/code`, deep links with a code): applied, refused and why, guessed too often.

use fluent_bundle::FluentValue;

use super::{Language, s};
use crate::present::locale::{say, say_with};

/// `/code` without a code.
pub fn code_usage(l: Language) -> String {
    say(l, "code-usage", None)
}

/// A code was stored for the buyer's next order: what it gives (`gives`, [`code_gives`]).
pub fn code_applied(l: Language, code: &str, gives: &str) -> String {
    say_with(l, "code-applied", &[("code", s(code)), ("gives", s(gives))])
}

/// What a code takes off (`off`: [`percent`](super::percent) or a price) and on what (`on`:
/// plan titles, or `None` for every paid plan).
pub fn code_gives(l: Language, off: &str, on: Option<&str>) -> String {
    match on {
        Some(on) => say_with(l, "code-gives-on", &[("off", s(off)), ("plans", s(on))]),
        None => say_with(l, "code-gives-all", &[("off", s(off))]),
    }
}

/// Why a code cannot be used ([`CodeRefusal`]).
pub fn code_refused(l: Language, code: &str, why: CodeRefusal) -> String {
    let why = why.text(l);
    say_with(l, "code-refused", &[("code", s(code)), ("why", s(&why))])
}

/// Why a promo code cannot be used, as buyers are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeRefusal {
    Unknown,
    Inactive,
    Expired,
    Exhausted,
    UsedByYou,
    NotForPlan,
    FirstPurchase,
    NoPlan,
    Taken,
}

impl CodeRefusal {
    /// The reason in words (the part of [`code_refused`] after the colon).
    pub fn text(self, l: Language) -> String {
        let id = match self {
            CodeRefusal::Unknown => "code-unknown",
            CodeRefusal::Inactive => "code-inactive",
            CodeRefusal::Expired => "code-expired",
            CodeRefusal::Exhausted => "code-exhausted",
            CodeRefusal::UsedByYou => "code-used-by-you",
            CodeRefusal::NotForPlan => "code-not-for-plan",
            CodeRefusal::FirstPurchase => "code-first-purchase",
            CodeRefusal::NoPlan => "code-no-plan",
            CodeRefusal::Taken => "code-taken",
        };
        say(l, id, None)
    }
}

/// Code attempts are refused for now: too many wrong codes (the buyer's, or everyone's this
/// minute); they may try again in `retry_after_secs` (said in whole minutes, at least one).
pub fn code_too_many(l: Language, retry_after_secs: i64) -> String {
    let minutes = ((retry_after_secs.max(1) + 59) / 60).max(1);
    say_with(
        l,
        "code-too-many",
        &[("minutes", FluentValue::from(minutes))],
    )
}

/// `/code` for a code the buyer's pending order of `title` already uses: its price with the
/// code (`price`) and without (`list_price`).
pub fn code_already_applied(
    l: Language,
    code: &str,
    title: &str,
    price: &str,
    list_price: &str,
) -> String {
    say_with(
        l,
        "code-already-applied",
        &[
            ("code", s(code)),
            ("title", s(title)),
            ("price", s(price)),
            ("listPrice", s(list_price)),
        ],
    )
}
