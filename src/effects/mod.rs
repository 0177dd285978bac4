//! Telegram effects: what subgate must make Telegram do after a change in its own database —
//! let a buyer in, kick an expired member out, remind, refund Stars, answer a join request —
//! kept in a transactional outbox (the `effects` table).
//!
//! The change and the intent to act commit together: the code that changes a membership (or
//! the sweep, or the webhook door) inserts the effect row in its own transaction through the
//! functions here, so neither can exist without the other. The [`worker`] performs effects
//! after commit, at least once, retrying until done; therefore every effect is designed to be
//! harmless when repeated (unban with `only_if_banned`, ban + unban, approve/decline that accept
//! "already done" answers, messages whose rare duplicate is acceptable) and re-checks the
//! membership before acting, so an effect overtaken by a later change (a revoke after a
//! renewal, a reminder after a payment) is skipped instead of performed.
//!
//! What is enqueued, and under which `dedupe_key` (unique, so "at most one per X" is a schema
//! invariant; `docs/effects.md` has the table):
//!
//! - **One effect per membership transition.** A grant, renewal receipt, revoke or grace notice
//!   is keyed on the `membership_events` row of the change that asked for it —
//!   `{grant|receipt|revoke|grace}:{membership}:ev{event}` — whoever wrote it (a payment, staff
//!   through [`crate::memberships::record_event`], or the sweep through
//!   [`SWEEP_EFFECTS_CTE`]). Two transitions are two effects even when they look alike: expired
//!   by the sweep, made active by staff with the same `expires_at`, expired by the sweep again is
//!   two revokes (and a grant between them), so access always follows the row. One transition
//!   is one effect: writers of one membership are serialized by its pair lock and write
//!   conditionally, so a change is recorded once, by one of them.
//! - **One revoke per deleted live membership** (`revoke:{membership}:deleted`): a staff
//!   `DELETE` of an active or grace membership, or the cascade of a subscriber's `DELETE`
//!   ([`DELETED_REVOKES_CTE`]). The effect names the chat and the user, not the membership
//!   (which is gone), and the worker performs a revoke whose membership no longer exists.
//! - **One reminder per (membership, expiry)** — that is, per period:
//!   `reminder:{membership}:{expiry in µs}` ([`enqueue_due_reminders`]).
//! - **One refund per payment** (`refund:{payment}`), **one decision per join request**
//!   (`join:{chat}:{user}:{date}`).
//!
//! An effect about a chat carries the channel's `telegram_chat_id` as it was when enqueued. A
//! membership change reads it under a key-share lock of the channel row (what a foreign key
//! would take), and a change of the chat id is refused while the channel has live memberships
//! or pending effects for its chat (`PATCH /api/channels/{id}`), so no effect is left aimed at
//! a chat the channel no longer has.

pub mod bot;
pub mod worker;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_postgres::GenericClient;
use tokio_postgres::Row;

use crate::{
    config::Config,
    error::ApiError,
    memberships::{Cause, Membership},
};

pub use worker::{RunReport, Worker, reconcile, run_once};

/// What an effect does on Telegram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A membership became active from none or expired: unban (only if banned), then send
    /// the buyer the channel's join-request link.
    Grant,
    /// An active or grace member renewed: a short receipt.
    RenewalReceipt,
    /// A membership expired: ban, then unban (only if banned) — out now, free to come back
    /// after paying.
    Revoke,
    /// `REMINDER_DAYS` before `expires_at`, once per period.
    Reminder,
    /// The membership entered its grace period.
    GraceNotice,
    /// A `refund_pending` Stars payment: `refundStarPayment`.
    Refund,
    /// A join request of a paying member: `approveChatJoinRequest`.
    JoinApprove,
    /// Any other join request: `declineChatJoinRequest`.
    JoinDecline,
    /// A message of the bot to a buyer (`payload.text`, optional `payload.reply_markup`).
    BotMessage,
    /// An order's invoice for the buyer: `sendInvoice` (Stars), a subscription link (recurring
    /// Stars) or a card payment link, while the order is pending.
    Invoice,
    /// Staff or the buyer cancelled a Stars subscription: `editUserStarSubscription`.
    SubscriptionCancel,
}

