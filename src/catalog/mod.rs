//! What is for sale: channels ([`channels`]), the plans a channel is sold by — bundles, trials,
//! lifetime ([`plans`]) — and promo codes with their exact uses ([`promo_codes`]). Each module
//! owns its table, its row mapping and its rules.
//!
//! Below `outbox`, `access`, `orders` and `payments`; imports only `staff`, `present`, `config`,
//! `db` and `common`.

pub mod channels;
pub mod plans;
pub mod promo_codes;
