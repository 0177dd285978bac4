//! Memberships: the row that says who may be in which channel until when. This module is the
//! one home of membership reads and writes — grants and extensions (payments and staff grants,
//! [`extend`]), staff corrections ([`write_correction`]), what a payment refunded at the gateway
//! bought taken back ([`take_back`]), deletions ([`delete`]), the reads of the staff API, the
//! payment core, the seat rule, join requests and the effects worker — and of
//! the events and Telegram effects of every change ([`record_event`]). The one exception is the
//! sweep's batch write, a single statement that writes its transitions, their events and their
//! effects together (`crate::access::sweep::apply_batch`); it selects its rows with
//! [`holds_access_sql!`] like everything here.
//!
//! **Live.** A membership is *live* when its status is `active` or `grace` and database time is
//! before `expires_at` plus the channel's grace period ([`live_sql!`], [`Membership::is_live_at`]).
//! It is the one test of "may this person be in the channel now", used by the seat rule (seats
//! taken, and whether a buyer is already a member) and by join-request approval (the door and
//! the worker): the sweep runs only now and then, and a membership it has not yet expired must
//! neither let a former member back in nor keep a seat. The status half alone
//! ([`Status::holds_access`], [`holds_access_sql!`]) says something else: the record has not been
//! ended yet, so its member was let in and no revoke has been decided. Whatever must not lose a
//! revoke uses it — the sweep's candidates, the revoke of a deleted membership, the refusal to
//! change a subscriber's `telegram_user_id` or a channel's chat while such a membership exists,
//! the effect a change asks for, the worker's "skip this revoke, the member is back" check
//! (asked of the revoke's own chat and Telegram account).
//!
//! **Lifetime.** A lifetime membership has `expires_at = 'infinity'` ([`Expiry::Never`]; a grant
//! of [`Term::Lifetime`]). Every SQL test of time already handles it — it is never `<=` a real
//! time (the sweep and reminders never select it) and `infinity + grace` is `infinity` (it is
//! live while its status holds access) — and every read into Rust goes through [`Expiry`].
//! Buying again what a buyer holds for life is refused ([`lifetime_in_every`]).
//!
//! Every change happens inside a transaction that already holds
//! `pg_advisory_xact_lock(subscriber_id, channel_id)` ([`crate::db::lock_pair`]) — and, on the
//! payment path, the order and channel locks after it — so this module takes only the last lock
//! of the order: the membership row itself. Each change writes one `membership_events` row in
//! the same transaction ([`record_event`]), the audit trail staff read and the one place later
//! side effects hang off: the Telegram effect of a change is decided here
//! ([`effect_of_change`]) and enqueued in the outbox ([`crate::outbox::effects`]) keyed on its event. A
//! deletion leaves no event (events go with the row), so [`delete`] enqueues the revoke of a
//! membership that still held access itself.

use chrono::{DateTime, Duration, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;
use tokio_postgres::Row;

pub use crate::common::expiry::Expiry;
use crate::{
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db::{self, FromRow},
    outbox::effects::{self, Kind},
};

crate::text_enum! {
    /// A membership's status (API.md "Membership lifecycle"): `active` until `expires_at`,
    /// then `grace` for the channel's grace period, then `expired` — moved on by the sweep
    /// ([`crate::access::sweep::next_sweep_status`]), back to `active` by a payment or staff.
    pub enum Status {
        Active => "active",
        Grace => "grace",
        Expired => "expired",
    }
}

impl Status {
    /// Whether a membership with this status still holds access as far as its record says: it
    /// has not been ended (by the sweep or staff), so its member was let in and no revoke has
    /// been decided. The status half of "live" (see the module doc).
    pub fn holds_access(self) -> bool {
        matches!(self, Status::Active | Status::Grace)
    }
}

/// SQL: membership `$m` still holds access by its status (see [`Status::holds_access`]).
/// `holds_access_sql!("m")`, for a membership row aliased `m`. Spelled `<> 'expired'` — the
/// same rows as `IN ('active', 'grace')` under the column's CHECK — because that is the
/// predicate of the partial indexes the sweep and the seat count use
/// (`memberships_sweep_idx`, `memberships_live_channel_expiry_idx`).
macro_rules! holds_access_sql {
    ($m:literal) => {
        concat!($m, ".status <> 'expired'")
    };
}
pub(crate) use holds_access_sql;

/// SQL: membership `$m` is live — it holds access by its status and database time is before
/// its `expires_at` plus the grace period of its channel `$c` (joined by the caller). The one
/// definition of a live member (see the module doc). `live_sql!("m", "c")`.
macro_rules! live_sql {
    ($m:literal, $c:literal) => {
        concat!(
            $crate::access::memberships::holds_access_sql!($m),
            " AND statement_timestamp() < ",
            $m,
            ".expires_at + make_interval(days => ",
            $c,
            ".grace_period_days)"
        )
    };
}
pub(crate) use live_sql;

/// The select list of [`Membership`] (a macro, so SQL constants can splice it).
macro_rules! membership_columns {
    () => {
        "id, subscriber_id, channel_id, status, expires_at, created_at, updated_at"
    };
}

/// A membership as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "subscriber_id": 1, "channel_id": 1, "status": "active",
    "expires_at": "2025-01-31T10:00:00Z", "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:00:00Z"}))]
