//! Join request queries at the door: who is let in at once, who gets the paywall, the waiting
//! request approved once its buyer paid (through its query), declined once its order ran out
//! or it outlived its query, the payment racing the expiry, and the database too slow to
//! answer in time (`queue`, decided later).

use std::sync::{
    Arc,
    atomic::{AtomicI64, Ordering},
};

use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::{
    payments::telegram_door::{PRICE, order, pay, pre_checkout},
    support::{
        effects::{self, run_until_done},
        fake_bot::FakeBot,
        helpers::TestApp,
    },
};

pub(crate) const PUBLIC_URL: &str = "https://pay.example.com";

static NEXT: AtomicI64 = AtomicI64::new(1);

fn next() -> i64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A join request update that carries `query_id`, to a chat of `kind` (`channel` or
/// `supergroup`).
pub(crate) fn query_update(chat: i64, kind: &str, user: i64, query_id: &str) -> Value {
    json!({
        "update_id": next(),
        "chat_join_request": {
            "chat": {"id": chat, "type": kind, "title": "Private"},
            "from": {"id": user, "is_bot": false, "first_name": "Joiner", "language_code": "uk"},
            "user_chat_id": user,
            "date": Utc::now().timestamp(),
            "query_id": query_id
        }
    })
}

/// An app with the fake Bot API and `PUBLIC_URL`.
pub(crate) async fn door_app(fake: &FakeBot) -> TestApp {
    door_app_with(fake, &[]).await
}

/// [`door_app`] with `more` variables set.
async fn door_app_with(fake: &FakeBot, more: &[(&str, &str)]) -> TestApp {
    let url = fake.url.clone();
    let more: Vec<(String, String)> = more
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert(
            "TELEGRAM_BOT_TOKEN".into(),
            crate::support::fake_bot::TOKEN.into(),
        );
        env.insert("PUBLIC_URL".into(), PUBLIC_URL.into());
        env.extend(more);
    })
    .await
}

/// A Stars channel (or group) at `chat` whose door is the Mini App.
pub(crate) async fn paywalled(app: &TestApp, chat: i64) -> i64 {
    app.create_channel(
        chat,
        json!({"currency": "XTR", "price_minor": PRICE, "door": "mini_app"}),
    )
    .await["id"]
        .as_i64()
        .unwrap()
}

/// The user asks to join through the fake (which opens the request and its query), the door
/// answers, and the fake performs the answer as Telegram performs a webhook's reply. Returns
/// the reply.
pub(crate) async fn ask(
    app: &TestApp,
    fake: &FakeBot,
    chat: i64,
    kind: &str,
    user: i64,
    query_id: &str,
) -> Value {
    fake.open_join_query(chat, user, query_id);
    let body = app
        .post_telegram_update(query_update(chat, kind, user, query_id))
        .await
        .expect(200);
    assert!(
        fake.perform_reply(&body),
        "Telegram refused the reply {body}"
    );
    body
}

