//! The database going away or turning read-only under the service, as in a failover, on the
//! suite's PostgreSQL: `DATABASE_URL` names a dead host before the real one with
//! `target_session_attrs=read-write`; the test's database is made read-only
//! (`default_transaction_read_only`, as a demoted primary is) and its sessions are terminated
//! (`57P01`, as a server going down does). A payment meanwhile is answered 503 with `Retry-After`
//! (never 500, never 200) and writes nothing; once the database takes writes again, the same
//! delivery is applied, once, without a restart. `make chaos` does the same with a real
//! primary, standby and promotion.

use serde_json::Value;
use tokio_postgres::NoTls;

use crate::support::helpers::{TestApp, TestResponse, admin_url, id, payment_event, url_for};

/// `url_for(db)` with a host nobody listens on put first, and `target_session_attrs=read-write`.
fn multi_host_url(db: &str) -> String {
    let url = url::Url::parse(&url_for(db)).unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let userinfo = match url.password() {
        Some(pw) => format!("{}:{pw}", url.username()),
        None => url.username().to_string(),
    };
    let query = url.query().map(|q| format!("{q}&")).unwrap_or_default();
    format!(
        "postgres://{userinfo}@127.0.0.1:{dead},{}:{}{}?{query}target_session_attrs=read-write",
        url.host_str().unwrap(),
        url.port().unwrap_or(5432),
        url.path()
    )
}

async fn admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&admin_url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

/// Rows for this test's database, read over the admin connection (not the app's pool, whose
/// connections are the subject).
async fn count(db: &str, from: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(&url_for(db), NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .query_one(&format!("SELECT count(*) FROM {from}"), &[])
        .await
        .unwrap()
        .get(0)
}

async fn terminate_sessions(admin: &tokio_postgres::Client, db: &str) {
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&db],
        )
        .await
        .unwrap();
}

#[track_caller]
fn assert_unavailable(r: &TestResponse, what: &str) {
    assert_eq!(
        r.status.as_u16(),
        503,
        "{what}: {}",
        String::from_utf8_lossy(&r.bytes)
    );
    assert_eq!(r.header("retry-after"), Some("1"), "{what}");
    assert_eq!(r.json()["type"], "/problems/unavailable", "{what}");
}

#[tokio::test]
async fn a_read_only_or_vanished_database_answers_503_and_the_redelivery_applies_once() {
    let app = TestApp::spawn_with(|env| {
        let db = env["DATABASE_URL"].rsplit('/').next().unwrap().to_string();
        env.insert("DATABASE_URL".into(), multi_host_url(&db));
    })
    .await;
    let db = app.db_name.clone();
    let sub = id(&app.create_subscriber(7001).await);
    let channel = id(&app.create_channel(-1_007_001, Value::Null).await);
    let order = app.create_order(sub, channel).await;
    let body = payment_event(
        "pay-failover-1",
        order["reference"].as_str().unwrap(),
        order["amount_minor"].as_i64().unwrap(),
        order["currency"].as_str().unwrap(),
    );

    // The pool holds connections to the (only) writable host, reached past the dead one.
    let warm = app.get("/readyz").await;
    assert_eq!(warm.status.as_u16(), 200);

    // The database turns read-only and every session is cut: new sessions are refused by
    // `target_session_attrs=read-write`, a session that slips through fails with 25006.
    let admin = admin().await;
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{db}\" SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    terminate_sessions(&admin, &db).await;
    for attempt in 0..3 {
        let r = app.post_signed_webhook(&body).await;
        assert_unavailable(&r, &format!("delivery {attempt} while read-only"));
    }
    assert_eq!(count(&db, "payments").await, 0);
    assert_eq!(count(&db, "membership_events").await, 0);

    // The database takes writes again, but one pooled session is read-only (as a session on a
    // demoted primary, or one fenced with `default_transaction_read_only`, would be).
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{db}\" RESET default_transaction_read_only"
        ))
        .await
        .unwrap();
    {
        let c = app.state.db.get().await.unwrap();
        c.batch_execute("SET default_transaction_read_only = on")
            .await
            .unwrap();
    }
    // That connection is handed out again: the write fails with 25006 (503), and the
    // connection is discarded, so the gateway's next redelivery is applied.
    let r = app.post_signed_webhook(&body).await;
    assert_unavailable(&r, "delivery over a read-only session");
    assert_eq!(count(&db, "payments").await, 0);

    let r = app.post_signed_webhook(&body).await;
    assert_eq!(
        r.status.as_u16(),
        200,
        "redelivery after the database came back: {}",
        String::from_utf8_lossy(&r.bytes)
    );
    assert_eq!(r.json()["duplicate"], false);

    // Sessions cut once more (a server restarting): a request may meet the dead connection
    // (503) or a fresh one; never a 500, and the next redelivery is a duplicate.
    terminate_sessions(&admin, &db).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = app.post_signed_webhook(&body).await;
        let status = r.status.as_u16();
        assert!(
            status == 200 || status == 503,
            "status {status} after the sessions were cut: {}",
            String::from_utf8_lossy(&r.bytes)
        );
        if status == 200 {
            assert_eq!(r.json()["duplicate"], true);
        }
        statuses.push(status);
    }
    assert_eq!(statuses.last(), Some(&200), "{statuses:?}");

    assert_eq!(count(&db, "payments").await, 1);
    assert_eq!(count(&db, "membership_events").await, 1);
    assert_eq!(count(&db, "memberships WHERE status = 'active'").await, 1);
    assert_eq!(count(&db, "effects WHERE kind = 'grant'").await, 1);
}
