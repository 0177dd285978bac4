//! Telegram effects: what subgate must make Telegram do after a change in its own database —
//! let a buyer in, kick an expired member out, remind, refund Stars, answer a join request —
//! kept in a transactional outbox (the `effects` table).
//!
//! This module is the outbox itself — the effect types, the inserts, the staff's view and
//! retries — and knows nothing of memberships: the change and the intent to act commit
//! together because the code that changes a membership ([`crate::access::memberships`], which decides
//! the effect of a change), the sweep, or the webhook door inserts the effect row in its own
//! transaction through the functions here, so neither can exist without the other. The effects
//! worker ([`crate::app::worker`], a separate module because it reads memberships) performs effects
//! after commit, at least once, retrying until done; therefore every effect is designed to be
//! harmless when repeated (unban with `only_if_banned`, ban + unban, approve/decline that accept
//! "already done" answers, messages whose rare duplicate is acceptable) and re-checks the
//! membership before acting, so an effect overtaken by a later change (a revoke after a
//! renewal, a reminder after a payment) is skipped instead of performed.
//!
//! Every effect row's `payload` has its kind's shape ([`Payload`], read back by the worker), and
//! every SQL statement that inserts effect rows builds their payload and key with the fragments
//! below (`instant_text_sql!`, `expiry_text_sql!`, `expiry_payload_sql!`, `transition_key_sql!`, …), so an instant
//! and a key are spelled in one place. What is enqueued, and under which `dedupe_key` (unique,
//! so "at most one per X" is a schema invariant; `docs/effects.md` has the table):
//!
//! - **One effect per membership transition.** A grant, renewal receipt, revoke or grace notice
//!   is keyed on the `membership_events` row of the change that asked for it —
//!   `{grant|receipt|revoke|grace}:{membership}:ev{event}` ([`transition_key`]) — whoever wrote
//!   it (a payment, staff through [`crate::access::memberships::record_event`], or the sweep through
//!   [`SWEEP_EFFECTS_CTE`], whose queued rows [`materialize_sweep_queue`] makes effects of).
//!   Two transitions are two effects even when they look alike: expired by the sweep, made
//!   active by staff with the same `expires_at`, expired by the sweep again is two revokes (and a
//!   grant between them), so access always follows the row. One transition
//!   is one effect: writers of one membership are serialized by its pair lock and write
//!   conditionally, so a change is recorded once, by one of them.
//! - **One revoke per deleted live membership** (`revoke:{membership}:deleted`): a staff
//!   `DELETE` of an active or grace membership, or the cascade of a subscriber's `DELETE`
//!   (`access/memberships/delete.sql`). The effect names the chat and the user, not the
//!   membership (which is gone), and the worker performs a revoke whose membership is gone.
//! - **One reminder per (membership, expiry)** — that is, per period:
//!   `reminder:{membership}:{expiry in µs}` ([`crate::access::memberships::enqueue_due_reminders`]).
//! - **One refund per payment** (`refund:{payment}`), **one decision per join request**
//!   (`join:{chat}:{user}:{date}`).
//!
//! An effect about a chat carries the channel's `telegram_chat_id` as it was when enqueued. A
//! membership change reads it under a key-share lock of the channel row (what a foreign key
//! would take), and a change of the chat id is refused while the channel has live memberships
//! or pending effects for its chat (`PATCH /api/channels/{id}`), so no effect is left aimed at
//! a chat the channel no longer has.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::{GenericClient, Row};

use crate::{
    common::error::ApiError,
    db::{self, FromRow, Params},
};

pub mod payload;
pub use payload::Payload;

crate::text_enum! {
    /// What an effect does on Telegram.
    pub enum Kind {
        /// A membership became active from none or expired: send the buyer the channel's
        /// join-request link (unbanning first only a user subgate banned there).
        Grant => "grant",
        /// An active or grace member renewed: a short receipt.
        RenewalReceipt => "renewal_receipt",
        /// A membership expired: ban, then unban (only if banned) — out now, free to come back
        /// after paying.
        Revoke => "revoke",
        /// `REMINDER_DAYS` before `expires_at`, once per period.
        Reminder => "reminder",
        /// The membership entered its grace period.
        GraceNotice => "grace_notice",
        /// A `refund_pending` Stars payment: `refundStarPayment`.
        Refund => "refund",
        /// A join request of a paying member: `approveChatJoinRequest`.
        JoinApprove => "join_approve",
        /// Any other join request: `declineChatJoinRequest`.
        JoinDecline => "join_decline",
        /// A message of the bot to a buyer (`payload.text`, optional `payload.reply_markup`).
        BotMessage => "bot_message",
        /// An order's invoice for the buyer: `sendInvoice` (Stars), a subscription link
        /// (recurring Stars) or a card payment link, while the order is pending.
        Invoice => "invoice",
        /// Staff or the buyer cancelled a Stars subscription: `editUserStarSubscription`.
        SubscriptionCancel => "subscription_cancel",
        /// An audit found a live member banned in the chat: `unbanChatMember(only_if_banned)`.
        Unban => "unban",
    }
}

