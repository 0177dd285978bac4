//! Audits of a channel's member list (`POST /api/channels/{id}/audit`, `GET /api/audits/{id}`,
//! `AUDIT_INTERVAL_SECS`) against the fake Bot API's member lists: each category, report only
//! changing nothing, a fix repaired by the effects worker, the refusals, a 429 asked again, a
//! running audit left by a dead process, and the schedule.

use std::time::Duration;

use serde_json::{Value, json};
use subgate::{common::shutdown::ShutdownSignal, outbox::effects};

use crate::support::{
    effects::{app_with, run},
    fake_bot::{FakeBot, Reply},
    helpers::{TestApp, id},
};

pub(crate) const CHAT: i64 = -1001000000777;

// Users of the fixture: (telegram user id, live?, where Telegram has them).
pub(crate) const FINE_IN: i64 = 9101; // live, a member: fine
pub(crate) const BANNED: i64 = 9102; // live, banned: live_but_banned
pub(crate) const AWAY: i64 = 9103; // live, not in the chat: live_not_in_chat
pub(crate) const STAYED: i64 = 9104; // expired, still a member: not_live_but_in_chat
pub(crate) const ADMIN: i64 = 9105; // expired, a chat administrator: exempt
pub(crate) const LISTED: i64 = 9106; // expired, a member, on the exemption list: exempt
pub(crate) const GONE: i64 = 9107; // live, unknown to Telegram: unknown_to_telegram
pub(crate) const FINE_OUT: i64 = 9108; // expired, not in the chat: fine

/// A channel of chat `chat` with the eight users above, as memberships written in SQL (so no
/// effect is queued by the fixture itself), and their places in the fake's chat. Returns the
/// channel id.
pub(crate) async fn fixture(app: &TestApp, fake: &FakeBot, chat: i64) -> i64 {
    let channel = id(&app.create_channel(chat, json!({})).await);
    let users = [
        (FINE_IN, true),
        (BANNED, true),
        (AWAY, true),
        (STAYED, false),
        (ADMIN, false),
        (LISTED, false),
        (GONE, true),
        (FINE_OUT, false),
    ];
    for (user, live) in users {
        let subscriber = id(&app.create_subscriber(user).await);
        let (status, expires) = if live {
            ("active", "statement_timestamp() + interval '10 days'")
        } else {
            ("expired", "statement_timestamp() - interval '10 days'")
        };
        app.db()
            .await
            .execute(
                &format!(
                    "INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
                     VALUES ($1, $2, '{status}', {expires})"
                ),
                &[&(subscriber as i32), &(channel as i32)],
            )
            .await
            .unwrap();
    }
    fake.add_member(chat, FINE_IN);
    fake.ban(chat, BANNED);
    fake.add_member(chat, STAYED);
    fake.add_admin(chat, ADMIN);
    fake.add_member(chat, LISTED);
    fake.add_unknown_user(GONE);
    app.db()
        .await
        .execute(
            "INSERT INTO channel_exemptions (channel_id, telegram_user_id, note)
             VALUES ($1, $2, 'the editor')",
            &[&(channel as i32), &LISTED],
        )
        .await
        .unwrap();
    channel
}

/// Polls `GET /api/audits/{id}` until the audit is no longer running (deadline 20 s).
async fn finished(app: &TestApp, audit: i64) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let a = app.get(&format!("/api/audits/{audit}")).await.expect(200);
        if a["status"] != "running" {
            return a;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "audit still running: {a}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start(app: &TestApp, channel: i64, body: Value) -> i64 {
    let r = app
        .post(&format!("/api/channels/{channel}/audit"), body)
        .await
        .expect(202);
    r["audit_id"].as_i64().unwrap()
}

fn users_of(report: &Value, category: &str) -> Vec<i64> {
    let mut users: Vec<i64> = report["rows"][category]
        .as_array()
        .unwrap_or_else(|| panic!("no rows of {category}: {report}"))
        .iter()
        .map(|r| r["telegram_user_id"].as_i64().unwrap())
        .collect();
    users.sort_unstable();
    users
}

