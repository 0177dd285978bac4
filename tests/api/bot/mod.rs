//! Buyers in the Telegram bot: whole conversations through `POST /api/webhook/telegram` — the
//! catalogue, buying with Stars or by card, holds on seats and their timeouts, Stars renewals,
//! plans, trials and promo codes as the bot offers them, the languages it speaks, the words it
//! answers with, the guesses of codes it throttles, and referral links (clicks, attribution and
//! a buyer's own link), and private supergroups sold as channels are (`groups`). `conversation` holds the updates and
//! look-ups the other files build their conversations from.

mod catalogue;
mod code_guesses;
pub(crate) mod conversation;
mod groups;
mod holds;
mod languages;
mod plan_prices;
pub(crate) mod plans;
mod referrals;
mod stars_renewals;
mod words;
