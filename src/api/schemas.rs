//! The bodies the handlers and the payment doors answer with, and the error body every route
//! shares ([`Problem`]): schemas of the OpenAPI document ([`super::openapi`]) that the handlers
//! name in their `#[utoipa::path]`. They live apart from the document, which reads the router
//! and through it every handler, so a handler imports them without importing the document.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::{
    ToSchema,
    openapi::{self, path::Operation},
};

use crate::{access::memberships as membership_domain, orders as order_domain, payments::core};

/// An RFC 9457 problem document: the body of every error.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({
    "type": "/problems/validation", "title": "Unprocessable Entity", "status": 422,
    "detail": "some fields are invalid",
    "errors": {"billing_period_days": "is required", "currency": "must be an ISO 4217 code (e.g. UAH) or XTR"}
}))]
pub struct Problem {
    /// A relative URI naming the kind of problem (`/problems/not-found`, `/problems/validation`,
    /// …), or `about:blank`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The status's reason phrase.
    pub title: String,
    /// The HTTP status code.
    #[schema(minimum = 400, maximum = 599)]
    pub status: u16,
    /// What went wrong, for a human. A 5xx says nothing of the cause (it is logged with the
    /// request id).
    pub detail: String,
    /// Validation errors only (`/problems/validation`, 422): a message per invalid field.
    #[schema(required = false)]
    pub errors: Option<BTreeMap<String, String>>,
}

/// `{"order": Order}`: checkout and invoice link.
#[derive(Serialize, ToSchema)]
pub struct OrderEnvelope {
    pub order: order_domain::Order,
}

/// `{"order": Order, "memberships": [Membership]}`: a claimed free order (paid now) and the
/// membership of every channel of its plan after the grant, in ascending channel id.
#[derive(Serialize, ToSchema)]
pub struct ClaimEnvelope {
    pub order: order_domain::Order,
    pub memberships: Vec<membership_domain::Membership>,
}

/// `{"retried": n}`: how many dead letters went back to the queue.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"retried": 3}))]
pub struct Retried {
    #[schema(minimum = 0)]
    pub retried: i64,
}

/// The answer to a staff login.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"access_token": "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
    "token_type": "Bearer", "expires_in": 3600, "role": "admin"}))]
pub struct Token {
    /// An HS256 JWT; send it as `Authorization: Bearer <token>`.
    pub access_token: String,
    #[schema(pattern = "^Bearer$")]
    pub token_type: String,
    /// Seconds until it expires (`JWT_TTL_SECS`).
    #[schema(minimum = 1)]
    pub expires_in: u64,
    /// The account's role when the token was issued, so a client (the console) offers only
    /// what the account may do; every request is still checked against the role it has then.
    #[schema(value_type = String, example = "admin")]
    pub role: crate::staff::Role,
}

/// `{"status": "ok"}` or `{"status": "ready"}`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(pattern = "^(ok|ready)$")]
    pub status: String,
}

/// Door 1's answer to a signed event that is not `payment.succeeded`: acknowledged, ignored.
#[derive(Serialize, ToSchema)]
pub struct Ignored {
    /// Always `true`.
    pub ignored: bool,
}

/// Door 1's answer: what the payment core did, or that the event was ignored.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum SignedWebhookAnswer {
    Applied(Box<core::Applied>),
    Ignored(Ignored),
}

/// Door 4's answer to a full refund: what taking it back found (`refunded` now,
/// `already_refunded`, `not_applied`, `recorded_before_payment` — no payment yet: the refund is
/// recorded as it, so it grants nothing when it comes —, or `unknown_payment` when the charge
/// says too little to record it).
#[derive(Serialize, ToSchema)]
pub struct StripeRefundAnswer {
    pub refund: String,
}

/// Door 4's answer to a failed delayed payment (`checkout.session.async_payment_failed`):
/// what releasing its order's holds found (`released`, `not_held`, `not_pending`,
/// `unknown_order`).
#[derive(Serialize, ToSchema)]
pub struct StripeHoldAnswer {
    pub hold: String,
}

/// Door 4's answer to a dispute: what `charge.dispute.created` took back (`disputed` now,
/// `already_disputed`, `not_applied`, `unknown_payment`), or what a won
/// `charge.dispute.closed` did (`in_review` now, `already_in_review`, `not_disputed`,
/// `unknown_payment`).
#[derive(Serialize, ToSchema)]
pub struct StripeDisputeAnswer {
    pub dispute: String,
}

/// Door 4's answer: what the payment core did, what a refund or a dispute took back, the
/// holds a failed payment released, or that the event was ignored.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum StripeAnswer {
    Applied(Box<core::Applied>),
    Refund(StripeRefundAnswer),
    Hold(StripeHoldAnswer),
    Dispute(StripeDisputeAnswer),
    Ignored(Ignored),
}

/// A Stripe event (`checkout.session.completed`, `checkout.session.async_payment_succeeded`
/// and `…_failed`, `charge.refunded`, `charge.dispute.created` and `…closed`, or any other
/// type, ignored), as Stripe sends it; only the fields read are described.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"id": "evt_1", "object": "event", "type": "checkout.session.completed",
    "created": 1735689600, "data": {"object": {"id": "cs_1", "object": "checkout.session",
    "payment_status": "paid", "payment_intent": "pi_1", "amount_total": 1999, "currency": "usd",
    "client_reference_id": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21"}}}))]
pub struct StripeEvent {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Unix seconds.
    pub created: i64,
    /// `{"object": {...}}`: a Checkout Session, a Charge or a Dispute.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// Door 5's answer: what a report of a Monobank invoice came to.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"invoice_id": "p2_9ZgpZVsl3", "status": "success",
    "result": "applied", "payment_id": 12}))]
