//! Broadcasts: the segment and its preview, each recipient reached exactly once by workers
//! running at once, a call a crash cut off never made again, a blocked buyer marked and skipped
//! after, cancel, the paid budget (and the batches of its extra lanes, exactly once), the mark
//! before a call checking consent again, and access effects ahead of a broadcast.

use serde_json::{Value, json};
use subgate::{app::worker, messages::sent};

use super::{app, buyer, member, sent_to};
use crate::catalog::promo_codes::default_plan;
use crate::{
    bot::conversation::{buttons, channel, person, run, send, stars_channel, text_update},
    support::{
        effects::run_until_done,
        fake_bot::{FakeBot, Reply},
        helpers::TestApp,
    },
};

/// Runs the worker until nothing is pending, then once more (a finished broadcast is finished
/// by the run after its last message).
async fn drain(app: &TestApp) {
    run_until_done(app).await;
    run(app).await;
}

/// Channel `chat` with English-speaking buyers `users`, each an active member, their grants
/// sent and the fake's calls cleared; the channel's id.
async fn members(app: &TestApp, fake: &FakeBot, chat: i64, users: std::ops::Range<i64>) -> i64 {
    let c = channel(app, chat, json!({"title": "Many"})).await;
    for user in users {
        let s = buyer(app, user, "en").await;
        member(app, s, c, "active", 0).await;
    }
    run_until_done(app).await;
    fake.clear_calls();
    c
}

/// Creates broadcast `body` (201); its id.
async fn created(app: &TestApp, body: Value) -> i64 {
    app.post("/api/broadcasts", body).await.expect(201)["id"]
        .as_i64()
        .unwrap()
}

async fn broadcast(app: &TestApp, id: i64) -> Value {
    app.get(&format!("/api/broadcasts/{id}")).await.expect(200)
}

