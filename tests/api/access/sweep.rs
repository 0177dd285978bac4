//! The sweep (API.md "Membership lifecycle"): transitions and their events, the report,
//! authentication, skipping memberships whose pair lock is held, and deciding from the row as
//! it is after the locks. Batches, the CLI and the schedule are in `sweep_runs`; the sweep
//! racing renewals, checkouts and payments in `sweep_races`. Memberships are back-dated with
//! `PATCH /api/memberships/{id}` or SQL; nothing sleeps waiting for time to pass.

use std::time::{Duration, Instant};

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use subgate::access::sweep::{self, Decision, Status};

use crate::support::{
    bodies::{EventBody, ListBody, body_of},
    helpers::{SWEEP_TOKEN, TestApp, db_now},
};

/// Database time, so back-dating is relative to the clock the sweep reads.
/// `POST /api/sweep` as staff; returns the report.
pub(crate) async fn sweep_now(app: &TestApp) -> Value {
    let report = app.post("/api/sweep", Value::Null).await.expect(200);
    for field in [
        "examined",
        "to_grace",
        "to_expired",
        "skipped",
        "duration_ms",
    ] {
        assert!(report[field].is_u64(), "{field} missing in {report}");
    }
    report
}

/// The report without its timing, for exact comparisons.
fn counts(report: &Value) -> Value {
    json!({
        "examined": report["examined"],
        "to_grace": report["to_grace"],
        "to_expired": report["to_expired"],
        "skipped": report["skipped"],
    })
}

pub(crate) fn expect_counts(
    report: &Value,
    examined: u64,
    to_grace: u64,
    to_expired: u64,
    skipped: u64,
) {
    assert_eq!(
        counts(report),
        json!({"examined": examined, "to_grace": to_grace, "to_expired": to_expired, "skipped": skipped}),
        "report {report}"
    );
}

/// A channel with `grace` days of grace, and a fresh subscriber's 30-day membership of it.
/// Returns (membership, subscriber id, channel id).
pub(crate) async fn membership(app: &TestApp, n: i64, grace: i64) -> (Value, i64, i64) {
    let channel = app
        .create_channel(-1_000_000 - n, json!({"grace_period_days": grace}))
        .await;
    let subscriber = app.create_subscriber(1_000 + n).await;
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": subscriber["id"], "channel_id": channel["id"], "days": 30}),
        )
        .await
        .expect(201);
    (
        m,
        subscriber["id"].as_i64().unwrap(),
        channel["id"].as_i64().unwrap(),
    )
}

/// Staff correction of a membership (the back-dating tool).
pub(crate) async fn set(app: &TestApp, id: i64, body: Value) -> Value {
    app.patch(&format!("/api/memberships/{id}"), body)
        .await
        .expect(200)
}

pub(crate) async fn back_date(app: &TestApp, id: i64, by: chrono::Duration) -> DateTime<Utc> {
    let expires_at = db_now(app).await - by;
    set(app, id, json!({"expires_at": expires_at})).await;
    expires_at
}

