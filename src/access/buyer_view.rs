//! What a buyer sees of their memberships in the bot: `/subscriptions` ([`of_telegram_user`])
//! and the renew button of a membership ([`renew_facts`]). Reads only, without locks: a
//! renew button buys through the buy button, which decides again under the locks.
//!
//! A renew button buys again the plan the buyer last paid for the channel, when that plan still
//! renews (`last_paid_plan_sql!`); which button that makes is the bot's choice, from the facts
//! read here.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::memberships::{Expiry, Status};
use crate::{
    common::error::ApiError,
    db::{self, FromRow},
    present::translations::Translations,
};

/// SQL: a lateral join, after membership row `$m`, of the plan a renew button of it buys: the
/// newest paid order of its subscriber for a paid plan with a period that includes its channel
/// — `last_plan_id`, and `last_plan_renews`: that plan is active and not a channel's default
/// plan.
macro_rules! last_paid_plan_sql {
    ($m:literal) => {
        concat!(
            "LEFT JOIN LATERAL (
                 SELECT o.plan_id AS last_plan_id,
                        p.active AND p.default_of IS NULL AS last_plan_renews
                 FROM orders o JOIN plans p ON p.id = o.plan_id
                 WHERE o.subscriber_id = ",
            $m,
            ".subscriber_id AND o.status = 'paid'
                   AND p.kind = 'paid' AND p.period_days IS NOT NULL
                   AND EXISTS (SELECT 1 FROM plan_channels pc
                               WHERE pc.plan_id = o.plan_id AND pc.channel_id = ",
            $m,
            ".channel_id)
                 ORDER BY o.paid_at DESC NULLS LAST, o.id DESC LIMIT 1
             ) lp ON true"
        )
    };
}

/// What a membership's renew button is made from: its channel, whether the channel sells now
/// and in which currency, and the plan last paid for it (`last_paid_plan_sql!`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewFacts {
    pub channel_id: i32,
    /// The channel is active.
    pub active: bool,
    pub currency: String,
    pub last_plan_id: Option<i64>,
    /// The last paid plan is active and not a channel's default plan.
    pub last_plan_renews: Option<bool>,
}

crate::from_row!(RenewFacts ["channel_id, active, currency, last_plan_id, last_plan_renews"] {
    channel_id,
    active,
    currency,
    last_plan_id,
    last_plan_renews,
});

const RENEW_SQL: &str = concat!(
    "SELECT m.channel_id, c.active, c.currency, lp.last_plan_id, lp.last_plan_renews
     FROM memberships m JOIN channels c ON c.id = m.channel_id ",
    last_paid_plan_sql!("m"),
    " WHERE m.id = $1"
);

/// The renew facts of membership `membership_id`; `None` when there is no such membership.
pub async fn renew_facts(
    client: &impl GenericClient,
    membership_id: i64,
) -> Result<Option<RenewFacts>, ApiError> {
    db::opt(client, RENEW_SQL, &[&membership_id]).await
}

/// The newest applied Stars subscription of a membership's buyer and channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestSubscription {
    pub id: i64,
    /// Its status as stored: `active` or `cancelled` (the vocabulary is
    /// `crate::payments::star_subscriptions::Status`, in the layer above this one).
    pub status: String,
    pub expires_at: DateTime<Utc>,
    /// `expires_at` is still ahead of database time.
    pub ahead: bool,
}

/// A membership as `/subscriptions` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct BuyerMembership {
    /// The membership's id.
    pub id: i64,
    pub status: Status,
    pub expires_at: Expiry,
    pub title: String,
    pub translations: Translations,
    pub renew: RenewFacts,
    pub subscription: Option<LatestSubscription>,
}

impl FromRow for BuyerMembership {
    const COLUMNS: &'static str = "membership_id, channel_id, title, translations, status, expires_at, active, \
         currency, last_plan_id, last_plan_renews, subscription_id, subscription_status, \
         subscription_expires_at, subscription_ahead";

    fn from_row(r: &Row) -> Result<BuyerMembership, tokio_postgres::Error> {
        let subscription = match r.try_get::<_, Option<i64>>("subscription_id")? {
            Some(id) => Some(LatestSubscription {
                id,
                status: r.try_get("subscription_status")?,
                expires_at: r.try_get("subscription_expires_at")?,
                ahead: r.try_get("subscription_ahead")?,
            }),
            None => None,
        };
        Ok(BuyerMembership {
            id: r.try_get("membership_id")?,
            status: r.try_get("status")?,
            expires_at: r.try_get("expires_at")?,
            title: r.try_get("title")?,
            translations: r.try_get("translations")?,
            renew: RenewFacts::from_row(r)?,
            subscription,
        })
    }
}

/// The buyer's (Telegram user `$1`) memberships for `/subscriptions`, at most `$2`: each with its
/// channel, its newest applied Stars subscription, and the plan a renew button buys.
const SUBSCRIPTIONS_SQL: &str = concat!(
    "SELECT m.id AS membership_id, m.channel_id, c.title, c.translations, m.status,
            m.expires_at,
            c.active, c.currency,
            lp.last_plan_id, lp.last_plan_renews,
            ss.id AS subscription_id, ss.status AS subscription_status,
            ss.expires_at AS subscription_expires_at,
            ss.expires_at > statement_timestamp() AS subscription_ahead
     FROM memberships m
     JOIN subscribers s ON s.id = m.subscriber_id
     JOIN channels c ON c.id = m.channel_id
     LEFT JOIN LATERAL (
         SELECT x.id, x.status, x.expires_at FROM star_subscriptions x
         WHERE x.subscriber_id = m.subscriber_id AND x.channel_id = m.channel_id
           AND x.applied
         ORDER BY x.id DESC LIMIT 1
     ) ss ON true
     ",
    last_paid_plan_sql!("m"),
    "
     WHERE s.telegram_user_id = $1
     ORDER BY m.status = 'expired', m.expires_at DESC, m.id
     LIMIT $2"
);

/// The memberships of Telegram user `user_id`, at most `max`: the ones holding access first,
/// then by expiry, latest first.
pub async fn of_telegram_user(
    client: &impl GenericClient,
    user_id: i64,
    max: i64,
) -> Result<Vec<BuyerMembership>, ApiError> {
    db::all(client, SUBSCRIPTIONS_SQL, &[&user_id, &max]).await
}
