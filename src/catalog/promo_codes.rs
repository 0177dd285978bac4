//! Promo codes (API.md "Offers"): percent or amount off a plan's price, with limits that hold
//! exactly under racing buyers. This module owns the `promo_codes` rows, their rules of change,
//! and every decision about a use.
//!
//! A code's **uses** are its paid orders plus the pending orders that hold one
//! (`orders.promo_held_until` in the future, `holds_use_sql!`): a new order takes a use and
//! holds it for `HOLD_SECS` like a seat hold ([`discount_for_new_order`]); a checkout,
//! pre-checkout or payment of an order whose hold lapsed takes it again only while the code has
//! room ([`use_still_held`], then [`hold_again`] for an approved checkout); paying the order makes the use permanent (and clears the hold),
//! cancelling it gives the use back. Every one of these decisions is taken under
//! `SELECT … FROM promo_codes WHERE id = $1 FOR UPDATE`, so two buyers racing for the last use
//! decide one after the other and the second sees the first one's order: a code never has more
//! paid orders than `max_redemptions`, nor a buyer more than `per_buyer_limit`.
//!
//! The code row comes after the order row and before the channel rows in the lock order
//! (`docs/locking.md`): the order lock takes it in the same statement
//! (`orders::seats::lock_order_of_locked_pair`), order creation takes only it.
//!
//! Once an order uses a code, its text and its discount (`code`, `percent_off`,
//! `amount_off_minor`, `currency`) are fixed (409): orders show the code's text and were priced
//! by its discount. Its limits, plans, expiry and `active` may change at any time; they bind new
//! uses only (an order already made keeps its price and its held use).

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;
use tokio_postgres::Row;

use crate::{
    catalog::plans::{self, Plan},
    common::{currency, error::ApiError, ids::SubscriberId},
    db::{self, FromRow},
};

/// SQL: order `$o` (an `orders` row) counts as a use of its code: paid, or pending and holding
/// its use at database time. `holds_use_sql!("o")`.
macro_rules! holds_use_sql {
    ($o:literal) => {
        concat!(
            "(",
            $o,
            ".status = 'paid' OR (",
            $o,
            ".status = 'pending' AND ",
            $o,
            ".promo_held_until > statement_timestamp()))"
        )
    };
}

/// The select list of [`PromoCode`] over `promo_codes pc`.
macro_rules! promo_code_columns {
    () => {
        "pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids, \
         pc.max_redemptions, pc.per_buyer_limit, pc.expires_at, pc.first_purchase_only, \
         pc.active, pc.created_at, pc.updated_at, \
         (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'paid') \
           AS redemptions, \
         (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id AND o.status = 'pending' \
            AND o.promo_held_until > statement_timestamp()) AS held"
    };
}

/// The shortest and longest code, in characters.
pub const CODE_LEN: std::ops::RangeInclusive<usize> = 3..=32;
/// What a code is made of, as staff and buyers are told.
pub const CODE_RULE: &str = "must be 3 to 32 characters of A-Z, 0-9, _ and -";
/// At most this many plans in `plan_ids`.
pub const PLAN_IDS_MAX: usize = 100;

/// A code as it is stored: upper case (a buyer's text is upper-cased before it is matched), or
/// `None` when it is not 3..32 of `A-Z 0-9 _ -` once upper-cased.
pub fn normalize(code: &str) -> Option<String> {
    let upper = code.to_ascii_uppercase();
    let fits = CODE_LEN.contains(&upper.len())
        && upper
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    fits.then_some(upper)
}

/// A promo code as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "code": "SPRING25", "percent_off": 25,
    "amount_off_minor": null, "currency": null, "plan_ids": null, "max_redemptions": 100,
    "per_buyer_limit": 1, "expires_at": "2025-06-01T00:00:00Z", "first_purchase_only": false,
    "active": true, "redemptions": 3, "held": 1, "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:00:00Z"}))]