/// Channel A (Stars) with members of every kind, channel B with one of A's, their grants sent
/// and forgotten by the fake; returns (A, B, the subscriber ids by name).
async fn population(app: &TestApp, fake: &FakeBot) -> (i64, i64, Vec<(&'static str, i64)>) {
    let a = stars_channel(app, -100_370_001, json!({"title": "Alpha"})).await;
    let b = channel(app, -100_370_002, json!({"title": "Beta"})).await;
    let uk = buyer(app, 37_001, "uk").await;
    let both = buyer(app, 37_002, "en").await;
    let expired = buyer(app, 37_003, "en").await;
    let grace = buyer(app, 37_004, "ru").await;
    let never = buyer(app, 37_005, "en").await;
    let stopped = buyer(app, 37_006, "en").await;
    let old = buyer(app, 37_007, "en").await;
    member(app, uk, a, "active", 0).await;
    member(app, both, a, "active", 0).await;
    member(app, both, b, "active", 0).await;
    member(app, expired, a, "expired", 3).await;
    member(app, grace, a, "grace", 1).await;
    member(app, stopped, a, "active", 0).await;
    member(app, old, a, "expired", 40).await;
    send(app, &text_update(&person(37_006), "/stop")).await;
    run_until_done(app).await;
    fake.clear_calls();
    (
        a,
        b,
        vec![
            ("uk", uk),
            ("both", both),
            ("expired", expired),
            ("grace", grace),
            ("never", never),
            ("stopped", stopped),
            ("old", old),
        ],
    )
}

async fn preview(app: &TestApp, segment: Value) -> Value {
    app.post("/api/broadcasts/preview", json!({ "segment": segment }))
        .await
        .expect(200)
}

#[tokio::test]
async fn a_segment_counts_each_buyer_once_and_never_one_who_said_stop() {
    let (fake, app) = app().await;
    let (a, b, _) = population(&app, &fake).await;
    let p = preview(&app, json!({"channel_ids": [a], "statuses": ["active"]})).await;
    assert_eq!(
        p,
        json!({"recipients": 2, "by_language": {"en": 1, "uk": 1, "ru": 0}})
    );
    // Both channels: the buyer in both is one recipient.
    let p = preview(&app, json!({"channel_ids": [a, b]})).await;
    assert_eq!(p["recipients"], 3, "{p}");
    let p = preview(
        &app,
        json!({"statuses": ["expired"], "expired_within_days": 7}),
    )
    .await;
    assert_eq!(p["recipients"], 1, "{p}");
    let p = preview(&app, json!({"statuses": ["expired"]})).await;
    assert_eq!(p["recipients"], 2, "{p}");
    let p = preview(&app, json!({"statuses": ["grace", "never_paid"]})).await;
    assert_eq!(
        p["recipients"], 6,
        "grace, and every buyer without a payment: {p}"
    );
    let p = preview(&app, json!({"languages": ["ru"]})).await;
    assert_eq!(p["recipients"], 1, "{p}");
    let p = preview(&app, json!({})).await;
    assert_eq!(
        p["recipients"], 6,
        "everybody but the one who said /stop: {p}"
    );
    // Bad values are named.
    let e = app
        .post(
            "/api/broadcasts/preview",
            json!({"segment": {"statuses": ["lapsed"], "languages": ["de"]}}),
        )
        .await
        .expect(422);
    assert!(e["errors"]["segment.statuses"].is_string(), "{e}");
    assert!(e["errors"]["segment.languages"].is_string(), "{e}");
    app.post("/api/broadcasts/preview", json!({"segment": {"colour": 1}}))
        .await
        .expect(400);
    // A segment, a button or a budget is an object: an array is no list of its fields.
    app.post("/api/broadcasts/preview", json!({"segment": [null, null]}))
        .await
        .expect(400);
    app.post(
        "/api/broadcasts",
        json!({"texts": {"en": "Hi"}, "segment": {}, "button": [1]}),
    )
    .await
    .expect(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_recipient_gets_it_exactly_once_from_workers_running_at_once() {
    let (fake, app) = app().await;
    let (a, _, who) = population(&app, &fake).await;
    let plan = default_plan(&app, a).await;
    app.post(
        "/api/webhook-endpoints",
        json!({"url": "https://1.1.1.1/hook", "event_types": ["broadcast.finished"]}),
    )
    .await
    .expect(201);
    let created = app
        .post(
            "/api/broadcasts",
            json!({
                "texts": {"en": "Hello { $name }: «{ $channel }» until { $expires }.",
                          "uk": "Привіт, { $name }! «{ $channel }»"},
                "segment": {"channel_ids": [a], "statuses": ["active", "grace"]},
                "button": {"plan_id": plan}
            }),
        )
        .await
        .expect(201);
    assert_eq!(created["status"], "sending");
    assert_eq!(created["recipients"], 3);
    assert_eq!(created["pending"], 3);
    let id = created["id"].as_i64().unwrap();

    // Three workers at once, three times over.
    for _ in 0..3 {
        let runs = (0..3).map(|_| worker::run_once(&app.state));
        for r in futures::future::join_all(runs).await {
            r.unwrap();
        }
    }
    drain(&app).await;
    for user in [37_001, 37_002, 37_004] {
        assert_eq!(sent_to(&fake, user).len(), 1, "user {user}");
    }
    for user in [37_003, 37_005, 37_006, 37_007] {
        assert!(sent_to(&fake, user).is_empty(), "user {user}");
    }
    let uk = &sent_to(&fake, 37_001)[0];
    let text = uk["text"].as_str().unwrap();
    assert!(text.starts_with("Привіт, Ann Buyer! «Alpha»"), "{text}");
    assert!(
        text.ends_with("Надішліть /stop, щоб більше не отримувати таких повідомлень."),
        "{text}"
    );
    assert_eq!(
        buttons(uk),
        [("Купити: Alpha".to_string(), format!("p:{plan}"))]
    );
    let en = sent_to(&fake, 37_002)[0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(en.starts_with("Hello Ann Buyer: «Alpha» until "), "{en}");
    assert!(
        en.ends_with("\n\nSend /stop to stop these messages."),
        "{en}"
    );

    let b = broadcast(&app, id).await;
    assert_eq!(
        (b["status"].clone(), b["sent"].clone(), b["pending"].clone()),
        (json!("finished"), json!(3), json!(0)),
        "{b}"
    );
    // The owner's endpoint hears it finished, once, with its counters.
    let events: Vec<Value> = app
        .db()
        .await
        .query(
            "SELECT body::jsonb FROM webhook_events WHERE type = 'broadcast.finished'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["id"], id);
    assert_eq!(events[0]["data"]["sent"], 3);
    // What a buyer was sent is on their page.
    let uk_id = who.iter().find(|(n, _)| *n == "uk").unwrap().1;
    let page = app
        .get(&format!("/api/subscribers/{uk_id}/messages"))
        .await
        .expect(200);
    assert_eq!(page["items"][0]["kind"], "broadcast");
    assert_eq!(page["items"][0]["outcome"], "sent");
    assert_eq!(page["items"][0]["text"], text);
}

#[tokio::test]
async fn a_call_a_crash_cut_off_is_never_made_again() {
    let (fake, app) = app().await;
    let (a, _, _) = population(&app, &fake).await;
    let id = created(
        &app,
        json!({"texts": {"en": "News"}, "segment": {"channel_ids": [a], "statuses": ["grace"]}}),
    )
    .await;
    // A worker marked the message and died before it recorded anything (its lease ran out).
    app.db()
        .await
        .execute(
            "UPDATE messages SET attempted_at = now() WHERE broadcast_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    drain(&app).await;
    assert!(sent_to(&fake, 37_004).is_empty(), "not sent a second time");
    let b = broadcast(&app, id).await;
    assert_eq!(
        (b["skipped"].clone(), b["status"].clone()),
        (json!(1), json!("finished"))
    );
    let note: String = app
        .db()
        .await
        .query_one("SELECT note FROM messages WHERE broadcast_id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert!(note.contains("never sent twice"), "{note}");

    // A call whose answer is lost counts the same way: never made again.
    fake.script("sendMessage", Reply::PerformThenHang);
    let id = app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "More"}, "segment": {"channel_ids": [a], "statuses": ["grace"]}}),
        )
        .await
        .expect(201)["id"]
        .as_i64()
        .unwrap();
    crate::support::effects::worker(&app, 300)
        .run(true, &|| false)
        .await
        .unwrap();
    drain(&app).await;
    let performed = fake
        .delivered_messages()
        .iter()
        .filter(|c| {
            c.params["chat_id"] == 37_004 && c.params["text"].as_str().unwrap().starts_with("More")
        })
        .count();
    assert_eq!(performed, 1, "performed once");
    assert_eq!(broadcast(&app, id).await["skipped"], 1);
}

#[tokio::test]
async fn a_buyer_who_blocked_the_bot_is_marked_and_skipped_until_they_write_again() {
    let (fake, app) = app().await;
    let (a, _, who) = population(&app, &fake).await;
    let grace = who.iter().find(|(n, _)| *n == "grace").unwrap().1;
    fake.script(
        "sendMessage",
        Reply::Error(403, "Forbidden: bot was blocked by the user".into()),
    );
    let segment = json!({"channel_ids": [a], "statuses": ["grace"]});
    let id = app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "News"}, "segment": segment}),
        )
        .await
        .expect(201)["id"]
        .as_i64()
        .unwrap();
    drain(&app).await;
    let b = broadcast(&app, id).await;
    assert_eq!(
        (b["blocked"].clone(), b["pending"].clone()),
        (json!(1), json!(0)),
        "{b}"
    );
    let s = app
        .get(&format!("/api/subscribers/{grace}"))
        .await
        .expect(200);
    assert_eq!(s["reachable"], false);
    assert_eq!(preview(&app, segment.clone()).await["recipients"], 0);
    // The effect is done (not a dead letter to retry), with the reason.
    let dead: i64 = app.count("effects WHERE status = 'failed'").await;
    assert_eq!(dead, 0);
    // Writing to the bot again makes them reachable.
    send(&app, &text_update(&person(37_004), "/help")).await;
    assert_eq!(preview(&app, segment).await["recipients"], 1);
}

