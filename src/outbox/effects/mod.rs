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
//! - **One refund per payment** (`refund:{payment}`; a refund staff asked for:
//!   `gateway_refund:{payment}`, [`gateway_refund_key`]), **one decision per join request**
//!   (`join:{chat}:{user}:{date}`), **one fiscal receipt per payment and kind**
//!   (`receipt:sale:{payment}`, `receipt:return:{payment}`,
//!   [`crate::payments::receipts`]).
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
use tokio_postgres::GenericClient;

use crate::{
    common::error::ApiError,
    db::{self, Params},
};

pub mod payload;
pub use payload::Payload;

mod scans;
mod staff;
mod sweep_queue;

pub use scans::*;
pub use staff::*;
pub use sweep_queue::*;

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
        /// A message to a member — a broadcast's or an automation's (`payload.message_id`,
        /// a `messages` row): `sendMessage`, at most once.
        MemberMessage => "member_message",
        /// A buyer-referrer's reward days (`payload.reward_id`, a `referral_rewards` row):
        /// added to their membership, or taken back after the referred payment's refund. No
        /// Bot API call of its own (the membership's change enqueues its grant or revoke).
        ReferralReward => "referral_reward",
        /// A fiscal receipt of a payment — its sale, or the return of its refund
        /// (`payload.fiscal_receipt_id`, a `fiscal_receipts` row): made at Checkbox, not
        /// Telegram, and its link then sent to the buyer.
        FiscalReceipt => "fiscal_receipt",
        /// A refund staff asked for (`payment_id`, a `staff_refunds` row): made at the
        /// payment's gateway (`refundStarPayment`, Stripe, WayForPay `REFUND`, Monobank's
        /// cancel), then what the payment bought is taken back. Names no chat.
        GatewayRefund => "gateway_refund",
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

/// The key of the refund staff asked for of payment `payment_id`: one per payment, ever.
pub fn gateway_refund_key(payment_id: i64) -> String {
    format!("gateway_refund:{payment_id}")
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
pub(crate) use deleted_revoke_payload_sql;

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

crate::from_row!(Effect [effect_columns!()] {
    id,
    kind,
    membership_id,
    payment_id,
    order_id,
    chat_id,
    user_id,
    payload,
    status,
    attempts,
    next_attempt_at,
    last_error,
    dedupe_key,
    created_at,
    updated_at,
    done_at,
    lease_until,
    first_failed_at,
});

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
    let request = payload::JoinRequest {
        request_date,
        join_request_id: None,
    };
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

/// Enqueues the decision on a join request waiting at a Mini App door (`join_requests` row
/// `request_id`), keyed on the request: it is decided once, so one effect carries it.
pub async fn enqueue_door_decision(
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
    approve: bool,
    request_id: i64,
) -> Result<(), ApiError> {
    let request = payload::JoinRequest {
        request_date: None,
        join_request_id: Some(request_id),
    };
    let (payload, word) = if approve {
        (Payload::JoinApprove(request), "approve")
    } else {
        (Payload::JoinDecline(request), "decline")
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
            dedupe_key: Some(format!("door:{request_id}:{word}")),
        },
    )
    .await?;
    Ok(())
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

    /// The whole statements that write a grant or a receipt spell its payload and key as the
    /// fragments do (laid out on lines of their own: compared word by word).
    #[test]
    fn the_extensions_spell_their_effect_as_the_fragments_do() {
        let words = crate::db::sql_words;
        let effect = words(concat!(
            expiry_payload_sql!("m.expires_at"),
            ", ",
            transition_key_sql!("k.key_prefix", "m.id", "ev.id")
        ));
        for extension in [
            include_str!("../../access/memberships/extend.sql"),
            include_str!("../../payments/fast_write.sql"),
        ] {
            assert_eq!(words(extension).matches(&effect).count(), 1, "{extension}");
        }
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
        assert_eq!(<Effect as crate::db::FromRow>::COLUMNS, effect_columns!());
        assert!(RETRY_ONE_SQL.contains(effect_columns!()));
    }
}
