//! Typed readings of the API's response bodies, for tests that assert on many fields.
//!
//! Each struct lists every field the API answers, so `deny_unknown_fields` plus the absence of
//! `#[serde(default)]` also checks the shape: a field added, renamed or dropped fails the read.
//! A nullable field uses `deserialize_with = "Option::deserialize"`: it may be null, never
//! missing. Timestamps stay strings (compared as the API wrote them; parse where a test needs
//! an instant).

#![allow(dead_code)] // every field is listed to check the shape; a test reads only some

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Reads `v` as a `T`, panicking with the body when it does not fit.
pub fn body_of<T: DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("not a {}: {e}: {v}", std::any::type_name::<T>()))
}

/// The list envelope: `{"items": [...], "next_after": <id or null>}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListBody<T> {
    pub items: Vec<T>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub next_after: Option<i64>,
}

/// A subscriber.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriberBody {
    pub id: i64,
    pub telegram_user_id: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub username: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub display_name: Option<String>,
    /// `en`, `uk`, `ru`, or null (the default).
    #[serde(deserialize_with = "Option::deserialize")]
    pub language: Option<String>,
    /// The buyer said `/stop`.
    pub marketing_opt_out: bool,
    /// False after Telegram answered 403 to a message.
    pub reachable: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// A membership.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MembershipBody {
    pub id: i64,
    pub subscriber_id: i64,
    pub channel_id: i64,
    pub status: String,
    pub expires_at: String,
    pub created_at: String,
    pub updated_at: String,
}

/// One entry of a membership's history.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventBody {
    pub id: i64,
    pub membership_id: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub from_status: Option<String>,
    pub to_status: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub expires_at_before: Option<String>,
    pub expires_at_after: String,
    pub cause: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub payment_id: Option<i64>,
    pub at: String,
}

/// An order.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderBody {
    pub id: i64,
    pub reference: String,
    pub subscriber_id: i64,
    pub channel_id: i64,
    pub amount_minor: i64,
    pub currency: String,
    pub status: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub hold_until: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub invoice_link: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub superseded_at: Option<String>,
    pub created_at: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub paid_at: Option<String>,
    pub plan_id: i64,
    pub list_price_minor: i64,
    pub discount_minor: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub promo_code: Option<String>,
}

/// A promo code.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromoCodeBody {
    pub id: i64,
    pub code: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub percent_off: Option<i32>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub amount_off_minor: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub currency: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub plan_ids: Option<Vec<i64>>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub max_redemptions: Option<i32>,
    pub per_buyer_limit: i32,
    #[serde(deserialize_with = "Option::deserialize")]
    pub expires_at: Option<String>,
    pub first_purchase_only: bool,
    pub active: bool,
    pub redemptions: i64,
    pub held: i64,
    pub created_at: String,
    pub updated_at: String,
}

/// A stored payment.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentBody {
    pub id: i64,
    pub gateway: String,
    pub external_id: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub order_reference: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub order_id: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub subscriber_id: Option<i64>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub channel_id: Option<i64>,
    pub amount_minor: i64,
    pub currency: String,
    pub affiliate_fee_minor: i64,
    pub paid_at: String,
    pub outcome: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub reason: Option<String>,
    pub created_at: String,
    /// Its fiscal receipt: in the staff view (`GET /api/payments`), not in a door's answer.
    #[serde(default)]
    pub receipt: Option<Value>,
}

/// A payment as `GET /api/payments/{id}` answers it: a [`PaymentBody`] and its `refund` (a
/// refund staff asked for, or null), which lists do not carry. Returns both.
pub fn payment_detail_of(v: &Value) -> (PaymentBody, Value) {
    let mut v = v.clone();
    let refund = v
        .as_object_mut()
        .and_then(|o| o.remove("refund"))
        .unwrap_or_else(|| panic!("a payment's detail has `refund`: {v}"));
    (body_of(&v), refund)
}

/// What the payment webhook answers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppliedBody {
    pub duplicate: bool,
    pub payment: PaymentBody,
    #[serde(deserialize_with = "Option::deserialize")]
    pub membership: Option<MembershipBody>,
}

/// An affiliate, as the API answers it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AffiliateBody {
    pub id: i64,
    pub name: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub subscriber_id: Option<i64>,
    pub code: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub link: Option<String>,
    pub active: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// A commission line, as the API answers it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommissionLineBody {
    pub id: i64,
    pub affiliate_id: i64,
    pub payment_id: i64,
    #[serde(deserialize_with = "Option::deserialize")]
    pub subscriber_id: Option<i64>,
    pub kind: String,
    pub amount_minor: i64,
    pub currency: String,
    pub percent: i32,
    pub base_minor: i64,
    pub status: String,
    pub payable_at: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub payout_id: Option<i64>,
    pub created_at: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub reversed_at: Option<String>,
}

/// A payout, as the API answers it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutBody {
    pub id: i64,
    pub affiliate_id: i64,
    pub currency: String,
    pub amount_minor: i64,
    pub lines: i32,
    pub created_at: String,
}

#[test]
fn a_body_missing_a_nullable_field_or_with_an_extra_one_is_refused() {
    let full = serde_json::json!({"id": 1, "telegram_user_id": 7, "username": null,
        "display_name": "Ann", "language": null, "marketing_opt_out": false, "reachable": true,
        "created_at": "2025-01-01T10:00:00Z",
        "updated_at": "2025-01-01T10:00:00Z"});
    let read: SubscriberBody = serde_json::from_value(full.clone()).unwrap();
    assert_eq!(read.username, None);
    let mut missing = full.clone();
    missing.as_object_mut().unwrap().remove("username");
    assert!(serde_json::from_value::<SubscriberBody>(missing).is_err());
    let mut extra = full;
    extra["plan"] = serde_json::json!("gold");
    assert!(serde_json::from_value::<SubscriberBody>(extra).is_err());
    let page = serde_json::json!({"items": []});
    assert!(serde_json::from_value::<ListBody<SubscriberBody>>(page).is_err());
}
