//! Subscribers: the buyers, identified by their Telegram user id. This module owns the
//! `subscribers` rows — [`Subscriber`] as staff see it, the bot's upsert from Telegram's `from`
//! and the small reads other modules need — and the rules of changing one, so every way of
//! changing a subscriber goes through them:
//!
//! - `telegram_user_id` cannot change while the subscriber has a membership that holds access
//!   (active or grace): access is tied to that Telegram account ([`change`]);
//! - a subscriber with payments is never deleted (money records stay); deleting one first
//!   deletes its memberships with a revoke for each live one, then the row, which cascades to
//!   its orders ([`delete`]).
//!
//! The key-share lock a membership change takes on its subscriber row is part of the
//! membership's statements (`memberships::extend`, `memberships::lock`) and stays there.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;
use tokio_postgres::Row;

use crate::{
    access::memberships,
    common::error::ApiError,
    db::{self, FromRow},
    present::locale::Language,
};

/// The select list of [`Subscriber`] (a macro, so SQL constants can splice it with `concat!`).
macro_rules! subscriber_columns {
    () => {
        "id, telegram_user_id, username, display_name, language, marketing_opt_out, reachable, \
         created_at, updated_at"
    };
}

const INSERT_SQL: &str = concat!(
    "INSERT INTO subscribers (telegram_user_id, username, display_name, language)
                         VALUES ($1, $2, $3, $4) RETURNING ",
    subscriber_columns!()
);
const LIST_SQL: &str = concat!(
    "SELECT ",
    subscriber_columns!(),
    " FROM subscribers
                 WHERE id > $1::bigint AND ($2::bigint IS NULL OR telegram_user_id = $2)
                   AND ($4::text IS NULL OR lower(username) = lower($4))
                   AND ($5::timestamptz IS NULL OR created_at >= $5)
                   AND ($6::timestamptz IS NULL OR created_at < $6)
                 ORDER BY id LIMIT $3"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    subscriber_columns!(),
    " FROM subscribers WHERE id = $1"
);
const PATCH_SQL: &str = concat!(
    "UPDATE subscribers SET
                         telegram_user_id = COALESCE($2, telegram_user_id),
                         username = CASE WHEN $3 THEN $4 ELSE username END,
                         display_name = CASE WHEN $5 THEN $6 ELSE display_name END,
                         language = CASE WHEN $7 THEN $8 ELSE language END,
                         updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING ",
    subscriber_columns!()
);
const LOCK_SQL: &str = "SELECT telegram_user_id FROM subscribers WHERE id = $1 FOR UPDATE";
const HAS_PAYMENTS_SQL: &str = "SELECT 1 FROM payments WHERE subscriber_id = $1 LIMIT 1";
const DELETE_SQL: &str = "DELETE FROM subscribers WHERE id = $1";
const EXISTS_SQL: &str = "SELECT 1 FROM subscribers WHERE id = $1";
const TELEGRAM_USER_SQL: &str = "SELECT telegram_user_id FROM subscribers WHERE id = $1";
const OF_TELEGRAM_USER_SQL: &str = "SELECT id FROM subscribers WHERE telegram_user_id = $1";
const UPSERT_SQL: &str =
    "INSERT INTO subscribers (telegram_user_id, username, display_name, language)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (telegram_user_id) DO UPDATE
         SET username = EXCLUDED.username, display_name = EXCLUDED.display_name,
             language = coalesce(subscribers.language, EXCLUDED.language),
             updated_at = statement_timestamp()
         WHERE (subscribers.username, subscribers.display_name)
               IS DISTINCT FROM (EXCLUDED.username, EXCLUDED.display_name)
            OR (subscribers.language IS NULL AND EXCLUDED.language IS NOT NULL)
     RETURNING id";
/// The language remembered for Telegram user `$1` ([`language_of_telegram_user`]).
pub const LANGUAGE_OF_TELEGRAM_USER_SQL: &str =
    "SELECT language FROM subscribers WHERE telegram_user_id = $1";
