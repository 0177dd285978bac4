//! The sweep's queued effects (`sweep_queue`, migration 0017): a batch records each revoke and
//! grace notice as a narrow queued row in its own transaction, and the effects worker makes
//! `effects` rows of them a chunk at a time (`effects::materialize_sweep_queue`) — each queued
//! row exactly one effect, with the key and payload it would have had, never lost: not when its
//! membership is deleted first, not when two workers take from the queue at once.

use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::{
    access::membership_changes::assert_chat_change_waits_for_pending_effects,
    support::{
        effects::{
            app_with, channel, effects_of, grant, materialize, patch_membership, run, settle,
            subscriber,
        },
        fake_bot::FakeBot,
        helpers::TestApp,
    },
};

/// Back-dates membership `m` by an hour, so the next sweep moves it.
async fn overdue(app: &TestApp, m: i64) {
    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    patch_membership(app, m, json!({"expires_at": past})).await;
}

/// `n` subscribers (Telegram users `first_user + 1` …) with a membership of channel `c` that
/// ended an hour ago, made by SQL.
async fn overdue_members(app: &TestApp, c: i64, first_user: i64, n: i64) {
    app.db()
        .await
        .batch_execute(&format!(
            "INSERT INTO subscribers (telegram_user_id)
             SELECT {first_user} + g FROM generate_series(1, {n}) g;
             INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             SELECT s.id, {c}, 'active', now() - interval '1 hour'
             FROM subscribers s WHERE s.telegram_user_id > {first_user};"
        ))
        .await
        .unwrap();
}

