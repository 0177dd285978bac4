//! Staff login (good, bad, throttled: per email and address, behind a proxy, over IPv6, in
//! parallel, with every hashing permit taken) and the helpers that check a refusal. Every way a
//! bearer token is refused is in `tokens`.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    extract::ConnectInfo,
    http::{Method, Request},
};
use serde_json::{Value, json};

use crate::support::{
    helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, TestApp, TestResponse},
    race::race,
};

/// A login request as if it came from `peer` over a socket (the router reads `ConnectInfo`),
/// with extra headers.
async fn login_from(
    app: &TestApp,
    peer: &str,
    headers: &[(&str, &str)],
    email: &str,
    password: &str,
) -> TestResponse {
    let peer: SocketAddr = peer.parse().unwrap();
    let mut req = Request::builder()
        .method(Method::POST)
        .uri("/api/auth/login")
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req
        .body(Body::from(
            json!({"email": email, "password": password}).to_string(),
        ))
        .unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    app.send(req).await
}

async fn raw_login(app: &TestApp, body: &str) -> TestResponse {
    app.request(
        Method::POST,
        "/api/auth/login",
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await
}

/// GET /api/subscribers with the given Authorization header (or none).
pub(crate) async fn with_auth(app: &TestApp, authorization: Option<&str>) -> TestResponse {
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    app.request(Method::GET, "/api/subscribers", &headers, Body::empty())
        .await
}

#[track_caller]
pub(crate) fn assert_problem(r: &TestResponse, status: u16) -> Value {
    let body = r.expect(status);
    assert_eq!(
        r.header("content-type"),
        Some("application/problem+json"),
        "problem+json content type"
    );
    assert_eq!(body["status"], status);
    assert!(body["type"].is_string() && body["title"].is_string());
    body
}

#[track_caller]
pub(crate) fn assert_bearer_401(r: &TestResponse) {
    assert_problem(r, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
}

pub(crate) fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

// ---------------------------------------------------------------- login

#[tokio::test]
async fn login_succeeds_and_token_opens_protected_routes() {
    let app = TestApp::spawn().await;
    let r = app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let body = r.expect(200);
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    assert_eq!(body["role"], "owner", "the ADMIN_EMAIL account is an owner");
    let token = body["access_token"].as_str().unwrap();
    let r = with_auth(&app, Some(&format!("Bearer {token}"))).await;
    assert_eq!(r.expect(200)["items"], json!([]));
    // The scheme is case-insensitive (RFC 7235).
    let r = with_auth(&app, Some(&format!("bearer {token}"))).await;
    r.expect(200);
    // The email is matched case-insensitively and trimmed.
    app.login("  Admin@Example.COM ", ADMIN_PASSWORD)
        .await
        .expect(200);
}

#[tokio::test]
async fn wrong_password_and_unknown_email_give_identical_401() {
    let app = TestApp::spawn().await;
    let wrong = app.login(ADMIN_EMAIL, "not the password").await;
    let unknown = app.login("nobody@example.com", ADMIN_PASSWORD).await;
    assert_bearer_401(&wrong);
    assert_bearer_401(&unknown);
    assert_eq!(wrong.bytes, unknown.bytes, "same body");
    assert_eq!(wrong.header("content-type"), unknown.header("content-type"));
    assert_eq!(
        wrong.header("www-authenticate"),
        unknown.header("www-authenticate")
    );
}

#[tokio::test]
async fn password_longer_than_72_bytes_is_422() {
    let app = TestApp::spawn().await;
    // 73 bytes whose first 72 are the real password padded: bcrypt would have truncated it.
    let long = "é".repeat(36) + "x"; // 36 * 2 + 1 = 73 bytes, 37 characters
    assert_eq!(long.len(), 73);
    let body = assert_problem(&app.login(ADMIN_EMAIL, &long).await, 422);
    assert!(body["errors"]["password"].is_string(), "{body}");
    // 72 bytes is allowed (and simply wrong here).
    assert_bearer_401(&app.login(ADMIN_EMAIL, &"a".repeat(72)).await);
}

#[tokio::test]
async fn missing_fields_are_422_and_malformed_json_is_400() {
    let app = TestApp::spawn().await;
    let body = assert_problem(&raw_login(&app, "{}").await, 422);
    assert!(body["errors"]["email"].is_string(), "{body}");
    assert!(body["errors"]["password"].is_string(), "{body}");
    let body = assert_problem(&raw_login(&app, r#"{"email": "a@example.com"}"#).await, 422);
    assert!(body["errors"]["password"].is_string(), "{body}");
    assert!(body["errors"].get("email").is_none(), "{body}");
    let body = assert_problem(&raw_login(&app, r#"{"password": "secret123"}"#).await, 422);
    assert!(body["errors"]["email"].is_string(), "{body}");
    // An empty body counts as `{}`.
    assert_problem(&raw_login(&app, "").await, 422);

    for bad in [
        r#"{"email": "a@example.com", "password": "#,
        "not json",
        "[1, 2]",
        r#"{"email": 5, "password": "secret123"}"#,
        r#"{"email": "a@example.com", "password": "x", "extra": 1}"#,
    ] {
        let r = raw_login(&app, bad).await;
        assert_problem(&r, 400);
    }
}

#[tokio::test]
async fn nul_in_email_is_an_unknown_email_not_a_500() {
    let app = TestApp::spawn().await;
    let r = app.login("adm\u{0}in@example.com", ADMIN_PASSWORD).await;
    assert_bearer_401(&r);
    assert_eq!(r.bytes, app.login("nobody@example.com", "x").await.bytes);
}

#[tokio::test]
async fn repeated_failures_are_throttled_per_email_and_address() {
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "3".into());
        env.insert("LOGIN_WINDOW_SECS".into(), "600".into());
    })
    .await;
    let me = "203.0.113.7:40000";
    for _ in 0..3 {
        assert_bearer_401(&login_from(&app, me, &[], ADMIN_EMAIL, "wrong-password").await);
    }
    // Now even the right password is refused from this address for this email.
    for password in ["wrong-password", ADMIN_PASSWORD] {
        let r = login_from(&app, me, &[], ADMIN_EMAIL, password).await;
        assert_problem(&r, 429);
        let retry: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .expect("Retry-After in seconds");
        assert!((1..=600).contains(&retry), "Retry-After {retry}");
    }
    // Another port of the same address is the same client.
    assert_problem(
        &login_from(&app, "203.0.113.7:40001", &[], ADMIN_EMAIL, ADMIN_PASSWORD).await,
        429,
    );
    // A different email from the same address is not throttled.
    assert_bearer_401(&login_from(&app, me, &[], "other@example.com", "wrong-password").await);
    // The same email from another address is not throttled: nobody locks the admin out.
    login_from(&app, "198.51.100.9:40000", &[], ADMIN_EMAIL, ADMIN_PASSWORD)
        .await
        .expect(200);
    // Without TRUST_PROXY, X-Forwarded-For is ignored: it cannot be used to escape.
    assert_problem(
        &login_from(
            &app,
            me,
            &[("x-forwarded-for", "192.0.2.1")],
            ADMIN_EMAIL,
            ADMIN_PASSWORD,
        )
        .await,
        429,
    );
}

#[tokio::test]
async fn with_trust_proxy_the_forwarded_address_is_the_client() {
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "2".into());
        env.insert("TRUST_PROXY".into(), "true".into());
    })
    .await;
    let proxy = "10.0.0.2:5000";
    let a = [("x-forwarded-for", "192.0.2.1")];
    for _ in 0..2 {
        assert_bearer_401(&login_from(&app, proxy, &a, ADMIN_EMAIL, "wrong-password").await);
    }
    assert_problem(
        &login_from(&app, proxy, &a, ADMIN_EMAIL, ADMIN_PASSWORD).await,
        429,
    );
    // Same email, another client behind the same proxy: not throttled.
    let b = [("x-forwarded-for", "192.0.2.2")];
    login_from(&app, proxy, &b, ADMIN_EMAIL, ADMIN_PASSWORD)
        .await
        .expect(200);
    // The right-most entry is the one our proxy appended; a client-supplied left part is ignored.
    let spoofed = [("x-forwarded-for", "192.0.2.99, 192.0.2.1")];
    assert_problem(
        &login_from(&app, proxy, &spoofed, ADMIN_EMAIL, ADMIN_PASSWORD).await,
        429,
    );
    // The same email from another address through the router without ConnectInfo also works.
    let r = app
        .request(
            Method::POST,
            "/api/auth/login",
            &[
                ("content-type", "application/json"),
                ("x-forwarded-for", "192.0.2.3"),
            ],
            json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}).to_string(),
        )
        .await;
    r.expect(200);
}

