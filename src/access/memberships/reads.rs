//! The reads of memberships and their events: the staff API, the payment core, the seat rule,
//! join requests and the effects worker.

use super::*;

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

crate::from_row!(AuditSubject ["membership_id, subscriber_id, telegram_user_id, live"] {
    membership_id,
    subscriber_id,
    telegram_user_id,
    live,
});

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

crate::from_row!(EffectView ["status, expires_at, channel_id, title, invite_link, \
         telegram_user_id, language, translations"] {
    status,
    expires_at,
    channel_id,
    title,
    invite_link,
    telegram_user_id,
    language,
    translations,
});

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
