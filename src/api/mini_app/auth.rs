//! The [`Buyer`] extractor: every Mini App call carries `Authorization: tma <initData>`, checked
//! against the bot token ([`crate::bot::mini_app::init_data`]); the buyer's bucket is then
//! charged ([`crate::bot::mini_app::rate_limit`]) and the buyer upserted as the bot does.
//! Anything but valid `initData` is a 401; no bot token configured, a 503; an empty bucket, a
//! 429 with `Retry-After`.

use axum::{extract::FromRequestParts, http::request::Parts};

use crate::{
    app::state::AppState,
    bot::{
        mini_app::{self, init_data},
        texts::Language,
        update::Sender,
    },
    common::{error::ApiError, ids::SubscriberId},
};

/// Who is calling: the Telegram user of the page and their subscriber row.
pub struct Buyer {
    pub sender: Sender,
    pub id: SubscriberId,
    /// The language to answer in.
    pub language: Language,
}

impl Buyer {
    /// The buyer's Telegram user id.
    pub fn user_id(&self) -> i64 {
        self.sender.id
    }
}

fn refused(why: impl Into<String>) -> ApiError {
    ApiError::WebhookUnauthorized(why.into())
}

impl FromRequestParts<AppState> for Buyer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Buyer, ApiError> {
        let token = state.config.telegram_bot_token.as_ref().ok_or_else(|| {
            ApiError::Unavailable(
                "TELEGRAM_BOT_TOKEN is not set: Mini App calls cannot be checked".into(),
            )
        })?;
        let init_data = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("tma "))
            .ok_or_else(|| refused("Mini App call without `Authorization: tma`"))?;
        let checked = init_data::check(
            init_data.trim(),
            token.expose(),
            chrono::Utc::now().timestamp(),
            state.config.mini_app_max_age_secs,
        )
        .map_err(|why| refused(format!("Mini App initData refused: {why:?}")))?;
        state
            .mini_app_limits
            .take(checked.user.id)
            .map_err(|retry_after_secs| {
                tracing::info!(
                    user_id = checked.user.id,
                    "Mini App call over the buyer's limit"
                );
                ApiError::TooManyRequests { retry_after_secs }
            })?;
        let sender = checked.user.sender();
        let (id, language) =
            crate::transaction!(state.db, |tx| { mini_app::buyer(tx, &sender).await })?;
        Ok(Buyer {
            sender,
            id,
            language,
        })
    }
}