#[tokio::test]
async fn cancel_stops_every_send_not_begun() {
    let (fake, app) = app().await;
    let (a, _, _) = population(&app, &fake).await;
    // Scheduled: cancelled before it starts, nothing is ever written.
    let later = app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "Later"}, "segment": {}, "send_at": "2099-01-01T00:00:00Z"}),
        )
        .await
        .expect(201);
    assert_eq!(later["status"], "scheduled");
    assert_eq!(later["recipients"], 6, "the segment's size now");
    let later_id = later["id"].as_i64().unwrap();
    let c = app
        .post(&format!("/api/broadcasts/{later_id}/cancel"), Value::Null)
        .await
        .expect(200);
    assert_eq!(c["status"], "cancelled");
    // Sending: cancelled before the worker runs, no message goes.
    let now = app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "Now"}, "segment": {"channel_ids": [a]}}),
        )
        .await
        .expect(201)["id"]
        .as_i64()
        .unwrap();
    let c = app
        .post(&format!("/api/broadcasts/{now}/cancel"), json!({}))
        .await
        .expect(200);
    assert_eq!(
        (
            c["status"].clone(),
            c["skipped"].clone(),
            c["pending"].clone()
        ),
        (json!("cancelled"), json!(3), json!(0)),
        "{c}"
    );
    drain(&app).await;
    assert!(fake.calls_of("sendMessage").is_empty());
    // Cancelling again answers the same; a finished one cannot be.
    app.post(&format!("/api/broadcasts/{now}/cancel"), json!({}))
        .await
        .expect(200);
    let done = app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "Done"}, "segment": {"languages": ["ru"]}}),
        )
        .await
        .expect(201)["id"]
        .as_i64()
        .unwrap();
    drain(&app).await;
    assert_eq!(broadcast(&app, done).await["status"], "finished");
    app.post(&format!("/api/broadcasts/{done}/cancel"), json!({}))
        .await
        .expect(409);
    let list = app.get("/api/broadcasts").await.expect(200);
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_paid_broadcast_pays_for_no_more_messages_than_its_budget() {
    let (fake, app) = app().await;
    let c = members(&app, &fake, -100_370_010, 37_100..37_125).await;
    let created = app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "Sale"}, "segment": {"channel_ids": [c]}, "paid": {"max_stars": 1}}),
        )
        .await
        .expect(201);
    assert_eq!(created["paid"], json!({"max_stars": 1}));
    drain(&app).await;
    let calls = fake.calls_of("sendMessage");
    assert_eq!(calls.len(), 25);
    let paid = calls
        .iter()
        .filter(|c| c.params["allow_paid_broadcast"] == true)
        .count();
    assert_eq!(paid, 10, "1 Star is 10 paid messages");
    let b = broadcast(&app, created["id"].as_i64().unwrap()).await;
    assert_eq!(
        (b["paid_messages"].clone(), b["sent"].clone()),
        (json!(10), json!(25)),
        "{b}"
    );
    // Bad budgets and texts are named.
    let e = app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "Hi { $nme }", "de": "Hallo"}, "segment": {},
                   "paid": {"max_stars": 0}, "button": {"plan_id": 999999}}),
        )
        .await
        .expect(422);
    for field in ["texts.en", "texts.de", "paid.max_stars", "button.plan_id"] {
        assert!(e["errors"][field].is_string(), "{field}: {e}");
    }
    app.post("/api/broadcasts", json!({"segment": {}}))
        .await
        .expect(422);
}