pub struct PromoCode {
    pub id: i64,
    /// 3..32 of `A-Z 0-9 _ -`, stored upper case and matched case-insensitively.
    pub code: String,
    /// 1..100; null for an amount-off code.
    pub percent_off: Option<i32>,
    /// Minor units off (> 0, never below one minor unit left); null for a percent-off code.
    pub amount_off_minor: Option<i64>,
    /// The currency of `amount_off_minor`; null for a percent-off code.
    pub currency: Option<String>,
    /// The paid plans it applies to; null: every paid plan (of its currency, for an amount).
    pub plan_ids: Option<Vec<i64>>,
    /// Uses allowed in all (paid orders plus pending orders holding one); null: unlimited.
    pub max_redemptions: Option<i32>,
    /// Uses allowed per buyer.
    pub per_buyer_limit: i32,
    /// No new use from this time on; null: never expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// Only for buyers with no paid order of any channel of the plan.
    pub first_purchase_only: bool,
    pub active: bool,
    /// Read-only: paid orders using it.
    pub redemptions: i64,
    /// Read-only: pending orders holding a use of it now (uses = `redemptions` + `held`).
    pub held: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl FromRow for PromoCode {
    const COLUMNS: &'static str = promo_code_columns!();

    fn from_row(r: &Row) -> Result<PromoCode, tokio_postgres::Error> {
        Ok(PromoCode {
            id: r.try_get("id")?,
            code: r.try_get("code")?,
            percent_off: r.try_get("percent_off")?,
            amount_off_minor: r.try_get("amount_off_minor")?,
            currency: r.try_get("currency")?,
            plan_ids: r.try_get("plan_ids")?,
            max_redemptions: r.try_get("max_redemptions")?,
            per_buyer_limit: r.try_get("per_buyer_limit")?,
            expires_at: r.try_get("expires_at")?,
            first_purchase_only: r.try_get("first_purchase_only")?,
            active: r.try_get("active")?,
            redemptions: r.try_get("redemptions")?,
            held: r.try_get("held")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }
}

/// What a code takes off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Off {
    /// 1..100 percent.
    Percent(i32),
    /// Minor units of the plan's currency.
    Amount(i64),
}

/// What `off` takes off a list price of `list_minor`: a percent rounds down
/// (`floor(list × pct / 100)`), an amount is at most the price; either leaves at least one minor
/// unit to pay, except exactly 100 %, which makes the order free. Pure.
pub fn discount_minor(list_minor: i64, off: Off) -> i64 {
    let off = match off {
        Off::Percent(100) => return list_minor.max(0),
        Off::Percent(p) => (i128::from(list_minor) * i128::from(p.clamp(0, 100)) / 100) as i64,
        Off::Amount(a) => a.min(list_minor),
    };
    off.min(list_minor - 1).max(0)
}

/// What a code takes off a new order of a plan, decided under the code's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Discount {
    pub promo_code_id: i64,
    pub discount_minor: i64,
}

/// The terms of a code that decide a use, read under its lock (or, for a
/// [`Preview`], without one).
#[derive(Debug, Clone)]
pub struct Terms {
    pub id: i64,
    pub percent_off: Option<i32>,
    pub amount_off_minor: Option<i64>,
    pub currency: Option<String>,
    pub plan_ids: Option<Vec<i64>>,
    pub max_redemptions: Option<i32>,
    pub per_buyer_limit: i32,
    pub first_purchase_only: bool,
    pub active: bool,
}

impl Terms {
    fn off(&self) -> Off {
        match (self.percent_off, self.amount_off_minor) {
            (Some(p), _) => Off::Percent(p),
            (None, a) => Off::Amount(a.unwrap_or(0)),
        }
    }
}

/// The terms' select list (a macro, for `concat!`).
macro_rules! terms_columns {
    () => {
        "id, percent_off, amount_off_minor, currency, plan_ids, max_redemptions, \
         per_buyer_limit, first_purchase_only, active"
    };
}

impl FromRow for Terms {
    const COLUMNS: &'static str = terms_columns!();

