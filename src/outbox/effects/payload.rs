//! The payload of each effect kind, typed: what a writer puts in `effects.payload` and what the
//! worker reads back. The JSON is the row's (`GET /api/effects` shows it as stored); these types
//! only give it a shape per [`Kind`]. Rows written in SQL get theirs from the fragments in
//! [`super`] (`expiry_payload_sql!`, `deleted_revoke_payload_sql!`), which spell the same
//! fields; a test round-trips every writer's row through [`Payload::parse`].
//!
//! The worker adds `note` (why it skipped, or what an "already done" answer said) when it
//! records an effect done; that annotation is the staff's, not part of any kind's payload, and
//! parsing ignores it.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::Kind;
use crate::common::expiry;

/// An expiry as the SQL fragment `expiry_text_sql!` spells it: an instant in UTC with six
/// fractional digits and a `Z` (chrono's own form drops a zero fraction, and PostgreSQL's JSON
/// form uses the session's offset), or `infinity` (lifetime). Reading accepts any RFC 3339
/// form.
fn instant<S: Serializer>(t: &expiry::Expiry, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_payload_text())
}

/// [`instant`] of an expiry that may be absent (serialized only when present).
fn some_instant<S: Serializer>(t: &Option<expiry::Expiry>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => instant(t, s),
        None => s.serialize_none(),
    }
}

/// Where a revoke or an unban that no membership change enqueued comes from: Telegram told us
/// a user joined the chat without live access (`chat_member`), or an audit of the member list
/// found the row wrong and was asked to fix it (`audit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Found {
    ChatMember,
    Audit,
}

/// The payload of an unban: what found the live member banned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unban {
    pub found: Found,
}

/// The payload of a grant, renewal receipt, grace notice or reminder: the `expires_at` of the
/// membership when the effect was enqueued (UTC, microseconds: `2026-01-31T12:00:00.000000Z`;
/// `infinity` for lifetime access). A reminder or grace notice whose membership has another
/// expiry by the time it is performed is skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expiry {
    #[serde(serialize_with = "instant")]
    pub expires_at: expiry::Expiry,
}

/// The payload of a revoke: the expiry it was enqueued for, and for the revoke of a deleted
/// membership (whose row, and so the effect's `membership_id`, is gone) the membership's id and
/// `deleted: true`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoke {
    /// The expiry it was enqueued for; absent for a revoke no membership change enqueued
    /// (`found`).
    #[serde(
        default,
        serialize_with = "some_instant",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<expiry::Expiry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership_id: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// A user found in the chat without live access (a `chat_member` update, an audit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<Found>,
}

/// The payload of a Stars refund: the charge being refunded, and `verify: true` once an attempt
/// timed out (look for the refund in `getStarTransactions` before calling again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    pub charge_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify: bool,
}

/// The payload of a join request's decision: the request's `date`, if Telegram sent one, and
/// for a request at a Mini App door its `join_requests` row (answered through its query while
/// that is valid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinRequest {
    pub request_date: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_request_id: Option<i64>,
}

/// The payload of a bot message: its text and its buttons, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BotMessage {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_markup: Option<Value>,
}

/// The payload of an invoice: empty (the order names everything), or the crypto asset of a
/// Crypto Pay invoice the buyer chose for the order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invoice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset: Option<String>,
}

/// The payload of a subscription cancel: the Stars subscription's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionCancel {
    pub subscription_id: i64,
}

/// The payload of a message to a member: its `messages` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberMessage {
    pub message_id: i64,
}

/// The payload of a buyer-referrer's reward: its `referral_rewards` row, granted or taken back
/// as that row now says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferralReward {
    pub reward_id: i64,
}

/// The payload of a fiscal receipt: its `fiscal_receipts` row, issued as that row now says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FiscalReceipt {
    pub fiscal_receipt_id: i64,
}

