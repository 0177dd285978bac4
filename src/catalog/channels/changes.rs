//! The writes of channels and the rules that guard them (the module documentation of
//! [`super`]): creating, changing, deleting, and the locks a change and a plan's write take.

use deadpool_postgres::{GenericClient, Transaction};

use super::{Channel, RECURRING_RULE, price};
use crate::{
    access::memberships,
    common::{currency, error::ApiError},
    db::{self, FromRow},
    outbox::effects,
    present::translations::Translations,
};

const INSERT_SQL: &str = concat!(
    "INSERT INTO channels (telegram_chat_id, title, price_minor, currency,
                             billing_period_days, grace_period_days, seat_limit, active,
                             description, recurring, translations, door)
                         VALUES ($1, $2, $3, $4, $5, COALESCE($6, 0), $7, COALESCE($8, true),
                                 $9, COALESCE($10, false), COALESCE($11::jsonb, '{}'::jsonb),
                                 COALESCE($12, 'bot'))
                         RETURNING ",
    channel_columns!()
);
const PATCH_SQL: &str = concat!(
    "UPDATE channels SET
                         telegram_chat_id = COALESCE($2, telegram_chat_id),
                         title = COALESCE($3, title),
                         price_minor = COALESCE($4, price_minor),
                         currency = COALESCE($5, currency),
                         billing_period_days = COALESCE($6, billing_period_days),
                         grace_period_days = COALESCE($7, grace_period_days),
                         seat_limit = CASE WHEN $8 THEN $9 ELSE seat_limit END,
                         active = COALESCE($10, active),
                         invite_link = CASE WHEN $2 <> telegram_chat_id THEN NULL
                                            ELSE invite_link END,
                         description = CASE WHEN $11 THEN $12 ELSE description END,
                         recurring = COALESCE($13, recurring),
                         translations = COALESCE($14, translations),
                         door = COALESCE($15, door),
                         updated_at = statement_timestamp()
                     WHERE id = $1 RETURNING ",
    channel_columns!()
);
const LOCK_SQL: &str = "SELECT telegram_chat_id FROM channels WHERE id = $1 FOR UPDATE";
// A plan other than the channel's default plan that includes it with another currency: the
// channel's currency cannot become `$2`. (The one read of `plans` here: the rule guards the
// channel's column; `crate::catalog::plans` calls this module, so it cannot be asked.)
const CURRENCY_BLOCKER_SQL: &str =
    "SELECT p.id FROM plan_channels pc JOIN plans p ON p.id = pc.plan_id
     WHERE pc.channel_id = $1 AND p.default_of IS DISTINCT FROM $1 AND p.currency <> $2
     ORDER BY p.id LIMIT 5";
const LOCK_FOR_PLAN_SQL: &str =
    "SELECT id, currency FROM channels WHERE id = ANY($1) ORDER BY id FOR SHARE";
const DELETE_SQL: &str = "DELETE FROM channels WHERE id = $1";

/// The fields of a new channel, or of a change. In a new channel an absent field takes its
/// default (`grace_period_days` 0, `active` true, `recurring` false, no limit, no
/// description); the caller has checked the required ones are present. In a change an absent
/// field keeps its value; `seat_limit: Some(None)` makes the channel unlimited and
/// `description: Some(None)` removes the description.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub telegram_chat_id: Option<i64>,
    pub title: Option<String>,
    pub price_minor: Option<i64>,
    pub currency: Option<String>,
    pub billing_period_days: Option<i32>,
    pub grace_period_days: Option<i32>,
    pub seat_limit: Option<Option<i32>>,
    pub active: Option<bool>,
    pub description: Option<Option<String>>,
    pub recurring: Option<bool>,
    /// Replaces all translations when given.
    pub translations: Option<Translations>,
    pub door: Option<super::Door>,
}

/// The schema's refusal of a recurring channel that is not `XTR` for 30 days, as the same
/// per-field 422 the API's checks give.
fn recurring_refused(e: tokio_postgres::Error) -> ApiError {
    let is_rule = e
        .as_db_error()
        .and_then(|d| d.constraint())
        .is_some_and(|c| c == "channels_recurring_check");
    if is_rule {
        ApiError::field("recurring", RECURRING_RULE)
    } else {
        ApiError::Db(e)
    }
}

/// What is wrong with a `telegram_chat_id`: a channel or supergroup (or group) has a negative id
/// (`-100…` for channels and supergroups); a positive id is a user, whose chat the bot cannot
/// sell access to. Pure.
pub fn chat_id_error(telegram_chat_id: i64) -> Option<&'static str> {
    match telegram_chat_id {
        0 => Some("must not be 0"),
        id if id > 0 => Some(
            "must be a channel's or supergroup's id, which is negative (-100…); a positive id \
             is a user",
        ),
        _ => None,
    }
}