    fn from_row(r: &Row) -> Result<Terms, tokio_postgres::Error> {
        Ok(Terms {
            id: r.try_get("id")?,
            percent_off: r.try_get("percent_off")?,
            amount_off_minor: r.try_get("amount_off_minor")?,
            currency: r.try_get("currency")?,
            plan_ids: r.try_get("plan_ids")?,
            max_redemptions: r.try_get("max_redemptions")?,
            per_buyer_limit: r.try_get("per_buyer_limit")?,
            first_purchase_only: r.try_get("first_purchase_only")?,
            active: r.try_get("active")?,
        })
    }
}

const LOCK_BY_CODE_SQL: &str = concat!(
    "SELECT ",
    terms_columns!(),
    " FROM promo_codes WHERE code = $1 FOR UPDATE"
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

/// Why a code cannot be used, as the 422 on `promo_code` says it.
fn refused(message: impl Into<String>) -> ApiError {
    ApiError::field("promo_code", message)
}

/// Why a code gives no new use now ([`Preview::refusal`], [`discount_for_new_order`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Inactive,
    Expired,
    /// The plan is a trial.
    NotPaidPlan,
    /// The plan is not in the code's `plan_ids`.
    NotForPlan,
    /// An amount-off code of another currency than the plan's (the code's currency).
    OtherCurrency(String),
    /// Its uses reached `max_redemptions`.
    Exhausted,
    /// The buyer's uses reached `per_buyer_limit` (the limit).
    UsedByBuyer(i32),
    /// First purchase only, and the buyer bought access to the plan's channels before.
    FirstPurchase,
}

impl Refusal {
    /// The 422's message on `promo_code` (plan `plan`).
    fn message(&self, plan: &Plan) -> String {
        match self {
            Refusal::Inactive => "this promo code is not active".into(),
            Refusal::Expired => "this promo code has expired".into(),
            Refusal::NotPaidPlan => "promo codes apply to paid plans only".into(),
            Refusal::NotForPlan => "this promo code does not apply to this plan".into(),
            Refusal::OtherCurrency(c) => format!(
                "this promo code takes {c} off; this plan is sold in {}",
                plan.currency
            ),
            Refusal::Exhausted => "this promo code has been used up".into(),
            Refusal::UsedByBuyer(1) => "the subscriber has already used this promo code".into(),
            Refusal::UsedByBuyer(limit) => format!(
                "the subscriber has already used this promo code the {limit} times it allows"
            ),
            Refusal::FirstPurchase => {
                "this promo code is for a first purchase only; the subscriber has bought access \
                 to this plan's channels before"
                    .into()
            }
        }
    }
}

/// The rule of a new use, but for a first purchase (which needs a read): active, not expired,
/// meant for `plan` (when given: a paid plan, in `plan_ids`, of the code's currency), room in
/// `max_redemptions` (`uses`) and in `per_buyer_limit` (`buyer_uses`), in that order. Pure.
fn refusal(
    t: &Terms,
    uses: i64,
    buyer_uses: i64,
    expired: bool,
    plan: Option<&Plan>,
) -> Option<Refusal> {
    if !t.active {
        return Some(Refusal::Inactive);
    }
    if expired {
        return Some(Refusal::Expired);
    }
    if let Some(why) = plan.and_then(|p| plan_refusal(t, p)) {
        return Some(why);
    }
    if t.max_redemptions.is_some_and(|max| uses >= i64::from(max)) {
        return Some(Refusal::Exhausted);
    }
    if buyer_uses >= i64::from(t.per_buyer_limit) {
        return Some(Refusal::UsedByBuyer(t.per_buyer_limit));
    }
    None
}

/// Why code `t` is not meant for `plan`, if it is not. Pure.
fn plan_refusal(t: &Terms, plan: &Plan) -> Option<Refusal> {
    if plan.kind != plans::Kind::Paid {
        return Some(Refusal::NotPaidPlan);
    }
    if t.plan_ids
        .as_ref()
        .is_some_and(|ids| !ids.contains(&plan.id))
    {
        return Some(Refusal::NotForPlan);
    }
    t.currency
        .as_deref()
        .filter(|c| *c != plan.currency)
        .map(|c| Refusal::OtherCurrency(c.to_string()))
}

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
    let Some(t) = db::opt::<Terms>(tx, LOCK_BY_CODE_SQL, &[&code]).await? else {
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

impl FromRow for Preview {
    const COLUMNS: &'static str = preview_columns!();

    fn from_row(r: &Row) -> Result<Preview, tokio_postgres::Error> {
        Ok(Preview {
            code: r.try_get("code")?,
            terms: Terms::from_row(r)?,
            uses: r.try_get("uses")?,
            buyer_uses: r.try_get("buyer_uses")?,
            expired: r.try_get("expired")?,
        })
    }
}

const PREVIEW_BY_CODE_SQL: &str = concat!(
    "SELECT ",
    preview_columns!(),
    " FROM promo_codes pc WHERE pc.code = $1"
);
const PREVIEW_BY_ID_SQL: &str = concat!(
    "SELECT ",
    preview_columns!(),
    " FROM promo_codes pc WHERE pc.id = $1"
);

/// The code with text `code` (any case) as `buyer` (if known) would find it now; `None` when
/// there is no such code. Read-only.
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

/// Code `id`'s uses, subscriber `subscriber`'s uses of it, whether `held_until` is still ahead
/// and whether the code expired, by database time. The caller holds the code's lock.
async fn now(
    tx: &Transaction<'_>,
    id: i64,
    subscriber: SubscriberId,
    held_until: Option<DateTime<Utc>>,
) -> Result<Now, ApiError> {
    let row = db::row_one(tx, NOW_SQL, &[&id, &subscriber, &held_until]).await?;
    Ok(Now {
        uses: row.try_get("uses")?,
        buyer_uses: row.try_get("buyer_uses")?,
        still_held: row.try_get("still_held")?,
        expired: row.try_get("expired")?,
    })
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

// ---- staff: create, change, read ----

/// The fields of a new code, or of a change. In a new code an absent field takes its default
/// (no plan list, no limit, `per_buyer_limit` 1, no expiry, not first-purchase-only, active);
/// the caller has checked that `code` is present and every present value is in range. In a
/// change an absent field keeps its value; `Some(None)` clears a nullable one. Setting
/// `percent_off` clears `amount_off_minor` and `currency` unless they are given too, and setting
/// `amount_off_minor` clears `percent_off`, so a code can switch kinds in one PATCH.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    /// Normalized ([`normalize`]).
    pub code: Option<String>,
    pub percent_off: Option<Option<i32>>,
    pub amount_off_minor: Option<Option<i64>>,
    pub currency: Option<Option<String>>,
    pub plan_ids: Option<Option<Vec<i64>>>,
    pub max_redemptions: Option<Option<i32>>,
    pub per_buyer_limit: Option<i32>,
    pub expires_at: Option<Option<DateTime<Utc>>>,
    pub first_purchase_only: Option<bool>,
    pub active: Option<bool>,
}

/// Every stored field of a code, as it will be written.
#[derive(Debug, Clone, PartialEq)]
struct Draft {
    code: String,
    percent_off: Option<i32>,
    amount_off_minor: Option<i64>,
    currency: Option<String>,
    plan_ids: Option<Vec<i64>>,
    max_redemptions: Option<i32>,
    per_buyer_limit: i32,
    expires_at: Option<DateTime<Utc>>,
    first_purchase_only: bool,
    active: bool,
}

impl Draft {
    fn new() -> Draft {
        Draft {
            code: String::new(),
            percent_off: None,
            amount_off_minor: None,
            currency: None,
            plan_ids: None,
            max_redemptions: None,
            per_buyer_limit: 1,
            expires_at: None,
            first_purchase_only: false,
            active: true,
        }
    }

    fn of(c: &PromoCode) -> Draft {
        Draft {
            code: c.code.clone(),
            percent_off: c.percent_off,
            amount_off_minor: c.amount_off_minor,
            currency: c.currency.clone(),
            plan_ids: c.plan_ids.clone(),
            max_redemptions: c.max_redemptions,
            per_buyer_limit: c.per_buyer_limit,
            expires_at: c.expires_at,
            first_purchase_only: c.first_purchase_only,
            active: c.active,
        }
    }

    /// This draft changed by `f` ([`Fields`]' rules).
    fn with(mut self, f: &Fields) -> Draft {
        if matches!(f.percent_off, Some(Some(_))) && f.amount_off_minor.is_none() {
            self.amount_off_minor = None;
            if f.currency.is_none() {
                self.currency = None;
            }
        }
        if matches!(f.amount_off_minor, Some(Some(_))) && f.percent_off.is_none() {
            self.percent_off = None;
        }
        if let Some(v) = &f.code {
            self.code = v.clone();
        }
        if let Some(v) = f.percent_off {
            self.percent_off = v;
        }
        if let Some(v) = f.amount_off_minor {
            self.amount_off_minor = v;
        }
        if let Some(v) = &f.currency {
            self.currency = v.clone();
        }
        if let Some(v) = &f.plan_ids {
            self.plan_ids = v.clone();
        }
        if let Some(v) = f.max_redemptions {
            self.max_redemptions = v;
        }
        if let Some(v) = f.per_buyer_limit {
            self.per_buyer_limit = v;
        }
        if let Some(v) = f.expires_at {
            self.expires_at = v;
        }
        if let Some(v) = f.first_purchase_only {
            self.first_purchase_only = v;
        }
        if let Some(v) = f.active {
            self.active = v;
        }
        self
    }

    /// The rules between fields, as per-field messages. Pure.
    fn errors(&self) -> Vec<(&'static str, String)> {
        let mut e = Vec::new();
        match (self.percent_off, self.amount_off_minor) {
            (Some(_), Some(_)) => e.push((
                "percent_off",
                "give percent_off or amount_off_minor, not both".into(),
            )),
            (None, None) => e.push((
                "percent_off",
                "give percent_off (1..100) or amount_off_minor with currency".into(),
            )),
            _ => {}
        }
        match (self.amount_off_minor, &self.currency) {
            (Some(_), None) => e.push(("currency", "is required with amount_off_minor".into())),
            (None, Some(_)) => e.push(("currency", "applies to amount_off_minor only".into())),
            (Some(off), Some(c)) => {
                if let Some(why) = currency::price_over_max(off, c) {
                    e.push(("amount_off_minor", why));
                }
            }
            _ => {}
        }
        e
    }

    /// The text and discount, which are fixed once an order uses the code.
    fn fixed_part(&self) -> (&str, Option<i32>, Option<i64>, Option<&str>) {
        (
            &self.code,
            self.percent_off,
            self.amount_off_minor,
            self.currency.as_deref(),
        )
    }
}

const PLANS_SQL: &str =
    "SELECT id, kind, currency, price_minor FROM plans WHERE id = ANY($1::bigint[])";

/// Checks a draft whole: the rules between fields, then `plan_ids` against the plans (each
/// exists and is paid; an amount-off code's plans are sold in its currency, and each leaves at
/// least the currency's smallest charge, [`currency::smallest_charge_minor`]). 422 per field.
/// A code for every plan (`plan_ids` null) is bounded by the currency's highest price only: a
/// plan it would take below the smallest charge is charged that ([`discount_minor`]).
async fn check(tx: &Transaction<'_>, d: &Draft) -> Result<(), ApiError> {
    let mut errors: std::collections::BTreeMap<String, String> = d
        .errors()
        .into_iter()
        .map(|(f, m)| (f.to_string(), m))
        .collect();
    if let Some(ids) = &d.plan_ids {
        let rows = db::rows(tx, PLANS_SQL, &[ids]).await?;
        let mut why = None;
        for id in ids {
            let Some(r) = rows.iter().find(|r| r.get::<_, i64>("id") == *id) else {
                why = Some(format!("no such plan: {id}"));
                break;
            };
            let kind: plans::Kind = r.try_get("kind")?;
            let currency: String = r.try_get("currency")?;
            if kind != plans::Kind::Paid {
                why = Some(format!(
                    "plan {id} is a trial; codes apply to paid plans only"
                ));
                break;
            }
            if let Some(c) = d.currency.as_deref().filter(|c| *c != currency) {
                why = Some(format!(
                    "plan {id} is sold in {currency}; this code takes {c} off"
                ));
                break;
            }
            let price: i64 = r.try_get("price_minor")?;
            let smallest = currency::smallest_charge_minor(&currency);
            if let Some(off) = d.amount_off_minor
                && price.saturating_sub(off) < smallest
            {
                errors.entry("amount_off_minor".into()).or_insert(format!(
                    "leaves plan {id} ({price} minor units of {currency}) below the smallest \
                     charge of {smallest}: at most {} off",
                    price - smallest
                ));
            }
        }
        if let Some(why) = why {
            errors.entry("plan_ids".into()).or_insert(why);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation(errors))
    }
}

const INSERT_SQL: &str = concat!(
    "WITH pc AS (
         INSERT INTO promo_codes (code, percent_off, amount_off_minor, currency, plan_ids,
             max_redemptions, per_buyer_limit, expires_at, first_purchase_only, active)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         RETURNING *
     )
     SELECT ",
    promo_code_columns!(),
    " FROM pc"
);
const UPDATE_SQL: &str = concat!(
    "WITH pc AS (
         UPDATE promo_codes
         SET code = $2, percent_off = $3, amount_off_minor = $4, currency = $5, plan_ids = $6,
             max_redemptions = $7, per_buyer_limit = $8, expires_at = $9,
             first_purchase_only = $10, active = $11, updated_at = statement_timestamp()
         WHERE id = $1
         RETURNING *
     )
     SELECT ",
    promo_code_columns!(),
    " FROM pc"
);
const GET_SQL: &str = concat!(
    "SELECT ",
    promo_code_columns!(),
    " FROM promo_codes pc WHERE pc.id = $1"
);
const LOCK_FOR_CHANGE_SQL: &str = concat!(
    "SELECT ",
    promo_code_columns!(),
    " FROM promo_codes pc WHERE pc.id = $1 FOR UPDATE"
);
/// Whether `$1` is not after the database's now.
const PAST_SQL: &str = "SELECT $1::timestamptz <= statement_timestamp() AS past";
/// Code `$1`'s uses (read under its lock, as every use decision is).
const USES_SQL: &str = concat!(
    "SELECT count(*) AS uses FROM orders o WHERE o.promo_code_id = $1 AND ",
    holds_use_sql!("o")
);
const USED_SQL: &str = "SELECT EXISTS (SELECT 1 FROM orders WHERE promo_code_id = $1) AS used";
const LIST_SQL: &str = concat!(
    "SELECT ",
    promo_code_columns!(),
    " FROM promo_codes pc
     WHERE pc.id > $1
       AND ($2::boolean IS NULL OR pc.active = $2)
       AND ($3::bigint IS NULL OR EXISTS (
             SELECT 1 FROM plans p
             WHERE p.id = $3 AND p.kind = 'paid'
               AND (pc.plan_ids IS NULL OR p.id = ANY (pc.plan_ids))
               AND (pc.currency IS NULL OR pc.currency = p.currency)))
       AND ($4::text IS NULL OR pc.code = $4)
     ORDER BY pc.id LIMIT $5"
);

