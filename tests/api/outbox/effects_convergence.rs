//! How the worker converges with Telegram after faults: messages never hold back access
//! changes, a dead worker's claim is taken over after a short lease that a live worker renews,
//! an outage is detected by one probe and costs no effect its back-off, a chat whose bot lost
//! its rights pauses its access effects, and a grant is one call. Set-up helpers are in
//! [`crate::support::effects`].

use std::time::Duration;

use serde_json::{Value, json};
use subgate::{
    app::worker::{Options, RunReport, Worker},
    catalog::channels::{self, TelegramStatus},
};
use tokio::time::Instant;

use crate::support::{
    effects::*,
    fake_bot::{FakeBot, Reply},
    helpers::TestApp,
};

/// A worker with a short lease (renewed every third of it) and a patient client.
fn short_lease(app: &TestApp, lease_ms: u64) -> Worker {
    Worker::new(
        app.state.clone(),
        Options {
            concurrency: 1,
            lease: Duration::from_millis(lease_ms),
            call_timeout: Duration::from_secs(30),
            ..Options::default()
        },
    )
}

async fn one_i64(app: &TestApp, sql: &str, id: i64) -> i64 {
    app.db().await.query_one(sql, &[&id]).await.unwrap().get(0)
}

/// Stores a join link on channel `c`, so a grant needs no `createChatInviteLink`.
pub(crate) async fn store_link(app: &TestApp, c: i64) {
    app.db()
        .await
        .execute(
            "UPDATE channels SET invite_link = 'https://t.me/+stored' WHERE id = $1",
            &[&(c as i32)],
        )
        .await
        .unwrap();
}

// ---- ordering among access effects only ----

#[tokio::test]
async fn a_receipt_backing_off_holds_back_no_access_change_of_its_member() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_021_001, 21_001);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    let m = grant(&app, s, c, 30).await;
    settle(&app).await;
    // A receipt of that member, then their join request's approval: the receipt fails (500).
    fake.open_join_request(chat, user);
    let ids: Vec<i64> = app
        .db()
        .await
        .query(
            "INSERT INTO effects (kind, membership_id, chat_id, user_id) VALUES
                 ('renewal_receipt', $1, $2, $3), ('join_approve', NULL, $2, $3)
             RETURNING id",
            &[&m, &chat, &user],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    fake.script("sendMessage", Reply::ServerError);
    let report = run(&app).await;
    assert_eq!((report.done, report.retried), (1, 1), "{report:?}");
    let receipt = effect(&app, ids[0]).await;
    assert_eq!(
        (receipt["status"].as_str(), receipt["attempts"].as_i64()),
        (Some("pending"), Some(1)),
        "{receipt}"
    );
    assert_eq!(effect(&app, ids[1]).await["status"], "done");
    assert!(
        fake.is_member(chat, user),
        "approved while the receipt backs off"
    );

    // The membership ends: its revoke is not held back by the receipt either.
    patch_membership(&app, m, json!({"status": "expired"})).await;
    fake.clear_calls();
    let report = run(&app).await;
    assert_eq!(
        report.done, 2,
        "the revoke, then the buyer's access-ended notice: {report:?}"
    );
    assert_eq!(
        fake.methods(),
        ["banChatMember", "unbanChatMember", "sendMessage"]
    );
    assert!(!fake.is_member(chat, user));
    assert_eq!(effects_of(&app, "revoke").await[0]["status"], "done");
    assert_eq!(effect(&app, ids[0]).await["status"], "pending");
}

