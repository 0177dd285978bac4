//! Answers to buttons: shown by Telegram above the chat, at most 200 characters.

use fluent_bundle::FluentValue;

use super::{Language, s};
use crate::present::locale::{say, say_with};

/// The buy button was pressed and the invoice is being sent.
pub fn invoice_on_its_way(l: Language) -> String {
    say(l, "invoice-on-its-way", None)
}

/// The buy button was pressed again while the last invoice is still valid.
pub fn invoice_already_sent(l: Language) -> String {
    say(l, "invoice-already-sent", None)
}

/// A button naming something that is not there (deleted since it was sent), or not the
/// presser's.
pub fn button_invalid(l: Language) -> String {
    say(l, "button-invalid", None)
}

/// The channel of a buy button is gone or off sale.
pub fn channel_unavailable(l: Language) -> String {
    say(l, "channel-unavailable", None)
}

/// An order's promo code filled up after its use lapsed: its price is gone.
pub fn promo_price_gone(l: Language) -> String {
    say(l, "promo-price-gone", None)
}

/// A seat-limited channel with no free seat: no order is made.
pub fn channel_full(l: Language, title: &str) -> String {
    say_with(l, "channel-full", &[("title", s(title))])
}

/// The buyer may not hold a seat of the channel before `when`
/// ([`not_before`](super::not_before)): an unpaid hold of theirs ran out moments ago
/// (`cooldown`), or they held seats of it too often today. No order is made.
pub fn hold_limited(l: Language, title: &str, when: &str, cooldown: bool) -> String {
    let id = if cooldown {
        "hold-limited-cooldown"
    } else {
        "hold-limited-daily"
    };
    say_with(l, id, &[("title", s(title)), ("when", s(when))])
}

/// A channel priced in a currency no configured gateway takes: no order is made.
pub fn cannot_be_paid(l: Language, title: &str) -> String {
    say_with(l, "cannot-be-paid", &[("title", s(title))])
}

/// The buyer already has lifetime access to everything the plan gives: no order is made.
pub fn already_lifetime(l: Language, title: &str) -> String {
    say_with(l, "already-lifetime", &[("title", s(title))])
}

/// A trial the buyer cannot use: they had a trial of, or were a member of, the channel.
pub fn trial_used(l: Language, title: &str) -> String {
    say_with(l, "trial-used", &[("title", s(title))])
}

/// A trial (or a free order) was granted: the join links of `channels` (their titles) come as
/// messages.
pub fn free_access_granted(l: Language, channels: &[String]) -> String {
    let names: Vec<String> = channels.iter().map(|t| format!("«{t}»")).collect();
    say_with(
        l,
        "free-access-granted",
        &[("channels", FluentValue::from(names.join(", ")))],
    )
}

/// The buyer's stored promo code could not be used for this order: the code is forgotten, no
/// order is made, and a second press buys at the list price.
pub fn code_refused_at_order(l: Language, code: &str, why: &str, list_price: &str) -> String {
    say_with(
        l,
        "code-refused-at-order",
        &[
            ("code", s(code)),
            ("why", s(why)),
            ("listPrice", s(list_price)),
        ],
    )
}

/// The buyer already has a live Stars subscription of the channel.
pub fn already_subscribed(l: Language, title: &str, renews_at: &str) -> String {
    say_with(
        l,
        "already-subscribed",
        &[("title", s(title)), ("renewsAt", s(renews_at))],
    )
}

/// The cancel-renewal button was pressed.
pub fn renewal_cancelled(l: Language) -> String {
    say(l, "renewal-cancelled", None)
}

/// The cancel-renewal button of a subscription already cancelled.
pub fn renewal_already_cancelled(l: Language) -> String {
    say(l, "renewal-already-cancelled", None)
}

/// A card-priced plan pressed while no card page could stay open long enough to pay on it: no
/// order is made.
pub fn card_unavailable(l: Language, title: &str) -> String {
    say_with(l, "card-unavailable", &[("title", s(title))])
}
