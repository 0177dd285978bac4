//! Telegram access follows the database: what a membership change, a deletion or a change of a
//! channel's chat enqueues, under which keys, and what the worker then does on the fake Bot API.
//!
//! - Deleting a live membership (directly, or by deleting its subscriber) takes the member out of
//!   the chat: a revoke that outlives the row.
//! - Effects are keyed on the transition that caused them, so a membership expired, re-activated
//!   by staff and expired again is revoked twice (and granted again in between); one transition
//!   is still one effect, whoever races whom.
//! - A channel's `telegram_chat_id` cannot change while members or pending effects are tied to
//!   the current chat; a change clears the old chat's join link.

use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::{
    staff::auth::assert_problem,
    support::{
        effects::{
            app_with, channel, effects_of, grant, membership_status, patch_membership, run,
            run_until_done, settle, subscriber, sweep,
        },
        fake_bot::FakeBot,
        helpers::TestApp,
        race::race,
    },
};

// ---- set-up: the effects tests' helpers ----

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

/// The rule, written out independently of the code: every membership event whose transition
/// asks Telegram to act (a grant from none or expired to active, a receipt for a live member
/// whose term moved forward, a revoke from live to expired, a grace notice from active to grace)
/// has exactly one effect, keyed `{what}:{membership}:ev{event}`, and no transition-keyed effect
/// exists without its event. Returns how many transitions asked for an effect.
async fn assert_one_effect_per_transition(app: &TestApp) -> i64 {
    let row = app
        .db()
        .await
        .query_one(
            "WITH t AS (
                 SELECT ev.id, ev.membership_id,
                        CASE
                            WHEN (ev.from_status IS NULL OR ev.from_status = 'expired')
                                 AND ev.to_status = 'active' THEN 'grant'
                            WHEN ev.from_status IN ('active', 'grace') AND ev.to_status = 'active'
                                 AND ev.expires_at_after > ev.expires_at_before THEN 'receipt'
                            WHEN ev.from_status IN ('active', 'grace')
                                 AND ev.to_status = 'expired' THEN 'revoke'
                            WHEN ev.from_status = 'active' AND ev.to_status = 'grace' THEN 'grace'
                        END AS what
                 FROM membership_events ev
             )
             SELECT (SELECT count(*) FROM t WHERE what IS NOT NULL),
                    (SELECT count(*) FROM t JOIN effects e
                         ON e.dedupe_key = t.what || ':' || t.membership_id || ':ev' || t.id
                        AND e.membership_id = t.membership_id),
                    (SELECT count(*) FROM effects WHERE dedupe_key LIKE '%:ev%')",
            &[],
        )
        .await
        .unwrap();
    let (transitions, matched, keyed): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (matched, keyed),
        (transitions, transitions),
        "effects matching transitions, transition-keyed effects vs transitions"
    );
    transitions
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
    // Three grants message one buyer: the pace may hold one back for a moment.
    run_until_done(&app).await;
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

    run_until_done(&app).await;
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

// ---- one effect per transition ----

