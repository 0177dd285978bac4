//! The payment doors' settings: the Standard Webhooks keys, WayForPay, Stripe, Monobank and
//! Crypto Pay
//! credentials and API addresses, and when a card order is asked about.

use std::time::Duration;

use super::{
    ConfigError, Secret,
    secret::long_enough,
    vars::{Vars, err},
    webhook_keys::{self, WebhookKey},
};

/// WayForPay merchant credentials (door 2).
#[derive(Debug, Clone)]
pub struct WayForPayConfig {
    pub merchant_account: String,
    pub secret_key: Secret,
}

/// Stripe credentials (door 4 and the bot's Checkout Sessions).
#[derive(Debug, Clone)]
pub struct StripeConfig {
    /// `STRIPE_SECRET_KEY`.
    pub secret_key: Secret,
    /// `STRIPE_WEBHOOK_SECRET`: the key of `Stripe-Signature`, the whole `whsec_…` text.
    pub webhook_secret: Secret,
    /// `STRIPE_API_URL`, without a trailing slash.
    pub api_url: String,
}

/// Monobank acquiring (door 5 and the bot's invoices of UAH plans).
#[derive(Debug, Clone)]
pub struct MonobankConfig {
    /// `MONOBANK_TOKEN`: the `X-Token` of every API call.
    pub token: Secret,
    /// `MONOBANK_API_URL`, without a trailing slash.
    pub api_url: String,
}

/// Crypto Pay credentials (door 6 and the bot's crypto invoices).
#[derive(Debug, Clone)]
pub struct CryptoPayConfig {
    /// `CRYPTOPAY_TOKEN`: sent as `Crypto-Pay-API-Token`; its SHA-256 keys the webhook's
    /// `crypto-pay-api-signature`.
    pub token: Secret,
    /// `CRYPTOPAY_API_URL`, without a trailing slash (methods are `{api_url}/{method}`).
    pub api_url: String,
}

/// `WEBHOOK_SECRET`, `WEBHOOK_SECRETS` (door 1); `WAYFORPAY_MERCHANT_ACCOUNT`,
/// `WAYFORPAY_SECRET_KEY` (door 2), `WAYFORPAY_DOMAIN` (the bot's purchase links),
/// `WAYFORPAY_API_URL` and `RECONCILE_AFTER_SECS` (the `CHECK_STATUS` pass);
/// `STRIPE_SECRET_KEY`, `STRIPE_WEBHOOK_SECRET`, `STRIPE_API_URL` (door 4); `MONOBANK_TOKEN`,
/// `MONOBANK_API_URL` (door 5); `CRYPTOPAY_TOKEN`, `CRYPTOPAY_API_URL` (door 6). A door without
/// its secret stays closed.
pub(super) struct PaymentDoors {
    pub(super) webhook_keys: Vec<WebhookKey>,
    pub(super) wayforpay: Option<WayForPayConfig>,
    pub(super) wayforpay_domain: Option<String>,
    pub(super) wayforpay_api_url: String,
    pub(super) reconcile_after: Duration,
    pub(super) stripe: Option<StripeConfig>,
    pub(super) monobank: Option<MonobankConfig>,
    pub(super) cryptopay: Option<CryptoPayConfig>,
}

impl PaymentDoors {
    pub(super) fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let mut webhook_keys = Vec::new();
        if let Some(v) = vars.get("WEBHOOK_SECRET") {
            let key = WebhookKey::parse(v.trim())
                .ok()
                .filter(|_| strong_webhook_key(v.trim()))
                .ok_or_else(|| {
                    err("WEBHOOK_SECRET must be whsec_ followed by base64 of at least 24 bytes")
                })?;
            webhook_keys.push(key);
        }
        if let Some(v) = vars.get("WEBHOOK_SECRETS") {
            let keys = webhook_keys::parse_keys(&v)
                .ok()
                .filter(|_| {
                    v.split(|c: char| c.is_whitespace() || c == ',')
                        .filter(|part| !part.is_empty())
                        .all(strong_webhook_key)
                })
                .ok_or_else(|| {
                    err(
                        "WEBHOOK_SECRETS must list whsec_<base64> keys of at least 24 bytes, \
                         separated by spaces or commas",
                    )
                })?;
            webhook_keys.extend(keys);
        }

