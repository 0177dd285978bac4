//! Promo codes as the bot shows them: the code a buyer gave (`/code CODE`, or a deep link
//! `p<plan>-<CODE>`), kept for their next order for one hour in `bot_promo_codes`, and a
//! read-only look at what it gives on a plan, to show prices with it.
//!
//! Only reads and the bot's own table: a use of a code is taken when an order is made, under
//! the code's lock, by [`crate::catalog::promo_codes::discount_for_new_order`], which decides again and
//! may still refuse (the code filled up meanwhile). What a code gives here is what that
//! decision gives when it agrees: the look at a code is [`promo_codes::preview`], the same rule
//! read without a lock; this module only says it in the buyer's words.

use deadpool_postgres::GenericClient;

use crate::{
    catalog::{
        plans::Plan,
        promo_codes::{self, Refusal},
    },
    common::{currency::Money, error::ApiError, ids::SubscriberId},
    db,
    orders::bot_orders,
    present::{
        render,
        texts::{self, CodeRefusal, Language},
        translations::Translations,
    },
};

/// A promo code as the bot reads it, with what stops it now ([`promo_codes::Preview`]).
#[derive(Debug, Clone)]
pub struct Code(promo_codes::Preview);

/// SQL: the id of the code subscriber `$s` gave the bot in the last hour (a scalar subquery:
/// null when none). `stored_code_id_sql!("$1")`.
macro_rules! stored_code_id_sql {
    ($s:literal) => {
        concat!(
            "(SELECT promo_code_id FROM bot_promo_codes
              WHERE subscriber_id = ",
            $s,
            " AND until > statement_timestamp())"
        )
    };
}
pub(super) use stored_code_id_sql;

const STORED_SQL: &str = concat!("SELECT ", stored_code_id_sql!("$1"), " AS promo_code_id");
const STORE_SQL: &str = "INSERT INTO bot_promo_codes (subscriber_id, promo_code_id, until)
     VALUES ($1, $2, statement_timestamp() + interval '1 hour')
     ON CONFLICT (subscriber_id) DO UPDATE
         SET promo_code_id = EXCLUDED.promo_code_id, until = EXCLUDED.until,
             created_at = statement_timestamp()";
const FORGET_SQL: &str = "DELETE FROM bot_promo_codes WHERE subscriber_id = $1";
const PLAN_NAMES_SQL: &str = "SELECT p.id, coalesce(c.title, p.title) AS name,
            coalesce(c.translations, p.translations) AS translations
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
    Ok(promo_codes::preview(client, text, buyer).await?.map(Code))
}

/// The code buyer `buyer` gave the bot in the last hour, if any.
pub async fn stored(
    client: &impl GenericClient,
    buyer: SubscriberId,
) -> Result<Option<Code>, ApiError> {
    let id: Option<i64> = db::row_one(client, STORED_SQL, &[&buyer])
        .await?
        .try_get("promo_code_id")?;
    of_stored(client, buyer, id).await
}

/// The code buyer `buyer` gave the bot, from the id [`stored_code_id_sql!`] read (`None`: no
/// code kept).
pub async fn of_stored(
    client: &impl GenericClient,
    buyer: SubscriberId,
    promo_code_id: Option<i64>,
) -> Result<Option<Code>, ApiError> {
    let Some(id) = promo_code_id else {
        return Ok(None);
    };
    Ok(promo_codes::preview_by_id(client, id, Some(buyer))
        .await?
        .map(Code))
}

/// Keeps `code` for `buyer`'s next order, for an hour from now (in place of any earlier one).
pub async fn store(
    client: &impl GenericClient,
    buyer: SubscriberId,
    code: &Code,
) -> Result<(), ApiError> {
    db::execute(client, STORE_SQL, &[&buyer, &code.id()]).await?;
    Ok(())
}

/// Forgets the code kept for `buyer` (an order used it, or it can no longer be used).
pub async fn forget(client: &impl GenericClient, buyer: SubscriberId) -> Result<(), ApiError> {
    db::execute(client, FORGET_SQL, &[&buyer]).await?;
    Ok(())
}

