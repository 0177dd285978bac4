//! The words the domain shares, below both the payment core (`crate::payments`) and what a buyer
//! reads (`crate::present`), so neither depends on the other for them: [`Reason`], the one
//! refusal vocabulary of payments and pre-checkouts, and [`Gateway`], who took a payment's
//! money (compared as a value, never as a spelling). Every text a buyer reads for a reason is
//! an exhaustive `match` over it in `crate::present::texts`, so a new reason cannot ship
//! without its words.
//!
//! Plain values only: no I/O, no SQL. Both map to the database's `text` columns: [`Reason`]
//! through [`crate::text_enum!`] like every other state enum, [`Gateway`] by hand (a door-1
//! gateway's name is open-ended).

use std::{borrow::Cow, fmt};

use bytes::BytesMut;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

crate::text_enum! {
    /// Why a payment was not applied (the payments' `reason` column), or why a Telegram
    /// pre-checkout was refused (`pre_checkout_decisions.reason`): one vocabulary, so staff read
    /// the same code for a refused pre-checkout and for a payment that arrives anyway. Each code
    /// has the text a buyer reads beside it (`present::texts::pre_checkout_refusal`).
    pub enum Reason {
        UnknownOrder => "unknown_order",
        OrderCancelled => "order_cancelled",
        CurrencyMismatch => "currency_mismatch",
        AmountMismatch => "amount_mismatch",
        PayerMismatch => "payer_mismatch",
        AlreadyPaid => "already_paid",
        ChannelInactive => "channel_inactive",
        HoldExpired => "hold_expired",
        NoSeat => "no_seat",
        /// A Stars charge we never recorded whose refund Telegram lists too (refunded outside
        /// subgate): kept as `refunded` by the Stars reconcile, granting nothing. Never a
        /// pre-checkout refusal.
        RefundedElsewhere => "refunded_elsewhere",
        /// A renewal charge of an order that started no subscription (or is not paid). Never a
        /// pre-checkout refusal.
        UnknownSubscription => "unknown_subscription",
        /// A renewal charge of a subscription staff or the buyer cancelled. Never a
        /// pre-checkout refusal.
        SubscriptionCancelled => "subscription_cancelled",
        /// A pre-checkout refused by the buyer's hold rules (a cooldown after an unpaid hold,
        /// or the daily number of holds). Never a payment reason.
        HoldLimited => "hold_limited",
        /// The order's promo code use lapsed and the code (or the buyer's share of it) filled
        /// up meanwhile: the discounted price is gone. A payment is kept for
        /// review (every gateway, Stars too), never applied past the code's limit.
        PromoExhausted => "promo_exhausted",
        /// The buyer already has live lifetime access to every channel the order buys: the
        /// payment would buy nothing (refunded for Stars, like a double payment), and a
        /// pre-checkout is refused.
        AlreadyLifetime => "already_lifetime",
        /// An applied payment the gateway later reported `Refunded` or `Voided`: its outcome
        /// becomes `refunded` and what it bought is taken back. Never a pre-checkout refusal.
        RefundedAtGateway => "refunded_at_gateway",
        /// A refund the gateway reported before the payment it refunds (or while that payment
        /// waited for its locks): recorded as that payment, `refunded`, so its later delivery
        /// is a duplicate that grants nothing. Never a pre-checkout refusal.
        RefundedBeforePayment => "refunded_before_payment",
        /// An applied payment whose charge the buyer disputed with their bank (Stripe
        /// `charge.dispute.created`): its outcome becomes `disputed` and what it bought is
        /// taken back as for a refund. Never a pre-checkout refusal.
        DisputedAtGateway => "disputed_at_gateway",
        /// A disputed payment whose dispute was decided for us (Stripe `charge.dispute.closed`,
        /// `won`): the money stays, so it waits for staff (`needs_review`) to grant again what
        /// the dispute took back. Never a pre-checkout refusal.
        DisputeWon => "dispute_won",
        /// An applied or in-review payment staff refunded (`POST /api/payments/{id}/refund`)
        /// once its gateway confirmed the refund: what it bought was taken back as for a
        /// refund at the gateway. Never a pre-checkout refusal.
        RefundedByStaff => "refunded_by_staff",
    }
}

impl Reason {
    /// Whether a pre-checkout can be refused for this reason (the codes the
    /// `pre_checkout_decisions` table accepts).
    pub fn is_pre_checkout_refusal(self) -> bool {
        !matches!(
            self,
            Reason::RefundedElsewhere
                | Reason::UnknownSubscription
                | Reason::SubscriptionCancelled
                | Reason::RefundedAtGateway
                | Reason::RefundedBeforePayment
                | Reason::DisputedAtGateway
                | Reason::DisputeWon
                | Reason::RefundedByStaff
        )
    }

    /// Whether a stored payment can carry this reason (the codes the `payments` table accepts).
    pub fn is_payment_reason(self) -> bool {
        self != Reason::HoldLimited
    }
}