#[tokio::test]
async fn a_second_expiry_after_a_staff_reactivation_is_revoked_again() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_073_001, 7301);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, user);
    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;

    // Expire, re-activate with the same expires_at, expire again, and so on: every expiry is a
    // transition of its own and gets its own revoke; every re-activation its own grant.
    for cycle in 1..=3usize {
        fake.clear_calls();
        assert_eq!(sweep(&app).await["to_expired"], 1, "cycle {cycle}");
        assert_eq!(membership_status(&app, m).await, "expired");
        let revokes = effects_of(&app, "revoke").await;
        assert_eq!(revokes.len(), cycle, "cycle {cycle}: {revokes:?}");
        assert_eq!(revokes[cycle - 1]["status"], "pending", "cycle {cycle}");
        run(&app).await;
        assert_eq!(
            fake.methods(),
            ["banChatMember", "unbanChatMember", "sendMessage"],
            "cycle {cycle}: removed (not kept in while the row says expired), then told once"
        );
        assert_eq!(pairs(&fake, "banChatMember"), [(chat, user)]);
        assert!(!fake.is_member(chat, user));
        assert_eq!(
            effects_of(&app, "revoke").await[cycle - 1]["status"],
            "done"
        );

        fake.clear_calls();
        patch_membership(&app, m, json!({"status": "active"})).await;
        let grants = effects_of(&app, "grant").await;
        assert_eq!(grants.len(), cycle + 1, "cycle {cycle}: {grants:?}");
        assert_eq!(grants[cycle]["status"], "pending");
        run(&app).await;
        // Its revoke lifted its ban: the grant is one message.
        assert_eq!(
            fake.methods(),
            ["sendMessage"],
            "cycle {cycle}: the re-activated member is let back in"
        );
        assert_eq!(fake.calls()[0].params["chat_id"].as_i64(), Some(user));
        fake.add_member(chat, user);
    }
    assert_eq!(assert_one_effect_per_transition(&app).await, 7);
    let keys: Vec<String> = effects_of(&app, "revoke")
        .await
        .iter()
        .map(|e| e["dedupe_key"].as_str().unwrap().to_string())
        .collect();
    let events: Vec<i64> = app
        .db()
        .await
        .query(
            "SELECT id FROM membership_events
             WHERE membership_id = $1 AND to_status = 'expired' AND cause = 'sweep' ORDER BY id",
            &[&m],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        keys,
        events
            .iter()
            .map(|e| format!("revoke:{m}:ev{e}"))
            .collect::<Vec<_>>()
    );
}

/// The sweep and a staff change of the same overdue membership, released together: the pair
/// lock puts them one after the other, and the second sees what the first did. Whatever the
/// order, each transition that happened has exactly one effect: a staff expiry and a sweep
/// expiry of one membership are one revoke, never two and never none; a staff re-activation
/// racing the sweep's expiry is either a renewal (receipt; the sweep then has nothing to do) or
/// an expiry followed by a re-activation (revoke, then grant).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sweep_racing_a_staff_change_enqueues_one_effect_per_transition() {
    let app = Arc::new(TestApp::spawn().await);
    let c = channel(&app, -1_001_000_074_001, json!({})).await;
    let past = (Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
    let future = (Utc::now() + chrono::Duration::days(10)).to_rfc3339();
    let mut transitions = 0;
    for round in 0..30i64 {
        let s = subscriber(&app, 7400 + round).await;
        let m = grant(&app, s, c, 30).await;
        patch_membership(&app, m, json!({"expires_at": past})).await;
        let staff_body = if round % 2 == 0 {
            json!({"status": "expired"})
        } else {
            json!({"status": "active", "expires_at": future})
        };
        // The staff change and a sweep, released together.
        race(2, |i| {
            let (app, staff_body) = (app.clone(), staff_body.clone());
            async move {
                if i == 0 {
                    app.patch(&format!("/api/memberships/{m}"), staff_body)
                        .await
                        .expect(200);
                } else {
                    app.post("/api/sweep", Value::Null).await.expect(200);
                }
            }
        })
        .await;
        // The sweep's effects are queued: made rows, as the worker's next run would.
        crate::support::effects::materialize(&app).await;

        let want = if round % 2 == 0 { "expired" } else { "active" };
        assert_eq!(membership_status(&app, m).await, want, "round {round}");
        let to_expired = app
            .count(&format!(
                "membership_events WHERE membership_id = {m}
                   AND from_status IN ('active', 'grace') AND to_status = 'expired'"
            ))
            .await;
        let revokes = app
            .count(&format!(
                "effects WHERE membership_id = {m} AND kind = 'revoke'"
            ))
            .await;
        if round % 2 == 0 {
            assert_eq!((to_expired, revokes), (1, 1), "round {round}");
        } else {
            assert!(to_expired <= 1, "round {round}");
            assert_eq!(revokes, to_expired, "round {round}");
        }
        transitions = assert_one_effect_per_transition(&app).await;
    }
    assert!(transitions >= 30 * 2, "{transitions}");
}

