//! Roles: every operation of the OpenAPI document, called with a token of every role, answers
//! 403 exactly where docs/staff.md's table says, and never otherwise; a 403 comes before
//! anything is read, so it is the same for a target that exists and one that does not.

use std::collections::BTreeMap;

use axum::http::Method;
use serde_json::{Value, json};

use crate::{
    ops::openapi::document,
    staff::auth::assert_problem,
    support::helpers::{TestApp, id},
};

const ROLES: [&str; 4] = ["owner", "admin", "support", "viewer"];

fn rank(role: &str) -> usize {
    ROLES.len() - ROLES.iter().position(|r| *r == role).expect("a role")
}

/// Operations anyone may call: login, the payment doors, this document, health and readiness
/// (and the static files of the console and the Mini App's page, every `GET` under `/console`
/// and `/app/` outside `/app/api/`).
const PUBLIC: [&str; 10] = [
    "POST /api/auth/login",
    "POST /api/webhook/payment",
    "POST /api/webhook/wayforpay",
    "POST /api/webhook/telegram",
    "POST /api/webhook/stripe",
    "POST /api/webhook/monobank",
    "POST /api/webhook/cryptopay",
    "GET /api/openapi.json",
    "GET /healthz",
    "GET /readyz",
];

/// The table of docs/staff.md: the least role of each operation that needs more than `viewer`
/// (every other staff operation is `viewer`: every read, and changing one's own password).
fn table() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("GET /api/staff", "owner"),
        ("POST /api/staff", "owner"),
        ("PATCH /api/staff/{id}", "owner"),
        ("DELETE /api/staff/{id}", "owner"),
        ("POST /api/subscribers", "admin"),
        ("PATCH /api/subscribers/{id}", "admin"),
        ("DELETE /api/subscribers/{id}", "admin"),
        ("POST /api/channels", "admin"),
        ("PATCH /api/channels/{id}", "admin"),
        ("DELETE /api/channels/{id}", "admin"),
        ("POST /api/channels/{id}/audit", "admin"),
        ("POST /api/channels/{id}/exemptions", "admin"),
        (
            "DELETE /api/channels/{id}/exemptions/{telegram_user_id}",
            "admin",
        ),
        ("POST /api/plans", "admin"),
        ("PATCH /api/plans/{id}", "admin"),
        ("DELETE /api/plans/{id}", "admin"),
        ("POST /api/memberships", "support"),
        ("PATCH /api/memberships/{id}", "support"),
        ("DELETE /api/memberships/{id}", "admin"),
        ("POST /api/orders", "admin"),
        ("POST /api/orders/{id}/cancel", "support"),
        ("PATCH /api/automations/{kind}", "admin"),
        ("POST /api/broadcasts", "admin"),
        ("POST /api/broadcasts/{id}/cancel", "admin"),
        ("POST /api/orders/{id}/checkout", "admin"),
        ("POST /api/orders/{id}/claim", "admin"),
        ("POST /api/orders/{id}/invoice-link", "admin"),
        ("POST /api/promo-codes", "admin"),
        ("PATCH /api/promo-codes/{id}", "admin"),
        ("POST /api/effects/retry", "support"),
        ("POST /api/effects/{id}/retry", "support"),
        ("POST /api/payments/{id}/refund", "admin"),
        ("POST /api/star-subscriptions/{id}/cancel", "admin"),
        ("PATCH /api/referral-program", "admin"),
        ("PUT /api/plans/{id}/referral", "admin"),
        ("DELETE /api/plans/{id}/referral", "admin"),
        ("POST /api/affiliates", "admin"),
        ("PATCH /api/affiliates/{id}", "admin"),
        ("POST /api/payouts", "admin"),
        ("POST /api/webhook-endpoints", "admin"),
        ("PATCH /api/webhook-endpoints/{id}", "admin"),
        ("DELETE /api/webhook-endpoints/{id}", "admin"),
        ("POST /api/webhook-endpoints/{id}/rotate", "admin"),
        ("POST /api/webhook-deliveries/{id}/replay", "admin"),
        ("GET /api/audit-log", "admin"),
        ("POST /api/sweep", "admin"),
    ])
}

/// Every operation of the document as `METHOD path`, with its operation object.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if ["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                ops.push((method.to_uppercase(), path.clone(), op.clone()));
            }
        }
    }
    ops
}

