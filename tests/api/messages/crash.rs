//! A broadcast across a real `kill -9`: the `subgate` binary sends a broadcast to 150 buyers,
//! is killed mid-way with calls in flight, and is started again. No buyer receives it twice;
//! the only ones who may miss it are those whose call the kill cut off (at most one per worker
//! lane), and those are counted `skipped`, never sent again; every other buyer gets it, and the
//! counters match the fake's deliveries. Once free, once paid (sent by the worker's extra lanes
//! in claimed batches, whose unsent rest is claimed again after the crash).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use subgate::app::worker::PAID_LANES;

use crate::{
    outbox::convergence_harness::{Server, tail},
    support::{
        fake_bot::{FakeBot, TOKEN},
        helpers::{TestApp, test_env, url_for},
    },
};

const RECIPIENTS: i64 = 150;
const FIRST_USER: i64 = 38_000_000;
/// The worker's lanes: at most this many calls are in flight when the process dies.
const LANES: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_reaches_each_buyer_at_most_once_across_a_kill_9() {
    across_a_kill_9(json!({}), LANES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_broadcast_sent_in_batches_reaches_each_buyer_at_most_once_across_a_kill_9() {
    across_a_kill_9(json!({"paid": {"max_stars": 100}}), LANES + PAID_LANES).await;
}

/// The broadcast (with `extra` in its body) across a kill: at most `lanes` calls cut off.
async fn across_a_kill_9(extra: Value, lanes: usize) {
    let fake = FakeBot::start().await;
    // Calls take a moment, so the kill lands while some are in flight.
    fake.set_delay(Duration::from_millis(40));
    let app = TestApp::spawn().await;
    app.db()
        .await
        .execute(
            "INSERT INTO subscribers (telegram_user_id)
             SELECT generate_series($1::bigint, $1::bigint + $2::bigint - 1)",
            &[&FIRST_USER, &RECIPIENTS],
        )
        .await
        .unwrap();
    let mut body = json!({"texts": {"en": "Season two starts today."}, "segment": {}});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let created = app.post("/api/broadcasts", body).await.expect(201);
    assert_eq!(created["recipients"], RECIPIENTS);
    let id = created["id"].as_i64().unwrap();

    let mut env = test_env(&url_for(&app.db_name));
    env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    env.insert("TELEGRAM_API_URL".into(), fake.url.clone());
    let log = std::env::temp_dir().join(format!("{}-serve.log", app.db_name));
    let mut server = Server {
        env,
        child: None,
        base: Arc::new(Mutex::new(String::new())),
        log: log.clone(),
        starts: 0,
    };
    server.start().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while fake.delivered_messages().len() < 60 {
        assert!(Instant::now() < deadline, "{}", tail(&log, 30));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9().await;
    let at_kill = fake.delivered_messages().len();
    assert!(at_kill < RECIPIENTS as usize, "killed mid-way: {at_kill}");
    // The dead process's leases run out (30 s in real time; here, at once).
    app.db()
        .await
        .execute(
            "UPDATE effects SET lease_until = now() WHERE lease_until > now()",
            &[],
        )
        .await
        .unwrap();
    server.start().await;

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let b = app.get(&format!("/api/broadcasts/{id}")).await.expect(200);
        if b["status"] == "finished" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not finished: {b}\n{}",
            tail(&log, 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.kill9().await;

    let mut received: HashMap<i64, usize> = HashMap::new();
    for call in fake.delivered_messages() {
        *received
            .entry(call.params["chat_id"].as_i64().unwrap())
            .or_default() += 1;
    }
    let twice: Vec<_> = received.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "received twice: {twice:?}");
    let b = app.get(&format!("/api/broadcasts/{id}")).await.expect(200);
    let (sent, skipped) = (b["sent"].as_i64().unwrap(), b["skipped"].as_i64().unwrap());
    assert_eq!(sent + skipped, RECIPIENTS, "{b}");
    assert!(
        skipped as usize <= lanes,
        "only calls cut off are skipped: {b}"
    );
    // Every message recorded sent was received; a skipped one may have been (cut off after
    // Telegram took it), and is never sent again.
    assert!(
        received.len() as i64 >= sent,
        "{} received, {b}",
        received.len()
    );
    assert!(received.len() as i64 <= RECIPIENTS);
    let unsent: i64 = app
        .count(
            "messages WHERE outcome IS DISTINCT FROM 'sent' AND outcome IS DISTINCT FROM 'skipped'",
        )
        .await;
    assert_eq!(unsent, 0);
    // Paid: every message counted paid was sent with `allow_paid_broadcast`.
    let flagged = fake
        .delivered_messages()
        .iter()
        .filter(|c| c.params["allow_paid_broadcast"] == true)
        .count() as i64;
    let paid = b["paid_messages"].as_i64().unwrap();
    if extra.get("paid").is_some() {
        assert_eq!(paid, sent, "every sent message went paid: {b}");
        assert!(flagged >= sent, "{flagged} flagged, {b}");
    } else {
        assert_eq!((paid, flagged), (0, 0), "{b}");
    }
}