/// `(state, answer, order_id)` of the request of `query_id`.
async fn request_row(app: &TestApp, query_id: &str) -> (String, String, Option<i64>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT state, answer, order_id FROM join_requests WHERE query_id = $1",
            &[&query_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

async fn settle(app: &TestApp) -> usize {
    subgate::telegram::door::settle(&app.state.db, &app.state.config)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_door_lets_members_exempt_users_and_administrators_in_and_shows_strangers_the_paywall()
{
    let fake = FakeBot::start().await;
    let app = door_app(&fake).await;
    let chat = -100_700_001;
    let channel = paywalled(&app, chat).await;
    // A member (a staff grant), an exempt user, an administrator, and a stranger.
    let member = effects::subscriber(&app, 7001).await;
    effects::grant(&app, member, channel, 30).await;
    effects::settle(&app).await;
    app.post(
        &format!("/api/channels/{channel}/exemptions"),
        json!({"telegram_user_id": 7002}),
    )
    .await
    .expect(201);
    fake.add_admin(chat, 7003);

    for (user, query) in [(7001, "q-member"), (7002, "q-exempt"), (7003, "q-admin")] {
        let body = ask(&app, &fake, chat, "channel", user, query).await;
        assert_eq!(
            body,
            json!({"method": "answerChatJoinRequestQuery",
                   "chat_join_request_query_id": query, "result": "approve"}),
            "user {user}"
        );
        assert!(fake.is_member(chat, user), "user {user} is in the chat");
        assert_eq!(fake.query_answers(query), vec!["approve"]);
        assert_eq!(request_row(&app, query).await.0, "approved");
    }

    let body = ask(&app, &fake, chat, "channel", 7004, "q-stranger").await;
    assert_eq!(body["method"], "sendChatJoinRequestWebApp");
    assert_eq!(body["chat_join_request_query_id"], "q-stranger");
    let url = body["web_app_url"].as_str().unwrap();
    let reference: String = app
        .db()
        .await
        .query_one(
            "SELECT reference FROM join_requests WHERE query_id = 'q-stranger'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(url, format!("{PUBLIC_URL}/app/?c={channel}&r={reference}"));
    assert!(
        reference.starts_with("jr_") && reference.len() == 35,
        "{reference}"
    );
    assert!(!fake.is_member(chat, 7004));
    assert!(fake.has_open_request(chat, 7004), "the request stays open");
    assert_eq!(
        request_row(&app, "q-stranger").await,
        ("waiting".into(), "web_app".into(), None)
    );

    // Telegram redelivers the update: the same answer, no second row.
    let again = app
        .post_telegram_update(query_update(chat, "channel", 7004, "q-stranger"))
        .await
        .expect(200);
    assert_eq!(again, body);
    assert_eq!(app.count("join_requests WHERE user_id = 7004").await, 1);

    // Staff see who waits at the door.
    let waiting = app
        .get(&format!(
            "/api/join-requests?channel_id={channel}&state=waiting"
        ))
        .await
        .expect(200);
    let items = waiting["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{waiting}");
    assert_eq!(items[0]["user_id"], 7004);
    assert_eq!(items[0]["answer"], "web_app");
    app.get("/api/join-requests?state=maybe").await.expect(422);
}

#[tokio::test]
async fn a_chat_sold_through_the_bot_answers_queries_by_the_bots_rule() {
    let fake = FakeBot::start().await;
    let app = door_app(&fake).await;
    let chat = -100_700_002;
    let channel = effects::stars_channel(&app, chat).await;
    let member = effects::subscriber(&app, 7101).await;
    effects::grant(&app, member, channel, 30).await;
    effects::settle(&app).await;

    let body = ask(&app, &fake, chat, "supergroup", 7101, "b-member").await;
    assert_eq!(body["result"], "approve");
    assert!(fake.is_member(chat, 7101));
    let body = ask(&app, &fake, chat, "supergroup", 7102, "b-stranger").await;
    assert_eq!(body["result"], "decline");
    assert!(!fake.is_member(chat, 7102) && !fake.has_open_request(chat, 7102));
    // Not a Mini App door: nothing waits.
    assert_eq!(app.count("join_requests").await, 0);
    // An unknown chat is declined too.
    let body = ask(&app, &fake, -100_799_999, "channel", 7101, "b-unknown").await;
    assert_eq!(body["result"], "decline");
}

#[tokio::test]
async fn a_mini_app_door_needs_public_url() {
    let app = TestApp::spawn().await;
    let c = app
        .create_channel(
            -100_700_003,
            json!({"currency": "XTR", "price_minor": PRICE}),
        )
        .await;
    assert_eq!(c["door"], "bot");
    assert_eq!(c["paywall_url"], Value::Null);
    let r = app
        .patch(
            &format!("/api/channels/{}", c["id"]),
            json!({"door": "mini_app"}),
        )
        .await
        .expect(422);
    assert!(r.to_string().contains("PUBLIC_URL"), "{r}");
    app.patch(
        &format!("/api/channels/{}", c["id"]),
        json!({"door": "side"}),
    )
    .await
    .expect(422);
    app.patch(&format!("/api/channels/{}", c["id"]), json!({"door": null}))
        .await
        .expect(422);

    let fake = FakeBot::start().await;
    let app = door_app(&fake).await;
    let c = app
        .create_channel(
            -100_700_004,
            json!({"currency": "XTR", "price_minor": PRICE}),
        )
        .await;
    let changed = app
        .patch(
            &format!("/api/channels/{}", c["id"]),
            json!({"door": "mini_app"}),
        )
        .await
        .expect(200);
    assert_eq!(changed["door"], "mini_app");
    assert_eq!(
        changed["paywall_url"],
        format!("{PUBLIC_URL}/app/?c={}", c["id"])
    );
}

/// A stranger at the door buys: the payment's grant lets them in through their query, once;
/// no invite link is sent.
#[tokio::test]
async fn a_stranger_who_pays_is_let_in_through_the_query_exactly_once() {
    let fake = FakeBot::start().await;
    let app = door_app(&fake).await;
    let chat = -100_700_005;
    let channel = paywalled(&app, chat).await;
    ask(&app, &fake, chat, "supergroup", 7201, "p-1").await;
    let buyer = effects::subscriber(&app, 7201).await;
    let (order_id, reference) = order(&app, buyer, channel).await;
    let db = app.db().await;
    db.execute(
        "UPDATE join_requests SET order_id = $1 WHERE query_id = 'p-1'",
        &[&order_id],
    )
    .await
    .unwrap();
    assert_eq!(
        pre_checkout(&app, "pc-p-1", 7201, &reference).await["ok"],
        true
    );
    pay(&app, "charge-p-1", 7201, &reference).await;
    // Paid twice (Telegram redelivers): still one decision.
    pay(&app, "charge-p-1", 7201, &reference).await;
    run_until_done(&app).await;
    assert_eq!(settle(&app).await, 0, "nothing left to decide");
    run_until_done(&app).await;

    assert!(fake.is_member(chat, 7201), "the buyer is in the chat");
    assert_eq!(
        fake.query_answers("p-1"),
        vec![
            format!(
                "web_app {PUBLIC_URL}/app/?c={channel}&r={}",
                db.query_one(
                    "SELECT reference FROM join_requests WHERE query_id = 'p-1'",
                    &[]
                )
                .await
                .unwrap()
                .get::<_, String>(0)
            ),
            "approve".to_string()
        ]
    );
    assert_eq!(request_row(&app, "p-1").await.0, "approved");
    assert_eq!(
        app.count("join_requests WHERE query_id = 'p-1' AND answered_at IS NOT NULL")
            .await,
        1
    );
    // One decision effect; the grant did not send a link.
    assert_eq!(app.count("effects WHERE dedupe_key LIKE 'door:%'").await, 1);
    assert!(fake.calls_of("approveChatJoinRequest").is_empty());
    assert!(fake.links_of(chat).is_empty(), "no invite link was made");
    let note: Option<String> = db
        .query_one(
            "SELECT payload->>'note' FROM effects WHERE kind = 'grant' AND user_id = 7201",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(note.is_some_and(|n| n.contains("approved at the door")));
}

/// An order whose hold ran out unpaid, and a request older than its query's life, are
/// declined — through the query while it is valid, else by chat and user.
#[tokio::test]
async fn unpaid_and_stale_requests_are_declined() {
    let fake = FakeBot::start().await;
    let app = door_app(&fake).await;
    let chat = -100_700_006;
    let channel = paywalled(&app, chat).await;
    ask(&app, &fake, chat, "channel", 7301, "u-1").await;
    ask(&app, &fake, chat, "channel", 7302, "u-2").await;
    ask(&app, &fake, chat, "channel", 7303, "u-3").await;
    let buyer = effects::subscriber(&app, 7301).await;
    let (order_id, _) = order(&app, buyer, channel).await;
    let db = app.db().await;
    db.execute(
        "UPDATE join_requests SET order_id = $1 WHERE query_id = 'u-1'",
        &[&order_id],
    )
    .await
    .unwrap();
    // Nothing is due yet.
    assert_eq!(settle(&app).await, 0);
    // u-1's order closes (its open time passed); u-2 outlives its query.
    db.execute(
        "UPDATE orders SET created_at = now() - interval '1 hour' WHERE id = $1",
        &[&order_id],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE join_requests SET created_at = now() - interval '2 hours' WHERE query_id = 'u-2'",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(settle(&app).await, 2);
    assert_eq!(settle(&app).await, 0, "decided once");
    run_until_done(&app).await;
    assert_eq!(request_row(&app, "u-1").await.0, "declined");
    assert_eq!(request_row(&app, "u-2").await.0, "declined");
    assert_eq!(request_row(&app, "u-3").await.0, "waiting");
    assert_eq!(fake.query_answers("u-1").last().unwrap(), "decline");
    // u-2's query was too old: declined by chat and user.
    assert_eq!(fake.query_answers("u-2").len(), 1, "only the Mini App");
    assert_eq!(fake.calls_of("declineChatJoinRequest").len(), 1);
    for user in [7301, 7302] {
        assert!(!fake.has_open_request(chat, user) && !fake.is_member(chat, user));
    }
    assert!(fake.has_open_request(chat, 7303));
}

/// The payment and the expiry of its order race, again and again: a buyer who paid is never
/// declined — either the request is approved (and they are in through it), or the decline won
/// before the payment committed and the grant sends them the chat's link instead.
#[tokio::test]
async fn a_payment_racing_the_expiry_never_leaves_a_payer_outside() {
    let fake = FakeBot::start().await;
    let app = door_app(&fake).await;
    let chat = -100_700_007;
    let channel = paywalled(&app, chat).await;
    let (mut approved, mut declined) = (0, 0);
    for round in 0..8i64 {
        let user = 7400 + round;
        let query = format!("r-{round}");
        ask(&app, &fake, chat, "channel", user, &query).await;
        let buyer = effects::subscriber(&app, user).await;
        let (order_id, reference) = order(&app, buyer, channel).await;
        let db = app.db().await;
        db.execute(
            "UPDATE join_requests SET order_id = $1 WHERE query_id = $2",
            &[&order_id, &query],
        )
        .await
        .unwrap();
        assert_eq!(
            pre_checkout(&app, &format!("pc-{query}"), user, &reference).await["ok"],
            true
        );
        // The hold runs out the moment the payment arrives.
        db.execute(
            "UPDATE orders SET hold_until = now(), created_at = now() - interval '1 hour'
             WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let (b1, b2) = (barrier.clone(), barrier.clone());
        let charge = format!("charge-{query}");
        let paying = async {
            b1.wait().await;
            pay(&app, &charge, user, &reference).await;
        };
        let expiring = async {
            b2.wait().await;
            settle(&app).await
        };
        tokio::join!(paying, expiring);
        run_until_done(&app).await;
        settle(&app).await;
        run_until_done(&app).await;

        let (state, _, _) = request_row(&app, &query).await;
        let paid: bool = db
            .query_one(
                "SELECT outcome = 'applied' FROM payments WHERE external_id = $1",
                &[&charge],
            )
            .await
            .unwrap()
            .get(0);
        assert!(paid, "round {round}: the payment was applied");
        match state.as_str() {
            "approved" => {
                approved += 1;
                assert!(fake.is_member(chat, user), "round {round}: let in");
                assert_eq!(fake.query_answers(&query).last().unwrap(), "approve");
            }
            "declined" => {
                declined += 1;
                // The grant then sends the chat's link, which lets the member in.
                let sent = fake
                    .delivered_messages()
                    .into_iter()
                    .any(|m| m.params["chat_id"] == user);
                assert!(sent, "round {round}: the payer got the chat's link");
            }
            other => panic!("round {round}: the request is {other}"),
        }
        assert_eq!(
            app.count(&format!(
                "effects WHERE dedupe_key LIKE 'door:%' AND user_id = {user}"
            ))
            .await,
            1,
            "round {round}: decided once"
        );
    }
    assert_eq!(approved + declined, 8);
}

/// The database does not answer in time (the channels table is locked): the query is answered
/// `queue` within the budget, the request is written down once the database is back, and then
/// decided like any waiting one.
#[tokio::test]
async fn a_door_that_cannot_decide_in_time_queues_and_decides_later() {
    let fake = FakeBot::start().await;
    let app = door_app_with(&fake, &[("DOOR_ANSWER_MS", "300")]).await;
    let chat = -100_700_008;
    let channel = paywalled(&app, chat).await;
    let member = effects::subscriber(&app, 7501).await;
    effects::grant(&app, member, channel, 30).await;
    effects::settle(&app).await;

    let mut locker = app.db().await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE channels IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let body = ask(&app, &fake, chat, "channel", 7501, "t-1").await;
    let took = started.elapsed();
    assert_eq!(body["result"], "queue", "{body}");
    assert!(
        took.as_secs() < 10,
        "answered within Telegram's 10 s: {took:?}"
    );
    assert!(fake.has_open_request(chat, 7501), "queued: still pending");
    tx.rollback().await.unwrap();

    // Written down once the database takes it.
    let mut written = false;
    for _ in 0..100 {
        if app.count("join_requests WHERE query_id = 't-1'").await == 1 {
            written = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(written, "the queued request was written down");
    assert_eq!(
        request_row(&app, "t-1").await,
        ("waiting".into(), "queue".into(), None)
    );
    // The member is approved by chat and user (the query was answered already).
    assert_eq!(settle(&app).await, 1);
    run_until_done(&app).await;
    assert_eq!(request_row(&app, "t-1").await.0, "approved");
    assert!(fake.is_member(chat, 7501));
    assert_eq!(fake.query_answers("t-1"), vec!["queue"]);
    assert_eq!(fake.calls_of("approveChatJoinRequest").len(), 1);
}