// ---- a channel's chat ----

fn join_request_update(chat_id: i64, from: i64) -> Value {
    json!({
        "update_id": 7_500_000 + from,
        "chat_join_request": {
            "chat": {"id": chat_id, "type": "channel", "title": "Private"},
            "from": {"id": from, "is_bot": false, "first_name": "Joiner"},
            "user_chat_id": from,
            "date": Utc::now().timestamp()
        }
    })
}

/// Moving the channel at `path` to chat `new_chat` is refused (409) while an effect on its
/// current chat is pending, and the problem says so.
pub(crate) async fn assert_chat_change_waits_for_pending_effects(
    app: &TestApp,
    path: &str,
    new_chat: i64,
) {
    let body = assert_problem(
        &app.patch(path, json!({"telegram_chat_id": new_chat})).await,
        409,
    );
    assert!(
        body["detail"].as_str().unwrap().contains("pending"),
        "{body}"
    );
}

pub(crate) async fn invite_link(app: &TestApp, channel_id: i64) -> Option<String> {
    app.db()
        .await
        .query_one(
            "SELECT invite_link FROM channels WHERE id = $1",
            &[&(channel_id as i32)],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_channels_chat_cannot_change_while_members_or_effects_remain_and_a_change_drops_the_link()
{
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (old_chat, new_chat, user) = (-1_001_000_075_001, -1_001_000_075_002, 7501);
    let s = subscriber(&app, user).await;
    let c = channel(&app, old_chat, json!({})).await;
    let path = format!("/api/channels/{c}");
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    let old_link = invite_link(&app, c).await.expect("the grant stored a link");

    // A live member is in the current chat.
    let body = assert_problem(
        &app.patch(&path, json!({"telegram_chat_id": new_chat}))
            .await,
        409,
    );
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("telegram_chat_id") && detail.contains("active or grace"),
        "{body}"
    );
    let unchanged = app.get(&path).await.expect(200);
    assert_eq!(unchanged["telegram_chat_id"], old_chat);
    assert_eq!(
        invite_link(&app, c).await.as_deref(),
        Some(old_link.as_str())
    );
    // Other fields, and the same chat id, still change freely, and keep the link.
    let p = app
        .patch(
            &path,
            json!({"telegram_chat_id": old_chat, "title": "Renamed"}),
        )
        .await
        .expect(200);
    assert_eq!(p["title"], "Renamed");
    assert_eq!(
        invite_link(&app, c).await.as_deref(),
        Some(old_link.as_str())
    );

    // Expired, but its revoke has not been performed yet: still refused.
    patch_membership(&app, m, json!({"status": "expired"})).await;
    assert_chat_change_waits_for_pending_effects(&app, &path, new_chat).await;
    run(&app).await;

    // A pending effect that names the chat but no membership (a join request's answer) counts too.
    app.post_telegram_update(join_request_update(old_chat, 7599))
        .await
        .expect(200);
    assert_eq!(effects_of(&app, "join_decline").await.len(), 1);
    assert_problem(
        &app.patch(&path, json!({"telegram_chat_id": new_chat}))
            .await,
        409,
    );
    run(&app).await;

    // Nothing is tied to the old chat any more: the change goes through and drops its link.
    let changed = app
        .patch(&path, json!({"telegram_chat_id": new_chat}))
        .await
        .expect(200);
    assert_eq!(changed["telegram_chat_id"], new_chat);
    assert_eq!(
        invite_link(&app, c).await,
        None,
        "the old chat's link is gone"
    );

    // The next member is let into the new chat, with a link made for it.
    fake.clear_calls();
    patch_membership(&app, m, json!({"status": "active"})).await;
    let grants = effects_of(&app, "grant").await;
    assert_eq!(grants.last().unwrap()["chat_id"].as_i64(), Some(new_chat));
    run(&app).await;
    assert_eq!(fake.methods(), ["createChatInviteLink", "sendMessage"]);
    assert_eq!(
        fake.calls_of("createChatInviteLink")[0].params["chat_id"].as_i64(),
        Some(new_chat)
    );
    let new_link = invite_link(&app, c).await.expect("a link for the new chat");
    assert_ne!(new_link, old_link);
    let text = fake.calls_of("sendMessage")[0].params["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains(&new_link) && !text.contains(&old_link),
        "{text}"
    );
}

/// A re-activation and a change of the channel's chat, released together: either the change
/// is refused (the member is live, or their grant is pending), or it went first and the grant
/// names the new chat. Never a change that succeeds while a grant for the old chat is enqueued.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chat_change_racing_a_reactivation_never_leaves_a_grant_for_the_old_chat() {
    let app = Arc::new(TestApp::spawn().await);
    let mut chat = -1_001_000_076_000;
    let c = channel(&app, chat, json!({})).await;
    let (mut changed, mut refused) = (0, 0);
    for round in 0..40i64 {
        let s = subscriber(&app, 7600 + round).await;
        let m = grant(&app, s, c, 30).await;
        patch_membership(&app, m, json!({"status": "expired"})).await;
        settle(&app).await;
        let new_chat = chat - 1;
        let barrier = Arc::new(Barrier::new(2));
        let (a, b) = (app.clone(), app.clone());
        let (ba, bb) = (barrier.clone(), barrier.clone());
        let change = tokio::spawn(async move {
            ba.wait().await;
            a.patch(
                &format!("/api/channels/{c}"),
                json!({"telegram_chat_id": new_chat}),
            )
            .await
        });
        let reactivate = tokio::spawn(async move {
            bb.wait().await;
            grant(&b, s, c, 30).await
        });
        let change = change.await.unwrap();
        reactivate.await.unwrap();
        let grant_chat: i64 = app
            .db()
            .await
            .query_one(
                "SELECT chat_id FROM effects WHERE membership_id = $1 AND kind = 'grant'
                 ORDER BY id DESC LIMIT 1",
                &[&m],
            )
            .await
            .unwrap()
            .get(0);
        match change.status.as_u16() {
            200 => {
                changed += 1;
                chat = new_chat;
                assert_eq!(grant_chat, new_chat, "round {round}");
            }
            409 => {
                refused += 1;
                assert_eq!(grant_chat, chat, "round {round}");
            }
            other => panic!("round {round}: {other}"),
        }
        let current = app.get(&format!("/api/channels/{c}")).await.expect(200);
        assert_eq!(current["telegram_chat_id"], chat, "round {round}");
        // End the round with nothing live and nothing pending.
        patch_membership(&app, m, json!({"status": "expired"})).await;
        settle(&app).await;
    }
    eprintln!("chat changes: {changed} went first, {refused} refused");
}

/// A revoke left by a deletion must not undo a grant made after it: the member who is live
/// again stays in the chat, and the revoke is recorded as skipped.
#[tokio::test]
async fn a_revoke_left_by_a_deletion_spares_a_member_granted_again() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_070_101, 7101);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, user);

    app.delete(&format!("/api/memberships/{m}"))
        .await
        .expect(204);
    // Granted again before the worker ran the revoke.
    grant(&app, s, c, 30).await;
    fake.clear_calls();
    let report = run(&app).await;
    assert_eq!((report.done, report.failed), (2, 0), "{report:?}");
    assert!(
        fake.calls_of("banChatMember").is_empty(),
        "no ban: {:?}",
        fake.methods()
    );
    assert!(fake.is_member(chat, user), "still in the channel");
    let revokes = effects_of(&app, "revoke").await;
    assert_eq!(revokes.len(), 1, "{revokes:?}");
    assert_eq!(revokes[0]["status"], "done");
    assert!(
        revokes[0]["payload"]["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("skipped")),
        "{:?}",
        revokes[0]["payload"]
    );
}
