//! Affiliates (`affiliates`): partners by name and buyers, each with a code and a link, and
//! what each brought (the [`summary`]).
//!
//! A code is 3..32 of `A-Z 0-9 _`, unique; staff may give one (lower case is accepted and
//! stored upper case, as promo codes are) or leave it to [`create`], which draws eight random
//! upper-case letters and digits and draws again on the rare clash. An affiliate is never
//! deleted — its clicks, attributions and lines point at it — only deactivated; a subscriber is
//! the buyer of at most one affiliate.
//!
//! The affiliate's row is the lock the ledger's reversals and the payouts serialize on
//! ([`lock`]).

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use rand::Rng;
use serde::Serialize;
use tokio_postgres::error::SqlState;

use super::lines::status_sql;
use crate::{common::error::ApiError, db};

/// What a code must be, as a 422 says it.
pub const CODE_RULE: &str = "must be 3 to 32 characters of A-Z, 0-9 and _";
/// The longest `name`, in characters.
pub const NAME_MAX: usize = 200;
/// How long a drawn code is.
const DRAWN_CODE_LEN: usize = 8;
/// How many codes [`create`] (and a buyer's own link, [`super::buyer_links`]) draws before it
/// gives up (a clash is already rare at 36^8).
pub(super) const DRAWS: usize = 8;

/// The link that opens the bot with affiliate code `code`: `/start r_<code>`.
pub fn link(bot_username: &str, code: &str) -> String {
    format!("https://t.me/{bot_username}?start=r_{code}")
}

/// A code as it is stored (upper case), or `None` when it is not 3..32 of `A-Z 0-9 _` once
/// upper-cased.
pub fn normalize_code(code: &str) -> Option<String> {
    let upper = code.to_ascii_uppercase();
    let fits = (3..=32).contains(&upper.len())
        && upper
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    fits.then_some(upper)
}

/// A new random code: eight upper-case letters and digits (`DRAWN_CODE_LEN`).
pub fn draw_code() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rngs::OsRng;
    (0..DRAWN_CODE_LEN)
        .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
        .collect()
}

/// An affiliate as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 3, "name": "Crypto Daily", "subscriber_id": null,
    "code": "CRYPTODAILY", "link": "https://t.me/subgate_bot?start=r_CRYPTODAILY",
    "active": true, "created_at": "2026-01-01T10:00:00Z", "updated_at": "2026-01-01T10:00:00Z"}))]
