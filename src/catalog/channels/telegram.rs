//! A channel's Telegram side: the join link kept for its chat, and whether the bot holds its
//! admin rights there, as Telegram last told us.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use super::TelegramStatus;
use crate::{common::error::ApiError, db};

const STORE_INVITE_LINK_SQL: &str = "WITH stored AS (
         UPDATE channels SET invite_link = $2
         WHERE id = $1 AND invite_link IS NULL AND telegram_chat_id = $3
         RETURNING invite_link
     )
     SELECT invite_link FROM stored
     UNION ALL
     SELECT invite_link FROM channels WHERE id = $1 AND telegram_chat_id = $3
     LIMIT 1";

/// Keeps `link` as channel `id`'s join link when it has none, and returns the link it keeps
/// (an earlier one wins). Stored only while the channel is still in chat `chat`: a link must
/// never outlive a change of the channel's chat; `None` when the channel left that chat (or is
/// gone).
pub async fn store_invite_link(
    client: &impl GenericClient,
    id: i32,
    link: &str,
    chat: i64,
) -> Result<Option<String>, ApiError> {
    Ok(
        match db::row_opt(client, STORE_INVITE_LINK_SQL, &[&id, &link, &chat]).await? {
            Some(r) => r.try_get("invite_link")?,
            None => None,
        },
    )
}

const STORED_INVITE_LINK_SQL: &str =
    "SELECT invite_link FROM channels WHERE id = $1 AND telegram_chat_id = $2";

/// Channel `id`'s stored join link, while the channel is still in chat `chat`.
pub async fn stored_invite_link(
    client: &impl GenericClient,
    id: i32,
    chat: i64,
) -> Result<Option<String>, ApiError> {
    Ok(
        match db::row_opt(client, STORED_INVITE_LINK_SQL, &[&id, &chat]).await? {
            Some(r) => r.try_get("invite_link")?,
            None => None,
        },
    )
}

const SET_TELEGRAM_STATUS_SQL: &str = "UPDATE channels
     SET telegram_status = $2, telegram_status_at = statement_timestamp()
     WHERE telegram_chat_id = $1 AND telegram_status <> $2
     RETURNING id";

/// Records what Telegram told us about the bot's rights in chat `chat`. Returns the channel's
/// id when its status changed (nothing is written when it already was `status`).
pub async fn set_telegram_status(
    client: &impl GenericClient,
    chat: i64,
    status: TelegramStatus,
) -> Result<Option<i32>, ApiError> {
    Ok(
        match db::row_opt(client, SET_TELEGRAM_STATUS_SQL, &[&chat, &status]).await? {
            Some(r) => Some(r.try_get("id")?),
            None => None,
        },
    )
}

const ID_BY_CHAT_SQL: &str = "SELECT id FROM channels WHERE telegram_chat_id = $1";

/// The channel of a chat as its door sees it: which channel, how its join requests are
/// answered, and whether it is on sale.
#[derive(Debug, Clone)]
pub struct DoorOf {
    pub id: i32,
    pub door: super::Door,
    pub active: bool,
}

crate::from_row!(DoorOf { id, door, active });

/// The door of the channel whose chat is `chat`; `None`: no channel sells that chat.
pub async fn door_of_chat(
    client: &impl GenericClient,
    chat: i64,
) -> Result<Option<DoorOf>, ApiError> {
    db::opt(
        client,
        "SELECT id, door, active FROM channels WHERE telegram_chat_id = $1",
        &[&chat],
    )
    .await
}

/// The id of the channel whose chat is `chat`; `None`: no channel sells that chat.
pub async fn id_by_chat(client: &impl GenericClient, chat: i64) -> Result<Option<i32>, ApiError> {
    Ok(match db::row_opt(client, ID_BY_CHAT_SQL, &[&chat]).await? {
        Some(r) => Some(r.try_get("id")?),
        None => None,
    })
}

const FORGET_INVITE_LINK_SQL: &str = "UPDATE channels SET invite_link = NULL
     WHERE telegram_chat_id = $1 AND invite_link IS NOT NULL
       AND ($2::text IS NULL OR invite_link = $2)
     RETURNING id";

/// Forgets the join link stored for chat `chat` — only when it is `link`, with `Some` (Telegram
/// reported that link revoked), or whatever it is, with `None` (the bot's rights came back:
/// Telegram revokes the links of a demoted administrator). The next grant makes and stores a
/// new one. Returns the channel's id when a link was forgotten.
pub async fn forget_invite_link(
    client: &impl GenericClient,
    chat: i64,
    link: Option<&str>,
) -> Result<Option<i32>, ApiError> {
    Ok(
        match db::row_opt(client, FORGET_INVITE_LINK_SQL, &[&chat, &link]).await? {
            Some(r) => Some(r.try_get("id")?),
            None => None,
        },
    )
}

/// A channel whose bot lacks the rights to manage its members.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = ChannelWithoutRights)]
pub struct WithoutRights {
    pub id: i32,
    pub title: String,
    pub telegram_chat_id: i64,
    /// When Telegram told us (null when never recorded).
    pub since: Option<DateTime<Utc>>,
}

crate::from_row!(WithoutRights {
    id,
    title,
    telegram_chat_id,
    since,
});

const WITHOUT_RIGHTS_SQL: &str =
    "SELECT id, title, telegram_chat_id, telegram_status_at AS since FROM channels
     WHERE telegram_status = 'no_rights' ORDER BY id";

/// Every channel marked `no_rights`, by id.
pub async fn without_rights(client: &impl GenericClient) -> Result<Vec<WithoutRights>, ApiError> {
    db::all(client, WITHOUT_RIGHTS_SQL, &[]).await
}
