//! The service and its database going away: an unreachable database is 503 (not 500), an
//! exhausted pool is 503 and passes, readiness waits for migrations, and the service recovers
//! from an outage without a restart.

use std::{
    collections::HashMap,
    net::SocketAddr,
    time::{Duration, Instant},
};

use axum::{body::Body, http::Method};
use serde_json::json;

use crate::{
    ops::cli::{Proxy, create_empty_database, ready},
    staff::auth::assert_problem,
    support::helpers::{self, ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp, url_for},
};

/// A token for staff account `id`, signed with the test secret (for apps whose database is
/// unreachable, so login cannot be used).
fn token_for(id: i64) -> String {
    subgate::staff::tokens::issue_token(JWT_SECRET.as_bytes(), id, 0, Duration::from_secs(600))
        .unwrap()
}

/// Config for an app whose database cannot be reached: no admin bootstrap (it would fail).
fn unreachable_db(env: &mut HashMap<String, String>) {
    env.insert(
        "DATABASE_URL".into(),
        "postgres://postgres@127.0.0.1:1/subgate".into(),
    );
    env.insert("ADMIN_EMAIL".into(), String::new());
    env.insert("ADMIN_PASSWORD".into(), String::new());
}

#[tokio::test]
async fn unreachable_database_gives_503_not_500() {
    let app = TestApp::spawn_with(unreachable_db).await;
    app.request(Method::GET, "/healthz", &[], Body::empty())
        .await
        .expect(200);
    let r = app
        .request(Method::GET, "/readyz", &[], Body::empty())
        .await;
    assert_problem(&r, 503);
    assert!(r.header("retry-after").is_some());

    let token = format!("Bearer {}", token_for(1));
    for (method, path, body) in [
        (Method::GET, "/api/subscribers", ""),
        (
            Method::POST,
            "/api/subscribers",
            r#"{"telegram_user_id": 1}"#,
        ),
        (Method::GET, "/api/channels/1", ""),
    ] {
        let r = app
            .request(
                method.clone(),
                path,
                &[
                    ("authorization", &token),
                    ("content-type", "application/json"),
                ],
                body.to_string(),
            )
            .await;
        let problem = assert_problem(&r, 503);
        let text = problem.to_string();
        assert!(
            !text.contains("127.0.0.1") && !text.contains("refused"),
            "opaque: {text}"
        );
    }
    // Login needs the database too: 503, not a misleading 401.
    assert_problem(&app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_exhaustion_gives_503_and_passes() {
    let app = TestApp::spawn_with(|env| {
        env.insert("DB_POOL_SIZE".into(), "1".into());
    })
    .await;
    app.token().await;
    let held = app.app_db().await; // the only connection
    let started = Instant::now();
    let r = app.get("/api/subscribers").await;
    assert_problem(&r, 503);
    assert!(r.header("retry-after").is_some());
    assert!(started.elapsed() < Duration::from_secs(15), "bounded wait");
    drop(held);
    app.get("/api/subscribers").await.expect(200);
}

#[tokio::test]
async fn readyz_is_503_until_migrations_are_applied() {
    let name = helpers::new_database_name();
    create_empty_database(&name).await;
    let url = url_for(&name);
    let app = TestApp::spawn_with(|env| {
        unreachable_db(env);
        env.insert("DATABASE_URL".into(), url.clone());
    })
    .await;
    assert_problem(
        &app.request(Method::GET, "/readyz", &[], Body::empty())
            .await,
        503,
    );
    subgate::db::migrate(&app.state.db).await.unwrap();
    app.request(Method::GET, "/readyz", &[], Body::empty())
        .await
        .expect(200);
}

fn real_postgres() -> SocketAddr {
    let url = url::Url::parse(&helpers::admin_url()).unwrap();
    let host = url.host_str().unwrap_or("127.0.0.1").to_string();
    let port = url.port().unwrap_or(5432);
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .unwrap()
        .next()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn service_recovers_from_a_database_outage_without_restart() {
    let mut proxy = Proxy::start(real_postgres()).await;
    let db_name = helpers::fresh_database().await;
    let mut url = url::Url::parse(&url_for(&db_name)).unwrap();
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(proxy.port)).unwrap();
    let url = url.to_string();
    let app = TestApp::spawn_with(|env| {
        env.insert("DATABASE_URL".into(), url.clone());
    })
    .await;
    assert_eq!(ready(&app).await, 200);
    app.create_subscriber(1).await;
    // Several pooled connections, so the outage hits idle ones too.
    let gets: Vec<_> = (0..4).map(|_| app.get("/api/subscribers")).collect();
    for r in futures::future::join_all(gets).await {
        r.expect(200);
    }

    proxy.stop().await;
    for _ in 0..3 {
        assert_problem(
            &app.request(Method::GET, "/readyz", &[], Body::empty())
                .await,
            503,
        );
        assert_problem(&app.get("/api/subscribers").await, 503);
        assert_problem(
            &app.post("/api/subscribers", json!({"telegram_user_id": 2}))
                .await,
            503,
        );
    }

    proxy.listen().await;
    // Recovers by itself: the next requests open new connections.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ready(&app).await != 200 {
        assert!(Instant::now() < deadline, "/readyz did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let list = app.get("/api/subscribers").await.expect(200);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    app.create_subscriber(2).await;
    proxy.stop().await;
}
