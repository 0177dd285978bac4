//! An invoice's title and description, within Telegram's 32 and 255 characters.

use super::{
    prices::term,
    text::{INVOICE_DESCRIPTION_MAX, INVOICE_TITLE_MAX, clip, title},
};
use crate::present::texts::{self, Language};

/// An invoice's title: the plan's title (the channel's, for its default plan) on one line,
/// within Telegram's 32 characters.
pub fn invoice_title(l: Language, plan_title: &str, channel_id: i32) -> String {
    clip(&title(l, plan_title, channel_id), INVOICE_TITLE_MAX)
}

/// An invoice's description: the plan's description (the channel's, for its default plan), or
/// a default naming the period (`None`: lifetime) and what it gives access to, within
/// Telegram's 255 characters and never empty.
pub fn invoice_description(
    l: Language,
    description: Option<&str>,
    plan_title: &str,
    channel_id: i32,
    days: Option<i32>,
) -> String {
    let text = match description.map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => d.to_string(),
        None => texts::invoice_description(
            l,
            &clip(&title(l, plan_title, channel_id), 200),
            term(l, days).as_deref(),
        ),
    };
    clip(&text, INVOICE_DESCRIPTION_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::present::render::units;

    const EN: Language = Language::En;

    #[test]
    fn titles_are_one_line_and_never_empty() {
        assert_eq!(title(EN, "  My\nchannel\t\u{7}x  ", 3), "My channel x");
        assert_eq!(title(EN, " \n\t ", 3), "Channel 3");
        assert_eq!(title(EN, "🔥🔥🔥", 3), "🔥🔥🔥");
        let emoji_only = "👨\u{200D}👩\u{200D}👧".repeat(20);
        let t = invoice_title(EN, &emoji_only, 9);
        assert!(units(&t) <= INVOICE_TITLE_MAX && !t.is_empty(), "{t}");
        assert!(!t.ends_with('\u{200D}'));
        assert_eq!(invoice_title(EN, "   ", 9), "Channel 9");
    }

    #[test]
    fn invoice_descriptions_are_never_empty_and_fit() {
        let d = invoice_description(EN, None, "Title", 1, Some(30));
        assert_eq!(d, "30 days of access to «Title».");
        assert_eq!(
            invoice_description(EN, Some("  "), "T", 1, Some(1)),
            "1 day of access to «T»."
        );
        assert_eq!(
            invoice_description(EN, None, "T", 1, None),
            "Lifetime access to «T»."
        );
        let long = "é".repeat(1000);
        assert!(
            units(&invoice_description(EN, Some(&long), "T", 1, Some(30)))
                <= INVOICE_DESCRIPTION_MAX
        );
        let long_title = "🔥".repeat(255);
        assert!(
            units(&invoice_description(EN, None, &long_title, 1, None)) <= INVOICE_DESCRIPTION_MAX
        );
    }
}
