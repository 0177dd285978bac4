//! Staff's side of promo codes: creating, changing and reading them, with the rules between
//! their fields and the text and discount fixed once an order uses a code.

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};

use super::PromoCode;
use crate::{
    catalog::plans,
    common::{currency, error::ApiError},
    db,
};

/// The fields of a new code, or of a change. In a new code an absent field takes its default
/// (no plan list, no limit, `per_buyer_limit` 1, no expiry, not first-purchase-only, active);
/// the caller has checked that `code` is present and every present value is in range. In a
/// change an absent field keeps its value; `Some(None)` clears a nullable one. Setting
/// `percent_off` clears `amount_off_minor` and `currency` unless they are given too, and setting
/// `amount_off_minor` clears `percent_off`, so a code can switch kinds in one PATCH.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    /// Normalized ([`normalize`](super::normalize)).
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
/// plan it would take below the smallest charge is charged that ([`discount_minor`](super::discount_minor)).
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
    /// Normalized ([`normalize`](super::normalize)).
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

/// A code made for one buyer alone: `prefix-` and ten random hex digits (upper case), one use,
/// `percent_off`, for `plan_ids` (null: every paid plan), expiring `valid_days` from now.
/// Nobody else finds it (`subscriber_id`).
const FOR_BUYER_SQL: &str = "INSERT INTO promo_codes (code, percent_off, plan_ids, max_redemptions,
         per_buyer_limit, expires_at, first_purchase_only, subscriber_id)
     VALUES ($1 || '-' || upper(left(replace(gen_random_uuid()::text, '-', ''), 10)), $2, $3, 1,
             1, statement_timestamp() + make_interval(days => $4), false, $5)
     RETURNING id, code";

/// The terms of a code made for one buyer (a win-back or cancel offer's).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct BuyerOffer {
    /// 1..100.
    pub percent_off: i32,
    /// 1..365: the code expires this many days after it is made.
    pub valid_days: i32,
    /// The paid plans it applies to; null: every paid plan.
    #[serde(default)]
    pub plan_ids: Option<Vec<i64>>,
}

/// Makes a code of `offer` for subscriber `buyer` alone (`prefix`: what it starts with, 3..20
/// of `A-Z`); returns its id and text.
pub async fn create_for_buyer(
    tx: &impl GenericClient,
    prefix: &str,
    offer: &BuyerOffer,
    buyer: i32,
) -> Result<(i64, String), ApiError> {
    let row = db::row_one(
        tx,
        FOR_BUYER_SQL,
        &[
            &prefix,
            &offer.percent_off,
            &offer.plan_ids,
            &offer.valid_days,
            &buyer,
        ],
    )
    .await?;
    Ok((row.try_get("id")?, row.try_get("code")?))
}
