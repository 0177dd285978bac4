//! Payments: the doors that authenticate and normalize what gateways send, and the pure
//! verification code they use. The one transaction that turns a payment into access lives in
//! [`core`]; no door touches membership SQL.

pub mod core;
pub mod currency;
pub mod seats;
pub mod standard_webhooks;
pub mod star_subscriptions;
pub mod wayforpay;
pub mod wayforpay_door;
pub mod wayforpay_purchase;
pub mod webhook_door;
