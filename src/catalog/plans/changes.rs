//! The writes of plans: creating, changing and deleting one under the rules of [`super`]'s
//! documentation, with the schema's refusals answered as the same per-field 422s.

use std::collections::BTreeMap;

use deadpool_postgres::Transaction;
use tokio_postgres::error::SqlState;

use super::{
    Fields, Kind, Plan, Terms, channel_ids_error, crypto_prices_errors, default_plan_errors, get,
    term_errors,
};
use crate::{catalog::channels, common::error::ApiError, db};

/// Reads (and locks `FOR SHARE`, [`channels::lock_for_plan`]) the channels `ids` and returns
/// their one currency, recording in `e` unknown channels and mixed currencies (on
/// `channel_ids`) and a `given` currency other than theirs (on `currency`). `None` when there
/// is no one currency.
async fn channels_currency(
    tx: &Transaction<'_>,
    ids: &[i32],
    given: Option<&str>,
    e: &mut BTreeMap<String, String>,
) -> Result<Option<String>, ApiError> {
    let found = channels::lock_for_plan(tx, ids).await?;
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| !found.iter().any(|c| c.id == **id))
        .map(i32::to_string)
        .collect();
    if !missing.is_empty() {
        e.insert(
            "channel_ids".into(),
            format!("no such channel: {}", missing.join(", ")),
        );
        return Ok(None);
    }
    let first = &found
        .iter()
        .find(|c| c.id == ids[0])
        .expect("every channel was found")
        .currency;
    if found.iter().any(|c| &c.currency != first) {
        let each: Vec<String> = ids
            .iter()
            .filter_map(|id| found.iter().find(|c| c.id == *id))
            .map(|c| format!("channel {} is {}", c.id, c.currency))
            .collect();
        e.insert(
            "channel_ids".into(),
            format!(
                "the channels of a plan must share one currency ({})",
                each.join(", ")
            ),
        );
        return Ok(None);
    }
    if let Some(given) = given
        && given != first
    {
        e.insert(
            "currency".into(),
            format!("must be the currency of the plan's channels ({first})"),
        );
    }
    Ok(Some(first.clone()))
}

/// The schema's refusals of a plan's write, as the per-field 422s (or the 409) the checks
/// above give; anything else stays a database error.
fn refused(e: tokio_postgres::Error) -> ApiError {
    let Some(d) = e.as_db_error() else {
        return ApiError::Db(e);
    };
    let field = match d.constraint() {
        Some("plans_title_check") => "title",
        Some("plans_description_check") => "description",
        Some("plans_kind_check") => "kind",
        Some("plans_price_minor_check") => "price_minor",
        Some("plans_currency_check") => "currency",
        Some("plans_period_days_check" | "plans_trial_period_check") => "period_days",
        Some("plans_recurring_check") => "recurring",
        Some("plans_default_check") => "kind",
        Some("plan_channels_channel_id_fkey") => {
            return ApiError::field("channel_ids", "no such channel");
        }
        Some("orders_plan_id_fkey") => return has_orders_conflict(),
        _ => return ApiError::Db(e),
    };
    if *d.code() == SqlState::CHECK_VIOLATION {
        ApiError::field(field, "breaks a rule of plans (see the API documentation)")
    } else {
        ApiError::Db(e)
    }
}

fn has_orders_conflict() -> ApiError {
    ApiError::Conflict(
        "the plan has orders: it cannot be deleted, and its kind, currency and channel_ids \
         cannot change; deactivate it instead (active: false) and create another plan"
            .into(),
    )
}

const LOCK_SQL: &str = concat!(
    "SELECT ",
    plan_columns!(),
    " FROM plans p WHERE p.id = $1 FOR UPDATE OF p"
);
const INSERT_SQL: &str = "INSERT INTO plans (title, description, kind, price_minor, currency,
                                             period_days, recurring, active, position,
                                             translations, crypto_prices)
     VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8, true), COALESCE($9, 0),
             COALESCE($10::jsonb, '{}'::jsonb), $11)
     RETURNING id";
const INSERT_CHANNELS_SQL: &str = "INSERT INTO plan_channels (plan_id, channel_id, position)
     SELECT $1, c.id, (c.n - 1)::smallint FROM unnest($2::integer[]) WITH ORDINALITY AS c (id, n)";