pub struct Membership {
    pub id: i64,
    pub subscriber_id: i32,
    pub channel_id: i32,
    pub status: Status,
    /// When the term ends; `"infinity"` for lifetime access.
    pub expires_at: Expiry,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl FromRow for Membership {
    const COLUMNS: &'static str = membership_columns!();

    fn from_row(r: &Row) -> Result<Membership, tokio_postgres::Error> {
        Ok(Membership {
            id: r.try_get("id")?,
            subscriber_id: r.try_get("subscriber_id")?,
            channel_id: r.try_get("channel_id")?,
            status: r.try_get("status")?,
            expires_at: r.try_get("expires_at")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }
}

impl Membership {
    /// Whether the membership is live at `now` in a channel with `grace_period_days` (the Rust
    /// twin of [`live_sql!`]; a negative grace counts as zero; a lifetime one is live while its
    /// status holds access).
    pub fn is_live_at(&self, now: DateTime<Utc>, grace_period_days: i32) -> bool {
        let grace = Duration::days(i64::from(grace_period_days.max(0)));
        self.status.holds_access()
            && self.expires_at.at().is_none_or(|expires_at| {
                expires_at
                    .checked_add_signed(grace)
                    .is_none_or(|end| now < end)
            })
    }

    /// Whether this is lifetime access that still holds access: what buying again is refused
    /// for ([`lifetime_in_every`]).
    pub fn is_live_lifetime(&self) -> bool {
        self.status.holds_access() && self.expires_at.is_never()
    }
}

crate::text_enum! {
    /// Who made a change, as its `membership_events` row records it.
    pub enum EventCause {
        Payment => "payment",
        Sweep => "sweep",
        Staff => "staff",
        Trial => "trial",
        Promo => "promo",
        /// The payment that bought the term was refunded at the gateway.
        Refund => "refund",
    }
}

/// Why a membership changed (the changes this module writes; the sweep writes its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Payment(i64),
    Staff,
    /// A trial plan's grant.
    Trial,
    /// A free order's grant (a 100 % promo code).
    Promo,
    /// The payment's refund at the gateway: what it bought taken back ([`take_back`]).
    Refund(i64),
}

impl Cause {
    fn parts(self) -> (EventCause, Option<i64>) {
        match self {
            Cause::Payment(id) => (EventCause::Payment, Some(id)),
            Cause::Staff => (EventCause::Staff, None),
            Cause::Trial => (EventCause::Trial, None),
            Cause::Promo => (EventCause::Promo, None),
            Cause::Refund(id) => (EventCause::Refund, Some(id)),
        }
    }
}

/// How long a grant lasts: days from `GREATEST(current expiry, database now)`, or for life
/// (`expires_at = 'infinity'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    Days(i32),
    Lifetime,
}

impl Term {
    /// A plan's term: `period_days`, or lifetime when it has none.
    pub fn of_period(period_days: Option<i32>) -> Term {
        period_days.map_or(Term::Lifetime, Term::Days)
    }
}

/// One change of a membership, as staff read its history.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = MembershipEvent)]
pub struct Event {
    pub id: i64,
    pub membership_id: i64,
    pub from_status: Option<Status>,
    pub to_status: Status,
    pub expires_at_before: Option<Expiry>,
    pub expires_at_after: Expiry,
    pub cause: EventCause,
    pub payment_id: Option<i64>,
    pub at: DateTime<Utc>,
}

impl FromRow for Event {
    const COLUMNS: &'static str = "id, membership_id, from_status, to_status, \
         expires_at_before, expires_at_after, cause, payment_id, at";

    fn from_row(r: &Row) -> Result<Event, tokio_postgres::Error> {
        Ok(Event {
            id: r.try_get("id")?,
            membership_id: r.try_get("membership_id")?,
            from_status: r.try_get("from_status")?,
            to_status: r.try_get("to_status")?,
            expires_at_before: r.try_get("expires_at_before")?,
            expires_at_after: r.try_get("expires_at_after")?,
            cause: r.try_get("cause")?,
            payment_id: r.try_get("payment_id")?,
            at: r.try_get("at")?,
        })
    }
}

// ---- reads ----

const GET_SQL: &str = concat!(
    "SELECT ",
    membership_columns!(),
    " FROM memberships WHERE id = $1"
);
const LIST_SQL: &str = concat!(
    "SELECT ",
    membership_columns!(),
    " FROM memberships
     WHERE id > $1
       AND ($2::integer IS NULL OR subscriber_id = $2)
       AND ($3::integer IS NULL OR channel_id = $3)
       AND ($4::text IS NULL OR status = $4::text)
       AND ($6::timestamptz IS NULL OR created_at >= $6)
       AND ($7::timestamptz IS NULL OR created_at < $7)
     ORDER BY id LIMIT $5"
);
const OF_PAIR_SQL: &str = concat!(
    "SELECT ",
    membership_columns!(),
    " FROM memberships WHERE subscriber_id = $1 AND channel_id = $2"
);
const LOCK_SQL: &str = concat!(
    "SELECT ",
    membership_columns!(),
    " FROM memberships WHERE subscriber_id = $1 AND channel_id = $2 FOR UPDATE"
);
const PAIR_SQL: &str = "SELECT subscriber_id, channel_id FROM memberships WHERE id = $1";
const EVENTS_SQL: &str = "SELECT id, membership_id, from_status, to_status, expires_at_before,
            expires_at_after, cause, payment_id, at
     FROM membership_events WHERE membership_id = $1 AND id > $2
     ORDER BY id LIMIT $3";

/// The membership with this id, if any.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Membership>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub subscriber_id: Option<i32>,
    pub channel_id: Option<i32>,
    pub status: Option<Status>,
    /// Created at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Created before this time.
    pub to: Option<DateTime<Utc>>,
}

/// Up to `limit` memberships with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Membership>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.subscriber_id,
            &filter.channel_id,
            &filter.status,
            &limit,
            &filter.from,
            &filter.to,
        ],
    )
    .await
}

/// Up to `limit` events of membership `id` with an id above `after`, oldest first.
pub async fn events(
    client: &impl GenericClient,
    id: i64,
    after: i64,
    limit: i64,
) -> Result<Vec<Event>, ApiError> {
    db::all(client, EVENTS_SQL, &[&id, &after, &limit]).await
}

/// The membership of (subscriber, channel) as it stands, without a lock (the payment core's
/// answer for a payment that changed nothing).
pub async fn of_pair(
    client: &impl GenericClient,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
) -> Result<Option<Membership>, ApiError> {
    db::opt(client, OF_PAIR_SQL, &[&subscriber_id, &channel_id]).await
}

/// The (subscriber, channel) pair of membership `id`, read without a lock so the pair lock can
/// be taken first (a pair never changes; only a deletion can intervene). `None`: no such row.
pub async fn pair_of(
    tx: &Transaction<'_>,
    id: i64,
) -> Result<Option<(SubscriberId, ChannelId)>, ApiError> {
    let row = db::row_opt(tx, PAIR_SQL, &[&id]).await?;
    Ok(match row {
        Some(r) => Some((r.try_get("subscriber_id")?, r.try_get("channel_id")?)),
        None => None,
    })
}

const LOCK_SUBSCRIBER_SQL: &str = "SELECT 1 FROM subscribers WHERE id = $1 FOR KEY SHARE";

/// Locks and reads the membership of (subscriber, channel), if there is one, after a key-share
/// lock of the subscriber row (before the membership's, as [`extend`] takes it): the effect of
/// the change that follows names the subscriber's Telegram account, which then cannot change
/// until this transaction ends (see [`enqueue_effect`]). The caller must already hold the
/// pair's advisory lock (and the channel's, [`crate::orders::seats::lock_channel_terms`]).
pub async fn lock(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
) -> Result<Option<Membership>, ApiError> {
    db::execute(tx, LOCK_SUBSCRIBER_SQL, &[&subscriber_id]).await?;
    db::opt(tx, LOCK_SQL, &[&subscriber_id, &channel_id]).await
}

