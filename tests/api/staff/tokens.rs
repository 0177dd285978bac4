//! Every way a bearer token is refused: a missing header, a wrong scheme or garbage, `alg:
//! none`, other algorithms, a bad signature, an expired token or one issued in the future, one
//! living longer than `JWT_TTL_SECS`, of another version or subject, of a deleted account or
//! ended sessions; the token's lifetime; and every staff route requiring one.

use axum::{
    body::Body,
    http::{Method, Request, StatusCode},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::{
    staff::auth::{assert_bearer_401, now, with_auth},
    support::helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp},
};

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
        subgate::staff::accounts::set_password(&app.state.db, ADMIN_EMAIL, password, 4)
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
        subgate::staff::accounts::create_staff(
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
    assert!(
        subgate::staff::accounts::end_sessions(&client, id)
            .await
            .unwrap()
    );
    assert!(
        !subgate::staff::accounts::end_sessions(&client, 999_999)
            .await
            .unwrap()
    );
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