/// The sweep's event of membership `m` (its only `sweep` event).
async fn sweep_event(app: &TestApp, m: i64) -> i64 {
    app.db()
        .await
        .query_one(
            "SELECT id FROM membership_events WHERE membership_id = $1 AND cause = 'sweep'",
            &[&m],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn the_sweep_queues_its_effects_and_each_becomes_one_effect() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let graceful = channel(&app, -1_001_000_017_001, json!({"grace_period_days": 3})).await;
    let strict = channel(&app, -1_001_000_017_002, json!({})).await;
    let a = subscriber(&app, 17001).await;
    let b = subscriber(&app, 17002).await;
    let ma = grant(&app, a, graceful, 30).await;
    let mb = grant(&app, b, strict, 30).await;
    settle(&app).await;
    overdue(&app, ma).await;
    overdue(&app, mb).await;

    let report = app.post("/api/sweep", Value::Null).await.expect(200);
    assert_eq!(
        (report["to_grace"].as_i64(), report["to_expired"].as_i64()),
        (Some(1), Some(1))
    );
    // Committed with the transitions, queued: not yet effects.
    assert_eq!(app.count("sweep_queue").await, 2);
    assert!(effects_of(&app, "revoke").await.is_empty());
    assert!(effects_of(&app, "grace_notice").await.is_empty());
    // A queued revoke is pending work in its chat, for the metrics as for the API.
    let depths = subgate::outbox::effects::queue_depths(&app.app_db().await)
        .await
        .unwrap();
    for kind in [
        subgate::outbox::effects::Kind::Revoke,
        subgate::outbox::effects::Kind::GraceNotice,
    ] {
        let d = depths
            .iter()
            .find(|d| d.kind == kind)
            .expect("a queue depth");
        assert_eq!(
            (d.status, d.count),
            (subgate::outbox::effects::Status::Pending, 1)
        );
    }

    let taken = subgate::outbox::effects::materialize_sweep_queue(&app.app_db().await)
        .await
        .unwrap();
    assert_eq!(taken, 2);
    assert_eq!(app.count("sweep_queue").await, 0);
    let revokes = effects_of(&app, "revoke").await;
    let notices = effects_of(&app, "grace_notice").await;
    assert_eq!((revokes.len(), notices.len()), (1, 1));
    let (eva, evb) = (sweep_event(&app, ma).await, sweep_event(&app, mb).await);
    assert_eq!(revokes[0]["membership_id"].as_i64(), Some(mb));
    assert_eq!(revokes[0]["user_id"].as_i64(), Some(17002));
    assert_eq!(revokes[0]["chat_id"].as_i64(), Some(-1_001_000_017_002));
    assert_eq!(revokes[0]["status"], "pending");
    assert_eq!(
        revokes[0]["dedupe_key"].as_str(),
        Some(format!("revoke:{mb}:ev{evb}").as_str())
    );
    assert_eq!(notices[0]["membership_id"].as_i64(), Some(ma));
    assert_eq!(
        notices[0]["dedupe_key"].as_str(),
        Some(format!("grace:{ma}:ev{eva}").as_str())
    );
    // The payload is the membership's expiry, as the worker reads it.
    let expires: String = app
        .db()
        .await
        .query_one(
            "SELECT to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
             FROM memberships WHERE id = $1",
            &[&mb],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(revokes[0]["payload"], json!({"expires_at": expires}));

    // Nothing left to take; the worker performs what was made.
    assert_eq!(
        subgate::outbox::effects::materialize_sweep_queue(&app.app_db().await)
            .await
            .unwrap(),
        0
    );
    fake.add_member(-1_001_000_017_002, 17002);
    run(&app).await;
    assert!(!fake.is_member(-1_001_000_017_002, 17002), "removed");
    let texts: Vec<(i64, String)> = fake
        .calls_of("sendMessage")
        .iter()
        .map(|c| {
            (
                c.params["chat_id"].as_i64().unwrap(),
                c.params["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        texts.len(),
        2,
        "the grace notice, the end of access: {texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|(to, t)| *to == 17002 && t.contains("has ended")),
        "{texts:?}"
    );
}

#[tokio::test]
async fn a_worker_run_makes_and_performs_the_queued_revokes() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_017_003;
    let c = channel(&app, chat, json!({})).await;
    let s = subscriber(&app, 17003).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, 17003);
    fake.clear_calls();
    overdue(&app, m).await;

    app.post("/api/sweep", Value::Null).await.expect(200);
    assert_eq!(app.count("sweep_queue").await, 1);
    // The run begins by making the queued revoke an effect, then performs it.
    let report = run(&app).await;
    assert_eq!(report.enqueued, 1, "{report:?}");
    assert_eq!(app.count("sweep_queue").await, 0);
    assert_eq!(
        fake.methods(),
        ["banChatMember", "unbanChatMember", "sendMessage"],
        "removed, then told"
    );
    assert!(!fake.is_member(chat, 17003));
    let revokes = effects_of(&app, "revoke").await;
    assert_eq!(revokes.len(), 1);
    assert_eq!(revokes[0]["status"], "done");
}

#[tokio::test]
async fn a_revoke_queued_for_a_membership_deleted_since_is_still_made() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_017_004;
    let c = channel(&app, chat, json!({})).await;
    let s = subscriber(&app, 17004).await;
    let m = grant(&app, s, c, 30).await;
    settle(&app).await;
    overdue(&app, m).await;
    app.post("/api/sweep", Value::Null).await.expect(200);
    let ev = sweep_event(&app, m).await;
    // An expired membership's deletion enqueues no revoke of its own: its expiry's is queued.
    app.delete(&format!("/api/memberships/{m}"))
        .await
        .expect(204);
    assert!(effects_of(&app, "revoke").await.is_empty());

    materialize(&app).await;
    let revokes = effects_of(&app, "revoke").await;
    assert_eq!(revokes.len(), 1, "{revokes:?}");
    assert_eq!(
        revokes[0]["membership_id"],
        Value::Null,
        "names no membership"
    );
    assert_eq!(revokes[0]["user_id"].as_i64(), Some(17004));
    assert_eq!(revokes[0]["chat_id"].as_i64(), Some(chat));
    assert_eq!(revokes[0]["payload"]["membership_id"].as_i64(), Some(m));
    assert_eq!(revokes[0]["payload"]["deleted"], true);
    assert_eq!(
        revokes[0]["dedupe_key"].as_str(),
        Some(format!("revoke:{m}:ev{ev}").as_str())
    );
    fake.add_member(chat, 17004);
    run(&app).await;
    assert!(!fake.is_member(chat, 17004), "the revoke is performed");
}

#[tokio::test]
async fn queued_effects_hold_off_a_chat_change() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (old_chat, new_chat): (i64, i64) = (-1_001_000_017_005, -1_001_000_017_006);
    let c = channel(&app, old_chat, json!({})).await;
    let s = subscriber(&app, 17005).await;
    let m = grant(&app, s, c, 30).await;
    settle(&app).await;
    overdue(&app, m).await;
    app.post("/api/sweep", Value::Null).await.expect(200);
    assert_eq!(app.count("sweep_queue").await, 1);

    let path = format!("/api/channels/{c}");
    assert_chat_change_waits_for_pending_effects(&app, &path, new_chat).await;
    run(&app).await;
    assert_eq!(app.count("sweep_queue").await, 0);
    let changed = app
        .patch(&path, json!({"telegram_chat_id": new_chat}))
        .await
        .expect(200);
    assert_eq!(changed["telegram_chat_id"], new_chat);
}

/// Workers taking from the queue at once, released together, repeated: every queued row
/// becomes exactly one effect, none is lost or made twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_workers_make_each_queued_effect_exactly_once() {
    let app = Arc::new(TestApp::spawn().await);
    let c = channel(&app, -1_001_000_017_007, json!({})).await;
    const MEMBERS: i64 = 1_200;
    const WORKERS: usize = 4;
    overdue_members(&app, c, 17100000, MEMBERS).await;
    for round in 0..3 {
        if round > 0 {
            // Live again and overdue again: the next sweep queues a second transition each.
            app.db()
                .await
                .batch_execute(
                    "UPDATE memberships SET status = 'active', expires_at = now() - interval '1 hour'",
                )
                .await
                .unwrap();
        }
        let report = app.post("/api/sweep", Value::Null).await.expect(200);
        assert_eq!(
            report["to_expired"].as_i64(),
            Some(MEMBERS),
            "round {round}"
        );
        assert_eq!(app.count("sweep_queue").await, MEMBERS);
        let barrier = Arc::new(Barrier::new(WORKERS));
        let tasks: Vec<_> = (0..WORKERS)
            .map(|_| {
                let (app, barrier) = (app.clone(), barrier.clone());
                tokio::spawn(async move {
                    let client = app.app_db().await;
                    barrier.wait().await;
                    let mut taken = 0;
                    loop {
                        let n = subgate::outbox::effects::materialize_sweep_queue(&client)
                            .await
                            .unwrap();
                        if n == 0 {
                            return taken;
                        }
                        taken += n;
                    }
                })
            })
            .collect();
        let mut taken = 0;
        for t in tasks {
            taken += t.await.unwrap();
        }
        assert_eq!(taken, MEMBERS as u64, "round {round}");
        assert_eq!(app.count("sweep_queue").await, 0);
        let rounds = round as i64 + 1;
        assert_eq!(
            app.count("effects WHERE kind = 'revoke'").await,
            MEMBERS * rounds,
            "round {round}"
        );
        // One revoke per transition: per membership one per round, each keyed on its event.
        assert_eq!(
            app.count(
                "(SELECT membership_id FROM effects WHERE kind = 'revoke'
                  GROUP BY membership_id HAVING count(*) <> $ROUNDS) x"
                    .replace("$ROUNDS", &rounds.to_string())
                    .as_str()
            )
            .await,
            0
        );
        assert_eq!(
            app.count(
                "effects e JOIN membership_events ev
                   ON e.dedupe_key = 'revoke:' || ev.membership_id || ':ev' || ev.id
                 WHERE e.kind = 'revoke' AND ev.cause = 'sweep'"
            )
            .await,
            MEMBERS * rounds
        );
    }
}

