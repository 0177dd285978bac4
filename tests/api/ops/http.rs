//! Operations basics over HTTP: every response carries a request id, unknown routes and methods
//! are problem+json, an oversized body is 413, a request past the timeout is 503, health and
//! readiness, and no foundation route answers 5xx to malformed input.

use std::time::{Duration, Instant};

use axum::{body::Body, http::Method};
use serde_json::json;

use crate::{staff::auth::assert_problem, support::helpers::TestApp};

fn is_uuid(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok()
}

// ---------------------------------------------------------------- request ids, routes

/// method, path, headers, body, expected status.
type Case<'a> = (Method, &'a str, Vec<(&'a str, &'a str)>, &'a str, u16);

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let app = TestApp::spawn().await;
    let token = format!("Bearer {}", app.token().await);
    let cases: Vec<Case> = vec![
        (Method::GET, "/healthz", vec![], "", 200),
        (Method::GET, "/readyz", vec![], "", 200),
        (
            Method::GET,
            "/api/subscribers",
            vec![("authorization", &token)],
            "",
            200,
        ),
        (Method::GET, "/api/subscribers", vec![], "", 401),
        (
            Method::GET,
            "/api/subscribers/999",
            vec![("authorization", &token)],
            "",
            404,
        ),
        (
            Method::POST,
            "/api/subscribers",
            vec![("authorization", &token)],
            "{}",
            422,
        ),
        (
            Method::POST,
            "/api/subscribers",
            vec![("authorization", &token)],
            "{",
            400,
        ),
        (Method::GET, "/no/such/route", vec![], "", 404),
        (
            Method::POST,
            "/api/auth/login",
            vec![],
            r#"{"email":"a@b.c","password":"x"}"#,
            401,
        ),
    ];
    let mut seen = std::collections::HashSet::new();
    for (method, path, headers, body, status) in &cases {
        let r = app
            .request(method.clone(), path, headers, body.to_string())
            .await;
        assert_eq!(r.status.as_u16(), *status, "{method} {path}");
        let id = r
            .header("x-request-id")
            .unwrap_or_else(|| panic!("{method} {path}: no id"));
        assert!(is_uuid(id), "{method} {path}: generated id {id:?}");
        assert!(seen.insert(id.to_string()), "ids are unique");

        // A request id the client sends is echoed.
        let mut with_id = headers.clone();
        with_id.push(("x-request-id", "client-chosen-id-42"));
        let r = app
            .request(method.clone(), path, &with_id, body.to_string())
            .await;
        assert_eq!(r.status.as_u16(), *status);
        assert_eq!(
            r.header("x-request-id"),
            Some("client-chosen-id-42"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problem_json() {
    let app = TestApp::spawn().await;
    for path in ["/", "/nope", "/api", "/api/nope", "/api/subscribers/1/nope"] {
        let r = app.request(Method::GET, path, &[], Body::empty()).await;
        assert_problem(&r, 404);
        assert!(r.header("x-request-id").is_some());
    }
    // A known path with a method it does not serve: 405 with Allow, as a problem document.
    let token = format!("Bearer {}", app.token().await);
    let r = app
        .request(
            Method::PUT,
            "/api/subscribers",
            &[("authorization", &token)],
            Body::empty(),
        )
        .await;
    assert_problem(&r, 405);
    let allow = r.header("allow").expect("Allow header");
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    assert!(r.header("x-request-id").is_some());
}

#[tokio::test]
async fn oversized_body_is_413() {
    let app = TestApp::spawn().await;
    let big = json!({"email": "a@example.com", "password": "x".repeat(300 * 1024)}).to_string();
    let r = app
        .request(
            Method::POST,
            "/api/auth/login",
            &[("content-type", "application/json")],
            big.clone(),
        )
        .await;
    assert_problem(&r, 413);
    let token = format!("Bearer {}", app.token().await);
    let r = app
        .request(
            Method::PATCH,
            "/api/subscribers/1",
            &[("authorization", &token)],
            big,
        )
        .await;
    assert_problem(&r, 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_timeout_is_503_problem_json() {
    let app = TestApp::spawn_with(|env| {
        env.insert("REQUEST_TIMEOUT_SECS".into(), "1".into());
    })
    .await;
    let s = app.create_subscriber(1).await;
    let sid = s["id"].as_i64().unwrap() as i32;
    // Hold the subscriber's row lock so the PATCH waits past the request timeout.
    let mut holder = app.db().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM subscribers WHERE id = $1 FOR UPDATE",
        &[&sid],
    )
    .await
    .unwrap();
    let started = Instant::now();
    let r = app
        .patch(
            &format!("/api/subscribers/{sid}"),
            json!({"username": "late"}),
        )
        .await;
    assert_problem(&r, 503);
    assert!(r.header("x-request-id").is_some());
    assert!(started.elapsed() < Duration::from_secs(5));
    tx.rollback().await.unwrap();
    // The abandoned request changed nothing, and the service goes on.
    let got = app
        .get(&format!("/api/subscribers/{sid}"))
        .await
        .expect(200);
    assert_eq!(got["username"], s["username"]);
    app.patch(
        &format!("/api/subscribers/{sid}"),
        json!({"username": "now"}),
    )
    .await
    .expect(200);
}

// ---------------------------------------------------------------- health and readiness

#[tokio::test]
async fn healthz_and_readyz() {
    let app = TestApp::spawn().await;
    let r = app
        .request(Method::GET, "/healthz", &[], Body::empty())
        .await;
    assert_eq!(r.expect(200), json!({"status": "ok"}));
    let r = app
        .request(Method::GET, "/readyz", &[], Body::empty())
        .await;
    assert_eq!(r.expect(200), json!({"status": "ready"}));
    // No credentials needed.
    assert_eq!(r.header("content-type"), Some("application/json"));
}

// ---------------------------------------------------------------- malformed input

/// Bodies a careless or hostile client might send.
fn malformed_bodies() -> Vec<Vec<u8>> {
    let mut bodies: Vec<Vec<u8>> = [
        "",
        "{",
        "}",
        "null",
        "[]",
        "0",
        "\"text\"",
        "{\"a\":1}",
        "{\"id\": 1}",
        "{\"telegram_user_id\": 1e400}",
        "{\"telegram_user_id\": 18446744073709551616}",
        "{\"telegram_user_id\": -9223372036854775808}",
        "{\"telegram_chat_id\": 9223372036854775807, \"title\": \"t\", \"price_minor\": 9223372036854775807, \"currency\": \"UAH\", \"billing_period_days\": 2147483647}",
        "{\"subscriber_id\": 2147483647, \"channel_id\": -2147483648, \"days\": 3660}",
        "{\"username\": \"\\u0000\", \"title\": \"\\u0000\", \"display_name\": \"\\ud800\"}",
        "{\"expires_at\": \"0000-01-01T00:00:00Z\"}",
        "{\"expires_at\": \"9999-12-31T23:59:59Z\", \"status\": \"active\"}",
        "{\"expires_at\": \"2024-02-30T00:00:00Z\"}",
        "{\"email\": \"\\u0000\", \"password\": \"\\u0000\"}",
        "{\"email\": [], \"password\": {}}",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    bodies.push(vec![0xff, 0xfe, b'{', b'}']);
    bodies.push(format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes());
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_foundation_route_answers_5xx_to_malformed_input() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(1).await["id"].as_i64().unwrap();
    let c = app.create_channel(-1, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": 1}),
        )
        .await
        .expect(201)["id"]
        .as_i64()
        .unwrap();
    let token = format!("Bearer {}", app.token().await);
    let mut routes: Vec<(Method, String)> = vec![(Method::POST, "/api/auth/login".into())];
    for (collection, id) in [("subscribers", s), ("channels", c), ("memberships", m)] {
        routes.push((Method::POST, format!("/api/{collection}")));
        for item in [
            id.to_string(),
            "0".into(),
            "-1".into(),
            "99999999999999999999".into(),
            "%00".into(),
            "%F0%28".into(),
        ] {
            routes.push((Method::PATCH, format!("/api/{collection}/{item}")));
            routes.push((Method::GET, format!("/api/{collection}/{item}")));
        }
    }
    for (method, path) in &routes {
        for body in malformed_bodies() {
            let r = app
                .request(
                    method.clone(),
                    path,
                    &[
                        ("authorization", &token),
                        ("content-type", "application/json"),
                    ],
                    body.clone(),
                )
                .await;
            assert!(
                r.status.as_u16() < 500,
                "{method} {path} {:?} → {}: {}",
                String::from_utf8_lossy(&body[..body.len().min(80)]),
                r.status,
                String::from_utf8_lossy(&r.bytes)
            );
        }
    }
    for query in [
        "limit=99999999999999999999",
        "after=-99999999999999999999",
        "after=9223372036854775807",
        "limit=%00",
        "telegram_user_id=%00",
        "status=%00",
        "subscriber_id=2147483648",
        "active=%FF",
        "=",
        "&&&",
        "limit",
    ] {
        for collection in [
            "subscribers",
            "channels",
            "memberships",
            &format!("memberships/{m}/events"),
        ] {
            let path = format!("/api/{collection}?{query}");
            let r = app
                .request(
                    Method::GET,
                    &path,
                    &[("authorization", &token)],
                    Body::empty(),
                )
                .await;
            assert!(
                r.status.as_u16() < 500,
                "GET {path} → {}: {}",
                r.status,
                String::from_utf8_lossy(&r.bytes)
            );
        }
    }
}