async fn effect_rows(app: &TestApp) -> Vec<(String, i64, String)> {
    app.db()
        .await
        .query(
            "SELECT kind, user_id, dedupe_key FROM effects ORDER BY user_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("kind"), r.get("user_id"), r.get("dedupe_key")))
        .collect()
}

#[tokio::test]
async fn a_report_only_audit_sorts_every_user_and_changes_nothing() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let channel = fixture(&app, &fake, CHAT).await;
    let before = fake.members_of(CHAT);

    // No body: report only.
    let r = app
        .post(&format!("/api/channels/{channel}/audit"), Value::Null)
        .await;
    let audit = r.expect(202)["audit_id"].as_i64().unwrap();
    let a = finished(&app, audit).await;

    assert_eq!(a["status"], "done", "{a}");
    assert_eq!(
        (a["fix"].clone(), a["channel_id"].clone()),
        (json!(false), json!(channel))
    );
    assert_eq!(
        (a["checked"].as_i64(), a["total"].as_i64()),
        (Some(8), Some(8))
    );
    assert_eq!(
        a["counts"],
        json!({"live_not_in_chat": 1, "live_but_banned": 1, "not_live_but_in_chat": 1,
               "exempt": 2, "unknown_to_telegram": 1})
    );
    assert_eq!(users_of(&a, "live_but_banned"), [BANNED]);
    assert_eq!(users_of(&a, "live_not_in_chat"), [AWAY]);
    assert_eq!(users_of(&a, "not_live_but_in_chat"), [STAYED]);
    assert_eq!(users_of(&a, "exempt"), [ADMIN, LISTED]);
    assert_eq!(users_of(&a, "unknown_to_telegram"), [GONE]);
    assert!(a["finished_at"].is_string() && a["started_at"].is_string());

    // A row names the subscriber, the membership and what Telegram said.
    let row = &a["rows"]["not_live_but_in_chat"][0];
    let db = app.db().await;
    let m = db
        .query_one(
            "SELECT m.id, m.subscriber_id FROM memberships m
             JOIN subscribers s ON s.id = m.subscriber_id WHERE s.telegram_user_id = $1",
            &[&STAYED],
        )
        .await
        .unwrap();
    assert_eq!(row["membership_id"], json!(m.get::<_, i64>("id")));
    assert_eq!(
        row["subscriber_id"],
        json!(m.get::<_, i32>("subscriber_id"))
    );
    assert_eq!(row["telegram_status"], "member");
    assert_eq!(a["rows"]["live_but_banned"][0]["telegram_status"], "kicked");
    assert_eq!(
        a["rows"]["unknown_to_telegram"][0]["telegram_status"],
        Value::Null
    );
    let admin = a["rows"]["exempt"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["telegram_user_id"] == ADMIN)
        .unwrap();
    assert_eq!(admin["telegram_status"], "administrator");

    // Everyone who ever had a membership was asked once; nothing was queued or changed.
    assert_eq!(fake.calls_of("getChatMember").len(), 8);
    assert!(effect_rows(&app).await.is_empty());
    run(&app).await;
    assert_eq!(fake.members_of(CHAT), before);
    assert!(fake.is_banned(CHAT, BANNED));
    for m in ["banChatMember", "unbanChatMember"] {
        assert!(fake.calls_of(m).is_empty(), "{m} called");
    }

    // The row as stored, and the list (newest first).
    let row = db
        .query_one("SELECT status, checked, total, finished_at IS NOT NULL AS ended FROM audits WHERE id = $1", &[&audit])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>("status"), "done");
    assert!(row.get::<_, bool>("ended"));
    let second = start(&app, channel, json!({"fix": false})).await;
    finished(&app, second).await;
    let list = app
        .get(&format!("/api/audits?channel_id={channel}"))
        .await
        .expect(200);
    let ids: Vec<i64> = list["items"].as_array().unwrap().iter().map(id).collect();
    assert_eq!(ids, [second, audit]);
    assert_eq!(list["next_before"], Value::Null);
}

