//! The gateways, one module each: how a door authenticates what a gateway sends and reads it
//! into the one normalized payment the core applies. Pure signature and wire code, plus the
//! reconciles of WayForPay, Monobank and Crypto Pay, which ask the gateway about a payment
//! whose callback never came, and Monobank's invoices with their public key.
//!
//! May import the payment core's types, `orders`, `access` and the layers below them; never
//! `api`.

pub mod cryptopay;
pub mod monobank;
pub mod standard_webhooks;
pub mod stripe;
pub mod wayforpay;
