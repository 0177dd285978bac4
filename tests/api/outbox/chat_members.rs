//! `my_chat_member` and `chat_member` through the Telegram door: the bot's rights in a channel
//! (`telegram_status` on the channel and the overview, the stored join link, the chat's waiting
//! effects), users who joined a channel's chat without live access (a revoke, performed
//! against the fake Bot API's member list), the exemptions API and the rights probe.

use std::time::Duration;

use serde_json::{Value, json};
use subgate::{telegram::members, telegram_api::client::BotApi};

use crate::{
    access::membership_changes::invite_link,
    support::{
        effects::{
            app_with, channel, grant, join_request_update, next_id, run, settle, subscriber,
        },
        fake_bot::{BOT_ID, FakeBot},
        helpers::TestApp,
    },
};

/// A `ChatMember` of `user` with `status` (and the rights an administrator has, when given).
pub(crate) fn member(user: i64, status: &str, rights: Option<(bool, bool)>) -> Value {
    let mut m = json!({"status": status, "user": {"id": user, "is_bot": user == BOT_ID,
        "first_name": "U"}});
    if let Some((invite, restrict)) = rights {
        m["can_invite_users"] = json!(invite);
        m["can_restrict_members"] = json!(restrict);
        m["can_be_edited"] = json!(false);
    }
    m
}

fn member_updated(chat: i64, date: i64, old: Value, new: Value) -> Value {
    json!({
        "chat": {"id": chat, "type": "channel", "title": "Private"},
        "from": {"id": 1, "is_bot": false, "first_name": "Owner"},
        "date": date,
        "old_chat_member": old,
        "new_chat_member": new,
    })
}

/// A `my_chat_member` update: the bot went from an administrator with every right to `new`.
pub(crate) fn my_chat_member_update(chat: i64, new: Value) -> Value {
    let old = member(BOT_ID, "administrator", Some((true, true)));
    json!({"update_id": next_id(), "my_chat_member": member_updated(chat, 1_700_000_000, old, new)})
}

/// The bot demoted to a plain member of `chat`.
pub(crate) fn bot_demoted(chat: i64) -> Value {
    my_chat_member_update(chat, member(BOT_ID, "member", None))
}

fn bot_promoted(chat: i64) -> Value {
    my_chat_member_update(chat, member(BOT_ID, "administrator", Some((true, true))))
}

/// A `chat_member` update: `user` went from `left` to `new` (`date` marks the update).
fn joined(chat: i64, user: i64, new: &str, date: i64) -> Value {
    json!({"update_id": next_id(), "chat_member": member_updated(chat, date,
        member(user, "left", None), member(user, new, None))})
}

