//! Who subgate banned in which chat (`chat_bans`), the table's one owner. A revoke writes its
//! row before it bans and its record step removes the row once the ban is lifted again; a grant
//! unbans only a user listed here (nobody else was banned by us), so a fresh grant is a single
//! message.

use deadpool_postgres::GenericClient;

use crate::{common::error::ApiError, db};

const RECORD_SQL: &str = "INSERT INTO chat_bans (chat_id, user_id) VALUES ($1, $2)
     ON CONFLICT (chat_id, user_id) DO NOTHING";

const BANNED_SQL: &str = "SELECT EXISTS (
         SELECT 1 FROM chat_bans WHERE chat_id = $1 AND user_id = $2) AS banned";

const CLEAR_SQL: &str = "DELETE FROM chat_bans WHERE chat_id = $1 AND user_id = $2";

/// Notes that subgate is about to ban `user` in `chat` (before the call: a ban whose unban is
/// lost stays known).
pub async fn record(client: &impl GenericClient, chat: i64, user: i64) -> Result<(), ApiError> {
    db::execute(client, RECORD_SQL, &[&chat, &user]).await?;
    Ok(())
}

/// Whether subgate banned `user` in `chat` and has not lifted that ban since.
pub async fn banned_by_us(
    client: &impl GenericClient,
    chat: i64,
    user: i64,
) -> Result<bool, ApiError> {
    Ok(db::row_one(client, BANNED_SQL, &[&chat, &user])
        .await?
        .try_get("banned")?)
}

/// Forgets the ban of `user` in `chat`: it was lifted (or never took).
pub async fn clear(client: &impl GenericClient, chat: i64, user: i64) -> Result<(), ApiError> {
    db::execute(client, CLEAR_SQL, &[&chat, &user]).await?;
    Ok(())
}