const IS_LIVE_SQL: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM memberships m JOIN channels c ON c.id = m.channel_id
                    WHERE m.subscriber_id = $1 AND m.channel_id = $2 AND ",
    live_sql!("m", "c"),
    ") AS found"
);

/// True when the subscriber is a live member of the channel (see the module doc). The seat
/// rule calls it holding the pair lock, so the answer holds for the rest of the transaction.
pub async fn is_live(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
) -> Result<bool, ApiError> {
    Ok(db::row_one(tx, IS_LIVE_SQL, &[&subscriber_id, &channel_id])
        .await?
        .try_get("found")?)
}

/// SQL: the channels subscriber `$s` holds live lifetime access to, ascending (a query:
/// [`lifetime_channels`]'s, or an `ARRAY(…)` of another statement). `lifetime_channels_sql!("$1")`.
macro_rules! lifetime_channels_sql {
    ($s:literal) => {
        concat!(
            "SELECT m.channel_id FROM memberships m
             WHERE m.subscriber_id = ",
            $s,
            " AND m.expires_at = 'infinity' AND ",
            $crate::access::memberships::holds_access_sql!("m"),
            " ORDER BY m.channel_id"
        )
    };
}
pub(crate) use lifetime_channels_sql;

const LIFETIME_CHANNELS_SQL: &str = lifetime_channels_sql!("$1");

/// The channels the subscriber holds live lifetime access to (as [`lifetime_in_every`] counts
/// it): what the bot's catalogue and buy press show as held for life.
pub async fn lifetime_channels(
    client: &impl GenericClient,
    subscriber_id: SubscriberId,
) -> Result<Vec<i32>, ApiError> {
    db::rows(client, LIFETIME_CHANNELS_SQL, &[&subscriber_id])
        .await?
        .iter()
        .map(|r| r.try_get("channel_id").map_err(ApiError::from))
        .collect()
}

const LIFETIME_IN_EVERY_SQL: &str = concat!(
    "SELECT count(*) = (SELECT count(DISTINCT c) FROM unnest($2::integer[]) AS c) AS found
     FROM memberships m
     WHERE m.subscriber_id = $1 AND m.channel_id = ANY($2::integer[])
       AND m.expires_at = 'infinity' AND ",
    holds_access_sql!("m"),
);

/// True when the subscriber holds live lifetime access ([`Membership::is_live_lifetime`]) to
/// every one of `channel_ids` (none given: false): an order or a payment of them would buy
/// nothing. A lifetime membership is live exactly while its status holds access (`infinity`
/// plus any grace is never reached), so this is [`live_sql!`] for such rows. Order creation
/// asks it without the pair lock (a hint: the payment's own check decides); the payment core
/// and the pre-checkout ask it holding the pair lock.
pub async fn lifetime_in_every(
    client: &impl GenericClient,
    subscriber_id: SubscriberId,
    channel_ids: &[i32],
) -> Result<bool, ApiError> {
    if channel_ids.is_empty() {
        return Ok(false);
    }
    Ok(db::row_one(
        client,
        LIFETIME_IN_EVERY_SQL,
        &[&subscriber_id, &channel_ids],
    )
    .await?
    .try_get("found")?)
}

const IS_LIVE_IN_CHAT_SQL: &str = concat!(
    "SELECT EXISTS (
         SELECT 1 FROM memberships m
         JOIN subscribers s ON s.id = m.subscriber_id
         JOIN channels c ON c.id = m.channel_id
         WHERE s.telegram_user_id = $1 AND c.telegram_chat_id = $2 AND ",
    live_sql!("m", "c"),
    ") AS found"
);

/// True when Telegram user `user_id` (a subscriber by `telegram_user_id`) is a live member of
/// the channel of chat `chat_id`: whom a join request lets in. Reads without locks.
pub async fn is_live_in_chat(
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
) -> Result<bool, ApiError> {
    Ok(
        db::row_one(client, IS_LIVE_IN_CHAT_SQL, &[&user_id, &chat_id])
            .await?
            .try_get("found")?,
    )
}

const SUBSCRIBER_HOLDS_ACCESS_SQL: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM memberships m WHERE m.subscriber_id = $1 AND ",
    holds_access_sql!("m"),
    ") AS found"
);

/// True when some membership of the subscriber still holds access (active or grace): its
/// member is in a chat under the subscriber's current Telegram account, and a revoke may still
/// be owed to that account.
pub async fn subscriber_holds_access(
    tx: &Transaction<'_>,
    subscriber_id: i32,
) -> Result<bool, ApiError> {
    Ok(
        db::row_one(tx, SUBSCRIBER_HOLDS_ACCESS_SQL, &[&subscriber_id])
            .await?
            .try_get("found")?,
    )
}

const CHANNEL_HOLDS_ACCESS_SQL: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM memberships m WHERE m.channel_id = $1 AND ",
    holds_access_sql!("m"),
    ") AS found"
);

/// True when some membership of the channel still holds access (active or grace): its member
/// is in the channel's current chat, and a revoke may still be owed there.
pub async fn channel_holds_access(tx: &Transaction<'_>, channel_id: i32) -> Result<bool, ApiError> {
    Ok(db::row_one(tx, CHANNEL_HOLDS_ACCESS_SQL, &[&channel_id])
        .await?
        .try_get("found")?)
}

/// A membership of a channel as an audit of its chat sees it: whose it is (the subscriber's
/// Telegram account now) and whether it is live now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSubject {
    pub membership_id: i64,
    pub subscriber_id: i32,
    pub telegram_user_id: i64,
    pub live: bool,
}

impl FromRow for AuditSubject {
    const COLUMNS: &'static str = "membership_id, subscriber_id, telegram_user_id, live";

    fn from_row(r: &Row) -> Result<AuditSubject, tokio_postgres::Error> {
        Ok(AuditSubject {
            membership_id: r.try_get("membership_id")?,
            subscriber_id: r.try_get("subscriber_id")?,
            telegram_user_id: r.try_get("telegram_user_id")?,
            live: r.try_get("live")?,
        })
    }
}

