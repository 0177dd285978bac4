//! The `messages` table: one row per message to one member, written with its `member_message`
//! effect ([`enqueue`], and the broadcast's set-based start), read by the worker before it
//! sends ([`send_facts`]), marked just before the call ([`mark_attempt`]) and settled in the
//! transaction that records the effect ([`settle`]). Staff read a buyer's messages
//! ([`of_subscriber`]).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::Value;

use super::{Kind, Outcome};
use crate::{
    common::{error::ApiError, expiry::Expiry},
    db,
    outbox::outbound,
    present::{locale::Language, translations::Translations},
};

/// A message as staff see it (a buyer's page, `automation.sent` events).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 7, "subscriber_id": 1, "kind": "win_back", "broadcast_id": null,
    "outcome": "sent", "text": "We miss you, Ann! …", "note": null,
    "created_at": "2025-01-01T10:00:00Z", "sent_at": "2025-01-01T10:00:01Z"}))]
pub struct Message {
    pub id: i64,
    pub subscriber_id: i32,
    pub kind: Kind,
    pub broadcast_id: Option<i64>,
    /// Null while it is not decided yet.
    pub outcome: Option<Outcome>,
    /// What was sent (null until it is).
    pub text: Option<String>,
    /// Why it was skipped or failed.
    pub note: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When its outcome was decided.
    pub sent_at: Option<DateTime<Utc>>,
}

macro_rules! message_columns {
    () => {
        "id, subscriber_id, kind, broadcast_id, outcome, text, note, created_at, sent_at"
    };
}

crate::from_row!(Message [message_columns!()] {
    id,
    subscriber_id,
    kind,
    broadcast_id,
    outcome,
    text,
    note,
    created_at,
    sent_at,
});

const OF_SUBSCRIBER_SQL: &str = concat!(
    "SELECT ",
    message_columns!(),
    " FROM messages WHERE subscriber_id = $1 AND id > $2 ORDER BY id LIMIT $3"
);

/// Subscriber `subscriber`'s messages with ids above `after`, at most `limit`, by id.
pub async fn of_subscriber(
    client: &impl GenericClient,
    subscriber: i32,
    after: i64,
    limit: i64,
) -> Result<Vec<Message>, ApiError> {
    db::all(client, OF_SUBSCRIBER_SQL, &[&subscriber, &after, &limit]).await
}

/// The statement that writes one automation's message to subscriber `$1` (kind `$2`; order
/// `$3`, membership `$4`, subscription `$5`, promo code `$6`; key `$7`; the default language
/// `$8`) and its effect, due in `$9` minutes, unless a message of that key was written before.
/// Returns the new message's id, if any.
const ENQUEUE_SQL: &str = "WITH m AS (
         INSERT INTO messages (subscriber_id, kind, order_id, membership_id,
                               star_subscription_id, promo_code_id, dedupe_key, language)
         SELECT s.id, $2, $3, $4, $5, $6, $7, coalesce(s.language, $8)
         FROM subscribers s
         WHERE s.id = $1
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING id, subscriber_id
     )
     INSERT INTO effects (kind, user_id, payload, dedupe_key, next_attempt_at)
     SELECT 'member_message', s.telegram_user_id, jsonb_build_object('message_id', m.id),
            'message:' || m.id, statement_timestamp() + make_interval(mins => $9)
     FROM m
     JOIN subscribers s ON s.id = m.subscriber_id
     RETURNING (payload ->> 'message_id')::bigint AS message_id";

/// An automation's message to write.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub subscriber_id: i32,
    pub kind: Kind,
    pub order_id: Option<i64>,
    pub membership_id: Option<i64>,
    pub star_subscription_id: Option<i64>,
    pub promo_code_id: Option<i64>,
    /// At most one message per key, ever.
    pub dedupe_key: String,
    /// Sent this many minutes from now.
    pub delay_minutes: i32,
}

/// Writes `m` and its effect in the caller's transaction, unless a message with its key exists;
/// the new message's id.
pub async fn enqueue(
    client: &impl GenericClient,
    m: &NewMessage,
    default: Language,
) -> Result<Option<i64>, ApiError> {
    let row = db::row_opt(
        client,
        ENQUEUE_SQL,
        &[
            &m.subscriber_id,
            &m.kind,
            &m.order_id,
            &m.membership_id,
            &m.star_subscription_id,
            &m.promo_code_id,
            &m.dedupe_key,
            &default.as_str(),
            &m.delay_minutes,
        ],
    )
    .await?;
    Ok(match row {
        Some(r) => Some(r.try_get("message_id")?),
        None => None,
    })
}

const EXISTS_SQL: &str = "SELECT EXISTS (SELECT 1 FROM messages WHERE dedupe_key = $1) AS found";

/// Whether a message with key `key` was written.
pub async fn exists(client: &impl GenericClient, key: &str) -> Result<bool, ApiError> {
    Ok(db::row_one(client, EXISTS_SQL, &[&key])
        .await?
        .try_get("found")?)
}