pub struct Affiliate {
    pub id: i32,
    pub name: String,
    /// The buyer this affiliate is, if it is one (null: an outside partner).
    pub subscriber_id: Option<i32>,
    pub code: String,
    /// `https://t.me/<bot>?start=r_<code>`; null without `TELEGRAM_BOT_USERNAME`.
    pub link: Option<String>,
    /// An inactive affiliate's code is ignored (no click, no attribution); its lines stay.
    pub active: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Affiliate {
    /// Fills the read-only `link` from the bot's username (`TELEGRAM_BOT_USERNAME`).
    pub fn with_link(mut self, bot_username: Option<&str>) -> Affiliate {
        self.link = bot_username.map(|bot| link(bot, &self.code));
        self
    }
}

/// The select list of [`Affiliate`].
macro_rules! affiliate_columns {
    () => {
        "id, name, subscriber_id, code, active, created_at, updated_at"
    };
}

crate::from_row!(Affiliate [affiliate_columns!()] {
    id,
    name,
    subscriber_id,
    code,
    link => None,
    active,
    created_at,
    updated_at,
});

/// A new affiliate; the caller has checked the name's length and normalized the code.
#[derive(Debug, Clone)]
pub struct New {
    pub name: String,
    pub subscriber_id: Option<i32>,
    /// `None`: drawn ([`draw_code`]).
    pub code: Option<String>,
}

const INSERT_SQL: &str = concat!(
    "INSERT INTO affiliates (name, subscriber_id, code) VALUES ($1, $2, $3)
     ON CONFLICT ON CONSTRAINT affiliates_code_key DO NOTHING
     RETURNING ",
    affiliate_columns!()
);
const OF_SUBSCRIBER_SQL: &str = "SELECT id FROM affiliates WHERE subscriber_id = $1";

/// Creates an affiliate. 409 when its given code is taken; 422 (`subscriber_id`) when the
/// subscriber does not exist or is already an affiliate.
pub async fn create(tx: &Transaction<'_>, new: &New) -> Result<Affiliate, ApiError> {
    if let Some(s) = new.subscriber_id
        && let Some(row) = db::row_opt(tx, OF_SUBSCRIBER_SQL, &[&s]).await?
    {
        let id: i32 = row.try_get("id")?;
        return Err(subscriber_taken(id));
    }
    for _ in 0..DRAWS {
        let code = new.code.clone().unwrap_or_else(draw_code);
        let inserted: Option<Affiliate> =
            db::opt(tx, INSERT_SQL, &[&new.name, &new.subscriber_id, &code])
                .await
                .map_err(refused)?;
        match inserted {
            Some(a) => {
                tracing::info!(affiliate_id = a.id, code = %a.code, "affiliate created");
                return Ok(a);
            }
            None if new.code.is_some() => {
                return Err(ApiError::Conflict(
                    "an affiliate with this code already exists".into(),
                ));
            }
            None => continue,
        }
    }
    Err(ApiError::internal(
        "every drawn affiliate code was taken; the code space is exhausted",
    ))
}

fn subscriber_taken(affiliate_id: i32) -> ApiError {
    ApiError::field(
        "subscriber_id",
        format!("this subscriber is already affiliate {affiliate_id}"),
    )
}

/// The schema's refusals of a new affiliate, as 422s naming the field; anything else stays a
/// database error.
fn refused(e: ApiError) -> ApiError {
    let ApiError::Db(db_error) = &e else {
        return e;
    };
    let Some(d) = db_error.as_db_error() else {
        return e;
    };
    match (d.code(), d.constraint()) {
        (c, Some("affiliates_subscriber_id_fkey")) if *c == SqlState::FOREIGN_KEY_VIOLATION => {
            ApiError::field("subscriber_id", "no such subscriber")
        }
        // A concurrent create took the subscriber after the check above.
        (c, Some("affiliates_subscriber_key")) if *c == SqlState::UNIQUE_VIOLATION => {
            ApiError::field("subscriber_id", "this subscriber is already an affiliate")
        }
        _ => e,
    }
}

const GET_SQL: &str = concat!(
    "SELECT ",
    affiliate_columns!(),
    " FROM affiliates WHERE id = $1"
);
const LOCK_SQL: &str = concat!(
    "SELECT ",
    affiliate_columns!(),
    " FROM affiliates WHERE id = $1 FOR UPDATE"
);

/// Affiliate `id`, if any.
pub async fn get(client: &impl GenericClient, id: i32) -> Result<Option<Affiliate>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

/// Affiliate `id` with its row locked `FOR UPDATE` for the rest of the transaction, if any: the
/// lock a payout and the ledger's reversal of a line take first, so the lines of one affiliate
/// are paid or taken back one transaction at a time.
pub async fn lock(tx: &Transaction<'_>, id: i32) -> Result<Option<Affiliate>, ApiError> {
    db::opt(tx, LOCK_SQL, &[&id]).await
}

/// The filters of [`list`]; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub active: Option<bool>,
    pub subscriber_id: Option<i32>,
    /// Normalized ([`normalize_code`]).
    pub code: Option<String>,
}

const LIST_SQL: &str = concat!(
    "SELECT ",
    affiliate_columns!(),
    " FROM affiliates
     WHERE id > $1::bigint
       AND ($2::boolean IS NULL OR active = $2)
       AND ($3::integer IS NULL OR subscriber_id = $3)
       AND ($4::text IS NULL OR code = $4)
     ORDER BY id
     LIMIT $5"
);

