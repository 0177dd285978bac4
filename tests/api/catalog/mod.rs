//! What staff manage through the API: subscribers, channels and memberships (create, read,
//! change, delete, the 4xx of each, keyset pages and filters), plans and bundles of several
//! channels, promo codes and what they take off an order, and the values nobody meant (prices
//! past a currency's bound, a user's chat as a channel, sums past `i64`).

pub(crate) mod bundles;
mod channels;
mod memberships;
mod paging;
mod plan_channels;
mod plans;
pub(crate) mod promo_codes;
mod promo_lapses;
mod promo_uses;
mod subscribers;
mod values;