/// Behind a proxy that appends its own `X-Forwarded-For` line, a line the client sent first is
/// ignored: rotating it does not escape the throttle, and naming another client's address in
/// it does not lock that client out.
#[tokio::test]
async fn a_client_sent_forwarded_line_neither_escapes_nor_locks_out() {
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "2".into());
        env.insert("TRUST_PROXY".into(), "true".into());
    })
    .await;
    let proxy = "10.0.0.2:5000";
    // The attacker at 203.0.113.66 invents a new first line for every guess.
    for n in 0..2 {
        let own = format!("198.51.100.{n}");
        let lines = [
            ("x-forwarded-for", own.as_str()),
            ("x-forwarded-for", "203.0.113.66"),
        ];
        assert_bearer_401(&login_from(&app, proxy, &lines, ADMIN_EMAIL, "wrong-password").await);
    }
    let again = [
        ("x-forwarded-for", "198.51.100.77"),
        ("x-forwarded-for", "203.0.113.66"),
    ];
    assert_problem(
        &login_from(&app, proxy, &again, ADMIN_EMAIL, "wrong-password").await,
        429,
    );
    // Another attacker names the admin's address (192.0.2.10) in a first line of its own.
    for _ in 0..3 {
        let framing = [
            ("x-forwarded-for", "192.0.2.10"),
            ("x-forwarded-for", "203.0.113.67"),
        ];
        let r = login_from(&app, proxy, &framing, ADMIN_EMAIL, "wrong-password").await;
        assert!(matches!(r.status.as_u16(), 401 | 429), "{}", r.status);
    }
    // The admin, whose only line is the proxy's, still logs in.
    let admin = [("x-forwarded-for", "192.0.2.10")];
    login_from(&app, proxy, &admin, ADMIN_EMAIL, ADMIN_PASSWORD)
        .await
        .expect(200);
}