/// Up to `limit` affiliates with an id above `after`, by id, matching `filter`.
pub async fn list(
    client: &impl GenericClient,
    filter: &Filter,
    after: i64,
    limit: i64,
) -> Result<Vec<Affiliate>, ApiError> {
    db::all(
        client,
        LIST_SQL,
        &[
            &after,
            &filter.active,
            &filter.subscriber_id,
            &filter.code,
            &limit,
        ],
    )
    .await
}

/// A change of an affiliate: a field left out keeps its value.
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub name: Option<String>,
    pub active: Option<bool>,
}

const CHANGE_SQL: &str = concat!(
    "UPDATE affiliates SET name = COALESCE($2, name), active = COALESCE($3, active),
         updated_at = statement_timestamp()
     WHERE id = $1
     RETURNING ",
    affiliate_columns!()
);

/// Changes affiliate `id` (404 when there is none); returns it as changed. Deactivating stops
/// new clicks and attributions by its code; its lines stay and are paid as usual.
pub async fn change(tx: &Transaction<'_>, id: i32, c: &Change) -> Result<Affiliate, ApiError> {
    let a: Affiliate = db::opt(tx, CHANGE_SQL, &[&id, &c.name, &c.active])
        .await?
        .ok_or(ApiError::NotFound("affiliate"))?;
    tracing::info!(affiliate_id = id, active = a.active, "affiliate changed");
    Ok(a)
}

/// What an affiliate brought.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"affiliate_id": 3, "clicks": 120, "attributed_buyers": 14,
    "paying_buyers": 5, "currencies": [{"currency": "UAH", "revenue_minor": 99500,
    "commission": {"pending": 5970, "payable": 11940, "paid": 11940, "reversed": 0},
    "reversals_minor": -5970, "balance_minor": 5970}]}))]
#[schema(as = AffiliateSummary)]
pub struct Summary {
    pub affiliate_id: i32,
    /// Every `/start r_<code>` of its code recorded (whatever each came to).
    pub clicks: i64,
    /// Buyers attributed to it now.
    pub attributed_buyers: i64,
    /// Distinct buyers with an earning line (`first` or `renewal`), taken back or not.
    pub paying_buyers: i64,
    /// By currency (ascending), every currency it has lines in.
    pub currencies: Vec<CurrencySummary>,
}

/// An affiliate's money in one currency. Sums of minor units are exact integers of any size
/// ([`db::exact_sum`]).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = AffiliateCurrencySummary)]
pub struct CurrencySummary {
    pub currency: String,
    /// The amounts the earning lines were computed on (each payment's amount net of
    /// Telegram's affiliate fee), without the payments taken back since (refunded or
    /// disputed, before or after their line was paid).
    pub revenue_minor: i128,
    /// The earning lines (`first` and `renewal`) by their status now.
    pub commission: Commission,
    /// The sum of the `reversal` lines (zero or negative): earning lines paid and then taken
    /// back, whatever their status.
    pub reversals_minor: i128,
    /// What a payout of this currency would pay now: every `payable` line, reversals netted.
    /// Negative when reversals exceed what is payable (carried into the next payout).
    pub balance_minor: i128,
}

/// Earning lines' amounts by status.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = CommissionByStatus)]
pub struct Commission {
    /// In their hold.
    pub pending: i128,
    /// Past their hold, not paid yet.
    pub payable: i128,
    /// Paid by a payout.
    pub paid: i128,
    /// Taken back before they were paid (never paid).
    pub reversed: i128,
}

const COUNTS_SQL: &str = "SELECT
     (SELECT count(*) FROM referral_clicks WHERE affiliate_id = $1) AS clicks,
     (SELECT count(*) FROM referral_attributions WHERE affiliate_id = $1) AS attributed_buyers,
     (SELECT count(DISTINCT subscriber_id) FROM commission_lines
      WHERE affiliate_id = $1 AND kind <> 'reversal') AS paying_buyers";