#[tokio::test]
async fn a_fix_is_repaired_by_the_worker_and_leaves_administrators_and_exemptions_alone() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let channel = fixture(&app, &fake, CHAT).await;

    let audit = start(&app, channel, json!({"fix": true})).await;
    let a = finished(&app, audit).await;
    assert_eq!(
        (a["status"].clone(), a["fix"].clone()),
        (json!("done"), json!(true))
    );

    // One unban for the banned live user, one revoke for the expired one still inside,
    // keyed on the audit; nothing for administrators, exempt, unknown or away users.
    assert_eq!(
        effect_rows(&app).await,
        [
            (
                "unban".to_string(),
                BANNED,
                effects::found_key(
                    effects::Kind::Unban,
                    CHAT,
                    BANNED,
                    effects::payload::Found::Audit,
                    audit
                )
            ),
            (
                "revoke".to_string(),
                STAYED,
                effects::found_key(
                    effects::Kind::Revoke,
                    CHAT,
                    STAYED,
                    effects::payload::Found::Audit,
                    audit
                )
            ),
        ]
    );

    // The worker performs them: the list is right.
    let report = run(&app).await;
    assert_eq!(report.done, 2, "{report:?}");
    assert!(!fake.is_banned(CHAT, BANNED), "the live user is unbanned");
    assert!(!fake.is_member(CHAT, STAYED), "the expired user is out");
    assert_eq!(fake.members_of(CHAT), [FINE_IN, ADMIN, LISTED]);
    for untouched in [ADMIN, LISTED, FINE_IN, AWAY, GONE, FINE_OUT] {
        for m in ["banChatMember", "unbanChatMember"] {
            assert!(
                !fake
                    .calls_of(m)
                    .iter()
                    .any(|c| c.params["user_id"] == untouched),
                "{m} for {untouched}"
            );
        }
    }

    // A second fix finds nothing more to repair.
    let again = start(&app, channel, json!({"fix": true})).await;
    let b = finished(&app, again).await;
    assert_eq!(b["counts"]["live_but_banned"], 0, "{b}");
    assert_eq!(b["counts"]["not_live_but_in_chat"], 0, "{b}");
    assert_eq!(effect_rows(&app).await.len(), 2);
}

#[tokio::test]
async fn an_audit_is_refused_while_one_runs_and_for_unknown_ids() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let channel = fixture(&app, &fake, CHAT).await;

    let hold = fake.hold("getChatMember");
    let audit = start(&app, channel, json!({})).await;
    hold.arrived().await;
    let running = app.get(&format!("/api/audits/{audit}")).await.expect(200);
    assert_eq!(running["status"], "running");
    assert_eq!(running["total"], 8);
    assert_eq!(running["finished_at"], Value::Null);
    let again = app
        .post(
            &format!("/api/channels/{channel}/audit"),
            json!({"fix": true}),
        )
        .await;
    assert_eq!(again.status, 409, "{}", again.json());
    assert_eq!(app.count("audits").await, 1);
    hold.release();
    assert_eq!(finished(&app, audit).await["status"], "done");

    app.post("/api/channels/999999/audit", json!({}))
        .await
        .expect(404);
    app.get("/api/audits/999999").await.expect(404);
    let bad = app
        .post(
            &format!("/api/channels/{channel}/audit"),
            json!({"fix": "yes"}),
        )
        .await;
    assert_eq!(bad.status, 400);
    let bad = app
        .post(
            &format!("/api/channels/{channel}/audit"),
            json!({"repair": true}),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(app.count("audits").await, 1);
}

#[tokio::test]
async fn without_a_bot_token_an_audit_is_503() {
    for dry_run in [false, true] {
        let app = TestApp::spawn_with(|env| {
            env.insert("TELEGRAM_BOT_TOKEN".into(), String::new());
            env.insert("TELEGRAM_DRY_RUN".into(), dry_run.to_string());
        })
        .await;
        let channel = id(&app.create_channel(CHAT, json!({})).await);
        let r = app
            .post(&format!("/api/channels/{channel}/audit"), json!({}))
            .await;
        assert_eq!(r.status, 503, "dry run {dry_run}: {}", r.json());
        assert!(
            r.json()["detail"]
                .as_str()
                .unwrap()
                .contains("TELEGRAM_BOT_TOKEN")
        );
        app.post("/api/channels/999999/audit", json!({}))
            .await
            .expect(404);
        assert_eq!(app.count("audits").await, 0);
    }
}

#[tokio::test]
async fn a_rate_limited_get_chat_member_is_asked_again_and_the_audit_finishes() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let channel = fixture(&app, &fake, CHAT).await;
    fake.script("getChatMember", Reply::TooManyRequests(1));
    fake.script("getChatMember", Reply::ServerError);

    let audit = start(&app, channel, json!({})).await;
    let a = finished(&app, audit).await;
    assert_eq!(a["status"], "done", "{a}");
    assert_eq!(a["checked"], 8);
    assert_eq!(a["counts"]["not_live_but_in_chat"], 1);
    // Eight users, one 429 and one 500 asked again.
    assert_eq!(fake.calls_of("getChatMember").len(), 10);
}

