//! Pure rendering of the bot's messages, keyboards and button data, and Telegram's limits.
//!
//! Telegram refuses a message over 4096 characters, callback data over 64 bytes, an invoice
//! title over 32 or description over 255 characters, a callback answer over 200 characters.
//! Any of those refusals would turn a buyer's button press into silence, so every text that
//! carries something staff typed (a channel title or description, up to 255 and 1000
//! characters) goes through [`clip`], and lists take only as many entries as fit. Telegram
//! counts characters in UTF-16 code units, so that is what [`units`] counts (an emoji is two);
//! clipping never splits a character, never leaves a dangling joiner or modifier of an emoji
//! sequence, and marks the cut with `…`. Text is sent without a parse mode, so a title
//! containing `<`, `*` or `_` is shown as typed and cannot break a message.
//!
//! Button data is `<letter>:<id>` ([`Callback`]), at most 22 bytes; anything else a button
//! press carries is refused by [`Callback::parse`].
//!
//! One file per concern: the limits and clipping ([`text`]), prices and periods ([`prices`]),
//! button data ([`callback`]), commands and deep links ([`commands`]), the catalogue
//! ([`catalogue`](mod@catalogue)), `/subscriptions` ([`subscriptions`](mod@subscriptions)),
//! invoices ([`invoice`]) and the messages and webhook replies that carry them ([`message`]).

mod callback;
mod catalogue;
mod commands;
mod invoice;
mod message;
mod prices;
mod subscriptions;
#[cfg(test)]
mod tests;
mod text;

pub use self::{
    callback::Callback,
    catalogue::{Availability, OfferView, PlanView, catalogue, offer},
    commands::{Command, DeepLink, deep_link, deep_link_channel, parse_command},
    invoice::{invoice_description, invoice_title},
    message::{
        Rendered, access_ended, answer_callback, button, hold_limited_answer, language_choice,
        send_message, url_button, web_app_button,
    },
    prices::{period, price, term},
    subscriptions::{MembershipView, SubscriptionView, subscriptions},
    text::{
        BUTTON_MAX, CALLBACK_ANSWER_MAX, CALLBACK_DATA_MAX, INVOICE_DESCRIPTION_MAX,
        INVOICE_TITLE_MAX, MESSAGE_MAX, clip, one_line, title, units,
    },
};
