//! Payments: the one transaction that turns a payment into access ([`core`], with its fast
//! path), Telegram's affiliate fee on a Stars payment ([`affiliate_fees`]), the notice to a buyer whose payment could not be used ([`notices`]), Telegram Stars
//! subscriptions and what Telegram reports of them ([`star_subscriptions`]), refunds and
//! disputes taking back what a payment bought ([`refunds`]), the fiscal receipts a card
//! payment and its refund owe ([`receipts`], with the Checkbox client), and one module per gateway
//! ([`gateways`]): how each door's input is authenticated and read. The doors themselves are
//! HTTP handlers (`api::webhooks`); no door touches membership SQL.
//!
//! Below `telegram` and `bot`; imports `referrals` (the commission ledger a payment's fee
//! rebases), `orders`, `catalog`, `access`, `outbox` and the layers below them.

pub mod affiliate_fees;
pub mod core;
mod fast;
pub mod gateways;
pub mod notices;
pub mod receipts;
pub mod refunds;
pub mod star_subscriptions;
