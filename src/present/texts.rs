//! Every text a buyer reads from the bot, in one place, so an operator can reword or translate
//! them without reading the code that sends them. English is the default.
//!
//! The texts are plain text (no Markdown or HTML parse mode): a channel title or description
//! staff typed is shown exactly as typed, and nothing in it can break the message. Values are
//! passed in already formatted ([`super::render::price`], [`super::render::period`], [`day`]);
//! limits (4096 characters a message, 200 a callback answer) are enforced by the renderer after
//! these texts are filled in, so a long title can never push a message over a limit.

use chrono::{DateTime, Utc};

use crate::{expiry::Expiry, vocabulary::Reason};

/// A time as buyers read it.
pub fn day(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A time from which something is allowed, as buyers read it: [`day`] rounded up to the minute,
/// so a buyer who comes back at the minute shown is never refused again.
pub fn not_before(t: DateTime<Utc>) -> String {
    use chrono::{DurationRound, TimeDelta};
    let minute = TimeDelta::minutes(1);
    let down = t.duration_trunc(minute).unwrap_or(t);
    day(if down < t { down + minute } else { down })
}

// ---- Telegram's payment form (a refused pre-checkout; at most 100 characters) ----

/// The decision could not be made in time.
pub const PRE_CHECKOUT_BUSY: &str = "Please try again in a moment.";

/// Why a pre-checkout is refused, by its reason code. The reasons that never refuse a
/// pre-checkout (they only describe a stored payment) read as [`PRE_CHECKOUT_BUSY`].
pub fn pre_checkout_refusal(reason: Reason) -> &'static str {
    match reason {
        Reason::UnknownOrder => "We could not find this order. Please start a new order.",
        Reason::OrderCancelled => "This order was cancelled. Please start a new order.",
        Reason::AlreadyPaid => "This order has already been paid.",
        Reason::PayerMismatch => "This invoice was issued to another Telegram account.",
        Reason::CurrencyMismatch => "This order cannot be paid with Telegram Stars.",
        Reason::AmountMismatch => {
            "The invoice amount does not match the order. Please start a new order."
        }
        Reason::ChannelInactive => "This channel is not accepting subscriptions right now.",
        Reason::HoldExpired => "This invoice has expired. Please start a new order.",
        Reason::NoSeat => {
            "This seat has just been taken. Please choose another channel or try later."
        }
        Reason::HoldLimited => {
            "You held a seat here recently without paying. Please try again later."
        }
        Reason::PromoExhausted => "This price is no longer available. Please start a new order.",
        Reason::AlreadyLifetime => "You already have lifetime access to this channel.",
        Reason::RefundedElsewhere
        | Reason::UnknownSubscription
        | Reason::SubscriptionCancelled
        | Reason::RefundedAtGateway => PRE_CHECKOUT_BUSY,
    }
}

/// A pre-checkout refused by the buyer's hold rules, with when they may try again
/// ([`not_before`]).
pub fn pre_checkout_hold_limited(when: &str) -> String {
    format!("You held a seat here recently without paying. Try again after {when}.")
}

// ---- access (the effects worker) ----

/// A payment made the buyer a member: the channel's join link.
pub fn grant(title: &str, until: &str, link: &str) -> String {
    format!(
        "Payment received, thank you! Your access to «{title}» is active until {until}.\n\n\
         Join here: {link}\n\
         Tap the link and send a join request: it is approved automatically for members."
    )
}

/// A payment made the buyer a member for life: the channel's join link.
pub fn grant_for_life(title: &str, link: &str) -> String {
    format!(
        "Payment received, thank you! Your access to «{title}» is yours for life: it never \
         expires.\n\n\
         Join here: {link}\n\
         Tap the link and send a join request: it is approved automatically for members."
    )
}

/// A member renewed.
pub fn renewal_receipt(title: &str, until: &str) -> String {
    format!("Payment received, thank you! Your access to «{title}» now lasts until {until}.")
}

/// A member's access became lifetime.
pub fn lifetime_receipt(title: &str) -> String {
    format!(
        "Payment received, thank you! Your access to «{title}» is now yours for life: it never \
         expires."
    )
}

/// `REMINDER_DAYS` before the end of a term.
pub fn reminder(title: &str, ends: &str) -> String {
    format!("Your access to «{title}» ends on {ends}. Renew before then to keep it: /subscriptions")
}

/// The membership entered its grace period.
pub fn grace_notice(title: &str, expired: &str) -> String {
    format!(
        "Your access to «{title}» expired on {expired}. You are in a short grace period: \
         renew now to keep your place: /subscriptions"
    )
}

// ---- the catalogue (/start, /help, deep links) ----

/// Above the list of channels.
pub const CATALOGUE_HEADER: &str = "Here are the channels you can join:";
/// Below the list.
pub const CATALOGUE_FOOTER: &str =
    "Tap a button to buy. /subscriptions shows the channels you have.";
