//! The staff routes the console needs beyond the contract — `GET /api/overview` and the
//! `username` filter of `GET /api/subscribers` — and the console's static files at `/console`.

use axum::{body::Body, http::Method};
use serde_json::{Value, json};

use crate::{
    staff::auth::{assert_bearer_401, assert_problem},
    support::helpers::{TestApp, id, payment_event},
};

/// The overview's row of channel `channel_id`.
fn channel_row(overview: &Value, channel_id: i64) -> Value {
    overview["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == channel_id)
        .cloned()
        .unwrap_or_else(|| panic!("channel {channel_id} in {overview}"))
}

#[tokio::test]
async fn overview_counts_members_seats_revenue_and_what_waits_for_staff() {
    let app = TestApp::spawn().await;
    let empty = app.get("/api/overview").await.expect(200);
    assert_eq!(empty["channels"], json!([]));
    assert_eq!(empty["revenue_30d"], json!([]));
    assert_eq!(
        empty["payments"],
        json!({"needs_review": 0, "refund_pending": 0, "refund_failed": 0})
    );
    assert_eq!(
        empty["effects"],
        json!({"pending": 0, "failed": 0, "paused_no_rights": 0})
    );
    assert_eq!(empty["channels_without_rights"], json!([]));
    assert_eq!(empty["last_sweep"], Value::Null);
    assert_eq!(empty["last_sweep_change_at"], Value::Null);
    assert!(empty["as_of"].is_string());

    let limited = id(&app
        .create_channel(-1_001_000_000_901, json!({"seat_limit": 5}))
        .await);
    let open = id(&app.create_channel(-1_001_000_000_902, json!({})).await);
    let subs: Vec<i64> = {
        let mut v = Vec::new();
        for t in 9_001..=9_005 {
            v.push(id(&app.create_subscriber(t).await));
        }
        v
    };
    // Two paid members of the limited channel (199.00 UAH each), one held seat (a checked-out
    // order), one expired member; one staff grant in the open channel.
    for s in &subs[..2] {
        let order = app.create_order(*s, limited).await;
        app.pay_order(&order, &format!("pay-{s}")).await.expect(200);
    }
    let held = app.create_order(subs[2], limited).await;
    app.checkout(id(&held)).await.expect(200);
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": subs[3], "channel_id": limited, "days": 1}),
        )
        .await
        .expect(201);
    app.patch(
        &format!("/api/memberships/{}", id(&m)),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    app.post(
        "/api/memberships",
        json!({"subscriber_id": subs[4], "channel_id": open, "days": 30}),
    )
    .await
    .expect(201);
    // A payment needing review (amount mismatch) is not revenue.
    let order = app.create_order(subs[4], limited).await;
    let body = payment_event(
        "pay-short",
        order["reference"].as_str().unwrap(),
        100,
        "UAH",
    );
    let r = app.post_signed_webhook(&body).await.expect(200);
    assert_eq!(r["payment"]["outcome"], "needs_review");
    // A dead letter.
    app.db()
        .await
        .execute(
            "UPDATE effects SET status = 'failed', last_error = 'Bad Request: chat not found'
             WHERE id = (SELECT min(id) FROM effects)",
            &[],
        )
        .await
        .unwrap();
    let effects_pending = app.count("effects WHERE status = 'pending'").await;

    let o = app.get("/api/overview").await.expect(200);
    assert_eq!(
        channel_row(&o, limited),
        json!({
            "id": limited, "title": "Channel -1001000000901", "active": true, "seat_limit": 5,
            // Two live members and one valid hold; the expired member holds no seat.
            "seats_taken": 3,
            "members": {"active": 2, "grace": 0, "expired": 1},
        })
    );
    assert_eq!(
        channel_row(&o, open),
        json!({
            "id": open, "title": "Channel -1001000000902", "active": true, "seat_limit": null,
            "seats_taken": null, "members": {"active": 1, "grace": 0, "expired": 0},
        })
    );
    assert_eq!(
        o["revenue_30d"],
        json!([{"currency": "UAH", "amount_minor": 39800, "payments": 2}])
    );
    assert_eq!(o["payments"]["needs_review"], 1);
    assert_eq!(o["effects"]["failed"], 1);
    assert_eq!(o["effects"]["pending"], effects_pending);

    // A sweep run through the API is the last sweep; one that changed a membership dates it.
    app.db()
        .await
        .execute(
            "UPDATE memberships SET expires_at = statement_timestamp() - interval '1 hour'
             WHERE subscriber_id = $1",
            &[&(subs[4] as i32)],
        )
        .await
        .unwrap();
    let report = app.post("/api/sweep", Value::Null).await.expect(200);
    let o = app.get("/api/overview").await.expect(200);
    let last = &o["last_sweep"];
    assert_eq!(last["trigger"], "staff");
    assert_eq!(last["ok"], true);
    assert_eq!(last["report"], report);
    assert!(last["finished_at"].is_string());
    assert!(o["last_sweep_change_at"].is_string(), "{o}");
    assert_eq!(channel_row(&o, open)["members"]["expired"], 1);

    // A payment older than 30 days is not in the revenue.
    app.db()
        .await
        .execute(
            "UPDATE payments SET paid_at = statement_timestamp() - interval '31 days'
             WHERE external_id = $1",
            &[&format!("pay-{}", subs[0])],
        )
        .await
        .unwrap();
    let o = app.get("/api/overview").await.expect(200);
    assert_eq!(
        o["revenue_30d"],
        json!([{"currency": "UAH", "amount_minor": 19900, "payments": 1}])
    );
}

#[tokio::test]
async fn the_sweep_token_and_the_schedule_are_recorded_as_the_last_sweep() {
    let app = TestApp::spawn().await;
    let r = app
        .request(
            Method::POST,
            "/api/sweep",
            &[(
                "authorization",
                &format!("Bearer {}", crate::support::helpers::SWEEP_TOKEN),
            )],
            Body::empty(),
        )
        .await;
    r.expect(200);
    let o = app.get("/api/overview").await.expect(200);
    assert_eq!(o["last_sweep"]["trigger"], "sweep_token");

    let shutdown = subgate::common::shutdown::ShutdownSignal::new();
    let schedule = tokio::spawn(subgate::app::background::sweep_loop(
        app.state.clone(),
        shutdown.clone(),
        std::time::Duration::from_secs(3600),
    ));
    // The first tick is at once.
    for _ in 0..100 {
        let o = app.get("/api/overview").await.expect(200);
        if o["last_sweep"]["trigger"] == "schedule" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    shutdown.trigger();
    schedule.await.unwrap();
    let o = app.get("/api/overview").await.expect(200);
    assert_eq!(o["last_sweep"]["trigger"], "schedule");
    assert_eq!(o["last_sweep"]["ok"], true);
}

#[tokio::test]
async fn the_overview_is_for_staff_only() {
    let app = TestApp::spawn().await;
    let r = app
        .request(Method::GET, "/api/overview", &[], Body::empty())
        .await;
    assert_bearer_401(&r);
    let r = app.get("/api/overview?x=1").await;
    assert_problem(&r, 400);
}

#[tokio::test]
async fn subscribers_are_found_by_username_in_any_case_with_or_without_at() {
    let app = TestApp::spawn().await;
    let ann = app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": 7001, "username": "Ann_K"}),
        )
        .await
        .expect(201);
    app.post(
        "/api/subscribers",
        json!({"telegram_user_id": 7002, "username": "annabel"}),
    )
    .await
    .expect(201);
    app.post("/api/subscribers", json!({"telegram_user_id": 7003}))
        .await
        .expect(201);
    for q in ["Ann_K", "ann_k", "%40ANN_K", "@ann_k"] {
        let page = app
            .get(&format!(
                "/api/subscribers?username={}",
                q.replace('@', "%40")
            ))
            .await
            .expect(200);
        let ids: Vec<i64> = page["items"].as_array().unwrap().iter().map(id).collect();
        assert_eq!(ids, vec![id(&ann)], "username={q}");
    }
    // Exact, not a prefix or a pattern.
    for q in ["ann", "ann%25", "Ann_"] {
        let page = app
            .get(&format!("/api/subscribers?username={q}"))
            .await
            .expect(200);
        assert_eq!(page["items"], json!([]), "username={q}");
    }
    // Combined with the other filter.
    let page = app
        .get("/api/subscribers?username=ann_k&telegram_user_id=7002")
        .await
        .expect(200);
    assert_eq!(page["items"], json!([]));
    for bad in ["", "%40", &"a".repeat(65)] {
        let r = app.get(&format!("/api/subscribers?username={bad}")).await;
        let body = assert_problem(&r, 422);
        assert!(body["errors"]["username"].is_string(), "{bad}: {body}");
    }
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_with_a_strict_policy() {
    let app = TestApp::spawn().await;
    let r = app
        .request(Method::GET, "/console", &[], Body::empty())
        .await;
    assert_eq!(r.status.as_u16(), 308);
    assert_eq!(r.header("location"), Some("/console/"));

    let cases = [
        ("/console/", "text/html; charset=utf-8", "<main id=\"main\""),
        (
            "/console/app.js",
            "text/javascript; charset=utf-8",
            "Idempotency-Key",
        ),
        ("/console/style.css", "text/css; charset=utf-8", "@media"),
        ("/console/favicon.svg", "image/svg+xml", "<svg"),
        ("/console/currencies.json", "application/json", "\"XTR\":0"),
    ];
    for (path, content_type, needle) in cases {
        // No token needed: the files carry no data.
        let r = app.request(Method::GET, path, &[], Body::empty()).await;
        assert_eq!(r.status.as_u16(), 200, "{path}");
        assert_eq!(r.header("content-type"), Some(content_type), "{path}");
        let text = String::from_utf8(r.bytes.clone()).unwrap();
        assert!(text.contains(needle), "{path} lacks {needle}");
        let csp = r.header("content-security-policy").expect("a CSP");
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        assert_eq!(r.header("cache-control"), Some("no-cache"));
        assert!(r.header("x-request-id").is_some());
        // Revalidation: an unchanged file is a 304.
        let etag = r.header("etag").expect("an etag").to_string();
        let again = app
            .request(
                Method::GET,
                path,
                &[("if-none-match", &etag)],
                Body::empty(),
            )
            .await;
        assert_eq!(again.status.as_u16(), 304, "{path}");
        assert!(again.bytes.is_empty());
    }
    let currencies: Value = serde_json::from_slice(
        &app.request(Method::GET, "/console/currencies.json", &[], Body::empty())
            .await
            .bytes,
    )
    .unwrap();
    assert_eq!(currencies["UAH"], 2);
    assert_eq!(currencies["JPY"], 0);
    assert_eq!(currencies["KWD"], 3);

    // No inline script anywhere in the page (the policy would block it).
    let html = String::from_utf8(
        app.request(Method::GET, "/console/", &[], Body::empty())
            .await
            .bytes,
    )
    .unwrap();
    assert!(!html.contains("<script>") && !html.contains(" style="));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "nothing from elsewhere"
    );

    for path in [
        "/console/nope.js",
        "/console/../Cargo.toml",
        "/console/app.js/x",
    ] {
        let r = app.request(Method::GET, path, &[], Body::empty()).await;
        assert_problem(&r, 404);
    }
    let r = app
        .request(Method::POST, "/console/", &[], Body::empty())
        .await;
    assert_problem(&r, 405);
}
