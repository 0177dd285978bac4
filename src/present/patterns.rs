//! The owner's own texts — a broadcast's, an automation's — one Project Fluent pattern per
//! language, with the buyer's values as placeholders: `{ $name }` (the buyer's name),
//! `{ $channel }` (the channel's title in the buyer's language), `{ $expires }` (the day their
//! access ends or ended), `{ $code }` (a promo code made for them) and `{ $price }` (the
//! price of what the button buys, after the code). A literal brace is written as Fluent
//! writes it, `{ "{" }`.
//!
//! [`check`] is what the staff API runs on every text it stores: it must parse as one Fluent
//! pattern, use only the placeholders above and refer to no other message; [`render`] fills a
//! stored one in for one buyer. The owner writes plain text: what a line would mean to Fluent
//! beyond text (its indentation, which Fluent drops; a first `[`, `*` or `.`, which Fluent reads
//! as a variant or an attribute — a bulleted list) is escaped before parsing, so every line
//! reads as written. (So Fluent's selectors are not available: a line starting with `[` is
//! text.)

use fluent_bundle::{FluentArgs, FluentResource, FluentValue, concurrent::FluentBundle};
use fluent_syntax::ast;

use super::locale::{Language, pattern_vars};

/// The placeholders an owner's text may use.
pub const PLACEHOLDERS: [&str; 5] = ["name", "channel", "expires", "code", "price"];

/// The longest text an owner may write (characters): room is left within Telegram's 4,096 for
/// the line on how to stop these messages and the values filled in.
pub const PATTERN_MAX: usize = 3500;

/// The values of one buyer's message (absent ones read as empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Values {
    pub name: String,
    pub channel: String,
    pub expires: String,
    pub code: String,
    pub price: String,
}

/// The message id the pattern is parsed under.
const ID: &str = "owner-text";

/// The Fluent source of a one-message resource whose value is `pattern`: continuation lines
/// indented, and a line starting with a character Fluent reads as syntax there escaped as a
/// string literal.
fn source(pattern: &str) -> String {
    let mut out = format!("{ID} =");
    for (i, line) in pattern.lines().enumerate() {
        let line = line.trim_end();
        if i == 0 {
            out.push(' ');
            out.push_str(line);
            continue;
        }
        out.push_str("\n    ");
        let trimmed = line.trim_start();
        // Fluent drops a line's indentation and reads `[`, `*` and `.` there as syntax: both
        // are kept as text by string literals.
        let indent = &line[..line.len() - trimmed.len()];
        if !indent.is_empty() && !trimmed.is_empty() {
            out.push_str(&format!("{{\"{indent}\"}}"));
        }
        match trimmed.chars().next() {
            Some(c @ ('[' | '*' | '.')) => {
                out.push_str(&format!("{{\"{c}\"}}"));
                out.push_str(&trimmed[1..]);
            }
            _ => out.push_str(trimmed),
        }
    }
    out.push('\n');
    out
}

/// Why `pattern` cannot be stored, if it cannot: empty, too long, not a Fluent pattern, an
/// unknown placeholder, or a reference to another message. Returns the placeholders it uses.
pub fn check(pattern: &str) -> Result<Vec<String>, String> {
    if pattern.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if pattern.chars().count() > PATTERN_MAX {
        return Err(format!("longer than {PATTERN_MAX} characters"));
    }
    let source = source(pattern);
    let resource = fluent_syntax::parser::parse(source.as_str()).map_err(|(_, errors)| {
        format!(
            "not a valid Fluent pattern ({:?}); write a literal brace as {{\"{{\"}}",
            errors[0].kind
        )
    })?;
    let [ast::Entry::Message(m)] = resource.body.as_slice() else {
        return Err("not a valid Fluent pattern (it reads as more than one message)".into());
    };
    let Some(value) = &m.value else {
        return Err("must not be empty".into());
    };
    let mut vars = Vec::new();
    pattern_vars(value, &mut vars);
    vars.sort();
    vars.dedup();
    if let Some(unknown) = vars.iter().find(|v| !PLACEHOLDERS.contains(&v.as_str())) {
        return Err(format!(
            "unknown placeholder {{ ${unknown} }}: use {}",
            PLACEHOLDERS.map(|p| format!("{{ ${p} }}")).join(", ")
        ));
    }
    // Formatting with every value set finds references to messages and terms that do not exist.
    let mut errors = Vec::new();
    format(Language::En, &source, &sample(), &mut errors);
    if !errors.is_empty() {
        return Err("refers to another message or term; use only the placeholders".into());
    }
    Ok(vars)
}