impl Kind {
    /// Every kind (the schema's CHECK lists the same).
    pub const ALL: [Kind; 11] = [
        Kind::Grant,
        Kind::RenewalReceipt,
        Kind::Revoke,
        Kind::Reminder,
        Kind::GraceNotice,
        Kind::Refund,
        Kind::JoinApprove,
        Kind::JoinDecline,
        Kind::BotMessage,
        Kind::Invoice,
        Kind::SubscriptionCancel,
    ];

    /// The schema's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Grant => "grant",
            Kind::RenewalReceipt => "renewal_receipt",
            Kind::Revoke => "revoke",
            Kind::Reminder => "reminder",
            Kind::GraceNotice => "grace_notice",
            Kind::Refund => "refund",
            Kind::JoinApprove => "join_approve",
            Kind::JoinDecline => "join_decline",
            Kind::BotMessage => "bot_message",
            Kind::Invoice => "invoice",
            Kind::SubscriptionCancel => "subscription_cancel",
        }
    }

    /// Parses the schema's spelling.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The columns of [`Effect::from_row`], in order.
pub const COLUMNS: &str = "id, kind, membership_id, payment_id, order_id, chat_id, user_id, \
     payload, status, attempts, next_attempt_at, last_error, dedupe_key, created_at, updated_at, \
     done_at, lease_until, first_failed_at";

/// An effect row, as the worker reads it and `GET /api/effects` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Effect {
    pub id: i64,
    pub kind: String,
    pub membership_id: Option<i64>,
    pub payment_id: Option<i64>,
    pub order_id: Option<i64>,
    pub chat_id: Option<i64>,
    pub user_id: i64,
    pub payload: Value,
    /// `pending`, `done` or `failed` (the dead letter).
    pub status: String,
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
    /// failures are retried until it is [`worker::RETRY_HORIZON`] old.
    pub first_failed_at: Option<DateTime<Utc>>,
}

impl Effect {
    /// Reads a row selected with [`COLUMNS`].
    pub fn from_row(r: &Row) -> Effect {
        Effect {
            id: r.get(0),
            kind: r.get(1),
            membership_id: r.get(2),
            payment_id: r.get(3),
            order_id: r.get(4),
            chat_id: r.get(5),
            user_id: r.get(6),
            payload: r.get(7),
            status: r.get(8),
            attempts: r.get(9),
            next_attempt_at: r.get(10),
            last_error: r.get(11),
            dedupe_key: r.get(12),
            created_at: r.get(13),
            updated_at: r.get(14),
            done_at: r.get(15),
            lease_until: r.get(16),
            first_failed_at: r.get(17),
        }
    }

    /// The `expires_at` the effect was enqueued for (payload), if any.
    pub fn payload_expires_at(&self) -> Option<DateTime<Utc>> {
        self.payload
            .get("expires_at")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }
}

/// An effect to enqueue.
#[derive(Debug, Clone)]
pub struct NewEffect {
    pub kind: Kind,
    pub membership_id: Option<i64>,
    pub payment_id: Option<i64>,
    pub order_id: Option<i64>,
    pub chat_id: Option<i64>,
    pub user_id: i64,
    pub payload: Value,
    /// At most one effect per key ever; `None` for no deduplication.
    pub dedupe_key: Option<String>,
}