crate::text_enum! {
    /// Where an effect stands.
    pub enum Status {
        /// Queued or being retried.
        Pending => "pending",
        /// Performed (or skipped as no longer needed).
        Done => "done",
        /// The dead letter: refused for good, or failing past the retry horizon.
        Failed => "failed",
    }
}

/// The dedupe key of the effect of one membership transition: `{what}:{membership}:ev{event}`,
/// where `event` is the id of the transition's `membership_events` row and `what` names the
/// kind (`grant`, `receipt`, `revoke`, `grace`). Every SQL writer builds it with
/// [`transition_key_sql!`], which spells it the same way (a test compares them). `None` for a
/// kind no transition asks for.
pub fn transition_key(kind: Kind, membership_id: i64, event_id: i64) -> Option<String> {
    let what = transition_prefix(kind)?;
    Some(format!("{what}:{membership_id}:ev{event_id}"))
}

/// The `membership_events` row a transition's effect was enqueued for: the `event` of its
/// [`transition_key`] (`None` for any other key).
pub fn transition_event(dedupe_key: &str) -> Option<i64> {
    let (what, rest) = dedupe_key.split_once(':')?;
    ["grant", "receipt", "revoke", "grace"]
        .contains(&what)
        .then_some(())?;
    let (_membership, event) = rest.split_once(":ev")?;
    event.parse().ok()
}

const DELIVERED_SQL: &str = "SELECT EXISTS (
         SELECT 1 FROM effects
         WHERE membership_id = $1 AND user_id = $2 AND kind IN ('grant', 'renewal_receipt')
           AND status = 'done' AND NOT payload ? 'note'
     ) AS delivered";

/// Whether Telegram user `user_id` was told of membership `membership_id`: one of its grants or
/// renewal receipts was sent to that account (done without a note, which only a skip or an
/// "already done" answer writes).
pub async fn told_of(
    client: &impl deadpool_postgres::GenericClient,
    membership_id: i64,
    user_id: i64,
) -> Result<bool, ApiError> {
    Ok(
        db::row_one(client, DELIVERED_SQL, &[&membership_id, &user_id])
            .await?
            .try_get("delivered")?,
    )
}

/// The key of the notice that a revoke's access ended: one per revoke effect, so one per ending.
pub fn access_ended_key(revoke_effect_id: i64) -> String {
    format!("access_ended:{revoke_effect_id}")
}

/// The first part of a [`transition_key`] of `kind` (`None` for kinds no transition causes),
/// for SQL that builds the key from ids it has just written.
pub fn transition_prefix(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Grant => "grant",
        Kind::RenewalReceipt => "receipt",
        Kind::Revoke => "revoke",
        Kind::GraceNotice => "grace",
        _ => return None,
    })
}

// ---- the SQL of effect rows: every statement that inserts into `effects` builds its
// `payload` and `dedupe_key` with these fragments (macros, so SQL constants can splice them
// with `concat!`), and nowhere else is an instant, a key or a membership payload spelled. ----

/// An instant as every effect payload spells it: text in UTC with six fractional digits and a
/// `Z` (`2026-01-31T12:00:00.000000Z`), whatever the session's time zone. `$t` is an SQL
/// expression of type `timestamptz`.
macro_rules! instant_text_sql {
    ($t:expr) => {
        concat!(
            "to_char((",
            $t,
            ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        )
    };
}
pub(crate) use instant_text_sql;

/// A membership's expiry as every effect payload spells it (`crate::common::expiry::Expiry`): the
/// instant as [`instant_text_sql!`] spells it, or `infinity` for lifetime access (`to_char`
/// of an infinite time is NULL, so the infinite case is spelled by PostgreSQL's own cast).
/// `$t` is an SQL expression of type `timestamptz`.
macro_rules! expiry_text_sql {
    ($t:expr) => {
        concat!(
            "CASE WHEN isfinite(",
            $t,
            ") THEN ",
            $crate::outbox::effects::instant_text_sql!($t),
            " ELSE (",
            $t,
            ")::text END"
        )
    };
}
pub(crate) use expiry_text_sql;

/// The payload of a grant, renewal receipt, transition revoke, grace notice or reminder
/// ([`payload::Expiry`]): `{"expires_at": …}` of the `timestamptz` expression `$expires_at`.
macro_rules! expiry_payload_sql {
    ($expires_at:expr) => {
        concat!(
            "jsonb_build_object('expires_at', ",
            $crate::outbox::effects::expiry_text_sql!($expires_at),
            ")"
        )
    };
}
pub(crate) use expiry_payload_sql;