/// When no channel is on sale.
pub const CATALOGUE_EMPTY: &str =
    "There are no channels for sale right now. Please check back later.";
/// Before the list, when a deep link named a channel that is unknown or not on sale.
pub const UNKNOWN_CHANNEL: &str = "Sorry, this channel is not available.";
/// The button that shows the next page of channels.
pub const MORE_BUTTON: &str = "More channels ›";
/// Any other message.
pub const HELP: &str = "I sell access to private channels.\n\n\
     /start shows the channels you can join.\n\
     /subscriptions shows the channels you have.\n\
     /code CODE applies a promo code to your next order.";

/// Before the list, when a deep link named a plan that is unknown or not on sale.
pub const UNKNOWN_PLAN: &str = "Sorry, this plan is not available.";

/// A plan's price line, e.g. `250 ⭐ for 30 days`; `period` `None`: lifetime access.
pub fn price_line(price: &str, period: Option<&str>, recurring: bool) -> String {
    match period {
        Some(period) if recurring => format!("{price} every {period}, renews automatically"),
        Some(period) => format!("{price} for {period}"),
        None => format!("{price}, lifetime access"),
    }
}

/// A price after a promo code, with the list price in words: `199.00 UAH, was 249.00 UAH`.
pub fn discounted(price: &str, list_price: &str) -> String {
    format!("{price}, was {list_price}")
}

/// A trial plan's line: what it gives, for free.
pub fn trial_line(period: &str) -> String {
    format!("free for {period}")
}

/// One of several plans of a channel, named: `• Yearly: 2000 ⭐ for 365 days`.
pub fn plan_line(name: &str, line: &str) -> String {
    format!("• {name}: {line}")
}

/// Under a bundle: the other channels it gives access to (titles already shortened).
pub fn bundle_line(other_titles: &[String]) -> String {
    let names: Vec<String> = other_titles.iter().map(|t| format!("«{t}»")).collect();
    format!("  Also gives access to {}.", names.join(", "))
}

/// Under one plan of several: why it cannot be bought now ([`FULL`], [`NOT_ON_SALE`],
/// [`HAVE_LIFETIME`]).
pub fn plan_note(note: &str) -> String {
    format!("  {note}")
}

/// Shown instead of a buy button when the buyer has lifetime access already.
pub const HAVE_LIFETIME: &str = "You have lifetime access.";

/// Shown under a seat-limited channel with no free seat.
pub const FULL: &str = "Full right now: no free seats.";
/// Shown under a channel whose currency no configured gateway takes.
pub const NOT_ON_SALE: &str = "Not on sale right now.";

/// The button of a trial plan, shown only to buyers who can still use it.
pub fn trial_button(period: &str) -> String {
    format!("Try free for {period}")
}

/// The buy button of one plan (`price` may be [`discounted`]).
pub fn buy_button(title: &str, price: &str, recurring: bool) -> String {
    if recurring {
        format!("Subscribe: {title} · {price}")
    } else {
        format!("Buy: {title} · {price}")
    }
}

// ---- answers to buttons (shown by Telegram above the chat, at most 200 characters) ----

/// The buy button was pressed and the invoice is being sent.
pub const INVOICE_ON_ITS_WAY: &str = "Your invoice is on its way.";
/// The buy button was pressed again while the last invoice is still valid.
pub const INVOICE_ALREADY_SENT: &str =
    "Your invoice for this channel is in the chat above; it is still valid.";
/// A button naming something that is not (or no longer) there, or not the presser's.
pub const BUTTON_INVALID: &str = "This button is no longer valid. Send /start to see the channels.";
/// The channel of a buy button is gone or no longer on sale.
pub const CHANNEL_UNAVAILABLE: &str =
    "Sorry, this channel is not available any more. Send /start to see the channels.";

/// An order's promo code filled up after its use lapsed: its price is gone.
pub const PROMO_PRICE_GONE: &str =
    "Sorry, this price is no longer available. Please start a new order.";

/// A seat-limited channel with no free seat: no order is made.
pub fn channel_full(title: &str) -> String {
    format!("Sorry, «{title}» is full right now. Please try again later.")
}

/// The buyer may not hold a seat of the channel before `when` ([`not_before`]): an unpaid hold of theirs
/// ran out moments ago (`cooldown`), or they held seats of it too often today. No order is made.
pub fn hold_limited(title: &str, when: &str, cooldown: bool) -> String {
    if cooldown {
        format!(
            "Your last seat hold on «{title}» ran out before it was paid. \
             You can try again after {when}."
        )
    } else {
        format!(
            "You have held a seat on «{title}» several times today without paying. \
             You can try again after {when}."
        )
    }
}

