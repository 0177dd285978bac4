//! Every text a buyer reads from the bot, by name: each function says one message of the
//! language's Fluent file (`locales/<code>/bot.ftl`, [`super::locale`]) with its values, so an
//! operator can reword or translate them without reading the code that sends them. English is
//! the default.
//!
//! The texts are plain text (no Markdown or HTML parse mode): a channel title or description
//! staff typed is shown exactly as typed, and nothing in it can break the message. Values are
//! passed in already formatted ([`super::render::price`], [`super::render::period`], [`day`]);
//! limits (4096 characters a message, 200 a callback answer) are enforced by the renderer after
//! these texts are filled in, so a long title can never push a message over a limit.

use chrono::{DateTime, Utc};
use fluent_bundle::FluentValue;

pub use super::locale::Language;
use super::locale::{DATE_FORMAT, say, say_with};
use crate::common::{expiry::Expiry, vocabulary::Reason};

fn s(v: &str) -> FluentValue<'_> {
    FluentValue::from(v)
}

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

// ---- formats ----

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

// ---- Telegram's payment form (a refused pre-checkout; at most 100 characters) ----

/// The decision could not be made in time.
pub fn pre_checkout_busy(l: Language) -> String {
    say(l, "pre-checkout-busy", None)
}

/// Why a pre-checkout is refused, by its reason code. The reasons that never refuse a
/// pre-checkout (they only describe a stored payment) read as [`pre_checkout_busy`].
pub fn pre_checkout_refusal(l: Language, reason: Reason) -> String {
    let id = match reason {
        Reason::UnknownOrder => "pre-checkout-unknown-order",
        Reason::OrderCancelled => "pre-checkout-order-cancelled",
        Reason::AlreadyPaid => "pre-checkout-already-paid",
        Reason::PayerMismatch => "pre-checkout-payer-mismatch",
        Reason::CurrencyMismatch => "pre-checkout-currency-mismatch",
        Reason::AmountMismatch => "pre-checkout-amount-mismatch",
        Reason::ChannelInactive => "pre-checkout-channel-inactive",
        Reason::HoldExpired => "pre-checkout-hold-expired",
        Reason::NoSeat => "pre-checkout-no-seat",
        Reason::HoldLimited => "pre-checkout-hold-limited",
        Reason::PromoExhausted => "pre-checkout-promo-exhausted",
        Reason::AlreadyLifetime => "pre-checkout-already-lifetime",
        Reason::RefundedElsewhere
        | Reason::UnknownSubscription
        | Reason::SubscriptionCancelled
        | Reason::RefundedAtGateway
        | Reason::RefundedBeforePayment
        | Reason::DisputedAtGateway
        | Reason::DisputeWon => "pre-checkout-busy",
    };
    say(l, id, None)
}

/// A pre-checkout refused by the buyer's hold rules, with when they may try again
/// ([`not_before`]).
pub fn pre_checkout_hold_limited(l: Language, when: &str) -> String {
    say_with(l, "pre-checkout-hold-limited-until", &[("when", s(when))])
}

// ---- access (the effects worker) ----

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

// ---- the catalogue (/start, /help, deep links) ----

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

// ---- answers to buttons (shown by Telegram above the chat, at most 200 characters) ----

/// The buy button was pressed and the invoice is being sent.
pub fn invoice_on_its_way(l: Language) -> String {
    say(l, "invoice-on-its-way", None)
}
/// The buy button was pressed again while the last invoice is still valid.
pub fn invoice_already_sent(l: Language) -> String {
    say(l, "invoice-already-sent", None)
}
/// A button naming something that is not (or no longer) there, or not the presser's.
pub fn button_invalid(l: Language) -> String {
    say(l, "button-invalid", None)
}
/// The channel of a buy button is gone or no longer on sale.
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

/// The buyer may not hold a seat of the channel before `when` ([`not_before`]): an unpaid hold
/// of theirs ran out moments ago (`cooldown`), or they held seats of it too often today. No
/// order is made.
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

// ---- invoices ----

/// The invoice's description when the plan (or the channel) has none; `period` `None`:
/// lifetime.
pub fn invoice_description(l: Language, title: &str, period: Option<&str>) -> String {
    match period {
        Some(p) => say_with(
            l,
            "invoice-description-period",
            &[("title", s(title)), ("period", s(p))],
        ),
        None => say_with(l, "invoice-description-lifetime", &[("title", s(title))]),
    }
}

/// The label of the invoice's one price; `period` `None`: lifetime.
pub fn invoice_label(l: Language, period: Option<&str>) -> String {
    match period {
        Some(p) => say_with(l, "invoice-label-period", &[("period", s(p))]),
        None => say(l, "invoice-label-lifetime", None),
    }
}

/// The message carrying a Stars subscription link.
pub fn subscription_offer(l: Language, title: &str, price: &str, period: &str) -> String {
    say_with(
        l,
        "subscription-offer",
        &[
            ("title", s(title)),
            ("price", s(price)),
            ("period", s(period)),
        ],
    )
}

/// The button of a Stars subscription link.
pub fn subscription_button(l: Language, price: &str) -> String {
    say_with(l, "subscription-button", &[("price", s(price))])
}

/// The message carrying a card payment link.
pub fn card_offer(
    l: Language,
    title: &str,
    price: &str,
    period: Option<&str>,
    valid_minutes: i64,
) -> String {
    let common = [
        ("title", s(title)),
        ("price", s(price)),
        ("minutes", FluentValue::from(valid_minutes)),
    ];
    match period {
        Some(p) => {
            let mut args = common.to_vec();
            args.push(("period", s(p)));
            say_with(l, "card-offer-period", &args)
        }
        None => say_with(l, "card-offer-lifetime", &common),
    }
}