/// The payload of a refund staff asked for: `verify: true` once an attempt's outcome is
/// unknown (a Stars refund that timed out: look for it in `getStarTransactions` before calling
/// again). What to refund is the payment's (`effects.payment_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayRefund {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify: bool,
}

/// An effect's payload, by kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Grant(Expiry),
    RenewalReceipt(Expiry),
    Revoke(Revoke),
    Reminder(Expiry),
    GraceNotice(Expiry),
    Refund(Refund),
    JoinApprove(JoinRequest),
    JoinDecline(JoinRequest),
    BotMessage(BotMessage),
    Invoice(Invoice),
    SubscriptionCancel(SubscriptionCancel),
    Unban(Unban),
    MemberMessage(MemberMessage),
    ReferralReward(ReferralReward),
    FiscalReceipt(FiscalReceipt),
    GatewayRefund(GatewayRefund),
}

impl Payload {
    /// The kind whose payload this is.
    pub fn kind(&self) -> Kind {
        match self {
            Payload::Grant(_) => Kind::Grant,
            Payload::RenewalReceipt(_) => Kind::RenewalReceipt,
            Payload::Revoke(_) => Kind::Revoke,
            Payload::Reminder(_) => Kind::Reminder,
            Payload::GraceNotice(_) => Kind::GraceNotice,
            Payload::Refund(_) => Kind::Refund,
            Payload::JoinApprove(_) => Kind::JoinApprove,
            Payload::JoinDecline(_) => Kind::JoinDecline,
            Payload::BotMessage(_) => Kind::BotMessage,
            Payload::Invoice(_) => Kind::Invoice,
            Payload::SubscriptionCancel(_) => Kind::SubscriptionCancel,
            Payload::Unban(_) => Kind::Unban,
            Payload::MemberMessage(_) => Kind::MemberMessage,
            Payload::ReferralReward(_) => Kind::ReferralReward,
            Payload::FiscalReceipt(_) => Kind::FiscalReceipt,
            Payload::GatewayRefund(_) => Kind::GatewayRefund,
        }
    }

    /// Reads the stored payload of an effect of `kind`.
    pub fn parse(kind: Kind, json: &Value) -> Result<Payload, serde_json::Error> {
        fn read<T: for<'de> Deserialize<'de>>(json: &Value) -> Result<T, serde_json::Error> {
            T::deserialize(json)
        }
        Ok(match kind {
            Kind::Grant => Payload::Grant(read(json)?),
            Kind::RenewalReceipt => Payload::RenewalReceipt(read(json)?),
            Kind::Revoke => Payload::Revoke(read(json)?),
            Kind::Reminder => Payload::Reminder(read(json)?),
            Kind::GraceNotice => Payload::GraceNotice(read(json)?),
            Kind::Refund => Payload::Refund(read(json)?),
            Kind::JoinApprove => Payload::JoinApprove(read(json)?),
            Kind::JoinDecline => Payload::JoinDecline(read(json)?),
            Kind::BotMessage => Payload::BotMessage(read(json)?),
            Kind::Invoice => Payload::Invoice(read(json)?),
            Kind::SubscriptionCancel => Payload::SubscriptionCancel(read(json)?),
            Kind::Unban => Payload::Unban(read(json)?),
            Kind::MemberMessage => Payload::MemberMessage(read(json)?),
            Kind::ReferralReward => Payload::ReferralReward(read(json)?),
            Kind::FiscalReceipt => Payload::FiscalReceipt(read(json)?),
            Kind::GatewayRefund => Payload::GatewayRefund(read(json)?),
        })
    }

