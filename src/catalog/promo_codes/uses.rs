//! A promo code's uses: taken by a new order ([`discount_for_new_order`]), kept or taken again
//! by a checkout or payment ([`use_still_held`], [`hold_again`]), and previewed for showing
//! prices ([`preview`]). Every decision that takes a use is made under the code's row lock.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};

use super::{
    Discount, discount_minor, normalize,
    rules::{Refusal, Terms, plan_refusal, refusal, refused},
};
use crate::{
    catalog::plans::Plan,
    common::{error::ApiError, ids::SubscriberId},
    db,
};

// A code made for one buyer (`subscriber_id`: a win-back or cancel offer) is no code to anyone
// else: `$2` is the buyer.
const LOCK_BY_CODE_SQL: &str = concat!(
    "SELECT ",
    terms_columns!(),
    " FROM promo_codes WHERE code = $1 AND (subscriber_id IS NULL OR subscriber_id = $2)
     FOR UPDATE"
);
const LOCK_BY_ID_SQL: &str = concat!(
    "SELECT ",
    terms_columns!(),
    " FROM promo_codes WHERE id = $1 FOR UPDATE"
);
// What database time decides, read by a statement after the code's lock (a locking
// statement's own `statement_timestamp()` is from before its wait): code `$1`'s uses,
// subscriber `$2`'s uses of it, whether `$3` (an order's `promo_held_until`) is still ahead,
// and whether the code has expired.
const NOW_SQL: &str = concat!(
    "SELECT (SELECT count(*) FROM orders o WHERE o.promo_code_id = $1 AND ",
    holds_use_sql!("o"),
    ") AS uses,
       (SELECT count(*) FROM orders o WHERE o.promo_code_id = $1 AND o.subscriber_id = $2 AND ",
    holds_use_sql!("o"),
    ") AS buyer_uses,
       coalesce($3::timestamptz > statement_timestamp(), false) AS still_held,
       coalesce((SELECT pc.expires_at <= statement_timestamp() FROM promo_codes pc
                 WHERE pc.id = $1), false) AS expired"
);
// A purchase: a paid order of a paid plan (a trial is not one) covering one of channels `$2`.
const BOUGHT_BEFORE_SQL: &str = "SELECT EXISTS (
         SELECT 1 FROM orders o
         JOIN plans p ON p.id = o.plan_id
         JOIN plan_channels pc ON pc.plan_id = o.plan_id
         WHERE o.subscriber_id = $1 AND o.status = 'paid' AND p.kind = 'paid'
           AND pc.channel_id = ANY($2::integer[])) AS bought";
const RETAKE_SQL: &str = "UPDATE orders
     SET promo_held_until = statement_timestamp() + make_interval(secs => $2::float8)
     WHERE id = $1 AND status = 'pending' AND promo_code_id IS NOT NULL
       AND (promo_held_until IS NULL OR promo_held_until <= statement_timestamp())";

/// The discount `code` (any case) gives subscriber `subscriber` on a new order of `plan`, taking
/// one use of it for the order (the caller inserts the order in the same transaction, with
/// `promo_held_until` = database now + `HOLD_SECS`). A 422 naming `promo_code` when the code is
/// unknown, inactive, expired, exhausted, not for this plan, or used up by this buyer.
///
/// Decided under the code's row lock (the first lock of an order's creation), so racing orders
/// of the last use decide one after the other.
pub async fn discount_for_new_order(
    tx: &Transaction<'_>,
    code: &str,
    subscriber: SubscriberId,
    plan: &Plan,
) -> Result<Discount, ApiError> {
    let Some(code) = normalize(code) else {
        return Err(refused("no such promo code"));
    };
    let Some(t) = db::opt::<Terms>(tx, LOCK_BY_CODE_SQL, &[&code, &subscriber]).await? else {
        return Err(refused("no such promo code"));
    };
    let now = now(tx, t.id, subscriber, None).await?;
    if let Some(why) = refusal(&t, now.uses, now.buyer_uses, now.expired, Some(plan)) {
        return Err(refused(why.message(plan)));
    }
    if t.first_purchase_only && bought_before(tx, subscriber, &plan.channel_ids).await? {
        return Err(refused(Refusal::FirstPurchase.message(plan)));
    }
    Ok(Discount {
        promo_code_id: t.id,
        discount_minor: discount_minor(plan.price_minor, t.off()),
    })
}

