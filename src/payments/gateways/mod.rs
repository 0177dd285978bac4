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

/// The HTTP client of every call to a payment or fiscal service (Stripe, WayForPay's refunds,
/// Monobank, Crypto Pay, Checkbox): 15 s per call, no redirects.
pub fn http() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(15))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("the gateways' HTTP client builds")
    })
}