async fn status_of(app: &TestApp, channel_id: i64) -> String {
    app.get(&format!("/api/channels/{channel_id}"))
        .await
        .expect(200)["telegram_status"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The revokes found by `chat_member` updates, as (chat, user, status).
async fn found_revokes(app: &TestApp) -> Vec<(i64, i64, String)> {
    app.db()
        .await
        .query(
            "SELECT chat_id, user_id, status FROM effects
             WHERE kind = 'revoke' AND payload->>'found' = 'chat_member' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[tokio::test]
async fn lost_rights_mark_the_channel_and_rights_back_clear_the_link_and_wake_its_effects() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_021_001;
    let c = channel(&app, chat, json!({})).await;
    let other = channel(&app, -1_001_000_021_002, json!({})).await;
    // A grant performed: the channel's join link is made and stored.
    let s = subscriber(&app, 21_001).await;
    grant(&app, s, c, 30).await;
    run(&app).await;
    let link = invite_link(&app, c).await.expect("the grant stored a link");
    assert_eq!(status_of(&app, c).await, "ok");

    // Demoted to an administrator who may invite but not ban: not enough.
    let update = my_chat_member_update(chat, member(BOT_ID, "administrator", Some((true, false))));
    assert_eq!(
        app.post_telegram_update(update).await.expect(200),
        json!({})
    );
    assert_eq!(status_of(&app, c).await, "no_rights");
    assert_eq!(status_of(&app, other).await, "ok");
    let overview = app.get("/api/overview").await.expect(200);
    let listed = &overview["channels_without_rights"];
    assert_eq!(listed.as_array().unwrap().len(), 1, "{overview}");
    assert_eq!(listed[0]["id"], json!(c));
    assert_eq!(listed[0]["telegram_chat_id"], json!(chat));
    assert_eq!(listed[0]["title"], json!(format!("Channel {chat}")));
    assert!(listed[0]["since"].is_string());

    // A grant made meanwhile waits (here: backing off an hour, as a refused call would).
    let s2 = subscriber(&app, 21_002).await;
    grant(&app, s2, c, 30).await;
    app.db()
        .await
        .execute(
            "UPDATE effects SET next_attempt_at = now() + interval '1 hour'
             WHERE status = 'pending'",
            &[],
        )
        .await
        .unwrap();
    let overview = app.get("/api/overview").await.expect(200);
    assert_eq!(overview["effects"]["paused_no_rights"], json!(1));

    // Removed altogether, then made an administrator again: ok, the link (revoked by Telegram
    // with the demotion) forgotten, the waiting grant due now.
    app.post_telegram_update(my_chat_member_update(chat, member(BOT_ID, "left", None)))
        .await
        .expect(200);
    assert_eq!(status_of(&app, c).await, "no_rights");
    assert_eq!(
        app.post_telegram_update(bot_promoted(chat))
            .await
            .expect(200),
        json!({})
    );
    assert_eq!(status_of(&app, c).await, "ok");
    assert_eq!(invite_link(&app, c).await, None, "{link} is forgotten");
    let due: bool = app
        .db()
        .await
        .query_one(
            "SELECT bool_and(next_attempt_at <= now()) FROM effects WHERE status = 'pending'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(due, "the chat's waiting effects are due now");
    let overview = app.get("/api/overview").await.expect(200);
    assert_eq!(overview["channels_without_rights"], json!([]));
    assert_eq!(overview["effects"]["paused_no_rights"], json!(0));
    // The grant goes out with a new link.
    run(&app).await;
    let new_link = invite_link(&app, c).await.expect("a new link");
    assert_ne!(new_link, link);
}

#[tokio::test]
async fn a_user_who_joined_without_access_is_removed_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_021_101;
    channel(&app, chat, json!({})).await;
    let (stranger, expired) = (21_101, 21_102);
    // An expired member: once had access, has none now.
    let s = subscriber(&app, expired).await;
    let c = app.get("/api/channels").await.expect(200)["items"][0]["id"]
        .as_i64()
        .unwrap();
    let m = grant(&app, s, c, 30).await;
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "expired", "expires_at": "2020-01-01T00:00:00Z"}),
    )
    .await
    .expect(200);
    settle(&app).await;

    for user in [stranger, expired] {
        fake.add_member(chat, user); // in by a forwarded link
        let update = joined(chat, user, "member", 1_700_000_100);
        assert_eq!(
            app.post_telegram_update(update.clone()).await.expect(200),
            json!({})
        );
        // Telegram delivers the same update again: still one revoke.
        let mut again = update;
        again["update_id"] = json!(next_id());
        app.post_telegram_update(again).await.expect(200);
    }
    assert_eq!(
        found_revokes(&app).await,
        vec![
            (chat, stranger, "pending".to_string()),
            (chat, expired, "pending".to_string())
        ]
    );
    let key: String = app
        .db()
        .await
        .query_one(
            "SELECT dedupe_key FROM effects WHERE user_id = $1 AND kind = 'revoke'",
            &[&stranger],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        key,
        format!("revoke:{chat}:{stranger}:chat_member:1700000100")
    );

    run(&app).await;
    assert!(
        !fake.members_of(chat).contains(&stranger) && !fake.members_of(chat).contains(&expired),
        "{:?}",
        fake.members_of(chat)
    );
    assert!(
        !fake.is_banned(chat, stranger),
        "banned and unbanned: free to pay and rejoin"
    );
    let done: Vec<String> = found_revokes(&app).await.into_iter().map(|r| r.2).collect();
    assert_eq!(done, ["done", "done"]);
}