/// A channel priced in a currency no configured gateway takes: no order is made.
pub fn cannot_be_paid(title: &str) -> String {
    format!("Sorry, «{title}» cannot be paid for right now. Please try again later.")
}

/// The buyer already has lifetime access to everything the plan gives: no order is made.
pub fn already_lifetime(title: &str) -> String {
    format!("You already have lifetime access to «{title}». There is nothing more to buy.")
}

/// A trial the buyer cannot use: they had a trial of, or were a member of, the channel.
pub fn trial_used(title: &str) -> String {
    format!(
        "You already had a trial or a membership of «{title}»: the free trial is for new \
         members only."
    )
}

/// A trial (or a free order) was granted: the join link comes as a message.
pub fn free_access_granted(title: &str) -> String {
    format!("Done! Your free access to «{title}» has started. Your join link is on its way.")
}

/// The buyer's stored promo code could not be used for this order: the code is forgotten, no
/// order is made, and a second press buys at the list price.
pub fn code_refused_at_order(code: &str, why: &str, list_price: &str) -> String {
    format!(
        "Your code {code} cannot be used for this order ({why}). Press the button again to \
         buy at the full price of {list_price}."
    )
}

/// The buyer already has a live Stars subscription of the channel.
pub fn already_subscribed(title: &str, renews_at: &str) -> String {
    format!("You are subscribed to «{title}»; it renews automatically on {renews_at}.")
}

/// The cancel-renewal button was pressed.
pub const RENEWAL_CANCELLED: &str = "Renewal cancelled. Your access stays until it expires.";
/// The cancel-renewal button of a subscription already cancelled.
pub const RENEWAL_ALREADY_CANCELLED: &str = "This subscription's renewal is already cancelled.";

// ---- invoices ----

/// The invoice's description when the plan (or the channel) has none; `period` `None`:
/// lifetime.
pub fn invoice_description(title: &str, period: Option<&str>) -> String {
    match period {
        Some(period) => format!("{period} of access to «{title}»."),
        None => format!("Lifetime access to «{title}»."),
    }
}

/// The label of the invoice's one price; `period` `None`: lifetime.
pub fn invoice_label(period: Option<&str>) -> String {
    match period {
        Some(period) => format!("{period} of access"),
        None => "Lifetime access".to_string(),
    }
}

/// The message carrying a Stars subscription link.
pub fn subscription_offer(title: &str, price: &str, period: &str) -> String {
    format!(
        "Subscribe to «{title}»: {price} every {period}, charged automatically until you cancel \
         (/subscriptions). Tap the button to pay with Telegram Stars."
    )
}

/// The button of a Stars subscription link.
pub fn subscription_button(price: &str) -> String {
    format!("Subscribe for {price}")
}

/// The message carrying a card payment link.
pub fn card_offer(title: &str, price: &str, period: Option<&str>, valid_minutes: i64) -> String {
    let what = match period {
        Some(period) => format!("{period} of access"),
        None => "lifetime access".to_string(),
    };
    format!(
        "Pay {price} by card for {what} to «{title}». \
         The payment page is open for {valid_minutes} minutes."
    )
}

/// The button of a card payment link.
pub fn card_button(price: &str) -> String {
    format!("Pay {price} by card")
}

/// The button of one of two card payment pages, naming its gateway.
pub fn card_button_via(price: &str, gateway: &str) -> String {
    format!("Pay {price} by card ({gateway})")
}

// ---- promo codes (/code, deep links with a code) ----

/// `/code` without a code.
pub const CODE_USAGE: &str = "Send /code followed by your promo code, for example: /code SPRING25";

/// A code was stored for the buyer's next order: what it gives (`gives`, [`code_gives`]).
pub fn code_applied(code: &str, gives: &str) -> String {
    format!(
        "Code {code} applied: {gives}. It is kept for your next order for one hour; \
         the prices with it are shown in /start."
    )
}

/// What a code takes off (`off`: `25 %` or a price) and on what (`on`: plan titles, or `None`
/// for every paid plan).
pub fn code_gives(off: &str, on: Option<&str>) -> String {
    match on {
        Some(on) => format!("−{off} on {on}"),
        None => format!("−{off} on every plan"),
    }
}

/// Why a code cannot be used: the text after "This code cannot be used: ".
pub fn code_refused(code: &str, why: &str) -> String {
    format!("Sorry, the code {code} cannot be used: {why}.")
}

/// The reasons of [`code_refused`].
pub const CODE_UNKNOWN: &str = "there is no such code";
pub const CODE_INACTIVE: &str = "it is no longer active";
pub const CODE_EXPIRED: &str = "it has expired";
pub const CODE_EXHAUSTED: &str = "it has been used up";
pub const CODE_USED_BY_YOU: &str = "you have used it already";
pub const CODE_NOT_FOR_PLAN: &str = "it is not valid for this plan";
pub const CODE_FIRST_PURCHASE: &str = "it is for a first purchase only";
pub const CODE_NO_PLAN: &str = "no plan on sale takes it";
pub const CODE_TAKEN: &str = "it is no longer available";