/// An IPv6 client is counted by its /64: taking another address of the same /64 does not reset
/// its count, and another /64 is another client.
#[tokio::test]
async fn ipv6_clients_are_throttled_by_their_64_prefix() {
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "2".into());
    })
    .await;
    for peer in ["[2001:db8:7:1::1]:40000", "[2001:db8:7:1::2]:40000"] {
        assert_bearer_401(&login_from(&app, peer, &[], ADMIN_EMAIL, "wrong-password").await);
    }
    assert_problem(
        &login_from(
            &app,
            "[2001:db8:7:1:ffff:ffff:ffff:fff0]:1",
            &[],
            ADMIN_EMAIL,
            ADMIN_PASSWORD,
        )
        .await,
        429,
    );
    login_from(
        &app,
        "[2001:db8:7:2::1]:1",
        &[],
        ADMIN_EMAIL,
        ADMIN_PASSWORD,
    )
    .await
    .expect(200);
}

/// Many addresses guessing one account share an account-wide allowance
/// (`LOGIN_ACCOUNT_MAX_FAILURES` per window): past it, addresses that never logged in to the
/// account get 429 with `Retry-After`, even with the right password, while an address the
/// admin logged in from before still gets in and other accounts are untouched.
#[tokio::test]
async fn many_addresses_cannot_guess_one_account_fast() {
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "3".into());
        env.insert("LOGIN_ACCOUNT_MAX_FAILURES".into(), "5".into());
        env.insert("LOGIN_WINDOW_SECS".into(), "600".into());
    })
    .await;
    let usual = "198.51.100.1:40000";
    login_from(&app, usual, &[], ADMIN_EMAIL, ADMIN_PASSWORD)
        .await
        .expect(200);
    // Five guessers, one guess each: under every per-address limit.
    for n in 1..=5 {
        let peer = format!("203.0.113.{n}:40000");
        assert_bearer_401(&login_from(&app, &peer, &[], ADMIN_EMAIL, "wrong-password").await);
    }
    // A sixth address is refused before its password is checked.
    for password in ["wrong-password", ADMIN_PASSWORD] {
        let r = login_from(&app, "203.0.113.6:40000", &[], ADMIN_EMAIL, password).await;
        assert_problem(&r, 429);
        let retry: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .expect("Retry-After in seconds");
        assert!((1..=600).contains(&retry), "Retry-After {retry}");
    }
    // Not a lock-out: the admin's usual address still logs in.
    login_from(&app, usual, &[], ADMIN_EMAIL, ADMIN_PASSWORD)
        .await
        .expect(200);
    // Another account is not slowed.
    assert_bearer_401(&login_from(&app, "203.0.113.6:40000", &[], "other@example.com", "x").await);
}

