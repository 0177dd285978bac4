//! How the sweep runs: its effects carry the keys and payloads of staff effects, thousands of
//! overdue memberships in one sweep, held locks in the middle of batches skipped, each
//! candidate examined once over several windows, the `subgate sweep` command and the in-process
//! schedule.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use subgate::access::sweep;

use crate::{
    access::sweep::{back_date, expect_counts, membership, set, status_of, sweep_now},
    support::helpers::{TestApp, url_for},
};

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
    crate::support::effects::materialize(&app).await;
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
        .env("JWT_SECRET", crate::support::helpers::JWT_SECRET)
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
        .env("JWT_SECRET", crate::support::helpers::JWT_SECRET)
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

    let shutdown = subgate::common::shutdown::ShutdownSignal::new();
    let loops = tokio::spawn(subgate::app::background::run(
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
