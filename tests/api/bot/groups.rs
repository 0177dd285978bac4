//! Private supergroups, forums among them, sold as channels are: the bot's purchase with Stars
//! and a card payment through door 1 end with the buyer in the group by its join link; the
//! sweep takes an expired member out; join requests, `chat_member` updates (restricted members
//! included), the bot's rights and an audit work on a group's member list as on a channel's;
//! and the bot says nothing in a group, its forum topics included. Every case is checked on
//! the fake Bot API's member list, the group declared a `supergroup` there
//! ([`FakeBot::set_supergroup`]) so the updates built from it say so.

use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};
use subgate::{telegram::members, telegram_api::client::BotApi};

use super::conversation::{
    app_with, button_update, channel, messages_to, next_id, payment_update, person,
    pre_checkout_update, run, send, stars_channel, text_update,
};
use crate::{
    outbox::chat_members::member,
    support::{
        effects::{grant, run_until_done, settle, subscriber, sweep},
        fake_bot::{BOT_ID, FakeBot},
        helpers::TestApp,
    },
};

// ---- updates about a group, as Telegram sends them ----

/// A `chat_join_request` of `user` to `chat` (a plain one: no Mini App query).
fn join_request(fake: &FakeBot, chat: i64, user: i64) -> Value {
    json!({
        "update_id": next_id(),
        "chat_join_request": {
            "chat": fake.chat(chat),
            "from": {"id": user, "is_bot": false, "first_name": "Joiner"},
            "user_chat_id": user,
            "date": Utc::now().timestamp()
        }
    })
}

/// A `ChatMember` of `user` who is `restricted`, in the chat or not.
fn restricted(user: i64, in_chat: bool) -> Value {
    let mut m = member(user, "restricted", None);
    m["is_member"] = json!(in_chat);
    m["can_send_messages"] = json!(false);
    m["until_date"] = json!(0);
    m
}

/// A `chat_member` (or, `of_bot`, `my_chat_member`) update in `chat` from `old` to `new`.
fn member_update(fake: &FakeBot, chat: i64, of_bot: bool, old: Value, new: Value) -> Value {
    let kind = if of_bot {
        "my_chat_member"
    } else {
        "chat_member"
    };
    json!({"update_id": next_id(), kind: {
        "chat": fake.chat(chat),
        "from": {"id": 1, "is_bot": false, "first_name": "Owner"},
        "date": 1_700_000_000 + next_id(),
        "old_chat_member": old,
        "new_chat_member": new,
    }})
}

/// A message in the group `chat` from `from`, with `extra` fields (a topic, a service part).
fn group_message(fake: &FakeBot, chat: i64, from: &Value, extra: Value) -> Value {
    let mut message = json!({
        "message_id": next_id(),
        "date": Utc::now().timestamp(),
        "chat": fake.chat(chat),
        "from": from,
    });
    message
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"update_id": next_id(), "message": message})
}

// ---- set-up and reads ----

/// Declares `chat` a supergroup (a forum when `forum`) in the fake, then sells it with the
/// staff API's defaults and `extra`; returns the channel's id.
async fn group(app: &TestApp, fake: &FakeBot, chat: i64, forum: bool, extra: Value) -> i64 {
    fake.set_supergroup(chat, forum);
    channel(app, chat, extra).await
}

async fn stored_link(app: &TestApp, channel_id: i64) -> String {
    app.db()
        .await
        .query_one(
            "SELECT invite_link FROM channels WHERE id = $1",
            &[&(channel_id as i32)],
        )
        .await
        .unwrap()
        .get::<_, Option<String>>(0)
        .expect("the grant stored the group's join link")
}

/// Telegram user `user` follows the group's join link and the request is answered: through
/// the door, then by the worker.
async fn join_by_link(app: &TestApp, fake: &FakeBot, chat: i64, user: i64, link: &str) {
    assert!(fake.follow_link(user, link), "{link} opens a join request");
    assert!(fake.has_open_request(chat, user));
    assert_eq!(send(app, &join_request(fake, chat, user)).await, json!({}));
    run(app).await;
    assert!(!fake.has_open_request(chat, user));
}