async fn write(
    tx: &Transaction<'_>,
    sql: &str,
    id: Option<i64>,
    d: &Draft,
) -> Result<PromoCode, ApiError> {
    let values: [&(dyn tokio_postgres::types::ToSql + Sync); 10] = [
        &d.code,
        &d.percent_off,
        &d.amount_off_minor,
        &d.currency,
        &d.plan_ids,
        &d.max_redemptions,
        &d.per_buyer_limit,
        &d.expires_at,
        &d.first_purchase_only,
        &d.active,
    ];
    match id {
        None => db::one(tx, sql, &values).await,
        Some(id) => {
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&id];
            params.extend(values);
            db::one(tx, sql, &params).await
        }
    }
}

/// Creates a code. A taken `code` (in any case: codes are stored upper case) is the schema's
/// unique violation, 409 when rendered; the rules between fields and the plan list are 422s.
pub async fn create(tx: &Transaction<'_>, f: &Fields) -> Result<PromoCode, ApiError> {
    let d = Draft::new().with(f);
    check(tx, &d).await?;
    if let Some(at) = d.expires_at
        && db::row_one(tx, PAST_SQL, &[&at])
            .await?
            .try_get::<_, bool>("past")?
    {
        return Err(ApiError::field(
            "expires_at",
            "is already past: a new code must be usable (give a later time, or none)",
        ));
    }
    let c = write(tx, INSERT_SQL, None, &d).await?;
    tracing::info!(promo_code_id = c.id, code = %c.code, "promo code created");
    Ok(c)
}