fn sample() -> Values {
    Values {
        name: "Ann".into(),
        channel: "Channel".into(),
        expires: "1 January".into(),
        code: "CODE".into(),
        price: "1 XTR".into(),
    }
}

/// `pattern` (one [`check`] accepted) filled in with `values` for a buyer speaking `l`.
pub fn render(l: Language, pattern: &str, values: &Values) -> String {
    let mut errors = Vec::new();
    let text = format(l, &source(pattern), values, &mut errors);
    if !errors.is_empty() {
        tracing::warn!(?errors, "an owner's text formatted with errors");
    }
    text
}

fn format(l: Language, source: &str, values: &Values, errors: &mut Vec<String>) -> String {
    let Ok(resource) = FluentResource::try_new(source.to_string()) else {
        errors.push("not a Fluent pattern".into());
        return String::new();
    };
    let mut bundle = FluentBundle::new_concurrent(vec![
        l.as_str()
            .parse()
            .expect("a language code is a language identifier"),
    ]);
    bundle.set_use_isolating(false);
    if bundle.add_resource(resource).is_err() {
        errors.push("not a Fluent pattern".into());
        return String::new();
    }
    let Some(pattern) = bundle.get_message(ID).and_then(|m| m.value()) else {
        errors.push("empty".into());
        return String::new();
    };
    let mut args = FluentArgs::new();
    for (name, value) in [
        ("name", &values.name),
        ("channel", &values.channel),
        ("expires", &values.expires),
        ("code", &values.code),
        ("price", &values.price),
    ] {
        args.set(name, FluentValue::from(value.as_str()));
    }
    let mut found = Vec::new();
    let text = bundle.format_pattern(pattern, Some(&args), &mut found);
    errors.extend(found.iter().map(|e| e.to_string()));
    text.into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann() -> Values {
        Values {
            name: "Ann".into(),
            channel: "Crypto signals".into(),
            expires: "5 May".into(),
            code: "BACK-7Q".into(),
            price: "90 ⭐".into(),
        }
    }

    #[test]
    fn placeholders_are_filled_in() {
        let p = "Hi { $name }! «{ $channel }» ended on { $expires }.\nCode { $code }: { $price }";
        assert_eq!(
            check(p).unwrap(),
            ["channel", "code", "expires", "name", "price"]
        );
        assert_eq!(
            render(Language::Uk, p, &ann()),
            "Hi Ann! «Crypto signals» ended on 5 May.\nCode BACK-7Q: 90 ⭐"
        );
    }

    #[test]
    fn plain_text_reads_as_written() {
        let p = "News:\n\n* one\n  [two]\n\t.three\nend { $name }";
        check(p).unwrap();
        assert_eq!(
            render(Language::En, p, &ann()),
            "News:\n\n* one\n  [two]\n\t.three\nend Ann"
        );
        let p = "News:\n\n* one\n  [two]\n.three\nend";
        check(p).unwrap();
        assert_eq!(render(Language::En, p, &ann()), p);
    }

    #[test]
    fn bad_texts_are_refused_with_a_reason() {
        assert!(
            check("Hi { $nmae }")
                .unwrap_err()
                .contains("unknown placeholder { $nmae }")
        );
        assert!(
            check("Hi {")
                .unwrap_err()
                .contains("not a valid Fluent pattern")
        );
        assert!(
            check("Hi { other-message }")
                .unwrap_err()
                .contains("refers to")
        );
        assert!(check("Hi { -brand }").unwrap_err().contains("refers to"));
        assert_eq!(check("  \n ").unwrap_err(), "must not be empty");
        assert!(
            check(&"x".repeat(PATTERN_MAX + 1))
                .unwrap_err()
                .contains("longer")
        );
        assert!(check("a\nb = c").is_ok(), "a continuation line is text");
    }
}