async fn telegram_status(app: &TestApp, channel_id: i64) -> String {
    app.get(&format!("/api/channels/{channel_id}"))
        .await
        .expect(200)["telegram_status"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Inserts a membership of a new subscriber `user`, live or expired ten days ago, with SQL (so
/// no effect is queued by the set-up).
async fn membership(app: &TestApp, channel_id: i64, user: i64, live: bool) {
    let s = subscriber(app, user).await;
    let expires = if live { "10 days" } else { "-10 days" };
    app.db()
        .await
        .execute(
            "INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             VALUES ($1, $2, CASE WHEN $3 THEN 'active' ELSE 'expired' END,
                     statement_timestamp() + $4::text::interval)",
            &[&(s as i32), &(channel_id as i32), &live, &expires],
        )
        .await
        .unwrap();
}

// ---- buying, joining, expiring ----

#[tokio::test]
async fn a_buyer_pays_stars_in_the_bot_for_a_supergroup_and_joins_it_by_its_link() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_031_001;
    fake.set_supergroup(chat, false);
    let c = stars_channel(&app, chat, json!({"title": "Rust Chat"})).await;
    let (user, buyer) = (31_001, person(31_001));

    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(
        reply["text"].as_str().unwrap().contains("Rust Chat"),
        "{reply}"
    );
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    run(&app).await;
    let invoice = &fake.calls_of("sendInvoice")[0].params;
    let reference = invoice["payload"].as_str().unwrap().to_string();
    assert_eq!(invoice["title"], "Rust Chat");

    let answer = send(&app, &pre_checkout_update("q-31001", user, &reference, 250)).await;
    assert_eq!(answer["ok"], true, "{answer}");
    let paid = payment_update("ch-31001", user, &reference, 250, None);
    assert_eq!(send(&app, &paid).await, json!({}));

    // The grant: a join-request link made for the group, sent to the buyer.
    fake.clear_calls();
    run(&app).await;
    assert_eq!(fake.methods(), ["createChatInviteLink", "sendMessage"]);
    assert_eq!(
        fake.calls_of("createChatInviteLink")[0].params["chat_id"],
        chat
    );
    let link = stored_link(&app, c).await;
    assert_eq!(fake.links_of(chat), std::slice::from_ref(&link));
    let grant = &messages_to(&fake, user)[0];
    assert!(
        grant.contains("Rust Chat") && grant.contains(&link),
        "{grant}"
    );

    join_by_link(&app, &fake, chat, user, &link).await;
    assert_eq!(fake.members_of(chat), [user]);
    assert_eq!(
        fake.calls_of("approveChatJoinRequest")[0].params,
        json!({"chat_id": chat, "user_id": user})
    );
}

#[tokio::test]
async fn a_card_payment_for_a_forum_gets_the_buyer_in_and_the_sweep_takes_them_out_at_the_end() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_031_101;
    let c = group(&app, &fake, chat, true, json!({"title": "Forum"})).await;
    let user = 31_101;
    let s = subscriber(&app, user).await;
    let order = app.create_order(s, c).await;
    app.pay_order(&order, "pay-31101").await.expect(200);
    run(&app).await;
    let link = stored_link(&app, c).await;
    assert!(messages_to(&fake, user)[0].contains(&link));
    join_by_link(&app, &fake, chat, user, &link).await;
    assert_eq!(fake.members_of(chat), [user]);

    // The term ends (no grace): the sweep expires the membership and its revoke bans, then
    // unbans, the member — out of the group, free to pay and come back.
    app.db()
        .await
        .execute(
            "UPDATE memberships SET expires_at = statement_timestamp() - interval '1 minute'",
            &[],
        )
        .await
        .unwrap();
    let report = sweep(&app).await;
    assert_eq!(report["to_expired"], 1, "{report}");
    fake.clear_calls();
    run_until_done(&app).await;
    assert_eq!(fake.members_of(chat), Vec::<i64>::new());
    assert!(!fake.is_banned(chat, user));
    let removal: Vec<(String, Value)> = fake
        .calls()
        .into_iter()
        .filter(|c| c.method.ends_with("ChatMember"))
        .map(|c| (c.method, c.params))
        .collect();
    assert_eq!(
        removal,
        [
            (
                "banChatMember".to_string(),
                json!({"chat_id": chat, "user_id": user, "revoke_messages": false})
            ),
            (
                "unbanChatMember".to_string(),
                json!({"chat_id": chat, "user_id": user, "only_if_banned": true})
            ),
        ]
    );
}