/// [`Preview`]'s select list over `promo_codes pc`; `$2`: the buyer (may be NULL).
macro_rules! preview_columns {
    () => {
        concat!(
            "pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, \
             pc.max_redemptions, pc.per_buyer_limit, pc.first_purchase_only, pc.active, \
             coalesce(pc.expires_at <= statement_timestamp(), false) AS expired, \
             (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND ",
            holds_use_sql!("o"),
            ") AS uses, \
             (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id \
                AND o.subscriber_id = $2 AND ",
            holds_use_sql!("o"),
            ") AS buyer_uses"
        )
    };
}

/// A code as a buyer would find it now, for showing prices with it: read without a lock and
/// writing nothing. The same rule as [`discount_for_new_order`] over what one statement read,
/// so that decision, taken later under the code's lock, agrees unless a use was taken meanwhile.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Its text (upper case).
    pub code: String,
    pub terms: Terms,
    uses: i64,
    buyer_uses: i64,
    expired: bool,
}

crate::from_row!(Preview [preview_columns!()] {
    code,
    terms = Terms,
    uses,
    buyer_uses,
    expired,
});

const PREVIEW_BY_CODE_SQL: &str = concat!(
    "SELECT ",
    preview_columns!(),
    " FROM promo_codes pc
     WHERE pc.code = $1 AND (pc.subscriber_id IS NULL OR pc.subscriber_id = $2)"
);
const PREVIEW_BY_ID_SQL: &str = concat!(
    "SELECT ",
    preview_columns!(),
    " FROM promo_codes pc WHERE pc.id = $1"
);

/// The code with text `code` (any case) as `buyer` (if known) would find it now; `None` when
/// there is no such code, or it was made for another buyer alone. Read-only.
pub async fn preview(
    client: &impl GenericClient,
    code: &str,
    buyer: Option<SubscriberId>,
) -> Result<Option<Preview>, ApiError> {
    let Some(code) = normalize(code) else {
        return Ok(None);
    };
    db::opt(client, PREVIEW_BY_CODE_SQL, &[&code, &buyer]).await
}

/// Code `id` as `buyer` (if known) would find it now; `None` when there is no such code.
/// Read-only.
pub async fn preview_by_id(
    client: &impl GenericClient,
    id: i64,
    buyer: Option<SubscriberId>,
) -> Result<Option<Preview>, ApiError> {
    db::opt(client, PREVIEW_BY_ID_SQL, &[&id, &buyer]).await
}

impl Preview {
    /// Why the code gives no new use now for any plan (inactive, expired, used up, or by this
    /// buyer).
    pub fn refusal(&self) -> Option<Refusal> {
        refusal(&self.terms, self.uses, self.buyer_uses, self.expired, None)
    }

    /// Whether the code is meant for `plan` at all (a paid plan in its list, in its currency).
    pub fn covers(&self, plan: &Plan) -> bool {
        plan_refusal(&self.terms, plan).is_none()
    }

    /// What the code would take off a new order of `plan` by `buyer` (a first purchase is not
    /// checked for an unknown buyer), or why it would be refused. Read-only.
    pub async fn discount_on(
        &self,
        client: &impl GenericClient,
        buyer: Option<SubscriberId>,
        plan: &Plan,
    ) -> Result<Result<Discount, Refusal>, ApiError> {
        let t = &self.terms;
        if let Some(why) = refusal(t, self.uses, self.buyer_uses, self.expired, Some(plan)) {
            return Ok(Err(why));
        }
        if t.first_purchase_only
            && let Some(buyer) = buyer
            && bought_before(client, buyer, &plan.channel_ids).await?
        {
            return Ok(Err(Refusal::FirstPurchase));
        }
        Ok(Ok(Discount {
            promo_code_id: t.id,
            discount_minor: discount_minor(plan.price_minor, t.off()),
        }))
    }
}

