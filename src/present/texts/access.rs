//! Access given, extended and ended, and the reminders before it ends (the effects worker's
//! messages), each in the words of what caused it ([`Source`], [`Ending`]).

use fluent_bundle::FluentValue;

use super::{Language, formats::day, s};
use crate::{common::expiry::Expiry, present::locale::say_with};

/// A payment made the buyer a member: the channel's join link.
pub fn grant(l: Language, title: &str, until: &str, link: &str) -> String {
    say_with(
        l,
        "grant",
        &[("title", s(title)), ("until", s(until)), ("link", s(link))],
    )
}

/// A payment made the buyer a member for life: the channel's join link.
pub fn grant_for_life(l: Language, title: &str, link: &str) -> String {
    say_with(
        l,
        "grant-for-life",
        &[("title", s(title)), ("link", s(link))],
    )
}

/// A member renewed.
pub fn renewal_receipt(l: Language, title: &str, until: &str) -> String {
    say_with(
        l,
        "renewal-receipt",
        &[("title", s(title)), ("until", s(until))],
    )
}

/// A member's access became lifetime.
pub fn lifetime_receipt(l: Language, title: &str) -> String {
    say_with(l, "lifetime-receipt", &[("title", s(title))])
}

/// `REMINDER_DAYS` before the end of a term.
pub fn reminder(l: Language, title: &str, ends: &str) -> String {
    say_with(l, "reminder", &[("title", s(title)), ("ends", s(ends))])
}

/// The membership entered its grace period.
pub fn grace_notice(l: Language, title: &str, expired: &str) -> String {
    say_with(
        l,
        "grace-notice",
        &[("title", s(title)), ("expired", s(expired))],
    )
}

/// The reminder of a membership whose Stars subscription still renews: it renews on
/// `renews_at`, nothing to buy.
pub fn reminder_renews(l: Language, title: &str, renews_at: &str) -> String {
    say_with(
        l,
        "reminder-renews",
        &[("title", s(title)), ("renewsAt", s(renews_at))],
    )
}

/// Where access a buyer is told about came from: only a payment is thanked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A payment (or a Stars subscription's charge).
    Payment,
    /// A trial plan.
    Trial,
    /// A free order (a 100 % promo code).
    Free,
    /// Staff: a grant or a correction.
    Staff,
    /// A buyer-referrer's reward days: a friend they invited bought access.
    Referral,
}

/// The buyer's access to `title` started (until `expires`): the channel's join link, in the
/// words of its `source`.
pub fn access_granted(
    l: Language,
    source: Source,
    title: &str,
    expires: Expiry,
    link: &str,
) -> String {
    let until = match expires {
        Expiry::At(t) => Some(day(l, t)),
        Expiry::Never => None,
    };
    let id = match (source, &until) {
        (Source::Payment, Some(until)) => return grant(l, title, until, link),
        (Source::Payment, None) => return grant_for_life(l, title, link),
        (Source::Trial, Some(_)) => "grant-trial",
        (Source::Free, Some(_)) => "grant-free",
        (Source::Trial | Source::Free, None) => "grant-free-for-life",
        (Source::Staff, Some(_)) => "grant-staff",
        // Reward days are never lifetime; a lifetime membership they met is told as staff's.
        (Source::Staff | Source::Referral, None) => "grant-staff-for-life",
        (Source::Referral, Some(_)) => "grant-referral",
    };
    let mut args = vec![("title", s(title)), ("link", s(link))];
    if let Some(until) = &until {
        args.push(("until", FluentValue::from(until.as_str())));
    }
    say_with(l, id, &args)
}

/// A member's access to `title` now lasts until `expires`, in the words of its `source`.
pub fn access_extended(l: Language, source: Source, title: &str, expires: Expiry) -> String {
    match (source, expires) {
        (Source::Payment, Expiry::At(t)) => renewal_receipt(l, title, &day(l, t)),
        (Source::Payment, Expiry::Never) => lifetime_receipt(l, title),
        (Source::Referral, Expiry::At(t)) => say_with(
            l,
            "access-extended-referral",
            &[("title", s(title)), ("until", s(&day(l, t)))],
        ),
        (_, Expiry::At(t)) => say_with(
            l,
            "access-extended",
            &[("title", s(title)), ("until", s(&day(l, t)))],
        ),
        (_, Expiry::Never) => say_with(l, "access-extended-for-life", &[("title", s(title))]),
    }
}

/// Why a buyer's access ended, as they are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Its term (and grace) ran out.
    Expired,
    /// The payment that bought it was refunded.
    Refunded,
    /// Staff ended it.
    Revoked,
}

/// The buyer's access to `title` ended (sent with a renew button).
pub fn access_ended(l: Language, ending: Ending, title: &str) -> String {
    let id = match ending {
        Ending::Expired => "access-ended",
        Ending::Refunded => "access-ended-refunded",
        Ending::Revoked => "access-ended-revoked",
    };
    say_with(l, id, &[("title", s(title))])
}