const MONEY_SQL: &str = concat!(
    "WITH l AS (
         SELECT l.kind, l.currency, l.amount_minor, l.base_minor, ",
    status_sql!("l"),
    " AS status,
                l.status = 'reversed' OR EXISTS (
                    SELECT 1 FROM commission_lines r
                    WHERE r.payment_id = l.payment_id AND r.kind = 'reversal') AS taken_back
         FROM commission_lines l
         WHERE l.affiliate_id = $1
     )
     SELECT currency,
            (sum(base_minor) FILTER (WHERE kind <> 'reversal' AND NOT taken_back))::text
                AS revenue_minor,
            (sum(amount_minor) FILTER (WHERE kind <> 'reversal' AND status = 'pending'))::text
                AS pending,
            (sum(amount_minor) FILTER (WHERE kind <> 'reversal' AND status = 'payable'))::text
                AS payable,
            (sum(amount_minor) FILTER (WHERE kind <> 'reversal' AND status = 'paid'))::text
                AS paid,
            (sum(amount_minor) FILTER (WHERE kind <> 'reversal' AND status = 'reversed'))::text
                AS reversed,
            (sum(amount_minor) FILTER (WHERE kind = 'reversal'))::text AS reversals_minor,
            (sum(amount_minor) FILTER (WHERE status = 'payable'))::text AS balance_minor
     FROM l
     GROUP BY currency
     ORDER BY currency"
);

/// What affiliate `id` brought (404 when there is none).
pub async fn summary(client: &impl GenericClient, id: i32) -> Result<Summary, ApiError> {
    if get(client, id).await?.is_none() {
        return Err(ApiError::NotFound("affiliate"));
    }
    let counts = db::row_one(client, COUNTS_SQL, &[&id]).await?;
    let currencies = db::rows(client, MONEY_SQL, &[&id])
        .await?
        .iter()
        .map(|r| {
            Ok(CurrencySummary {
                currency: r.try_get("currency")?,
                revenue_minor: db::exact_sum(r, "revenue_minor")?,
                commission: Commission {
                    pending: db::exact_sum(r, "pending")?,
                    payable: db::exact_sum(r, "payable")?,
                    paid: db::exact_sum(r, "paid")?,
                    reversed: db::exact_sum(r, "reversed")?,
                },
                reversals_minor: db::exact_sum(r, "reversals_minor")?,
                balance_minor: db::exact_sum(r, "balance_minor")?,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Summary {
        affiliate_id: id,
        clicks: counts.try_get("clicks")?,
        attributed_buyers: counts.try_get("attributed_buyers")?,
        paying_buyers: counts.try_get("paying_buyers")?,
        currencies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_upper_case_letters_digits_and_underscores() {
        assert_eq!(normalize_code("ann_2026").as_deref(), Some("ANN_2026"));
        assert_eq!(normalize_code("ABC").as_deref(), Some("ABC"));
        assert_eq!(normalize_code(&"Z".repeat(32)), Some("Z".repeat(32)));
        for bad in [
            "AB",
            "",
            "WITH-DASH",
            "SPACE D",
            "ÄBC",
            "r_CODE?",
            &"Z".repeat(33),
        ] {
            assert_eq!(normalize_code(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_drawn_code_is_a_valid_code_of_eight() {
        for _ in 0..200 {
            let code = draw_code();
            assert_eq!(code.len(), DRAWN_CODE_LEN);
            assert_eq!(normalize_code(&code).as_deref(), Some(code.as_str()));
            assert!(!code.contains('_'));
        }
    }

    #[test]
    fn the_link_starts_the_bot_with_the_code() {
        assert_eq!(
            link("subgate_bot", "ANN"),
            "https://t.me/subgate_bot?start=r_ANN"
        );
    }
}
