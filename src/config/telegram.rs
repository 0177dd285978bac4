//! Telegram's settings: door 3's secret, the Bot API client, the bot's username and its words.

use std::path::PathBuf;

use super::{
    ConfigError, Secret,
    vars::{Vars, err},
};
use crate::present::locale::Language;

/// `TELEGRAM_WEBHOOK_SECRET` (door 3), `TELEGRAM_BOT_TOKEN`, `TELEGRAM_API_URL`,
/// `TELEGRAM_DRY_RUN` (the effects worker), `TELEGRAM_BOT_USERNAME` (deep links),
/// `BOT_DEFAULT_LANGUAGE` and `BOT_MESSAGES_DIR` (the bot's words).
pub(super) struct Telegram {
    pub(super) webhook_secret: Option<Secret>,
    pub(super) bot_token: Option<Secret>,
    pub(super) api_url: String,
    pub(super) dry_run: bool,
    pub(super) bot_username: Option<String>,
    pub(super) default_language: Language,
    pub(super) messages_dir: Option<PathBuf>,
    pub(super) mini_app_max_age_secs: i64,
    pub(super) door_query_secs: i64,
    pub(super) door_answer: std::time::Duration,
}

impl Telegram {
    pub(super) fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let webhook_secret = vars.checked(
            "TELEGRAM_WEBHOOK_SECRET",
            |s| {
                (16..=256).contains(&s.len())
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            },
            "TELEGRAM_WEBHOOK_SECRET must be 16..256 characters of A-Z a-z 0-9 _ -",
        )?;
        let bot_token = vars.checked(
            "TELEGRAM_BOT_TOKEN",
            |t| {
                t.split_once(':').is_some_and(|(id, rest)| {
                    !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && rest.len() >= 20
                })
            },
            "TELEGRAM_BOT_TOKEN must look like <bot id>:<secret> (from @BotFather)",
        )?;
        let api_url = vars
            .get("TELEGRAM_API_URL")
            .unwrap_or_else(|| "https://api.telegram.org".to_string())
            .trim_end_matches('/')
            .to_string();
        if url::Url::parse(&api_url).is_err() {
            return Err(err("TELEGRAM_API_URL must be an absolute URL"));
        }
        // Telegram usernames are 5 to 32 characters of letters, digits and underscores; the
        // `@` people write in front is not part of it.
        let bot_username = vars
            .checked(
                "TELEGRAM_BOT_USERNAME",
                |u| {
                    let u = u.trim().trim_start_matches('@');
                    (5..=32).contains(&u.len())
                        && u.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                },
                "TELEGRAM_BOT_USERNAME must be the bot's username: 5..32 characters of A-Z a-z 0-9 _",
            )?
            .map(|u| u.trim().trim_start_matches('@').to_string());
        Ok(Telegram {
            webhook_secret: webhook_secret.map(Secret),
            bot_token: bot_token.map(Secret),
            api_url,
            dry_run: vars.flag("TELEGRAM_DRY_RUN")?,
            bot_username,
            default_language: match vars.get("BOT_DEFAULT_LANGUAGE") {
                None => Language::En,
                Some(code) => Language::parse(code.trim()).ok_or_else(|| {
                    err(format!(
                        "BOT_DEFAULT_LANGUAGE must be {}",
                        Language::spellings()
                    ))
                })?,
            },
            messages_dir: vars.get("BOT_MESSAGES_DIR").map(PathBuf::from),
            mini_app_max_age_secs: vars.int("MINI_APP_MAX_AGE_SECS", 86_400, 60, 604_800)? as i64,
            door_query_secs: vars.int("DOOR_QUERY_SECS", 3_600, 60, 604_800)? as i64,
            door_answer: std::time::Duration::from_millis(vars.int(
                "DOOR_ANSWER_MS",
                2_000,
                100,
                9_000,
            )?),
        })
    }
}
