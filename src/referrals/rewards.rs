//! Reward days of buyer-referrers (`referral_rewards`): "bring a friend, get 7 days".
//!
//! A referred buyer's first purchase owes their referrer `buyer_reward_days` (at most what is
//! left of `max_reward_days_per_month` this calendar month, UTC): the row is written in the
//! payment's transaction ([`owe`], once per payment: its unique key), under the affiliate's row
//! lock so two purchases at once cannot both fit under the cap. The days themselves are added
//! by a `referral_reward` effect ([`settle`]) in a transaction of its own that takes the
//! referrer's own lock order — their pair, their channel, the reward row, their membership — as
//! a staff grant does: the payment's transaction holds the buyer's pair and membership, and
//! taking the referrer's pair after them would break the lock order (`docs/locking.md`).
//!
//! A refund of the payment marks the row `reversed_at` in the refund's transaction
//! ([`reverse`]); if the days were granted, another effect takes them back. The effect decides
//! from the row under its lock, so whichever order the grant and the refund come in, the days
//! are added at most once and taken back at most once, and never added after the refund.

use deadpool_postgres::{Pool, Transaction};

use super::affiliates;

use crate::{
    access::{
        memberships::{self, Cause},
        subscribers,
    },
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db,
    orders::seats,
    outbox::effects::{self, Effect, NewEffect, Payload, payload::ReferralReward},
};

/// What is left of the cap is read by a statement issued after the affiliate's lock, so it sees
/// every reward committed before.
const OWE_SQL: &str = "WITH used AS (
         SELECT COALESCE(sum(days), 0)::integer AS days FROM referral_rewards
         WHERE referrer_id = $2 AND reversed_at IS NULL
           AND created_at >= date_trunc('month', statement_timestamp(), 'UTC')
     ), owed AS (
         SELECT LEAST($5::integer, COALESCE($6::integer - used.days, $5::integer)) AS days
         FROM used
     )
     INSERT INTO referral_rewards (affiliate_id, referrer_id, channel_id, payment_id, days)
     SELECT $1, $2, $3, $4, owed.days FROM owed WHERE owed.days >= 1
     ON CONFLICT (payment_id) DO NOTHING
     RETURNING id, days";

/// What a referred purchase owes its buyer-referrer.
pub(super) struct Owed {
    pub affiliate_id: i32,
    pub referrer: SubscriberId,
    pub channel: ChannelId,
    pub payment_id: i64,
    pub days: i32,
    /// `max_reward_days_per_month`.
    pub cap: Option<i32>,
}

/// In the payment's transaction: owes the referrer `o.days` (less when the month's cap is
/// nearly used, nothing when it is used up) and enqueues the effect that grants them. Returns
/// the days owed.
pub(super) async fn owe(tx: &Transaction<'_>, o: &Owed) -> Result<Option<i32>, ApiError> {
    affiliates::lock(tx, o.affiliate_id).await?;
    let Some(row) = db::row_opt(
        tx,
        OWE_SQL,
        &[
            &o.affiliate_id,
            &o.referrer,
            &o.channel,
            &o.payment_id,
            &o.days,
            &o.cap,
        ],
    )
    .await?
    else {
        tracing::info!(
            payment_id = o.payment_id,
            referrer_id = o.referrer.0,
            "referrer's reward days for this month are used up; none owed"
        );
        return Ok(None);
    };
    let (id, days): (i64, i32) = (row.try_get("id")?, row.try_get("days")?);
    enqueue(tx, id, o.referrer, "grant").await?;
    Ok(Some(days))
}

async fn enqueue(
    tx: &Transaction<'_>,
    reward_id: i64,
    referrer: SubscriberId,
    step: &str,
) -> Result<(), ApiError> {
    let user_id = subscribers::telegram_user_id(tx, referrer.0).await?;
    effects::enqueue(
        &**tx,
        &NewEffect {
            membership_id: None,
            payment_id: None,
            order_id: None,
            chat_id: None,
            user_id,
            payload: Payload::ReferralReward(ReferralReward { reward_id }),
            dedupe_key: Some(format!("referral_reward:{reward_id}:{step}")),
        },
    )
    .await?;
    Ok(())
}

const REVERSE_SQL: &str = "UPDATE referral_rewards SET reversed_at = statement_timestamp()
     WHERE payment_id = $1 AND reversed_at IS NULL
     RETURNING id, referrer_id, granted_at IS NOT NULL AS granted";

