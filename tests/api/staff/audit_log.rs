//! The audit log: every staff write leaves one row in its own transaction (a refused or
//! rolled-back write leaves none, a replayed one no second), the command line's staff changes
//! too, filterable, and never editable.

use axum::http::Method;
use serde_json::{Value, json};

use crate::{
    ops::cli::{run, subgate, text},
    staff::auth::assert_problem,
    support::helpers::{ADMIN_EMAIL, JWT_SECRET, TestApp, id, url_for},
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

/// Runs `subgate` with `args` and `vars`, `password` on its standard input.
async fn cli(vars: &[(&str, &str)], args: &[&str], password: &str) -> std::process::Output {
    run(subgate(args, vars), Some(password)).await
}

/// `subgate staff create` and `subgate staff set-password` leave one row each, the command
/// line's (`actor` `cli`, no account, no request); a refused command leaves none, and the schema
/// refuses a row that mixes the two kinds of actor.
#[tokio::test]
async fn staff_changes_from_the_command_line_are_recorded_as_the_command_line_s() {
    let app = TestApp::spawn().await;
    let url = url_for(&app.db_name);
    let vars = [
        ("DATABASE_URL", url.as_str()),
        ("JWT_SECRET", JWT_SECRET),
        ("BCRYPT_COST", "4"),
    ];
    let create = [
        "staff",
        "create",
        "--email",
        "cli@example.com",
        "--role",
        "support",
    ];
    let out = cli(&vars, &create, "a long support passphrase\n").await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cli(
        &vars,
        &["staff", "set-password", "--email", "cli@example.com"],
        "another support passphrase\n",
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Refused: the email again, an unknown account, a weak password.
    assert!(
        !cli(&vars, &create, "a third support passphrase\n")
            .await
            .status
            .success()
    );
    for (args, password) in [
        (
            &["staff", "set-password", "--email", "nobody@example.com"][..],
            "long enough password\n",
        ),
        (
            &["staff", "set-password", "--email", "cli@example.com"][..],
            "short\n",
        ),
    ] {
        assert!(
            !cli(&vars, args, password).await.status.success(),
            "{args:?}"
        );
    }

    let account: i64 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM staff_accounts WHERE email = 'cli@example.com'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let rows = app
        .get("/api/audit-log?target_type=staff")
        .await
        .expect(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for (row, action) in rows.iter().zip(["staff.create", "staff.change_password"]) {
        assert_eq!(row["action"], action);
        assert_eq!(row["actor"], "cli", "{row}");
        assert_eq!(row["staff_id"], Value::Null, "{row}");
        assert_eq!(row["staff_email"], Value::Null, "{row}");
        assert_eq!(row["request_id"], Value::Null, "{row}");
        assert_eq!(row["target_id"], account, "{row}");
        assert_eq!(row["before"], Value::Null, "{row}");
        assert!(!row.to_string().contains("passphrase"), "{row}");
    }
    assert_eq!(rows[0]["after"]["email"], "cli@example.com");
    assert_eq!(rows[0]["after"]["role"], "support");
    assert_eq!(rows[1]["after"], Value::Null);
    // A staff write through the API is the staff's, as before.
    app.post("/api/subscribers", json!({"telegram_user_id": 5151}))
        .await
        .expect(201);
    let staff_row = &app
        .get("/api/audit-log?action=subscriber.create")
        .await
        .expect(200)["items"][0];
    assert_eq!(staff_row["actor"], "staff");
    assert_eq!(staff_row["staff_email"], ADMIN_EMAIL);
    // Filtering by account leaves the command line's rows out.
    let by_admin = app
        .get(&format!(
            "/api/audit-log?staff_id={}",
            staff_row["staff_id"]
        ))
        .await
        .expect(200);
    assert_eq!(by_admin["items"].as_array().unwrap().len(), 1);

    let db = app.db().await;
    for sql in [
        "INSERT INTO audit_log (actor, staff_id, staff_email, action, target_type)
         VALUES ('cli', 1, 'a@example.com', 'staff.create', 'staff')",
        "INSERT INTO audit_log (actor, action, target_type)
         VALUES ('staff', 'staff.create', 'staff')",
        "INSERT INTO audit_log (actor, action, target_type)
         VALUES ('robot', 'staff.create', 'staff')",
    ] {
        let e = db.execute(sql, &[]).await.expect_err(sql);
        assert_eq!(
            e.as_db_error().map(|d| d.constraint()),
            Some(Some("audit_log_actor_check")),
            "{sql}: {e}"
        );
    }
}
