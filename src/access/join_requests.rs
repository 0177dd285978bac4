//! The requests waiting at a chat's door (`join_requests`): a join request that came with a
//! query (Bot API 10.1: the chat assigned this bot to process its join requests) to a channel
//! or group whose door is the Mini App. This module owns the table; the door's decisions are
//! [`crate::telegram::door`]'s, the Mini App links a request to its order.
//!
//! A request is `waiting` from its arrival until it is decided once, by one conditional
//! `UPDATE` of its row: `approved` when its user holds live access to the chat (decided under
//! the pair lock, after the payment or trial that granted it committed), `declined` when its
//! order ran out unpaid or it outlived its query. The decision is written with its effect (the
//! Bot API call that carries it, retried until Telegram confirms), so it is made and sent
//! exactly once.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};

use crate::{common::error::ApiError, db, outbox::effects};

crate::text_enum! {
    /// Where a join request at the door stands.
    pub enum State {
        /// Not decided yet: the Mini App is open, or the door answered `queue`.
        Waiting => "waiting",
        /// Let in.
        Approved => "approved",
        /// Turned away.
        Declined => "declined",
    }
}

crate::text_enum! {
    /// How the door answered the request's query, in the webhook's reply.
    pub enum Answer {
        /// A member, an exempt user or an administrator: let in at once.
        Approve => "approve",
        /// Anyone else: the paywall opened (`sendChatJoinRequestWebApp`).
        WebApp => "web_app",
        /// Not decided in time: left pending, decided when it can be.
        Queue => "queue",
    }
}

/// A request arriving at the door, as the door decided to answer it.
#[derive(Debug, Clone)]
pub struct Arrival<'a> {
    pub channel_id: i32,
    pub chat_id: i64,
    pub user_id: i64,
    pub query_id: &'a str,
    pub answer: Answer,
    /// Telegram's `date` of the request.
    pub requested_at: DateTime<Utc>,
    /// A fresh one-time reference for the paywall URL.
    pub reference: &'a str,
}

/// The request as recorded: a redelivered query finds its first record, and is answered the
/// same way again.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub id: i64,
    pub reference: String,
    pub answer: Answer,
    pub state: State,
}

crate::from_row!(Recorded {
    id,
    reference,
    answer,
    state
});

const RECORD_SQL: &str = "
    WITH seen AS (
        SELECT id, reference, answer, state FROM join_requests WHERE query_id = $4
    ), made AS (
        INSERT INTO join_requests
            (channel_id, chat_id, user_id, query_id, answer, requested_at, reference,
             state, decided_at)
        SELECT $1, $2, $3, $4, $5, $6, $7,
               CASE WHEN $5 = 'approve' THEN 'approved' ELSE 'waiting' END,
               CASE WHEN $5 = 'approve' THEN statement_timestamp() END
        WHERE NOT EXISTS (SELECT 1 FROM seen)
        ON CONFLICT (chat_id, user_id) WHERE state = 'waiting' DO UPDATE
            SET query_id = EXCLUDED.query_id, answer = EXCLUDED.answer,
                requested_at = EXCLUDED.requested_at, reference = EXCLUDED.reference,
                channel_id = EXCLUDED.channel_id, created_at = statement_timestamp(),
                state = EXCLUDED.state, decided_at = EXCLUDED.decided_at
        RETURNING id, reference, answer, state
    )
    SELECT id, reference, answer, state FROM seen
    UNION ALL
    SELECT id, reference, answer, state FROM made";

/// Records a request as the door answered it, in one statement: a query seen before returns
/// its first record (Telegram redelivered the update); a new query of a user already waiting at
/// the chat takes the waiting row over (Telegram keeps one request per user and chat, so the
/// older query is dead).
pub async fn record(client: &impl GenericClient, a: &Arrival<'_>) -> Result<Recorded, ApiError> {
    let rows = db::all::<Recorded>(
        client,
        RECORD_SQL,
        &[
            &a.channel_id,
            &a.chat_id,
            &a.user_id,
            &a.query_id,
            &a.answer.as_str(),
            &a.requested_at,
            &a.reference,
        ],
    )
    .await?;
    rows.into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("a join request was neither found nor recorded"))
}

/// Ties the waiting request `reference` of Telegram user `user_id` to order `order_id`, when
/// the request's channel is one of the order's plan; no other request changes.
const LINK_ORDER_SQL: &str = "UPDATE join_requests j SET order_id = $3
     FROM orders o
     WHERE j.reference = $1 AND j.user_id = $2 AND j.state = 'waiting'
       AND o.id = $3
       AND EXISTS (SELECT 1 FROM plan_channels pc
                   WHERE pc.plan_id = o.plan_id AND pc.channel_id = j.channel_id)
     RETURNING j.id";

