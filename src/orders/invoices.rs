//! An order's invoice: the link sent to the buyer, kept once made, and the facts an invoice is
//! made of.

use super::*;

/// Stores a Stars invoice link on the order unless one is stored already (the first stored
/// link wins); returns the order as it is now.
pub async fn set_invoice_link(
    client: &impl GenericClient,
    id: i64,
    link: &str,
) -> Result<Option<Order>, ApiError> {
    db::execute(client, SET_INVOICE_LINK_SQL, &[&id, &link]).await?;
    get(client, id).await
}

pub(super) const KEEP_INVOICE_LINK_SQL: &str = "WITH stored AS (
         UPDATE orders SET invoice_link = $2
         WHERE id = $1 AND invoice_link IS NULL
         RETURNING invoice_link
     )
     SELECT invoice_link FROM stored
     UNION ALL
     SELECT invoice_link FROM orders WHERE id = $1
     LIMIT 1";

/// Stores `link` on the order unless one is stored already, in one statement, and returns the
/// link the order keeps (the first stored wins, so a repeated invoice sends the same link).
pub async fn keep_invoice_link(
    client: &impl GenericClient,
    id: i64,
    link: &str,
) -> Result<Option<String>, ApiError> {
    Ok(db::row_one(client, KEEP_INVOICE_LINK_SQL, &[&id, &link])
        .await?
        .try_get("invoice_link")?)
}

pub(super) const RECORD_PURCHASE_LINK_SQL: &str = "UPDATE orders
     SET purchase_link_at = COALESCE(purchase_link_at, statement_timestamp())
     WHERE id = $1
     RETURNING purchase_link_at";

/// Records that the buyer was given a card purchase link for order `id` (the first time
/// counts: a resent link changes nothing); returns when, `None` for no such order.
pub async fn record_purchase_link(
    client: &impl GenericClient,
    id: i64,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    Ok(db::row_opt(client, RECORD_PURCHASE_LINK_SQL, &[&id])
        .await?
        .map(|r| r.try_get("purchase_link_at"))
        .transpose()?)
}

/// The select list of [`InvoiceFacts`], over `orders o JOIN channels c JOIN plans p` (the
/// order's plan: its title, description and terms; a default plan reads as its channel, whose
/// own title and description it stands for); `$2` is how long an order without a hold can be
/// paid as invoiced, in seconds.
macro_rules! invoice_facts_columns {
    () => {
        "o.status, o.reference, o.amount_minor, o.currency, o.invoice_link,
         extract(epoch FROM o.created_at)::bigint AS order_date,
         c.id AS channel_id,
         CASE WHEN p.default_of IS NULL THEN p.title ELSE c.title END AS title,
         CASE WHEN p.default_of IS NULL THEN p.description ELSE c.description END
             AS description,
         p.period_days, p.recurring,
         floor(extract(epoch FROM CASE
             WHEN o.hold_until IS NOT NULL THEN o.hold_until - statement_timestamp()
             ELSE o.created_at + make_interval(secs => $2) - statement_timestamp()
         END))::bigint AS open_secs,
         extract(epoch FROM COALESCE(o.hold_until,
             o.created_at + make_interval(secs => $2)))::bigint AS closes_at,
         o.superseded_at IS NOT NULL AS superseded,
         s.language,
         CASE WHEN p.default_of IS NULL THEN p.translations ELSE c.translations END
             AS translations"
    };
}

pub(super) const INVOICE_FACTS_SQL: &str = concat!(
    "SELECT ",
    invoice_facts_columns!(),
    " FROM orders o JOIN channels c ON c.id = o.channel_id JOIN plans p ON p.id = o.plan_id
          JOIN subscribers s ON s.id = o.subscriber_id
     WHERE o.id = $1"
);

/// An order's invoice, as its plan is sold now (what the bot's invoice effect sends); the
/// amount is the order's (after its discount).
#[derive(Debug, Clone)]
pub struct InvoiceFacts {
    pub status: Status,
    pub superseded: bool,
    pub reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub invoice_link: Option<String>,
    /// When the order was made, in Unix seconds.
    pub order_date: i64,
    pub channel_id: i32,
    /// The plan's title (its channel's, for a default plan).
    pub title: String,
    pub description: Option<String>,
    /// The plan's period; `None`: lifetime.
    pub days: Option<i32>,
    pub recurring: bool,
    /// Seconds the order can still be paid as invoiced: its seat hold, else the time an
    /// unheld order stays open from when it was made.
    pub open_secs: i64,
    /// When that is, in Unix seconds.
    pub closes_at: i64,
    /// The buyer's remembered language (`None`: the default).
    pub language: Option<Language>,
    /// The translations of `title` and `description` (the plan's, or its channel's).
    pub translations: Translations,
}

impl InvoiceFacts {
    /// The title as a buyer of `l` reads it.
    pub fn title_in(&self, l: Language) -> &str {
        self.translations.title(l, &self.title)
    }

    /// The description as a buyer of `l` reads it.
    pub fn description_in(&self, l: Language) -> Option<&str> {
        self.translations
            .description(l, self.description.as_deref())
    }
}

crate::from_row!(InvoiceFacts [invoice_facts_columns!()] {
    status,
    superseded,
    reference,
    amount_minor,
    currency,
    invoice_link,
    order_date,
    channel_id,
    title,
    description,
    days: "period_days",
    recurring,
    open_secs,
    closes_at,
    language,
    translations,
});

/// The invoice of order `id` as its plan is sold now, if the order exists; an order
/// without a hold counts as open for `unheld_open_secs` from when it was made.
pub async fn invoice_facts(
    client: &impl GenericClient,
    id: i64,
    unheld_open_secs: i64,
) -> Result<Option<InvoiceFacts>, ApiError> {
    db::opt(
        client,
        INVOICE_FACTS_SQL,
        &[&id, &(unheld_open_secs as f64)],
    )
    .await
}