#[tokio::test]
async fn an_audit_that_telegram_keeps_failing_ends_failed_with_the_error() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let channel = fixture(&app, &fake, CHAT).await;
    fake.always(
        "getChatMember",
        Reply::Error(400, "Bad Request: chat not found".into()),
    );
    let audit = start(&app, channel, json!({"fix": true})).await;
    let a = finished(&app, audit).await;
    assert_eq!(a["status"], "failed", "{a}");
    assert!(
        a["error"].as_str().unwrap().contains("chat not found"),
        "{a}"
    );
    assert!(a["finished_at"].is_string());
    assert!(effect_rows(&app).await.is_empty());
    // The channel may be audited again.
    fake.reset("getChatMember");
    let next = start(&app, channel, json!({})).await;
    assert_eq!(finished(&app, next).await["status"], "done");
}

#[tokio::test]
async fn a_running_audit_left_by_a_dead_process_is_marked_interrupted() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let channel = fixture(&app, &fake, CHAT).await;
    let db = app.db().await;
    let insert = "INSERT INTO audits (channel_id, fix, heartbeat_at)
                  VALUES ($1, false, statement_timestamp() - make_interval(secs => $2))
                  RETURNING id";
    // Its heartbeat is fresh: it may be alive elsewhere, so a new audit waits.
    let alive: i64 = db
        .query_one(insert, &[&(channel as i32), &5.0f64])
        .await
        .unwrap()
        .get("id");
    app.post(&format!("/api/channels/{channel}/audit"), json!({}))
        .await
        .expect(409);
    // Its heartbeat stopped long ago: it is marked failed, and the new audit runs.
    db.execute(
        "UPDATE audits SET heartbeat_at = statement_timestamp() - interval '1 hour' WHERE id = $1",
        &[&alive],
    )
    .await
    .unwrap();
    let audit = start(&app, channel, json!({})).await;
    let old = app.get(&format!("/api/audits/{alive}")).await.expect(200);
    assert_eq!(
        (old["status"].clone(), old["error"].clone()),
        (json!("failed"), json!("interrupted"))
    );
    assert!(old["finished_at"].is_string());
    assert_eq!(finished(&app, audit).await["status"], "done");

    // At start-up too (the stale one of another channel).
    let other = id(&app.create_channel(CHAT - 1, json!({})).await);
    let stale: i64 = db
        .query_one(insert, &[&(other as i32), &3600.0f64])
        .await
        .unwrap()
        .get("id");
    assert_eq!(
        subgate::telegram::audits::interrupt_stale(&app.app_db().await, None)
            .await
            .unwrap(),
        1
    );
    let s = app.get(&format!("/api/audits/{stale}")).await.expect(200);
    assert_eq!(s["error"], "interrupted");
}

#[tokio::test]
async fn scheduled_audits_check_every_active_channel_with_audit_fix() {
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert(
            "TELEGRAM_BOT_TOKEN".into(),
            crate::support::fake_bot::TOKEN.into(),
        );
        env.insert("AUDIT_INTERVAL_SECS".into(), "3600".into());
        env.insert("AUDIT_FIX".into(), "true".into());
    })
    .await;
    let a = fixture(&app, &fake, CHAT).await;
    let b = id(&app.create_channel(CHAT - 1, json!({})).await);
    let inactive = id(&app.create_channel(CHAT - 2, json!({"active": false})).await);
    let every = app
        .state
        .config
        .audit_interval
        .expect("AUDIT_INTERVAL_SECS is read");

    let shutdown = ShutdownSignal::new();
    let audits = tokio::spawn(subgate::app::background::audit_loop(
        app.state.clone(),
        shutdown.clone(),
        every,
    ));
    // The first round runs at start-up: one audit per active channel, in id order.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let rows: Vec<(i32, bool, String)> = app
            .db()
            .await
            .query(
                "SELECT channel_id, fix, status FROM audits ORDER BY id",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get("channel_id"), r.get("fix"), r.get("status")))
            .collect();
        if rows.len() == 2 && rows.iter().all(|r| r.2 != "running") {
            break rows;
        }
        assert!(tokio::time::Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    shutdown.trigger();
    audits.await.unwrap();
    assert_eq!(
        rows,
        [
            (a as i32, true, "done".to_string()),
            (b as i32, true, "done".to_string())
        ]
    );
    assert!(!rows.iter().any(|r| i64::from(r.0) == inactive));
    // With AUDIT_FIX the repairs are queued.
    assert_eq!(effect_rows(&app).await.len(), 2);
}