/// The payload of the revoke of a deleted membership ([`payload::Revoke`] with `deleted`):
/// `{"membership_id": …, "deleted": true, "expires_at": …}`.
macro_rules! deleted_revoke_payload_sql {
    ($membership:expr, $expires_at:expr) => {
        concat!(
            "jsonb_build_object('membership_id', ",
            $membership,
            ", 'deleted', true, 'expires_at', ",
            $crate::outbox::effects::expiry_text_sql!($expires_at),
            ")"
        )
    };
}

/// [`transition_key`] in SQL: `{what}:{membership}:ev{event}`, `$what` an SQL text expression
/// of a [`transition_prefix`], `$membership` and `$event` SQL id expressions.
macro_rules! transition_key_sql {
    ($what:expr, $membership:expr, $event:expr) => {
        concat!(
            "(",
            $what,
            ") || ':' || (",
            $membership,
            ") || ':ev' || (",
            $event,
            ")"
        )
    };
}
pub(crate) use transition_key_sql;

/// The key of a reminder: `reminder:{membership}:{expiry in µs since the epoch}` — one per
/// (membership, expiry), so one per period.
macro_rules! reminder_key_sql {
    ($membership:expr, $expires_at:expr) => {
        concat!(
            "'reminder:' || (",
            $membership,
            ") || ':' || (extract(epoch FROM (",
            $expires_at,
            ")) * 1000000)::bigint"
        )
    };
}
pub(crate) use reminder_key_sql;

/// [`reminder_key_sql!`] in Rust: the key of the reminder of `membership_id` for `expires_at`.
pub fn reminder_key(membership_id: i64, expires_at: DateTime<Utc>) -> String {
    format!("reminder:{membership_id}:{}", expires_at.timestamp_micros())
}

/// The key of the revoke of deleted membership `membership_id` (spelled alike in SQL by
/// `access/memberships/delete.sql`).
pub fn deleted_revoke_key(membership_id: i64) -> String {
    format!("revoke:{membership_id}:deleted")
}

/// The select list of [`Effect`] (a macro, so SQL constants can splice it with `concat!`).
macro_rules! effect_columns {
    () => {
        "id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload, status, \
         attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, done_at, \
         lease_until, first_failed_at"
    };
}
pub(crate) use effect_columns;

/// An effect row, as the worker reads it and `GET /api/effects` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Effect {
    pub id: i64,
    pub kind: Kind,
    pub membership_id: Option<i64>,
    pub payment_id: Option<i64>,
    pub order_id: Option<i64>,
    pub chat_id: Option<i64>,
    pub user_id: i64,
    /// What the effect needs to be performed (kind-specific).
    #[schema(value_type = Object)]
    pub payload: Value,
    pub status: Status,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub dedupe_key: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub done_at: Option<DateTime<Utc>>,
    /// While in the future, a worker is performing the effect (its claim's lease).
    pub lease_until: Option<DateTime<Utc>>,
    /// The first failed attempt since the effect was created or sent back by staff; transient
    /// failures are retried until it is [`crate::app::worker::RETRY_HORIZON`] old.
    pub first_failed_at: Option<DateTime<Utc>>,
}

impl FromRow for Effect {
    const COLUMNS: &'static str = effect_columns!();

    fn from_row(r: &Row) -> Result<Effect, tokio_postgres::Error> {
        Ok(Effect {
            id: r.try_get("id")?,
            kind: r.try_get("kind")?,
            membership_id: r.try_get("membership_id")?,
            payment_id: r.try_get("payment_id")?,
            order_id: r.try_get("order_id")?,
            chat_id: r.try_get("chat_id")?,
            user_id: r.try_get("user_id")?,
            payload: r.try_get("payload")?,
            status: r.try_get("status")?,
            attempts: r.try_get("attempts")?,
            next_attempt_at: r.try_get("next_attempt_at")?,
            last_error: r.try_get("last_error")?,
            dedupe_key: r.try_get("dedupe_key")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
            done_at: r.try_get("done_at")?,
            lease_until: r.try_get("lease_until")?,
            first_failed_at: r.try_get("first_failed_at")?,
        })
    }
}

impl Effect {
    /// The payload, read as its kind's ([`Payload::parse`]); an error for a row whose payload
    /// does not have its kind's shape (never written so by subgate).
    pub fn typed_payload(&self) -> Result<Payload, serde_json::Error> {
        Payload::parse(self.kind, &self.payload)
    }
}

