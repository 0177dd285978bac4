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
    }
}