/// Changes code `id` by `f` under the code's row lock, so no use is decided from terms older
/// than the ones committed. 404 when there is no such code; 409 when `f` would change the text
/// or the discount of a code an order uses; 422 as [`create`].
pub async fn change(tx: &Transaction<'_>, id: i64, f: &Fields) -> Result<PromoCode, ApiError> {
    let current = db::opt::<PromoCode>(tx, LOCK_FOR_CHANGE_SQL, &[&id])
        .await?
        .ok_or(ApiError::NotFound("promo code"))?;
    let before = Draft::of(&current);
    let after = before.clone().with(f);
    if after == before {
        return Ok(current);
    }
    if after.fixed_part() != before.fixed_part()
        && db::row_one(tx, USED_SQL, &[&id])
            .await?
            .try_get::<_, bool>("used")?
    {
        return Err(ApiError::Conflict(
            "code, percent_off, amount_off_minor and currency cannot change once an order uses \
             the code; deactivate it (active: false) and create another"
                .into(),
        ));
    }
    check(tx, &after).await?;
    if let Some(max) = after.max_redemptions
        && after.max_redemptions != before.max_redemptions
    {
        let uses: i64 = db::row_one(tx, USES_SQL, &[&id]).await?.try_get("uses")?;
        if i64::from(max) < uses {
            return Err(ApiError::field(
                "max_redemptions",
                format!(
                    "is below the {uses} uses the code has (paid orders and pending orders \
                     holding a use); at least {uses}, or null (unlimited)"
                ),
            ));
        }
    }
    let c = write(tx, UPDATE_SQL, Some(id), &after).await?;
    tracing::info!(promo_code_id = id, active = c.active, "promo code changed");
    Ok(c)
}