const DELETE_CHANNELS_SQL: &str = "DELETE FROM plan_channels WHERE plan_id = $1";
// Terms NULL keep theirs: the default plan's came from its channel, through the trigger.
const UPDATE_SQL: &str = "UPDATE plans SET
         title = COALESCE($2, title),
         description = CASE WHEN $3 THEN $4 ELSE description END,
         kind = COALESCE($5, kind),
         price_minor = COALESCE($6, price_minor),
         currency = COALESCE($7, currency),
         period_days = CASE WHEN $8 THEN $9 ELSE period_days END,
         recurring = COALESCE($10, recurring),
         active = COALESCE($11, active),
         position = COALESCE($12, position),
         translations = COALESCE($13, translations),
         crypto_prices = CASE WHEN $14 THEN $15 ELSE crypto_prices END,
         updated_at = statement_timestamp()
     WHERE id = $1";
const HAS_ORDERS_SQL: &str =
    "SELECT EXISTS (SELECT 1 FROM orders WHERE plan_id = $1) AS has_orders";
const DELETE_SQL: &str = "DELETE FROM plans WHERE id = $1";

/// Plan `id`, its row locked `FOR UPDATE` (`None`: no such plan).
async fn lock(tx: &Transaction<'_>, id: i64) -> Result<Option<Plan>, ApiError> {
    db::opt(tx, LOCK_SQL, &[&id]).await
}

/// Whether any order (of any status) buys plan `id`.
async fn has_orders(tx: &Transaction<'_>, id: i64) -> Result<bool, ApiError> {
    Ok(db::row_one(tx, HAS_ORDERS_SQL, &[&id])
        .await?
        .try_get("has_orders")?)
}

async fn set_channels(tx: &Transaction<'_>, id: i64, ids: &[i32]) -> Result<(), ApiError> {
    tx.execute(INSERT_CHANNELS_SQL, &[&id, &ids])
        .await
        .map_err(refused)?;
    Ok(())
}

/// Creates a plan from `f` under the rules of the module documentation: 422 naming each field
/// that breaks one, and nothing written.
pub async fn create(tx: &Transaction<'_>, f: &Fields) -> Result<Plan, ApiError> {
    let mut e = BTreeMap::new();
    let ids = f.channel_ids.clone().unwrap_or_default();
    let currency = match channel_ids_error(&ids) {
        Some(why) => {
            e.insert("channel_ids".to_string(), why);
            None
        }
        None => channels_currency(tx, &ids, f.currency.as_deref(), &mut e).await?,
    };
    let kind = f.kind.unwrap_or(Kind::Paid);
    if let Some(currency) = currency.or_else(|| f.currency.clone()) {
        let terms = Terms {
            kind,
            price_minor: f.price_minor.unwrap_or(0),
            currency,
            period_days: f.period_days.flatten(),
            recurring: f.recurring.unwrap_or(false),
        };
        term_errors(&terms, &mut e);
        crypto_prices_errors(
            terms.kind,
            f.crypto_prices.as_ref().and_then(Option::as_ref),
            &mut e,
        );
        if e.is_empty() {
            let row = tx
                .query_one(
                    INSERT_SQL,
                    &[
                        &f.title,
                        &f.description.clone().flatten(),
                        &terms.kind,
                        &terms.price_minor,
                        &terms.currency,
                        &terms.period_days,
                        &terms.recurring,
                        &f.active,
                        &f.position,
                        &f.translations,
                        &f.crypto_prices.clone().flatten(),
                    ],
                )
                .await
                .map_err(refused)?;
            let id: i64 = row.try_get("id")?;
            set_channels(tx, id, &ids).await?;
            tracing::info!(plan_id = id, "plan created");
            return get(tx, id)
                .await?
                .ok_or_else(|| ApiError::internal("a plan just made is gone"));
        }
    }
    Err(ApiError::Validation(e))
}

