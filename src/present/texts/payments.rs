//! What happened to a payment the service could not use: refunded, in review, or stopping the
//! Stars subscription it came from.

use super::{Language, s};
use crate::{
    common::vocabulary::Reason,
    present::locale::{say, say_with},
};

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
            | Reason::RefundedByStaff
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

/// The link to a payment's fiscal receipt (`title` the plan's, `price` the payment's), once
/// Checkbox has registered it.
pub fn fiscal_receipt_sale(l: Language, title: &str, price: &str, url: &str) -> String {
    say_with(
        l,
        "fiscal-receipt-sale",
        &[("title", s(title)), ("price", s(price)), ("url", s(url))],
    )
}

/// The link to the fiscal receipt of a payment's refund (its return receipt).
pub fn fiscal_receipt_return(l: Language, title: &str, price: &str, url: &str) -> String {
    say_with(
        l,
        "fiscal-receipt-return",
        &[("title", s(title)), ("price", s(price)), ("url", s(url))],
    )
}