const AUDIT_SUBJECTS_SQL: &str = concat!(
    "SELECT m.id AS membership_id, m.subscriber_id, s.telegram_user_id, (",
    live_sql!("m", "c"),
    ") AS live
     FROM memberships m
     JOIN subscribers s ON s.id = m.subscriber_id
     JOIN channels c ON c.id = m.channel_id
     WHERE m.channel_id = $1
       AND ($2::bigint[] IS NULL OR s.telegram_user_id = ANY($2::bigint[]))
     ORDER BY s.telegram_user_id"
);

/// Everyone who ever had a membership of channel `channel_id` (expired ones included: one row
/// per subscriber, a membership being unique per pair), by Telegram user id, with whether that
/// membership is live now ([`live_sql!`]); only the accounts in `users` when given. What an
/// audit of the channel's chat asks Telegram about. Reads without locks.
pub async fn audit_subjects(
    client: &impl GenericClient,
    channel_id: i32,
    users: Option<&[i64]>,
) -> Result<Vec<AuditSubject>, ApiError> {
    db::all(client, AUDIT_SUBJECTS_SQL, &[&channel_id, &users]).await
}

/// A membership as the effects worker needs it before acting: as it is now, with its
/// channel's title and join link and its subscriber's Telegram account now — which differs
/// from an effect's `user_id` when the subscriber's `telegram_user_id` changed since the effect
/// was enqueued (the membership is then another account's).
#[derive(Debug, Clone)]
pub struct EffectView {
    pub status: Status,
    pub expires_at: Expiry,
    pub channel_id: i32,
    pub title: String,
    pub invite_link: Option<String>,
    pub telegram_user_id: i64,
    /// The subscriber's remembered language (`None`: the default): a message is said in the
    /// language the buyer has when it is sent.
    pub language: Option<crate::present::locale::Language>,
    /// The channel's title in other languages.
    pub translations: crate::present::translations::Translations,
}

impl EffectView {
    /// The channel's title in the language the buyer reads: `(language, title)`.
    pub fn speaking(&self) -> (crate::present::locale::Language, &str) {
        let l = crate::present::locale::Language::choose(self.language, None);
        (l, self.translations.title(l, &self.title))
    }
}

impl FromRow for EffectView {
    const COLUMNS: &'static str = "status, expires_at, channel_id, title, invite_link, \
         telegram_user_id, language, translations";

    fn from_row(r: &Row) -> Result<EffectView, tokio_postgres::Error> {
        Ok(EffectView {
            status: r.try_get("status")?,
            expires_at: r.try_get("expires_at")?,
            channel_id: r.try_get("channel_id")?,
            title: r.try_get("title")?,
            invite_link: r.try_get("invite_link")?,
            telegram_user_id: r.try_get("telegram_user_id")?,
            language: r.try_get("language")?,
            translations: r.try_get("translations")?,
        })
    }
}

const VIEW_SQL: &str = "SELECT m.status, m.expires_at, c.id AS channel_id, c.title, c.invite_link,
            s.telegram_user_id, s.language, c.translations
     FROM memberships m
     JOIN channels c ON c.id = m.channel_id
     JOIN subscribers s ON s.id = m.subscriber_id
     WHERE m.id = $1";
const VIEW_IN_CHAT_SQL: &str =
    "SELECT m.status, m.expires_at, c.id AS channel_id, c.title, c.invite_link,
            s.telegram_user_id, s.language, c.translations
     FROM memberships m
     JOIN channels c ON c.id = m.channel_id
     JOIN subscribers s ON s.id = m.subscriber_id
     WHERE c.telegram_chat_id = $1 AND s.telegram_user_id = $2";

/// Membership `id` as the worker needs it; `None` when it was deleted.
pub async fn effect_view(
    client: &impl GenericClient,
    id: i64,
) -> Result<Option<EffectView>, ApiError> {
    db::opt(client, VIEW_SQL, &[&id]).await
}

/// The membership of Telegram user `user_id` (the subscriber whose account it is now) in the
/// channel of chat `chat_id`, if any, as [`effect_view`] reads it: what a revoke decides on.
pub async fn effect_view_in_chat(
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
) -> Result<Option<EffectView>, ApiError> {
    db::opt(client, VIEW_IN_CHAT_SQL, &[&chat_id, &user_id]).await
}

const EVENT_CAUSE_SQL: &str =
    "SELECT cause FROM membership_events WHERE id = $1 AND membership_id = $2";

/// Who made change `event_id` of membership `membership_id` (what an effect keyed on that event
/// tells the buyer about, `crate::outbox::effects::transition_event`); `None` when there is no such
/// event of that membership.
pub async fn event_cause(
    client: &impl GenericClient,
    membership_id: i64,
    event_id: i64,
) -> Result<Option<EventCause>, ApiError> {
    Ok(
        match db::row_opt(client, EVENT_CAUSE_SQL, &[&event_id, &membership_id]).await? {
            Some(r) => Some(r.try_get("cause")?),
            None => None,
        },
    )
}

// ---- writes ----

/// [`extend`] in one statement (one round trip): the membership as it was (`b`), the upsert
/// (`m`), its event (`ev`) and its effect (`fx`), returning the membership, the event's id and
/// the status and `expires_at` it had before. `$3` is the term in days, NULL for lifetime
/// (`'infinity'`). The effect is a receipt when the membership held access by its status
/// before, else a grant ([`effect_of_extension`]) — and none when a membership that held access
/// ends no later than before (a lifetime one extended again: `infinity + days` is `infinity`);
/// its row is built as [`enqueue_effect`] builds one (same payload, key, and channel and
/// subscriber locks).
///
/// The subscriber row is key-share locked first (`sub`, which the upsert reads its row from,
/// so the lock is taken before the membership row's): an upsert that updates an existing row
/// makes no foreign-key check, so nothing else would make it wait for a concurrent change of
/// the subscriber's `telegram_user_id` (which locks the row `FOR UPDATE`, then refuses while a
/// membership holds access). Either the change waits for this transaction and then sees the
/// membership live, or this statement waits for the change and its effect names the new
/// account (a locking read returns the newest row version). A subscriber deleted meanwhile
/// leaves `sub` empty and the statement writes nothing.
///
/// `b` is a plain read: the caller holds the pair's advisory lock, which every writer of this
/// membership takes first, so the statement's snapshot (taken after that lock) shows the row as
/// the upsert finds it. The upsert locks the row, last in the lock order.
const EXTEND_SQL: &str = include_str!("memberships/extend.sql");

