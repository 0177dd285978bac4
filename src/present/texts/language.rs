//! `/language`: the choice and its confirmation.

use super::Language;
use crate::present::locale::say;

/// Above the language buttons.
pub fn language_choose(l: Language) -> String {
    say(l, "language-choose", None)
}

/// The buyer chose `l`: said in `l`.
pub fn language_chosen(l: Language) -> String {
    say(l, "language-chosen", None)
}
