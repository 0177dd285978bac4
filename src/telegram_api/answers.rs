//! The objects the Bot API answers with that the service reads: a join link and the bot's Stars
//! transactions.

use serde::Deserialize;

/// `ChatInviteLink` (only what we use).
#[derive(Debug, Clone, Deserialize)]
pub struct ChatInviteLink {
    pub invite_link: String,
}

/// `StarTransactions`.
#[derive(Debug, Clone, Deserialize)]
pub struct StarTransactions {
    #[serde(default)]
    pub transactions: Vec<StarTransaction>,
}

/// `StarTransaction`: incoming ones have a `source`, outgoing ones (refunds, withdrawals) a
/// `receiver`. For a user's payment `id` is its `telegram_payment_charge_id`; a refund carries
/// the id of the payment it refunds.
#[derive(Debug, Clone, Deserialize)]
pub struct StarTransaction {
    pub id: String,
    pub amount: i64,
    /// Unix time.
    pub date: i64,
    #[serde(default)]
    pub source: Option<TransactionPartner>,
    #[serde(default)]
    pub receiver: Option<TransactionPartner>,
}

/// `TransactionPartner` (the `user` variant's fields; other variants leave them empty).
#[derive(Debug, Clone, Deserialize)]
pub struct TransactionPartner {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub transaction_type: Option<String>,
    #[serde(default)]
    pub user: Option<PartnerUser>,
    #[serde(default)]
    pub invoice_payload: Option<String>,
    /// `TransactionPartnerUser.affiliate`: the affiliate of one of Telegram's affiliate programs
    /// that received a commission via this transaction (invoice and paid-media payments only).
    #[serde(default)]
    pub affiliate: Option<AffiliateInfo>,
}

/// `AffiliateInfo`: who received a commission from a transaction, and how much. Telegram's own
/// affiliate programs, not ours: the commission is taken from what the bot receives.
#[derive(Debug, Clone, Deserialize)]
pub struct AffiliateInfo {
    /// The bot or user that received the commission, if one did.
    #[serde(default)]
    pub affiliate_user: Option<PartnerUser>,
    /// The chat that received the commission, if one did (only its id is read).
    #[serde(default)]
    pub affiliate_chat: Option<PartnerChat>,
    /// Stars the affiliate receives for each 1000 Stars the bot receives from referred users.
    pub commission_per_mille: i64,
    /// Whole Stars the affiliate received from this transaction, rounded towards 0; negative
    /// for refunds.
    pub amount: i64,
    /// 1/1 000 000 000 shares of a Star beyond `amount` (-999 999 999..=999 999 999).
    #[serde(default)]
    pub nanostar_amount: Option<i64>,
}

/// The chat of an `AffiliateInfo` (only its id is read).
#[derive(Debug, Clone, Deserialize)]
pub struct PartnerChat {
    pub id: i64,
}

/// The user of a `TransactionPartnerUser`.
#[derive(Debug, Clone, Deserialize)]
pub struct PartnerUser {
    pub id: i64,
}

impl StarTransaction {
    /// The paying user and the invoice payload, when this is an incoming payment from a user
    /// for one of our invoices.
    pub fn incoming_user_payment(&self) -> Option<(i64, &str)> {
        let s = self.source.as_ref()?;
        if s.kind != "user" || self.receiver.is_some() || self.amount <= 0 {
            return None;
        }
        if s.transaction_type
            .as_deref()
            .is_some_and(|t| t != "invoice_payment")
        {
            return None;
        }
        Some((s.user.as_ref()?.id, s.invoice_payload.as_deref()?))
    }

    /// The affiliate commission Telegram took from this incoming payment, when one of its
    /// affiliate programs brought the buyer: the whole Stars the affiliate received
    /// (`source.affiliate.amount`). `None` for anything but an incoming user payment with an
    /// affiliate, and for a negative amount (that belongs to a refund, never to a payment).
    pub fn affiliate_fee(&self) -> Option<i64> {
        self.incoming_user_payment()?;
        let amount = self.source.as_ref()?.affiliate.as_ref()?.amount;
        (amount >= 0).then_some(amount)
    }