/// Who took a payment's money: the `gateway` column of `payments` (`text`), the `gateway` of a
/// payment in JSON (a plain string), and the first half of a payment's dedupe key (gateway,
/// external id). The gateways with doors of their own are variants; any other name is a
/// door-1 card gateway's.
///
/// Build one from a name with [`Gateway::named`] (or `From<&str>`), which never wraps a reserved
/// name in [`Gateway::Standard`], so comparing two gateways compares their names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Gateway {
    /// Telegram Stars (door 3 and the Stars reconcile): the only payments we refund ourselves.
    TelegramStars,
    /// WayForPay's card payments (door 2).
    WayForPay,
    /// Stripe's Checkout payments (door 4).
    Stripe,
    /// Monobank acquiring's invoices (door 5).
    Monobank,
    /// Crypto Pay's invoices (@CryptoBot, door 6): paid in a crypto asset.
    CryptoPay,
    /// A card gateway of door 1, by the name it signs its events with (`[a-z0-9_-]{1,32}`,
    /// never one of the names above).
    Standard(String),
}

impl Gateway {
    /// The spelling of [`Gateway::TelegramStars`].
    pub const TELEGRAM_STARS: &'static str = "telegram_stars";
    /// The spelling of [`Gateway::WayForPay`].
    pub const WAYFORPAY: &'static str = "wayforpay";
    /// The spelling of [`Gateway::Stripe`].
    pub const STRIPE: &'static str = "stripe";
    /// The spelling of [`Gateway::Monobank`].
    pub const MONOBANK: &'static str = "monobank";
    /// The spelling of [`Gateway::CryptoPay`].
    pub const CRYPTOPAY: &'static str = "cryptopay";

    /// The gateway of this name: one with a door of its own, or a door-1 gateway.
    pub fn named(name: &str) -> Gateway {
        match name {
            Gateway::TELEGRAM_STARS => Gateway::TelegramStars,
            Gateway::WAYFORPAY => Gateway::WayForPay,
            Gateway::STRIPE => Gateway::Stripe,
            Gateway::MONOBANK => Gateway::Monobank,
            Gateway::CRYPTOPAY => Gateway::CryptoPay,
            other => Gateway::Standard(other.to_string()),
        }
    }

    /// The name, as stored and shown.
    pub fn as_str(&self) -> &str {
        match self {
            Gateway::TelegramStars => Gateway::TELEGRAM_STARS,
            Gateway::WayForPay => Gateway::WAYFORPAY,
            Gateway::Stripe => Gateway::STRIPE,
            Gateway::Monobank => Gateway::MONOBANK,
            Gateway::CryptoPay => Gateway::CRYPTOPAY,
            Gateway::Standard(name) => name,
        }
    }

    /// Whether this name belongs to a gateway with a door of its own, so door 1 refuses it.
    pub fn has_own_door(&self) -> bool {
        match self {
            Gateway::TelegramStars
            | Gateway::WayForPay
            | Gateway::Stripe
            | Gateway::Monobank
            | Gateway::CryptoPay => true,
            Gateway::Standard(_) => false,
        }
    }
}

impl From<&str> for Gateway {
    fn from(name: &str) -> Gateway {
        Gateway::named(name)
    }
}

impl From<String> for Gateway {
    fn from(name: String) -> Gateway {
        match Gateway::named(&name) {
            Gateway::Standard(_) => Gateway::Standard(name),
            own => own,
        }
    }
}

/// Compares with a name, as a client reads it (`gateway == "acme"`).
impl PartialEq<&str> for Gateway {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Gateway {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Gateway {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
        Ok(Gateway::named(&name))
    }
}

impl ToSql for Gateway {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        <&str as ToSql>::to_sql(&self.as_str(), ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Gateway {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Gateway::named(<&str as FromSql>::from_sql(ty, raw)?))
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_is_its_name_everywhere() {
        for (name, gateway) in [
            ("telegram_stars", Gateway::TelegramStars),
            ("wayforpay", Gateway::WayForPay),
            ("stripe", Gateway::Stripe),
            ("monobank", Gateway::Monobank),
            ("cryptopay", Gateway::CryptoPay),
            ("acme", Gateway::Standard("acme".into())),
        ] {
            assert_eq!(Gateway::named(name), gateway);
            assert_eq!(Gateway::from(name.to_string()), gateway);
            assert_eq!(gateway.as_str(), name);
            assert_eq!(gateway.to_string(), name);
            let json = serde_json::to_value(&gateway).unwrap();
            assert_eq!(json, serde_json::json!(name));
            assert_eq!(serde_json::from_value::<Gateway>(json).unwrap(), gateway);
        }
        assert!(Gateway::TelegramStars.has_own_door());
        assert!(Gateway::WayForPay.has_own_door());
        assert!(Gateway::Stripe.has_own_door());
        assert!(Gateway::Monobank.has_own_door());
        assert!(Gateway::CryptoPay.has_own_door());
        assert!(!Gateway::named("acme").has_own_door());
    }
}
