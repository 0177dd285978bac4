//! Staff login (good, bad, throttled) and every way a bearer token is refused.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    extract::ConnectInfo,
    http::{Method, Request, StatusCode},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tower::ServiceExt;

use crate::helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp, TestResponse};

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
async fn with_auth(app: &TestApp, authorization: Option<&str>) -> TestResponse {
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

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn admin_id_claims(sub: &str, exp: i64) -> Value {
    json!({"sub": sub, "iat": now() - 10, "exp": exp})
}

fn sign(alg: Algorithm, secret: &str, claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(alg),
        claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

async fn admin_id(app: &TestApp) -> i64 {
    app.db()
        .await
        .query_one(
            "SELECT id FROM staff_accounts WHERE email = $1",
            &[&ADMIN_EMAIL],
        )
        .await
        .unwrap()
        .get(0)
}

// ---------------------------------------------------------------- login

#[tokio::test]
async fn login_succeeds_and_token_opens_protected_routes() {
    let app = TestApp::spawn().await;
    let r = app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let body = r.expect(200);
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
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
async fn token_lifetime_follows_jwt_ttl_secs() {
    let app = TestApp::spawn_with(|env| {
        env.insert("JWT_TTL_SECS".into(), "120".into());
    })
    .await;
    let body = app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await.expect(200);
    assert_eq!(body["expires_in"], 120);
    let token = body["access_token"].as_str().unwrap();
    let claims: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    let exp = claims["exp"].as_i64().unwrap();
    assert!((exp - now() - 120).abs() <= 5, "exp is about now + 120");
    assert_eq!(claims["sub"], admin_id(&app).await.to_string());
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

// ---------------------------------------------------------------- JWT rejections

#[tokio::test]
async fn missing_header_wrong_scheme_and_garbage_are_401() {
    let app = TestApp::spawn().await;
    let token = app.token().await;
    assert_bearer_401(&with_auth(&app, None).await);
    for value in [
        format!("Basic {token}"),
        format!("Token {token}"),
        token.clone(),
        "Bearer".to_string(),
        "Bearer ".to_string(),
        "Bearer garbage".to_string(),
        "Bearer a.b.c".to_string(),
        format!("Bearer {token}x"),
        format!("Bearer {}", &token[..token.len() - 2]),
    ] {
        let r = with_auth(&app, Some(&value)).await;
        assert_bearer_401(&r);
    }
    // Non-UTF-8 header bytes.
    let mut req = Request::builder()
        .uri("/api/subscribers")
        .body(Body::empty())
        .unwrap();
    req.headers_mut().insert(
        "authorization",
        axum::http::HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap(),
    );
    let r = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
}

#[tokio::test]
async fn alg_none_token_is_401() {
    let app = TestApp::spawn().await;
    let id = admin_id(&app).await;
    let claims = admin_id_claims(&id.to_string(), now() + 600);
    for header in [
        json!({"alg": "none", "typ": "JWT"}),
        json!({"alg": "None", "typ": "JWT"}),
        json!({"alg": "NONE"}),
    ] {
        let token = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    }
    // The same claims signed properly work: the refusal above is about the algorithm.
    let good = sign(Algorithm::HS256, JWT_SECRET, &claims);
    with_auth(&app, Some(&format!("Bearer {good}")))
        .await
        .expect(200);
}

#[tokio::test]
async fn other_algorithms_with_the_right_secret_are_401() {
    let app = TestApp::spawn().await;
    let id = admin_id(&app).await;
    let claims = admin_id_claims(&id.to_string(), now() + 600);
    for alg in [Algorithm::HS384, Algorithm::HS512] {
        let token = sign(alg, JWT_SECRET, &claims);
        assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    }
    // An HS256 signature under a header that claims HS512 is refused too.
    let good = sign(Algorithm::HS256, JWT_SECRET, &claims);
    let mut parts: Vec<String> = good.split('.').map(str::to_string).collect();
    parts[0] = URL_SAFE_NO_PAD.encode(json!({"alg": "HS512", "typ": "JWT"}).to_string());
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {}", parts.join(".")))).await);
}

#[tokio::test]
async fn bad_signature_is_401() {
    let app = TestApp::spawn().await;
    let id = admin_id(&app).await;
    let claims = admin_id_claims(&id.to_string(), now() + 600);
    let other = sign(
        Algorithm::HS256,
        "another-secret-that-is-long-enough-0123456789",
        &claims,
    );
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {other}"))).await);
    // Claims swapped under a valid signature of other claims.
    let good = sign(Algorithm::HS256, JWT_SECRET, &claims);
    let forged_claims = admin_id_claims(&id.to_string(), now() + 86_400 * 365);
    let mut parts: Vec<String> = good.split('.').map(str::to_string).collect();
    parts[1] = URL_SAFE_NO_PAD.encode(forged_claims.to_string());
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {}", parts.join(".")))).await);
}

#[tokio::test]
async fn expired_token_is_401_with_zero_leeway() {
    let app = TestApp::spawn().await;
    let id = admin_id(&app).await.to_string();
    for exp in [now() - 1, now() - 3600] {
        let token = sign(Algorithm::HS256, JWT_SECRET, &admin_id_claims(&id, exp));
        assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    }
    // Without exp at all.
    let token = sign(
        Algorithm::HS256,
        JWT_SECRET,
        &json!({"sub": id, "iat": now()}),
    );
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    // A fresh one still works.
    let token = sign(
        Algorithm::HS256,
        JWT_SECRET,
        &admin_id_claims(&id, now() + 60),
    );
    with_auth(&app, Some(&format!("Bearer {token}")))
        .await
        .expect(200);
}

#[tokio::test]
async fn token_issued_in_the_future_is_401() {
    let app = TestApp::spawn().await;
    let id = admin_id(&app).await.to_string();
    for ahead in [2, 600] {
        let iat = now() + ahead;
        let claims = json!({"sub": id, "iat": iat, "exp": iat + 60});
        let token = sign(Algorithm::HS256, JWT_SECRET, &claims);
        assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    }
    // Without iat at all.
    let claims = json!({"sub": id, "exp": now() + 60});
    let token = sign(Algorithm::HS256, JWT_SECRET, &claims);
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    // Issued now: fine.
    let claims = json!({"sub": id, "iat": now(), "exp": now() + 60});
    let token = sign(Algorithm::HS256, JWT_SECRET, &claims);
    with_auth(&app, Some(&format!("Bearer {token}")))
        .await
        .expect(200);
}

#[tokio::test]
async fn token_living_longer_than_jwt_ttl_secs_is_401() {
    // JWT_TTL_SECS is 3600 in the tests.
    let app = TestApp::spawn().await;
    let id = admin_id(&app).await.to_string();
    let iat = now() - 10;
    for lifetime in [3601, 86_400 * 365] {
        let claims = json!({"sub": id, "iat": iat, "exp": iat + lifetime});
        let token = sign(Algorithm::HS256, JWT_SECRET, &claims);
        assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    }
    let claims = json!({"sub": id, "iat": iat, "exp": iat + 3600});
    let token = sign(Algorithm::HS256, JWT_SECRET, &claims);
    with_auth(&app, Some(&format!("Bearer {token}")))
        .await
        .expect(200);
}

#[tokio::test]
async fn token_of_another_version_is_401() {
    let app = TestApp::spawn().await;
    let id = admin_id(&app).await.to_string();
    let claims = |ver: Value| json!({"sub": id, "iat": now(), "exp": now() + 60, "ver": ver});
    for ver in [json!(1), json!(-1), json!("0"), json!(1_u64 << 40)] {
        let token = sign(Algorithm::HS256, JWT_SECRET, &claims(ver));
        assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    }
    // The account's version is 0: a token of version 0, or one without `ver` (issued before
    // the claim existed), opens the API.
    let token = sign(Algorithm::HS256, JWT_SECRET, &claims(json!(0)));
    with_auth(&app, Some(&format!("Bearer {token}")))
        .await
        .expect(200);
    let token = sign(
        Algorithm::HS256,
        JWT_SECRET,
        &json!({"sub": id, "iat": now(), "exp": now() + 60}),
    );
    with_auth(&app, Some(&format!("Bearer {token}")))
        .await
        .expect(200);
}

#[tokio::test]
async fn a_password_change_ends_earlier_tokens_at_once_and_a_new_login_works() {
    let app = TestApp::spawn().await;
    let old = app.token().await;
    with_auth(&app, Some(&format!("Bearer {old}")))
        .await
        .expect(200);
    let password = "the admin's new passphrase";
    assert!(
        subgate::auth::set_password(&app.state.db, ADMIN_EMAIL, password, 4)
            .await
            .unwrap()
    );
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {old}"))).await);
    assert_bearer_401(&app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await);
    let body = app.login(ADMIN_EMAIL, password).await.expect(200);
    let new = body["access_token"].as_str().unwrap();
    with_auth(&app, Some(&format!("Bearer {new}")))
        .await
        .expect(200);
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {old}"))).await);
}

#[tokio::test]
async fn ending_an_account_s_sessions_refuses_its_tokens_and_no_one_else_s() {
    let app = TestApp::spawn().await;
    let ops = "ops@example.com";
    let ops_password = "the ops passphrase";
    assert!(
        subgate::auth::create_staff(
            &app.state.db,
            ops,
            ops_password,
            subgate::staff::Role::Owner,
            4
        )
        .await
        .unwrap()
    );
    let admin = app.token().await;
    let ops_token = app.login(ops, ops_password).await.expect(200)["access_token"]
        .as_str()
        .unwrap()
        .to_string();
    let id = admin_id(&app).await;
    let client = app.app_db().await;
    assert!(subgate::auth::end_sessions(&client, id).await.unwrap());
    assert!(!subgate::auth::end_sessions(&client, 999_999).await.unwrap());
    drop(client);
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {admin}"))).await);
    with_auth(&app, Some(&format!("Bearer {ops_token}")))
        .await
        .expect(200);
    // The same password logs in again, with a token of the new version.
    let body = app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await.expect(200);
    let fresh = body["access_token"].as_str().unwrap();
    with_auth(&app, Some(&format!("Bearer {fresh}")))
        .await
        .expect(200);
}

#[tokio::test]
async fn token_with_bad_subject_is_401() {
    let app = TestApp::spawn().await;
    for sub in [
        json!("abc"),
        json!(""),
        json!("999999"),
        json!("-1"),
        json!(1),
    ] {
        let claims = json!({"sub": sub, "iat": now(), "exp": now() + 600});
        let token = sign(Algorithm::HS256, JWT_SECRET, &claims);
        assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    }
    let token = sign(
        Algorithm::HS256,
        JWT_SECRET,
        &json!({"iat": now(), "exp": now() + 600}),
    );
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
}

#[tokio::test]
async fn token_of_deleted_staff_account_is_401() {
    let app = TestApp::spawn().await;
    let token = app.token().await;
    with_auth(&app, Some(&format!("Bearer {token}")))
        .await
        .expect(200);
    app.db()
        .await
        .execute(
            "DELETE FROM staff_accounts WHERE email = $1",
            &[&ADMIN_EMAIL],
        )
        .await
        .unwrap();
    assert_bearer_401(&with_auth(&app, Some(&format!("Bearer {token}"))).await);
    // And a write through the idempotent path too.
    let r = app
        .request(
            Method::POST,
            "/api/subscribers",
            &[
                ("authorization", &format!("Bearer {token}")),
                ("content-type", "application/json"),
            ],
            json!({"telegram_user_id": 5}).to_string(),
        )
        .await;
    assert_bearer_401(&r);
}

#[tokio::test]
async fn every_staff_route_requires_a_token() {
    let app = TestApp::spawn().await;
    for (method, path) in [
        (Method::GET, "/api/subscribers"),
        (Method::POST, "/api/subscribers"),
        (Method::GET, "/api/subscribers/1"),
        (Method::PATCH, "/api/subscribers/1"),
        (Method::DELETE, "/api/subscribers/1"),
        (Method::GET, "/api/channels"),
        (Method::POST, "/api/channels"),
        (Method::GET, "/api/channels/1"),
        (Method::PATCH, "/api/channels/1"),
        (Method::DELETE, "/api/channels/1"),
        (Method::GET, "/api/memberships"),
        (Method::POST, "/api/memberships"),
        (Method::GET, "/api/memberships/1"),
        (Method::PATCH, "/api/memberships/1"),
        (Method::DELETE, "/api/memberships/1"),
        (Method::GET, "/api/memberships/1/events"),
    ] {
        let r = app
            .request(
                method.clone(),
                path,
                &[("content-type", "application/json")],
                "{}",
            )
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {path}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer"),
            "{method} {path}"
        );
    }
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
        let barrier = Arc::new(Barrier::new(PARALLEL));
        let tasks: Vec<_> = (0..PARALLEL)
            .map(|_| {
                let (app, barrier, peer) = (app.clone(), barrier.clone(), peer.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    login_from(&app, &peer, &[], ADMIN_EMAIL, "wrong-password").await
                })
            })
            .collect();
        let mut unauthorized = 0;
        for task in tasks {
            let r = task.await.unwrap();
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
