//! The payment doors, one file each. A door authenticates its caller over the raw body
//! bytes (constant-time comparisons), normalizes what it was told into a
//! [`NormalizedPayment`](crate::payments::core::NormalizedPayment) and hands it to the one
//! payment core ([`crate::payments::core::apply_payment`]); no door touches order, membership
//! or payment SQL.
//!
//! - [`standard`]: door 1, `POST /api/webhook/payment`, a card gateway signed with Standard
//!   Webhooks;
//! - [`wayforpay`]: door 2, `POST /api/webhook/wayforpay`, WayForPay's `serviceUrl` callback;
//! - [`telegram`]: door 3, `POST /api/webhook/telegram`, the bot webhook (Stars pre-checkout and
//!   payments, join requests; the decisions are [`crate::telegram`]'s);
//! - [`stripe`]: door 4, `POST /api/webhook/stripe`, Stripe's events;
//! - [`monobank`]: door 5, `POST /api/webhook/monobank`, Monobank acquiring's invoice reports;
//! - [`cryptopay`]: door 6, `POST /api/webhook/cryptopay`, Crypto Pay's updates.

pub mod cryptopay;
pub mod monobank;
pub mod standard;
pub mod stripe;
pub mod telegram;
pub mod wayforpay;