/// An effect to enqueue; its kind is its payload's.
#[derive(Debug, Clone)]
pub struct NewEffect {
    pub membership_id: Option<i64>,
    pub payment_id: Option<i64>,
    pub order_id: Option<i64>,
    pub chat_id: Option<i64>,
    pub user_id: i64,
    pub payload: Payload,
    /// At most one effect per key ever; `None` for no deduplication.
    pub dedupe_key: Option<String>,
}

const ENQUEUE_SQL: &str = "INSERT INTO effects
         (kind, membership_id, payment_id, order_id, chat_id, user_id, payload, dedupe_key)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (dedupe_key) DO NOTHING
     RETURNING id";

/// Inserts one effect, due now. Returns its id, or `None` when an effect with the same
/// `dedupe_key` already exists (nothing inserted). Call it inside the transaction of the change
/// that needs it.
pub async fn enqueue(client: &impl GenericClient, e: &NewEffect) -> Result<Option<i64>, ApiError> {
    enqueue_as(client, ENQUEUE_SQL, e).await
}

/// [`enqueue`] as a statement prepared once per pooled connection (one round trip, not two),
/// for the paths that run often.
pub async fn enqueue_prepared(
    tx: &Transaction<'_>,
    e: &NewEffect,
) -> Result<Option<i64>, ApiError> {
    let statement = tx.prepare_cached(ENQUEUE_SQL).await?;
    enqueue_as(&**tx, &statement, e).await
}

async fn enqueue_as<S>(
    client: &impl GenericClient,
    statement: &S,
    e: &NewEffect,
) -> Result<Option<i64>, ApiError>
where
    S: ?Sized + tokio_postgres::ToStatement + Sync + Send,
{
    let row = client
        .query_opt(
            statement,
            &[
                &e.payload.kind(),
                &e.membership_id,
                &e.payment_id,
                &e.order_id,
                &e.chat_id,
                &e.user_id,
                &e.payload.to_json(),
                &e.dedupe_key,
            ],
        )
        .await?;
    Ok(row.map(|r| r.try_get("id")).transpose()?)
}

/// Enqueues the revoke or unban that a look at Telegram asks for, not a membership change: a
/// user who joined chat `chat` without live access (`found` chat_member, `marker` the update's
/// date), or a wrong row an audit fixes (`found` audit, `marker` the audit's id). Keyed
/// `{kind}:{chat}:{user}:{found}:{marker}`, so one sighting is one effect however often it is
/// reported. Returns the effect's id, `None` when it was enqueued before.
pub async fn enqueue_found(
    client: &impl GenericClient,
    kind: Kind,
    chat: i64,
    user: i64,
    found: payload::Found,
    marker: i64,
) -> Result<Option<i64>, ApiError> {
    let payload = match kind {
        Kind::Unban => Payload::Unban(payload::Unban { found }),
        _ => Payload::Revoke(payload::Revoke {
            expires_at: None,
            membership_id: None,
            deleted: false,
            found: Some(found),
        }),
    };
    let new = NewEffect {
        membership_id: None,
        payment_id: None,
        order_id: None,
        chat_id: Some(chat),
        user_id: user,
        dedupe_key: Some(found_key(payload.kind(), chat, user, found, marker)),
        payload,
    };
    enqueue(client, &new).await
}

/// The key of an effect [`enqueue_found`] writes.
pub fn found_key(kind: Kind, chat: i64, user: i64, found: payload::Found, marker: i64) -> String {
    let found = match found {
        payload::Found::ChatMember => "chat_member",
        payload::Found::Audit => "audit",
    };
    format!("{kind}:{chat}:{user}:{found}:{marker}")
}

/// The sweep's effects, as the last data-modifying CTE of its batch write (`access/sweep_apply_batch.sql`, which spells it whole; this copy serves the benchmarks)
/// ([`crate::access::sweep::apply_batch`]): for every membership it moved to `expired` a revoke, and for
/// every one it moved to `grace` a grace notice, recorded in the `sweep_queue` (migration 0017)
/// in the batch's statement and so in its transaction; the worker turns queued rows into
/// `effects` rows a chunk at a time ([`materialize_sweep_queue`]). It reads the CTEs
/// `updated(id, subscriber_id, channel_id, from_status, status, expires_at)` — the rows the
/// `UPDATE` actually changed — and `events(id, membership_id)` — the `membership_events` rows
/// written for them ([`crate::access::sweep::SWEEP_EVENTS_CTE`]) — so it needs no second look at
/// `memberships`. Each row is keyed on its transition's event, and the effect made of it is
/// keyed as [`transition_key`] spells it (`revoke:{membership}:ev{event}`), so a membership
/// expired again after a staff re-activation gets a second revoke instead of being
/// deduplicated into the first. The Telegram ids are read in the same statement, so the effect
/// names who they were at the transition. (No channel lock here, unlike a change recorded by
/// [`crate::access::memberships::record_event`]: the sweep only moves live memberships, which block a
/// chat change until it commits, and its queued rows block it after, [`pending_in_chat`].)
/// Rows are inserted in membership id order; the `ORDER BY` also makes PostgreSQL join the
/// two CTEs by merging them (both come in membership id order) instead of comparing every
/// pair of a batch's rows in a nested loop, which cost more than the rest of the statement.
pub const SWEEP_EFFECTS_CTE: &str = "sweep_effects AS (
    INSERT INTO sweep_queue (event_id, membership_id, kind, chat_id, user_id, expires_at)
    SELECT ev.id, u.id,
           CASE WHEN u.status = 'expired' THEN 'revoke' ELSE 'grace_notice' END,
           c.telegram_chat_id, s.telegram_user_id, u.expires_at
    FROM updated u
    JOIN events ev ON ev.membership_id = u.id
    JOIN subscribers s ON s.id = u.subscriber_id
    JOIN channels c ON c.id = u.channel_id
    WHERE (u.from_status IN ('active', 'grace') AND u.status = 'expired')
       OR (u.from_status = 'active' AND u.status = 'grace')
    ORDER BY u.id
)";

