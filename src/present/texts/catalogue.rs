//! The catalogue (`/start`, `/help`, deep links): its frame, the lines of a plan and the buy
//! buttons.

use fluent_bundle::FluentValue;

use super::{Language, s};
use crate::present::locale::{say, say_with};

/// Above the list of channels.
pub fn catalogue_header(l: Language) -> String {
    say(l, "catalogue-header", None)
}

/// Below the list.
pub fn catalogue_footer(l: Language) -> String {
    say(l, "catalogue-footer", None)
}

/// When no channel is on sale.
pub fn catalogue_empty(l: Language) -> String {
    say(l, "catalogue-empty", None)
}

/// Before the list, when a deep link named a channel that is unknown or not on sale.
pub fn unknown_channel(l: Language) -> String {
    say(l, "unknown-channel", None)
}

/// Before the list, when a deep link named a plan that is unknown or not on sale.
pub fn unknown_plan(l: Language) -> String {
    say(l, "unknown-plan", None)
}

/// The button that shows the next page of channels.
pub fn more_button(l: Language) -> String {
    say(l, "more-button", None)
}

/// Any other message.
pub fn help(l: Language) -> String {
    say(l, "help", None)
}

/// A plan's price line, e.g. `250 ⭐ for 30 days`; `period` `None`: lifetime access.
pub fn price_line(l: Language, price: &str, period: Option<&str>, recurring: bool) -> String {
    match period {
        Some(p) if recurring => say_with(
            l,
            "price-line-recurring",
            &[("price", s(price)), ("period", s(p))],
        ),
        Some(p) => say_with(
            l,
            "price-line-period",
            &[("price", s(price)), ("period", s(p))],
        ),
        None => say_with(l, "price-line-lifetime", &[("price", s(price))]),
    }
}

/// A price after a promo code, with the list price in words: `199.00 UAH, was 249.00 UAH`.
pub fn discounted(l: Language, price: &str, list_price: &str) -> String {
    say_with(
        l,
        "discounted",
        &[("price", s(price)), ("listPrice", s(list_price))],
    )
}

/// A trial plan's line: what it gives, for free.
pub fn trial_line(l: Language, period: &str) -> String {
    say_with(l, "trial-line", &[("period", s(period))])
}

/// One of several plans of a channel, named: `• Yearly: 2000 ⭐ for 365 days`.
pub fn plan_line(l: Language, name: &str, line: &str) -> String {
    say_with(l, "plan-line", &[("name", s(name)), ("line", s(line))])
}

/// Under a bundle, indented: the other channels it gives access to (titles already shortened).
pub fn bundle_line(l: Language, other_titles: &[String]) -> String {
    let names: Vec<String> = other_titles.iter().map(|t| format!("«{t}»")).collect();
    plan_note(&say_with(
        l,
        "bundle-line",
        &[("titles", FluentValue::from(names.join(", ")))],
    ))
}

/// Under one plan of several, indented: why it cannot be bought now ([`full`],
/// [`not_on_sale`], [`have_lifetime`]).
pub fn plan_note(note: &str) -> String {
    format!("  {note}")
}

/// Shown instead of a buy button when the buyer has lifetime access already.
pub fn have_lifetime(l: Language) -> String {
    say(l, "have-lifetime", None)
}

/// Shown under a seat-limited channel with no free seat.
pub fn full(l: Language) -> String {
    say(l, "full", None)
}

/// Shown under a channel whose currency no configured gateway takes.
pub fn not_on_sale(l: Language) -> String {
    say(l, "not-on-sale", None)
}

/// The button of a trial plan, shown only to buyers who can still use it.
pub fn trial_button(l: Language, period: &str) -> String {
    say_with(l, "trial-button", &[("period", s(period))])
}

/// The buy button of one plan (`price` may be [`discounted`]).
pub fn buy_button(l: Language, title: &str, price: &str, recurring: bool) -> String {
    let id = if recurring {
        "subscribe-button"
    } else {
        "buy-button"
    };
    say_with(l, id, &[("title", s(title)), ("price", s(price))])
}
