//! Promo codes as the bot shows them: the code a buyer gave (`/code CODE`, or a deep link
//! `p<plan>-<CODE>`), kept for their next order for one hour in `bot_promo_codes`, and a
//! read-only look at what it gives on a plan, to show prices with it.
//!
//! Only reads and the bot's own table: a use of a code is taken when an order is made, under
//! the code's lock, by [`crate::promo_codes::discount_for_new_order`], which decides again and
//! may still refuse (the code filled up meanwhile). The price shown here is the price that
//! decision gives when it agrees: [`discounted_minor`] applies the one rule of a discount,
//! [`promo_codes::discount_minor`] (a percent rounded down, never below one minor unit, 100 %
//! free).

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::{
    currency::Money,
    db::{self, FromRow},
    error::ApiError,
    ids::SubscriberId,
    plans::{self, Plan},
    present::{render, texts},
    promo_codes,
};

/// A promo code as the bot reads it, with what stops it now.
#[derive(Debug, Clone)]
pub struct Code {
    pub id: i64,
    pub code: String,
    pub percent_off: Option<i32>,
    pub amount_off_minor: Option<i64>,
    pub currency: Option<String>,
    pub plan_ids: Option<Vec<i64>>,
    pub first_purchase_only: bool,
    active: bool,
    expired: bool,
    exhausted: bool,
    used_by_buyer: bool,
}

/// `$1`: the code's id or text (see the callers' `WHERE`), `$2`: the buyer (may be NULL). Uses
/// are paid orders plus pending orders whose hold of the use is still valid.
macro_rules! code_columns {
    () => {
        "pc.id, pc.code, pc.percent_off, pc.amount_off_minor, pc.currency, pc.plan_ids,
         pc.first_purchase_only, pc.active,
         coalesce(pc.expires_at <= statement_timestamp(), false) AS expired,
         coalesce((SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id
                     AND (o.status = 'paid' OR (o.status = 'pending'
                          AND o.promo_held_until > statement_timestamp())))
                  >= pc.max_redemptions, false) AS exhausted,
         (SELECT count(*) FROM orders o WHERE o.promo_code_id = pc.id
            AND o.subscriber_id = $2
            AND (o.status = 'paid' OR (o.status = 'pending'
                 AND o.promo_held_until > statement_timestamp())))
         >= pc.per_buyer_limit AS used_by_buyer"
    };
}

impl FromRow for Code {
    const COLUMNS: &'static str = code_columns!();

    fn from_row(r: &Row) -> Result<Code, tokio_postgres::Error> {
        Ok(Code {
            id: r.try_get("id")?,
            code: r.try_get("code")?,
            percent_off: r.try_get("percent_off")?,
            amount_off_minor: r.try_get("amount_off_minor")?,
            currency: r.try_get("currency")?,
            plan_ids: r.try_get("plan_ids")?,
            first_purchase_only: r.try_get("first_purchase_only")?,
            active: r.try_get("active")?,
            expired: r.try_get("expired")?,
            exhausted: r.try_get("exhausted")?,
            used_by_buyer: r.try_get("used_by_buyer")?,
        })
    }
}

const BY_TEXT_SQL: &str = concat!(
    "SELECT ",
    code_columns!(),
    " FROM promo_codes pc WHERE pc.code = upper($1)"
);
const STORED_SQL: &str = concat!(
    "SELECT ",
    code_columns!(),
    " FROM bot_promo_codes b JOIN promo_codes pc ON pc.id = b.promo_code_id
     WHERE b.subscriber_id = $2 AND b.until > statement_timestamp() AND $1::text IS NULL"
);
const STORE_SQL: &str = "INSERT INTO bot_promo_codes (subscriber_id, promo_code_id, until)
     VALUES ($1, $2, statement_timestamp() + interval '1 hour')
     ON CONFLICT (subscriber_id) DO UPDATE
         SET promo_code_id = EXCLUDED.promo_code_id, until = EXCLUDED.until,
             created_at = statement_timestamp()";
const FORGET_SQL: &str = "DELETE FROM bot_promo_codes WHERE subscriber_id = $1";
const FIRST_PURCHASE_SQL: &str = "SELECT NOT EXISTS (
         SELECT 1 FROM orders o JOIN plan_channels pc ON pc.plan_id = o.plan_id
         WHERE o.subscriber_id = $1 AND o.status = 'paid' AND o.list_price_minor > 0
           AND pc.channel_id = ANY($2)) AS first";
const PLAN_NAMES_SQL: &str = "SELECT p.id, coalesce(c.title, p.title) AS name
     FROM plans p LEFT JOIN channels c ON c.id = p.default_of
     WHERE p.active AND p.kind = 'paid'
       AND ($1::bigint[] IS NULL OR p.id = ANY($1))
       AND ($2::text IS NULL OR p.currency = $2)
     ORDER BY p.price_minor, p.position, p.id LIMIT 4";

/// The code with this text (any case), as buyer `buyer` may use it.
pub async fn by_text(
    client: &impl GenericClient,
    text: &str,
    buyer: Option<SubscriberId>,
) -> Result<Option<Code>, ApiError> {
    // A text the schema could never hold is no code (and no query).
    let valid = (3..=32).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid {
        return Ok(None);
    }
    db::opt(client, BY_TEXT_SQL, &[&text, &buyer]).await
}