/// In the transaction that takes payment `payment_id`'s access back: its reward (if any) is
/// reversed, and if its days were granted already, an effect takes them back. Once: a reward
/// reversed already is left alone. Returns whether there was a reward to reverse.
pub(crate) async fn reverse(tx: &Transaction<'_>, payment_id: i64) -> Result<bool, ApiError> {
    let Some(row) = db::row_opt(tx, REVERSE_SQL, &[&payment_id]).await? else {
        return Ok(false);
    };
    let id: i64 = row.try_get("id")?;
    if row.try_get::<_, bool>("granted")? {
        enqueue(tx, id, SubscriberId(row.try_get("referrer_id")?), "back").await?;
    }
    tracing::info!(
        reward_id = id,
        payment_id,
        "referral reward reversed with its payment"
    );
    Ok(true)
}

const PAIR_SQL: &str = "SELECT referrer_id, channel_id FROM referral_rewards WHERE id = $1";
const LOCK_SQL: &str = "SELECT days, reversed_at IS NOT NULL AS reversed,
            granted_at IS NOT NULL AS granted, taken_back_at IS NOT NULL AS taken_back
     FROM referral_rewards WHERE id = $1 FOR UPDATE";
const GRANTED_SQL: &str =
    "UPDATE referral_rewards SET granted_at = statement_timestamp() WHERE id = $1";
const TAKEN_BACK_SQL: &str =
    "UPDATE referral_rewards SET taken_back_at = statement_timestamp() WHERE id = $1";

/// The `referral_reward` effect `e`: [`settle`] of its reward.
pub async fn settle_of_effect(pool: &Pool, e: &Effect) -> Result<Option<String>, ApiError> {
    match e.typed_payload() {
        Ok(Payload::ReferralReward(p)) => settle(pool, p.reward_id).await,
        _ => Ok(Some(
            "skipped: the payload names no reward (reward_id)".into(),
        )),
    }
}

/// Brings reward `reward_id` to what its row says, in one transaction in the referrer's lock
/// order: owed and not reversed → its days added to the referrer's membership of the channel
/// (made if they have none; cause `referral`); reversed after it was granted → the days taken
/// back (`referral_back`); anything else → nothing. Returns a note when there was nothing to do.
pub async fn settle(pool: &Pool, reward_id: i64) -> Result<Option<String>, ApiError> {
    crate::transaction!(pool, |tx| {
        let Some(pair) = db::row_opt(tx, PAIR_SQL, &[&reward_id]).await? else {
            return Ok(Some("skipped: the reward is gone".into()));
        };
        let referrer = SubscriberId(pair.try_get("referrer_id")?);
        let channel = ChannelId(pair.try_get("channel_id")?);
        db::lock_pair(tx, referrer, channel).await?;
        if seats::lock_channel_terms(tx, channel.0).await?.is_none() {
            return Ok(Some("skipped: the channel is gone".into()));
        }
        let Some(r) = db::row_opt(tx, LOCK_SQL, &[&reward_id]).await? else {
            return Ok(Some("skipped: the reward is gone".into()));
        };
        let days: i32 = r.try_get("days")?;
        let (reversed, granted, taken_back): (bool, bool, bool) = (
            r.try_get("reversed")?,
            r.try_get("granted")?,
            r.try_get("taken_back")?,
        );
        match (reversed, granted, taken_back) {
            (false, false, _) => {
                memberships::lock(tx, referrer, channel).await?;
                let (m, _) =
                    memberships::extend(tx, referrer, channel, days, Cause::Referral).await?;
                db::execute(tx, GRANTED_SQL, &[&reward_id]).await?;
                tracing::info!(
                    reward_id,
                    membership_id = m.id,
                    days,
                    "referral reward days granted"
                );
                Ok(None)
            }
            (true, true, false) => {
                if let Some(before) = memberships::lock(tx, referrer, channel).await? {
                    memberships::take_back_days(tx, &before, days).await?;
                }
                db::execute(tx, TAKEN_BACK_SQL, &[&reward_id]).await?;
                tracing::info!(reward_id, days, "referral reward days taken back");
                Ok(None)
            }
            (true, false, _) => Ok(Some(
                "skipped: the purchase was refunded before the days were granted".into(),
            )),
            (false, true, _) | (true, true, true) => Ok(Some("skipped: already done".into())),
        }
    })
}