/// Queued sweep rows made into effects per call of [`materialize_sweep_queue`]. The worker
/// calls it at the start of every run and whenever its lanes find nothing due, so the outbox
/// holds a few chunks of a sweep's effects at a time (a million revokes take Telegram's pace,
/// hours, to perform), and an effect committed meanwhile (a grant) waits behind at most one
/// chunk per lane (100 effects with the default four lanes: about 3.5 s at Telegram's pace)
/// instead of behind every revoke of the sweep.
pub const SWEEP_QUEUE_CHUNK: i64 = 25;

/// The oldest `$1` rows of the `sweep_queue` that no one else is taking, deleted and made
/// effects in one statement: each becomes exactly one effect, keyed as [`transition_key`]
/// spells it, with its expiry as payload (a revoke whose membership has been deleted since
/// names none and carries the deleted revoke's payload, as `access/memberships/delete.sql` writes it;
/// its membership, when it still exists, is key-share locked so it cannot vanish before the
/// effect commits). `ON CONFLICT` keeps a row that somehow already has its effect from
/// making a second one.
const MATERIALIZE_SWEEP_QUEUE_SQL: &str = concat!(
    "WITH taken AS (
         DELETE FROM sweep_queue q
         WHERE q.event_id IN (
             SELECT event_id FROM sweep_queue ORDER BY event_id LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING q.event_id, q.membership_id, q.kind, q.chat_id, q.user_id, q.expires_at
     ), made AS (
         INSERT INTO effects (kind, membership_id, chat_id, user_id, payload, dedupe_key)
         SELECT t.kind, m.id, t.chat_id, t.user_id,
                CASE WHEN m.id IS NULL AND t.kind = 'revoke' THEN ",
    deleted_revoke_payload_sql!("t.membership_id", "t.expires_at"),
    " ELSE ",
    expiry_payload_sql!("t.expires_at"),
    " END, ",
    transition_key_sql!(
        "CASE WHEN t.kind = 'revoke' THEN 'revoke' ELSE 'grace' END",
        "t.membership_id",
        "t.event_id"
    ),
    "
         FROM taken t
         LEFT JOIN LATERAL (
             SELECT id FROM memberships WHERE id = t.membership_id FOR KEY SHARE
         ) m ON true
         ORDER BY t.event_id
         ON CONFLICT (dedupe_key) DO NOTHING
         RETURNING 1
     )
     SELECT (SELECT count(*) FROM taken) AS taken, (SELECT count(*) FROM made) AS made"
);