/// Grants or extends: `expires_at = GREATEST(current, database now) + days`, `status = active`
/// (a lifetime membership stays lifetime: `infinity + days` is `infinity`).
/// The term starts when the change is applied, never at a time the caller was told about (a
/// gateway's `paid_at`): a delayed delivery must not eat days of the term, and a live membership
/// still extends from its own expiry. Writes the event and enqueues its effect, as
/// [`record_event`] does, in the same statement as the upsert ([`EXTEND_SQL`]). Returns the
/// membership and whether it was created. The caller holds the pair's advisory lock.
pub async fn extend(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
    days: i32,
    cause: Cause,
) -> Result<(Membership, bool), ApiError> {
    extend_at_least(tx, subscriber_id, channel_id, Term::Days(days), cause, None).await
}

/// What [`EXTEND_SQL`]'s parameters `$1`–`$11` are bound to, for one extension (and, in the same
/// places, those of the payment core's fast write, `payments/fast_write.sql`).
pub(crate) struct Extension {
    /// `$1`.
    subscriber_id: SubscriberId,
    /// `$2`.
    channel_id: ChannelId,
    /// `$3`: the term in days; NULL: lifetime.
    days: Option<i32>,
    /// `$4`: the status written.
    status: Status,
    /// `$5`: the event's cause.
    cause: EventCause,
    /// `$6`: the paying payment, if any.
    payment_id: Option<i64>,
    /// `$7`: the effect when the membership held access before.
    receipt: Kind,
    /// `$8`: the effect when it did not.
    grant: Kind,
    /// `$9`: the key prefix of `receipt`.
    receipt_prefix: &'static str,
    /// `$10`: the key prefix of `grant`.
    grant_prefix: &'static str,
    /// `$11`: the earliest end of the new term, if any.
    at_least: Option<DateTime<Utc>>,
}

impl Extension {
    /// The extension of the pair's membership by `term` for `cause`, ending no earlier than
    /// `at_least` (see [`extend_at_least`]); a term of less than a day is refused.
    pub(crate) fn new(
        subscriber_id: SubscriberId,
        channel_id: ChannelId,
        term: Term,
        cause: Cause,
        at_least: Option<DateTime<Utc>>,
    ) -> Result<Extension, ApiError> {
        let days = match term {
            Term::Days(days) if days < 1 => {
                return Err(ApiError::internal(
                    "a membership is extended by at least one day",
                ));
            }
            Term::Days(days) => Some(days),
            Term::Lifetime => None,
        };
        let (cause, payment_id) = cause.parts();
        // The statement picks one of the two when the term ends later (or the membership did
        // not hold access), and none otherwise ([`effect_of_extension`]).
        let later = |held| effect_of_extension(held, true).expect("a later term is told");
        let (receipt, grant) = (later(true), later(false));
        let prefix = |kind| effects::transition_prefix(kind).expect("a transition's effect");
        Ok(Extension {
            subscriber_id,
            channel_id,
            days,
            status: Status::Active,
            cause,
            payment_id,
            receipt,
            grant,
            receipt_prefix: prefix(receipt),
            grant_prefix: prefix(grant),
            at_least,
        })
    }

    /// The values of `$1`–`$11`, in order.
    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 11] {
        [
            &self.subscriber_id,
            &self.channel_id,
            &self.days,
            &self.status,
            &self.cause,
            &self.payment_id,
            &self.receipt,
            &self.grant,
            &self.receipt_prefix,
            &self.grant_prefix,
            &self.at_least,
        ]
    }
}

/// [`extend`] by `term`, with the new term ending no earlier than `at_least` when given: a Stars
/// subscription charge's membership lasts until the subscription's next renewal plus a slack
/// (`payments::star_subscriptions::SLACK_SECS`), however late the charge is applied.
/// [`Term::Lifetime`] sets `expires_at = 'infinity'` and `status = active` (`at_least` is moot),
/// with its event and its grant or receipt like any extension; extending a membership that is
/// already lifetime and holds access changes nothing but its status and `updated_at`, and
/// writes its event with no effect (there is nothing new to tell).
pub async fn extend_at_least(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
    term: Term,
    cause: Cause,
    at_least: Option<DateTime<Utc>>,
) -> Result<(Membership, bool), ApiError> {
    let extension = Extension::new(subscriber_id, channel_id, term, cause, at_least)?;
    let row = db::row_opt(tx, EXTEND_SQL, &extension.params()).await?;
    // No row: the subscriber was deleted after the caller looked it up.
    let row = row.ok_or(ApiError::NotFound("subscriber"))?;
    let after = Membership::from_row(&row)?;
    let status_before: Option<Status> = row.try_get("status_before")?;
    // The kind the statement chose, against the rule every other change follows (checked in
    // debug builds, so by every test that extends a membership; release builds skip the copy).
    #[cfg(debug_assertions)]
    {
        let before = match status_before {
            Some(status) => Some(Membership {
                status,
                expires_at: row.try_get("expires_at_before")?,
                ..after.clone()
            }),
            None => None,
        };
        debug_assert_eq!(
            effect_of_change(before.as_ref(), &after),
            effect_of_extension(
                before.as_ref().is_some_and(|b| b.status.holds_access()),
                before
                    .as_ref()
                    .is_none_or(|b| after.expires_at > b.expires_at)
            )
        );
    }
    Ok((after, status_before.is_none()))
}

/// The effect an extension asks for, decided by whether the membership held access by its
/// status before ([`Status::holds_access`]) and whether its term now ends later:
/// [`effect_of_change`] of a change to `active`. A grant when the membership is new or ended; a
/// receipt when its member is extended — every finite expiry ends later, since an extension
/// adds at least one day to `GREATEST(expiry, now)` or makes it lifetime; nothing when it was
/// lifetime already (the SQL of [`EXTEND_SQL`] makes the same choice).
fn effect_of_extension(held_access: bool, ends_later: bool) -> Option<Kind> {
    match (held_access, ends_later) {
        (false, _) => Some(Kind::Grant),
        (true, true) => Some(Kind::RenewalReceipt),
        (true, false) => None,
    }
}

const CORRECT_SQL: &str = concat!(
    "UPDATE memberships SET expires_at = COALESCE($2, expires_at),
         status = COALESCE($3, status), updated_at = statement_timestamp()
     WHERE id = $1 RETURNING ",
    membership_columns!()
);

