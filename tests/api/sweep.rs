//! The sweep (API.md "Membership lifecycle"): transitions and their events,
//! the report, authentication, skipping memberships whose pair lock is held, deciding from the
//! row as it is after the locks, batching over thousands of rows, the CLI and the in-process
//! schedule; then the sweep racing renewals, and racing checkout, payment, grant and cancel on a
//! seat-limited channel. Memberships are back-dated with `PATCH /api/memberships/{id}` or SQL;
//! nothing sleeps waiting for time to pass.

use std::time::{Duration, Instant};

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use subgate::sweep::{self, Decision, Status};

use crate::bodies::{EventBody, ListBody, body_of};
use crate::helpers::db_now;
use crate::helpers::{SWEEP_TOKEN, TestApp, url_for};

/// Database time, so back-dating is relative to the clock the sweep reads.
/// `POST /api/sweep` as staff; returns the report.
async fn sweep_now(app: &TestApp) -> Value {
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

fn expect_counts(report: &Value, examined: u64, to_grace: u64, to_expired: u64, skipped: u64) {
    assert_eq!(
        counts(report),
        json!({"examined": examined, "to_grace": to_grace, "to_expired": to_expired, "skipped": skipped}),
        "report {report}"
    );
}

/// A channel with `grace` days of grace, and a fresh subscriber's 30-day membership of it.
/// Returns (membership, subscriber id, channel id).
async fn membership(app: &TestApp, n: i64, grace: i64) -> (Value, i64, i64) {
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
async fn set(app: &TestApp, id: i64, body: Value) -> Value {
    app.patch(&format!("/api/memberships/{id}"), body)
        .await
        .expect(200)
}

async fn back_date(app: &TestApp, id: i64, by: chrono::Duration) -> DateTime<Utc> {
    let expires_at = db_now(app).await - by;
    set(app, id, json!({"expires_at": expires_at})).await;
    expires_at
}

async fn status_of(app: &TestApp, id: i64) -> (String, DateTime<Utc>) {
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
async fn sweep_events(
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
    let events: i64 = app
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM membership_events WHERE cause = 'sweep'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
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

#[tokio::test]
async fn sweep_effects_carry_the_same_keys_and_payloads_as_staff_effects() {
    let app = TestApp::spawn().await;
    let (g, _, _) = membership(&app, 1, 3).await;
    let (x, _, _) = membership(&app, 2, 3).await;
    let (y, _, _) = membership(&app, 3, 3).await;
    let (g, x, y) = (
        g["id"].as_i64().unwrap(),
        x["id"].as_i64().unwrap(),
        y["id"].as_i64().unwrap(),
    );
    // Odd microseconds, and an expiry before 1970 (negative epoch with a fraction): the SQL
    // payload must spell the instant exactly as the Rust one does.
    let eg = back_date(&app, g, chrono::Duration::microseconds(3_600_000_007)).await;
    let ex: DateTime<Utc> = "1969-12-31T23:59:59.500001Z".parse().unwrap();
    set(&app, x, json!({"expires_at": ex})).await;
    // A staff expiry of the same kind, for comparison.
    set(&app, y, json!({"status": "expired", "expires_at": ex})).await;
    expect_counts(&sweep_now(&app).await, 2, 1, 1, 0);
    // The sweep's effects are queued; made rows as the worker's next run begins by doing.
    crate::effects::materialize(&app).await;
    let rows = app
        .db()
        .await
        .query(
            "SELECT e.membership_id, e.kind, e.dedupe_key, e.payload, e.chat_id, e.user_id,
                    c.telegram_chat_id, s.telegram_user_id
             FROM effects e JOIN memberships m ON m.id = e.membership_id
             JOIN channels c ON c.id = m.channel_id JOIN subscribers s ON s.id = m.subscriber_id
             WHERE e.kind IN ('revoke', 'grace_notice') ORDER BY e.membership_id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    // Each effect is keyed on the event of its transition, whoever wrote it.
    let event_of = |id: i64, to: &'static str| {
        let app = &app;
        async move {
            let r = app
                .db()
                .await
                .query_one(
                    "SELECT id, cause FROM membership_events
                     WHERE membership_id = $1 AND to_status = $2",
                    &[&id, &to],
                )
                .await
                .unwrap();
            (r.get::<_, i64>(0), r.get::<_, String>(1))
        }
    };
    let (ev_g, cause_g) = event_of(g, "grace").await;
    let (ev_x, cause_x) = event_of(x, "expired").await;
    let (ev_y, cause_y) = event_of(y, "expired").await;
    assert_eq!((cause_g.as_str(), cause_x.as_str()), ("sweep", "sweep"));
    assert_eq!(cause_y, "staff");
    for (row, id, kind, key, expires_at) in [
        (
            &rows[0],
            g,
            "grace_notice",
            format!("grace:{g}:ev{ev_g}"),
            eg,
        ),
        (&rows[1], x, "revoke", format!("revoke:{x}:ev{ev_x}"), ex),
        (&rows[2], y, "revoke", format!("revoke:{y}:ev{ev_y}"), ex),
    ] {
        assert_eq!(row.get::<_, i64>(0), id);
        assert_eq!(row.get::<_, &str>(1), kind);
        assert_eq!(row.get::<_, String>(2), key);
        let payload: Value = row.get(3);
        let parsed: DateTime<Utc> = serde_json::from_value(payload["expires_at"].clone()).unwrap();
        assert_eq!(parsed, expires_at, "{payload}");
        assert_eq!(row.get::<_, Option<i64>>(4), Some(row.get::<_, i64>(6)));
        assert_eq!(row.get::<_, i64>(5), row.get::<_, i64>(7));
    }
    assert_eq!(
        rows[1].get::<_, Value>(3),
        rows[2].get::<_, Value>(3),
        "the sweep's payload is the staff one, to the microsecond"
    );
}

/// Inserts `per_channel` overdue memberships in each of four channels (two with three days of
/// grace, two without); half of each channel's rows are an hour overdue, half ten days.
/// Returns how many should go to grace and to expired.
async fn bulk_overdue(app: &TestApp, per_channel: i64) -> (i64, i64) {
    let mut channels = Vec::new();
    for (n, grace) in [(1, 3), (2, 0), (3, 3), (4, 0)] {
        let c = app
            .create_channel(-2_000_000 - n, json!({"grace_period_days": grace}))
            .await;
        channels.push(c["id"].as_i64().unwrap() as i32);
    }
    let db = app.db().await;
    db.execute(
        "INSERT INTO subscribers (telegram_user_id) SELECT 5000000 + g FROM generate_series(1, $1::bigint) g",
        &[&per_channel],
    )
    .await
    .unwrap();
    let inserted = db
        .execute(
            "INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             SELECT s.id, c, 'active',
                    statement_timestamp() - CASE WHEN s.id % 2 = 0 THEN interval '1 hour'
                                                 ELSE interval '10 days' END
             FROM subscribers s CROSS JOIN unnest($1::int[]) AS c
             WHERE s.telegram_user_id > 5000000",
            &[&channels],
        )
        .await
        .unwrap();
    assert_eq!(inserted as i64, per_channel * 4);
    let row = db
        .query_one(
            "SELECT count(*) FILTER (WHERE ch.grace_period_days > 0 AND m.expires_at > statement_timestamp() - interval '3 days'),
                    count(*) FILTER (WHERE ch.grace_period_days = 0 OR m.expires_at <= statement_timestamp() - interval '3 days')
             FROM memberships m JOIN channels ch ON ch.id = m.channel_id",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousands_of_overdue_memberships_in_one_sweep() {
    let app = TestApp::spawn().await;
    let (to_grace, to_expired) = bulk_overdue(&app, 500).await;
    assert_eq!(to_grace + to_expired, 2_000);
    assert!(to_grace > 0 && to_expired > 0);

    // One window of 2,000 candidates, in twenty batches of 100.
    let report = sweep::sweep(&app.state.db, 100).await.unwrap();
    assert_eq!(report.examined, 2_000);
    assert_eq!(report.to_grace as i64, to_grace);
    assert_eq!(report.to_expired as i64, to_expired);
    assert_eq!(report.skipped, 0);

    let db = app.db().await;
    let row = db
        .query_one(
            "SELECT count(*) FILTER (WHERE status = 'active'),
                    count(*) FILTER (WHERE status = 'grace'),
                    count(*) FILTER (WHERE status = 'expired'),
                    (SELECT count(*) FROM membership_events WHERE cause = 'sweep')
             FROM memberships",
            &[],
        )
        .await
        .unwrap();
    let (active, grace, expired, events): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!((active, grace, expired), (0, to_grace, to_expired));
    assert_eq!(events, 2_000);

    // The grace rows are examined again by the next run (default batches, over HTTP): no change.
    expect_counts(&sweep_now(&app).await, to_grace as u64, 0, 0, 0);
    // No advisory lock outlives its batch.
    let left: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database =
                 (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_locks_in_the_middle_of_batches_are_skipped_and_the_run_ends() {
    let app = TestApp::spawn().await;
    let (_, _) = bulk_overdue(&app, 25).await;
    // Hold the pair locks of every seventh candidate.
    let mut holder = app.db().await;
    let tx = holder.transaction().await.unwrap();
    let held: Vec<(i64, i32, i32)> = tx
        .query(
            "SELECT id, subscriber_id, channel_id FROM memberships ORDER BY expires_at, id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .step_by(7)
        .collect();
    for (_, s, c) in &held {
        tx.execute("SELECT pg_advisory_xact_lock($1, $2)", &[s, c])
            .await
            .unwrap();
    }
    // Batch size 7: every batch starts with a held row; some batches are exactly full.
    let report = tokio::time::timeout(Duration::from_secs(30), sweep::sweep(&app.state.db, 7))
        .await
        .expect("the run terminates")
        .unwrap();
    assert_eq!(report.examined, 100);
    assert_eq!(report.skipped, held.len() as u64);
    assert_eq!(report.to_grace + report.to_expired, 100 - held.len() as u64);
    let db = app.db().await;
    for (id, _, _) in &held {
        assert_eq!(status_of(&app, *id).await.0, "active");
    }
    let active: i64 = db
        .query_one(
            "SELECT count(*) FROM memberships WHERE status = 'active'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(active, held.len() as i64);
    tx.rollback().await.unwrap();
    let report = sweep::sweep(&app.state.db, 7).await.unwrap();
    assert_eq!(report.skipped, 0);
    assert_eq!(report.to_grace + report.to_expired, held.len() as u64);
}

#[tokio::test]
async fn a_run_over_several_windows_examines_each_candidate_once() {
    for (batch, window) in [(4, 9), (500, 100), (3, 1)] {
        let app = TestApp::spawn().await;
        let (to_grace, to_expired) = bulk_overdue(&app, 25).await;
        // Each window is sorted by id and cut into batches, so batches interleave with the
        // keyset order of the windows; a window of exactly all candidates needs one more
        // (empty) look to end the run.
        let report = sweep::sweep_windowed(&app.state.db, batch, window, || false)
            .await
            .unwrap();
        let at = format!("batches of {batch}, windows of {window}");
        assert_eq!(report.examined, 100, "{at}");
        assert_eq!(report.skipped, 0, "{at}");
        assert_eq!(
            (report.to_grace as i64, report.to_expired as i64),
            (to_grace, to_expired),
            "{at}"
        );
        let row = app
            .db()
            .await
            .query_one(
                "SELECT count(*) FILTER (WHERE status = 'active'),
                        (SELECT count(*) FROM membership_events WHERE cause = 'sweep')
                 FROM memberships",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            (row.get::<_, i64>(0), row.get::<_, i64>(1)),
            (0, 100),
            "{at}"
        );
    }
}

#[tokio::test]
async fn subgate_sweep_cli_runs_one_sweep_and_prints_the_report() {
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 2).await;
    let id = m["id"].as_i64().unwrap();
    back_date(&app, id, chrono::Duration::hours(1)).await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_subgate"))
        .args(["sweep", "--batch-size", "10"])
        .env_clear()
        .env("DATABASE_URL", url_for(&app.db_name))
        .env("JWT_SECRET", crate::helpers::JWT_SECRET)
        .env("RUST_LOG", "info")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "stdout is JSON: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    expect_counts(&report, 1, 1, 0, 0);
    assert!(report["duration_ms"].is_u64());
    assert_eq!(status_of(&app, id).await.0, "grace");

    // A batch size out of range is refused before anything runs.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_subgate"))
        .args(["sweep", "--batch-size", "0"])
        .env_clear()
        .env("DATABASE_URL", url_for(&app.db_name))
        .env("JWT_SECRET", crate::helpers::JWT_SECRET)
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_interval_runs_the_sweep_in_the_server_and_stops_on_shutdown() {
    let app = TestApp::spawn_with(|env| {
        env.insert("SWEEP_INTERVAL_SECS".into(), "1".into());
    })
    .await;
    let (m, _, _) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    back_date(&app, id, chrono::Duration::hours(1)).await;

    let shutdown = subgate::shutdown::ShutdownSignal::new();
    let loops = tokio::spawn(subgate::background::run(
        app.state.clone(),
        shutdown.clone(),
    ));
    // The first run starts at once; wait for its effect (bounded), not for a fixed time.
    let deadline = Instant::now() + Duration::from_secs(15);
    while status_of(&app, id).await.0 != "expired" {
        assert!(Instant::now() < deadline, "the scheduled sweep never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // It keeps running on its interval: a second membership falls due and is swept too.
    let (m2, _, _) = membership(&app, 2, 1).await;
    let id2 = m2["id"].as_i64().unwrap();
    back_date(&app, id2, chrono::Duration::hours(1)).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while status_of(&app, id2).await.0 != "grace" {
        assert!(Instant::now() < deadline, "the schedule did not run again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(10), loops)
        .await
        .expect("the background loops stop on shutdown")
        .unwrap();
}

// ---- the sweep racing payments, checkouts and staff grants ----

/// A door-1 payment of `order` as payment `payment_id`, paid at `paid_at`.
fn payment_at(order: &Value, payment_id: &str, paid_at: DateTime<Utc>) -> Value {
    json!({
        "type": "payment.succeeded",
        "gateway": "acme",
        "payment_id": payment_id,
        "order_reference": order["reference"],
        "amount_minor": order["amount_minor"],
        "currency": order["currency"],
        "paid_at": paid_at,
    })
}

/// `POST /api/sweep` with the sweep token (the cron path; no staff lookup).
async fn sweep_with_token(app: &TestApp) -> crate::helpers::TestResponse {
    app.request(
        Method::POST,
        "/api/sweep",
        &[("authorization", &format!("Bearer {SWEEP_TOKEN}"))],
        "",
    )
    .await
}

/// The membership's events in order: (from, to, expires_at_before, expires_at_after, cause).
type EventRow = (
    Option<String>,
    String,
    Option<DateTime<Utc>>,
    DateTime<Utc>,
    String,
);

async fn events_of(app: &TestApp, id: i64, after_event: i64) -> Vec<EventRow> {
    app.db()
        .await
        .query(
            "SELECT from_status, to_status, expires_at_before, expires_at_after, cause
             FROM membership_events WHERE membership_id = $1 AND id > $2 ORDER BY id",
            &[&id, &after_event],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

async fn last_event_id(app: &TestApp) -> i64 {
    app.db()
        .await
        .query_one("SELECT COALESCE(max(id), 0) FROM membership_events", &[])
        .await
        .unwrap()
        .get(0)
}

/// Every event continues from the one before it (no lost update), starting from `start`, and
/// the chain ends at the membership's current row.
#[track_caller]
fn assert_chain(
    events: &[EventRow],
    start: (&str, DateTime<Utc>),
    end: (&str, DateTime<Utc>),
    round: usize,
) {
    let mut at = (start.0.to_string(), start.1);
    for e in events {
        assert_eq!(
            (e.0.as_deref(), e.2),
            (Some(at.0.as_str()), Some(at.1)),
            "round {round}: event {e:?} does not continue from {at:?}; all: {events:#?}"
        );
        if e.4 == "sweep" {
            assert_eq!(
                e.2,
                Some(e.3),
                "round {round}: a sweep never moves expires_at"
            );
        }
        at = (e.1.clone(), e.3);
    }
    assert_eq!(
        (at.0.as_str(), at.1),
        end,
        "round {round}: the row is not where its events lead; events: {events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_renewals_racing_five_sweeps_on_one_overdue_membership() {
    const ROUNDS: usize = 20;
    const RENEWALS: usize = 5;
    const SWEEPS: usize = 5;
    let app = std::sync::Arc::new(TestApp::spawn().await);
    // Zero grace and overdue: a sweep acting on a stale read would write `expired`.
    let (m, subscriber_id, channel_id) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    let period = chrono::Duration::days(30);
    app.token().await;

    for round in 0..ROUNDS {
        let now = db_now(&app).await;
        let expires_at = now - chrono::Duration::hours(2);
        let paid_at = now - chrono::Duration::hours(1);
        set(
            &app,
            id,
            json!({"status": "active", "expires_at": expires_at}),
        )
        .await;
        let mut orders = Vec::new();
        for _ in 0..RENEWALS {
            orders.push(app.create_order(subscriber_id, channel_id).await);
        }
        let before = last_event_id(&app).await;

        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(RENEWALS + SWEEPS));
        let mut renewals = Vec::new();
        for (n, order) in orders.iter().enumerate() {
            let (app, barrier) = (app.clone(), barrier.clone());
            let body = payment_at(order, &format!("race-{round}-{n}"), paid_at);
            renewals.push(tokio::spawn(async move {
                barrier.wait().await;
                app.post_signed_webhook(&body).await
            }));
        }
        let mut sweeps = Vec::new();
        for _ in 0..SWEEPS {
            let (app, barrier) = (app.clone(), barrier.clone());
            sweeps.push(tokio::spawn(async move {
                barrier.wait().await;
                sweep_with_token(&app).await
            }));
        }
        for r in renewals {
            let body = r.await.unwrap().expect(200);
            assert_eq!(body["duplicate"], false, "round {round}: {body}");
            assert_eq!(
                body["payment"]["outcome"], "applied",
                "round {round}: {body}"
            );
        }
        for s in sweeps {
            s.await.unwrap().expect(200);
        }

        let (status, final_expires) = status_of(&app, id).await;
        let after = db_now(&app).await;
        assert_eq!(status, "active", "round {round}");
        let events = events_of(&app, id, before).await;
        // The first renewal's base is GREATEST(expires_at, database now) = when it was applied
        // (not the paid_at an hour ago); every later one extends from the expiry before it.
        let first = events
            .iter()
            .find(|e| e.4 == "payment")
            .expect("a payment event");
        let base = first.3 - period;
        assert!(now <= base && base <= after, "round {round}: base {base}");
        assert_eq!(
            final_expires,
            base + period * RENEWALS as i32,
            "round {round}"
        );
        assert_chain(
            &events,
            ("active", expires_at),
            ("active", final_expires),
            round,
        );
        assert_eq!(
            events.iter().filter(|e| e.4 == "payment").count(),
            RENEWALS,
            "round {round}"
        );
        // A sweep may have expired the membership before the first renewal, never after one.
        for e in events.iter().filter(|e| e.4 == "sweep") {
            assert_eq!(
                e.3, expires_at,
                "round {round}: sweep on a renewed term: {e:?}"
            );
        }
        let paid = app
            .count(&format!(
                "orders WHERE status = 'paid' AND id = ANY('{{{}}}'::bigint[])",
                orders
                    .iter()
                    .map(|o| o["id"].to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ))
            .await;
        assert_eq!(paid, RENEWALS as i64, "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkout_payment_grant_and_sweep_at_once_never_5xx() {
    const ROUNDS: usize = 20;
    let app = std::sync::Arc::new(TestApp::spawn().await);
    // A seat-limited channel with one seat, held by member A whose term has run out; B wants in.
    let (m, a, channel_id) = membership(&app, 1, 0).await;
    app.patch(
        &format!("/api/channels/{channel_id}"),
        json!({"seat_limit": 1}),
    )
    .await
    .expect(200);
    let id = m["id"].as_i64().unwrap();
    let b = app.create_subscriber(9_999).await["id"].as_i64().unwrap();
    app.token().await;
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();

    for round in 0..ROUNDS {
        // Odd rounds start with A already expired: then B may take the seat and A's payment
        // may find none (a renewal of an expired membership needs a seat again).
        let start = if round % 2 == 0 { "active" } else { "expired" };
        let expires_at = db_now(&app).await - chrono::Duration::hours(1);
        set(&app, id, json!({"status": start, "expires_at": expires_at})).await;
        let order_a = app.create_order(a, channel_id).await;
        let order_b = app.create_order(b, channel_id).await;
        let before = last_event_id(&app).await;
        let paid_at = db_now(&app).await;

        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(7));
        let mut tasks: Vec<(&str, tokio::task::JoinHandle<crate::helpers::TestResponse>)> =
            Vec::new();
        macro_rules! task {
            ($name:expr, |$app:ident| $body:expr) => {{
                let ($app, barrier) = (app.clone(), barrier.clone());
                // Released together, then staggered by up to 2 ms (varying per round and task) so
                // the rounds cover many interleavings, not just the one the scheduler prefers.
                let stagger = Duration::from_micros(rand::random::<u64>() % 2_000);
                tasks.push((
                    $name,
                    tokio::spawn(async move {
                        barrier.wait().await;
                        tokio::time::sleep(stagger).await;
                        $body
                    }),
                ));
            }};
        }
        let (oa, ob) = (
            order_a["id"].as_i64().unwrap(),
            order_b["id"].as_i64().unwrap(),
        );
        let pay = payment_at(&order_a, &format!("mix-{round}"), paid_at);
        task!("checkout A", |app| app.checkout(oa).await);
        task!("pay A", |app| app.post_signed_webhook(&pay).await);
        task!("grant A", |app| app
            .post(
                "/api/memberships",
                json!({"subscriber_id": a, "channel_id": channel_id, "days": 1})
            )
            .await);
        task!("sweep", |app| sweep_with_token(&app).await);
        task!("checkout B", |app| app.checkout(ob).await);
        task!("sweep (staff)", |app| app
            .post("/api/sweep", Value::Null)
            .await);
        task!("cancel B", |app| app
            .post(&format!("/api/orders/{ob}/cancel"), Value::Null)
            .await);

        for (name, task) in tasks {
            let r = task.await.unwrap();
            let status = r.status.as_u16();
            assert!(
                status < 500,
                "round {round}: {name} answered {status}: {}",
                String::from_utf8_lossy(&r.bytes)
            );
            let allowed: &[u16] = match name {
                "checkout A" | "checkout B" => &[200, 409],
                "pay A" | "sweep" | "sweep (staff)" => &[200],
                "grant A" => &[200, 201],
                "cancel B" => &[200, 409],
                _ => unreachable!(),
            };
            assert!(
                allowed.contains(&status),
                "round {round}: {name} answered {status}: {}",
                String::from_utf8_lossy(&r.bytes)
            );
            if name.starts_with("checkout") {
                *outcomes.entry(format!("{name} {status}")).or_default() += 1;
            }
            if name == "pay A" {
                let body = r.json();
                let outcome = format!(
                    "{}/{}",
                    body["payment"]["outcome"].as_str().unwrap(),
                    body["payment"]["reason"].as_str().unwrap_or("-")
                );
                *outcomes.entry(outcome).or_default() += 1;
            }
        }

        // Rows are consistent: the membership is where its events lead, nothing was lost.
        let (status, final_expires) = status_of(&app, id).await;
        assert_eq!(
            status, "active",
            "round {round}: the staff grant always revives"
        );
        let events = events_of(&app, id, before).await;
        assert_chain(
            &events,
            (start, expires_at),
            ("active", final_expires),
            round,
        );
        let db = app.db().await;
        let row = db
            .query_one(
                "SELECT o.status, o.paid_at IS NOT NULL, p.outcome, p.reason
                 FROM orders o JOIN payments p ON p.order_id = o.id
                 WHERE o.id = $1 AND p.external_id = $2",
                &[&oa, &format!("mix-{round}")],
            )
            .await
            .unwrap();
        let (order_status, has_paid_at, outcome): (String, bool, String) =
            (row.get(0), row.get(1), row.get(2));
        let payment_events = events.iter().filter(|e| e.4 == "payment").count();
        if outcome == "applied" {
            assert_eq!((order_status.as_str(), has_paid_at), ("paid", true));
            assert_eq!(payment_events, 1, "round {round}");
        } else {
            assert_eq!(order_status, "pending", "round {round}: {outcome}");
            assert_eq!(payment_events, 0, "round {round}");
        }
        assert_eq!(
            events.iter().filter(|e| e.4 == "staff").count(),
            1,
            "round {round}: one grant"
        );
        // B's order ended cancelled (its cancel always runs) with no hold left.
        let row = db
            .query_one(
                "SELECT status, hold_until FROM orders WHERE id = $1",
                &[&ob],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "cancelled", "round {round}");
        assert_eq!(row.get::<_, Option<DateTime<Utc>>>(1), None);
        // Clean up A's unpaid order so its hold (if any) does not count next round.
        if outcome != "applied" {
            app.post(&format!("/api/orders/{oa}/cancel"), Value::Null)
                .await
                .expect(200);
        }
    }
    eprintln!("outcomes over {ROUNDS} rounds: {outcomes:?}");
}

#[tokio::test]
async fn a_renewal_committed_between_the_lock_statement_and_the_decision_is_respected() {
    // Under READ COMMITTED the statement that takes the pair locks reads from a snapshot taken
    // before them; a renewal can commit in between. Commit one exactly there and check the batch
    // writes nothing: its decision was made from the older row, and the write is conditional
    // on the row still being what the decision saw.
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    let expires_at = back_date(&app, id, chrono::Duration::hours(1)).await;

    let mut client = app.app_db().await;
    let tx = client.transaction().await.unwrap();
    let now = db_now(&app).await;
    let candidates = sweep::lock_candidates(&tx, now, &[id]).await.unwrap();
    assert_eq!(candidates.len(), 1);
    assert_eq!(
        (
            candidates[0].id,
            candidates[0].status,
            candidates[0].expires_at
        ),
        (id, sweep::Status::Active, expires_at)
    );
    assert!(candidates[0].locked);

    // The renewal that slipped in (written directly: the pair lock is ours now).
    let renewed: DateTime<Utc> = app
        .db()
        .await
        .query_one(
            "UPDATE memberships SET expires_at = statement_timestamp() + interval '30 days'
             WHERE id = $1 RETURNING expires_at",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);

    // Decided from the row as the locking statement read it: expire it.
    let decisions = sweep::decide(&candidates);
    assert_eq!(
        decisions,
        [sweep::Decision {
            id,
            from: sweep::Status::Active,
            to: sweep::Status::Expired,
            expires_at
        }]
    );
    assert!(
        sweep::apply_batch(&tx, &decisions)
            .await
            .unwrap()
            .is_empty(),
        "a decision made from an older row must write nothing"
    );
    tx.commit().await.unwrap();
    assert_eq!(status_of(&app, id).await, ("active".into(), renewed));
    assert!(sweep_events(&app, id).await.is_empty());
}