/// Makes effects of up to [`SWEEP_QUEUE_CHUNK`] queued sweep rows (revokes and grace notices,
/// oldest transition first), in one statement; returns how many rows it took. Concurrent
/// callers take different rows (`SKIP LOCKED`); a failed call leaves its rows queued.
pub async fn materialize_sweep_queue(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<u64, ApiError> {
    let row = db::row_one(client, MATERIALIZE_SWEEP_QUEUE_SQL, &[&SWEEP_QUEUE_CHUNK]).await?;
    let (taken, made): (i64, i64) = (row.try_get("taken")?, row.try_get("made")?);
    if taken > 0 {
        tracing::info!(taken, made, "sweep effects made from the queue");
    }
    Ok(taken as u64)
}

/// Enqueues the decision on a `chat_join_request` (approve or decline, retried until Telegram
/// confirms, which a webhook reply cannot report). The door calls it only with a bot
/// configured ([`crate::telegram::outbox_enabled`]); without one, its webhook reply is the only
/// way to answer. Telegram's redelivery of the same request (same chat, user and `date`)
/// enqueues nothing new.
pub async fn enqueue_join_decision(
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
    approve: bool,
    request_date: Option<i64>,
) -> Result<(), ApiError> {
    let request = payload::JoinRequest { request_date };
    let payload = if approve {
        Payload::JoinApprove(request)
    } else {
        Payload::JoinDecline(request)
    };
    enqueue(
        client,
        &NewEffect {
            membership_id: None,
            payment_id: None,
            order_id: None,
            chat_id: Some(chat_id),
            user_id,
            payload,
            dedupe_key: request_date.map(|d| format!("join:{chat_id}:{user_id}:{d}")),
        },
    )
    .await?;
    Ok(())
}

/// Rows one scan statement enqueues at most; a scan repeats until a statement finds fewer.
pub const SCAN_BATCH: i64 = 1000;

const PENDING_REFUNDS_SQL: &str = "INSERT INTO effects
         (kind, payment_id, order_id, user_id, payload, dedupe_key)
     SELECT 'refund', d.id, d.order_id, d.user_id,
            jsonb_build_object('charge_id', d.external_id), d.key
     FROM (
         SELECT p.id, p.order_id, p.external_id, 'refund:' || p.id AS key,
                COALESCE(CASE WHEN p.payer ~ '^[0-9]{1,18}$' THEN p.payer::bigint END,
                         s.telegram_user_id) AS user_id
         FROM payments p LEFT JOIN subscribers s ON s.id = p.subscriber_id
         WHERE p.outcome = 'refund_pending' AND p.gateway = 'telegram_stars'
     ) AS d
     WHERE d.user_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.dedupe_key = d.key)
     LIMIT $1
     ON CONFLICT (dedupe_key) DO NOTHING";

/// Enqueues one refund for every `refund_pending` Telegram Stars payment that has none yet
/// (the payment row itself is the durable intent: the payment core marks it in its own
/// transaction). The refund goes to the payer the door recorded. Returns how many.
pub async fn enqueue_pending_refunds(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<u64, ApiError> {
    insert_in_batches(client, PENDING_REFUNDS_SQL, &[&SCAN_BATCH]).await
}

/// Runs an `INSERT … SELECT … LIMIT` scan whose limit parameter is [`SCAN_BATCH`] again until a
/// round inserts fewer than that, so no single statement enqueues an unbounded number of rows.
pub async fn insert_in_batches(
    client: &impl deadpool_postgres::GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, ApiError> {
    let mut total = 0;
    loop {
        let n = db::execute(client, sql, params).await?;
        total += n;
        if (n as i64) < SCAN_BATCH {
            return Ok(total);
        }
    }
}

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub status: Option<Status>,
    pub kind: Option<Kind>,
    pub membership_id: Option<i64>,
    pub payment_id: Option<i64>,
}

const LIST_SQL: &str = concat!(
    "SELECT ",
    effect_columns!(),
    " FROM effects
     WHERE id > $1
       AND ($2::text IS NULL OR status = $2::text)
       AND ($3::text IS NULL OR kind = $3::text)
       AND ($4::bigint IS NULL OR membership_id = $4)
       AND ($5::bigint IS NULL OR payment_id = $5)
     ORDER BY id LIMIT $6"
);

/// Up to `limit` effects with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl deadpool_postgres::GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Effect>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.status,
            &filter.kind,
            &filter.membership_id,
            &filter.payment_id,
            &limit,
        ],
    )
    .await
}

const GET_SQL: &str = concat!("SELECT ", effect_columns!(), " FROM effects WHERE id = $1");

/// The effect with this id, if any.
pub async fn get(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<Option<Effect>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

const PENDING_IN_CHAT_SQL: &str =
    "SELECT EXISTS (SELECT 1 FROM effects WHERE status = 'pending' AND chat_id = $1)
         OR EXISTS (SELECT 1 FROM sweep_queue WHERE chat_id = $1) AS pending";

/// Whether effects are still to be performed in chat `chat_id` (a revoke still to kick
/// someone, a grant still to send its link), counting the sweep's queued ones.
pub async fn pending_in_chat(
    client: &impl deadpool_postgres::GenericClient,
    chat_id: i64,
) -> Result<bool, ApiError> {
    Ok(db::row_one(client, PENDING_IN_CHAT_SQL, &[&chat_id])
        .await?
        .try_get("pending")?)
}

/// The select list of [`QueueDepth`], over `effects` grouped by kind and status.
macro_rules! queue_depth_columns {
    () => {
        "kind, status, count(*) AS count,
         EXTRACT(EPOCH FROM statement_timestamp() - min(created_at))::float8 AS oldest_secs"
    };
}

const QUEUE_SQL: &str = concat!(
    "SELECT kind, status, sum(count)::bigint AS count, max(oldest_secs) AS oldest_secs
     FROM (
         SELECT ",
    queue_depth_columns!(),
    " FROM effects WHERE status IN ('pending', 'failed')
         GROUP BY kind, status
         UNION ALL
         SELECT ",
    queue_depth_columns!(),
    " FROM (SELECT kind, 'pending' AS status, created_at FROM sweep_queue) q
         GROUP BY kind, status
     ) d
     GROUP BY kind, status"
);

/// How many effects of one kind wait in one status that makes a queue (`pending` or
/// `failed`), and the age of the oldest of them.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDepth {
    pub kind: Kind,
    pub status: Status,
    pub count: i64,
    /// Seconds since the oldest of them was created.
    pub oldest_secs: f64,
}