const SET_LANGUAGE_SQL: &str = "UPDATE subscribers
     SET language = $2, updated_at = statement_timestamp()
     WHERE id = $1 AND language IS DISTINCT FROM $2";

const STOP_SQL: &str = "UPDATE subscribers
     SET marketing_opt_out = true, updated_at = statement_timestamp()
     WHERE id = $1 AND NOT marketing_opt_out";
/// The CTE `heard` of a statement that reads for Telegram user `$1` what the bot needs of an
/// update of theirs: the user wrote to the bot, so they are reachable again, and with `start`
/// (the SQL of a boolean parameter: they sent `/start`) no longer opted out of broadcasts and
/// automations. It writes nothing for a buyer already so (one index probe), and rides on the
/// update's first read rather than adding a round trip to every update.
pub fn heard_from_cte(start: &str) -> String {
    format!(
        "heard AS (
             UPDATE subscribers
             SET reachable = true, marketing_opt_out = marketing_opt_out AND NOT {start},
                 updated_at = statement_timestamp()
             WHERE telegram_user_id = $1 AND (NOT reachable OR ({start} AND marketing_opt_out))
         )"
    )
}
static HEARD_FROM_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH {heard} {LANGUAGE_OF_TELEGRAM_USER_SQL}",
        heard = heard_from_cte("$2::boolean")
    )
});
const UNREACHABLE_SQL: &str = "UPDATE subscribers
     SET reachable = false, updated_at = statement_timestamp()
     WHERE telegram_user_id = $1 AND reachable";

/// A buyer, identified by their Telegram user id.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "telegram_user_id": 100000001, "username": "ann",
    "display_name": "Ann", "language": "uk", "marketing_opt_out": false, "reachable": true,
    "created_at": "2025-01-01T10:00:00Z", "updated_at": "2025-01-01T10:00:00Z"}))]
pub struct Subscriber {
    pub id: i32,
    pub telegram_user_id: i64,
    pub username: Option<String>,
    pub display_name: Option<String>,
    /// The language the bot speaks to them: chosen with `/language`, set by staff, or taken
    /// from their Telegram app's language when they first bought; `null`: the bot's default
    /// (`BOT_DEFAULT_LANGUAGE`) or their app's language.
    pub language: Option<Language>,
    /// The buyer sent `/stop`: no broadcasts and no automations until they send `/start`
    /// (messages about their own access and payments still go).
    pub marketing_opt_out: bool,
    /// False once Telegram answered 403 to a message (the buyer blocked the bot), until the
    /// buyer writes to the bot again; broadcasts and automations skip them meanwhile.
    pub reachable: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

crate::from_row!(Subscriber [subscriber_columns!()] {
    id,
    telegram_user_id,
    username,
    display_name,
    language,
    marketing_opt_out,
    reachable,
    created_at,
    updated_at,
});

/// A change of a subscriber: an absent field keeps its value; `Some(None)` clears `username`
/// or `display_name`.
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub telegram_user_id: Option<i64>,
    pub username: Option<Option<String>>,
    pub display_name: Option<Option<String>>,
    /// `Some(None)`: back to the default.
    pub language: Option<Option<Language>>,
}

/// An id of the row read by name (`SELECT id …`).
struct Id(i32);

impl FromRow for Id {
    const COLUMNS: &'static str = "id";

    fn from_row(r: &Row) -> Result<Id, tokio_postgres::Error> {
        Ok(Id(r.try_get("id")?))
    }
}

/// Creates a subscriber. A taken `telegram_user_id` is the schema's unique violation (409 when
/// rendered).
pub async fn create(
    tx: &Transaction<'_>,
    telegram_user_id: i64,
    username: Option<&str>,
    display_name: Option<&str>,
    language: Option<Language>,
) -> Result<Subscriber, ApiError> {
    let row = tx
        .query_one(
            INSERT_SQL,
            &[&telegram_user_id, &username, &display_name, &language],
        )
        .await?;
    let s = Subscriber::from_row(&row)?;
    tracing::info!(subscriber_id = s.id, "subscriber created");
    Ok(s)
}

