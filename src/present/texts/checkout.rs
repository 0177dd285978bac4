//! Telegram's payment form: why a pre-checkout is refused (at most 100 characters).

use super::{Language, s};
use crate::{
    common::vocabulary::Reason,
    present::locale::{say, say_with},
};

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
        | Reason::DisputeWon
        | Reason::RefundedByStaff => "pre-checkout-busy",
    };
    say(l, id, None)
}

/// A pre-checkout refused by the buyer's hold rules, with when they may try again
/// ([`not_before`](super::not_before)).
pub fn pre_checkout_hold_limited(l: Language, when: &str) -> String {
    say_with(l, "pre-checkout-hold-limited-until", &[("when", s(when))])
}
