//! Statistics: revenue by interval and currency, members by interval and channel, and the
//! summary, on payments and memberships made through the API (times moved in the database),
//! and clear refusals of a bad range.

use chrono::{Duration, DurationRound, Utc};
use serde_json::{Value, json};

use crate::{
    auth::assert_problem,
    bundles::{insert_plan, order_plan},
    helpers::{TestApp, id},
};

async fn buy(app: &TestApp, subscriber: i64, channel: i64, payment: &str) -> Value {
    let order = app.create_order(subscriber, channel).await;
    app.pay_order(&order, payment).await.expect(200);
    order
}

fn rows<'a>(v: &'a Value, key: &str, value: &Value) -> Vec<&'a Value> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| &r[key] == value)
        .collect()
}

#[tokio::test]
async fn revenue_members_and_summary_are_counted_from_the_records() {
    let app = TestApp::spawn().await;
    let a = id(&app
        .create_channel(-70_001, json!({"price_minor": 10_000}))
        .await);
    let b = id(&app
        .create_channel(-70_002, json!({"price_minor": 500, "currency": "XTR"}))
        .await);
    let s1 = id(&app.create_subscriber(70_001).await);
    let s2 = id(&app.create_subscriber(70_002).await);
    let s3 = id(&app.create_subscriber(70_003).await);

    let first = buy(&app, s1, a, "pay-1").await;
    buy(&app, s2, a, "pay-2").await;
    buy(&app, s3, b, "pay-3").await;
    buy(&app, s1, a, "pay-4").await; // a renewal
    // A trial of channel a for s3, then s3 pays for a: a converted trial (and a renewal).
    let trial = insert_plan(&app, "trial", 0, "UAH", Some(7), &[a]).await;
    let order = order_plan(&app, s3, trial).await;
    app.post(&format!("/api/orders/{}/claim", id(&order)), Value::Null)
        .await
        .expect(200);
    buy(&app, s3, a, "pay-5").await;
    // A payment kept for review is no revenue.
    let stray = app.create_order(s2, a).await;
    let mut wrong = stray.clone();
    wrong["amount_minor"] = json!(1);
    app.pay_order(&wrong, "pay-6").await.expect(200);
    // s2's payment was refunded; s2's membership ends (a staff correction).
    let db = app.db().await;
    db.execute(
        "UPDATE payments SET outcome = 'refunded', reason = 'refunded_at_gateway'
         WHERE external_id = 'pay-2'",
        &[],
    )
    .await
    .unwrap();
    let m2: i64 = db
        .query_one(
            "SELECT id FROM memberships WHERE subscriber_id = $1",
            &[&(s2 as i32)],
        )
        .await
        .unwrap()
        .get("id");
    app.patch(
        &format!("/api/memberships/{m2}"),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    // The first payment was yesterday.
    db.execute(
        "UPDATE payments SET paid_at = paid_at - interval '1 day' WHERE order_id = $1",
        &[&id(&first)],
    )
    .await
    .unwrap();

    let today = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    let yesterday = today - Duration::days(1);
    let range = format!(
        "from={}&to={}",
        yesterday.format("%Y-%m-%dT%H:%M:%SZ"),
        (today + Duration::days(1)).format("%Y-%m-%dT%H:%M:%SZ")
    );
    let day =
        |t: chrono::DateTime<Utc>| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));

    let revenue = app
        .get(&format!("/api/stats/revenue?{range}&interval=day"))
        .await
        .expect(200);
    let at = |t, currency: &str| {
        rows(&revenue, "start", &day(t))
            .into_iter()
            .find(|r| r["currency"] == currency)
            .cloned()
            .unwrap_or_else(|| panic!("{revenue}"))
    };
    let uah_yesterday = at(yesterday, "UAH");
    assert_eq!(
        (
            uah_yesterday["gross_minor"].clone(),
            uah_yesterday["payments"].clone()
        ),
        (json!(10_000), json!(1))
    );
    let uah = at(today, "UAH");
    assert_eq!(uah["gross_minor"], 30_000, "{revenue}");
    assert_eq!(uah["refunded_minor"], 10_000);
    assert_eq!(uah["net_minor"], 20_000);
    assert_eq!(uah["payments"], 3);
    let xtr = at(today, "XTR");
    assert_eq!(
        (xtr["gross_minor"].clone(), xtr["payments"].clone()),
        (json!(500), json!(1))
    );
    assert_eq!(at(yesterday, "XTR")["gross_minor"], 0);
    assert_eq!(revenue["items"].as_array().unwrap().len(), 4);

    let members = app
        .get(&format!("/api/stats/members?{range}"))
        .await
        .expect(200);
    let of = |t, channel: i64| {
        rows(&members, "start", &day(t))
            .into_iter()
            .find(|r| r["channel_id"] == channel)
            .cloned()
            .unwrap_or_else(|| panic!("{members}"))
    };
    let today_a = of(today, a);
    assert_eq!(
        [
            "live",
            "new",
            "renewed",
            "expired",
            "trials_started",
            "trials_converted"
        ]
        .map(|k| today_a[k].as_i64().unwrap()),
        [2, 3, 2, 1, 1, 1],
        "{today_a}"
    );
    let yesterday_a = of(yesterday, a);
    assert_eq!(yesterday_a["live"], 0, "{yesterday_a}");
    assert_eq!(yesterday_a["new"], 0);
    assert_eq!(of(today, b)["live"], 1);
    assert_eq!(of(today, b)["new"], 1);
    let only_b = app
        .get(&format!("/api/stats/members?{range}&channel_id={b}"))
        .await
        .expect(200);
    assert_eq!(only_b["items"].as_array().unwrap().len(), 2);

    let summary = app.get("/api/stats/summary").await.expect(200);
    assert_eq!(
        summary["mrr"],
        json!([{"currency": "UAH", "amount_minor": 20_000}, {"currency": "XTR", "amount_minor": 500}]),
        "{summary}"
    );
    assert_eq!(summary["active_members"], 2);
    assert_eq!(summary["live_memberships"], 3);
    assert_eq!(
        summary["churn_rate_30d"],
        Value::Null,
        "none was live 30 days ago"
    );
    let renewal = summary["renewal_rate_30d"].as_f64().unwrap();
    assert!((renewal - 2.0 / 3.0).abs() < 1e-9, "{summary}");
}

