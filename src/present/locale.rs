//! The languages the bot speaks and the message files it speaks them from.
//!
//! Every buyer-facing text is a message of a [Project Fluent](https://projectfluent.org) file,
//! one per language (`locales/<code>/bot.ftl`), embedded in the binary. Fluent is the format
//! Mozilla built for exactly this: a translator writes whole sentences with the grammar of their
//! language — plural forms chosen by CLDR's rules for the language (`fluent-bundle` with
//! `intl_pluralrules`), variants selected on a value — and the code only names a message and
//! passes its values. `fluent-syntax` reads the same files as a syntax tree, for the check
//! below.
//!
//! An operator may replace a language's file without rebuilding: `BOT_MESSAGES_DIR/<code>/bot.ftl`
//! is read at start-up instead of the shipped one. Every language's file — shipped or replaced —
//! is checked against the shipped English set ([`check`]): a message missing or unknown, or one
//! whose placeholders (`{ $name }`) differ from the English message's, stops start-up with one
//! line naming the file and the message. A unit test runs the same check over the shipped files.
//!
//! The catalogue is process-wide ([`install`], once, at start-up; until then, and in tests, the
//! shipped files with English as the default): the words are part of what the binary says, like
//! its shipped texts, and they are needed deep in code that has no configuration at hand (the
//! payment core's notices, the pre-checkout's refusals).
//!
//! Numbers in prices are formatted with ICU4X's locale data (`icu_decimal`: `99,00` in Ukrainian
//! and Russian, `99.00` in English); month names in dates come from the locale data `chrono`
//! carries (`unstable-locales`, the glibc locales); the date pattern itself is a message
//! (`date-time-format`), so each language writes dates the way its readers do
//! (`1 грудня 2026 р.`).

use std::{collections::HashMap, path::Path, sync::OnceLock};

use fluent_bundle::{FluentArgs, FluentResource, FluentValue, concurrent::FluentBundle};
use fluent_syntax::ast;

crate::text_enum! {
    /// A language the bot speaks (its spelling is the `subscribers.language` value).
    #[derive(PartialOrd, Ord)]
    pub enum Language {
        /// English, the shipped default.
        En => "en",
        /// Ukrainian.
        Uk => "uk",
        /// Russian.
        Ru => "ru",
    }
}

impl Language {
    /// The language of Telegram's `language_code` (an IETF tag such as `uk` or `ru-RU`): its
    /// first subtag, in any case; `None` when the bot does not speak it.
    pub fn of_tag(tag: &str) -> Option<Language> {
        let first = tag.split(['-', '_']).next().unwrap_or_default();
        Language::parse(&first.to_ascii_lowercase())
    }

    /// The language to speak to a buyer: the one remembered for them, else the one their
    /// Telegram app uses (if the bot speaks it), else the configured default.
    pub fn choose(remembered: Option<Language>, telegram: Option<&str>) -> Language {
        remembered
            .or_else(|| telegram.and_then(Language::of_tag))
            .unwrap_or_else(default_language)
    }

    /// The language's own name, as a buyer choosing it reads it.
    pub fn own_name(self) -> &'static str {
        match self {
            Language::En => "English",
            Language::Uk => "Українська",
            Language::Ru => "Русский",
        }
    }

    fn shipped(self) -> &'static str {
        match self {
            Language::En => include_str!("../../locales/en/bot.ftl"),
            Language::Uk => include_str!("../../locales/uk/bot.ftl"),
            Language::Ru => include_str!("../../locales/ru/bot.ftl"),
        }
    }

    /// The locale of `chrono`'s month names.
    pub(super) fn chrono_locale(self) -> chrono::Locale {
        match self {
            Language::En => chrono::Locale::en_US,
            Language::Uk => chrono::Locale::uk_UA,
            Language::Ru => chrono::Locale::ru_RU,
        }
    }

    /// The locale of ICU4X's number formats.
    pub(super) fn icu_locale(self) -> icu_locale_core::Locale {
        match self {
            Language::En => icu_locale_core::locale!("en"),
            Language::Uk => icu_locale_core::locale!("uk"),
            Language::Ru => icu_locale_core::locale!("ru"),
        }
    }
}

/// Every language's messages, and the language spoken when nothing says which.
pub struct Catalogue {
    bundles: HashMap<Language, FluentBundle<FluentResource>>,
    default: Language,
}