#[tokio::test]
async fn a_join_request_to_a_supergroup_lets_a_member_in_and_keeps_a_stranger_out() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_031_201;
    let c = group(&app, &fake, chat, false, json!({})).await;
    let (paid, stranger) = (31_201, 31_202);
    let s = subscriber(&app, paid).await;
    grant(&app, s, c, 30).await;
    settle(&app).await;

    for user in [paid, stranger] {
        fake.open_join_request(chat, user);
        assert_eq!(
            send(&app, &join_request(&fake, chat, user)).await,
            json!({})
        );
    }
    run(&app).await;
    assert_eq!(fake.members_of(chat), [paid]);
    assert!(!fake.has_open_request(chat, paid) && !fake.has_open_request(chat, stranger));
    assert_eq!(
        fake.calls_of("declineChatJoinRequest")[0].params,
        json!({"chat_id": chat, "user_id": stranger})
    );
}

// ---- who is in the group ----

#[tokio::test]
async fn a_stranger_joining_a_forum_is_removed_and_restricted_members_count_as_in_it() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_031_301;
    let c = group(&app, &fake, chat, true, json!({})).await;
    let (stranger, quiet, live) = (31_301, 31_302, 31_303);
    membership(&app, c, live, true).await;

    // A stranger in by a forwarded link, a stranger who joins restricted, a member who does.
    fake.add_member(chat, stranger);
    fake.add_member(chat, quiet);
    fake.restrict(chat, quiet);
    fake.add_member(chat, live);
    fake.restrict(chat, live);
    for (user, new) in [
        (stranger, member(stranger, "member", None)),
        (quiet, restricted(quiet, true)),
        (live, restricted(live, true)),
    ] {
        let update = member_update(&fake, chat, false, member(user, "left", None), new);
        assert_eq!(send(&app, &update).await, json!({}));
    }
    // Restricted while in the group, or lifted from restricted-and-out to out: no join.
    for (old, new) in [
        (member(live, "member", None), restricted(live, true)),
        (restricted(31_304, false), member(31_304, "left", None)),
    ] {
        send(&app, &member_update(&fake, chat, false, old, new)).await;
    }
    let revoked: Vec<i64> = app
        .db()
        .await
        .query(
            "SELECT user_id FROM effects WHERE kind = 'revoke' ORDER BY user_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(revoked, [stranger, quiet]);

    run_until_done(&app).await;
    assert_eq!(fake.members_of(chat), [live]);
    assert!(!fake.is_banned(chat, stranger) && !fake.is_banned(chat, quiet));
}