/// Subscribers with ids after `after`, by id, at most `limit`; only Telegram user
/// `telegram_user_id`, or only those with `username` (case-insensitive), when given.
pub async fn list(
    client: &impl GenericClient,
    after: i64,
    filter: &Filter,
    limit: i64,
) -> Result<Vec<Subscriber>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.telegram_user_id,
            &limit,
            &filter.username,
            &filter.from,
            &filter.to,
        ],
    )
    .await
}

/// What a list of subscribers is narrowed to.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub telegram_user_id: Option<i64>,
    /// Compared without case.
    pub username: Option<String>,
    /// Created at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Created before this time.
    pub to: Option<DateTime<Utc>>,
}

/// Subscriber `id`.
pub async fn get(client: &impl GenericClient, id: i32) -> Result<Option<Subscriber>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// Changes subscriber `id` by `c`; 404 when there is none. A different `telegram_user_id` is
/// refused with 409 while the subscriber has a membership holding access.
pub async fn change(tx: &Transaction<'_>, id: i32, c: &Change) -> Result<Subscriber, ApiError> {
    let current: i64 = db::row_opt(tx, LOCK_SQL, &[&id])
        .await?
        .ok_or(ApiError::NotFound("subscriber"))?
        .try_get("telegram_user_id")?;
    if let Some(new_id) = c.telegram_user_id
        && new_id != current
    {
        // Memberships are only created under the subscriber row's key-share lock (their
        // foreign key), and revived under it too (`memberships::extend`, `memberships::lock`
        // take it), so this check cannot race a membership becoming live. Effects still
        // pending or failed for the old account do not block the change: each keeps the
        // account it was enqueued for (a revoke still removes the old one), docs/effects.md.
        if memberships::subscriber_holds_access(tx, id).await? {
            return Err(ApiError::Conflict(
                "telegram_user_id cannot change while the subscriber has an active or grace membership".into(),
            ));
        }
    }
    let row = tx
        .query_one(
            PATCH_SQL,
            &[
                &id,
                &c.telegram_user_id,
                &c.username.is_some(),
                &c.username.clone().flatten(),
                &c.display_name.is_some(),
                &c.display_name.clone().flatten(),
                &c.language.is_some(),
                &c.language.flatten(),
            ],
        )
        .await?;
    Ok(Subscriber::from_row(&row)?)
}

/// Deletes subscriber `id` with its orders, memberships and their events; each live
/// membership's member is taken out of its chat (a revoke per membership, in this
/// transaction). 404 when there is none, 409 when the subscriber has payments (money records
/// are never deleted).
pub async fn delete(tx: &Transaction<'_>, id: i32) -> Result<(), ApiError> {
    // Locked first: a new membership, order or payment of this subscriber (each takes a
    // key-share lock through its foreign key) waits until this commits, so the memberships
    // deleted below are all there are, and a payment in flight is seen by the check.
    db::row_opt(tx, LOCK_SQL, &[&id])
        .await?
        .ok_or(ApiError::NotFound("subscriber"))?;
    let has_payments = db::row_opt(tx, HAS_PAYMENTS_SQL, &[&id]).await?.is_some();
    if has_payments {
        return Err(ApiError::Conflict(
            "the subscriber has payments; money records are never deleted".into(),
        ));
    }
    // Before the subscriber: its cascade would remove them without a revoke.
    let removed = memberships::delete_of_subscriber(tx, id).await?;
    tx.execute(DELETE_SQL, &[&id])
        .await
        .map_err(|e| match e.code() {
            Some(c) if *c == tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION => {
                ApiError::Conflict(
                    "the subscriber has payments; money records are never deleted".into(),
                )
            }
            _ => ApiError::Db(e),
        })?;
    tracing::info!(
        subscriber_id = id,
        memberships = removed,
        "subscriber deleted"
    );
    Ok(())
}

