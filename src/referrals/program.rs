//! The referral program's rules (`referral_program`, one row) and a plan's own rates
//! (`plan_referral_rates`).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
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
