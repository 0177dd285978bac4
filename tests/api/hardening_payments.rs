//! Payments and seats under the conditions that used to break them: a delivery delayed by days.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::helpers::{TestApp, payment_event};

fn id(v: &Value) -> i64 {
    v["id"].as_i64().unwrap()
}

fn reference(order: &Value) -> String {
    order["reference"].as_str().unwrap().to_string()
}

async fn db_now(app: &TestApp) -> DateTime<Utc> {
    app.db()
        .await
        .query_one("SELECT statement_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .unwrap_or_else(|| panic!("not a time: {v}"))
        .parse()
        .unwrap()
}

// ---- the term starts when the payment is applied ----

#[tokio::test]
async fn a_delivery_delayed_by_two_days_still_buys_the_whole_one_day_term() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(31_001).await);
    let chan = id(&app
        .create_channel(-31_001, json!({"billing_period_days": 1}))
        .await);

    // Paid two days ago, delivered only now (a gateway outage).
    let order = app.create_order(sub, chan).await;
    let paid_at = DateTime::from_timestamp(Utc::now().timestamp() - 2 * 86_400, 0).unwrap();
    let mut body = payment_event("pay_late", &reference(&order), 19900, "UAH");
    body["paid_at"] = json!(paid_at.to_rfc3339());
    let before = db_now(&app).await;
    let r = app.post_signed_webhook(&body).await.expect(200);
    let after = db_now(&app).await;
    assert_eq!(r["payment"]["outcome"], "applied", "{r}");
    // paid_at stays as the gateway reported it, on the payment and on the order.
    assert_eq!(time(&r["payment"]["paid_at"]), paid_at);
    let o = app
        .get(&format!("/api/orders/{}", id(&order)))
        .await
        .expect(200);
    assert_eq!(time(&o["paid_at"]), paid_at);
    // The term is a full day from when the payment was applied.
    let m = &r["membership"];
    assert_eq!(m["status"], "active");
    let expires = time(&m["expires_at"]);
    assert!(
        before + Duration::days(1) <= expires && expires <= after + Duration::days(1),
        "expires_at {expires} is one day after the payment was applied ({before}..{after})"
    );
    // The sweep leaves it alone: the buyer has the day they paid for.
    let report = app.post("/api/sweep", Value::Null).await.expect(200);
    assert_eq!(report["to_expired"], 0, "{report}");
    assert_eq!(report["to_grace"], 0, "{report}");

    // A renewal of the live membership, also delivered late, extends from its own expiry.
    let renewal = app.create_order(sub, chan).await;
    let mut body = payment_event("pay_late_2", &reference(&renewal), 19900, "UAH");
    body["paid_at"] = json!(paid_at.to_rfc3339());
    let r = app.post_signed_webhook(&body).await.expect(200);
    assert_eq!(r["payment"]["outcome"], "applied", "{r}");
    assert_eq!(
        time(&r["membership"]["expires_at"]),
        expires + Duration::days(1)
    );
    assert_eq!(time(&r["payment"]["paid_at"]), paid_at);
}
