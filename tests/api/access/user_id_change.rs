//! A subscriber's `telegram_user_id` changing (a buyer moved to another Telegram account):
//! access effects enqueued for the old account keep acting on the old account, and a grant
//! racing the change goes to the account the subscriber has once both commit.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_postgres::NoTls;

use crate::support::{
    effects::{app_with, channel, effects_of, grant, patch_membership, run, settle, subscriber},
    fake_bot::{FakeBot, Reply},
    helpers::{TestApp, url_for},
};

async fn change_user_id(app: &TestApp, subscriber_id: i64, user: i64) -> Value {
    app.patch(
        &format!("/api/subscribers/{subscriber_id}"),
        json!({"telegram_user_id": user}),
    )
    .await
    .expect(200)
}

/// The one effect of `kind` (panics unless there is exactly one).
async fn only_effect(app: &TestApp, kind: &str) -> Value {
    let all = effects_of(app, kind).await;
    assert_eq!(all.len(), 1, "{kind}: {all:?}");
    all[0].clone()
}

#[tokio::test]
async fn a_pending_revoke_removes_the_old_account_after_a_change_and_a_renewal() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, old, new) = (-1_001_000_018_601, 1_860_101, 1_860_102);
    let s = subscriber(&app, old).await;
    let c = channel(&app, chat, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, old);
    fake.clear_calls();

    // Staff end the membership (a revoke for the old account is queued), move the subscriber to
    // the new account (allowed: nothing holds access now) and grant again before the worker runs.
    patch_membership(&app, m, json!({"status": "expired"})).await;
    change_user_id(&app, s, new).await;
    grant(&app, s, c, 30).await;
    run(&app).await;

    let revoke = only_effect(&app, "revoke").await;
    assert_eq!(revoke["user_id"], old);
    assert_eq!(revoke["status"], "done");
    assert!(
        revoke["payload"].get("note").is_none(),
        "performed, not skipped: {revoke}"
    );
    assert!(
        !fake.is_member(chat, old),
        "the old account is out of the channel"
    );
    let bans: Vec<_> = fake
        .calls_of("banChatMember")
        .iter()
        .filter_map(FakeBot::user_of)
        .collect();
    assert_eq!(bans, [old]);
    // The new account got its grant; the old one got nothing but the revoke.
    let grants = effects_of(&app, "grant").await;
    let last = grants.last().unwrap();
    assert_eq!(last["user_id"], new);
    assert_eq!(last["status"], "done");
    let messaged: Vec<_> = fake
        .calls_of("sendMessage")
        .iter()
        .filter_map(FakeBot::user_of)
        .collect();
    assert_eq!(messaged, [new]);
}

#[tokio::test]
async fn a_dead_lettered_revoke_sent_back_after_a_change_removes_the_old_account() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, old, new) = (-1_001_000_018_602, 1_860_201, 1_860_202);
    let s = subscriber(&app, old).await;
    let c = channel(&app, chat, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, old);

    // The revoke is refused for good (a dead letter); meanwhile the subscriber moves to a new
    // account and is granted again.
    fake.script(
        "banChatMember",
        Reply::Error(400, "Bad Request: CHANNEL_PRIVATE".into()),
    );
    patch_membership(&app, m, json!({"status": "expired"})).await;
    run(&app).await;
    let revoke = only_effect(&app, "revoke").await;
    assert_eq!(revoke["status"], "failed", "{revoke}");
    change_user_id(&app, s, new).await;
    grant(&app, s, c, 30).await;
    run(&app).await;
    fake.clear_calls();

    // Staff fix the cause and send the dead letter back: it removes the old account.
    let id = revoke["id"].as_i64().unwrap();
    app.post(&format!("/api/effects/{id}/retry"), Value::Null)
        .await
        .expect(200);
    run(&app).await;
    let revoke = only_effect(&app, "revoke").await;
    assert_eq!(revoke["status"], "done");
    assert!(
        revoke["payload"].get("note").is_none(),
        "performed, not skipped: {revoke}"
    );
    assert!(!fake.is_member(chat, old));
    assert_eq!(fake.methods(), ["banChatMember", "unbanChatMember"]);
    assert_eq!(FakeBot::user_of(&fake.calls()[0]), Some(old));
}

#[tokio::test]
async fn messages_queued_for_the_old_account_are_not_sent_after_a_change() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, old, new) = (-1_001_000_018_603, 1_860_301, 1_860_302);
    let s = subscriber(&app, old).await;
    let c = channel(&app, chat, json!({})).await;
    // A grant for the old account still queued when the membership is ended, the account
    // changed and the membership granted again: the old grant must not send the channel's
    // link to the old account (the membership is the new account's now).
    let m = grant(&app, s, c, 30).await;
    patch_membership(&app, m, json!({"status": "expired"})).await;
    change_user_id(&app, s, new).await;
    grant(&app, s, c, 30).await;
    run(&app).await;

    let grants = effects_of(&app, "grant").await;
    assert_eq!(grants.len(), 2);
    assert_eq!(grants[0]["user_id"], old);
    assert_eq!(grants[0]["status"], "done");
    assert!(
        grants[0]["payload"]["note"]
            .as_str()
            .is_some_and(|n| n.contains("Telegram account")),
        "{}",
        grants[0]
    );
    assert_eq!(grants[1]["user_id"], new);
    let messaged: Vec<_> = fake
        .calls_of("sendMessage")
        .iter()
        .filter_map(FakeBot::user_of)
        .collect();
    assert_eq!(messaged, [new], "nothing for the old account");
}