pub(crate) async fn status_of(app: &TestApp, id: i64) -> (String, DateTime<Utc>) {
    let row = app
        .db()
        .await
        .query_one(
            "SELECT status, expires_at FROM memberships WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// The sweep events of a membership: (from, to, expires_at_before, expires_at_after).
pub(crate) async fn sweep_events(
    app: &TestApp,
    id: i64,
) -> Vec<(String, String, DateTime<Utc>, DateTime<Utc>)> {
    app.db()
        .await
        .query(
            "SELECT from_status, to_status, expires_at_before, expires_at_after
             FROM membership_events WHERE membership_id = $1 AND cause = 'sweep' ORDER BY id",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

#[tokio::test]
async fn active_goes_to_grace_then_expired_once_past_grace() {
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 3).await;
    let id = m["id"].as_i64().unwrap();

    // Not yet due: untouched.
    expect_counts(&sweep_now(&app).await, 0, 0, 0, 0);
    assert_eq!(status_of(&app, id).await.0, "active");

    // One day overdue with three days of grace: grace.
    let expires_at = back_date(&app, id, chrono::Duration::days(1)).await;
    expect_counts(&sweep_now(&app).await, 1, 1, 0, 0);
    assert_eq!(status_of(&app, id).await, ("grace".into(), expires_at));

    // Still inside the window: examined again, stays grace, no new event.
    expect_counts(&sweep_now(&app).await, 1, 0, 0, 0);
    assert_eq!(status_of(&app, id).await.0, "grace");
    assert_eq!(sweep_events(&app, id).await.len(), 1);

    // Back-dated beyond the grace window: expired.
    let expires_at2 = back_date(
        &app,
        id,
        chrono::Duration::days(3) + chrono::Duration::minutes(1),
    )
    .await;
    expect_counts(&sweep_now(&app).await, 1, 0, 1, 0);
    assert_eq!(status_of(&app, id).await, ("expired".into(), expires_at2));

    // Expired is no longer a candidate.
    expect_counts(&sweep_now(&app).await, 0, 0, 0, 0);

    // Events: one per transition, cause sweep, expires_at unchanged by the sweep.
    assert_eq!(
        sweep_events(&app, id).await,
        vec![
            ("active".into(), "grace".into(), expires_at, expires_at),
            ("grace".into(), "expired".into(), expires_at2, expires_at2),
        ]
    );
    // And the API shows them in the membership's history, after the staff grant and PATCHes.
    let events: ListBody<EventBody> = body_of(
        &app.get(&format!("/api/memberships/{id}/events"))
            .await
            .expect(200),
    );
    let causes: Vec<&str> = events.items.iter().map(|e| e.cause.as_str()).collect();
    assert_eq!(causes, ["staff", "staff", "sweep", "staff", "sweep"]);
    let last = &events.items[4];
    assert_eq!(last.from_status.as_deref(), Some("grace"));
    assert_eq!(last.to_status, "expired");
    assert_eq!(last.payment_id, None);
    assert_eq!(
        last.expires_at_before.as_ref(),
        Some(&last.expires_at_after)
    );
}

#[tokio::test]
async fn grace_membership_inside_its_window_stays_grace() {
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 7).await;
    let id = m["id"].as_i64().unwrap();
    // Six days and 23 hours into a seven-day grace.
    let expires_at = db_now(&app).await - chrono::Duration::days(7) + chrono::Duration::hours(1);
    set(
        &app,
        id,
        json!({"expires_at": expires_at, "status": "grace"}),
    )
    .await;
    for _ in 0..3 {
        expect_counts(&sweep_now(&app).await, 1, 0, 0, 0);
        assert_eq!(status_of(&app, id).await, ("grace".into(), expires_at));
    }
    assert!(sweep_events(&app, id).await.is_empty());
}

#[tokio::test]
async fn grace_membership_with_a_future_expiry_is_not_moved_backwards() {
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 3).await;
    let id = m["id"].as_i64().unwrap();
    set(&app, id, json!({"status": "grace"})).await;
    expect_counts(&sweep_now(&app).await, 0, 0, 0, 0);
    assert_eq!(status_of(&app, id).await.0, "grace");
}

#[tokio::test]
async fn expired_stays_expired() {
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 3).await;
    let id = m["id"].as_i64().unwrap();
    // Expired long ago, and (a staff correction) expired with a future expiry: both terminal.
    let long_ago = db_now(&app).await - chrono::Duration::days(400);
    set(
        &app,
        id,
        json!({"status": "expired", "expires_at": long_ago}),
    )
    .await;
    let (m2, _, _) = membership(&app, 2, 0).await;
    let id2 = m2["id"].as_i64().unwrap();
    set(&app, id2, json!({"status": "expired"})).await;
    for _ in 0..2 {
        expect_counts(&sweep_now(&app).await, 0, 0, 0, 0);
    }
    assert_eq!(status_of(&app, id).await, ("expired".into(), long_ago));
    assert_eq!(status_of(&app, id2).await.0, "expired");
    assert!(sweep_events(&app, id).await.is_empty());
    assert!(sweep_events(&app, id2).await.is_empty());
}

#[tokio::test]
async fn zero_grace_goes_straight_from_active_to_expired() {
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    let expires_at = back_date(&app, id, chrono::Duration::seconds(1)).await;
    expect_counts(&sweep_now(&app).await, 1, 0, 1, 0);
    assert_eq!(status_of(&app, id).await, ("expired".into(), expires_at));
    assert_eq!(
        sweep_events(&app, id).await,
        vec![("active".into(), "expired".into(), expires_at, expires_at)]
    );
}