/// A refusal as buyers read it.
fn why(refusal: &Refusal) -> CodeRefusal {
    match refusal {
        Refusal::Inactive => CodeRefusal::Inactive,
        Refusal::Expired => CodeRefusal::Expired,
        Refusal::Exhausted => CodeRefusal::Exhausted,
        Refusal::UsedByBuyer(_) => CodeRefusal::UsedByYou,
        Refusal::NotPaidPlan | Refusal::NotForPlan | Refusal::OtherCurrency(_) => {
            CodeRefusal::NotForPlan
        }
        Refusal::FirstPurchase => CodeRefusal::FirstPurchase,
    }
}

impl Code {
    pub fn id(&self) -> i64 {
        self.0.terms.id
    }

    /// Its text (upper case).
    pub fn text(&self) -> &str {
        &self.0.code
    }

    /// What `/code` says when `buyer`'s pending order already uses this code (it holds the
    /// code's use, which is what would otherwise read as "used already"): applied, at the
    /// order's price. `None` when no such order exists.
    pub async fn already_applied(
        &self,
        client: &impl GenericClient,
        buyer: SubscriberId,
        l: Language,
    ) -> Result<Option<String>, ApiError> {
        let Some(o) = bot_orders::using_code(client, buyer, self.id()).await? else {
            return Ok(None);
        };
        let title = render::title(l, o.translations.title(l, &o.name), o.channel_id);
        Ok(Some(texts::code_already_applied(
            l,
            self.text(),
            &title,
            &render::price(l, &Money::new(o.amount_minor, &o.currency)),
            &render::price(l, &Money::new(o.list_price_minor, &o.currency)),
        )))
    }

    /// Why the code cannot be used at all now (for any plan), as buyers read it.
    pub fn refusal(&self) -> Option<CodeRefusal> {
        self.0.refusal().as_ref().map(why)
    }

    /// Whether the code is meant for `plan` at all: a paid plan in its list (or any), in its
    /// currency for an amount off.
    pub fn covers(&self, plan: &Plan) -> bool {
        self.0.covers(plan)
    }

    /// What `buyer` would pay for `plan` with this code, or why the code does not apply.
    pub async fn price_for(
        &self,
        client: &impl GenericClient,
        buyer: Option<SubscriberId>,
        plan: &Plan,
    ) -> Result<Result<i64, CodeRefusal>, ApiError> {
        Ok(match self.0.discount_on(client, buyer, plan).await? {
            Ok(d) => Ok(plan.price_minor - d.discount_minor),
            Err(refusal) => Err(why(&refusal)),
        })
    }

    /// What the code gives, as buyers read it ("−25 % on Premium monthly"), or why no plan on
    /// sale takes it (`Err`).
    pub async fn gives(
        &self,
        client: &impl GenericClient,
        l: Language,
    ) -> Result<Result<String, CodeRefusal>, ApiError> {
        let rows = db::rows(
            client,
            PLAN_NAMES_SQL,
            &[&self.0.terms.plan_ids, &self.0.terms.currency],
        )
        .await?;
        if rows.is_empty() {
            return Ok(Err(CodeRefusal::NoPlan));
        }
        let off = match (
            self.0.terms.percent_off,
            self.0.terms.amount_off_minor,
            &self.0.terms.currency,
        ) {
            (Some(p), _, _) => texts::percent(l, p),
            (None, Some(a), Some(c)) => render::price(l, &Money::new(a, c)),
            _ => return Ok(Err(CodeRefusal::NoPlan)),
        };
        let on = match &self.0.terms.plan_ids {
            None => None,
            Some(_) => {
                let names = rows
                    .iter()
                    .map(|r| {
                        let name: String = r.try_get("name")?;
                        let translations: Translations = r.try_get("translations")?;
                        Ok::<_, tokio_postgres::Error>(render::clip(
                            &render::one_line(translations.title(l, &name)),
                            60,
                        ))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(names.join(", "))
            }
        };
        Ok(Ok(texts::code_gives(l, &off, on.as_deref())))
    }
}