#[tokio::test]
async fn administrators_exempt_users_and_live_members_who_join_stay() {
    let app = TestApp::spawn().await; // no bot: nothing would be performed anyway
    let chat = -1_001_000_021_201;
    let c = channel(&app, chat, json!({})).await;
    let (admin, exempt, live, owner) = (21_201, 21_202, 21_203, 21_204);
    app.post(
        &format!("/api/channels/{c}/exemptions"),
        json!({"telegram_user_id": exempt, "note": "editor"}),
    )
    .await
    .expect(201);
    let s = subscriber(&app, live).await;
    grant(&app, s, c, 30).await;
    settle(&app).await;

    for (user, status) in [
        (admin, "administrator"),
        (owner, "creator"),
        (exempt, "member"),
        (live, "member"),
    ] {
        app.post_telegram_update(joined(chat, user, status, 1_700_000_200))
            .await
            .expect(200);
    }
    // Leaving, being banned, or anything in a chat no channel sells: nothing either.
    let left = json!({"update_id": next_id(), "chat_member": member_updated(chat, 1_700_000_201,
        member(21_205, "member", None), member(21_205, "left", None))});
    app.post_telegram_update(left).await.expect(200);
    app.post_telegram_update(joined(-1_001_000_029_999, 21_206, "member", 1_700_000_202))
        .await
        .expect(200);
    assert_eq!(found_revokes(&app).await, vec![]);
    assert_eq!(app.count("effects WHERE status = 'pending'").await, 0);

    // Without a bot configured, a stranger's revoke is queued all the same (it waits).
    app.post_telegram_update(joined(chat, 21_207, "member", 1_700_000_203))
        .await
        .expect(200);
    assert_eq!(
        found_revokes(&app).await,
        vec![(chat, 21_207, "pending".to_string())]
    );
    // The exemption lifted, the same user joining again is removed.
    app.delete(&format!("/api/channels/{c}/exemptions/{exempt}"))
        .await
        .expect(204);
    app.post_telegram_update(joined(chat, exempt, "member", 1_700_000_204))
        .await
        .expect(200);
    assert_eq!(found_revokes(&app).await.len(), 2);
}

#[tokio::test]
async fn a_revoked_link_reported_in_an_update_is_forgotten() {
    let app = TestApp::spawn().await;
    let chat = -1_001_000_021_301;
    let c = channel(&app, chat, json!({})).await;
    let stored = "https://t.me/+stored";
    app.db()
        .await
        .execute(
            "UPDATE channels SET invite_link = $2 WHERE id = $1",
            &[&(c as i32), &stored],
        )
        .await
        .unwrap();
    let with_link = |link: &str, revoked: bool| {
        let mut u = joined(chat, 21_301, "member", 1_700_000_300);
        u["chat_member"]["invite_link"] = json!({"invite_link": link, "creator": {"id": BOT_ID},
            "creates_join_request": true, "is_primary": false, "is_revoked": revoked});
        u
    };
    // Another link revoked, or ours still valid: kept.
    app.post_telegram_update(with_link("https://t.me/+other", true))
        .await
        .expect(200);
    app.post_telegram_update(with_link(stored, false))
        .await
        .expect(200);
    assert_eq!(invite_link(&app, c).await.as_deref(), Some(stored));
    app.post_telegram_update(with_link(stored, true))
        .await
        .expect(200);
    assert_eq!(invite_link(&app, c).await, None);
}

#[tokio::test]
async fn a_link_revoked_in_telegram_is_made_again_and_the_next_buyer_gets_in_by_it() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_021_351;
    let c = channel(&app, chat, json!({})).await;
    let first = subscriber(&app, 21_351).await;
    grant(&app, first, c, 30).await;
    run(&app).await;
    let old = invite_link(&app, c)
        .await
        .expect("the first grant made the link");
    assert_eq!(fake.links_of(chat), vec![old.clone()]);

    // An administrator revokes it in the app: nobody gets in by it any more, and the next
    // update that carries it says so.
    fake.revoke_link(&old);
    assert!(
        !fake.follow_link(21_352, &old),
        "a revoked link opens no request"
    );
    let mut update = joined(chat, 21_351, "member", 1_700_000_351);
    update["chat_member"]["invite_link"] = json!({"invite_link": old, "creator": {"id": BOT_ID},
        "creates_join_request": true, "is_primary": false, "is_revoked": true});
    app.post_telegram_update(update).await.expect(200);
    assert_eq!(invite_link(&app, c).await, None);

    // The next buyer's grant makes a new link, once, and it lets them in.
    let second = subscriber(&app, 21_352).await;
    grant(&app, second, c, 30).await;
    run(&app).await;
    let new = invite_link(&app, c).await.expect("a new link is stored");
    assert_eq!(fake.links_of(chat), vec![old, new.clone()]);
    assert!(!fake.is_revoked(&new));
    assert!(fake.follow_link(21_352, &new));
    app.post_telegram_update(join_request_update(chat, 21_352, 1_700_000_352))
        .await
        .expect(200);
    run(&app).await;
    assert!(fake.is_member(chat, 21_352), "{:?}", fake.methods());
}