/// A grant committed while the worker drains a large sweep waits behind the chunk or two of
/// revokes already made, not behind every revoke still queued: the queue is made effects a
/// chunk at a time, when the worker's lanes run dry.
#[tokio::test]
async fn a_grant_during_a_sweeps_drain_waits_for_a_chunk_not_the_whole_queue() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_017_008;
    let c = channel(&app, chat, json!({})).await;
    const MEMBERS: i64 = 200;
    overdue_members(&app, c, 17200000, MEMBERS).await;
    let report = app.post("/api/sweep", Value::Null).await.expect(200);
    assert_eq!(report["to_expired"].as_i64(), Some(MEMBERS));
    let chunk = subgate::outbox::effects::SWEEP_QUEUE_CHUNK;
    let lanes = subgate::app::worker::Options::default().concurrency as i64;

    // The worker starts draining: a run capped at a few effects.
    let capped = |max_effects| {
        subgate::app::worker::Worker::new(
            app.state.clone(),
            subgate::app::worker::Options {
                max_effects,
                ..subgate::app::worker::Options::default()
            },
        )
    };
    capped(5).run(false, &|| false).await.unwrap();
    let made = app.count("effects WHERE kind = 'revoke'").await;
    assert!(made < MEMBERS / 2, "{made} revokes made of {MEMBERS}");

    // Then a buyer is granted access.
    let buyer = subscriber(&app, 17299999).await;
    grant(&app, buyer, c, 30).await;
    let pending_revokes = app
        .count("effects WHERE kind = 'revoke' AND status = 'pending'")
        .await;
    // The next run reaches the grant after the revokes already made (and those its lanes
    // claimed together with it), long before the queue's end.
    capped((pending_revokes + lanes + 1) as u64)
        .run(false, &|| false)
        .await
        .unwrap();
    let grant_status: String = app
        .db()
        .await
        .query_one(
            "SELECT status FROM effects WHERE kind = 'grant' AND user_id = 17299999",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(grant_status, "done");
    let bans = fake.calls_of("banChatMember").len() as i64;
    assert!(
        bans <= 5 + pending_revokes + lanes + chunk * lanes,
        "{bans} kicks before the grant"
    );
    assert!(
        app.count("sweep_queue").await >= MEMBERS - made - chunk * (lanes + 1),
        "most of the sweep is still queued"
    );
}