/// A paid broadcast goes out through the worker's extra lanes, which claim and record its
/// messages in batches: with three workers at once, three times over, each recipient still gets
/// it exactly once, and no more go paid than the budget buys.
#[tokio::test]
async fn a_paid_broadcast_s_batches_reach_each_recipient_exactly_once_from_workers_at_once() {
    let (fake, app) = app().await;
    let users = 37_200..37_290;
    let c = members(&app, &fake, -100_370_020, users.clone()).await;
    let id = created(
        &app,
        json!({"texts": {"en": "Batch"}, "segment": {"channel_ids": [c]}, "paid": {"max_stars": 6}}),
    )
    .await;
    for _ in 0..3 {
        let runs = (0..3).map(|_| worker::run_once(&app.state));
        for r in futures::future::join_all(runs).await {
            r.unwrap();
        }
    }
    drain(&app).await;
    for user in users {
        assert_eq!(sent_to(&fake, user).len(), 1, "user {user}");
    }
    let paid = fake
        .calls_of("sendMessage")
        .iter()
        .filter(|c| c.params["allow_paid_broadcast"] == true)
        .count();
    // 6 Stars are 60 paid messages at most. Each of the nine workers reserves its share of the
    // budget for itself, and what a worker reserved and did not spend is not spent by another.
    assert!((1..=60).contains(&paid), "{paid} paid");
    let b = broadcast(&app, id).await;
    assert_eq!(
        (
            b["status"].clone(),
            b["sent"].clone(),
            b["paid_messages"].clone()
        ),
        (json!("finished"), json!(90), json!(paid)),
        "{b}"
    );
    let recorded: i64 = app
        .count("effects WHERE kind = 'member_message' AND status = 'done' AND attempts = 1")
        .await;
    assert_eq!(recorded, 90, "each message's effect recorded once");
}

