//! Staff accounts: the owner creates, changes, disables and deletes them; never the last owner,
//! even when owners remove each other at the same moment; a role change, a disabling and a
//! password change end the account's tokens at once; `subgate staff create --role`.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};

use crate::{
    ops::cli::{run, subgate, text},
    staff::auth::{assert_bearer_401, assert_problem},
    support::{
        helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp, TestResponse, id, url_for},
        race::race,
        rows::count,
    },
};

/// A request with `token` as the bearer.
async fn call(app: &TestApp, token: &str, method: Method, path: &str, body: Value) -> TestResponse {
    let auth = format!("Bearer {token}");
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    app.request(
        method,
        path,
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body,
    )
    .await
}

async fn login_token(app: &TestApp, email: &str, password: &str) -> String {
    app.login(email, password).await.expect(200)["access_token"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn audit_rows(app: &TestApp, action: &str) -> Vec<tokio_postgres::Row> {
    app.db()
        .await
        .query(
            "SELECT * FROM audit_log WHERE action = $1 ORDER BY id",
            &[&action],
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn the_owner_creates_lists_and_changes_accounts_with_clear_refusals() {
    let app = TestApp::spawn().await;
    let created = app
        .staff_with(
            Method::POST,
            "/api/staff",
            json!({"email": " Support@Example.com ", "role": "support",
                "password": "a long support passphrase"}),
            &[("x-request-id", "create-support-1")],
        )
        .await
        .expect(201);
    assert_eq!(created["email"], "support@example.com");
    assert_eq!(created["role"], "support");
    assert_eq!(created["disabled"], false);
    assert!(created.get("password_hash").is_none() && created.get("password").is_none());
    let sid = id(&created);

    // Refusals: a second account with one email (any case), an unknown role, weak and
    // over-long passwords, missing fields. None creates anything.
    let refusals = [
        (
            json!({"email": "SUPPORT@example.com", "role": "viewer", "password": "another long passphrase"}),
            409,
            None,
        ),
        (
            json!({"email": "x@example.com", "role": "root", "password": "another long passphrase"}),
            422,
            Some("role"),
        ),
        (
            json!({"email": "x@example.com", "role": "viewer", "password": "password123"}),
            422,
            Some("password"),
        ),
        (
            json!({"email": "x@example.com", "role": "viewer", "password": "aaaaaaaaaaaa"}),
            422,
            Some("password"),
        ),
        (
            json!({"email": "x@example.com", "role": "viewer", "password": "x".repeat(73)}),
            422,
            Some("password"),
        ),
        (
            json!({"email": "x@example.com", "role": "viewer", "password": "x2024!"}),
            422,
            Some("password"),
        ),
        (
            json!({"email": "not-an-email", "role": "viewer", "password": "another long passphrase"}),
            422,
            Some("email"),
        ),
        (json!({}), 422, Some("role")),
    ];
    for (body, status, field) in refusals {
        let r = app.post("/api/staff", body.clone()).await;
        let problem = assert_problem(&r, status);
        if let Some(field) = field {
            assert!(problem["errors"][field].is_string(), "{body}: {problem}");
        }
    }
    assert_eq!(app.count("staff_accounts").await, 2);

    let list = app.get("/api/staff").await.expect(200);
    let emails: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["email"].as_str().unwrap())
        .collect();
    assert_eq!(emails, [ADMIN_EMAIL, "support@example.com"]);
    assert_eq!(list["items"][0]["role"], "owner", "ADMIN_EMAIL is an owner");

    // Changes: an unknown role is 422, an unknown account 404.
    for body in [
        json!({"role": "boss"}),
        json!({"role": "viewer", "disabled": null}),
    ] {
        let r = app.patch(&format!("/api/staff/{sid}"), body.clone()).await;
        assert_problem(&r, 422);
    }
    let r = app
        .patch("/api/staff/987654321", json!({"role": "viewer"}))
        .await;
    assert_problem(&r, 404);
    let changed = app
        .patch(&format!("/api/staff/{sid}"), json!({"role": "admin"}))
        .await
        .expect(200);
    assert_eq!(changed["role"], "admin");

    // Both writes are in the audit log, with who, before, after and the request id.
    let rows = audit_rows(&app, "staff.create").await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.get::<_, String>("staff_email"), ADMIN_EMAIL);
    assert_eq!(row.get::<_, Option<i64>>("target_id"), Some(sid));
    assert_eq!(
        row.get::<_, Option<String>>("request_id").as_deref(),
        Some("create-support-1")
    );
    assert!(row.get::<_, Option<Value>>("before").is_none());
    let after: Value = row.get("after");
    assert_eq!(after["role"], "support");
    assert!(!after.to_string().contains("passphrase") && !after.to_string().contains("$2"));
    let rows = audit_rows(&app, "staff.update").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, Value>("before")["role"], "support");
    assert_eq!(rows[0].get::<_, Value>("after")["role"], "admin");
}

#[tokio::test]
async fn a_role_change_or_a_disabling_ends_the_account_s_tokens_at_once() {
    let app = TestApp::spawn().await;
    let email = "helper@example.com";
    let password = "the helper passphrase";
    let account = app
        .post(
            "/api/staff",
            json!({"email": email, "role": "support", "password": password}),
        )
        .await
        .expect(201);
    let path = format!("/api/staff/{}", id(&account));
    let support = login_token(&app, email, password).await;
    call(&app, &support, Method::GET, "/api/channels", Value::Null)
        .await
        .expect(200);

    // Demoted: the old token is refused at once; a new login carries the new role.
    app.patch(&path, json!({"role": "viewer"}))
        .await
        .expect(200);
    assert_bearer_401(&call(&app, &support, Method::GET, "/api/channels", Value::Null).await);
    let viewer = login_token(&app, email, password).await;
    let grant = json!({"subscriber_id": 1, "channel_id": 1, "days": 3});
    assert_problem(
        &call(&app, &viewer, Method::POST, "/api/memberships", grant).await,
        403,
    );
    // A change that changes nothing ends nothing.
    app.patch(&path, json!({"role": "viewer", "disabled": false}))
        .await
        .expect(200);
    call(&app, &viewer, Method::GET, "/api/channels", Value::Null)
        .await
        .expect(200);

    // Disabled: the token is refused at once, and login answers like a wrong password.
    app.patch(&path, json!({"disabled": true}))
        .await
        .expect(200);
    assert_bearer_401(&call(&app, &viewer, Method::GET, "/api/channels", Value::Null).await);
    let disabled = app.login(email, password).await;
    let wrong = app.login(email, "not the password at all").await;
    assert_bearer_401(&disabled);
    assert_eq!(disabled.bytes, wrong.bytes);
    // Enabled again: logs in again.
    app.patch(&path, json!({"disabled": false}))
        .await
        .expect(200);
    login_token(&app, email, password).await;
}

#[tokio::test]
async fn the_last_owner_cannot_be_deleted_demoted_or_disabled() {
    let app = TestApp::spawn().await;
    let admin = app.get("/api/staff").await.expect(200)["items"][0].clone();
    let path = format!("/api/staff/{}", id(&admin));
    for (method, body) in [
        (Method::DELETE, Value::Null),
        (Method::PATCH, json!({"role": "admin"})),
        (Method::PATCH, json!({"disabled": true})),
    ] {
        let r = app.staff(method.clone(), &path, body.clone()).await;
        let problem = assert_problem(&r, 409);
        assert!(
            problem["detail"].as_str().unwrap().contains("last"),
            "{method} {body}: {problem}"
        );
    }
    let row = app
        .db()
        .await
        .query_one(
            "SELECT role, disabled FROM staff_accounts WHERE id = $1",
            &[&id(&admin)],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>("role"), "owner");
    assert!(!row.get::<_, bool>("disabled"));
    // A disabled owner does not count: with one, the enabled owner is still the last.
    let other = app
        .post(
            "/api/staff",
            json!({"email": "second@example.com", "role": "owner", "password": "the second passphrase"}),
        )
        .await
        .expect(201);
    app.patch(
        &format!("/api/staff/{}", id(&other)),
        json!({"disabled": true}),
    )
    .await
    .expect(200);
    assert_problem(&app.delete(&path).await, 409);
    // Re-enabled, it is another owner: now the first may go.
    app.patch(
        &format!("/api/staff/{}", id(&other)),
        json!({"disabled": false}),
    )
    .await
    .expect(200);
    app.delete(&path).await.expect(204);
    assert_eq!(audit_rows(&app, "staff.delete").await.len(), 1);
    // The deleted account's audit rows stay.
    let n: i64 = count(&app, "audit_log WHERE staff_id = $1", &[&id(&admin)]).await;
    assert!(n >= 4, "{n}");
}

/// Two owners remove each other at the same moment, by every means, many times: one of the
/// two changes wins, the other is refused, and an enabled owner always remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owners_removing_each_other_at_once_always_leave_an_owner() {
    let app = Arc::new(TestApp::spawn().await);
    let removals = [
        (Method::DELETE, Value::Null),
        (Method::PATCH, json!({"role": "support"})),
        (Method::PATCH, json!({"disabled": true})),
    ];
    for round in 0..12 {
        // Exactly two enabled owners: every earlier account steps down to viewer first.
        app.db()
            .await
            .execute("UPDATE staff_accounts SET role = 'viewer'", &[])
            .await
            .unwrap();
        let mut owners = Vec::new();
        for n in 0..2 {
            let email = format!("owner{round}-{n}@example.com");
            let password = format!("owner passphrase {round} {n}");
            subgate::staff::accounts::create_staff(
                &app.state.db,
                &email,
                &password,
                subgate::staff::Role::Owner,
                4,
            )
            .await
            .unwrap();
            let token = login_token(&app, &email, &password).await;
            let id: i64 = app
                .db()
                .await
                .query_one("SELECT id FROM staff_accounts WHERE email = $1", &[&email])
                .await
                .unwrap()
                .get(0);
            owners.push((id, token));
        }
        // Each owner removes the other.
        let mut statuses = race(2, |me| {
            let app = app.clone();
            let token = owners[me].1.clone();
            let target = owners[1 - me].0;
            let (method, body) = removals[(round + me) % removals.len()].clone();
            async move {
                call(&app, &token, method, &format!("/api/staff/{target}"), body)
                    .await
                    .status
                    .as_u16()
            }
        })
        .await;
        statuses.sort();
        // The loser is refused as the last owner (409) or, when the winner ended its token
        // first, as no longer logged in (401); never both through.
        assert!(
            statuses[0] < 300 && [401, 409].contains(&statuses[1]),
            "round {round}: {statuses:?}"
        );
        let enabled_owners: i64 = app
            .count("staff_accounts WHERE role = 'owner' AND NOT disabled")
            .await;
        assert_eq!(enabled_owners, 1, "round {round}");
    }
}