/// The code buyer `buyer` gave the bot in the last hour, if any.
pub async fn stored(
    client: &impl GenericClient,
    buyer: SubscriberId,
) -> Result<Option<Code>, ApiError> {
    db::opt(client, STORED_SQL, &[&None::<String>, &Some(buyer)]).await
}

/// Keeps `code` for `buyer`'s next order, for an hour from now (in place of any earlier one).
pub async fn store(
    client: &impl GenericClient,
    buyer: SubscriberId,
    code: &Code,
) -> Result<(), ApiError> {
    db::execute(client, STORE_SQL, &[&buyer, &code.id]).await?;
    Ok(())
}

/// Forgets the code kept for `buyer` (an order used it, or it can no longer be used).
pub async fn forget(client: &impl GenericClient, buyer: SubscriberId) -> Result<(), ApiError> {
    db::execute(client, FORGET_SQL, &[&buyer]).await?;
    Ok(())
}

/// What a discount leaves to pay of `price_minor`: `percent_off` takes that share rounded down
/// (the buyer pays at least the rest), `amount_off_minor` that amount; neither takes the price
/// below one minor unit, except 100 % off, which makes it free.
pub fn discounted_minor(
    price_minor: i64,
    percent_off: Option<i32>,
    amount_off: Option<i64>,
) -> i64 {
    let off = match (percent_off, amount_off) {
        (Some(p), _) => promo_codes::Off::Percent(p),
        (None, Some(a)) => promo_codes::Off::Amount(a),
        (None, None) => return price_minor,
    };
    price_minor - promo_codes::discount_minor(price_minor, off)
}

impl Code {
    /// Why the code cannot be used at all now (for any plan), as buyers read it.
    pub fn refusal(&self) -> Option<&'static str> {
        if !self.active {
            Some(texts::CODE_INACTIVE)
        } else if self.expired {
            Some(texts::CODE_EXPIRED)
        } else if self.exhausted {
            Some(texts::CODE_EXHAUSTED)
        } else if self.used_by_buyer {
            Some(texts::CODE_USED_BY_YOU)
        } else {
            None
        }
    }

    /// Whether the code is meant for `plan` at all: a paid plan in its list (or any), in its
    /// currency for an amount off.
    pub fn covers(&self, plan: &Plan) -> bool {
        plan.kind == plans::Kind::Paid
            && self
                .plan_ids
                .as_ref()
                .is_none_or(|ids| ids.contains(&plan.id))
            && self.currency.as_ref().is_none_or(|c| *c == plan.currency)
    }

    /// What `buyer` would pay for `plan` with this code, or why the code does not apply.
    pub async fn price_for(
        &self,
        client: &impl GenericClient,
        buyer: Option<SubscriberId>,
        plan: &Plan,
    ) -> Result<Result<i64, &'static str>, ApiError> {
        if let Some(why) = self.refusal() {
            return Ok(Err(why));
        }
        if !self.covers(plan) {
            return Ok(Err(texts::CODE_NOT_FOR_PLAN));
        }
        if self.first_purchase_only
            && let Some(buyer) = buyer
        {
            let first: bool = db::row_one(client, FIRST_PURCHASE_SQL, &[&buyer, &plan.channel_ids])
                .await?
                .try_get("first")?;
            if !first {
                return Ok(Err(texts::CODE_FIRST_PURCHASE));
            }
        }
        Ok(Ok(discounted_minor(
            plan.price_minor,
            self.percent_off,
            self.amount_off_minor,
        )))
    }

    /// What the code gives, as buyers read it ("−25 % on Premium monthly"), or why no plan on
    /// sale takes it (`Err`).
    pub async fn gives(
        &self,
        client: &impl GenericClient,
    ) -> Result<Result<String, &'static str>, ApiError> {
        let rows = db::rows(client, PLAN_NAMES_SQL, &[&self.plan_ids, &self.currency]).await?;
        if rows.is_empty() {
            return Ok(Err(texts::CODE_NO_PLAN));
        }
        let off = match (self.percent_off, self.amount_off_minor, &self.currency) {
            (Some(p), _, _) => format!("{p} %"),
            (None, Some(a), Some(c)) => render::price(&Money::new(a, c)),
            _ => return Ok(Err(texts::CODE_NO_PLAN)),
        };
        let on = match &self.plan_ids {
            None => None,
            Some(_) => {
                let names = rows
                    .iter()
                    .map(|r| {
                        r.try_get::<_, String>("name")
                            .map(|n| render::clip(&render::one_line(&n), 60))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(names.join(", "))
            }
        };
        Ok(Ok(texts::code_gives(&off, on.as_deref())))
    }
}

#[cfg(test)]
mod tests {
    use super::discounted_minor;

    #[test]
    fn a_discount_rounds_its_share_down_and_never_goes_below_one_unit_unless_free() {
        assert_eq!(discounted_minor(24900, Some(20), None), 19920);
        assert_eq!(discounted_minor(999, Some(25), None), 750);
        assert_eq!(discounted_minor(250, Some(33), None), 168);
        assert_eq!(discounted_minor(1, Some(99), None), 1);
        assert_eq!(discounted_minor(250, Some(100), None), 0);
        assert_eq!(discounted_minor(24900, None, Some(5000)), 19900);
        assert_eq!(discounted_minor(100, None, Some(500)), 1);
        assert_eq!(discounted_minor(100, None, None), 100);
    }
}
