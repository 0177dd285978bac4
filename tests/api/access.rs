//! Telegram access follows the database: what a membership change, a deletion or a change of a
//! channel's chat enqueues, under which keys, and what the worker then does on the fake Bot API.
//!
//! - Deleting a live membership (directly, or by deleting its subscriber) takes the member out of
//!   the chat: a revoke that outlives the row.

use serde_json::{Value, json};
use subgate::effects;

use crate::{
    fake_bot::{FakeBot, TOKEN},
    helpers::TestApp,
};

// ---- set-up ----

async fn app_with(fake: &FakeBot) -> TestApp {
    let url = fake.url.clone();
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    })
    .await
}

async fn run(app: &TestApp) -> effects::RunReport {
    effects::run_once(&app.state).await.unwrap()
}

async fn subscriber(app: &TestApp, telegram_user_id: i64) -> i64 {
    app.create_subscriber(telegram_user_id).await["id"]
        .as_i64()
        .unwrap()
}

async fn channel(app: &TestApp, chat_id: i64, extra: Value) -> i64 {
    app.create_channel(chat_id, extra).await["id"]
        .as_i64()
        .unwrap()
}

/// Staff grant of `days`; returns the membership id.
async fn grant(app: &TestApp, subscriber_id: i64, channel_id: i64, days: i64) -> i64 {
    let r = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": subscriber_id, "channel_id": channel_id, "days": days}),
        )
        .await;
    assert!(
        r.status.is_success(),
        "grant: {}",
        String::from_utf8_lossy(&r.bytes)
    );
    r.json()["id"].as_i64().unwrap()
}

async fn patch_membership(app: &TestApp, id: i64, body: Value) -> Value {
    app.patch(&format!("/api/memberships/{id}"), body)
        .await
        .expect(200)
}

/// The effects of `kind` (all statuses, oldest first), via the staff API.
async fn effects_of(app: &TestApp, kind: &str) -> Vec<Value> {
    app.get(&format!("/api/effects?kind={kind}&limit=200"))
        .await
        .expect(200)["items"]
        .as_array()
        .unwrap()
        .clone()
}

/// The (chat, user) pairs of the calls of `method`, in call order.
fn pairs(fake: &FakeBot, method: &str) -> Vec<(i64, i64)> {
    fake.calls_of(method)
        .iter()
        .map(|c| {
            (
                c.params["chat_id"].as_i64().unwrap(),
                c.params["user_id"].as_i64().unwrap(),
            )
        })
        .collect()
}

// ---- deleting a live membership takes the member out of the chat ----

#[tokio::test]
async fn staff_delete_of_a_live_membership_takes_the_member_out_of_the_chat() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_070_001, 7001);
    let s = subscriber(&app, user).await;
    // Seat-limited: the seat is free again at once, so the member must really be removed.
    let c = channel(&app, chat, json!({"seat_limit": 1})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, user);
    fake.clear_calls();

    app.delete(&format!("/api/memberships/{m}"))
        .await
        .expect(204);
    let revokes = effects_of(&app, "revoke").await;
    assert_eq!(revokes.len(), 1, "{revokes:?}");
    let revoke = &revokes[0];
    assert_eq!(revoke["status"], "pending");
    assert_eq!(
        (revoke["chat_id"].as_i64(), revoke["user_id"].as_i64()),
        (Some(chat), Some(user)),
        "the effect names the chat and the user: the membership is gone"
    );
    assert_eq!(revoke["membership_id"], Value::Null);
    assert_eq!(revoke["dedupe_key"], format!("revoke:{m}:deleted"));
    assert_eq!(revoke["payload"]["membership_id"].as_i64(), Some(m));

    let report = run(&app).await;
    assert_eq!((report.done, report.failed), (1, 0), "{report:?}");
    assert_eq!(fake.methods(), ["banChatMember", "unbanChatMember"]);
    assert_eq!(pairs(&fake, "banChatMember"), [(chat, user)]);
    assert_eq!(pairs(&fake, "unbanChatMember"), [(chat, user)]);
    assert_eq!(
        fake.calls_of("unbanChatMember")[0].params["only_if_banned"],
        true
    );
    assert!(!fake.is_member(chat, user), "removed from the channel");
    assert!(
        !fake.is_banned(chat, user),
        "free to come back after paying"
    );
    let done = app
        .get(&format!("/api/effects/{}", revoke["id"].as_i64().unwrap()))
        .await
        .expect(200);
    assert_eq!(done["status"], "done");
    assert_eq!(
        done["payload"]["note"],
        Value::Null,
        "performed, not skipped"
    );

    // The freed seat goes to the next buyer, and nothing more happens to the first one.
    let s2 = subscriber(&app, user + 1).await;
    let order = app.create_order(s2, c).await;
    app.checkout(order["id"].as_i64().unwrap())
        .await
        .expect(200);
    fake.clear_calls();
    run(&app).await;
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());
    assert_eq!(effects_of(&app, "revoke").await.len(), 1);
}