/// Code `id`, if any.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<PromoCode>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub active: Option<bool>,
    /// Codes a new order of this plan could use (by their plans and currency; not by limits).
    pub plan_id: Option<i64>,
    /// Normalized ([`normalize`]).
    pub code: Option<String>,
}

/// Up to `limit` codes with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<PromoCode>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.active,
            &filter.plan_id,
            &filter.code,
            &limit,
        ],
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percent_rounds_down_and_leaves_at_least_one_unit() {
        assert_eq!(discount_minor(19900, Off::Percent(25)), 4975);
        assert_eq!(discount_minor(999, Off::Percent(10)), 99);
        assert_eq!(discount_minor(1, Off::Percent(99)), 0);
        assert_eq!(discount_minor(100, Off::Percent(99)), 99);
        assert_eq!(discount_minor(3, Off::Percent(50)), 1);
        assert_eq!(discount_minor(i64::MAX, Off::Percent(50)), i64::MAX / 2);
    }

    #[test]
    fn exactly_one_hundred_percent_is_free() {
        assert_eq!(discount_minor(19900, Off::Percent(100)), 19900);
        assert_eq!(discount_minor(1, Off::Percent(100)), 1);
    }

    #[test]
    fn an_amount_is_at_most_the_price_less_one_unit() {
        assert_eq!(discount_minor(19900, Off::Amount(5000)), 5000);
        assert_eq!(discount_minor(19900, Off::Amount(19899)), 19899);
        assert_eq!(discount_minor(19900, Off::Amount(19900)), 19899);
        assert_eq!(discount_minor(19900, Off::Amount(i64::MAX)), 19899);
        assert_eq!(discount_minor(1, Off::Amount(5)), 0);
    }

    fn terms() -> Terms {
        Terms {
            id: 1,
            percent_off: Some(10),
            amount_off_minor: None,
            currency: None,
            plan_ids: Some(vec![7]),
            max_redemptions: Some(2),
            per_buyer_limit: 1,
            first_purchase_only: false,
            active: true,
        }
    }

    #[test]
    fn a_use_is_refused_in_one_order_and_without_a_plan_only_for_the_code_itself() {
        let t = terms();
        assert_eq!(refusal(&t, 1, 0, false, None), None);
        assert_eq!(refusal(&t, 2, 0, false, None), Some(Refusal::Exhausted));
        assert_eq!(
            refusal(&t, 1, 1, false, None),
            Some(Refusal::UsedByBuyer(1))
        );
        assert_eq!(refusal(&t, 2, 1, true, None), Some(Refusal::Expired));
        let off = Terms {
            active: false,
            ..terms()
        };
        assert_eq!(refusal(&off, 2, 1, true, None), Some(Refusal::Inactive));
        let unlimited = Terms {
            max_redemptions: None,
            ..terms()
        };
        assert_eq!(refusal(&unlimited, i64::MAX, 0, false, None), None);
    }

    #[test]
    fn codes_are_upper_cased_and_checked() {
        assert_eq!(normalize("spring-25_x").as_deref(), Some("SPRING-25_X"));
        assert_eq!(normalize("ABC").as_deref(), Some("ABC"));
        assert_eq!(
            normalize(&"A".repeat(32)).as_deref(),
            Some(&*"A".repeat(32))
        );
        for bad in [
            "",
            "A",
            "AB",
            &"A".repeat(33),
            "A B C",
            "ÄBC",
            "ab.c",
            "abc\0",
        ] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn setting_one_kind_of_discount_clears_the_other() {
        let amount = Draft {
            amount_off_minor: Some(500),
            currency: Some("UAH".into()),
            ..Draft::new()
        };
        let to_percent = amount.clone().with(&Fields {
            percent_off: Some(Some(10)),
            ..Fields::default()
        });
        assert_eq!(
            (
                to_percent.percent_off,
                to_percent.amount_off_minor,
                to_percent.currency.clone()
            ),
            (Some(10), None, None)
        );
        assert!(to_percent.errors().is_empty());
        let back = to_percent.with(&Fields {
            amount_off_minor: Some(Some(700)),
            currency: Some(Some("UAH".into())),
            ..Fields::default()
        });
        assert_eq!(back.percent_off, None);
        assert!(back.errors().is_empty());
        let both = amount.with(&Fields {
            percent_off: Some(Some(10)),
            amount_off_minor: Some(Some(5)),
            ..Fields::default()
        });
        assert_eq!(both.errors()[0].0, "percent_off");
        let neither = Draft::new();
        assert_eq!(neither.errors()[0].0, "percent_off");
        let no_currency = Draft {
            amount_off_minor: Some(5),
            ..Draft::new()
        };
        assert_eq!(no_currency.errors()[0].0, "currency");
    }
}
