//! The rows the referral tests start from: affiliates made through the API, and commission
//! lines written straight into the ledger (with a minimal payment row each, for the foreign
//! key), as the payment core would have written them.

use serde_json::{Value, json};

use crate::support::helpers::TestApp;

/// Creates an affiliate named `name` (code drawn); returns its JSON.
pub(crate) async fn affiliate(app: &TestApp, name: &str) -> Value {
    app.post("/api/affiliates", json!({"name": name}))
        .await
        .expect(201)
}

/// A commission line to write ([`insert_line`]).
#[derive(Clone, Copy)]
pub(crate) struct Line<'a> {
    pub affiliate_id: i64,
    /// `first`, `renewal` or `reversal`.
    pub kind: &'a str,
    /// Negative for a `reversal`.
    pub amount_minor: i64,
    pub currency: &'a str,
    /// The payment's net amount the percent applied to.
    pub base_minor: i64,
    /// `pending` or `reversed` (a `paid` line is made by a payout).
    pub status: &'a str,
    /// Whether `payable_at` has passed (a `pending` line then reads `payable`).
    pub due: bool,
    /// The buyer (null: none).
    pub subscriber_id: Option<i64>,
    /// The payment it is about; `None`: a new minimal payment of `base_minor`.
    pub payment_id: Option<i64>,
}

impl<'a> Line<'a> {
    /// A `first` line of `amount_minor` UAH (30 % of a payment), due now, of no buyer.
    pub(crate) fn payable(affiliate_id: i64, amount_minor: i64) -> Line<'a> {
        Line {
            affiliate_id,
            kind: "first",
            amount_minor,
            currency: "UAH",
            base_minor: amount_minor * 10 / 3,
            status: "pending",
            due: true,
            subscriber_id: None,
            payment_id: None,
        }
    }
}

/// Writes `line` into `commission_lines` (and its payment, when it names none); returns the
/// line's id and its payment's id.
pub(crate) async fn insert_line(app: &TestApp, line: Line<'_>) -> (i64, i64) {
    let db = app.db().await;
    let subscriber_id = line.subscriber_id.map(|s| s as i32);
    let payment_id = match line.payment_id {
        Some(p) => p,
        None => db
            .query_one(
                "INSERT INTO payments (gateway, external_id, subscriber_id, amount_minor,
                     currency, paid_at, outcome, reason)
                 VALUES ('acme', gen_random_uuid()::text, $1, $2, $3, now(), 'needs_review',
                     'unknown_order')
                 RETURNING id",
                &[&subscriber_id, &line.base_minor, &line.currency],
            )
            .await
            .unwrap()
            .get("id"),
    };
    let row = db
        .query_one(
            "INSERT INTO commission_lines (affiliate_id, payment_id, subscriber_id, kind,
                 amount_minor, currency, percent, base_minor, status, payable_at, reversed_at)
             VALUES ($1, $2, $3, $4, $5, $6, 30, $7, $8,
                 CASE WHEN $9 THEN now() - interval '1 day' ELSE now() + interval '14 days' END,
                 CASE WHEN $8 = 'reversed' THEN now() END)
             RETURNING id",
            &[
                &(line.affiliate_id as i32),
                &payment_id,
                &subscriber_id,
                &line.kind,
                &line.amount_minor,
                &line.currency,
                &line.base_minor,
                &line.status,
                &line.due,
            ],
        )
        .await
        .unwrap();
    (row.get("id"), payment_id)
}