static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();

/// Loads and checks the messages (a language's file in `dir`, when there is one, instead of the
/// shipped one) and makes them, with `default`, the ones the bot speaks. Call it once, at
/// start-up, before anything is said; an error is one line naming the file and the message.
pub fn install(dir: Option<&Path>, default: Language) -> Result<(), String> {
    let catalogue = Catalogue::load(dir, default)?;
    CATALOGUE
        .set(catalogue)
        .map_err(|_| "the bot's messages were installed twice".to_string())
}

fn catalogue() -> &'static Catalogue {
    CATALOGUE.get_or_init(|| {
        Catalogue::load(None, Language::En)
            .expect("the shipped messages pass their check (a unit test runs it)")
    })
}

/// The language spoken to a buyer nothing else says anything about (`BOT_DEFAULT_LANGUAGE`).
pub fn default_language() -> Language {
    catalogue().default
}

/// Message `id` of `lang` with `args` filled in. The check at start-up guarantees the message
/// and its placeholders exist; should formatting still report an error, it is logged and the
/// text formatted so far is used.
pub fn say(lang: Language, id: &str, args: Option<&FluentArgs<'_>>) -> String {
    let bundle = &catalogue().bundles[&lang];
    let Some(pattern) = bundle.get_message(id).and_then(|m| m.value()) else {
        tracing::error!(language = %lang, id, "bot message missing");
        return id.to_string();
    };
    let mut errors = Vec::new();
    let text = bundle.format_pattern(pattern, args, &mut errors);
    if !errors.is_empty() {
        tracing::error!(language = %lang, id, ?errors, "bot message formatted with errors");
    }
    text.into_owned()
}

