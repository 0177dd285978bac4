//! The audit log: every staff write leaves one row in its own transaction (a refused or
//! rolled-back write leaves none, a replayed one no second), filterable, and never editable.

use axum::http::Method;
use serde_json::{Value, json};

use crate::{
    auth::assert_problem,
    helpers::{ADMIN_EMAIL, TestApp, id},
};

async fn actions(app: &TestApp) -> Vec<String> {
    app.get("/api/audit-log?limit=200").await.expect(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn staff_writes_are_recorded_with_before_and_after_and_filtered() {
    let app = TestApp::spawn().await;
    let channel = app
        .create_channel(-100_777, json!({"title": "Signals"}))
        .await;
    let cid = id(&channel);
    let subscriber = app.create_subscriber(4242).await;
    app.patch(
        &format!("/api/channels/{cid}"),
        json!({"price_minor": 25_000}),
    )
    .await
    .expect(200);
    let grant = json!({"subscriber_id": id(&subscriber), "channel_id": cid, "days": 7});
    // With an Idempotency-Key, twice: one write, one row.
    for _ in 0..2 {
        app.staff_with(
            Method::POST,
            "/api/memberships",
            grant.clone(),
            &[
                ("idempotency-key", "grant-once"),
                ("x-request-id", "grant-req"),
            ],
        )
        .await;
    }
    // Refused writes leave nothing: a 422, a 409, a 404.
    assert_problem(
        &app.patch(&format!("/api/channels/{cid}"), json!({"price_minor": -1}))
            .await,
        422,
    );
    assert_problem(
        &app.post("/api/subscribers", json!({"telegram_user_id": 4242}))
            .await,
        409,
    );
    assert_problem(&app.delete("/api/channels/987654321").await, 404);
    // The channel has a membership: its delete is refused (409) and rolls back.
    assert_problem(&app.delete(&format!("/api/channels/{cid}")).await, 409);

    assert_eq!(
        actions(&app).await,
        [
            "channel.create",
            "subscriber.create",
            "channel.update",
            "membership.grant"
        ]
    );
    let page = app
        .get("/api/audit-log?action=channel.update")
        .await
        .expect(200);
    let rows = page["items"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row["staff_email"], ADMIN_EMAIL);
    assert_eq!(row["target_type"], "channel");
    assert_eq!(row["target_id"], cid);
    assert_eq!(row["before"]["price_minor"], channel["price_minor"]);
    assert_eq!(row["after"]["price_minor"], 25_000);
    assert!(row["request_id"].as_str().is_some_and(|r| !r.is_empty()));

    let grant_row = &app
        .get(&format!(
            "/api/audit-log?target_type=membership&staff_id={}",
            row["staff_id"]
        ))
        .await
        .expect(200)["items"][0];
    assert_eq!(grant_row["request_id"], "grant-req");
    assert_eq!(grant_row["before"], Value::Null, "a new membership");
    assert_eq!(grant_row["after"]["days"], 7);

    let by_target = app
        .get(&format!(
            "/api/audit-log?target_type=channel&target_id={cid}"
        ))
        .await
        .expect(200);
    assert_eq!(by_target["items"].as_array().unwrap().len(), 2);
    let later = app
        .get("/api/audit-log?from=2999-01-01T00:00:00Z")
        .await
        .expect(200);
    assert!(later["items"].as_array().unwrap().is_empty());
    let earlier = app
        .get("/api/audit-log?to=2000-01-01T00:00:00Z")
        .await
        .expect(200);
    assert!(earlier["items"].as_array().unwrap().is_empty());
    // Paging: the usual envelope.
    let first = app.get("/api/audit-log?limit=1").await.expect(200);
    assert_eq!(first["items"].as_array().unwrap().len(), 1);
    let next = first["next_after"].as_i64().unwrap();
    let second = app
        .get(&format!("/api/audit-log?limit=1&after={next}"))
        .await
        .expect(200);
    assert_eq!(second["items"][0]["action"], "subscriber.create");
    // Bad filters.
    assert_problem(
        &app.get("/api/audit-log?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z")
            .await,
        422,
    );
    assert_problem(&app.get("/api/audit-log?from=yesterday").await, 400);
    assert_problem(&app.get("/api/audit-log?colour=red").await, 400);
}

#[tokio::test]
async fn the_audit_log_cannot_be_changed_or_emptied() {
    let app = TestApp::spawn().await;
    app.create_subscriber(77).await;
    let db = app.db().await;
    for sql in [
        "UPDATE audit_log SET staff_email = 'someone@else.example'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ] {
        let e = db.execute(sql, &[]).await.expect_err(sql);
        let message = e.as_db_error().map(|d| d.message().to_string());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("never changed")),
            "{sql}: {message:?}"
        );
    }
    assert_eq!(app.count("audit_log").await, 1);
    // No route writes it: only GET exists.
    let r = app.post("/api/audit-log", json!({})).await;
    assert_problem(&r, 405);
}
