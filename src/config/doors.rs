//! Which payment doors are live (`GET /api/overview`'s `doors`), read off the configuration: a
//! door is live when its secrets are set (otherwise it answers 503 and sells nothing); fiscal
//! receipts are on when Checkbox's three settings are.

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
            monobank: self.monobank.is_some(),
            cryptopay: self.cryptopay.is_some(),
            receipts: self.checkbox.is_some(),
        }
    }
}
