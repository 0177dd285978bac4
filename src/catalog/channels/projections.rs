//! What other modules read of a channel: the bot's offer ([`Offer`]), the overview's member
//! counts ([`MemberCounts`]), a title, and the price a new order copies ([`Price`]).

use deadpool_postgres::GenericClient;

use crate::{
    common::error::ApiError,
    db,
    present::{locale::Language, translations::Translations},
};

/// A channel as the bot offers it: what a buyer reads and what decides whether they can buy.
#[derive(Debug, Clone)]
pub struct Offer {
    pub id: i32,
    pub title: String,
    pub description: Option<String>,
    pub price_minor: i64,
    pub currency: String,
    pub billing_period_days: i32,
    pub recurring: bool,
    pub seat_limit: Option<i32>,
    pub active: bool,
    pub translations: Translations,
}

impl Offer {
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

macro_rules! offer_columns {
    () => {
        "id, title, description, price_minor, currency, billing_period_days, recurring, \
         seat_limit, active, translations"
    };
}

crate::from_row!(Offer [offer_columns!()] {
    id,
    title,
    description,
    price_minor,
    currency,
    billing_period_days,
    recurring,
    seat_limit,
    active,
    translations,
});

const OFFER_SQL: &str = concat!("SELECT ", offer_columns!(), " FROM channels WHERE id = $1");
const OFFERS_SQL: &str = concat!(
    "SELECT ",
    offer_columns!(),
    " FROM channels WHERE active AND id > $1 ORDER BY id LIMIT $2"
);

/// Channel `id` as the bot offers it, active or not.
pub async fn offer(client: &impl GenericClient, id: i32) -> Result<Option<Offer>, ApiError> {
    db::opt(client, OFFER_SQL, &[&id]).await
}

/// Active channels after channel `after`, by id, at most `limit`.
pub async fn active_offers(
    client: &impl GenericClient,
    after: i32,
    limit: i64,
) -> Result<Vec<Offer>, ApiError> {
    db::all(client, OFFERS_SQL, &[&after, &limit]).await
}

/// A channel with its memberships counted by status, for the overview.
#[derive(Debug, Clone)]
pub struct MemberCounts {
    pub id: i32,
    pub title: String,
    pub active: bool,
    pub seat_limit: Option<i32>,
    pub members_active: i64,
    pub members_grace: i64,
    pub members_expired: i64,
}

crate::from_row!(MemberCounts {
    id,
    title,
    active,
    seat_limit,
    members_active,
    members_grace,
    members_expired,
});

const MEMBER_COUNTS_SQL: &str = "SELECT c.id, c.title, c.active, c.seat_limit,
            count(m.id) FILTER (WHERE m.status = 'active') AS members_active,
            count(m.id) FILTER (WHERE m.status = 'grace') AS members_grace,
            count(m.id) FILTER (WHERE m.status = 'expired') AS members_expired
     FROM channels c LEFT JOIN memberships m ON m.channel_id = c.id
     GROUP BY c.id ORDER BY c.id";

/// Every channel, by id, with its memberships counted by status.
pub async fn member_counts(client: &impl GenericClient) -> Result<Vec<MemberCounts>, ApiError> {
    db::all(client, MEMBER_COUNTS_SQL, &[]).await
}

const TITLE_SQL: &str = "SELECT title, translations FROM channels WHERE id = $1";

/// Channel `id`'s title; `None`: no such channel.
pub async fn title(client: &impl GenericClient, id: i32) -> Result<Option<String>, ApiError> {
    Ok(titles(client, id).await?.map(|(title, _)| title))
}

/// Channel `id`'s title and its translations; `None`: no such channel.
pub async fn titles(
    client: &impl GenericClient,
    id: i32,
) -> Result<Option<(String, Translations)>, ApiError> {
    Ok(match db::row_opt(client, TITLE_SQL, &[&id]).await? {
        Some(r) => Some((r.try_get("title")?, r.try_get("translations")?)),
        None => None,
    })
}

/// A channel's price now, and whether it is on sale: what a new order copies.
#[derive(Debug, Clone)]
pub struct Price {
    pub price_minor: i64,
    pub currency: String,
    pub active: bool,
}

crate::from_row!(Price {
    price_minor,
    currency,
    active,
});

const PRICE_SQL: &str = "SELECT price_minor, currency, active FROM channels WHERE id = $1";

/// Channel `id`'s price and whether it is active; `None`: no such channel.
pub async fn price(client: &impl GenericClient, id: i32) -> Result<Option<Price>, ApiError> {
    db::opt(client, PRICE_SQL, &[&id]).await
}
