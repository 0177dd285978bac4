//! Text as Telegram counts and shows it: the limits it enforces, lengths in UTF-16 code units
//! ([`units`]), clipping that never splits a character or an emoji sequence ([`clip`]), and
//! staff-typed names brought onto one line ([`one_line`], [`title`]).

use crate::present::texts::{self, Language};

/// Longest message text.
pub const MESSAGE_MAX: usize = 4096;
/// Longest callback data, in bytes.
pub const CALLBACK_DATA_MAX: usize = 64;
/// Longest invoice title.
pub const INVOICE_TITLE_MAX: usize = 32;
/// Longest invoice description.
pub const INVOICE_DESCRIPTION_MAX: usize = 255;
/// Longest callback answer (the notification or alert text).
pub const CALLBACK_ANSWER_MAX: usize = 200;
/// Longest button text we make (Telegram cuts longer ones on screen anyway).
pub const BUTTON_MAX: usize = 60;
/// A channel title in a list or a button.
pub(super) const TITLE_IN_LIST_MAX: usize = 80;

/// Length as Telegram counts it: UTF-16 code units.
pub fn units(s: &str) -> usize {
    s.encode_utf16().count()
}

/// True for characters that only modify the one before them: a cut must not leave one
/// dangling at the end, nor end right after a zero-width joiner.
fn is_modifier(c: char) -> bool {
    matches!(c,
        '\u{200D}'                 // zero-width joiner (emoji sequences)
        | '\u{FE00}'..='\u{FE0F}'  // variation selectors
        | '\u{1F3FB}'..='\u{1F3FF}' // skin tones
        | '\u{0300}'..='\u{036F}'  // combining diacritics
        | '\u{20D0}'..='\u{20FF}'  // combining marks for symbols (keycaps)
        | '\u{E0020}'..='\u{E007F}' // tag characters (flag sequences)
    )
}

/// `s` cut to at most `max` UTF-16 units, with `…` at the cut. Never splits a character; drops
/// a trailing joiner or modifier together with the emoji sequence it would have continued.
pub fn clip(s: &str, max: usize) -> String {
    if units(s) <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        if used + c.len_utf16() > max - 1 {
            break;
        }
        used += c.len_utf16();
        out.push(c);
    }
    // The cut may fall inside an emoji sequence (base, modifiers, joiner, next base, …):
    // when the next character still belongs to it, or what is kept ends in a joiner, drop the
    // whole cut sequence rather than show half of it.
    let next_is_modifier = s[out.len()..].chars().next().is_some_and(is_modifier);
    if next_is_modifier || out.ends_with('\u{200D}') {
        loop {
            while out.ends_with(is_modifier) {
                out.pop();
            }
            out.pop();
            if !out.ends_with('\u{200D}') {
                break;
            }
        }
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('…');
    out
}

/// Text on one line: line breaks, tabs and other control characters become spaces, runs of
/// spaces one space, no space at either end.
pub fn one_line(s: &str) -> String {
    s.split(|c: char| c.is_control() || c.is_whitespace())
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A channel's title for buyers: on one line, or `Channel <id>` when nothing printable is left
/// (a title of only spaces or control characters).
pub fn title(l: Language, title: &str, channel_id: i32) -> String {
    let line = one_line(title);
    if line.is_empty() {
        texts::channel_fallback(l, channel_id)
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_counts_utf16_and_never_splits_an_emoji_sequence() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("abcdef", 4), "abc…");
        // 🔥 is two units: four of them are eight.
        assert_eq!(units("🔥🔥🔥🔥"), 8);
        assert_eq!(clip("🔥🔥🔥🔥", 8), "🔥🔥🔥🔥");
        assert_eq!(clip("🔥🔥🔥🔥", 7), "🔥🔥🔥…");
        assert_eq!(clip("🔥🔥🔥🔥", 6), "🔥🔥…");
        // A family (man ZWJ woman ZWJ girl) cut in the middle is dropped whole.
        let family = "ab👨\u{200D}👩\u{200D}👧";
        for max in 3..units(family) {
            let c = clip(family, max);
            assert!(units(&c) <= max, "{max}: {c}");
            assert!(!c.contains('\u{200D}'), "{max}: {c:?}");
        }
        // A skin tone is never left without its hand, nor a hand cut from its tone.
        let wave = "x👋🏽y";
        let c = clip(wave, 4);
        assert!(units(&c) <= 4 && !c.contains('\u{1F3FD}'), "{c:?}");
        assert_eq!(clip("x👋🏽yz", 6), "x👋🏽…", "a whole sequence is kept");
        assert_eq!(clip("", 5), "");
        assert_eq!(clip("abc", 0), "");
    }
}