/// Changes plan `id` by `f` under the rules of the module documentation: 404 when there is no
/// such plan, 422 naming each field that breaks a rule, 409 when its orders or its channel's
/// plans forbid the change; nothing written unless all of it is.
pub async fn change(tx: &Transaction<'_>, id: i64, f: &Fields) -> Result<Plan, ApiError> {
    // Whether it is a default plan never changes; the rows are then locked in the order below.
    let seen = get(tx, id).await?.ok_or(ApiError::NotFound("plan"))?;
    let mut e = BTreeMap::new();
    let terms = if seen.is_default {
        let channel_id = seen.channel_ids[0];
        default_plan_errors(channel_id, f, &mut e);
        term_errors(&Terms::changed(&seen, f), &mut e);
        let prices = f
            .crypto_prices
            .clone()
            .unwrap_or(seen.crypto_prices.clone());
        crypto_prices_errors(Kind::Paid, prices.as_ref(), &mut e);
        if !e.is_empty() {
            return Err(ApiError::Validation(e));
        }
        // The channel's row first (its change writes this plan's terms through the trigger),
        // then this plan's: the order a change of the channel takes them in.
        let channel = channels::Fields {
            price_minor: f.price_minor,
            currency: f.currency.clone(),
            billing_period_days: f.period_days.flatten(),
            recurring: f.recurring,
            ..channels::Fields::default()
        };
        if channel.price_minor.is_some()
            || channel.currency.is_some()
            || channel.billing_period_days.is_some()
            || channel.recurring.is_some()
        {
            channels::change(tx, channel_id, &channel).await?;
        }
        lock(tx, id).await?.ok_or(ApiError::NotFound("plan"))?;
        None
    } else {
        let plan = lock(tx, id).await?.ok_or(ApiError::NotFound("plan"))?;
        let mut terms = Terms::changed(&plan, f);
        let new_channels = f
            .channel_ids
            .as_ref()
            .filter(|ids| **ids != plan.channel_ids);
        let mut currency_known = true;
        match new_channels {
            Some(ids) => match channel_ids_error(ids) {
                Some(why) => {
                    e.insert("channel_ids".to_string(), why);
                    currency_known = false;
                }
                None => match channels_currency(tx, ids, f.currency.as_deref(), &mut e).await? {
                    // Other channels: the plan takes their currency unless the change names one.
                    Some(c) => terms.currency = f.currency.clone().unwrap_or(c),
                    None => currency_known = false,
                },
            },
            // Its channels' currency is the plan's, and cannot change while it includes them.
            None => {
                if let Some(c) = &f.currency
                    && *c != plan.currency
                {
                    e.insert(
                        "currency".into(),
                        format!(
                            "must be the currency of the plan's channels ({})",
                            plan.currency
                        ),
                    );
                }
            }
        }
        if currency_known {
            term_errors(&terms, &mut e);
        }
        let prices = f
            .crypto_prices
            .clone()
            .unwrap_or(plan.crypto_prices.clone());
        crypto_prices_errors(terms.kind, prices.as_ref(), &mut e);
        if !e.is_empty() {
            return Err(ApiError::Validation(e));
        }
        let fixed_changes =
            terms.kind != plan.kind || terms.currency != plan.currency || new_channels.is_some();
        if fixed_changes && has_orders(tx, id).await? {
            return Err(has_orders_conflict());
        }
        if let Some(ids) = new_channels {
            tx.execute(DELETE_CHANNELS_SQL, &[&id]).await?;
            set_channels(tx, id, ids).await?;
        }
        Some(terms)
    };
    let t = terms.as_ref();
    tx.execute(
        UPDATE_SQL,
        &[
            &id,
            &f.title,
            &f.description.is_some(),
            &f.description.clone().flatten(),
            &t.map(|t| t.kind),
            &t.map(|t| t.price_minor),
            &t.map(|t| t.currency.as_str()),
            &t.is_some(),
            &t.and_then(|t| t.period_days),
            &t.map(|t| t.recurring),
            &f.active,
            &f.position,
            &f.translations,
            &f.crypto_prices.is_some(),
            &f.crypto_prices.clone().flatten(),
        ],
    )
    .await
    .map_err(refused)?;
    get(tx, id).await?.ok_or(ApiError::NotFound("plan"))
}

/// Deletes plan `id`: 404 when there is none; 409 for a channel's default plan (it goes with
/// its channel) and for a plan with orders (deactivate it instead).
pub async fn delete(tx: &Transaction<'_>, id: i64) -> Result<(), ApiError> {
    let plan = lock(tx, id).await?.ok_or(ApiError::NotFound("plan"))?;
    if plan.is_default {
        return Err(ApiError::Conflict(format!(
            "this is the default plan of channel {}: it is the channel's own price and goes \
             with the channel; delete or deactivate the channel, or deactivate this plan \
             (active: false)",
            plan.channel_ids[0]
        )));
    }
    if has_orders(tx, id).await? {
        return Err(has_orders_conflict());
    }
    tx.execute(DELETE_SQL, &[&id]).await.map_err(refused)?;
    tracing::info!(plan_id = id, "plan deleted");
    Ok(())
}