#[tokio::test]
async fn report_counts_a_mixed_population() {
    let app = TestApp::spawn().await;
    let day = chrono::Duration::days(1);
    // (grace days, back-dated by, status set by staff) → expected status after one sweep.
    let cases: [(i64, Option<chrono::Duration>, Option<&str>, &str); 9] = [
        (3, Some(day), None, "grace"),                  // active → grace
        (3, Some(day * 2), None, "grace"),              // active → grace
        (3, Some(day * 5), None, "expired"),            // active → expired (past grace)
        (0, Some(day), None, "expired"),                // active → expired (no grace)
        (5, Some(day * 6), Some("grace"), "expired"),   // grace → expired
        (5, Some(day), Some("grace"), "grace"),         // grace inside window: examined only
        (3, None, None, "active"),                      // not due
        (3, Some(day * 9), Some("expired"), "expired"), // terminal, not a candidate
        (0, None, Some("grace"), "grace"),              // grace, future expiry: not a candidate
    ];
    let mut ids = Vec::new();
    for (n, (grace, by, status, _)) in cases.iter().enumerate() {
        let (m, _, _) = membership(&app, n as i64, *grace).await;
        let id = m["id"].as_i64().unwrap();
        let mut patch = json!({});
        if let Some(by) = by {
            patch["expires_at"] = json!(db_now(&app).await - *by);
        }
        if let Some(s) = status {
            patch["status"] = json!(s);
        }
        if patch != json!({}) {
            set(&app, id, patch).await;
        }
        ids.push(id);
    }
    let report = sweep_now(&app).await;
    expect_counts(&report, 6, 2, 3, 0);
    for (id, case) in ids.iter().zip(&cases) {
        assert_eq!(status_of(&app, *id).await.0, case.3, "case {case:?}");
    }
    let events: i64 = app.count("membership_events WHERE cause = 'sweep'").await;
    assert_eq!(events, 5);
    // A second run finds only the grace memberships inside their window.
    expect_counts(&sweep_now(&app).await, 3, 0, 0, 0);
}

