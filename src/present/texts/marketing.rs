//! Broadcasts and automations: the line on how to stop them, the answer to `/stop`, and their
//! buttons. (The texts themselves are the owner's: [`crate::present::patterns`].)

use super::{Language, s};
use crate::present::locale::{say, say_with};

/// The last line of every broadcast and automation.
pub fn stop_hint(l: Language) -> String {
    say(l, "marketing-stop-hint", None)
}

/// The answer to `/stop`.
pub fn marketing_stopped(l: Language) -> String {
    say(l, "marketing-stopped", None)
}

/// A broadcast's or an offer's buy button.
pub fn message_buy_button(l: Language, title: &str) -> String {
    say_with(l, "message-buy-button", &[("title", s(title))])
}

/// The button back to an order that can still be paid as invoiced.
pub fn message_pay_button(l: Language) -> String {
    say(l, "message-pay-button", None)
}
