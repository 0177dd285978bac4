//! Values nobody meant: prices are bounded per currency, a channel's chat is a channel's (not
//! a user's), and sums of money never overflow — two payments of `i64::MAX` minor units leave
//! the overview and every statistic answering, with the exact sums.

use chrono::{Duration, DurationRound, Utc};
use serde_json::{Value, json};

use crate::{
    staff::auth::assert_problem,
    support::helpers::{TestApp, id},
};

/// The 422's message on `field`.
#[track_caller]
fn refused_on(r: &crate::support::helpers::TestResponse, field: &str) -> String {
    let problem = assert_problem(r, 422);
    problem["errors"][field]
        .as_str()
        .unwrap_or_else(|| panic!("no message on {field}: {problem}"))
        .to_string()
}

fn channel(chat: i64, price: i64, currency: &str) -> Value {
    json!({"telegram_chat_id": chat, "title": "Bounded", "price_minor": price,
           "currency": currency, "billing_period_days": 30})
}

#[tokio::test]
async fn prices_are_bounded_per_currency() {
    let app = TestApp::spawn().await;
    // The highest price is accepted; one minor unit more is a 422 naming the field.
    for (i, (currency, max)) in [
        ("UAH", 100_000_000_000_i64),
        ("JPY", 1_000_000_000),
        ("KWD", 1_000_000_000_000),
        ("XTR", 100_000),
    ]
    .into_iter()
    .enumerate()
    {
        let chat = -80_000 - i as i64 * 10;
        let message = refused_on(
            &app.post("/api/channels", channel(chat, max + 1, currency))
                .await,
            "price_minor",
        );
        assert!(message.contains(&max.to_string()), "{message}");
        app.post("/api/channels", channel(chat, max, currency))
            .await
            .expect(201);
    }
    let r = app
        .post("/api/channels", channel(-80_100, i64::MAX, "UAH"))
        .await;
    refused_on(&r, "price_minor");
    assert_eq!(
        app.count("channels WHERE price_minor = 9223372036854775807")
            .await,
        0
    );

    // A change: the price alone, and a currency whose bound the stored price is above.
    let c = id(&app
        .create_channel(-80_200, json!({"price_minor": 200_000}))
        .await);
    let path = format!("/api/channels/{c}");
    refused_on(
        &app.patch(&path, json!({"price_minor": i64::MAX})).await,
        "price_minor",
    );
    refused_on(
        &app.patch(&path, json!({"currency": "XTR"})).await,
        "price_minor",
    );
    let stored = app.get(&path).await.expect(200);
    assert_eq!(
        (&stored["price_minor"], &stored["currency"]),
        (&json!(200_000), &json!("UAH"))
    );

    // Plans, the channel's default plan included.
    let body = json!({"title": "Big", "channel_ids": [c], "price_minor": i64::MAX,
                      "period_days": 30});
    refused_on(&app.post("/api/plans", body).await, "price_minor");
    let default: i64 = app
        .db()
        .await
        .query_one("SELECT id FROM plans WHERE default_of = $1", &[&(c as i32)])
        .await
        .unwrap()
        .get(0);
    refused_on(
        &app.patch(
            &format!("/api/plans/{default}"),
            json!({"price_minor": i64::MAX}),
        )
        .await,
        "price_minor",
    );
    // An amount off is bounded as a price is.
    let body = json!({"code": "HUGE", "amount_off_minor": i64::MAX, "currency": "UAH"});
    refused_on(
        &app.post("/api/promo-codes", body).await,
        "amount_off_minor",
    );
}

#[tokio::test]
async fn a_channel_is_not_a_user() {
    let app = TestApp::spawn().await;
    let message = refused_on(
        &app.post("/api/channels", channel(123_456_789, 19_900, "UAH"))
            .await,
        "telegram_chat_id",
    );
    assert!(message.contains("negative"), "{message}");
    assert_eq!(app.count("channels").await, 0);
    let c = id(&app.create_channel(-1_001_234_567_890, json!({})).await);
    refused_on(
        &app.patch(
            &format!("/api/channels/{c}"),
            json!({"telegram_chat_id": 42}),
        )
        .await,
        "telegram_chat_id",
    );
    // A basic group's id is negative too, and accepted.
    app.post("/api/channels", channel(-4_012_345, 19_900, "UAH"))
        .await
        .expect(201);
}

/// Two payments of `i64::MAX` minor units (more than any price allows, as a gateway or an old
/// row may still hold) and a channel priced at `i64::MAX`: the overview, the revenue series and
/// the summary answer with exact sums beyond `i64`.
#[tokio::test]
async fn sums_beyond_i64_are_answered_exactly() {
    let app = TestApp::spawn().await;
    let c = id(&app
        .create_channel(-80_300, json!({"price_minor": 10_000}))
        .await);
    for (i, payment) in ["max-1", "max-2"].into_iter().enumerate() {
        let s = id(&app.create_subscriber(80_300 + i as i64).await);
        let order = app.create_order(s, c).await;
        app.pay_order(&order, payment).await.expect(200);
    }
    let db = app.db().await;
    db.execute(
        "UPDATE payments SET amount_minor = 9223372036854775807,
                             paid_at = paid_at - interval '1 day'",
        &[],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE channels SET price_minor = 9223372036854775807 WHERE id = $1",
        &[&(c as i32)],
    )
    .await
    .unwrap();
    let twice = json!(18_446_744_073_709_551_614_u64);

    let overview = app.get("/api/overview").await.expect(200);
    assert_eq!(
        overview["revenue_30d"],
        json!([{"currency": "UAH", "amount_minor": twice, "payments": 2}]),
        "{overview}"
    );

    let today = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    let yesterday = today - Duration::days(1);
    let revenue = app
        .get(&format!(
            "/api/stats/revenue?from={}&to={}",
            yesterday.format("%Y-%m-%d"),
            (today + Duration::days(1)).format("%Y-%m-%d")
        ))
        .await
        .expect(200);
    let first = &revenue["items"][0];
    assert_eq!(
        (
            &first["gross_minor"],
            &first["net_minor"],
            &first["payments"]
        ),
        (&twice, &twice, &json!(2)),
        "{revenue}"
    );
    // Twice: the second read adds up the rolled-up day.
    let again = app
        .get(&format!(
            "/api/stats/revenue?from={}&to={}",
            yesterday.format("%Y-%m-%d"),
            (today + Duration::days(1)).format("%Y-%m-%d")
        ))
        .await
        .expect(200);
    assert_eq!(again, revenue);

    let summary = app.get("/api/stats/summary").await.expect(200);
    assert_eq!(
        summary["mrr"],
        json!([{"currency": "UAH", "amount_minor": twice}]),
        "{summary}"
    );
}