pub struct MonobankAnswer {
    /// The invoice reported on.
    pub invoice_id: String,
    /// Its status, as reported.
    pub status: crate::payments::gateways::monobank::Status,
    /// `success`: the payment's outcome (`applied`, `needs_review`) or `duplicate` (stored
    /// before); `reversed`: the refund rule's result (`refunded`, `already_refunded`,
    /// `not_applied`, `recorded_before_payment`, `unknown_payment`); `failure`/`expired`: what
    /// releasing the order's holds found (`released`, `not_held`, `not_pending`,
    /// `unknown_order`) or `hold_kept` (another page of the order can still be paid);
    /// `nothing` for a status on the way; `stale` for a report older (`modifiedDate`) than one
    /// stored before, which changes nothing.
    pub result: String,
    /// The payment stored or refunded, when there is one.
    pub payment_id: Option<i64>,
}

/// A Monobank invoice status report, as Monobank's webhook sends it (the same schema as its
/// `GET /api/merchant/invoice/status`); only the fields read are described.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({"invoiceId": "p2_9ZgpZVsl3", "status": "success", "amount": 19900,
    "ccy": 980, "finalAmount": 19900, "createdDate": "2025-01-01T10:00:00Z",
    "modifiedDate": "2025-01-01T10:03:00Z",
    "reference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21"}))]
pub struct MonobankReport {
    pub invoice_id: String,
    pub status: crate::payments::gateways::monobank::Status,
    /// Minor units (kopiyky).
    pub amount: i64,
    /// ISO 4217 numeric: 980 (UAH), 840 (USD) or 978 (EUR); absent or null: 980, Monobank's
    /// default. Another number → 422.
    pub ccy: Option<i32>,
    /// Our order reference (`merchantPaymInfo.reference`).
    pub reference: Option<String>,
    /// RFC 3339: orders the reports of one invoice.
    pub modified_date: String,
}

/// Door 6's answer: what the payment core did, or that the update was ignored.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum CryptoPayAnswer {
    Applied(Box<core::Applied>),
    Ignored(Ignored),
}

/// A Crypto Pay webhook Update (`invoice_paid`, or any other type, ignored), as Crypto Pay
/// sends it; only the fields read are described.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"update_id": 7, "update_type": "invoice_paid",
    "request_date": "2026-12-08T01:02:04.000Z", "payload": {"invoice_id": 528890,
    "status": "paid", "asset": "USDT", "amount": "4.99", "paid_asset": "USDT",
    "paid_amount": "4.99", "paid_at": "2026-12-08T01:02:03.000Z",
    "payload": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21"}}))]
pub struct CryptoPayUpdate {
    pub update_id: i64,
    /// `invoice_paid` is a payment; any other type is ignored.
    pub update_type: String,
    /// ISO 8601.
    pub request_date: String,
    /// The Invoice: `invoice_id`, `status`, `asset`, `amount`, `paid_asset`, `paid_amount`,
    /// `paid_at`, `payload` (our order reference).
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
}

/// `{}`: nothing to do.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// Door 3's answer: a Bot API call for Telegram to make, or nothing.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum TelegramAnswer {
    Call(crate::telegram::WebhookReply),
    Nothing(Empty),
}

/// WayForPay's `serviceUrl` callback (the fields subgate reads; others are ignored). The
/// `merchantSignature` is HMAC-MD5 (hex) with the merchant secret key over
/// `merchantAccount;orderReference;amount;currency;authCode;cardPan;transactionStatus;reasonCode`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(example = json!({
    "merchantAccount": "test_merch_n1", "orderReference": "ord_5f0c1e7a9b2d4c6e8f1a3b5c7d9e0f21",
    "amount": 199.0, "currency": "UAH", "authCode": "541963", "cardPan": "41****8217",
    "transactionStatus": "Approved", "reasonCode": 1100, "processingDate": 1735689600,
    "merchantSignature": "ed9a06fd621d0dcefd1ba3aeb5f2c087"
}))]
pub struct WayForPayCallback {
    pub merchant_account: String,
    /// Our order reference.
    pub order_reference: String,
    /// In major units, as a JSON number (e.g. `199.5`).
    pub amount: f64,
    pub currency: String,
    #[schema(required = false)]
    pub auth_code: Option<String>,
    #[schema(required = false)]
    pub card_pan: Option<String>,
    /// Only `Approved` is a payment; `Refunded` and `Voided` take back what the payment of
    /// this `orderReference` bought; any other status is acknowledged and nothing is stored.
    pub transaction_status: String,
    /// A number or a numeric string.
    #[schema(value_type = Value)]
    pub reason_code: serde_json::Value,
    /// Unix seconds.
    #[schema(required = false)]
    pub processing_date: Option<i64>,
    pub merchant_signature: String,
}

/// The signed `accept` acknowledgement WayForPay waits for (HMAC-MD5 over
/// `orderReference;accept;time`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WayForPayAck {
    pub order_reference: String,
    #[schema(pattern = "^accept$")]
    pub status: String,
    pub time: i64,
    pub signature: String,
}

/// The operations of a path item (the methods this service routes).
pub fn operations_mut(item: &mut openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.patch,
    ]
    .into_iter()
    .flatten()
}
