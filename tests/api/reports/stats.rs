//! Statistics: revenue by interval and currency, members by interval and channel, and the
//! summary, on payments and memberships made through the API (times moved in the database),
//! and clear refusals of a bad range.

use chrono::{Duration, DurationRound, NaiveDate, Utc};
use serde_json::{Value, json};
use tokio_postgres::NoTls;

use crate::{
    catalog::bundles::{insert_plan, order_plan},
    staff::auth::assert_problem,
    support::helpers::{TestApp, id, url_for},
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
    assert_eq!(
        uah["affiliate_fees_minor"], 0,
        "no affiliate fee on card payments"
    );
    assert_eq!(uah["net_after_fees_minor"], 20_000);
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
        ("from=yesterday&to=2026-02-01T00:00:00Z", 422, Some("from")),
        ("from=2026-01-01&to=2026-13-01", 422, Some("to")),
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

/// `from` and `to` may be plain dates (their midnight UTC) as well as RFC 3339 times; a value
/// that is neither is a 422 naming its field (a query string that parses is never a 400 for it).
#[tokio::test]
async fn plain_dates_are_accepted_and_a_bad_date_is_a_422_naming_its_field() {
    let app = TestApp::spawn().await;
    for path in ["/api/stats/revenue", "/api/stats/members"] {
        let by_day = app
            .get(&format!("{path}?from=2026-12-01&to=2026-12-04"))
            .await
            .expect(200);
        let same = app
            .get(&format!(
                "{path}?from=2026-12-01T00:00:00Z&to=2026-12-04T00:00:00Z"
            ))
            .await
            .expect(200);
        assert_eq!(by_day, same, "{path}");
        for (query, field) in [
            ("from=2026-12-01&to=2026-12-32", "to"),
            ("from=2026-12&to=2027-01-01", "from"),
            ("from=01.12.2026&to=2027-01-01", "from"),
            ("from=2026-12-01T25:00:00Z&to=2027-01-01", "from"),
        ] {
            let problem = assert_problem(&app.get(&format!("{path}?{query}")).await, 422);
            let message = problem["errors"][field]
                .as_str()
                .unwrap_or_else(|| panic!("{path}?{query}: no message on {field}: {problem}"));
            assert!(message.contains("2026-12-01"), "{message}");
        }
    }
}

/// The days a read rolls up, in order.
async fn rolled_days(app: &TestApp) -> Vec<NaiveDate> {
    app.db()
        .await
        .query("SELECT day FROM stats_rolled_days ORDER BY day", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("day"))
        .collect()
}

/// A read rolls up only the days it needs, and none before the first record: a range from
/// year 1 costs what one from the first payment costs; a revenue series stops at its `to`.
#[tokio::test]
async fn a_read_rolls_up_only_its_range_from_the_first_record_on() {
    let app = TestApp::spawn().await;
    let a = id(&app
        .create_channel(-70_201, json!({"price_minor": 10_000}))
        .await);
    let s = id(&app.create_subscriber(70_201).await);
    let order = buy(&app, s, a, "old-1").await;
    let db = app.db().await;
    db.execute(
        "UPDATE payments SET paid_at = paid_at - interval '10 days' WHERE order_id = $1",
        &[&id(&order)],
    )
    .await
    .unwrap();
    let today = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    let first = (today - Duration::days(10)).date_naive();
    let t = |d: chrono::DateTime<Utc>| d.format("%Y-%m-%dT%H:%M:%SZ").to_string();

    // Year 1 to year 2 by month: nothing was recorded then, so nothing is rolled.
    for path in ["/api/stats/revenue", "/api/stats/members"] {
        let v = app
            .get(&format!(
                "{path}?from=0001-01-01T00:00:00Z&to=0002-01-01T00:00:00Z&interval=month"
            ))
            .await
            .expect(200);
        if path.ends_with("revenue") {
            assert_eq!(v["items"], json!([]), "{v}");
            assert_eq!(rolled_days(&app).await, Vec::<NaiveDate>::new());
        }
    }
    // Members are counted back from now, so their read rolls every ended day from the first
    // record on, and none before it.
    let rolled = rolled_days(&app).await;
    assert_eq!(rolled.first(), Some(&first), "{rolled:?}");

    db.execute("DELETE FROM stats_rolled_days", &[])
        .await
        .unwrap();
    // Revenue from 20 days ago to 5 days ago: the days from the payment's to the range's end.
    let v = app
        .get(&format!(
            "/api/stats/revenue?from={}&to={}",
            t(today - Duration::days(20)),
            t(today - Duration::days(5))
        ))
        .await
        .expect(200);
    let gross: i64 = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["gross_minor"].as_i64().unwrap())
        .sum();
    assert_eq!(gross, 10_000, "{v}");
    let expected: Vec<NaiveDate> = (0..5).map(|i| first + Duration::days(i)).collect();
    assert_eq!(rolled_days(&app).await, expected);
}