/// [`say`] with the values as name–value pairs.
pub fn say_with(lang: Language, id: &str, args: &[(&str, FluentValue<'_>)]) -> String {
    let mut a = FluentArgs::new();
    for (name, value) in args {
        a.set(*name, value.clone());
    }
    say(lang, id, Some(&a))
}

/// The file name a language's messages are read from, under the shipped `locales/` or
/// `BOT_MESSAGES_DIR`.
pub const FILE: &str = "bot.ftl";

impl Catalogue {
    fn load(dir: Option<&Path>, default: Language) -> Result<Catalogue, String> {
        let reference = english_set();
        if let Some(dir) = dir {
            let entries = std::fs::read_dir(dir)
                .map_err(|e| format!("BOT_MESSAGES_DIR {}: {e}", dir.display()))?;
            for entry in entries {
                let entry =
                    entry.map_err(|e| format!("BOT_MESSAGES_DIR {}: {e}", dir.display()))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.path().is_dir() && Language::parse(&name).is_none() {
                    return Err(format!(
                        "{}: the bot speaks no language {name:?} (it speaks en, uk, ru)",
                        entry.path().display()
                    ));
                }
            }
        }
        let mut bundles = HashMap::new();
        for lang in Language::ALL {
            let replaced = dir
                .map(|d| d.join(lang.as_str()).join(FILE))
                .filter(|p| p.exists());
            let (file, source) = match &replaced {
                Some(path) => (
                    path.display().to_string(),
                    std::fs::read_to_string(path)
                        .map_err(|e| format!("{}: {e}", path.display()))?,
                ),
                None => (
                    format!("locales/{}/{FILE}", lang.as_str()),
                    lang.shipped().to_string(),
                ),
            };
            check(&file, &source, &reference)?;
            let resource = FluentResource::try_new(source)
                .map_err(|_| format!("{file}: not a Fluent file"))?;
            let mut bundle = FluentBundle::new_concurrent(vec![
                lang.as_str()
                    .parse()
                    .expect("a language code is a language identifier"),
            ]);
            // Plain text: no Unicode isolation marks around values (Telegram shows text as sent).
            bundle.set_use_isolating(false);
            bundle
                .add_resource(resource)
                .map_err(|e| format!("{file}: {:?}", e.first()))?;
            bundles.insert(lang, bundle);
        }
        Ok(Catalogue { bundles, default })
    }
}

/// A file's messages: id → the names of the placeholders it uses (sorted).
type Messages = HashMap<String, Vec<String>>;

/// The messages of `source`, or the first syntax error, as `file:line: …`.
fn messages(file: &str, source: &str) -> Result<Messages, String> {
    let resource = match fluent_syntax::parser::parse(source) {
        Ok(r) => r,
        Err((_, errors)) => {
            let e = &errors[0];
            let line = source[..e.pos.start.min(source.len())]
                .matches('\n')
                .count()
                + 1;
            return Err(format!("{file}:{line}: not valid Fluent ({:?})", e.kind));
        }
    };
    let mut out = Messages::new();
    for entry in &resource.body {
        if let ast::Entry::Message(m) = entry {
            let id = m.id.name.to_string();
            let Some(value) = &m.value else {
                return Err(format!("{file}: message {id} has no text"));
            };
            let mut vars = Vec::new();
            pattern_vars(value, &mut vars);
            vars.sort();
            vars.dedup();
            if out.insert(id.clone(), vars).is_some() {
                return Err(format!("{file}: message {id} is written twice"));
            }
        }
    }
    Ok(out)
}

pub(super) fn pattern_vars(p: &ast::Pattern<&str>, out: &mut Vec<String>) {
    for element in &p.elements {
        if let ast::PatternElement::Placeable { expression } = element {
            expression_vars(expression, out);
        }
    }
}

fn expression_vars(e: &ast::Expression<&str>, out: &mut Vec<String>) {
    match e {
        ast::Expression::Select { selector, variants } => {
            inline_vars(selector, out);
            for v in variants {
                pattern_vars(&v.value, out);
            }
        }
        ast::Expression::Inline(i) => inline_vars(i, out),
    }
}

fn inline_vars(i: &ast::InlineExpression<&str>, out: &mut Vec<String>) {
    match i {
        ast::InlineExpression::VariableReference { id } => out.push(id.name.to_string()),
        ast::InlineExpression::FunctionReference { arguments, .. } => {
            for a in &arguments.positional {
                inline_vars(a, out);
            }
            for a in &arguments.named {
                inline_vars(&a.value, out);
            }
        }
        ast::InlineExpression::Placeable { expression } => expression_vars(expression, out),
        _ => {}
    }
}

/// Checks the messages of `file` against the English set: the same ids, each with the same
/// placeholders, and a date pattern `chrono` can use. The error is one line naming the file and
/// the message.
fn check(file: &str, source: &str, reference: &Messages) -> Result<(), String> {
    let found = messages(file, source)?;
    let mut ids: Vec<&String> = reference.keys().chain(found.keys()).collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        match (reference.get(id), found.get(id)) {
            (Some(_), None) => return Err(format!("{file}: message {id} is missing")),
            (None, Some(_)) => {
                return Err(format!("{file}: message {id} is not one the bot uses"));
            }
            (Some(want), Some(got)) if want != got => {
                let show = |v: &Vec<String>| {
                    v.iter()
                        .map(|n| format!("${n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(format!(
                    "{file}: message {id} uses placeholders [{}], English uses [{}]",
                    show(got),
                    show(want)
                ));
            }
            _ => {}
        }
    }
    let resource = FluentResource::try_new(source.to_string())
        .map_err(|_| format!("{file}: not a Fluent file"))?;
    let mut bundle = FluentBundle::new_concurrent(vec![unic_langid::langid!("en")]);
    bundle.set_use_isolating(false);
    let _ = bundle.add_resource(resource);
    if let Some(p) = bundle.get_message(DATE_FORMAT).and_then(|m| m.value()) {
        let pattern = bundle.format_pattern(p, None, &mut Vec::new());
        if chrono::format::StrftimeItems::new(&pattern)
            .any(|i| matches!(i, chrono::format::Item::Error))
        {
            return Err(format!(
                "{file}: message {DATE_FORMAT} is not a date pattern chrono understands"
            ));
        }
    }
    Ok(())
}

/// The message holding a language's date pattern (`chrono`'s strftime syntax).
pub const DATE_FORMAT: &str = "date-time-format";

/// The shipped English set: the ids and placeholders every language must have.
fn english_set() -> Messages {
    messages("locales/en/bot.ftl", Language::En.shipped()).expect("the shipped English file reads")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_files_pass_the_start_up_check() {
        let reference = english_set();
        assert!(reference.len() > 50, "{}", reference.len());
        for lang in Language::ALL {
            check(
                &format!("locales/{lang}/bot.ftl"),
                lang.shipped(),
                &reference,
            )
            .unwrap();
        }
        Catalogue::load(None, Language::Uk).unwrap();
    }

    #[test]
    fn the_check_names_the_file_and_the_message() {
        let reference = english_set();
        let uk = Language::Uk.shipped();
        let missing: String = uk
            .lines()
            .filter(|l| !l.starts_with("catalogue-header"))
            .collect::<Vec<_>>()
            .join("\n");
        let e = check("uk/bot.ftl", &missing, &reference).unwrap_err();
        assert!(e.starts_with("uk/bot.ftl: message "), "{e}");
        let unknown = format!("{uk}\nno-such-message = Привіт\n");
        assert_eq!(
            check("uk/bot.ftl", &unknown, &reference).unwrap_err(),
            "uk/bot.ftl: message no-such-message is not one the bot uses"
        );
        let renamed = uk.replace("{ $title }", "{ $name }");
        let e = check("uk/bot.ftl", &renamed, &reference).unwrap_err();
        assert!(
            e.contains("uses placeholders [") && e.contains("$name"),
            "{e}"
        );
        let broken = format!("{uk}\nbroken = {{ $x\n");
        let e = check("uk/bot.ftl", &broken, &reference).unwrap_err();
        assert!(e.starts_with("uk/bot.ftl:"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    #[test]
    fn an_override_directory_replaces_a_language_and_is_checked() {
        let dir = std::env::temp_dir().join(format!("subgate-messages-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("uk")).unwrap();
        let changed = Language::Uk.shipped().replace(
            "Ось канали та групи, до яких можна приєднатися:",
            "Наші канали:",
        );
        std::fs::write(dir.join("uk").join(FILE), &changed).unwrap();
        let c = Catalogue::load(Some(&dir), Language::En).unwrap();
        let header = c.bundles[&Language::Uk]
            .get_message("catalogue-header")
            .and_then(|m| m.value())
            .map(|p| {
                c.bundles[&Language::Uk]
                    .format_pattern(p, None, &mut Vec::new())
                    .into_owned()
            });
        assert_eq!(header.as_deref(), Some("Наші канали:"));
        std::fs::write(
            dir.join("uk").join(FILE),
            changed.replace("{ $title }", "{ $t }"),
        )
        .unwrap();
        let e = Catalogue::load(Some(&dir), Language::En).err().unwrap();
        assert!(e.contains("uk/bot.ftl: message "), "{e}");
        std::fs::create_dir_all(dir.join("de")).unwrap();
        std::fs::write(dir.join("uk").join(FILE), &changed).unwrap();
        let e = Catalogue::load(Some(&dir), Language::En).err().unwrap();
        assert!(e.contains("no language \"de\""), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every message of every language, each placeholder at a long value (a number where the
    /// message selects on it), says something whole within a Telegram message.
    #[test]
    fn every_message_renders_whole_in_every_language() {
        let long = "🔥".repeat(300);
        for lang in Language::ALL {
            for (id, vars) in english_set() {
                let mut args = FluentArgs::new();
                for v in &vars {
                    match v.as_str() {
                        "days" | "minutes" | "count" | "id" | "percent" => {
                            args.set(v.as_str(), FluentValue::from(3661))
                        }
                        _ => args.set(v.as_str(), FluentValue::from(long.as_str())),
                    }
                }
                let text = say(lang, &id, Some(&args));
                assert!(!text.trim().is_empty(), "{lang} {id}");
                assert!(
                    !text.contains("{$") && !text.contains('{'),
                    "{lang} {id}: {text}"
                );
                assert!(text.encode_utf16().count() <= 4096, "{lang} {id}");
            }
        }
    }

    #[test]
    fn languages_come_from_the_first_subtag_and_fall_back() {
        assert_eq!(Language::of_tag("uk"), Some(Language::Uk));
        assert_eq!(Language::of_tag("ru-RU"), Some(Language::Ru));
        assert_eq!(Language::of_tag("EN-gb"), Some(Language::En));
        assert_eq!(Language::of_tag("de"), None);
        assert_eq!(Language::of_tag(""), None);
        assert_eq!(
            Language::choose(Some(Language::Ru), Some("uk")),
            Language::Ru
        );
        assert_eq!(Language::choose(None, Some("uk-UA")), Language::Uk);
        assert_eq!(Language::choose(None, Some("pl")), default_language());
        assert_eq!(Language::choose(None, None), default_language());
    }
}