#[tokio::test]
async fn sweep_token_staff_jwt_or_401() {
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    back_date(&app, id, chrono::Duration::hours(1)).await;

    let post = |headers: Vec<(&'static str, String)>, body: &'static str| {
        let app = &app;
        async move {
            let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            app.request(Method::POST, "/api/sweep", &h, body).await
        }
    };
    // No credentials, a wrong token, a token one character short, another scheme: 401.
    for headers in [
        vec![],
        vec![(
            "authorization",
            "Bearer wrong-token-0123456789abcdef0123456789".to_string(),
        )],
        vec![("authorization", format!("Bearer {}", &SWEEP_TOKEN[1..]))],
        vec![("authorization", format!("Basic {SWEEP_TOKEN}"))],
        vec![("authorization", SWEEP_TOKEN.to_string())],
    ] {
        let r = post(headers.clone(), "").await;
        r.expect(401);
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{headers:?}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
    // Nothing ran.
    assert_eq!(status_of(&app, id).await.0, "active");

    // The sweep token works, whatever the body.
    let r = post(
        vec![("authorization", format!("Bearer {SWEEP_TOKEN}"))],
        "this is not json",
    )
    .await;
    expect_counts(&r.expect(200), 1, 0, 1, 0);
    assert_eq!(status_of(&app, id).await.0, "expired");

    // A staff JWT works too.
    expect_counts(&sweep_now(&app).await, 0, 0, 0, 0);
}

#[tokio::test]
async fn without_a_configured_sweep_token_only_staff_may_sweep() {
    let app = TestApp::spawn_with(|env| {
        env.remove("SWEEP_TOKEN");
    })
    .await;
    let r = app
        .request(
            Method::POST,
            "/api/sweep",
            &[("authorization", &format!("Bearer {SWEEP_TOKEN}"))],
            "",
        )
        .await;
    r.expect(401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    sweep_now(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_membership_whose_pair_lock_is_held_is_skipped_and_not_downgraded() {
    let app = TestApp::spawn().await;
    let (m, subscriber_id, channel_id) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    let expires_at = back_date(&app, id, chrono::Duration::hours(1)).await;
    // A second overdue membership, not locked, to show the sweep carries on past the skip.
    let (other, _, _) = membership(&app, 2, 0).await;
    let other_id = other["id"].as_i64().unwrap();
    back_date(&app, other_id, chrono::Duration::hours(2)).await;

    // A "renewal" in progress: another transaction holds the pair lock.
    let mut holder = app.db().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&(subscriber_id as i32), &(channel_id as i32)],
    )
    .await
    .unwrap();

    let started = Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(10), sweep_now(&app))
        .await
        .expect("the sweep must not wait for a held pair lock");
    assert!(started.elapsed() < Duration::from_secs(5));
    expect_counts(&report, 2, 0, 1, 1);
    assert_eq!(status_of(&app, id).await, ("active".into(), expires_at));
    assert!(sweep_events(&app, id).await.is_empty());
    assert_eq!(status_of(&app, other_id).await.0, "expired");

    // The renewal ends (here without change); the next sweep handles the membership.
    tx.rollback().await.unwrap();
    expect_counts(&sweep_now(&app).await, 1, 0, 1, 0);
    assert_eq!(status_of(&app, id).await.0, "expired");
}

#[tokio::test]
async fn a_renewal_committed_under_the_lock_is_seen_by_the_sweep() {
    // The renewal commits between the sweep's candidate read and its decision only in a race
    // (see the renewal race test); this checks the sweep decides from the row as it is now.
    let app = TestApp::spawn().await;
    let (m, subscriber_id, channel_id) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    back_date(&app, id, chrono::Duration::hours(1)).await;
    let mut holder = app.db().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&(subscriber_id as i32), &(channel_id as i32)],
    )
    .await
    .unwrap();
    let renewed: DateTime<Utc> = tx
        .query_one(
            "UPDATE memberships SET expires_at = statement_timestamp() + interval '30 days'
             WHERE id = $1 RETURNING expires_at",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    // While the renewal holds its lock the sweep skips the row...
    expect_counts(&sweep_now(&app).await, 1, 0, 0, 1);
    tx.commit().await.unwrap();
    // ...and after it committed the row is no longer a candidate.
    expect_counts(&sweep_now(&app).await, 0, 0, 0, 0);
    assert_eq!(status_of(&app, id).await, ("active".into(), renewed));
}

#[tokio::test]
async fn apply_batch_writes_only_decisions_made_from_the_current_row() {
    let app = TestApp::spawn().await;
    let (a, _, _) = membership(&app, 1, 0).await;
    let (b, _, _) = membership(&app, 2, 0).await;
    let (c, _, _) = membership(&app, 3, 3).await;
    let (a, b, c) = (
        a["id"].as_i64().unwrap(),
        b["id"].as_i64().unwrap(),
        c["id"].as_i64().unwrap(),
    );
    let ea = back_date(&app, a, chrono::Duration::hours(1)).await;
    let eb = back_date(&app, b, chrono::Duration::hours(1)).await;
    let ec = back_date(&app, c, chrono::Duration::hours(1)).await;
    let mut client = app.app_db().await;
    let tx = client.transaction().await.unwrap();
    let transitions = sweep::apply_batch(
        &tx,
        &[
            // Current: applied.
            Decision {
                id: a,
                from: Status::Active,
                to: Status::Expired,
                expires_at: ea,
            },
            // Stale expires_at (the row was renewed after the decision's read): not applied.
            Decision {
                id: b,
                from: Status::Active,
                to: Status::Expired,
                expires_at: eb - chrono::Duration::days(30),
            },
            // Stale status: not applied.
            Decision {
                id: c,
                from: Status::Grace,
                to: Status::Expired,
                expires_at: ec,
            },
        ],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(transitions.len(), 1);
    assert_eq!(transitions[0].membership_id, a);
    assert_eq!(
        (
            transitions[0].from,
            transitions[0].to,
            transitions[0].expires_at
        ),
        (Status::Active, Status::Expired, ea)
    );
    assert_eq!(status_of(&app, a).await.0, "expired");
    assert_eq!(status_of(&app, b).await, ("active".into(), eb));
    assert_eq!(status_of(&app, c).await, ("active".into(), ec));
    assert_eq!(sweep_events(&app, a).await.len(), 1);
    assert!(sweep_events(&app, b).await.is_empty());
    assert!(sweep_events(&app, c).await.is_empty());
}