// ---- short leases, renewed while the attempt runs ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_workers_claim_is_taken_over_after_its_lease() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_021_011, 21_011);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    grant(&app, s, c, 30).await;
    let id = effects_of(&app, "grant").await[0]["id"].as_i64().unwrap();
    // The first worker dies in the middle of its call (its task is gone, heartbeat and all).
    let hold = fake.hold("sendMessage");
    let dead = short_lease(&app, 1000);
    let dying = tokio::spawn(async move { dead.run(false, &|| false).await });
    hold.arrived().await;
    dying.abort();
    assert!(dying.await.unwrap_err().is_cancelled());
    assert_eq!(
        one_i64(&app, "SELECT lease_token FROM effects WHERE id = $1", id).await,
        1
    );
    // Another worker takes the effect over once the lease has run out.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report = short_lease(&app, 1000).run(false, &|| false).await.unwrap();
        if report.done == 1 {
            break;
        }
        assert_eq!(
            report,
            RunReport::default(),
            "nothing else happens meanwhile"
        );
        assert!(
            Instant::now() < deadline,
            "the dead worker's claim was never taken over"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let e = effect(&app, id).await;
    assert_eq!(
        (e["status"].as_str(), e["attempts"].as_i64()),
        (Some("done"), Some(1))
    );
    assert_eq!(
        one_i64(&app, "SELECT lease_token FROM effects WHERE id = $1", id).await,
        2
    );
    assert_eq!(fake.calls_of("sendMessage").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_attempt_keeps_its_lease_while_it_works() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_021_021, 21_021);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    grant(&app, s, c, 30).await;
    let id = effects_of(&app, "grant").await[0]["id"].as_i64().unwrap();
    // Telegram holds the call open for longer than two leases; the worker is alive.
    let hold = fake.hold("sendMessage");
    let slow = short_lease(&app, 2000);
    let working = tokio::spawn(async move { slow.run(false, &|| false).await.unwrap() });
    hold.arrived().await;
    let until = Instant::now() + Duration::from_millis(4500);
    while Instant::now() < until {
        let report = short_lease(&app, 2000).run(false, &|| false).await.unwrap();
        assert_eq!(
            report,
            RunReport::default(),
            "a live worker's claim was taken"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    hold.release();
    let report = working.await.unwrap();
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(fake.overlaps(), 0);
    assert_eq!(fake.calls_of("sendMessage").len(), 1);
    let e = effect(&app, id).await;
    assert_eq!(
        (
            e["status"].as_str(),
            e["attempts"].as_i64(),
            &e["lease_until"]
        ),
        (Some("done"), Some(1), &Value::Null)
    );
    assert_eq!(
        one_i64(&app, "SELECT lease_token FROM effects WHERE id = $1", id).await,
        1
    );
}

// ---- an outage: one probe, no back-off growth ----

#[tokio::test]
async fn an_outage_is_found_by_one_probe_and_costs_no_effect_its_backoff() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_021_031;
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    for k in 0..6 {
        let s = subscriber(&app, 21_031 + k).await;
        grant(&app, s, c, 30).await;
    }
    fake.start_outage(Reply::ServerError);
    for _ in 0..3 {
        let report = run(&app).await;
        assert_eq!(
            (report.done, report.retried, report.failed),
            (0, 0, 0),
            "{report:?}"
        );
        assert!((1..=4).contains(&report.outage), "{report:?}");
    }
    // No effect counted a failure or moved its next attempt away.
    assert_eq!(
        app.count(
            "effects WHERE kind = 'grant' AND status = 'pending' AND attempts = 0
             AND first_failed_at IS NULL AND next_attempt_at <= now()"
        )
        .await,
        6
    );
    let tried = app
        .count("effects WHERE last_error LIKE 'Telegram is unreachable%'")
        .await;
    assert!(tried >= 1, "{tried}");
    let probes = fake.calls_of("getMe").len();
    assert!((3..=6).contains(&probes), "{probes} probes in 3 runs");
    assert!(fake.calls_of("sendMessage").len() <= 12);

    // A worker that saw the outage claims nothing until a probe answers, and probes at most
    // every few seconds (the effects loop calls it every poll).
    let w = worker(&app, 2000);
    assert_eq!(w.run(false, &|| false).await.unwrap().done, 0);
    fake.clear_calls();
    assert_eq!(w.run(false, &|| false).await.unwrap(), RunReport::default());
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());

    // Telegram is back: the next probe lets the backlog drain, in one run.
    fake.end_outage();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report = w.run(false, &|| false).await.unwrap();
        if report.done > 0 {
            assert_eq!(report.done, 6, "{report:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the worker never resumed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(fake.calls_of("getMe").len(), 1, "{:?}", fake.methods());
    assert_eq!(app.count("effects WHERE status <> 'done'").await, 0);
    assert_eq!(app.count("effects WHERE attempts <> 1").await, 0);
}

// ---- missing rights pause a chat's access effects ----

#[tokio::test]
async fn access_effects_pause_while_the_bot_lacks_its_rights_in_the_chat() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_021_041, 21_041);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, user);
    fake.set_bot_rights(chat, false);
    patch_membership(&app, m, json!({"status": "expired"})).await;
    let report = run(&app).await;
    assert_eq!((report.paused, report.failed), (1, 0), "{report:?}");
    let revoke = &effects_of(&app, "revoke").await[0];
    assert_eq!(
        (
            revoke["status"].as_str(),
            revoke["attempts"].as_i64(),
            &revoke["first_failed_at"]
        ),
        (Some("pending"), Some(0), &Value::Null),
        "{revoke}"
    );
    let error = revoke["last_error"].as_str().unwrap();
    assert!(
        error.contains("paused") && error.contains("CHAT_ADMIN_REQUIRED"),
        "{error}"
    );
    assert_eq!(
        app.get(&format!("/api/channels/{c}")).await.expect(200)["telegram_status"],
        "no_rights"
    );
    // Paused: not even tried while the channel is marked.
    fake.clear_calls();
    assert_eq!(run(&app).await, RunReport::default());
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());
    assert!(fake.is_member(chat, user));

    // The rights are back (the updates or the probe say so): the revoke runs.
    fake.set_bot_rights(chat, true);
    channels::set_telegram_status(&app.app_db().await, chat, TelegramStatus::Ok)
        .await
        .unwrap();
    let report = run(&app).await;
    assert_eq!(
        report.done, 2,
        "the revoke, then the buyer's access-ended notice: {report:?}"
    );
    assert!(!fake.is_member(chat, user));
    let revoke = effect(&app, revoke["id"].as_i64().unwrap()).await;
    assert_eq!(
        (revoke["status"].as_str(), revoke["attempts"].as_i64()),
        (Some("done"), Some(1))
    );
}

