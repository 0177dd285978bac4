//! Users a channel's chat may hold without a membership (the owner's staff, guests): a revoke,
//! a `chat_member` check and an audit never remove them. Owner of `channel_exemptions`.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use crate::{
    common::error::ApiError,
    db::{self},
};

/// One exempt user of one channel.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"channel_id": 1, "telegram_user_id": 123456789,
    "note": "the channel's editor", "created_at": "2026-01-01T10:00:00Z"}))]
pub struct Exemption {
    pub channel_id: i32,
    pub telegram_user_id: i64,
    pub note: Option<String>,
    pub created_at: DateTime<Utc>,
}

crate::from_row!(Exemption ["channel_id, telegram_user_id, note, created_at"] {
    channel_id,
    telegram_user_id,
    note,
    created_at,
});

const LIST_SQL: &str = "SELECT channel_id, telegram_user_id, note, created_at
     FROM channel_exemptions WHERE channel_id = $1 ORDER BY telegram_user_id";
const ADD_SQL: &str = "INSERT INTO channel_exemptions (channel_id, telegram_user_id, note)
     VALUES ($1, $2, $3)
     RETURNING channel_id, telegram_user_id, note, created_at";
const REMOVE_SQL: &str =
    "DELETE FROM channel_exemptions WHERE channel_id = $1 AND telegram_user_id = $2";
const EXEMPT_IN_CHAT_SQL: &str = "SELECT EXISTS (
         SELECT 1 FROM channel_exemptions x JOIN channels c ON c.id = x.channel_id
         WHERE c.telegram_chat_id = $1 AND x.telegram_user_id = $2) AS exempt";

/// Every exemption of channel `channel_id`, by user id.
pub async fn list(
    client: &impl GenericClient,
    channel_id: i32,
) -> Result<Vec<Exemption>, ApiError> {
    db::all(client, LIST_SQL, &[&channel_id]).await
}

/// Exempts `user` in channel `channel_id`. A second exemption of the same user is a unique
/// violation (409 at the boundary); an unknown channel a foreign-key one.
pub async fn add(
    client: &impl GenericClient,
    channel_id: i32,
    user: i64,
    note: Option<&str>,
) -> Result<Exemption, ApiError> {
    db::one(client, ADD_SQL, &[&channel_id, &user, &note]).await
}

/// Lifts `user`'s exemption in channel `channel_id`; false when there was none.
pub async fn remove(
    client: &impl GenericClient,
    channel_id: i32,
    user: i64,
) -> Result<bool, ApiError> {
    Ok(db::execute(client, REMOVE_SQL, &[&channel_id, &user]).await? > 0)
}

/// Whether `user` is exempt in the channel whose chat is `chat`.
pub async fn exempt_in_chat(
    client: &impl GenericClient,
    chat: i64,
    user: i64,
) -> Result<bool, ApiError> {
    Ok(db::row_one(client, EXEMPT_IN_CHAT_SQL, &[&chat, &user])
        .await?
        .try_get("exempt")?)
}
