//! The referral program's rules (`referral_program`, one row) and a plan's own rates
//! (`plan_referral_rates`): their reads, and staff's changes of both.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;

use crate::{common::error::ApiError, db};

crate::text_enum! {
    /// Which click a buyer is attributed by.
    pub enum Attribution {
        /// The first click within the window holds; later clicks are counted, not attributed.
        FirstClick => "first_click",
        /// Every click attributes the buyer anew.
        LastClick => "last_click",
    }
}

/// The program as staff read and write it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = ReferralProgram)]
pub struct Program {
    pub enabled: bool,
    /// `first_click` or `last_click`.
    #[schema(value_type = String, example = "first_click")]
    pub attribution: Attribution,
    /// How long an attribution lasts for a first purchase.
    pub window_days: i32,
    /// How long a line stays `pending` before it is `payable`.
    pub hold_days: i32,
    /// Percent of a first purchase's net amount (0..90).
    pub first_percent: i32,
    /// Percent of a renewal's net amount (0..90).
    pub renewal_percent: i32,
    /// How many months after the attribution renewals earn.
    pub renewal_months: i32,
    /// Whether a buyer may ask the bot `/referral` for their own link.
    pub buyer_links: bool,
    /// Days a buyer-referrer earns for a referred buyer's first purchase (instead of money).
    pub buyer_reward_days: Option<i32>,
    /// The most reward days one referrer earns in a calendar month (UTC).
    pub max_reward_days_per_month: Option<i32>,
    pub updated_at: DateTime<Utc>,
}

/// The select list of [`Program`].
macro_rules! program_columns {
    () => {
        "enabled, attribution, window_days, hold_days, first_percent, renewal_percent, \
         renewal_months, buyer_links, buyer_reward_days, max_reward_days_per_month, updated_at"
    };
}

crate::from_row!(Program [program_columns!()] {
    enabled,
    attribution,
    window_days,
    hold_days,
    first_percent,
    renewal_percent,
    renewal_months,
    buyer_links,
    buyer_reward_days,
    max_reward_days_per_month,
    updated_at,
});

const GET_SQL: &str = concat!("SELECT ", program_columns!(), " FROM referral_program");

/// The program.
pub async fn get(client: &impl GenericClient) -> Result<Program, ApiError> {
    db::one(client, GET_SQL, &[]).await
}

/// A plan's own rates, in place of the program's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = ReferralRates)]
pub struct Rates {
    pub first_percent: i32,
    pub renewal_percent: i32,
}

crate::from_row!(Rates {
    first_percent,
    renewal_percent
});

const PLAN_RATES_SQL: &str =
    "SELECT first_percent, renewal_percent FROM plan_referral_rates WHERE plan_id = $1";

/// Plan `plan_id`'s own rates, if it has them.
pub async fn plan_rates(
    client: &impl GenericClient,
    plan_id: i64,
) -> Result<Option<Rates>, ApiError> {
    db::opt(client, PLAN_RATES_SQL, &[&plan_id]).await
}

/// A change of the program: a field left out (`None`) keeps its value; for the two nullable
/// fields `Some(None)` clears them. The caller has checked every value's range (the schema's
/// CHECKs refuse the rest).
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub enabled: Option<bool>,
    pub attribution: Option<Attribution>,
    pub window_days: Option<i32>,
    pub hold_days: Option<i32>,
    pub first_percent: Option<i32>,
    pub renewal_percent: Option<i32>,
    pub renewal_months: Option<i32>,
    pub buyer_links: Option<bool>,
    pub buyer_reward_days: Option<Option<i32>>,
    pub max_reward_days_per_month: Option<Option<i32>>,
}

const LOCK_SQL: &str = concat!(
    "SELECT ",
    program_columns!(),
    " FROM referral_program FOR UPDATE"
);

// `$9`/`$11`: whether the nullable field was given (its value, null included, is `$10`/`$12`).
const CHANGE_SQL: &str = concat!(
    "UPDATE referral_program SET
         enabled = COALESCE($1, enabled),
         attribution = COALESCE($2, attribution),
         window_days = COALESCE($3, window_days),
         hold_days = COALESCE($4, hold_days),
         first_percent = COALESCE($5, first_percent),
         renewal_percent = COALESCE($6, renewal_percent),
         renewal_months = COALESCE($7, renewal_months),
         buyer_links = COALESCE($8, buyer_links),
         buyer_reward_days = CASE WHEN $9 THEN $10 ELSE buyer_reward_days END,
         max_reward_days_per_month = CASE WHEN $11 THEN $12 ELSE max_reward_days_per_month END,
         updated_at = statement_timestamp()
     RETURNING ",
    program_columns!()
);

