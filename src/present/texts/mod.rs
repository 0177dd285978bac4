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
//!
//! One file per occasion: [`formats`] shared by all, then [`catalogue`], [`answers`] to buttons,
//! [`invoices`] and payment links, [`checkout`] refusals, [`access`] given and ended,
//! [`subscriptions`], promo [`codes`], [`payments`] the service could not use, [`language`] and
//! the [`marketing`] messages' own lines, and the buyer's own [`referrals`] link.

use fluent_bundle::FluentValue;

pub use super::locale::Language;

mod access;
mod answers;
mod catalogue;
mod checkout;
mod codes;
mod formats;
mod invoices;
mod language;
mod marketing;
mod payments;
mod referrals;
mod subscriptions;

pub use self::{
    access::*, answers::*, catalogue::*, checkout::*, codes::*, formats::*, invoices::*,
    language::*, marketing::*, payments::*, referrals::*, subscriptions::*,
};

/// A text value for a message's variables.
fn s(v: &str) -> FluentValue<'_> {
    FluentValue::from(v)
}
