//! Effects under concurrency: two workers never perform one effect together, one member's
//! effects run one at a time in creation order, and leases hold no transaction, row lock or
//! connection across Bot API calls. Set-up helpers are in [`crate::support::effects`].

use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};
use subgate::app::worker::{Options, RunReport, Worker};

use crate::support::{
    effects::*,
    fake_bot::{FakeBot, Reply},
    helpers::TestApp,
    race::race,
};

// ---- concurrency ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_never_perform_the_same_effect_at_the_same_time() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_000_401;
    let c = channel(&app, chat, json!({})).await;
    let mut members = Vec::new();
    for i in 0..12 {
        let s = subscriber(&app, 6200 + i).await;
        members.push((grant(&app, s, c, 30).await, 6200 + i));
    }
    fake.set_delay(Duration::from_millis(25));
    for round in 1..=3i64 {
        settle(&app).await;
        fake.clear_calls();
        // A new expiry each round, so each round has its own revokes.
        let when = (Utc::now() - chrono::Duration::minutes(round)).to_rfc3339();
        for (m, _) in &members {
            patch_membership(&app, *m, json!({"status": "expired", "expires_at": when})).await;
        }
        assert_eq!(
            app.count("effects WHERE kind = 'revoke' AND status = 'pending'")
                .await,
            12
        );
        let reports: Vec<RunReport> = race(2, |_| {
            let state = app.state.clone();
            async move {
                Worker::new(state, Options::default())
                    .run(false, &|| false)
                    .await
                    .unwrap()
            }
        })
        .await;
        // Twelve revokes, and once each user is out their access-ended notice (one message to
        // each: a notice the per-chat pace holds back is sent by a later run).
        assert!(
            reports.iter().map(|r| r.done).sum::<u64>() >= 12,
            "{reports:?}"
        );
        assert_eq!(
            app.count("effects WHERE kind = 'revoke' AND status = 'done'")
                .await,
            12 * round,
            "{reports:?}"
        );
        crate::support::effects::run_until_done(&app).await;
        assert_eq!(
            app.count("effects WHERE dedupe_key LIKE 'access_ended:%'")
                .await,
            12 * round
        );
        for (_, user) in &members {
            let told = fake
                .calls_of("sendMessage")
                .iter()
                .filter(|c| c.params["chat_id"].as_i64() == Some(*user))
                .count();
            assert_eq!(told, 1, "round {round}: user {user} told {told} times");
        }
        assert_eq!(
            fake.overlaps(),
            0,
            "round {round}: an effect was performed twice at once"
        );
        for (_, user) in &members {
            let bans = fake
                .calls_of("banChatMember")
                .iter()
                .filter(|c| c.params["user_id"].as_i64() == Some(*user))
                .count();
            assert_eq!(bans, 1, "round {round}: user {user} banned {bans} times");
        }
        assert_eq!(app.count("effects WHERE status <> 'done'").await, 0);
        for (m, _) in &members {
            patch_membership(&app, *m, json!({"status": "active"})).await;
        }
    }
}

// ---- one member's effects: one at a time, in creation order ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_effects_of_one_member_run_one_at_a_time_in_creation_order() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_000_110;
    let c = channel(&app, chat, json!({})).await;
    crate::outbox::effects_convergence::store_link(&app, c).await;
    // Long enough to overlap the pacer's spacing of calls (25 per second).
    fake.set_delay(Duration::from_millis(60));
    for round in 0..12i64 {
        // Three members with three effects each, all due at once: a grant, then a decline of a
        // join request (decided again: a member, so approved), then its approval (already in).
        let mut users = Vec::new();
        for k in 0..3 {
            let user = 7000 + round * 10 + k;
            let s = subscriber(&app, user).await;
            users.push((user, grant(&app, s, c, 30).await));
        }
        settle(&app).await;
        fake.clear_calls();
        for (user, m) in &users {
            fake.open_join_request(chat, *user);
            app.db()
                .await
                .execute(
                    "INSERT INTO effects (kind, membership_id, chat_id, user_id) VALUES
                         ('grant', $1, $2, $3), ('join_decline', NULL, $2, $3),
                         ('join_approve', NULL, $2, $3)",
                    &[m, &chat, user],
                )
                .await
                .unwrap();
        }
        let done: u64 = race(2, |_| {
            let state = app.state.clone();
            async move {
                Worker::new(state, Options::default())
                    .run(false, &|| false)
                    .await
                    .unwrap()
            }
        })
        .await
        .into_iter()
        .map(|r| r.done)
        .sum();
        assert_eq!(done, 9, "round {round}");
        assert_eq!(
            fake.member_overlaps(),
            0,
            "round {round}: two effects of one member were performed at once"
        );
        let calls = fake.calls();
        for (user, _) in &users {
            let methods: Vec<&str> = calls
                .iter()
                .filter(|c| FakeBot::user_of(c) == Some(*user))
                .map(|c| c.method.as_str())
                .collect();
            assert_eq!(
                methods,
                [
                    "sendMessage",
                    "approveChatJoinRequest",
                    "approveChatJoinRequest"
                ],
                "round {round}: user {user}'s effects out of order"
            );
        }
        assert_eq!(app.count("effects WHERE status <> 'done'").await, 0);
    }
}

