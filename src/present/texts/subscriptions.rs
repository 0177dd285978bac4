//! `/subscriptions` and the buyer's Stars subscriptions: each membership's line and buttons,
//! a cancellation confirmed, a renewal Telegram could not charge.

use fluent_bundle::FluentValue;

use super::{Language, formats::day, s};
use crate::{
    common::expiry::Expiry,
    present::locale::{say, say_with},
};

/// Above the buyer's memberships.
pub fn subscriptions_header(l: Language) -> String {
    say(l, "subscriptions-header", None)
}

/// The button under `/subscriptions` opening the member portal (the Mini App).
pub fn portal_button(l: Language) -> String {
    say(l, "portal-button", None)
}

/// When the buyer has none.
pub fn subscriptions_empty(l: Language) -> String {
    say(l, "subscriptions-empty", None)
}

/// The last line when not all memberships fit.
pub fn subscriptions_more(l: Language, count: usize) -> String {
    say_with(
        l,
        "subscriptions-more",
        &[("count", FluentValue::from(count))],
    )
}

/// One membership's line (its expiry as [`day`] shows it, or lifetime access).
pub fn membership_line(l: Language, status: &str, expires_at: Expiry) -> String {
    let at = match expires_at {
        Expiry::At(t) => day(l, t),
        Expiry::Never if status == "expired" => return say(l, "membership-ended", None),
        Expiry::Never => return say(l, "membership-lifetime", None),
    };
    let id = match status {
        "active" => "membership-active",
        "grace" => "membership-grace",
        _ => "membership-expired",
    };
    say_with(l, id, &[("at", s(&at))])
}

/// Under a membership with a live Stars subscription.
pub fn renews_automatically(l: Language, renews_at: &str) -> String {
    say_with(l, "renews-automatically", &[("renewsAt", s(renews_at))])
}

/// Under a membership whose Stars subscription was cancelled.
pub fn renewal_off(l: Language) -> String {
    say(l, "renewal-off", None)
}

/// The renew button of one membership.
pub fn renew_button(l: Language, title: &str) -> String {
    say_with(l, "renew-button", &[("title", s(title))])
}

/// The cancel-renewal button of one live Stars subscription.
pub fn cancel_renewal_button(l: Language, title: &str) -> String {
    say_with(l, "cancel-renewal-button", &[("title", s(title))])
}

/// Sent once Telegram confirmed the cancellation of a Stars subscription.
pub fn subscription_cancelled(l: Language, title: &str, access_until: Option<&str>) -> String {
    match access_until {
        Some(until) => say_with(
            l,
            "subscription-cancelled-until",
            &[("title", s(title)), ("until", s(until))],
        ),
        None => say_with(l, "subscription-cancelled", &[("title", s(title))]),
    }
}

/// Telegram could not charge a subscription's renewal: access lasts until `access_until` (when
/// it ends at all), and how to keep it.
pub fn subscription_renewal_failed(l: Language, title: &str, access_until: Option<&str>) -> String {
    match access_until {
        Some(until) => say_with(
            l,
            "subscription-renewal-failed-until",
            &[("title", s(title)), ("until", s(until))],
        ),
        None => say_with(l, "subscription-renewal-failed", &[("title", s(title))]),
    }
}