#[tokio::test]
async fn a_password_change_checks_the_current_one_and_ends_every_other_token() {
    let app = TestApp::spawn().await;
    let old_token = app.token().await;
    let other_session = login_token(&app, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let path = "/api/auth/password";
    for (body, field) in [
        (
            json!({"current_password": "not it at all", "new_password": "a brand new passphrase"}),
            "current_password",
        ),
        (
            json!({"current_password": ADMIN_PASSWORD, "new_password": "12345678"}),
            "new_password",
        ),
        (
            json!({"current_password": ADMIN_PASSWORD, "new_password": "y".repeat(73)}),
            "new_password",
        ),
        (json!({"current_password": ADMIN_PASSWORD}), "new_password"),
    ] {
        let problem = assert_problem(&app.post(path, body.clone()).await, 422);
        assert!(problem["errors"][field].is_string(), "{body}: {problem}");
    }
    // Nothing changed so far.
    call(
        &app,
        &other_session,
        Method::GET,
        "/api/channels",
        Value::Null,
    )
    .await
    .expect(200);

    let answer = app
        .post(
            path,
            json!({"current_password": ADMIN_PASSWORD, "new_password": "a brand new passphrase"}),
        )
        .await
        .expect(200);
    let fresh = answer["access_token"].as_str().unwrap();
    for old in [&old_token, &other_session] {
        assert_bearer_401(&call(&app, old, Method::GET, "/api/channels", Value::Null).await);
    }
    call(&app, fresh, Method::GET, "/api/channels", Value::Null)
        .await
        .expect(200);
    assert_bearer_401(&app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await);
    login_token(&app, ADMIN_EMAIL, "a brand new passphrase").await;
    let rows = audit_rows(&app, "staff.change_password").await;
    assert_eq!(rows.len(), 1);
    assert!(rows[0].get::<_, Option<Value>>("after").is_none());
}

#[tokio::test]
async fn the_cli_creates_an_account_of_a_role() {
    let app = TestApp::spawn().await;
    let url = url_for(&app.db_name);
    let vars = [
        ("DATABASE_URL", url.as_str()),
        ("JWT_SECRET", JWT_SECRET),
        ("BCRYPT_COST", "4"),
    ];
    let password = "a long viewer passphrase";
    let out = run(
        subgate(
            &[
                "staff",
                "create",
                "--email",
                "v@example.com",
                "--role",
                "viewer",
            ],
            &vars,
        ),
        Some(&format!("{password}\n")),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let token = login_token(&app, "v@example.com", password).await;
    call(&app, &token, Method::GET, "/api/channels", Value::Null)
        .await
        .expect(200);
    assert_problem(
        &call(&app, &token, Method::GET, "/api/staff", Value::Null).await,
        403,
    );
    // An unknown role is refused before a password is read; nothing is created.
    let out = run(
        subgate(
            &[
                "staff",
                "create",
                "--email",
                "w@example.com",
                "--role",
                "root",
            ],
            &vars,
        ),
        None,
    )
    .await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("root"), "{}", text(&out.stderr));
    assert_eq!(app.count("staff_accounts").await, 2);
}