/// The path with every parameter filled in with an id no record has.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|s| if s.starts_with('{') { "987654321" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn every_operation_enforces_its_declared_role() {
    let app = TestApp::spawn().await;
    let doc = document();
    let table = table();
    let mut tokens = Vec::new();
    for role in ROLES {
        tokens.push((role, app.token_of_role(role).await));
    }
    let mut checked = 0;
    for (method, path, op) in operations(&doc) {
        let name = format!("{method} {path}");
        let declared = op.get("x-required-role").and_then(Value::as_str);
        let staff = op["security"].to_string().contains("staff_jwt");
        // The console's files and the Mini App's page, and the Mini App's buyer API (Telegram's
        // `initData`, no staff).
        let page = path.starts_with("/console")
            || (path.starts_with("/app") && !path.starts_with("/app/api/"));
        if PUBLIC.contains(&name.as_str())
            || (method == "GET" && page)
            || path.starts_with("/app/api/")
        {
            assert!(declared.is_none() && !staff, "{name} is public");
            continue;
        }
        assert!(staff, "{name}: neither public nor a staff operation");
        let expected = table.get(name.as_str()).copied().unwrap_or("viewer");
        assert_eq!(
            declared,
            Some(expected),
            "{name}: x-required-role differs from the table"
        );
        let documents_403 = op["responses"].get("403").is_some();
        assert_eq!(
            documents_403,
            expected != "viewer",
            "{name}: 403 documented"
        );
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        for (role, token) in &tokens {
            let auth = format!("Bearer {token}");
            let r = app
                .request(
                    method.clone(),
                    &concrete(&path),
                    &[
                        ("authorization", auth.as_str()),
                        ("content-type", "application/json"),
                    ],
                    "{}",
                )
                .await;
            if rank(role) < rank(expected) {
                let body = assert_problem(&r, 403);
                assert_eq!(body["type"], "/problems/forbidden", "{name} as {role}");
            } else {
                assert!(
                    ![401, 403].contains(&r.status.as_u16()) && r.status.as_u16() < 500,
                    "{name} as {role}: {} {}",
                    r.status,
                    String::from_utf8_lossy(&r.bytes)
                );
            }
            checked += 1;
        }
    }
    // Every operation of the table exists, so a renamed route cannot leave it unchecked.
    let all: Vec<String> = operations(&doc)
        .iter()
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect();
    for name in table.keys() {
        assert!(
            all.iter().any(|n| n == name),
            "{name} is in the table but not routed"
        );
    }
    assert!(checked > 200, "{checked} calls");
}

#[tokio::test]
async fn a_refusal_says_nothing_of_whether_the_target_exists() {
    let app = TestApp::spawn().await;
    let channel = app.create_channel(-1001234, json!({})).await;
    let viewer = format!("Bearer {}", app.token_of_role("viewer").await);
    let headers = [("authorization", viewer.as_str())];
    let existing = app
        .request(
            Method::DELETE,
            &format!("/api/channels/{}", id(&channel)),
            &headers,
            "",
        )
        .await;
    let missing = app
        .request(Method::DELETE, "/api/channels/987654321", &headers, "")
        .await;
    let malformed = app
        .request(Method::DELETE, "/api/channels/not-a-number", &headers, "")
        .await;
    for r in [&existing, &missing, &malformed] {
        assert_problem(r, 403);
    }
    assert_eq!(existing.bytes, missing.bytes);
    assert_eq!(existing.bytes, malformed.bytes);
    assert_eq!(app.count("channels").await, 1, "nothing was deleted");
    // A support account may grant days but not delete a membership.
    let support = format!("Bearer {}", app.token_of_role("support").await);
    let r = app
        .request(
            Method::POST,
            "/api/channels",
            &[
                ("authorization", support.as_str()),
                ("content-type", "application/json"),
            ],
            json!({"telegram_chat_id": -1009, "title": "x", "price_minor": 100,
                "currency": "UAH", "billing_period_days": 30})
            .to_string(),
        )
        .await;
    let body = assert_problem(&r, 403);
    assert!(body["detail"].as_str().unwrap().contains("admin"), "{body}");
    assert_eq!(app.count("channels").await, 1);
}

#[tokio::test]
async fn a_head_request_reads_like_a_get() {
    let app = TestApp::spawn().await;
    let viewer = format!("Bearer {}", app.token_of_role("viewer").await);
    for path in ["/api/channels", "/api/stats/summary", "/api/overview"] {
        let r = app
            .request(
                Method::HEAD,
                path,
                &[("authorization", viewer.as_str())],
                "",
            )
            .await;
        assert_eq!(r.status.as_u16(), 200, "HEAD {path}");
    }
}