/// Whether subscriber `id` exists.
pub async fn exists(client: &impl GenericClient, id: i32) -> Result<bool, ApiError> {
    Ok(db::row_opt(client, EXISTS_SQL, &[&id]).await?.is_some())
}

/// The Telegram user id of subscriber `id` (an error when there is none).
pub async fn telegram_user_id(client: &impl GenericClient, id: i32) -> Result<i64, ApiError> {
    Ok(db::row_one(client, TELEGRAM_USER_SQL, &[&id])
        .await?
        .try_get("telegram_user_id")?)
}

/// The subscriber id of Telegram user `telegram_user_id`, if they ever bought.
pub async fn of_telegram_user(
    client: &impl GenericClient,
    telegram_user_id: i64,
) -> Result<Option<i32>, ApiError> {
    Ok(
        db::opt::<Id>(client, OF_TELEGRAM_USER_SQL, &[&telegram_user_id])
            .await?
            .map(|Id(id)| id),
    )
}

/// Creates or updates the subscriber of Telegram user `telegram_user_id` with the username and
/// display name Telegram has now (already fit for their columns); returns its id. `language`
/// (their app's, when the bot speaks it) is remembered only when none is yet: a language the
/// buyer or staff chose stays. A row that already says the same is not written.
pub async fn upsert_from_telegram(
    tx: &Transaction<'_>,
    telegram_user_id: i64,
    username: Option<&str>,
    display_name: Option<&str>,
    language: Option<Language>,
) -> Result<i32, ApiError> {
    let updated: Option<Id> = db::opt(
        tx,
        UPSERT_SQL,
        &[&telegram_user_id, &username, &display_name, &language],
    )
    .await?;
    if let Some(Id(id)) = updated {
        return Ok(id);
    }
    let Id(id) = db::one(tx, OF_TELEGRAM_USER_SQL, &[&telegram_user_id]).await?;
    Ok(id)
}

/// The language remembered for Telegram user `telegram_user_id`, if they are a subscriber and
/// one is.
pub async fn language_of_telegram_user(
    client: &impl GenericClient,
    telegram_user_id: i64,
) -> Result<Option<Language>, ApiError> {
    Ok(
        match db::row_opt(client, LANGUAGE_OF_TELEGRAM_USER_SQL, &[&telegram_user_id]).await? {
            Some(row) => row.try_get("language")?,
            None => None,
        },
    )
}

/// Remembers `language` for subscriber `id` (the buyer chose it with `/language`).
pub async fn set_language(
    client: &impl GenericClient,
    id: i32,
    language: Option<Language>,
) -> Result<(), ApiError> {
    db::execute(client, SET_LANGUAGE_SQL, &[&id, &language]).await?;
    Ok(())
}

/// The buyer said `/stop`: no more broadcasts or automations.
pub async fn stop_marketing(client: &impl GenericClient, id: i32) -> Result<(), ApiError> {
    db::execute(client, STOP_SQL, &[&id]).await?;
    Ok(())
}

/// Telegram user `telegram_user_id` wrote to the bot ([`heard_from_cte`]; `start`: they sent
/// `/start`), in the statement that reads the language remembered for them (as
/// [`language_of_telegram_user`]).
pub async fn heard_from(
    client: &impl GenericClient,
    telegram_user_id: i64,
    start: bool,
) -> Result<Option<Language>, ApiError> {
    Ok(
        match db::row_opt(client, &HEARD_FROM_SQL, &[&telegram_user_id, &start]).await? {
            Some(row) => row.try_get("language")?,
            None => None,
        },
    )
}

/// Telegram answered 403 to a message for `telegram_user_id` (the buyer blocked the bot, or
/// deleted their account): broadcasts and automations skip them until they write again.
pub async fn mark_unreachable(
    client: &impl GenericClient,
    telegram_user_id: i64,
) -> Result<(), ApiError> {
    db::execute(client, UNREACHABLE_SQL, &[&telegram_user_id]).await?;
    Ok(())
}