/// Links the Mini App's order `order_id` to the waiting join request `reference` (the page's
/// `r`) of Telegram user `user_id`, when it is one for a channel of the order's plan (its hold
/// then says when an unpaid request is declined); whether a request was linked.
pub async fn link_order(
    tx: &Transaction<'_>,
    reference: &str,
    user_id: i64,
    order_id: i64,
) -> Result<bool, ApiError> {
    Ok(
        db::row_opt(tx, LINK_ORDER_SQL, &[&reference, &user_id, &order_id])
            .await?
            .is_some(),
    )
}

/// The state of the newest request of Telegram user `$2` tied to order `$1`.
const STATE_OF_ORDER_SQL: &str = "SELECT state FROM join_requests
     WHERE order_id = $1 AND user_id = $2
     ORDER BY id DESC LIMIT 1";

/// The state of Telegram user `user_id`'s request tied to order `order_id`, if one is.
pub async fn state_of_order(
    client: &impl GenericClient,
    order_id: i64,
    user_id: i64,
) -> Result<Option<State>, ApiError> {
    Ok(
        match db::row_opt(client, STATE_OF_ORDER_SQL, &[&order_id, &user_id]).await? {
            Some(row) => Some(row.try_get("state")?),
            None => None,
        },
    )
}

/// A waiting request due a decision, with the facts it is decided by.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: i64,
    pub channel_id: i32,
    pub chat_id: i64,
    pub user_id: i64,
    /// The subscriber of `user_id`, if there is one (the pair lock's key).
    pub subscriber_id: Option<i32>,
}

crate::from_row!(Due {
    id,
    channel_id,
    chat_id,
    user_id,
    subscriber_id
});

