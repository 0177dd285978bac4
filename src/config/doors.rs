//! Which payment doors are live (`GET /api/overview`'s `doors`), read off the configuration: a
//! door is live when its secrets are set (otherwise it answers 503 and sells nothing). Door 5
//! (Monobank), door 6 (Crypto Pay) and fiscal receipts (Checkbox) have no settings in this
//! tree yet; each is one function below, answering `false`, which reads its settings once they
//! exist.

use serde::Serialize;

use super::Config;

/// Per payment door (and Checkbox's receipts), whether it is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Doors {
    /// Door 1, the signed webhook (`WEBHOOK_SECRET` or `WEBHOOK_SECRETS`).
    pub payment: bool,
    /// Door 2, WayForPay (`WAYFORPAY_MERCHANT_ACCOUNT` and `WAYFORPAY_SECRET_KEY`).
    pub wayforpay: bool,
    /// Door 3, Telegram's updates and Stars (`TELEGRAM_WEBHOOK_SECRET`).
    pub telegram: bool,
    /// Door 4, Stripe (`STRIPE_SECRET_KEY` and `STRIPE_WEBHOOK_SECRET`).
    pub stripe: bool,
    /// Door 5, Monobank (`MONOBANK_TOKEN`).
    pub monobank: bool,
    /// Door 6, Crypto Pay (`CRYPTOPAY_TOKEN`).
    pub cryptopay: bool,
    /// Fiscal receipts through Checkbox (`CHECKBOX_LICENSE_KEY`, `CHECKBOX_LOGIN`,
    /// `CHECKBOX_PASSWORD`).
    pub receipts: bool,
}

impl Config {
    /// Which doors this configuration opens.
    pub fn doors(&self) -> Doors {
        Doors {
            payment: !self.webhook_keys.is_empty(),
            wayforpay: self.wayforpay.is_some(),
            telegram: self.telegram_webhook_secret.is_some(),
            stripe: self.stripe.is_some(),
            monobank: monobank_configured(self),
            cryptopay: cryptopay_configured(self),
            receipts: receipts_configured(self),
        }
    }
}

/// Door 5: `MONOBANK_TOKEN` is not read in this tree yet.
fn monobank_configured(_: &Config) -> bool {
    false
}

/// Door 6: `CRYPTOPAY_TOKEN` is not read in this tree yet.
fn cryptopay_configured(_: &Config) -> bool {
    false
}

/// Checkbox: `CHECKBOX_LICENSE_KEY`, `CHECKBOX_LOGIN` and `CHECKBOX_PASSWORD` are not read in
/// this tree yet.
fn receipts_configured(_: &Config) -> bool {
    false
}