/// A staff correction of the locked membership `before`: writes exactly the given
/// `expires_at` and/or `status` (no seat check, no extension) and records it as one `staff`
/// event. The caller holds the lock order up to the membership row ([`lock`]).
pub async fn write_correction(
    tx: &Transaction<'_>,
    before: &Membership,
    expires_at: Option<Expiry>,
    status: Option<Status>,
) -> Result<Membership, ApiError> {
    let after: Membership = db::one(tx, CORRECT_SQL, &[&before.id, &expires_at, &status]).await?;
    record_event(tx, Some(before), &after, Cause::Staff).await?;
    Ok(after)
}

const EXTENDED_BY_SQL: &str = "SELECT DISTINCT m.subscriber_id, m.channel_id
     FROM membership_events e JOIN memberships m ON m.id = e.membership_id
     WHERE e.payment_id = $1 AND e.cause = $2
     ORDER BY m.channel_id";

/// The (subscriber, channel) pairs of the memberships payment `payment_id` extended (its
/// `payment` events), in ascending channel id: a bundle's payment extended one per channel of
/// its plan. A membership deleted since is not among them (its events went with it). Read
/// without a lock; the caller locks the pairs in the lock order and then [`take_back`] reads
/// the events again under the membership's lock.
pub async fn extended_by(
    client: &impl GenericClient,
    payment_id: i64,
) -> Result<Vec<(SubscriberId, ChannelId)>, ApiError> {
    db::rows(
        client,
        EXTENDED_BY_SQL,
        &[&payment_id, &EventCause::Payment],
    )
    .await?
    .iter()
    .map(|r| Ok((r.try_get("subscriber_id")?, r.try_get("channel_id")?)))
    .collect()
}

/// What a payment bought in membership `$1` (its `payment` events, `$2` the payment): the time
/// each extension added — `expires_at_after − GREATEST(expires_at_before, at)`, since an
/// extension ends at `GREATEST(current, now) + term` and its event is written by the same
/// statement (`at` is that statement's now); a first grant has no `before` and `GREATEST`
/// skips the NULL — as an interval of plain microseconds (never calendar days, so the time
/// taken back is exactly the time added, whatever the session's time zone), and whether it made
/// the membership lifetime. An extension of a membership that was lifetime already bought
/// nothing. The new expiry is the current one minus that time, so what later payments added
/// stays; a lifetime purchase gives back the later of the expiry it replaced and now (what
/// earlier payments bought survives it), never later than the current expiry.
///
/// The status: `expired` (`$4`) when the new expiry is at or before now (its grace does not
/// apply: the term was never paid for), and also when the payment is what made the membership
/// hold access — its event starts from no membership or an `expired` one (staff may end one
/// whose `expires_at` is still ahead) — and nothing but the sweep or a refund changed it since:
/// a refund never leaves a membership better off than before the refunded payment. A later
/// payment, grant or staff change stands on its own and keeps the status. Nothing is written
/// when nothing changes (no such events, or a current expiry of `infinity` that a later
/// lifetime purchase set).
const TAKE_BACK_SQL: &str = concat!(
    "WITH bought AS (
         SELECT bool_or(e.expires_at_after = 'infinity'
                        AND e.expires_at_before IS DISTINCT FROM 'infinity') AS for_life,
                max(e.expires_at_before)
                    FILTER (WHERE e.expires_at_after = 'infinity'
                                  AND e.expires_at_before IS DISTINCT FROM 'infinity')
                    AS before_life,
                COALESCE(sum(extract(epoch FROM e.expires_at_after)
                             - extract(epoch FROM GREATEST(e.expires_at_before, e.at)))
                         FILTER (WHERE e.expires_at_after <> 'infinity'), 0) AS secs,
                bool_or(e.from_status IS NULL OR e.from_status = $4) AS revived,
                max(e.id) AS last_event
         FROM membership_events e
         WHERE e.membership_id = $1 AND e.payment_id = $2 AND e.cause = $3
     ), target AS (
         SELECT m.id,
                CASE WHEN b.for_life
                     THEN LEAST(m.expires_at, GREATEST(b.before_life, statement_timestamp()))
                     ELSE m.expires_at
                          - interval '1 microsecond' * round(b.secs * 1000000)::float8 END
                    AS expires_at,
                b.revived AND NOT EXISTS (
                    SELECT 1 FROM membership_events l
                    WHERE l.membership_id = m.id AND l.id > b.last_event
                      AND l.cause NOT IN ($5, $6)) AS ends
         FROM memberships m CROSS JOIN bought b
         WHERE m.id = $1 AND (b.for_life OR b.secs > 0)
     )
     UPDATE memberships m
     SET expires_at = t.expires_at,
         status = CASE WHEN t.ends OR t.expires_at <= statement_timestamp() THEN $4
                       ELSE m.status END,
         updated_at = statement_timestamp()
     FROM target t
     WHERE m.id = t.id AND (m.expires_at <> t.expires_at OR (t.ends AND m.status <> $4))
     RETURNING ",
    "m.id, m.subscriber_id, m.channel_id, m.status, m.expires_at, m.created_at, m.updated_at"
);

/// Takes back from the locked membership `before` ([`lock`]) what payment `payment_id` bought
/// in it ([`TAKE_BACK_SQL`]), recorded as one `refund` event naming the payment
/// ([`record_event`]): a membership that ends by it (its term is over, or the payment is what
/// let its member in) goes to `expired`, and its revoke is enqueued keyed on that event like
/// every other ending. An `expired` membership is left
/// alone (its member is out already; nothing it holds is this payment's). Returns the
/// membership after the change; `None` when nothing changed. The caller holds the lock order
/// up to the membership row.
pub async fn take_back(
    tx: &Transaction<'_>,
    before: &Membership,
    payment_id: i64,
) -> Result<Option<Membership>, ApiError> {
    if !before.status.holds_access() {
        return Ok(None);
    }
    let Some(after) = db::opt::<Membership>(
        tx,
        TAKE_BACK_SQL,
        &[
            &before.id,
            &payment_id,
            &EventCause::Payment,
            &Status::Expired,
            &EventCause::Sweep,
            &EventCause::Refund,
        ],
    )
    .await?
    else {
        return Ok(None);
    };
    record_event(tx, Some(before), &after, Cause::Refund(payment_id)).await?;
    Ok(Some(after))
}