/// A run that started before a paid broadcast did (its lanes counted without the extra ones)
/// ends at the broadcast's first paid message, and says so, so the next run, at once, has the
/// extra lanes and claims the messages in batches; the statistics of the tables the broadcast
/// filled are refreshed when the worker first sees it sending.
#[tokio::test]
async fn a_run_that_meets_a_paid_broadcast_ends_so_the_next_takes_more_lanes() {
    let (fake, app) = app().await;
    let c = members(&app, &fake, -100_370_030, 37_300..37_340).await;
    let w = crate::support::effects::worker(&app, 2_000);
    // The worker has just looked at the broadcasts: none was sending.
    let first = w.run(true, &|| false).await.unwrap();
    assert_eq!(first.attempted(), 0);
    assert!(!w.take_rerun());
    assert!(messages_counted(&app).await < 40.0);
    app.post(
        "/api/broadcasts",
        json!({"texts": {"en": "Paid"}, "segment": {"channel_ids": [c]}, "paid": {"max_stars": 4}}),
    )
    .await
    .expect(201);
    // Within the second, the next run does not look again: it starts without the extra lanes,
    // and stops at the first paid message each lane meets.
    let short = w.run(false, &|| false).await.unwrap();
    assert!(
        (1..=4).contains(&short.attempted()),
        "ended early: {short:?}"
    );
    assert!(w.take_rerun(), "the run says the next is due at once");
    let pending = app.count("effects WHERE status = 'pending'").await;
    assert_eq!(pending, 40 - short.attempted() as i64);
    // The next run looks at the broadcasts, refreshes the statistics and sends the rest.
    let rest = w.run(false, &|| false).await.unwrap();
    assert_eq!(rest.done, 40 - short.attempted(), "{rest:?}");
    assert!(!w.take_rerun());
    assert_eq!(messages_counted(&app).await, 40.0, "statistics refreshed");
    for user in 37_300..37_340 {
        assert_eq!(sent_to(&fake, user).len(), 1, "user {user}");
    }
}

/// The rows of `messages` as its statistics count them (`ANALYZE` sets them).
async fn messages_counted(app: &TestApp) -> f32 {
    app.db()
        .await
        .query_one(
            "SELECT reltuples FROM pg_class WHERE relname = 'messages'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The mark made just before a call checks the buyer again: one who said `/stop` (or blocked
/// the bot) after the message's facts were read is not marked, so not sent to.
#[tokio::test]
async fn the_mark_before_a_call_checks_the_buyer_s_consent_again() {
    let (fake, app) = app().await;
    let (a, _, who) = population(&app, &fake).await;
    let grace = who.iter().find(|(n, _)| *n == "grace").unwrap().1;
    let id = created(
        &app,
        json!({"texts": {"en": "News"}, "segment": {"channel_ids": [a], "statuses": ["grace"]}}),
    )
    .await;
    let db = app.db().await;
    let message: i64 = db
        .query_one("SELECT id FROM messages WHERE broadcast_id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    let said_stop = "UPDATE subscribers SET marketing_opt_out = $2 WHERE id = $1::bigint::integer";
    db.execute(said_stop, &[&grace, &true]).await.unwrap();
    assert!(!sent::mark_attempt(&db, message, false).await.unwrap());
    db.execute(said_stop, &[&grace, &false]).await.unwrap();
    db.execute(
        "UPDATE subscribers SET reachable = false WHERE id = $1::bigint::integer",
        &[&grace],
    )
    .await
    .unwrap();
    assert!(!sent::mark_attempt(&db, message, false).await.unwrap());
    db.execute(
        "UPDATE subscribers SET reachable = true WHERE id = $1::bigint::integer",
        &[&grace],
    )
    .await
    .unwrap();
    assert!(sent::mark_attempt(&db, message, true).await.unwrap());
    assert!(
        !sent::mark_attempt(&db, message, true).await.unwrap(),
        "marked once"
    );
}

#[tokio::test]
async fn a_grant_goes_before_a_broadcast_already_queued() {
    let (fake, app) = app().await;
    let c = channel(&app, -100_370_020, json!({"title": "Queue"})).await;
    for user in 37_200..37_230 {
        let s = buyer(&app, user, "en").await;
        member(&app, s, c, "active", 0).await;
    }
    crate::support::effects::run_until_done(&app).await;
    fake.clear_calls();
    app.post(
        "/api/broadcasts",
        json!({"texts": {"en": "Queued"}, "segment": {}}),
    )
    .await
    .expect(201);
    let late = buyer(&app, 37_299, "en").await;
    member(&app, late, c, "active", 0).await;
    // One lane, so the order of the calls is the order of the claims.
    let options = worker::Options {
        concurrency: 1,
        ..worker::Options::default()
    };
    worker::Worker::new(app.state.clone(), options)
        .run(false, &|| false)
        .await
        .unwrap();
    let first = &fake.calls_of("sendMessage")[0];
    assert_eq!(
        first.params["chat_id"], 37_299,
        "the grant first: {first:?}"
    );
}