// ---- a grant in one call; who subgate banned ----

#[tokio::test]
async fn a_fresh_grant_is_one_message() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_021_051, 21_051);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    grant(&app, s, c, 30).await;
    assert_eq!(run(&app).await.done, 1);
    assert_eq!(fake.methods(), ["sendMessage"]);
    assert_eq!(fake.calls()[0].params["chat_id"].as_i64(), Some(user));
    assert!(
        fake.calls()[0].params["text"]
            .as_str()
            .unwrap()
            .contains("https://t.me/+stored")
    );
}

#[tokio::test]
async fn a_grant_after_a_revoke_whose_unban_was_lost_unbans_first() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_021_061, 21_061);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, user);
    // The revoke bans; its unban never answers.
    patch_membership(&app, m, json!({"status": "expired"})).await;
    fake.script("unbanChatMember", Reply::Hang);
    let report = worker(&app, 300).run(false, &|| false).await.unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    assert!(fake.is_banned(chat, user));
    let bans = "chat_bans WHERE chat_id = -1001000021061 AND user_id = 21061";
    assert_eq!(
        app.count(bans).await,
        1,
        "the ban is written down before it is made"
    );

    // Staff renew before the revoke is tried again: the revoke is skipped, and the grant
    // lifts the ban subgate made before it sends the link.
    patch_membership(&app, m, json!({"status": "active"})).await;
    make_due(&app).await;
    fake.clear_calls();
    let report = run(&app).await;
    assert_eq!(report.done, 2, "{report:?}");
    assert_eq!(fake.methods(), ["unbanChatMember", "sendMessage"]);
    assert_eq!(fake.calls()[0].params["only_if_banned"], true);
    assert!(!fake.is_banned(chat, user));
    assert_eq!(app.count(bans).await, 0);
    let note = effects_of(&app, "revoke").await[0]["payload"]["note"].clone();
    assert!(note.as_str().unwrap().contains("renewed"), "{note}");

    // The next grant of that member is one message again.
    patch_membership(&app, m, json!({"status": "expired"})).await;
    run(&app).await;
    assert_eq!(app.count(bans).await, 0, "a revoke done forgets its ban");
    patch_membership(&app, m, json!({"status": "active"})).await;
    fake.clear_calls();
    run(&app).await;
    assert_eq!(fake.methods(), ["sendMessage"]);
}

#[tokio::test]
async fn a_revoke_spares_exempt_users_and_chat_administrators() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_021_071;
    let (exempt, admin) = (21_071, 21_072);
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    let mut memberships = Vec::new();
    for user in [exempt, admin] {
        let s = subscriber(&app, user).await;
        memberships.push(grant(&app, s, c, 30).await);
    }
    run(&app).await;
    fake.add_member(chat, exempt);
    fake.add_admin(chat, admin);
    app.db()
        .await
        .execute(
            "INSERT INTO channel_exemptions (channel_id, telegram_user_id) VALUES ($1, $2)",
            &[&(c as i32), &exempt],
        )
        .await
        .unwrap();
    for m in &memberships {
        patch_membership(&app, *m, json!({"status": "expired"})).await;
    }
    fake.clear_calls();
    let report = run(&app).await;
    assert_eq!((report.done, report.failed), (2, 0), "{report:?}");
    // The exempt user is not even asked about; the administrator's ban is refused.
    assert_eq!(fake.methods(), ["banChatMember"]);
    assert_eq!(fake.calls()[0].params["user_id"].as_i64(), Some(admin));
    assert!(fake.is_member(chat, exempt) && fake.is_member(chat, admin));
    let notes: Vec<(i64, String)> = effects_of(&app, "revoke")
        .await
        .iter()
        .map(|e| {
            (
                e["user_id"].as_i64().unwrap(),
                e["payload"]["note"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    for (user, note) in notes {
        let why = if user == exempt {
            "exempt"
        } else {
            "administrator"
        };
        assert!(note.contains(why), "{user}: {note}");
    }
    assert_eq!(app.count("chat_bans").await, 0);
}