    /// True when this is an outgoing transaction to `user_id` carrying `charge_id`: the refund
    /// of that payment. The id alone is not enough (incoming payments carry it too).
    pub fn is_refund_of(&self, charge_id: &str, user_id: i64) -> bool {
        self.id == charge_id && self.source.is_none() && self.refunded_user() == Some(user_id)
    }

    /// The user an outgoing transaction went to, when it went to a user (a refund).
    pub fn refunded_user(&self) -> Option<i64> {
        if self.source.is_some() {
            return None;
        }
        let r = self.receiver.as_ref()?;
        if r.kind != "user" {
            return None;
        }
        r.user.as_ref().map(|u| u.id)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn star_transactions_are_classified() {
        let incoming: StarTransaction = serde_json::from_value(json!({
            "id": "ch_1", "amount": 50, "date": 1,
            "source": {"type": "user", "transaction_type": "invoice_payment",
                       "user": {"id": 7, "is_bot": false, "first_name": "A"},
                       "invoice_payload": "ord_x"}
        }))
        .unwrap();
        assert_eq!(incoming.incoming_user_payment(), Some((7, "ord_x")));
        assert_eq!(incoming.affiliate_fee(), None, "no affiliate, no fee");
        assert!(
            !incoming.is_refund_of("ch_1", 7),
            "an id match alone is not a refund"
        );

        let refund: StarTransaction = serde_json::from_value(json!({
            "id": "ch_1", "amount": 50, "date": 2,
            "receiver": {"type": "user", "user": {"id": 7, "is_bot": false, "first_name": "A"}}
        }))
        .unwrap();
        assert!(refund.is_refund_of("ch_1", 7));
        assert!(!refund.is_refund_of("ch_1", 8), "a refund to someone else");
        assert!(!refund.is_refund_of("ch_2", 7));
        assert_eq!(refund.incoming_user_payment(), None);

        let withdrawal: StarTransaction = serde_json::from_value(json!({
            "id": "ch_1", "amount": 50, "date": 3,
            "receiver": {"type": "fragment"}
        }))
        .unwrap();
        assert!(!withdrawal.is_refund_of("ch_1", 7));
        assert_eq!(withdrawal.affiliate_fee(), None);
    }

    #[test]
    fn the_affiliate_fee_is_read_from_an_incoming_payment_only() {
        let with = |source: serde_json::Value| -> StarTransaction {
            serde_json::from_value(
                json!({"id": "ch_9", "amount": 500, "date": 1, "source": source}),
            )
            .unwrap()
        };
        let user = json!({"id": 7, "is_bot": false, "first_name": "A"});
        let paid = with(json!({
            "type": "user", "transaction_type": "invoice_payment", "user": user,
            "invoice_payload": "ord_x",
            "affiliate": {"affiliate_chat": {"id": -100123, "type": "channel", "title": "C"},
                          "commission_per_mille": 200, "amount": 100,
                          "nanostar_amount": 500_000_000}
        }));
        assert_eq!(paid.affiliate_fee(), Some(100));
        let by_user = with(json!({
            "type": "user", "transaction_type": "invoice_payment", "user": user,
            "invoice_payload": "ord_x",
            "affiliate": {"affiliate_user": {"id": 8, "is_bot": true, "first_name": "B"},
                          "commission_per_mille": 10, "amount": 0}
        }));
        assert_eq!(by_user.affiliate_fee(), Some(0));
        let negative = with(json!({
            "type": "user", "transaction_type": "invoice_payment", "user": user,
            "invoice_payload": "ord_x",
            "affiliate": {"commission_per_mille": 200, "amount": -100}
        }));
        assert_eq!(negative.affiliate_fee(), None);
        let paid_media = with(json!({
            "type": "user", "transaction_type": "paid_media_payment", "user": user,
            "affiliate": {"commission_per_mille": 200, "amount": 100}
        }));
        assert_eq!(paid_media.affiliate_fee(), None, "not one of our invoices");
    }
}