/// Creates a channel. A taken `telegram_chat_id` is the schema's unique violation (409 when
/// rendered); a recurring channel that is not `XTR` for 30 days is a 422 on `recurring`, and a
/// price above its currency's highest ([`currency::price_over_max`]) one on `price_minor`.
pub async fn create(tx: &Transaction<'_>, f: &Fields) -> Result<Channel, ApiError> {
    if let (Some(price), Some(currency)) = (f.price_minor, f.currency.as_deref())
        && let Some(why) = currency::price_over_max(price, currency)
    {
        return Err(ApiError::field("price_minor", why));
    }
    let row = tx
        .query_one(
            INSERT_SQL,
            &[
                &f.telegram_chat_id,
                &f.title,
                &f.price_minor,
                &f.currency,
                &f.billing_period_days,
                &f.grace_period_days,
                &f.seat_limit.flatten(),
                &f.active,
                &f.description.clone().flatten(),
                &f.recurring,
                &f.translations,
                &f.door.map(super::Door::as_str),
            ],
        )
        .await
        .map_err(recurring_refused)?;
    let c = Channel::from_row(&row)?;
    tracing::info!(channel_id = c.id, "channel created");
    Ok(c)
}

/// Changes channel `id` by `f`, under the rules of the module documentation: a number for
/// `seat_limit` or a `telegram_chat_id` first locks the row ([`lock_for_change`]); a different
/// chat is refused with 409 while [`chat_change_blocker`] names a reason. 404 when there is no
/// such channel.
pub async fn change(tx: &Transaction<'_>, id: i32, f: &Fields) -> Result<Channel, ApiError> {
    // The price is checked in the currency it will be in (a new currency with the stored price
    // too); a concurrent change of the currency takes the row lock, and the plan it writes
    // through the trigger is checked by its own rules.
    if (f.price_minor.is_some() || f.currency.is_some())
        && let Some(stored) = price(tx, id).await?
    {
        let currency = f.currency.as_deref().unwrap_or(&stored.currency);
        if let Some(why) =
            currency::price_over_max(f.price_minor.unwrap_or(stored.price_minor), currency)
        {
            return Err(ApiError::field("price_minor", why));
        }
    }
    // A new or lower limit must bind every seat decision not yet committed: wait for those
    // made from the old terms, hold off new ones until this commits (docs/locking.md). A new
    // chat takes the same lock (the one a change of a unique column takes anyway) before its
    // check: it waits for every transaction that enqueued an effect under a key-share lock of
    // this row and holds off new ones until this commits, so the check sees all of them.
    // A new currency takes it too, so every plan made with the old currency is committed (a
    // plan's write reads its channels `FOR SHARE`, [`lock_for_plan`]) before the check looks.
    if matches!(f.seat_limit, Some(Some(_))) || f.telegram_chat_id.is_some() || f.currency.is_some()
    {
        let current = lock_for_change(tx, id)
            .await?
            .ok_or(ApiError::NotFound("channel"))?;
        if let Some(new_chat) = f.telegram_chat_id
            && new_chat != current
            && let Some(why) = chat_change_blocker(tx, id, current).await?
        {
            return Err(ApiError::Conflict(why));
        }
        if let Some(currency) = &f.currency
            && let Some(why) = currency_change_blocker(tx, id, currency).await?
        {
            return Err(ApiError::Conflict(why));
        }
    }
    let row = tx
        .query_opt(
            PATCH_SQL,
            &[
                &id,
                &f.telegram_chat_id,
                &f.title,
                &f.price_minor,
                &f.currency,
                &f.billing_period_days,
                &f.grace_period_days,
                &f.seat_limit.is_some(),
                &f.seat_limit.flatten(),
                &f.active,
                &f.description.is_some(),
                &f.description.clone().flatten(),
                &f.recurring,
                &f.translations,
                &f.door.map(super::Door::as_str),
            ],
        )
        .await
        .map_err(recurring_refused)?
        .ok_or(ApiError::NotFound("channel"))?;
    Ok(Channel::from_row(&row)?)
}