#[tokio::test]
async fn a_leased_effect_holds_back_every_other_effect_of_its_member() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_000_111;
    channel(&app, chat, json!({})).await;
    let (user, other) = (7501, 7502);
    fake.open_join_request(chat, user);
    fake.open_join_request(chat, other);
    // A revoke sent back to the queue by staff (earlier) while a later decline of the same
    // member is being performed by another worker (leased); another member's decline.
    let ids: Vec<i64> = app
        .db()
        .await
        .query(
            "INSERT INTO effects (kind, chat_id, user_id, lease_until, lease_token) VALUES
                 ('revoke', $1, $2, NULL, 0),
                 ('join_decline', $1, $2, now() + interval '1 minute', 1),
                 ('join_decline', $1, $3, NULL, 0)
             RETURNING id",
            &[&chat, &user, &other],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let report = run(&app).await;
    assert_eq!(report.done, 1, "only the other member's effect: {report:?}");
    assert_eq!(fake.methods(), ["declineChatJoinRequest"]);
    assert_eq!(fake.calls()[0].params["user_id"], other);
    assert_eq!(effect(&app, ids[0]).await["status"], "pending");

    // The lease runs out (its worker died): the member's effects run, in id order.
    app.db()
        .await
        .execute(
            "UPDATE effects SET lease_until = now() - interval '1 second' WHERE id = $1",
            &[&ids[1]],
        )
        .await
        .unwrap();
    fake.clear_calls();
    assert_eq!(run(&app).await.done, 2);
    assert_eq!(
        fake.methods(),
        ["banChatMember", "unbanChatMember", "declineChatJoinRequest"]
    );
}

// ---- leases: no transaction, row lock or connection held across Bot API calls ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn telegram_is_called_with_no_transaction_or_connection_held() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_114, 5731);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({"seat_limit": 5})).await;
    let m = grant(&app, s, c, 30).await;
    let id = effects_of(&app, "grant").await[0]["id"].as_i64().unwrap();
    let hold = fake.hold("createChatInviteLink");
    let state = app.state.clone();
    let running = tokio::spawn(async move {
        let options = Options {
            call_timeout: Duration::from_secs(120),
            ..Options::default()
        };
        Worker::new(state, options)
            .run(false, &|| false)
            .await
            .unwrap()
    });
    hold.arrived().await;

    // Telegram is holding the call. The claim is committed: a lease, and nothing else is open
    // — no transaction, no pool connection. (Looked at a few times: the worker's other lanes
    // may be finishing their empty claims at first; a worker holding its own stays put.)
    let mut held = (i64::MAX, usize::MAX);
    for _ in 0..40 {
        let open: i64 = app
            .count(
                "pg_stat_activity
                 WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
            )
            .await;
        let pool = app.state.db.status();
        held = (open, pool.size - pool.available);
        if held == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        held,
        (0, 0),
        "(transactions, pool connections) held during a Bot API call"
    );
    let leased: bool = app
        .db()
        .await
        .query_one(
            "SELECT lease_until > now() AND lease_token = 1 FROM effects WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(leased);
    // Staff cannot send it back while it is being performed.
    app.post(&format!("/api/effects/{id}/retry"), Value::Null)
        .await
        .expect(409);
    // Staff are not kept waiting by Telegram, on a seat-limited channel either.
    let patched = tokio::time::timeout(
        Duration::from_secs(5),
        app.patch(&format!("/api/channels/{c}"), json!({"title": "Renamed"})),
    )
    .await
    .expect("the channel PATCH waited for Telegram");
    patched.expect(200);
    let deleted = tokio::time::timeout(
        Duration::from_secs(5),
        app.delete(&format!("/api/memberships/{m}")),
    )
    .await
    .expect("the membership DELETE waited for Telegram");
    deleted.expect(204);

    hold.release();
    let report = running.await.unwrap();
    assert!(report.done >= 1, "{report:?}");
    let e = effect(&app, id).await;
    assert_eq!(
        (e["status"].as_str(), &e["lease_until"]),
        (Some("done"), &Value::Null)
    );
}

async fn lease_token(app: &TestApp, id: i64) -> i64 {
    app.db()
        .await
        .query_one("SELECT lease_token FROM effects WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_lease_is_claimed_again_and_the_late_worker_records_nothing() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_115, 5741);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    grant(&app, s, c, 30).await;
    let id = effects_of(&app, "grant").await[0]["id"].as_i64().unwrap();
    // The first worker's call is held, and answers 500 when it is let go.
    fake.script("createChatInviteLink", Reply::ServerError);
    let hold = fake.hold("createChatInviteLink");
    let state = app.state.clone();
    // One lane, so that only the other worker can claim the effect again; a patient client,
    // so that its call is still held when the other worker has finished; a long lease, so that
    // its renewal cannot come between the lease running out below and the other's claim.
    let late = tokio::spawn(async move {
        let options = Options {
            concurrency: 1,
            lease: Duration::from_secs(300),
            call_timeout: Duration::from_secs(120),
            ..Options::default()
        };
        Worker::new(state, options)
            .run(false, &|| false)
            .await
            .unwrap()
    });
    hold.arrived().await;
    assert_eq!(lease_token(&app, id).await, 1);
    // Its lease runs out (as if it had died): another worker claims the effect and does it.
    app.db()
        .await
        .execute(
            "UPDATE effects SET lease_until = now() - interval '1 second' WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(lease_token(&app, id).await, 2);

    // The first worker's call comes back failed: it must not record over the newer claim.
    hold.release();
    let report = late.await.unwrap();
    assert_eq!(
        (report.superseded, report.retried, report.done),
        (1, 0, 0),
        "{report:?}"
    );
    let e = effect(&app, id).await;
    assert_eq!(
        (
            e["status"].as_str(),
            e["attempts"].as_i64(),
            &e["last_error"]
        ),
        (Some("done"), Some(1), &Value::Null),
        "{e}"
    );
}