#[tokio::test]
async fn exemptions_are_listed_added_and_removed() {
    let app = TestApp::spawn().await;
    let c = channel(&app, -1_001_000_021_401, json!({})).await;
    let path = format!("/api/channels/{c}/exemptions");
    assert_eq!(app.get(&path).await.expect(200), json!({"items": []}));

    let made = app
        .post(&path, json!({"telegram_user_id": 21_402, "note": "guest"}))
        .await
        .expect(201);
    assert_eq!(made["channel_id"], json!(c));
    assert_eq!(made["telegram_user_id"], json!(21_402));
    assert_eq!(made["note"], json!("guest"));
    assert!(made["created_at"].is_string());
    app.post(&path, json!({"telegram_user_id": 21_401}))
        .await
        .expect(201);
    let dup = app
        .post(&path, json!({"telegram_user_id": 21_402}))
        .await
        .expect(409);
    assert_eq!(dup["status"], json!(409));

    let items = app.get(&path).await.expect(200)["items"].clone();
    let users: Vec<i64> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["telegram_user_id"].as_i64().unwrap())
        .collect();
    assert_eq!(users, [21_401, 21_402]);
    assert_eq!(items[0]["note"], Value::Null);

    // Unknown channels: 404 on every method.
    for missing in ["999999", "abc", "99999999999"] {
        let p = format!("/api/channels/{missing}/exemptions");
        app.get(&p).await.expect(404);
        app.post(&p, json!({"telegram_user_id": 1}))
            .await
            .expect(404);
        app.delete(&format!("{p}/1")).await.expect(404);
    }
    // Bodies: malformed → 400, invalid values → 422 naming the field.
    for body in [
        json!([1]),
        json!({"telegram_user_id": "x"}),
        json!({"telegram_user_id": 1, "extra": true}),
    ] {
        app.post(&path, body).await.expect(400);
    }
    for (body, field) in [
        (json!({}), "telegram_user_id"),
        (json!({"telegram_user_id": 0}), "telegram_user_id"),
        (json!({"telegram_user_id": -5}), "telegram_user_id"),
        (
            json!({"telegram_user_id": 3, "note": "x".repeat(256)}),
            "note",
        ),
        (json!({"telegram_user_id": 3, "note": "a\u{0}b"}), "note"),
    ] {
        let r = app.post(&path, body).await.expect(422);
        assert!(r["errors"][field].is_string(), "{r}");
    }
    app.post(
        &path,
        json!({"telegram_user_id": 3, "note": "é".repeat(255)}),
    )
    .await
    .expect(201);

    app.delete(&format!("{path}/21402")).await.expect(204);
    app.delete(&format!("{path}/21402")).await.expect(404);
    app.delete(&format!("{path}/not-a-user")).await.expect(404);
    assert_eq!(
        app.get(&path).await.expect(200)["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Staff only.
    let r = app
        .request(
            axum::http::Method::GET,
            &path,
            &[],
            axum::body::Body::empty(),
        )
        .await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn the_rights_probe_marks_a_channel_ok_when_the_rights_are_back() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_021_501;
    let c = channel(&app, chat, json!({})).await;
    let healthy = channel(&app, -1_001_000_021_502, json!({})).await;
    fake.set_bot_rights(chat, false);
    app.post_telegram_update(bot_demoted(chat))
        .await
        .expect(200);
    assert_eq!(status_of(&app, c).await, "no_rights");

    let bot = BotApi::from_config(&app.state.config, Duration::from_secs(5)).unwrap();
    // Still without rights: nothing changes.
    assert_eq!(
        members::probe_once(&app.state.db, &bot).await.unwrap(),
        Vec::<i32>::new()
    );
    assert_eq!(status_of(&app, c).await, "no_rights");
    // Asked only about the channel without rights, about the bot itself.
    let asked: Vec<Value> = fake
        .calls_of("getChatMember")
        .into_iter()
        .map(|call| call.params)
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["chat_id"], json!(chat));
    assert_eq!(asked[0]["user_id"], json!(BOT_ID));

    // Rights given back without an update we saw: the next pass finds out.
    fake.set_bot_rights(chat, true);
    assert_eq!(
        members::probe_once(&app.state.db, &bot).await.unwrap(),
        vec![c as i32]
    );
    assert_eq!(status_of(&app, c).await, "ok");
    assert_eq!(status_of(&app, healthy).await, "ok");
    // Nothing left to ask about.
    fake.clear_calls();
    assert_eq!(
        members::probe_once(&app.state.db, &bot).await.unwrap(),
        Vec::<i32>::new()
    );
    assert!(fake.calls_of("getChatMember").is_empty());
}
