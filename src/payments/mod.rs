//! Payments: the one transaction that turns a payment into access ([`core`]), the notice to a
//! buyer whose payment could not be used ([`notices`]), Telegram Stars subscriptions
//! ([`star_subscriptions`]) and what Telegram reports of them ([`subscription_updates`]), the
//! payment side of Stars refunds ([`refunds`]), a refund made at the gateway taking back what
//! its payment bought ([`gateway_refunds`]), a charge disputed with the buyer's bank taking it
//! back alike and a won dispute put in review ([`disputes`]), and the pure code
//! the doors use to authenticate and read what gateways send — Standard Webhooks signatures
//! ([`standard_webhooks`]), WayForPay's signatures and callback ([`wayforpay`]) and its
//! Purchase links ([`wayforpay_purchase`]), Stripe's signatures, events and Checkout Sessions
//! ([`stripe`]). Money in minor units is [`crate::common::currency`]. The
//! doors themselves are HTTP handlers (`api::webhooks`); no door touches membership SQL.

pub mod core;
mod fast;
pub mod gateways;
pub mod notices;
pub mod refunds;
pub mod star_subscriptions;
