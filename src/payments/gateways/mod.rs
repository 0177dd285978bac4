//! The gateways, one module each: how a door authenticates what a gateway sends and reads it
//! into the one normalized payment the core applies. Pure signature and wire code, plus the
//! reconciles of WayForPay, Monobank and Crypto Pay, which ask the gateway about a payment
//! whose callback never came, Monobank's invoices with their public key, and the refund calls
//! of a refund staff ask for (`stripe_refund`, `wayforpay::refund`).
//!
//! May import the payment core's types, `orders`, `access` and the layers below them; never
//! `api`.

pub mod cryptopay;
pub mod monobank;
pub mod standard_webhooks;
pub mod stripe;
pub mod stripe_refund;
pub mod wayforpay;