impl FromRow for QueueDepth {
    const COLUMNS: &'static str = queue_depth_columns!();

    fn from_row(r: &Row) -> Result<QueueDepth, tokio_postgres::Error> {
        Ok(QueueDepth {
            kind: r.try_get("kind")?,
            status: r.try_get("status")?,
            count: r.try_get("count")?,
            oldest_secs: r.try_get("oldest_secs")?,
        })
    }
}

/// The effects not done, by kind and status (only the pairs that have any), over the status
/// index, the sweep's queued rows counted as pending effects of their kind: what the metrics
/// sampler reports.
pub async fn queue_depths(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<Vec<QueueDepth>, ApiError> {
    db::all(client, QUEUE_SQL, &[]).await
}

/// Sends the effects matching `filter` (SQL over `effects`) back to the queue: `pending`, due
/// now, and for a dead letter a fresh budget — no attempts, no first failure. The payments of
/// refunds among them go from `refund_failed` back to `refund_pending`, in the same statement,
/// so the worker refunds them instead of skipping them. The rows `sent` are what `select`
/// (a query over them) answers.
macro_rules! send_back_sql {
    ($filter:expr; $($select:expr),+) => {
        concat!(
            "WITH sent AS (
                 UPDATE effects SET status = 'pending',
                     attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END,
                     first_failed_at = CASE WHEN status = 'failed' THEN NULL
                                            ELSE first_failed_at END,
                     next_attempt_at = statement_timestamp(),
                     updated_at = statement_timestamp()
                 WHERE ",
            $filter,
            "
                 RETURNING ",
            effect_columns!(),
            "
             ), payments_back AS (
                 UPDATE payments p SET outcome = 'refund_pending',
                     updated_at = statement_timestamp()
                 FROM sent
                 WHERE sent.kind = 'refund' AND p.id = sent.payment_id
                   AND p.outcome = 'refund_failed'
             ) ",
            $($select),+
        )
    };
}

const RETRY_LOCK_SQL: &str =
    "SELECT status, COALESCE(lease_until > statement_timestamp(), false) AS leased
     FROM effects WHERE id = $1 FOR UPDATE NOWAIT";
const RETRY_ONE_SQL: &str = send_back_sql!("id = $1"; "SELECT ", effect_columns!(), " FROM sent");
const RETRY_ALL_SQL: &str = send_back_sql!(
    "status = 'failed'
       AND ($1::text IS NULL OR kind = $1::text)
       AND ($2::bigint IS NULL OR membership_id = $2)
       AND ($3::bigint IS NULL OR payment_id = $3)";
    "SELECT count(*) AS retried FROM sent"
);

/// Why staff cannot send an effect back to the queue now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryRefusal {
    /// It is done: there is nothing to retry.
    Done,
    /// A worker is performing it at this moment (leased, or recording under its row lock).
    InFlight,
}

/// Sends effect `id` back to the queue (a dead letter with a fresh budget; a pending one due
/// now); `Ok(None)` when there is no such effect. Never waits for a worker recording it.
pub async fn retry(
    tx: &Transaction<'_>,
    id: i64,
) -> Result<Option<Result<Effect, RetryRefusal>>, ApiError> {
    let stmt = tx.prepare_cached(RETRY_LOCK_SQL).await?;
    let row = match tx.query_opt(&stmt, &[&id]).await {
        Ok(row) => row,
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            return Ok(Some(Err(RetryRefusal::InFlight)));
        }
        Err(e) => return Err(e.into()),
    };
    let Some(row) = row else {
        return Ok(None);
    };
    let (status, leased): (Status, bool) = (row.try_get("status")?, row.try_get("leased")?);
    if status == Status::Done {
        return Ok(Some(Err(RetryRefusal::Done)));
    }
    if leased {
        return Ok(Some(Err(RetryRefusal::InFlight)));
    }
    Ok(db::opt(tx, RETRY_ONE_SQL, &[&id]).await?.map(Ok))
}