// ---- a change racing a grant (the subscriber row's key-share lock) ----

/// A connection of its own to the test's database (outside the app's pool).
async fn own_connection(app: &TestApp) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&url_for(&app.db_name), NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// A subscriber of `user` with an expired membership of a new channel `chat`; effects settled.
/// Returns (subscriber, channel, membership).
async fn expired_member(app: &TestApp, chat: i64, user: i64) -> (i64, i64, i64) {
    let s = subscriber(app, user).await;
    let c = channel(app, chat, json!({})).await;
    let m = grant(app, s, c, 30).await;
    patch_membership(app, m, json!({"status": "expired"})).await;
    settle(app).await;
    (s, c, m)
}

/// The user id of the newest grant effect and the subscriber's current user id.
async fn grant_and_current_user(app: &TestApp, m: i64, s: i64) -> (i64, i64) {
    let row = app
        .db()
        .await
        .query_one(
            "SELECT (SELECT user_id FROM effects WHERE kind = 'grant' AND membership_id = $1
                     ORDER BY id DESC LIMIT 1),
                    (SELECT telegram_user_id FROM subscribers WHERE id = $2)",
            &[&m, &(s as i32)],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// The subscriber PATCH's statements (lock, the holds-access check, the update) in a
/// transaction held open while a staff grant (`revive`: a POST, or a membership PATCH to
/// `active`) revives the expired membership; then the change commits. The grant must wait for
/// it and name the new account.
async fn revive_during_an_open_change(revive: &'static str) {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    let (old, new) = (1_860_401, 1_860_402);
    let (s, c, m) = expired_member(&app, -1_001_000_018_604, old).await;

    let mut change = own_connection(&app).await;
    let tx = change.transaction().await.unwrap();
    tx.query_one(
        "SELECT telegram_user_id FROM subscribers WHERE id = $1 FOR UPDATE",
        &[&(s as i32)],
    )
    .await
    .unwrap();
    let live: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM memberships WHERE subscriber_id = $1
                            AND status <> 'expired')",
            &[&(s as i32)],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!live, "the change is allowed");
    tx.execute(
        "UPDATE subscribers SET telegram_user_id = $2, updated_at = statement_timestamp()
         WHERE id = $1",
        &[&(s as i32), &new],
    )
    .await
    .unwrap();

    let granting = {
        let app = app.clone();
        tokio::spawn(async move {
            match revive {
                "grant" => {
                    grant(&app, s, c, 30).await;
                }
                _ => {
                    patch_membership(&app, m, json!({"status": "active"})).await;
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waited = !granting.is_finished();
    tx.commit().await.unwrap();
    granting.await.unwrap();

    let (granted_to, current) = grant_and_current_user(&app, m, s).await;
    assert_eq!(current, new);
    assert_eq!(
        granted_to, current,
        "the grant goes to the subscriber's current account"
    );
    assert!(waited, "the grant waited for the open change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_staff_grant_waits_for_an_open_telegram_user_id_change() {
    revive_during_an_open_change("grant").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_membership_patch_waits_for_an_open_telegram_user_id_change() {
    revive_during_an_open_change("patch").await;
}

/// Real requests released together, repeated: a subscriber PATCH of `telegram_user_id` and a
/// staff grant (or membership PATCH) reviving the expired membership. Whichever wins, the
/// result is consistent: the change refused (409, the grant came first) and the grant named
/// the old account, or the change made and the grant named the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_racing_a_revival_leaves_the_grant_with_the_current_account() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    for round in 0..16i64 {
        let old = 1_860_500 + 2 * round;
        let (s, c, m) = expired_member(&app, -1_001_000_018_700 - round, old).await;
        let barrier = Arc::new(Barrier::new(2));
        let change = {
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                app.patch(
                    &format!("/api/subscribers/{s}"),
                    json!({"telegram_user_id": old + 1}),
                )
                .await
                .status
                .as_u16()
            })
        };
        let revive = {
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                if round % 2 == 0 {
                    grant(&app, s, c, 30).await;
                } else {
                    patch_membership(&app, m, json!({"status": "active"})).await;
                }
            })
        };
        let status = change.await.unwrap();
        revive.await.unwrap();
        let (granted_to, current) = grant_and_current_user(&app, m, s).await;
        assert!(status == 200 || status == 409, "round {round}: {status}");
        assert_eq!(
            current,
            if status == 200 { old + 1 } else { old },
            "round {round}"
        );
        assert_eq!(
            granted_to, current,
            "round {round}: change answered {status}"
        );
    }
}
