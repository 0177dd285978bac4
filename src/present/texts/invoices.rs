//! Invoices and payment links: a Stars invoice's description and label, the messages and
//! buttons of a Stars subscription link and of a card payment page.

use fluent_bundle::FluentValue;

use super::{Language, s};
use crate::present::locale::{say, say_with};

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

/// The line above the crypto assets offered for an order beside its other ways to pay.
pub fn crypto_choice(l: Language, title: &str) -> String {
    say_with(l, "crypto-choice", &[("title", s(title))])
}

/// The button that asks for an order's Crypto Pay invoice in one asset (`price`: `4.99 USDT`).
pub fn crypto_button(l: Language, price: &str) -> String {
    say_with(l, "crypto-button", &[("price", s(price))])
}

/// The message with an order's Crypto Pay invoice, open `valid_minutes`.
pub fn crypto_offer(l: Language, title: &str, price: &str, valid_minutes: i64) -> String {
    say_with(
        l,
        "crypto-offer",
        &[
            ("title", s(title)),
            ("price", s(price)),
            ("minutes", FluentValue::from(valid_minutes)),
        ],
    )
}

/// The URL button of a Crypto Pay invoice.
pub fn crypto_pay_button(l: Language, price: &str) -> String {
    say_with(l, "crypto-pay-button", &[("price", s(price))])
}

/// A crypto asset was chosen for an order that can no longer be paid as invoiced.
pub fn crypto_unavailable(l: Language) -> String {
    say(l, "crypto-unavailable", None)
}