        let wayforpay = match (
            vars.get("WAYFORPAY_MERCHANT_ACCOUNT"),
            vars.get("WAYFORPAY_SECRET_KEY"),
        ) {
            (Some(merchant_account), Some(key)) => Some(WayForPayConfig {
                merchant_account,
                secret_key: long_enough("WAYFORPAY_SECRET_KEY", key, 16)?,
            }),
            (None, None) => None,
            (Some(_), None) => return Err(err("WAYFORPAY_SECRET_KEY is not set")),
            (None, Some(_)) => return Err(err("WAYFORPAY_MERCHANT_ACCOUNT is not set")),
        };
        let wayforpay_domain = vars
            .checked(
                "WAYFORPAY_DOMAIN",
                |d| {
                    let d = d.trim();
                    (1..=253).contains(&d.len())
                        && d.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
                },
                "WAYFORPAY_DOMAIN must be a domain name, e.g. pay.example.com",
            )?
            .map(|d| d.trim().to_ascii_lowercase());
        let wayforpay_api_url = vars
            .get("WAYFORPAY_API_URL")
            .unwrap_or_else(|| "https://api.wayforpay.com/api".to_string())
            .trim_end_matches('/')
            .to_string();
        if url::Url::parse(&wayforpay_api_url).is_err() {
            return Err(err("WAYFORPAY_API_URL must be an absolute URL"));
        }
        let stripe_api_url = vars
            .get("STRIPE_API_URL")
            .unwrap_or_else(|| "https://api.stripe.com".to_string())
            .trim_end_matches('/')
            .to_string();
        if url::Url::parse(&stripe_api_url).is_err() {
            return Err(err("STRIPE_API_URL must be an absolute URL"));
        }
        let stripe = match (
            vars.get("STRIPE_SECRET_KEY"),
            vars.get("STRIPE_WEBHOOK_SECRET"),
        ) {
            (Some(key), Some(webhook_secret)) => {
                let key = key.trim().to_string();
                if !(key.starts_with("sk_") || key.starts_with("rk_")) || key.len() < 16 {
                    return Err(err(
                        "STRIPE_SECRET_KEY must be a Stripe secret key (sk_… or rk_…)",
                    ));
                }
                let webhook_secret = webhook_secret.trim().to_string();
                if !webhook_secret.starts_with("whsec_") || webhook_secret.len() < 16 {
                    return Err(err(
                        "STRIPE_WEBHOOK_SECRET must be a Stripe signing secret (whsec_…)",
                    ));
                }
                Some(StripeConfig {
                    secret_key: Secret(key),
                    webhook_secret: Secret(webhook_secret),
                    api_url: stripe_api_url,
                })
            }
            (None, None) => None,
            (Some(_), None) => return Err(err("STRIPE_WEBHOOK_SECRET is not set")),
            (None, Some(_)) => return Err(err("STRIPE_SECRET_KEY is not set")),
        };
        let monobank_api_url = vars
            .get("MONOBANK_API_URL")
            .unwrap_or_else(|| "https://api.monobank.ua".to_string())
            .trim_end_matches('/')
            .to_string();
        if url::Url::parse(&monobank_api_url).is_err() {
            return Err(err("MONOBANK_API_URL must be an absolute URL"));
        }
        let monobank = match vars.get("MONOBANK_TOKEN") {
            Some(token) => {
                let token = token.trim().to_string();
                // A token is sent as a header value: visible ASCII only.
                if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(err(
                        "MONOBANK_TOKEN must be a Monobank acquiring token (at least 16 visible \
                         ASCII characters)",
                    ));
                }
                Some(MonobankConfig {
                    token: Secret(token),
                    api_url: monobank_api_url,
                })
            }
            None => None,
        };
        let cryptopay_api_url = vars
            .get("CRYPTOPAY_API_URL")
            .unwrap_or_else(|| "https://pay.crypt.bot/api".to_string())
            .trim_end_matches('/')
            .to_string();
        if url::Url::parse(&cryptopay_api_url).is_err() {
            return Err(err("CRYPTOPAY_API_URL must be an absolute URL"));
        }
        let cryptopay = match vars.get("CRYPTOPAY_TOKEN") {
            Some(token) => {
                // An app token of @CryptoBot is `<app id>:<secret>`.
                let token = token.trim().to_string();
                let well_formed = token.split_once(':').is_some_and(|(id, secret)| {
                    !id.is_empty()
                        && id.bytes().all(|b| b.is_ascii_digit())
                        && secret.len() >= 16
                        && secret
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                });
                if !well_formed {
                    return Err(err(
                        "CRYPTOPAY_TOKEN must be a Crypto Pay app token (<app id>:<secret>)",
                    ));
                }
                Some(CryptoPayConfig {
                    token: Secret(token),
                    api_url: cryptopay_api_url,
                })
            }
            None => None,
        };
        Ok(PaymentDoors {
            stripe,
            monobank,
            cryptopay,
            webhook_keys,
            wayforpay,
            wayforpay_domain,
            wayforpay_api_url,
            reconcile_after: Duration::from_secs(vars.int(
                "RECONCILE_AFTER_SECS",
                600,
                1,
                86_400,
            )?),
        })
    }
}

/// Standard Webhooks secrets are 24 to 64 random bytes; a shorter key is too weak to accept.
fn strong_webhook_key(secret: &str) -> bool {
    use base64::{Engine, engine::general_purpose::STANDARD};
    secret
        .strip_prefix("whsec_")
        .and_then(|b64| STANDARD.decode(b64).ok())
        .is_some_and(|key| key.len() >= 24)
}