#[tokio::test]
async fn a_bad_range_is_refused() {
    let app = TestApp::spawn().await;
    for (query, status, field) in [
        ("", 422, Some("from")),
        ("from=2026-01-01T00:00:00Z", 422, Some("to")),
        (
            "from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            422,
            Some("to"),
        ),
        (
            "from=2026-01-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            422,
            Some("to"),
        ),
        (
            "from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            422,
            Some("to"),
        ),
        (
            "from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&interval=hour",
            422,
            Some("interval"),
        ),
        ("from=yesterday&to=2026-02-01T00:00:00Z", 400, None),
        (
            "from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&colour=red",
            400,
            None,
        ),
    ] {
        for path in ["/api/stats/revenue", "/api/stats/members"] {
            let r = app.get(&format!("{path}?{query}")).await;
            let problem = assert_problem(&r, status);
            if let Some(field) = field {
                assert!(
                    problem["errors"][field].is_string(),
                    "{path}?{query}: {problem}"
                );
            }
        }
    }
    // Sixteen years by month is fine; by week it is too many.
    app.get("/api/stats/revenue?from=2010-01-01T00:00:00Z&to=2026-01-01T00:00:00Z&interval=month")
        .await
        .expect(200);
    let r = app
        .get("/api/stats/revenue?from=2010-01-01T00:00:00Z&to=2026-01-01T00:00:00Z&interval=week")
        .await;
    assert_problem(&r, 422);
}

/// A rolled-up day that changes later — a late payment, a refund — is rolled again by the next
/// read: the series never keeps a stale day.
#[tokio::test]
async fn a_changed_day_is_rolled_up_again() {
    let app = TestApp::spawn().await;
    let a = id(&app
        .create_channel(-70_101, json!({"price_minor": 10_000}))
        .await);
    let s1 = id(&app.create_subscriber(70_101).await);
    let s2 = id(&app.create_subscriber(70_102).await);
    let db = app.db().await;
    let move_back = |order: i64| {
        let db = &db;
        async move {
            db.execute(
                "UPDATE payments SET paid_at = paid_at - interval '3 days' WHERE order_id = $1",
                &[&order],
            )
            .await
            .unwrap();
        }
    };
    let first = buy(&app, s1, a, "late-1").await;
    move_back(id(&first)).await;

    let today = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    let day = today - Duration::days(3);
    let path = format!(
        "/api/stats/revenue?from={}&to={}",
        day.format("%Y-%m-%dT%H:%M:%SZ"),
        (day + Duration::days(1)).format("%Y-%m-%dT%H:%M:%SZ")
    );
    let gross = |v: Value| v["items"][0]["gross_minor"].clone();
    assert_eq!(gross(app.get(&path).await.expect(200)), 10_000);
    let rolled: i64 = db
        .query_one(
            "SELECT count(*) AS n FROM stats_rolled_days WHERE day = $1",
            &[&day.date_naive()],
        )
        .await
        .unwrap()
        .get("n");
    assert_eq!(rolled, 1, "the day was rolled up");

    // A second payment lands on that day late, then the first is refunded.
    let second = buy(&app, s2, a, "late-2").await;
    move_back(id(&second)).await;
    assert_eq!(gross(app.get(&path).await.expect(200)), 20_000);
    db.execute(
        "UPDATE payments SET outcome = 'refunded', reason = 'refunded_at_gateway'
         WHERE external_id = 'late-1'",
        &[],
    )
    .await
    .unwrap();
    let item = app.get(&path).await.expect(200)["items"][0].clone();
    assert_eq!(item["refunded_minor"], 10_000, "{item}");
    assert_eq!(item["net_minor"], 10_000);
}