/// SQL: waiting request `$r` (joined with its channel `$c`) is past deciding without a payment:
/// its order's hold (or, without a hold, the order's open time) ran out unpaid, or it outlived
/// its query (`$q` seconds).
macro_rules! lapsed_sql {
    ($r:literal, $q:literal, $h:literal) => {
        concat!(
            "(",
            $r,
            ".created_at + make_interval(secs => ",
            $q,
            ") <= statement_timestamp()
              OR EXISTS (SELECT 1 FROM orders o WHERE o.id = ",
            $r,
            ".order_id
                         AND o.status <> 'paid'
                         AND COALESCE(o.hold_until, o.created_at + make_interval(secs => ",
            $h,
            "))
                             <= statement_timestamp()))"
        )
    };
}

const DUE_SQL: &str = concat!(
    "SELECT r.id, r.channel_id, r.chat_id, r.user_id, s.id AS subscriber_id
     FROM join_requests r
     JOIN channels c ON c.id = r.channel_id
     LEFT JOIN subscribers s ON s.telegram_user_id = r.user_id
     WHERE r.state = 'waiting'
       AND (",
    lapsed_sql!("r", "$1::bigint", "$2::bigint"),
    " OR EXISTS (SELECT 1 FROM memberships m WHERE m.subscriber_id = s.id
                         AND m.channel_id = r.channel_id AND ",
    crate::access::memberships::live_sql!("m", "c"),
    "))
     ORDER BY r.created_at
     LIMIT $3"
);

/// Waiting requests due a decision now: their user holds live access to the chat, or they
/// lapsed ([`lapsed_sql`]). Read without locks; each is decided under its pair lock by
/// [`decide`].
pub async fn due(
    client: &impl GenericClient,
    query_secs: i64,
    hold_secs: i64,
    limit: i64,
) -> Result<Vec<Due>, ApiError> {
    db::all(client, DUE_SQL, &[&query_secs, &hold_secs, &limit]).await
}

/// The waiting request of Telegram user `user_id` at chat `chat_id`, if there is one.
pub async fn waiting_of(
    client: &impl GenericClient,
    chat_id: i64,
    user_id: i64,
) -> Result<Option<Due>, ApiError> {
    db::opt(
        client,
        "SELECT r.id, r.channel_id, r.chat_id, r.user_id, s.id AS subscriber_id
         FROM join_requests r
         LEFT JOIN subscribers s ON s.telegram_user_id = r.user_id
         WHERE r.chat_id = $1 AND r.user_id = $2 AND r.state = 'waiting'",
        &[&chat_id, &user_id],
    )
    .await
}

const DECIDE_SQL: &str = concat!(
    "WITH live AS (
         SELECT EXISTS (
             SELECT 1 FROM join_requests r
             JOIN channels c ON c.id = r.channel_id
             JOIN subscribers s ON s.telegram_user_id = r.user_id
             JOIN memberships m ON m.subscriber_id = s.id AND m.channel_id = r.channel_id
             WHERE r.id = $1 AND ",
    crate::access::memberships::live_sql!("m", "c"),
    ") AS found
     )
     UPDATE join_requests r
     SET state = CASE WHEN live.found THEN 'approved' ELSE 'declined' END,
         decided_at = statement_timestamp()
     FROM live
     WHERE r.id = $1 AND r.state = 'waiting'
       AND (live.found OR ",
    lapsed_sql!("r", "$2::bigint", "$3::bigint"),
    ")
     RETURNING r.state"
);

/// Decides waiting request `due` now, in `tx`, and enqueues the Bot API call that carries the
/// decision: approved when its user holds live access to the chat, declined when it lapsed;
/// left waiting otherwise (or when another decided it first). The caller holds the pair lock
/// of the request's subscriber and channel (the payment path's lock, docs/locking.md), so a
/// payment being applied for the pair is either committed and seen here, or waits and finds
/// the request decided; a buyer who paid is never declined.
pub async fn decide(
    tx: &Transaction<'_>,
    due: &Due,
    query_secs: i64,
    hold_secs: i64,
) -> Result<Option<State>, ApiError> {
    let Some(row) = db::row_opt(tx, DECIDE_SQL, &[&due.id, &query_secs, &hold_secs]).await? else {
        return Ok(None);
    };
    let state: State = row.try_get("state")?;
    effects::enqueue_door_decision(
        &**tx,
        due.chat_id,
        due.user_id,
        state == State::Approved,
        due.id,
    )
    .await?;
    Ok(Some(state))
}

/// How the worker answers a decided request: through its query while the query is valid,
/// else by chat and user.
#[derive(Debug, Clone)]
pub struct ToAnswer {
    pub query_id: String,
    pub state: State,
    /// The query is still valid (younger than the door's query life).
    pub query_valid: bool,
    pub answered: bool,
}

crate::from_row!(ToAnswer {
    query_id,
    state,
    query_valid,
    answered
});

/// Request `id` as the worker answers it; `None` when it is gone (its channel deleted).
pub async fn to_answer(
    client: &impl GenericClient,
    id: i64,
    query_secs: i64,
) -> Result<Option<ToAnswer>, ApiError> {
    db::opt(
        client,
        "SELECT query_id, state,
                answer <> 'queue'
                    AND created_at + make_interval(secs => $2::bigint) > statement_timestamp()
                    AS query_valid,
                answered_at IS NOT NULL AS answered
         FROM join_requests WHERE id = $1",
        &[&id, &query_secs],
    )
    .await
}

/// Records that Telegram confirmed request `id`'s decision.
pub async fn answered(client: &impl GenericClient, id: i64) -> Result<(), ApiError> {
    db::execute(
        client,
        "UPDATE join_requests SET answered_at = statement_timestamp()
         WHERE id = $1 AND answered_at IS NULL",
        &[&id],
    )
    .await?;
    Ok(())
}

/// A request at the door, as staff see it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct JoinRequest {
    pub id: i64,
    pub channel_id: i32,
    pub chat_id: i64,
    pub user_id: i64,
    /// The subscriber of `user_id`, once the Mini App or the bot knows them.
    pub subscriber_id: Option<i32>,
    /// `approve`, `web_app` or `queue`: how the door answered it.
    #[schema(value_type = String)]
    pub answer: Answer,
    /// `waiting`, `approved` or `declined`.
    #[schema(value_type = String)]
    pub state: State,
    pub order_id: Option<i64>,
    pub requested_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub answered_at: Option<DateTime<Utc>>,
}

crate::from_row!(JoinRequest [
    "r.id, r.channel_id, r.chat_id, r.user_id, s.id AS subscriber_id, r.answer, r.state,
     r.order_id, r.requested_at, r.created_at, r.decided_at, r.answered_at"
] {
    id,
    channel_id,
    chat_id,
    user_id,
    subscriber_id,
    answer,
    state,
    order_id,
    requested_at,
    created_at,
    decided_at,
    answered_at
});

/// Requests at the door, by id (oldest first): of one channel or all, in one state or all,
/// after id `after`, at most `limit`.
pub async fn list(
    client: &impl GenericClient,
    channel_id: Option<i32>,
    state: Option<State>,
    after: i64,
    limit: i64,
) -> Result<Vec<JoinRequest>, ApiError> {
    db::all(
        client,
        "SELECT r.id, r.channel_id, r.chat_id, r.user_id, s.id AS subscriber_id, r.answer,
                    r.state, r.order_id, r.requested_at, r.created_at, r.decided_at,
                    r.answered_at
             FROM join_requests r
             LEFT JOIN subscribers s ON s.telegram_user_id = r.user_id
             WHERE ($1::int IS NULL OR r.channel_id = $1)
               AND ($2::text IS NULL OR r.state = $2)
               AND r.id > $3
             ORDER BY r.id
             LIMIT $4",
        &[&channel_id, &state.map(State::as_str), &after, &limit],
    )
    .await
}