    /// The JSON stored in `effects.payload`.
    pub fn to_json(&self) -> Value {
        let json = match self {
            Payload::Grant(p)
            | Payload::RenewalReceipt(p)
            | Payload::Reminder(p)
            | Payload::GraceNotice(p) => serde_json::to_value(p),
            Payload::Revoke(p) => serde_json::to_value(p),
            Payload::Refund(p) => serde_json::to_value(p),
            Payload::JoinApprove(p) | Payload::JoinDecline(p) => serde_json::to_value(p),
            Payload::BotMessage(p) => serde_json::to_value(p),
            Payload::Invoice(p) => serde_json::to_value(p),
            Payload::SubscriptionCancel(p) => serde_json::to_value(p),
            Payload::Unban(p) => serde_json::to_value(p),
            Payload::MemberMessage(p) => serde_json::to_value(p),
            Payload::ReferralReward(p) => serde_json::to_value(p),
            Payload::FiscalReceipt(p) => serde_json::to_value(p),
            Payload::GatewayRefund(p) => serde_json::to_value(p),
        };
        json.expect("a payload serializes to JSON")
    }

    /// The membership's `expires_at` the effect was enqueued for: every membership effect's.
    pub fn expires_at(&self) -> Option<expiry::Expiry> {
        match self {
            Payload::Grant(p)
            | Payload::RenewalReceipt(p)
            | Payload::Reminder(p)
            | Payload::GraceNotice(p) => Some(p.expires_at),
            Payload::Revoke(p) => p.expires_at,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_kind_has_its_payload() {
        let t = "2026-01-31T12:00:00.000001Z";
        for kind in Kind::ALL {
            let json = match kind {
                Kind::Grant | Kind::RenewalReceipt | Kind::Reminder | Kind::GraceNotice => {
                    json!({"expires_at": t})
                }
                Kind::Revoke => json!({"membership_id": 4, "deleted": true, "expires_at": t}),
                Kind::Refund => json!({"charge_id": "stxA"}),
                Kind::JoinApprove | Kind::JoinDecline => json!({"request_date": 1700000000}),
                Kind::BotMessage => json!({"text": "hi", "reply_markup": {"inline_keyboard": []}}),
                Kind::Invoice => json!({}),
                Kind::SubscriptionCancel => json!({"subscription_id": 3}),
                Kind::Unban => json!({"found": "audit"}),
                Kind::MemberMessage => json!({"message_id": 9}),
                Kind::ReferralReward => json!({"reward_id": 5}),
                Kind::FiscalReceipt => json!({"fiscal_receipt_id": 6}),
                Kind::GatewayRefund => json!({"verify": true}),
            };
            let p = Payload::parse(kind, &json).unwrap();
            assert_eq!(p.kind(), kind);
            assert_eq!(p.to_json(), json, "{kind:?}");
        }
    }

    #[test]
    fn the_worker_s_annotations_are_read_or_ignored() {
        let p = Payload::parse(
            Kind::Refund,
            &json!({"charge_id": "stxA", "verify": true, "note": "x"}),
        )
        .unwrap();
        assert_eq!(
            p,
            Payload::Refund(Refund {
                charge_id: Some("stxA".into()),
                verify: true
            })
        );
        let p = Payload::parse(
            Kind::Reminder,
            &json!({"expires_at": "2026-01-31T12:00:00+00:00", "note": "skipped"}),
        )
        .unwrap();
        assert_eq!(
            p.expires_at(),
            Some(expiry::Expiry::At("2026-01-31T12:00:00Z".parse().unwrap()))
        );
        assert_eq!(
            p.to_json(),
            json!({"expires_at": "2026-01-31T12:00:00.000000Z"}),
            "six digits, Z, as the SQL spells it"
        );
        assert!(Payload::parse(Kind::Reminder, &json!({})).is_err());
        // Lifetime access: `infinity`, as the SQL spells it.
        let forever = json!({"expires_at": "infinity"});
        let p = Payload::parse(Kind::Grant, &forever).unwrap();
        assert_eq!(p.expires_at(), Some(expiry::Expiry::Never));
        assert_eq!(p.to_json(), forever);
        assert!(Payload::parse(Kind::Grant, &json!({"expires_at": null})).is_err());
        assert!(Payload::parse(Kind::BotMessage, &json!({"reply_markup": null})).is_err());
    }
}