// ---- /subscriptions ----

/// Above the buyer's memberships.
pub const SUBSCRIPTIONS_HEADER: &str = "Your channels:";
/// When the buyer has none.
pub const SUBSCRIPTIONS_EMPTY: &str =
    "You have no channels yet. Send /start to see the channels you can join.";

/// One membership's line (its expiry as [`day`] shows it, or lifetime access).
pub fn membership_line(status: &str, expires_at: Expiry) -> String {
    let at = match expires_at {
        Expiry::At(t) => day(t),
        Expiry::Never if status == "expired" => return "Ended.".to_string(),
        Expiry::Never => return "Lifetime access: it never expires.".to_string(),
    };
    match status {
        "active" => format!("Active until {at}."),
        "grace" => format!("Expired on {at}; in a short grace period: renew to keep it."),
        _ => format!("Expired on {at}."),
    }
}

/// Under a membership with a live Stars subscription.
pub fn renews_automatically(renews_at: &str) -> String {
    format!("Renews automatically on {renews_at}.")
}

/// Under a membership whose Stars subscription was cancelled.
pub const RENEWAL_OFF: &str = "Renewal cancelled: it will not renew.";

/// The renew button of one membership.
pub fn renew_button(title: &str) -> String {
    format!("Renew: {title}")
}

/// The cancel-renewal button of one live Stars subscription.
pub fn cancel_renewal_button(title: &str) -> String {
    format!("Cancel renewal: {title}")
}

/// Sent once Telegram confirmed the cancellation of a Stars subscription.
pub fn subscription_cancelled(title: &str, access_until: Option<&str>) -> String {
    match access_until {
        Some(until) => format!(
            "Your subscription to «{title}» will not renew. Your access stays until {until}."
        ),
        None => format!("Your subscription to «{title}» will not renew."),
    }
}

// ---- what happened to a payment ----

/// A Stars payment we could not use and refund ourselves (the seat was taken, the order was
/// already paid, its invoice had expired).
pub fn payment_refunded(title: &str, price: &str, seat_taken: bool) -> String {
    if seat_taken {
        format!(
            "Sorry, the last seat of «{title}» was taken before your payment of {price} arrived. \
             Your stars will be refunded."
        )
    } else {
        format!(
            "We could not use your payment of {price} for «{title}» (the order was already paid \
             or its invoice had expired). Your stars will be refunded."
        )
    }
}

/// A payment we could not use and cannot refund ourselves (a card payment, or a Stars
/// payment that needs a human): staff review it.
pub fn payment_in_review(title: &str, price: &str, seat_taken: bool) -> String {
    if seat_taken {
        format!(
            "Sorry, the last seat of «{title}» was taken before your payment of {price} arrived. \
             We will review your payment and get back to you about a refund."
        )
    } else {
        format!(
            "We could not apply your payment of {price} for «{title}» automatically. \
             We will review it and get back to you."
        )
    }
}

/// A refused Stars subscription charge's notice ([`payment_refunded`] or
/// [`payment_in_review`]), followed by why the subscription could not go on (the refused
/// charge's reason code) and that it is cancelled, so Telegram will not charge it again.
pub fn with_subscription_stopped(notice: &str, reason: Option<Reason>) -> String {
    let why = match reason {
        Some(Reason::ChannelInactive) => {
            "The channel is not accepting subscriptions right now, so "
        }
        Some(Reason::NoSeat) => "The channel is full, so ",
        Some(Reason::HoldExpired) => "The invoice had expired, so ",
        Some(Reason::AlreadyPaid) => "You already have a subscription for this order, so ",
        Some(Reason::AlreadyLifetime) => "You already have lifetime access to this channel, so ",
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
            | Reason::HoldLimited,
        )
        | None => "So ",
        Some(Reason::PromoExhausted) => "The promo price is no longer available, so ",
    };
    format!(
        "{notice}\n\n{why}we cancelled this subscription: you will not be charged for it again."
    )
}

/// A payment that would buy nothing: the buyer already has lifetime access to the channel. It
/// is refunded (`refunded`: a Stars payment we refund) or reviewed by staff.
pub fn payment_already_lifetime(title: &str, price: &str, refunded: bool) -> String {
    let then = if refunded {
        "Your stars will be refunded."
    } else {
        "We will review it and get back to you about a refund."
    };
    format!(
        "You already have lifetime access to «{title}», so your payment of {price} was not \
         needed. {then}"
    )
}

/// A payment naming no order we know.
pub fn payment_unknown_order(price: &str) -> String {
    format!(
        "We received your payment of {price} but could not match it to an order. \
         We will review it and get back to you."
    )
}