/// What [`use_still_held`] needs of an order (`orders::Order::promo_use`; this module sits
/// below `orders`, which calls it when an order is made).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderUse {
    pub order_id: i64,
    pub subscriber: SubscriberId,
    /// The code the order uses, if any.
    pub promo_code_id: Option<i64>,
    /// Until when it holds its use (NULL once paid or cancelled).
    pub promo_held_until: Option<DateTime<Utc>>,
    /// The order is pending.
    pub pending: bool,
}

/// Whether pending order `order` (locked in the lock order) still holds its code's use, or may
/// take it again because its hold lapsed and the code still has room (uses below
/// `max_redemptions`, the buyer's below `per_buyer_limit`), decided under the code's lock;
/// `true` for an order without a code or one that is not pending (not this rule's decision).
/// Writes nothing: a checkout that goes on to approve the order holds the use again
/// ([`hold_again`]); the payment core pays the order in the same transaction, which makes it a
/// paid use under the same lock. `false` refuses them (`promo_exhausted`).
///
/// A lapsed use is taken again on room alone: the order's price was fixed when it was made, so
/// a code deactivated, expired or re-planned since does not take it back.
pub async fn use_still_held(tx: &Transaction<'_>, order: OrderUse) -> Result<bool, ApiError> {
    let Some(code_id) = order.promo_code_id else {
        return Ok(true);
    };
    if !order.pending {
        return Ok(true);
    }
    let t = db::one::<Terms>(tx, LOCK_BY_ID_SQL, &[&code_id]).await?;
    let now = now(tx, t.id, order.subscriber, order.promo_held_until).await?;
    if now.still_held {
        return Ok(true);
    }
    Ok(t.max_redemptions
        .is_none_or(|max| now.uses < i64::from(max))
        && now.buyer_uses < i64::from(t.per_buyer_limit))
}

/// After [`use_still_held`] said yes and the checkout approved `order`: a use whose hold lapsed
/// is held again for `hold_secs` from database now. A hold still running is left as it is
/// (never extended, like a seat hold), and an order without a code is untouched.
pub async fn hold_again(
    tx: &Transaction<'_>,
    order: OrderUse,
    hold_secs: i64,
) -> Result<(), ApiError> {
    if order.promo_code_id.is_none() || !order.pending {
        return Ok(());
    }
    if db::execute(tx, RETAKE_SQL, &[&order.order_id, &(hold_secs as f64)]).await? > 0 {
        tracing::info!(
            order_id = order.order_id,
            promo_code_id = ?order.promo_code_id,
            "lapsed promo use taken again"
        );
    }
    Ok(())
}

/// What database time decides about code `id` now ([`NOW_SQL`]).
struct Now {
    uses: i64,
    buyer_uses: i64,
    /// `held_until` is still ahead.
    still_held: bool,
    expired: bool,
}

crate::from_row!(Now {
    uses,
    buyer_uses,
    still_held,
    expired,
});

/// Code `id`'s uses, subscriber `subscriber`'s uses of it, whether `held_until` is still ahead
/// and whether the code expired, by database time. The caller holds the code's lock.
async fn now(
    tx: &Transaction<'_>,
    id: i64,
    subscriber: SubscriberId,
    held_until: Option<DateTime<Utc>>,
) -> Result<Now, ApiError> {
    db::one(tx, NOW_SQL, &[&id, &subscriber, &held_until]).await
}

/// Whether the subscriber bought access to any of `channels` before (a paid order of a paid
/// plan covering one of them).
async fn bought_before(
    client: &impl GenericClient,
    subscriber: SubscriberId,
    channels: &[i32],
) -> Result<bool, ApiError> {
    Ok(
        db::row_one(client, BOUGHT_BEFORE_SQL, &[&subscriber, &channels])
            .await?
            .try_get("bought")?,
    )
}