/// Locks channel `id`'s row `FOR UPDATE` before its `seat_limit` is set or changed, or its
/// chat changed; returns its current `telegram_chat_id` (`None`: no such channel). That mode
/// conflicts with the `FOR KEY SHARE` every seat decision reads the channel with
/// (`orders::seats::lock_channel_terms`), so it waits until no transaction that read the old
/// limit (or "no limit") is still running, and holds off new ones until the change commits: no
/// payment, checkout or pre-checkout can decide from a limit older than the one committed. It
/// also conflicts with the key share an effect's enqueueing takes on the channel, so the chat
/// check sees every effect enqueued before it. The caller takes no other lock of the lock
/// order, before or after.
pub async fn lock_for_change(tx: &Transaction<'_>, id: i32) -> Result<Option<i64>, ApiError> {
    Ok(match db::row_opt(tx, LOCK_SQL, &[&id]).await? {
        Some(r) => Some(r.try_get("telegram_chat_id")?),
        None => None,
    })
}

/// Why the channel's chat cannot change now, if it cannot: members in the current chat (a live
/// membership) or effects still to be performed there (a pending effect whose `chat_id` is the
/// current chat: a revoke still to kick someone, a grant still to send its link). Either would
/// act on, or send people to, the wrong chat after the change. The caller holds the channel
/// row `FOR UPDATE` ([`lock_for_change`]).
pub async fn chat_change_blocker(
    tx: &Transaction<'_>,
    channel_id: i32,
    chat_id: i64,
) -> Result<Option<String>, ApiError> {
    let live = memberships::channel_holds_access(tx, channel_id).await?;
    let pending = effects::pending_in_chat(tx, chat_id).await?;
    Ok(if live {
        Some(
            "telegram_chat_id cannot change while the channel has active or grace memberships \
             (their members are in the current chat); expire or delete them first"
                .into(),
        )
    } else if pending {
        Some(
            "telegram_chat_id cannot change while Telegram effects for the current chat are \
             pending (GET /api/effects?status=pending); retry once the worker has performed them"
                .into(),
        )
    } else {
        None
    })
}

/// Why the channel's currency cannot become `currency`, if it cannot: plans other than its
/// default plan include it with their own (its current) currency, which must stay the currency
/// of each of their channels. The caller holds the channel row `FOR UPDATE`
/// ([`lock_for_change`]), so no plan including it is being written meanwhile.
pub async fn currency_change_blocker(
    tx: &Transaction<'_>,
    channel_id: i32,
    currency: &str,
) -> Result<Option<String>, ApiError> {
    let plans: Vec<i64> = db::rows(tx, CURRENCY_BLOCKER_SQL, &[&channel_id, &currency])
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
    Ok((!plans.is_empty()).then(|| {
        let ids: Vec<String> = plans.iter().map(i64::to_string).collect();
        format!(
            "currency cannot change while plans other than the channel's default plan include \
             it (plan {}): a plan's currency is the currency of each of its channels; delete \
             those plans or take the channel out of them first",
            ids.join(", ")
        )
    }))
}

/// A channel as a plan's write sees it: its currency, which must be the plan's.
#[derive(Debug, Clone)]
pub struct PlanChannel {
    pub id: i32,
    pub currency: String,
}

crate::from_row!(PlanChannel { id, currency });

/// Channels `ids` that exist, by ascending id, locked `FOR SHARE` until the transaction ends:
/// a plan being made of them or changed to them sees currencies that cannot change before it
/// commits (a currency change locks the row `FOR UPDATE`, [`change`]), and the channels cannot
/// be deleted meanwhile. Locked in ascending id order, like a bundle's pair locks.
pub async fn lock_for_plan(
    tx: &Transaction<'_>,
    ids: &[i32],
) -> Result<Vec<PlanChannel>, ApiError> {
    db::all(tx, LOCK_FOR_PLAN_SQL, &[&ids]).await
}

/// Deletes channel `id`: 404 when there is none, 409 while memberships, orders or payments
/// refer to it (their foreign keys), or a plan other than its default plan includes it. Its
/// default plan goes with it (the schema's trigger), unless orders refer to that plan.
pub async fn delete(client: &impl GenericClient, id: i32) -> Result<(), ApiError> {
    let deleted = client
        .execute(DELETE_SQL, &[&id])
        .await
        .map_err(|e| match e.as_db_error() {
            Some(d) if d.constraint() == Some("plan_channels_channel_id_fkey") => {
                ApiError::Conflict(
                    "plans other than the channel's default plan include it (a bundle or a \
                     trial); delete those plans or take the channel out of them first"
                        .into(),
                )
            }
            Some(d) if *d.code() == tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION => {
                ApiError::Conflict(
                    "the channel has memberships, orders or payments; deactivate it instead".into(),
                )
            }
            _ => ApiError::Db(e),
        })?;
    if deleted == 0 {
        return Err(ApiError::NotFound("channel"));
    }
    tracing::info!(channel_id = id, "channel deleted");
    Ok(())
}