#[tokio::test]
async fn an_audit_of_a_forum_finds_a_restricted_stranger_and_its_fix_takes_them_out() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_031_401;
    let c = group(&app, &fake, chat, true, json!({})).await;
    // Live and in (restricted), live but restricted and out, expired and still in (restricted).
    let (fine, away, stranger) = (31_401, 31_402, 31_403);
    membership(&app, c, fine, true).await;
    membership(&app, c, away, true).await;
    membership(&app, c, stranger, false).await;
    for user in [fine, stranger] {
        fake.add_member(chat, user);
    }
    for user in [fine, away, stranger] {
        fake.restrict(chat, user);
    }

    let audit = app
        .post(&format!("/api/channels/{c}/audit"), json!({"fix": true}))
        .await
        .expect(202)["audit_id"]
        .as_i64()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let report = loop {
        let a = app.get(&format!("/api/audits/{audit}")).await.expect(200);
        if a["status"] != "running" {
            break a;
        }
        assert!(tokio::time::Instant::now() < deadline, "still running: {a}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(report["status"], "done", "{report}");
    let users = |category: &str| -> Vec<i64> {
        report["rows"][category]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| r["telegram_user_id"].as_i64().unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(users("not_live_but_in_chat"), [stranger], "{report}");
    assert_eq!(users("live_not_in_chat"), [away], "{report}");
    assert_eq!(users("live_but_banned"), Vec::<i64>::new());

    run_until_done(&app).await;
    assert_eq!(fake.members_of(chat), [fine]);
    assert!(!fake.is_banned(chat, stranger));
}

#[tokio::test]
async fn the_bots_rights_in_a_supergroup_are_read_from_updates_and_the_probe() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_031_501;
    let c = group(&app, &fake, chat, false, json!({})).await;
    let admin = |invite, restrict| member(BOT_ID, "administrator", Some((invite, restrict)));

    // Added to the group as a plain member, then made an administrator without the right to
    // ban: not enough. With both rights: ok.
    let plain = member_update(
        &fake,
        chat,
        true,
        member(BOT_ID, "left", None),
        member(BOT_ID, "member", None),
    );
    send(&app, &plain).await;
    assert_eq!(telegram_status(&app, c).await, "no_rights");
    send(
        &app,
        &member_update(
            &fake,
            chat,
            true,
            member(BOT_ID, "member", None),
            admin(true, false),
        ),
    )
    .await;
    assert_eq!(telegram_status(&app, c).await, "no_rights");
    send(
        &app,
        &member_update(&fake, chat, true, admin(true, false), admin(true, true)),
    )
    .await;
    assert_eq!(telegram_status(&app, c).await, "ok");

    // Demoted to a member, then given its rights back without an update: the probe finds out.
    fake.set_bot_rights(chat, false);
    send(
        &app,
        &member_update(
            &fake,
            chat,
            true,
            admin(true, true),
            member(BOT_ID, "member", None),
        ),
    )
    .await;
    assert_eq!(telegram_status(&app, c).await, "no_rights");
    let bot = BotApi::from_config(&app.state.config, Duration::from_secs(5)).unwrap();
    assert_eq!(
        members::probe_once(&app.state.db, &bot).await.unwrap(),
        Vec::<i32>::new()
    );
    fake.set_bot_rights(chat, true);
    assert_eq!(
        members::probe_once(&app.state.db, &bot).await.unwrap(),
        [c as i32]
    );
    assert_eq!(telegram_status(&app, c).await, "ok");
}

// ---- the bot talks only in private chats ----

#[tokio::test]
async fn the_bot_says_nothing_in_a_group_or_a_forum_topic() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, forum) = (-1_001_000_031_601, -1_001_000_031_602);
    group(&app, &fake, chat, false, json!({})).await;
    group(&app, &fake, forum, true, json!({})).await;
    let someone = person(31_601);

    let updates = [
        group_message(&fake, chat, &someone, json!({"text": "/start"})),
        group_message(
            &fake,
            chat,
            &someone,
            json!({"text": "/subscriptions@subgate_test_bot"}),
        ),
        group_message(
            &fake,
            forum,
            &someone,
            json!({"text": "/start", "message_thread_id": 7, "is_topic_message": true}),
        ),
        group_message(
            &fake,
            forum,
            &someone,
            json!({"new_chat_members": [someone.clone()]}),
        ),
        group_message(
            &fake,
            chat,
            &someone,
            json!({"left_chat_member": someone.clone()}),
        ),
        group_message(
            &fake,
            forum,
            &someone,
            json!({"forum_topic_created": {"name": "News", "icon_color": 7322096},
                   "message_thread_id": 8, "is_topic_message": true}),
        ),
    ];
    for update in &updates {
        assert_eq!(send(&app, update).await, json!({}), "{update}");
    }
    run(&app).await;
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());
    assert_eq!(app.count("subscribers").await, 0);
    assert_eq!(app.count("effects").await, 0);
    // In the private chat the same person is answered.
    let reply = send(&app, &text_update(&someone, "/start")).await;
    assert_eq!(reply["method"], "sendMessage");
}