/// The program, its row locked for a change in this transaction (what a change's audit row
/// calls `before`).
pub async fn lock(tx: &Transaction<'_>) -> Result<Program, ApiError> {
    db::one(tx, LOCK_SQL, &[]).await
}

/// Changes the program; returns it as changed. New rules apply to what happens from now on:
/// lines already written keep their percent and `payable_at`.
pub async fn change(tx: &Transaction<'_>, c: &Change) -> Result<Program, ApiError> {
    db::one(
        tx,
        CHANGE_SQL,
        &[
            &c.enabled,
            &c.attribution,
            &c.window_days,
            &c.hold_days,
            &c.first_percent,
            &c.renewal_percent,
            &c.renewal_months,
            &c.buyer_links,
            &c.buyer_reward_days.is_some(),
            &c.buyer_reward_days.flatten(),
            &c.max_reward_days_per_month.is_some(),
            &c.max_reward_days_per_month.flatten(),
        ],
    )
    .await
}

/// The rates a plan earns at, and where they come from.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"plan_id": 3, "first_percent": 30, "renewal_percent": 10,
    "source": "plan"}))]
#[schema(as = PlanReferralRates)]
pub struct PlanRates {
    pub plan_id: i64,
    pub first_percent: i32,
    pub renewal_percent: i32,
    /// `plan`: the plan's own rates; `program`: the program's, which apply while the plan has
    /// none.
    #[schema(value_type = String, pattern = "^(plan|program)$")]
    pub source: &'static str,
}

impl PlanRates {
    fn of(plan_id: i64, own: Option<Rates>, program: &Program) -> PlanRates {
        let (rates, source) = match own {
            Some(r) => (r, "plan"),
            None => (
                Rates {
                    first_percent: program.first_percent,
                    renewal_percent: program.renewal_percent,
                },
                "program",
            ),
        };
        PlanRates {
            plan_id,
            first_percent: rates.first_percent,
            renewal_percent: rates.renewal_percent,
            source,
        }
    }
}

/// The rates plan `plan_id` earns at now (its own, else the program's). The caller has checked
/// that the plan exists.
pub async fn rates_of_plan(
    client: &impl GenericClient,
    plan_id: i64,
) -> Result<PlanRates, ApiError> {
    let own = plan_rates(client, plan_id).await?;
    Ok(PlanRates::of(plan_id, own, &get(client).await?))
}

const SET_PLAN_RATES_SQL: &str =
    "INSERT INTO plan_referral_rates (plan_id, first_percent, renewal_percent)
     VALUES ($1, $2, $3)
     ON CONFLICT (plan_id) DO UPDATE
         SET first_percent = EXCLUDED.first_percent,
             renewal_percent = EXCLUDED.renewal_percent,
             updated_at = statement_timestamp()
     RETURNING first_percent, renewal_percent";

/// Gives plan `plan_id` rates of its own (in place of the program's); 404 when there is no
/// such plan. The caller has checked both percents (0..90).
pub async fn set_plan_rates(
    tx: &Transaction<'_>,
    plan_id: i64,
    rates: Rates,
) -> Result<PlanRates, ApiError> {
    let own: Rates = db::one(
        tx,
        SET_PLAN_RATES_SQL,
        &[&plan_id, &rates.first_percent, &rates.renewal_percent],
    )
    .await
    .map_err(|e| match e {
        ApiError::Db(d)
            if d.as_db_error().and_then(|d| d.constraint())
                == Some("plan_referral_rates_plan_id_fkey") =>
        {
            ApiError::NotFound("plan")
        }
        other => other,
    })?;
    Ok(PlanRates::of(plan_id, Some(own), &get(tx).await?))
}

const REMOVE_PLAN_RATES_SQL: &str = "DELETE FROM plan_referral_rates WHERE plan_id = $1";

/// Removes plan `plan_id`'s own rates, if it had any: it earns at the program's again.
pub async fn remove_plan_rates(tx: &Transaction<'_>, plan_id: i64) -> Result<PlanRates, ApiError> {
    db::execute(tx, REMOVE_PLAN_RATES_SQL, &[&plan_id]).await?;
    Ok(PlanRates::of(plan_id, None, &get(tx).await?))
}
