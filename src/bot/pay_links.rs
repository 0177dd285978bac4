//! What an order is paid with: the card pages — a signed WayForPay Purchase link
//! ([`card_link`]), a Stripe Checkout Session ([`stripe_session`]) and a Monobank invoice's
//! page ([`monobank_page`]) — and the words of its Stars invoice ([`StarsWords`]). The effects worker sends them in the bot's invoice; the Mini
//! App hands them to its page. Both are made from the order's [`orders::InvoiceFacts`]
//! ([`facts`]), so either way the buyer is shown the same amount, product name, words and
//! closing time.

use deadpool_postgres::{GenericClient, Pool};

use crate::{
    bot,
    common::{currency::Money, error::ApiError},
    config::Config,
    orders,
    payments::gateways::{
        monobank::{self, invoices as monobank_invoices},
        stripe,
        wayforpay::purchase as wayforpay_purchase,
    },
    present::{locale::Language, render, texts},
    telegram_api::client::StarsInvoice,
};

/// Order `order_id`'s facts as its pages are made from: open as long as a card page may be, and
/// never longer than a hold (even one granted under a longer `HOLD_SECS`). `None`: no such order.
pub async fn facts(
    client: &impl GenericClient,
    config: &Config,
    order_id: i64,
) -> Result<Option<orders::InvoiceFacts>, ApiError> {
    let card_open = bot::open_secs(bot::Gateway::Card, config.hold_secs);
    let mut facts = orders::invoice_facts(client, order_id, card_open).await?;
    if let Some(f) = facts.as_mut() {
        f.open_secs = f.open_secs.min(config.hold_secs);
    }
    Ok(facts)
}

/// What an order's Stars invoice says, in the buyer's language: the order's plan (title,
/// description, period or lifetime) and its price label — the same in the chat's invoice, a
/// staff invoice link and the page's.
pub struct StarsWords {
    pub title: String,
    pub description: String,
    pub label: String,
}

impl StarsWords {
    /// The words of `f`'s invoice in `l`.
    pub fn of(l: Language, f: &orders::InvoiceFacts) -> StarsWords {
        let period = render::term(l, f.days);
        StarsWords {
            title: render::invoice_title(l, f.title_in(l), f.channel_id),
            description: render::invoice_description(
                l,
                f.description_in(l),
                f.title_in(l),
                f.channel_id,
                f.days,
            ),
            label: render::clip(
                &texts::invoice_label(l, period.as_deref()),
                render::INVOICE_TITLE_MAX,
            ),
        }
    }

    /// The invoice of `f` with these words: its reference as the payload, its amount.
    pub fn invoice<'a>(&'a self, f: &'a orders::InvoiceFacts) -> StarsInvoice<'a> {
        StarsInvoice {
            title: &self.title,
            description: &self.description,
            payload: &f.reference,
            label: &self.label,
            amount: f.amount_minor,
        }
    }
}

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

/// The page of order `order_id`'s Monobank invoice: the one given out before, while it can
/// still be paid for [`bot::MIN_CARD_PAGE_SECS`], else a new invoice made now — `amount` in
/// kopiyky, `ccy` 980, the order's reference and the plan's name in `merchantPaymInfo`,
/// `validity` what is left of the order's time (`f.open_secs`: its hold, never longer than a
/// hold), `webHookUrl` door 5, `redirectUrl` the bot's chat when its username is known — stored
/// before its page is given ([`monobank_invoices::hand_out`]: Monobank has no idempotency key,
/// so a repeat of the effect, or a Mini App press at the same time, gives the same page).
/// `None` when the order has less than that minute left.
pub async fn monobank_page(
    db: &Pool,
    config: &Config,
    f: &orders::InvoiceFacts,
    order_id: i64,
    name: &str,
) -> Result<Option<String>, LinkFailure> {
    let missing = || LinkFailure::Permanent("Monobank is not configured".into());
    let mono = config.monobank.as_ref().ok_or_else(missing)?;
    let public_url = config.public_url.as_deref().ok_or_else(missing)?;
    if f.currency != "UAH" {
        return Err(LinkFailure::Permanent(format!(
            "Monobank takes hryvnias only, not {}",
            f.currency
        )));
    }
    if f.open_secs < bot::MIN_CARD_PAGE_SECS {
        return Ok(None);
    }
    let db_failed = |e: ApiError| LinkFailure::Retry(format!("database: {e}"));
    {
        let client = db.get().await.map_err(|e| db_failed(e.into()))?;
        let reused = monobank_invoices::reusable(&client, order_id, bot::MIN_CARD_PAGE_SECS)
            .await
            .map_err(db_failed)?;
        if reused.is_some() {
            return Ok(reused);
        }
    }
    let web_hook_url = format!("{public_url}/api/webhook/monobank");
    let redirect_url = config
        .telegram_bot_username
        .as_ref()
        .map(|u| format!("https://t.me/{u}"));
    let destination = render::clip(name, 280);
    let invoice = monobank::NewInvoice {
        amount: f.amount_minor,
        ccy: monobank::UAH,
        merchant_paym_info: monobank::PaymInfo {
            reference: &f.reference,
            destination: &destination,
        },
        redirect_url: redirect_url.as_deref(),
        web_hook_url: &web_hook_url,
        validity: f.open_secs,
        payment_type: "debit",
    };
    let created = match monobank::create_invoice(&mono.api_url, mono.token.expose(), &invoice).await
    {
        Ok(created) => created,
        Err(monobank::ApiCallError::Transient(why)) => return Err(LinkFailure::Retry(why)),
        Err(e @ monobank::ApiCallError::Refused(_)) => {
            return Err(LinkFailure::Permanent(e.to_string()));
        }
    };
    tracing::info!(order_reference = %f.reference, invoice_id = %created.invoice_id,
        "Monobank invoice made");
    let made = monobank_invoices::Made {
        invoice_id: &created.invoice_id,
        order_id,
        reference: &f.reference,
        amount_minor: f.amount_minor,
        page_url: &created.page_url,
        validity_secs: f.open_secs,
    };
    let page =
        monobank_invoices::hand_out(db, &made, bot::MIN_CARD_PAGE_SECS, config.reconcile_after)
            .await
            .map_err(db_failed)?;
    Ok(Some(page))
}
