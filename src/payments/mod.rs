//! Payments: the one transaction that turns a payment into access ([`core`]), the payment side
//! of Stars refunds ([`refunds`]), and the pure
//! code the doors use to authenticate and read what gateways send — Standard Webhooks
//! signatures ([`standard_webhooks`]), WayForPay's signatures and callback ([`wayforpay`]) and
//! money in minor units ([`currency`]). The doors themselves are HTTP handlers
//! (`api::webhooks`); no door touches membership SQL.

pub mod core;
pub mod currency;
pub mod refunds;
pub mod standard_webhooks;
pub mod wayforpay;