#[tokio::test]
async fn deleting_a_subscriber_takes_them_out_of_every_chat_they_were_live_in() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let user = 7101;
    let (chat_a, chat_b, chat_c) = (-1_001_000_071_001, -1_001_000_071_002, -1_001_000_071_003);
    let s = subscriber(&app, user).await;
    let (a, b, c) = (
        channel(&app, chat_a, json!({})).await,
        channel(&app, chat_b, json!({"grace_period_days": 3})).await,
        channel(&app, chat_c, json!({})).await,
    );
    let _ma = grant(&app, s, a, 30).await;
    let mb = grant(&app, s, b, 30).await;
    let mc = grant(&app, s, c, 30).await;
    // B is in its grace period, C has expired (and was revoked then).
    patch_membership(&app, mb, json!({"status": "grace"})).await;
    patch_membership(&app, mc, json!({"status": "expired"})).await;
    run(&app).await;
    assert_eq!(effects_of(&app, "revoke").await.len(), 1);
    for chat in [chat_a, chat_b] {
        fake.add_member(chat, user);
    }
    fake.clear_calls();

    app.delete(&format!("/api/subscribers/{s}"))
        .await
        .expect(204);
    assert_eq!(app.count("memberships").await, 0);
    let revokes = effects_of(&app, "revoke").await;
    let mut new: Vec<(i64, i64)> = revokes
        .iter()
        .filter(|e| e["status"] == "pending")
        .map(|e| {
            assert!(
                e["dedupe_key"].as_str().unwrap().ends_with(":deleted"),
                "{e}"
            );
            (
                e["chat_id"].as_i64().unwrap(),
                e["user_id"].as_i64().unwrap(),
            )
        })
        .collect();
    new.sort();
    assert_eq!(
        new,
        [(chat_b, user), (chat_a, user)],
        "one revoke per live membership; the expired one was revoked already"
    );
    assert_eq!(revokes.len(), 3);

    run(&app).await;
    let mut banned = pairs(&fake, "banChatMember");
    banned.sort();
    assert_eq!(banned, [(chat_b, user), (chat_a, user)]);
    assert_eq!(fake.calls_of("unbanChatMember").len(), 2);
    assert!(!fake.is_member(chat_a, user) && !fake.is_member(chat_b, user));
    assert_eq!(app.count("effects WHERE status <> 'done'").await, 0);
}

#[tokio::test]
async fn deleting_an_expired_membership_enqueues_nothing_more() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_072_001, 7201);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    patch_membership(&app, m, json!({"status": "expired"})).await;
    run(&app).await;
    let before = app.count("effects").await;
    fake.clear_calls();
    app.delete(&format!("/api/memberships/{m}"))
        .await
        .expect(204);
    assert_eq!(app.count("effects").await, before);
    run(&app).await;
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());
}