/// Backends of this test's database waiting for an advisory lock.
async fn waiting_for_advisory_locks(observer: &tokio_postgres::Client) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'
               AND wait_event = 'advisory'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Many statistics requests at once never hold more than their share of the pool: with their
/// roll-up held up (another session holds the lock of a day it must roll), twenty requests of
/// the three series are in flight together while a payment arrives at door 1, which answers
/// 200, and the pool lends the statistics no more than their limit. Then every request
/// answers. Repeated for three rounds.
#[tokio::test]
async fn statistics_hold_at_most_their_share_of_the_pool_while_a_payment_door_answers() {
    const REQUESTS: usize = 20;
    let app = TestApp::spawn_with(|env| {
        env.insert("DB_POOL_SIZE".into(), "8".into());
    })
    .await;
    // The statistics' share: a quarter of the pool.
    let limit = 2;
    app.token().await;
    let a = id(&app
        .create_channel(-70_301, json!({"price_minor": 10_000}))
        .await);
    let old = buy(&app, id(&app.create_subscriber(70_300).await), a, "gate-0").await;
    let (observer, conn) = tokio_postgres::connect(&url_for(&app.db_name), NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    observer
        .execute(
            "UPDATE payments SET paid_at = paid_at - interval '3 days' WHERE order_id = $1",
            &[&id(&old)],
        )
        .await
        .unwrap();
    let held = (Utc::now() - Duration::days(3)).date_naive();
    let today = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    let range = format!(
        "from={}&to={}",
        (today - Duration::days(5)).format("%Y-%m-%d"),
        (today + Duration::days(1)).format("%Y-%m-%d")
    );
    let paths: Vec<String> = (0..REQUESTS)
        .map(|i| match i % 3 {
            0 => format!("/api/stats/revenue?{range}"),
            1 => format!("/api/stats/members?{range}"),
            _ => "/api/stats/summary".to_string(),
        })
        .collect();

    for round in 0..3 {
        let buyer = id(&app.create_subscriber(70_310 + round).await);
        let order = app.create_order(buyer, a).await;
        observer
            .execute("DELETE FROM stats_rolled_days", &[])
            .await
            .unwrap();
        observer
            .execute("SELECT pg_advisory_lock(stats_day_lock_key($1))", &[&held])
            .await
            .unwrap();
        let stats = futures::future::join_all(paths.iter().map(|p| app.get(p)));
        let in_use = || {
            let s = app.state.db.status();
            s.size - s.available
        };
        let meanwhile = async {
            // A roll-up is under way, and held up.
            let mut polls = 0;
            while waiting_for_advisory_locks(&observer).await == 0 {
                polls += 1;
                assert!(polls < 3000, "no roll-up started");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            let paid = app.pay_order(&order, &format!("gate-pay-{round}")).await;
            let waiting = waiting_for_advisory_locks(&observer).await;
            // Each request also reads its staff account (a connection for a moment): wait
            // until those reads are over; what is still lent out then is the statistics'.
            let mut polls = 0;
            while in_use() > limit && polls < 500 {
                polls += 1;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            let held_by_stats = in_use();
            observer
                .execute(
                    "SELECT pg_advisory_unlock(stats_day_lock_key($1))",
                    &[&held],
                )
                .await
                .unwrap();
            (paid, waiting, held_by_stats)
        };
        let (answers, (paid, waiting, held_by_stats)) = tokio::join!(stats, meanwhile);
        assert_eq!(
            paid.status.as_u16(),
            200,
            "round {round}: the payment door answered {} while statistics ran: {}",
            paid.status,
            String::from_utf8_lossy(&paid.bytes)
        );
        assert!(
            waiting as usize <= limit,
            "round {round}: {waiting} statistics connections were held up in roll-ups"
        );
        assert!(
            held_by_stats <= limit,
            "round {round}: {held_by_stats} connections of the pool lent to statistics"
        );
        for (path, r) in paths.iter().zip(&answers) {
            assert_eq!(r.status.as_u16(), 200, "round {round}: {path}");
        }
        let outcome: String = observer
            .query_one(
                "SELECT outcome FROM payments WHERE external_id = $1",
                &[&format!("gate-pay-{round}")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(outcome, "applied", "round {round}");
        let rolled: i64 = observer
            .query_one(
                "SELECT count(*) FROM stats_rolled_days WHERE day = $1",
                &[&held],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            rolled, 1,
            "round {round}: the held day was rolled once released"
        );
    }
}