#[tokio::test]
async fn success_resets_the_failure_count() {
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "3".into());
    })
    .await;
    let me = "203.0.113.8:1234";
    for _ in 0..2 {
        assert_bearer_401(&login_from(&app, me, &[], ADMIN_EMAIL, "wrong-password").await);
    }
    login_from(&app, me, &[], ADMIN_EMAIL, ADMIN_PASSWORD)
        .await
        .expect(200);
    // Had the two failures been kept, the next failure would be the third and the one after
    // it a 429. After the reset, three more failures are allowed before throttling.
    for _ in 0..3 {
        assert_bearer_401(&login_from(&app, me, &[], ADMIN_EMAIL, "wrong-password").await);
    }
    assert_problem(
        &login_from(&app, me, &[], ADMIN_EMAIL, ADMIN_PASSWORD).await,
        429,
    );
}

// ---------------------------------------------------------------- login under load

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_wrong_guesses_get_at_most_the_allowed_failures() {
    const MAX: usize = 3;
    const PARALLEL: usize = 50;
    let app = Arc::new(
        TestApp::spawn_with(|env| {
            env.insert("LOGIN_MAX_FAILURES".into(), MAX.to_string());
        })
        .await,
    );
    for round in 0..5 {
        // A fresh client address each round, so every round starts with a clean count.
        let peer = format!("203.0.113.{}:4000", 20 + round);
        let mut unauthorized = 0;
        for r in race(PARALLEL, |_| {
            let (app, peer) = (app.clone(), peer.clone());
            async move { login_from(&app, &peer, &[], ADMIN_EMAIL, "wrong-password").await }
        })
        .await
        {
            match r.status.as_u16() {
                401 => unauthorized += 1,
                429 => {
                    assert_problem(&r, 429);
                    let retry: u64 = r
                        .header("retry-after")
                        .expect("Retry-After")
                        .parse()
                        .unwrap();
                    assert!(retry >= 1, "Retry-After {retry}");
                }
                other => panic!("round {round}: unexpected status {other}"),
            }
        }
        assert!(
            (1..=MAX).contains(&unauthorized),
            "round {round}: {unauthorized} wrong guesses were verified; at most {MAX} may be"
        );
        // The pair is locked now, even for the right password...
        assert_problem(
            &login_from(&app, &peer, &[], ADMIN_EMAIL, ADMIN_PASSWORD).await,
            429,
        );
    }
    // ...while a pair that is not locked out still logs in.
    login_from(&app, "198.51.100.20:4000", &[], ADMIN_EMAIL, ADMIN_PASSWORD)
        .await
        .expect(200);
}

#[tokio::test]
async fn email_longer_than_254_bytes_is_422_and_not_counted() {
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "1".into());
    })
    .await;
    let long = format!("{}@example.com", "a".repeat(255 - "@example.com".len()));
    assert_eq!(long.len(), 255);
    for _ in 0..3 {
        let body = assert_problem(&app.login(&long, "wrong-password").await, 422);
        assert!(body["errors"]["email"].is_string(), "{body}");
    }
    assert!(
        app.state.login_throttle.is_empty(),
        "refused before any throttle bookkeeping"
    );
    // 254 bytes is a well-formed (unknown) email: the ordinary 401, counted.
    let fits = format!("{}@example.com", "a".repeat(254 - "@example.com".len()));
    assert_bearer_401(&app.login(&fits, "wrong-password").await);
    assert_eq!(app.state.login_throttle.len(), 1);
}

#[tokio::test]
async fn with_every_hashing_permit_taken_login_is_refused_quickly() {
    let app = TestApp::spawn_with(|env| {
        env.insert("LOGIN_MAX_FAILURES".into(), "1".into());
    })
    .await;
    let permits = &app.state.hash_permits;
    let held: Vec<_> = std::iter::from_fn(|| permits.try_acquire()).collect();
    assert_eq!(held.len(), permits.permits());
    for password in ["wrong-password", ADMIN_PASSWORD] {
        let started = Instant::now();
        let r = app.login(ADMIN_EMAIL, password).await;
        let waited = started.elapsed();
        assert_problem(&r, 503);
        let retry: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!(retry >= 1);
        assert!(waited < Duration::from_secs(3), "refused after {waited:?}");
    }
    assert!(
        app.state.login_throttle.is_empty(),
        "a refused login counts nothing"
    );
    // Once a permit is free, logins are checked again; the wrong guess above was not counted
    // (with LOGIN_MAX_FAILURES=1 it would have locked the pair).
    drop(held);
    app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await.expect(200);
}