const EVENT_SQL: &str = "INSERT INTO membership_events
         (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause,
          payment_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     RETURNING id";

/// Records one change of a membership (`before` is `None` on creation): its `membership_events`
/// row first, then the Telegram effect the change asks for ([`effect_of_change`]), keyed on
/// that event's id, in the same transaction. Returns the event's id.
pub async fn record_event(
    tx: &Transaction<'_>,
    before: Option<&Membership>,
    after: &Membership,
    cause: Cause,
) -> Result<i64, ApiError> {
    let (cause_name, payment_id) = cause.parts();
    let event_id: i64 = db::row_one(
        tx,
        EVENT_SQL,
        &[
            &after.id,
            &before.map(|b| b.status),
            &after.status,
            &before.map(|b| b.expires_at),
            &after.expires_at,
            &cause_name,
            &payment_id,
        ],
    )
    .await?
    .try_get("id")?;
    if let Some(kind) = effect_of_change(before, after) {
        enqueue_effect(tx, kind, after, payment_id, event_id).await?;
    }
    Ok(event_id)
}

/// What a membership change asks Telegram to do, if anything (pure): a grant when it starts
/// holding access, a receipt when a member's term is extended, a revoke when it stops holding
/// access, a grace notice when it enters grace.
pub fn effect_of_change(before: Option<&Membership>, after: &Membership) -> Option<Kind> {
    use Status::*;
    let was = before.map(|b| b.status);
    match (was, after.status) {
        (None | Some(Expired), Active) => Some(Kind::Grant),
        (Some(Active | Grace), Active)
            if before.is_some_and(|b| after.expires_at > b.expires_at) =>
        {
            Some(Kind::RenewalReceipt)
        }
        (Some(Active | Grace), Expired) => Some(Kind::Revoke),
        (Some(Active), Grace) => Some(Kind::GraceNotice),
        _ => None,
    }
}

const CHANGE_EFFECT_SQL: &str = concat!(
    "INSERT INTO effects
         (kind, membership_id, payment_id, chat_id, user_id, payload, dedupe_key)
     SELECT $2, m.id, $3, c.telegram_chat_id, s.telegram_user_id, ",
    effects::expiry_payload_sql!("$4::timestamptz"),
    ", ",
    effects::transition_key_sql!("$5::text", "m.id", "$6::bigint"),
    "
     FROM memberships m
     JOIN subscribers s ON s.id = m.subscriber_id
     JOIN channels c ON c.id = m.channel_id
     WHERE m.id = $1
     FOR KEY SHARE OF c, s"
);

/// Enqueues the effect `kind` of a change of `after`, keyed on the change's event
/// ([`effects::transition_key`]): one effect per transition.
async fn enqueue_effect(
    tx: &Transaction<'_>,
    kind: Kind,
    after: &Membership,
    payment_id: Option<i64>,
    event_id: i64,
) -> Result<(), ApiError> {
    let Some(what) = effects::transition_prefix(kind) else {
        return Ok(());
    };
    // One statement reads the Telegram ids and inserts, so the effect names who they are now.
    // The channel and subscriber rows are key-share locked, as a foreign key would lock them
    // (an update of an existing membership makes no foreign-key check, so nothing else does):
    // a change of the channel's `telegram_chat_id` or the subscriber's `telegram_user_id`
    // (each locks its row `FOR UPDATE`, then refuses while memberships hold access — and, for
    // a chat, while effects for it are pending) waits for this transaction, or this statement
    // waits for it and reads the new id. So a membership made live concurrently with such a
    // change can never be left with an effect aimed at the old chat or the old account. (A
    // staff correction already holds the subscriber's lock, taken by [`lock`] in the lock
    // order; taking it again here waits for nothing.)
    // No `ON CONFLICT`: the key is new by construction (an event id); a clash is a bug to see.
    db::execute(
        tx,
        CHANGE_EFFECT_SQL,
        &[
            &after.id,
            &kind,
            &payment_id,
            &after.expires_at,
            &what,
            &event_id,
        ],
    )
    .await?;
    Ok(())
}

/// The `DELETE` of membership `$1` (`gone`: the rows removed, as they were when removed), then
/// one revoke (`revoke:{membership}:deleted`) for each one whose member still held access
/// (active or grace), in the deletion's transaction. A deleted expired membership needs none:
/// its expiry enqueued one (the sweep's, still queued, is made even after the deletion,
/// [`crate::outbox::effects::materialize_sweep_queue`]). The effect outlives the row: it carries
/// the chat and the user, its `membership_id` is NULL (the row it would name is being deleted by
/// the same statement; `ON DELETE SET NULL` would clear it anyway) and the membership id is kept
/// in the payload. The worker performs a revoke whose membership is gone.
const DELETE_SQL: &str = include_str!("memberships/delete.sql");
/// [`DELETE_SQL`] of every membership of subscriber `$1`.
const DELETE_OF_SUBSCRIBER_SQL: &str = include_str!("memberships/delete_of_subscriber.sql");

/// Deletes membership `id` (its events go with it) and, if it still held access, enqueues the
/// revoke that takes the member out of the chat ([`DELETE_SQL`]), in one
/// statement. Returns whether it existed. The caller holds the pair's advisory lock (and the
/// channel lock of a seat-limited channel).
///
/// The `DELETE … RETURNING` sees each row as it is when removed (after waiting for a writer
/// that holds it), so the revoke is decided on the final status, not on an earlier read.
pub async fn delete(tx: &Transaction<'_>, id: i64) -> Result<bool, ApiError> {
    let gone: i64 = db::row_one(tx, DELETE_SQL, &[&id])
        .await?
        .try_get("deleted")?;
    Ok(gone > 0)
}

/// Deletes every membership of a subscriber, with a revoke for each one that held access, like
/// [`delete`]; the subscriber's `DELETE` calls it first, since its cascade would remove them
/// without a word to Telegram. The caller holds the subscriber row `FOR UPDATE`, so no
/// membership of it can be created meanwhile. Returns how many were deleted.
pub async fn delete_of_subscriber(
    tx: &Transaction<'_>,
    subscriber_id: i32,
) -> Result<u64, ApiError> {
    let gone: i64 = db::row_one(tx, DELETE_OF_SUBSCRIBER_SQL, &[&subscriber_id])
        .await?
        .try_get("deleted")?;
    Ok(gone as u64)
}

// ---- scans ----

const DUE_REMINDERS_SQL: &str = concat!(
    "INSERT INTO effects
         (kind, membership_id, chat_id, user_id, payload, dedupe_key)
     SELECT 'reminder', d.id, d.telegram_chat_id, d.telegram_user_id, ",
    effects::expiry_payload_sql!("d.expires_at"),
    ", d.key
     FROM (
         SELECT m.id, c.telegram_chat_id, s.telegram_user_id, m.expires_at, ",
    effects::reminder_key_sql!("m.id", "m.expires_at"),
    " AS key
         FROM memberships m
         JOIN subscribers s ON s.id = m.subscriber_id
         JOIN channels c ON c.id = m.channel_id
         WHERE m.status = 'active' AND c.active
           AND m.expires_at > statement_timestamp()
           AND m.expires_at <= statement_timestamp() + make_interval(days => $1)
     ) AS d
     WHERE NOT EXISTS (SELECT 1 FROM effects e WHERE e.dedupe_key = d.key)
     LIMIT $2
     ON CONFLICT (dedupe_key) DO NOTHING"
);

/// Enqueues a reminder for every active membership of an active channel whose `expires_at`
/// is within `reminder_days` from now, once per (membership, expiry) — so once per period: a
/// renewal moves `expires_at` and the next period gets its own reminder (never for lifetime
/// access: `infinity` is within no number of days, so the reminder key's epoch is always
/// finite). Returns how many.
pub async fn enqueue_due_reminders(
    client: &impl GenericClient,
    reminder_days: u32,
) -> Result<u64, ApiError> {
    if reminder_days == 0 {
        return Ok(0);
    }
    let days = reminder_days as i32;
    effects::insert_in_batches(client, DUE_REMINDERS_SQL, &[&days, &effects::SCAN_BATCH]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(status: &str, expires_in_days: i64) -> Membership {
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        Membership {
            id: 1,
            subscriber_id: 1,
            channel_id: 1,
            status: Status::parse(status).unwrap(),
            expires_at: Expiry::At(t0 + Duration::days(expires_in_days)),
            created_at: t0,
            updated_at: t0,
        }
    }

    fn lifetime(status: &str) -> Membership {
        Membership {
            expires_at: Expiry::Never,
            ..m(status, 0)
        }
    }

    #[test]
    fn an_extension_asks_for_the_effect_its_change_asks_for() {
        // Every extension by days ends at least a day after GREATEST(expiry, now) — before
        // expiry, in grace, long expired, and with an expiry far in the future — unless it was
        // lifetime (infinity + days = infinity); a lifetime one ends at infinity.
        let now = m("active", 0).expires_at;
        for before in [
            None,
            Some(m("active", 5)),
            Some(m("active", 400)),
            Some(m("grace", -1)),
            Some(m("expired", -90)),
            Some(m("expired", 3)),
            Some(lifetime("active")),
            Some(lifetime("grace")),
            Some(lifetime("expired")),
        ] {
            for term in [
                Term::Days(1),
                Term::Days(30),
                Term::Days(3660),
                Term::Lifetime,
            ] {
                let start = before.as_ref().map_or(now, |b| b.expires_at.max(now));
                let mut after = m("active", 0);
                after.expires_at = match (term, start) {
                    (Term::Days(days), Expiry::At(t)) => {
                        Expiry::At(t + Duration::days(days.into()))
                    }
                    (Term::Days(_), Expiry::Never) | (Term::Lifetime, _) => Expiry::Never,
                };
                let held = before.as_ref().is_some_and(|b| b.status.holds_access());
                let later = before
                    .as_ref()
                    .is_none_or(|b| after.expires_at > b.expires_at);
                assert_eq!(
                    effect_of_extension(held, later),
                    effect_of_change(before.as_ref(), &after),
                    "before {before:?}, {term:?}"
                );
                let was_lifetime = before.as_ref().is_some_and(Membership::is_live_lifetime);
                assert_eq!(
                    effect_of_extension(held, later).is_none(),
                    was_lifetime,
                    "only a live lifetime membership is told nothing: {before:?}, {term:?}"
                );
            }
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
            // Lifetime: made lifetime is a renewal (or a grant), ending it a revoke.
            (
                Some(m("active", 30)),
                lifetime("active"),
                Some(RenewalReceipt),
            ),
            (Some(m("expired", 0)), lifetime("active"), Some(Grant)),
            (None, lifetime("active"), Some(Grant)),
            (Some(lifetime("active")), lifetime("active"), None),
            (Some(lifetime("active")), m("active", 30), None),
            (Some(lifetime("active")), lifetime("expired"), Some(Revoke)),
        ];
        for (before, after, want) in cases {
            assert_eq!(
                effect_of_change(before.as_ref(), after),
                *want,
                "{:?} → {}",
                before.as_ref().map(|b| b.status),
                after.status
            );
        }
    }

    #[test]
    fn live_needs_a_live_status_and_time_inside_term_plus_grace() {
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        let day = Duration::days(1);
        let active = m("active", 0); // expires at t0
        assert!(active.is_live_at(t0 - day, 0));
        assert!(!active.is_live_at(t0, 0), "no grace: over at expires_at");
        assert!(active.is_live_at(t0 + day, 2));
        assert!(
            !active.is_live_at(t0 + day * 2, 2),
            "over at expires_at + grace"
        );
        assert!(
            !active.is_live_at(t0 + day, -3),
            "a negative grace counts as zero"
        );
        let grace = m("grace", 0);
        assert!(grace.is_live_at(t0 + day, 2));
        assert!(
            !grace.is_live_at(t0 + day * 3, 2),
            "an unswept grace row past its window is not live"
        );
        let expired = m("expired", 30);
        assert!(!expired.is_live_at(t0, 0), "expired is never live");
        let forever = lifetime("active");
        assert!(
            forever.is_live_at(DateTime::<Utc>::MAX_UTC, 0),
            "lifetime is live"
        );
        assert!(lifetime("grace").is_live_at(t0, -3));
        assert!(
            !lifetime("expired").is_live_at(t0, 3),
            "an ended lifetime is not"
        );
        assert!(forever.is_live_lifetime() && !lifetime("expired").is_live_lifetime());
        assert!(!active.is_live_lifetime());
        for s in Status::ALL {
            assert_eq!(s.holds_access(), s != Status::Expired);
        }
    }

    #[test]
    fn the_live_fragment_is_the_status_half_and_the_time_half() {
        assert_eq!(holds_access_sql!("m"), "m.status <> 'expired'");
        assert_eq!(
            live_sql!("m", "c"),
            "m.status <> 'expired' AND statement_timestamp() < \
             m.expires_at + make_interval(days => c.grace_period_days)"
        );
        // The SQL names the one status that does not hold access.
        let ended: Vec<&str> = Status::ALL
            .iter()
            .filter(|s| !s.holds_access())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(ended, ["expired"]);
        assert_eq!(Membership::COLUMNS, membership_columns!());
    }
}