/// Sends every dead letter matching `filter` (its `status` is ignored: only `failed` ones are
/// retried) back to the queue, as [`retry`] does; returns how many.
pub async fn retry_all(tx: &Transaction<'_>, filter: &Filter) -> Result<i64, ApiError> {
    let row = db::row_one(
        tx,
        RETRY_ALL_SQL,
        &[&filter.kind, &filter.membership_id, &filter.payment_id],
    )
    .await?;
    Ok(row.try_get("retried")?)
}

const WAKE_CHAT_SQL: &str = "UPDATE effects
     SET next_attempt_at = statement_timestamp(), updated_at = statement_timestamp()
     WHERE chat_id = $1 AND status = 'pending' AND next_attempt_at > statement_timestamp()";

/// Makes every pending effect of chat `chat` due now: the bot's rights there came back, and the
/// effects that waited for them (backing off while refused) should not wait out their back-off.
/// Returns how many were woken.
pub async fn wake_chat(
    client: &impl deadpool_postgres::GenericClient,
    chat: i64,
) -> Result<u64, ApiError> {
    db::execute(client, WAKE_CHAT_SQL, &[&chat]).await
}

const PAUSED_BY_RIGHTS_SQL: &str = "SELECT count(*) AS paused FROM effects e
     JOIN channels c ON c.telegram_chat_id = e.chat_id
     WHERE e.status = 'pending' AND c.telegram_status = 'no_rights'
       AND e.kind IN ('grant', 'revoke', 'join_approve', 'join_decline', 'unban')";

/// Pending access effects (grant, revoke, join decisions, unban) waiting in chats where the
/// bot has no rights.
pub async fn paused_by_rights(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<i64, ApiError> {
    Ok(db::row_one(client, PAUSED_BY_RIGHTS_SQL, &[])
        .await?
        .try_get("paused")?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_transition_key_names_its_event() {
        for kind in [
            Kind::Grant,
            Kind::RenewalReceipt,
            Kind::Revoke,
            Kind::GraceNotice,
        ] {
            let key = transition_key(kind, 12, 345).unwrap();
            assert_eq!(transition_event(&key), Some(345), "{key}");
        }
        assert_eq!(transition_event("revoke:12:deleted"), None);
        assert_eq!(transition_event("reminder:12:1700000000000000"), None);
        assert_eq!(transition_event("invoice:7"), None);
        assert_eq!(transition_event("revoke:-100:5:chat_member:1"), None);
    }
    use serde_json::json;

    use super::*;

    #[test]
    fn kinds_round_trip() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.as_str()));
        }
        assert_eq!(Kind::parse("nope"), None);
    }

    #[test]
    fn transition_keys_name_the_membership_and_the_event() {
        assert_eq!(
            transition_key(Kind::Revoke, 9, 41).as_deref(),
            Some("revoke:9:ev41")
        );
        assert_ne!(
            transition_key(Kind::Revoke, 9, 41),
            transition_key(Kind::Revoke, 9, 44),
            "a second expiry of one membership is a second revoke"
        );
        assert_eq!(
            transition_key(Kind::GraceNotice, 9, 41).as_deref(),
            Some("grace:9:ev41")
        );
        assert_eq!(
            transition_key(Kind::RenewalReceipt, 9, 41).as_deref(),
            Some("receipt:9:ev41")
        );
        assert_eq!(transition_key(Kind::Refund, 9, 41), None);
    }

    #[test]
    fn the_fragments_spell_the_rust_rules() {
        assert_eq!(
            transition_key_sql!("'grace'", "m.id", "ev.id"),
            "('grace') || ':' || (m.id) || ':ev' || (ev.id)"
        );
        assert_eq!(deleted_revoke_key(7), "revoke:7:deleted");
        for deletion in [
            include_str!("../../access/memberships/delete.sql"),
            include_str!("../../access/memberships/delete_of_subscriber.sql"),
        ] {
            assert!(deletion.contains("'revoke:' || (g.id) || ':deleted'"));
        }
        let t: DateTime<Utc> = "1969-12-31T23:59:59.500001Z".parse().unwrap();
        assert_eq!(reminder_key(7, t), "reminder:7:-499999");
        assert!(
            expiry_payload_sql!("m.expires_at").contains("'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'")
        );
        assert!(MATERIALIZE_SWEEP_QUEUE_SQL.contains(transition_key_sql!(
            "CASE WHEN t.kind = 'revoke' THEN 'revoke' ELSE 'grace' END",
            "t.membership_id",
            "t.event_id"
        )));
    }

    #[test]
    fn the_effect_columns_are_the_row_type_s() {
        assert_eq!(Effect::COLUMNS, effect_columns!());
        assert!(RETRY_ONE_SQL.contains(effect_columns!()));
    }
}