/// The button of a card payment link.
pub fn card_button(l: Language, price: &str) -> String {
    say_with(l, "card-button", &[("price", s(price))])
}

/// The button of one of two card payment pages, naming its gateway.
pub fn card_button_via(l: Language, price: &str, gateway: &str) -> String {
    say_with(
        l,
        "card-button-via",
        &[("price", s(price)), ("gateway", s(gateway))],
    )
}

// ---- promo codes (/code, deep links with a code) ----

/// `/code` without a code.
pub fn code_usage(l: Language) -> String {
    say(l, "code-usage", None)
}

/// A code was stored for the buyer's next order: what it gives (`gives`, [`code_gives`]).
pub fn code_applied(l: Language, code: &str, gives: &str) -> String {
    say_with(l, "code-applied", &[("code", s(code)), ("gives", s(gives))])
}

/// What a code takes off (`off`: [`percent`] or a price) and on what (`on`: plan titles, or
/// `None` for every paid plan).
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

// ---- /subscriptions ----

/// Above the buyer's memberships.
pub fn subscriptions_header(l: Language) -> String {
    say(l, "subscriptions-header", None)
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

// ---- /language ----

/// Above the language buttons.
pub fn language_choose(l: Language) -> String {
    say(l, "language-choose", None)
}

/// The buyer chose `l`: said in `l`.
pub fn language_chosen(l: Language) -> String {
    say(l, "language-chosen", None)
}

// ---- what happened to a payment ----

/// A Stars payment we could not use and refund ourselves (the seat was taken, the order was
/// already paid, its invoice had expired).
pub fn payment_refunded(l: Language, title: &str, price: &str, seat_taken: bool) -> String {
    let id = if seat_taken {
        "payment-refunded-seat"
    } else {
        "payment-refunded"
    };
    say_with(l, id, &[("title", s(title)), ("price", s(price))])
}

/// A payment we could not use and cannot refund ourselves (a card payment, or a Stars
/// payment that needs a human): staff review it.
pub fn payment_in_review(l: Language, title: &str, price: &str, seat_taken: bool) -> String {
    let id = if seat_taken {
        "payment-in-review-seat"
    } else {
        "payment-in-review"
    };
    say_with(l, id, &[("title", s(title)), ("price", s(price))])
}

/// A refused Stars subscription charge's notice ([`payment_refunded`] or
/// [`payment_in_review`]), followed by why the subscription could not go on (the refused
/// charge's reason code) and that it is cancelled, so Telegram will not charge it again.
pub fn with_subscription_stopped(l: Language, notice: &str, reason: Option<Reason>) -> String {
    let id = match reason {
        Some(Reason::ChannelInactive) => "subscription-stopped-channel-inactive",
        Some(Reason::NoSeat) => "subscription-stopped-no-seat",
        Some(Reason::HoldExpired) => "subscription-stopped-hold-expired",
        Some(Reason::AlreadyPaid) => "subscription-stopped-already-paid",
        Some(Reason::AlreadyLifetime) => "subscription-stopped-already-lifetime",
        Some(Reason::PromoExhausted) => "subscription-stopped-promo-exhausted",
        Some(
            Reason::UnknownOrder
            | Reason::OrderCancelled
            | Reason::CurrencyMismatch
            | Reason::AmountMismatch
            | Reason::PayerMismatch
            | Reason::RefundedElsewhere
            | Reason::UnknownSubscription
            | Reason::SubscriptionCancelled
            | Reason::RefundedAtGateway
            | Reason::RefundedBeforePayment
            | Reason::DisputedAtGateway
            | Reason::DisputeWon
            | Reason::HoldLimited,
        )
        | None => "subscription-stopped",
    };
    format!("{notice}\n\n{}", say(l, id, None))
}

/// A payment that would buy nothing: the buyer already has lifetime access to the channel. It
/// is refunded (`refunded`: a Stars payment we refund) or reviewed by staff.
pub fn payment_already_lifetime(l: Language, title: &str, price: &str, refunded: bool) -> String {
    let id = if refunded {
        "payment-already-lifetime-refunded"
    } else {
        "payment-already-lifetime-review"
    };
    say_with(l, id, &[("title", s(title)), ("price", s(price))])
}

/// A payment naming no order we know.
pub fn payment_unknown_order(l: Language, price: &str) -> String {
    say_with(l, "payment-unknown-order", &[("price", s(price))])
}

// ---- promo code guesses; Stars subscriptions changed in Telegram ----

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

/// The reminder of a membership whose Stars subscription still renews: it renews on
/// `renews_at`, nothing to buy.
pub fn reminder_renews(l: Language, title: &str, renews_at: &str) -> String {
    say_with(
        l,
        "reminder-renews",
        &[("title", s(title)), ("renewsAt", s(renews_at))],
    )
}

// ---- what was given without a payment, the end of access, codes already applied, card pages ----

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
        (Source::Staff, None) => "grant-staff-for-life",
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

/// A card-priced plan pressed while no card page could stay open long enough to pay on it: no
/// order is made.
pub fn card_unavailable(l: Language, title: &str) -> String {
    say_with(l, "card-unavailable", &[("title", s(title))])
}

#[cfg(test)]
mod tests {
    use super::*;

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
