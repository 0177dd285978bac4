//! The card pages an order is paid on: a signed WayForPay Purchase link ([`card_link`]) and a
//! Stripe Checkout Session ([`stripe_session`]). The effects worker sends them in the bot's
//! invoice; the Mini App hands them to its page. Both are made from the order's
//! [`orders::InvoiceFacts`], so either way the buyer is shown the same amount, product name and
//! closing time.

use crate::{
    bot,
    common::currency::Money,
    config::Config,
    orders,
    payments::gateways::{stripe, wayforpay::purchase as wayforpay_purchase},
    present::render,
};

/// Why no page was made.
#[derive(Debug)]
pub enum LinkFailure {
    /// Cannot succeed as things stand (a gateway not configured, an unknown currency).
    Permanent(String),
    /// The gateway's API failed in a way worth retrying.
    Retry(String),
}

/// The signed WayForPay Purchase link of an order, open for `f.open_secs`.
pub fn card_link(
    config: &Config,
    f: &orders::InvoiceFacts,
    name: &str,
) -> Result<String, LinkFailure> {
    let missing = || LinkFailure::Permanent("WayForPay purchase links are not configured".into());
    let wfp = config.wayforpay.as_ref().ok_or_else(missing)?;
    let domain = config.wayforpay_domain.as_deref().ok_or_else(missing)?;
    let public_url = config.public_url.as_deref().ok_or_else(missing)?;
    let service_url = format!("{public_url}/api/webhook/wayforpay");
    let return_url = config
        .telegram_bot_username
        .as_ref()
        .map(|u| format!("https://t.me/{u}"));
    let product = render::clip(name, 120);
    let purchase = wayforpay_purchase::Purchase {
        merchant_account: &wfp.merchant_account,
        merchant_domain: domain,
        order_reference: &f.reference,
        order_date: f.order_date,
        price: &Money::new(f.amount_minor, &f.currency),
        product_name: &product,
        service_url: &service_url,
        return_url: return_url.as_deref(),
        order_timeout_secs: Some(f.open_secs),
    };
    wayforpay_purchase::url(wfp.secret_key.expose().as_bytes(), &purchase)
        .ok_or_else(|| LinkFailure::Permanent(format!("{} has no known minor unit", f.currency)))
}

/// The URL of the order's Stripe Checkout page, made now (or found again: the call is keyed on
/// the order, [`stripe::create_checkout_session`]); `None` when the page could not stay
/// open for the half hour Stripe requires before the order closes.
pub async fn stripe_session(
    config: &Config,
    f: &orders::InvoiceFacts,
    name: &str,
) -> Result<Option<String>, LinkFailure> {
    let missing = || LinkFailure::Permanent("Stripe is not configured".into());
    let stripe_config = config.stripe.as_ref().ok_or_else(missing)?;
    let return_url = bot::stripe_return_url(config).ok_or_else(missing)?;
    let expires_at = stripe::checkout_expires_at(f.order_date, f.closes_at);
    // A minute of slack for the call itself.
    if chrono::Utc::now().timestamp() + stripe::MIN_SESSION_SECS + 60 > expires_at {
        return Ok(None);
    }
    let product = render::clip(name, 120);
    let checkout = stripe::Checkout {
        order_reference: &f.reference,
        amount_minor: f.amount_minor,
        currency: &f.currency,
        product_name: &product,
        return_url: &return_url,
        expires_at,
    };
    match stripe::create_checkout_session(
        &stripe_config.api_url,
        stripe_config.secret_key.expose(),
        &checkout,
    )
    .await
    {
        Ok(session) => {
            tracing::info!(order_reference = %f.reference, session = %session.id,
                "Stripe Checkout Session made");
            Ok(Some(session.url))
        }
        Err(stripe::ApiCallError::Transient(why)) => Err(LinkFailure::Retry(why)),
        Err(e @ stripe::ApiCallError::Refused(_)) => Err(LinkFailure::Permanent(e.to_string())),
    }
}