/// What the worker reads before sending message `id` (`send_facts.sql`): the message, its
/// buyer, the owner's texts, and what the message is about — the channel, the expiry and the
/// plan its button buys — with whether it still applies (an unpaid order still unpaid and not
/// superseded, a membership still expired, a subscription still cancelled).
#[derive(Debug, Clone)]
pub struct SendFacts {
    pub id: i64,
    pub kind: Kind,
    pub subscriber_id: i32,
    pub broadcast_id: Option<i64>,
    pub language: Language,
    pub outcome: Option<Outcome>,
    /// An earlier attempt was about to call Telegram and recorded nothing since.
    pub attempted: bool,
    pub telegram_user_id: i64,
    pub name: Option<String>,
    pub marketing_opt_out: bool,
    pub reachable: bool,
    pub promo_code: Option<String>,
    pub promo_percent_off: Option<i32>,
    pub broadcast_status: Option<String>,
    pub paid_max_stars: Option<i32>,
    pub button: Option<Value>,
    pub texts: Option<Value>,
    /// The automation is switched on (always true for a broadcast).
    pub enabled: bool,
    pub applies: Option<bool>,
    /// The channel the message is about, with its title and translations.
    pub channel_id: Option<i32>,
    pub channel_title: Option<String>,
    pub channel_translations: Option<Translations>,
    pub expires_at: Option<Expiry>,
    pub plan_id: Option<i64>,
}

crate::from_row!(SendFacts ["(send_facts.sql)"] {
    id,
    kind,
    subscriber_id,
    broadcast_id,
    language,
    outcome,
    attempted,
    telegram_user_id,
    name,
    marketing_opt_out,
    reachable,
    promo_code,
    promo_percent_off,
    broadcast_status,
    paid_max_stars,
    button,
    texts,
    enabled,
    applies,
    channel_id,
    channel_title,
    channel_translations,
    expires_at,
    plan_id,
});

const SEND_FACTS_SQL: &str = include_str!("send_facts.sql");

/// [`SendFacts`] of messages `ids`, in one statement, in no particular order; a message that is
/// gone (its buyer was deleted) is missing.
pub async fn send_facts(
    client: &impl GenericClient,
    ids: &[i64],
) -> Result<Vec<SendFacts>, ApiError> {
    db::all(client, SEND_FACTS_SQL, &[&ids]).await
}

/// Marks message `$id` as about to be sent (paid: `$paid`), while it is undecided, unmarked, its
/// buyer still takes such messages (no `/stop`, not blocked) and — for a broadcast's — its
/// broadcast is still sending. The parameters are named, since the worker's record step makes
/// it part of a larger statement.
macro_rules! mark_sql {
    ($id:literal, $paid:literal) => {
        concat!(
            "UPDATE messages m
     SET attempted_at = statement_timestamp(), paid = ",
            $paid,
            "
     WHERE m.id = ",
            $id,
            "
       AND m.outcome IS NULL
       AND m.attempted_at IS NULL
       AND EXISTS (SELECT 1 FROM subscribers s
                   WHERE s.id = m.subscriber_id AND NOT s.marketing_opt_out AND s.reachable)
       AND (m.broadcast_id IS NULL
            OR (SELECT b.status FROM broadcasts b WHERE b.id = m.broadcast_id) = 'sending')
     RETURNING m.id"
        )
    };
}
pub(crate) use mark_sql;

/// [`mark_sql!`] of message `$1` (paid: `$2`).
const MARK_SQL: &str = mark_sql!("$1", "$2");

/// Writes down that message `id` is about to be sent (`paid`: with `allow_paid_broadcast`),
/// committed before the call; false when it must not be sent now (decided meanwhile, marked by
/// another attempt, its buyer said `/stop` or blocked the bot since its facts were read, or its
/// broadcast cancelled).
pub async fn mark_attempt(
    client: &impl GenericClient,
    id: i64,
    paid: bool,
) -> Result<bool, ApiError> {
    Ok(db::row_opt(client, MARK_SQL, &[&id, &paid])
        .await?
        .is_some())
}

/// How an attempt at a message ended, for [`settle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Decided: sent (with its text), blocked, failed or skipped (with a note).
    Decided {
        outcome: Outcome,
        text: Option<String>,
        note: Option<String>,
    },
    /// Not decided: the call was not made or Telegram refused it for now; the effect is retried,
    /// so the mark is cleared.
    Retry,
}

const DECIDE_SQL: &str = "UPDATE messages
     SET outcome = $2, text = $3, note = $4, sent_at = statement_timestamp(),
         paid = paid AND $2 = 'sent'
     WHERE id = $1 AND outcome IS NULL
     RETURNING id, subscriber_id, kind, broadcast_id, outcome, text, note, created_at, sent_at";
const UNMARK_SQL: &str = "UPDATE messages SET attempted_at = NULL, paid = false
     WHERE id = $1 AND outcome IS NULL";

/// Records how an attempt at message `id` ended, in the transaction that records its effect:
/// its outcome, or its mark cleared for a retry. A sent automation's message is reported to
/// the owner's endpoints (`automation.sent`); a blocked one marks its buyer unreachable.
pub async fn settle(
    client: &impl GenericClient,
    id: i64,
    settled: &Settled,
    telegram_user_id: i64,
) -> Result<(), ApiError> {
    match settled {
        Settled::Retry => {
            db::execute(client, UNMARK_SQL, &[&id]).await?;
        }
        Settled::Decided {
            outcome,
            text,
            note,
        } => {
            let decided: Option<Message> =
                db::opt(client, DECIDE_SQL, &[&id, outcome, text, note]).await?;
            let Some(message) = decided else {
                return Ok(());
            };
            crate::common::metrics::member_message(message.kind.as_str(), outcome.as_str());
            if *outcome == Outcome::Blocked {
                crate::access::subscribers::mark_unreachable(client, telegram_user_id).await?;
            }
            if *outcome == Outcome::Sent && message.kind != Kind::Broadcast {
                let data = serde_json::to_value(&message).expect("a message serializes");
                outbound::emit(client, "automation.sent", &data).await?;
            }
        }
    }
    Ok(())
}
