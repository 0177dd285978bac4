//! Payments: the doors that authenticate and normalize what gateways send, and the pure
//! verification code they use. The one transaction that turns a payment into access lives in
//! [`core`]; no door touches membership SQL.

pub mod currency;
pub mod standard_webhooks;
pub mod wayforpay;