/// Inserts one effect, due now. Returns its id, or `None` when an effect with the same
/// `dedupe_key` already exists (nothing inserted). Call it inside the transaction of the change
/// that needs it.
pub async fn enqueue(client: &impl GenericClient, e: &NewEffect) -> Result<Option<i64>, ApiError> {
    let row = client
        .query_opt(
            "INSERT INTO effects
                 (kind, membership_id, payment_id, order_id, chat_id, user_id, payload, dedupe_key)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (dedupe_key) DO NOTHING
             RETURNING id",
            &[
                &e.kind.as_str(),
                &e.membership_id,
                &e.payment_id,
                &e.order_id,
                &e.chat_id,
                &e.user_id,
                &e.payload,
                &e.dedupe_key,
            ],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// The dedupe key of the effect of one membership transition: `{what}:{membership}:ev{event}`,
/// where `event` is the id of the transition's `membership_events` row. The sweep's SQL
/// ([`SWEEP_EFFECTS_CTE`]) spells it the same way.
fn transition_key(what: &str, membership_id: i64, event_id: i64) -> String {
    format!("{what}:{membership_id}:ev{event_id}")
}

/// What a membership change asks Telegram to do, if anything (pure; see [`on_membership_change`]).
pub fn effect_of_change(before: Option<&Membership>, after: &Membership) -> Option<Kind> {
    let was = before.map(|b| b.status.as_str());
    match (was, after.status.as_str()) {
        (None | Some("expired"), "active") => Some(Kind::Grant),
        (Some("active" | "grace"), "active")
            if before.is_some_and(|b| after.expires_at > b.expires_at) =>
        {
            Some(Kind::RenewalReceipt)
        }
        (Some("active" | "grace"), "expired") => Some(Kind::Revoke),
        (Some("active"), "grace") => Some(Kind::GraceNotice),
        _ => None,
    }
}

/// Hook of [`crate::memberships::record_event`], the single writer of membership changes made
/// by payments and staff: enqueues the grant, receipt, revoke or grace notice the change asks
/// for, in the caller's transaction, keyed on the change's event `event_id`
/// ([`transition_key`]): one effect per transition.
pub async fn on_membership_change(
    client: &impl GenericClient,
    before: Option<&Membership>,
    after: &Membership,
    cause: Cause,
    event_id: i64,
) -> Result<(), ApiError> {
    let Some(kind) = effect_of_change(before, after) else {
        return Ok(());
    };
    let payment_id = match cause {
        Cause::Payment(id) => Some(id),
        Cause::Staff => None,
    };
    let what = match kind {
        Kind::Grant => "grant",
        Kind::RenewalReceipt => "receipt",
        Kind::Revoke => "revoke",
        Kind::GraceNotice => "grace",
        _ => return Ok(()),
    };
    let key = transition_key(what, after.id, event_id);
    // One statement reads the Telegram ids and inserts, so the effect names who they are now.
    // The channel row is key-share locked, as a foreign key would lock it: a change of its
    // `telegram_chat_id` (which locks the row `FOR UPDATE`, then refuses while the channel has
    // live memberships or pending effects for its chat) waits for this transaction, or this
    // statement waits for it and reads the new chat. So a membership made live concurrently
    // with a chat change can never be left with an effect aimed at the old chat.
    // No `ON CONFLICT`: the key is new by construction (an event id); a clash is a bug to see.
    client
        .execute(
            "INSERT INTO effects (kind, membership_id, payment_id, chat_id, user_id, payload, dedupe_key)
             SELECT $2, m.id, $3, c.telegram_chat_id, s.telegram_user_id, $4, $5
             FROM memberships m
             JOIN subscribers s ON s.id = m.subscriber_id
             JOIN channels c ON c.id = m.channel_id
             WHERE m.id = $1
             FOR KEY SHARE OF c",
            &[
                &after.id,
                &kind.as_str(),
                &payment_id,
                &json!({"expires_at": after.expires_at}),
                &key,
            ],
        )
        .await?;
    Ok(())
}

/// The sweep's effects, as the last data-modifying CTE of its batch write
/// ([`crate::sweep::apply_batch`]): a revoke for every membership it moved to `expired` and a
/// grace notice for every one it moved to `grace`, in the batch's statement and so in its
/// transaction. It reads the CTEs `updated(id, subscriber_id, channel_id, from_status, status,
/// expires_at)` — the rows the `UPDATE` actually changed — and `events(id, membership_id)` — the
/// `membership_events` rows written for them ([`crate::sweep::SWEEP_EVENTS_CTE`]) — so it needs
/// no second look at `memberships`. Each effect is keyed on its transition's event exactly as
/// [`transition_key`] spells it (`revoke:{membership}:ev{event}`), so a membership expired again
/// after a staff re-activation gets a second revoke instead of being deduplicated into the
/// first. The payload and the Telegram ids are built in the same statement, so the effect names
/// who they are now. (No channel lock here, unlike [`on_membership_change`]: the sweep only
/// moves live memberships, which block a chat change until it commits and whose pending effects
/// block it after.) Rows are inserted in membership id order.
pub const SWEEP_EFFECTS_CTE: &str = "sweep_effects AS (
    INSERT INTO effects (kind, membership_id, chat_id, user_id, payload, dedupe_key)
    SELECT e.kind, u.id, c.telegram_chat_id, s.telegram_user_id,
           jsonb_build_object('expires_at',
               to_char(u.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')),
           e.what || ':' || u.id || ':ev' || ev.id
    FROM updated u
    JOIN events ev ON ev.membership_id = u.id
    CROSS JOIN LATERAL (
        SELECT CASE WHEN u.status = 'expired' THEN 'revoke' ELSE 'grace_notice' END,
               CASE WHEN u.status = 'expired' THEN 'revoke' ELSE 'grace' END
    ) AS e(kind, what)
    JOIN subscribers s ON s.id = u.subscriber_id
    JOIN channels c ON c.id = u.channel_id
    WHERE (u.from_status IN ('active', 'grace') AND u.status = 'expired')
       OR (u.from_status = 'active' AND u.status = 'grace')
    ORDER BY u.id
)";

/// The revokes of deleted memberships, as a data-modifying CTE after the `DELETE` that names
/// them ([`crate::memberships::delete`], [`crate::memberships::delete_of_subscriber`]): it reads
/// the CTE `gone(id, subscriber_id, channel_id, status, expires_at)` — the rows the `DELETE`
/// actually removed, as they were when removed — and enqueues one revoke
/// (`revoke:{membership}:deleted`) for each one that was live (active or grace), in the
/// deletion's transaction. A deleted expired membership needs none: its expiry enqueued one.
///
/// The effect outlives the row: it carries the chat and the user, its `membership_id` is NULL
/// (the row it would name is being deleted by the same statement; `ON DELETE SET NULL` would
/// clear it anyway) and the membership id is kept in the payload. The worker performs a revoke
/// whose membership is gone.
pub const DELETED_REVOKES_CTE: &str = "deleted_revokes AS (
    INSERT INTO effects (kind, chat_id, user_id, payload, dedupe_key)
    SELECT 'revoke', c.telegram_chat_id, s.telegram_user_id,
           jsonb_build_object('membership_id', g.id, 'deleted', true, 'expires_at',
               to_char(g.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')),
           'revoke:' || g.id || ':deleted'
    FROM gone g
    JOIN subscribers s ON s.id = g.subscriber_id
    JOIN channels c ON c.id = g.channel_id
    WHERE g.status IN ('active', 'grace')
    ORDER BY g.id
)";

/// True when effects can be performed: a bot token is set, or dry-run is on.
pub fn outbox_enabled(config: &Config) -> bool {
    config.telegram_bot_token.is_some() || config.telegram_dry_run
}

/// Hook of the Telegram door for a `chat_join_request`. With a bot configured
/// ([`outbox_enabled`]) the decision goes through the outbox — approve or decline, retried until
/// Telegram confirms, which a webhook reply cannot report — and this returns `true`: the door
/// answers `{}`. Without one, nothing is enqueued and this returns `false`: the webhook reply is
/// then the only way to answer, so the door keeps answering in its body (API.md door 3).
/// Telegram's redelivery of the same request (same chat, user and `date`) enqueues nothing new.
pub async fn enqueue_join_decision(
    config: &Config,
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
    approve: bool,
    request_date: Option<i64>,
) -> Result<bool, ApiError> {
    if !outbox_enabled(config) {
        return Ok(false);
    }
    let kind = if approve {
        Kind::JoinApprove
    } else {
        Kind::JoinDecline
    };
    enqueue(
        client,
        &NewEffect {
            kind,
            membership_id: None,
            payment_id: None,
            order_id: None,
            chat_id: Some(chat_id),
            user_id,
            payload: json!({"request_date": request_date}),
            dedupe_key: request_date.map(|d| format!("join:{chat_id}:{user_id}:{d}")),
        },
    )
    .await?;
    Ok(true)
}

/// Rows one scan statement enqueues at most; a scan repeats until a statement finds fewer.
const SCAN_BATCH: i64 = 1000;

/// Enqueues a reminder for every active membership of an active channel whose `expires_at`
/// is within `reminder_days` from now, once per (membership, expiry) — so once per period: a
/// renewal moves `expires_at` and the next period gets its own reminder. Returns how many.
pub async fn enqueue_due_reminders(
    client: &impl GenericClient,
    reminder_days: u32,
) -> Result<u64, ApiError> {
    if reminder_days == 0 {
        return Ok(0);
    }
    let days = reminder_days as i32;
    insert_in_batches(
        client,
        "INSERT INTO effects (kind, membership_id, chat_id, user_id, payload, dedupe_key)
                 SELECT 'reminder', d.id, d.telegram_chat_id, d.telegram_user_id,
                        jsonb_build_object('expires_at', d.expires_at), d.key
                 FROM (
                     SELECT m.id, c.telegram_chat_id, s.telegram_user_id, m.expires_at,
                            'reminder:' || m.id || ':'
                              || (extract(epoch FROM m.expires_at) * 1000000)::bigint AS key
                     FROM memberships m
                     JOIN subscribers s ON s.id = m.subscriber_id
                     JOIN channels c ON c.id = m.channel_id
                     WHERE m.status = 'active' AND c.active
                       AND m.expires_at > statement_timestamp()
                       AND m.expires_at <= statement_timestamp() + make_interval(days => $1)
                 ) AS d
                 WHERE NOT EXISTS (SELECT 1 FROM effects e WHERE e.dedupe_key = d.key)
                 LIMIT $2
                 ON CONFLICT (dedupe_key) DO NOTHING",
        &[&days, &SCAN_BATCH],
    )
    .await
}

/// Enqueues one refund for every `refund_pending` Telegram Stars payment that has none yet
/// (the payment row itself is the durable intent: the payment core marks it in its own
/// transaction). The refund goes to the payer the door recorded. Returns how many.
pub async fn enqueue_pending_refunds(client: &impl GenericClient) -> Result<u64, ApiError> {
    insert_in_batches(
        client,
        "INSERT INTO effects (kind, payment_id, order_id, user_id, payload, dedupe_key)
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
                 ON CONFLICT (dedupe_key) DO NOTHING",
        &[&SCAN_BATCH],
    )
    .await
}

/// Runs an `INSERT … SELECT … LIMIT` scan whose limit parameter is [`SCAN_BATCH`] again until a
/// round inserts fewer than that, so no single statement enqueues an unbounded number of rows.
async fn insert_in_batches(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, ApiError> {
    let mut total = 0;
    loop {
        let n = client.execute(sql, params).await?;
        total += n;
        if (n as i64) < SCAN_BATCH {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn m(status: &str, expires_in_days: i64) -> Membership {
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        Membership {
            id: 1,
            subscriber_id: 1,
            channel_id: 1,
            status: status.into(),
            expires_at: t0 + Duration::days(expires_in_days),
            created_at: t0,
            updated_at: t0,
        }
    }

    #[test]
    fn changes_map_to_effects() {
        use Kind::*;
        let cases: &[(Option<Membership>, Membership, Option<Kind>)] = &[
            (None, m("active", 30), Some(Grant)),
            (Some(m("expired", 0)), m("active", 30), Some(Grant)),
            (Some(m("active", 5)), m("active", 35), Some(RenewalReceipt)),
            (Some(m("grace", -1)), m("active", 29), Some(RenewalReceipt)),
            // A staff back-dating (or a no-op) is not a renewal.
            (Some(m("active", 30)), m("active", 1), None),
            (Some(m("active", 30)), m("active", 30), None),
            (Some(m("active", 30)), m("expired", 30), Some(Revoke)),
            (Some(m("grace", 0)), m("expired", 0), Some(Revoke)),
            (Some(m("active", 0)), m("grace", 0), Some(GraceNotice)),
            (Some(m("expired", 0)), m("expired", 5), None),
            (Some(m("expired", 0)), m("grace", 5), None),
            (None, m("expired", 0), None),
        ];
        for (before, after, want) in cases {
            assert_eq!(
                effect_of_change(before.as_ref(), after),
                *want,
                "{:?} → {}",
                before.as_ref().map(|b| &b.status),
                after.status
            );
        }
    }

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
        assert_eq!(transition_key("revoke", 9, 41), "revoke:9:ev41");
        assert_ne!(
            transition_key("revoke", 9, 41),
            transition_key("revoke", 9, 44),
            "a second expiry of one membership is a second revoke"
        );
    }
}
