//! The door across a real `kill -9`: the `subgate` binary answers 500 join request queries sent
//! 50 at a time, as Telegram sends them (each delivered again after a connection error or a
//! non-2xx until a 200 with a reply), is killed once about 200 were answered, and is started
//! again on the same port and database. Every query is answered within 10 s of its first
//! delivery, rightly (members approved, anyone else the Mini App with the reference of their
//! row), once: one row per query, and a query answered before the kill and delivered again
//! after it gets the same answer.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use serde_json::Value;

use super::queries::{PUBLIC_URL, door_app, paywalled, query_update};
use crate::{
    outbox::convergence_harness::{Server, tail},
    support::{
        fake_bot::{FakeBot, TOKEN},
        helpers::{TELEGRAM_SECRET, test_env, url_for},
    },
};

const QUERIES: i64 = 500;
/// Every `MEMBER_EVERY`th user holds a live membership.
const MEMBER_EVERY: i64 = 5;
const IN_FLIGHT: usize = 50;
const KILL_AFTER: usize = 200;
const FIRST_USER: i64 = 41_000_000;
const CHAT: i64 = -100_741_000;
/// Telegram's patience with a webhook: an answer later than this is lost.
const WITHIN: Duration = Duration::from_secs(10);

/// One query's fate, as Telegram saw it.
struct Answered {
    body: Value,
    /// From its first delivery to the 200 that carried its answer.
    took: Duration,
    deliveries: usize,
    /// Answered by the first process (before the kill).
    before_kill: bool,
}

fn query_id(i: i64) -> String {
    format!("crash-q-{i}")
}

fn user(i: i64) -> i64 {
    FIRST_USER + i
}

fn is_member(i: i64) -> bool {
    i % MEMBER_EVERY == 0
}

/// Delivers `update` to whichever server listens at `port` until it answers 200 with a JSON
/// body: Telegram's webhook retries. Returns the body and how many deliveries it took.
async fn deliver(http: &reqwest::Client, port: u16, update: &Value) -> (Value, usize) {
    let url = format!("http://127.0.0.1:{port}/api/webhook/telegram");
    for attempt in 1.. {
        let sent = http
            .post(&url)
            .header("content-type", "application/json")
            .header("x-telegram-bot-api-secret-token", TELEGRAM_SECRET)
            .body(update.to_string())
            .send()
            .await;
        if let Ok(r) = sent
            && r.status().as_u16() == 200
            && let Ok(body) = r.json::<Value>().await
        {
            return (body, attempt);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_is_answered_once_and_in_time_across_a_kill_9() {
    let fake = FakeBot::start().await;
    let app = door_app(&fake).await;
    let channel = paywalled(&app, CHAT).await;
    // Every fifth user is a member (a live membership); the rest are strangers.
    app.db()
        .await
        .batch_execute(&format!(
            "INSERT INTO subscribers (telegram_user_id)
             SELECT {FIRST_USER} + g FROM generate_series(0, {QUERIES} - 1, {MEMBER_EVERY}) g;
             INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             SELECT id, {channel}, 'active', now() + interval '30 days' FROM subscribers
             WHERE telegram_user_id >= {FIRST_USER}"
        ))
        .await
        .unwrap();

    let mut env = test_env(&url_for(&app.db_name));
    env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    env.insert("TELEGRAM_API_URL".into(), fake.url.clone());
    env.insert("PUBLIC_URL".into(), PUBLIC_URL.into());
    let log = std::env::temp_dir().join(format!("{}-door.log", app.db_name));
    let mut server = Server {
        env,
        child: None,
        base: Arc::new(Mutex::new(String::new())),
        log: log.clone(),
        starts: 0,
    };
    server.start().await;
    let port = server.port();

    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let answered = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    let updates: Vec<Value> = (0..QUERIES)
        .map(|i| query_update(CHAT, "channel", user(i), &query_id(i)))
        .collect();
    let telegram = {
        let (http, answered, killed, updates) = (
            http.clone(),
            answered.clone(),
            killed.clone(),
            updates.clone(),
        );
        tokio::spawn(async move {
            futures::stream::iter(updates.into_iter().enumerate())
                .map(|(i, update)| {
                    let (http, answered, killed) = (http.clone(), answered.clone(), killed.clone());
                    async move {
                        let first = Instant::now();
                        let (body, deliveries) = deliver(&http, port, &update).await;
                        let took = first.elapsed();
                        answered.fetch_add(1, Ordering::SeqCst);
                        let before_kill = !killed.load(Ordering::SeqCst);
                        (
                            i as i64,
                            Answered {
                                body,
                                took,
                                deliveries,
                                before_kill,
                            },
                        )
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect::<Vec<_>>()
                .await
        })
    };

    // The kill, with queries in flight, once about KILL_AFTER were answered; then the restart,
    // on the same port and database, at once.
    let deadline = Instant::now() + Duration::from_secs(120);
    while answered.load(Ordering::SeqCst) < KILL_AFTER {
        assert!(Instant::now() < deadline, "{}", tail(&log, 30));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    killed.store(true, Ordering::SeqCst);
    let down = Instant::now();
    server.kill9().await;
    let at_kill = answered.load(Ordering::SeqCst);
    let killed_at: chrono::DateTime<chrono::Utc> = app
        .db()
        .await
        .query_one("SELECT statement_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    server.start_on(port).await;
    let restart = down.elapsed();

    let results: HashMap<i64, Answered> = telegram.await.unwrap().into_iter().collect();
    assert_eq!(results.len(), QUERIES as usize);
    assert!(
        at_kill < QUERIES as usize,
        "killed mid-way: {at_kill} answered"
    );
    let before: Vec<i64> = results
        .iter()
        .filter(|(_, a)| a.before_kill)
        .map(|(i, _)| *i)
        .collect();
    let retried = results.values().filter(|a| a.deliveries > 1).count();
    let slowest = results.values().map(|a| a.took).max().unwrap();
    eprintln!(
        "door across kill -9: {at_kill} answered at the kill, restart took {restart:?}, \
         {retried} queries delivered more than once, slowest answer {slowest:?}"
    );
    assert!(
        !before.is_empty() && before.len() < QUERIES as usize,
        "{}",
        before.len()
    );

    // The rows: one per query, members approved, everyone else waiting at the paywall.
    let rows = app
        .db()
        .await
        .query(
            "SELECT query_id, user_id, reference, answer, state, created_at FROM join_requests",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), QUERIES as usize, "one row per query");
    // Queries the dead process decided and wrote down whose reply the kill cut off: their
    // redelivery found the row.
    let lost_replies = rows
        .iter()
        .filter(|r| r.get::<_, chrono::DateTime<chrono::Utc>>("created_at") < killed_at)
        .filter(|r| {
            let q: String = r.get("query_id");
            let i: i64 = q.trim_start_matches("crash-q-").parse().unwrap();
            !results[&i].before_kill
        })
        .count();
    eprintln!("{lost_replies} queries recorded by the killed process, answered after the restart");
    let by_query: HashMap<String, (i64, String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.get("query_id"),
                (
                    r.get("user_id"),
                    r.get("reference"),
                    r.get("answer"),
                    r.get("state"),
                ),
            )
        })
        .collect();
    assert_eq!(by_query.len(), QUERIES as usize, "distinct query ids");

    for i in 0..QUERIES {
        let q = query_id(i);
        let a = &results[&i];
        assert!(
            a.took <= WITHIN,
            "{q} answered {:?} after its first delivery ({} deliveries; restart took {restart:?})",
            a.took,
            a.deliveries
        );
        assert_eq!(
            a.body["chat_join_request_query_id"],
            q.as_str(),
            "{}",
            a.body
        );
        let (row_user, reference, answer, state) = &by_query[&q];
        assert_eq!(*row_user, user(i));
        if is_member(i) {
            assert_eq!(a.body["method"], "answerChatJoinRequestQuery", "{q}");
            assert_eq!(a.body["result"], "approve", "{q}: {}", a.body);
            assert_eq!((answer.as_str(), state.as_str()), ("approve", "approved"));
        } else {
            assert_eq!(
                a.body["method"], "sendChatJoinRequestWebApp",
                "{q}: {}",
                a.body
            );
            assert_eq!(
                a.body["web_app_url"],
                format!("{PUBLIC_URL}/app/?c={channel}&r={reference}"),
                "{q}"
            );
            assert_eq!((answer.as_str(), state.as_str()), ("web_app", "waiting"));
        }
    }

    // Telegram delivers again queries answered before the kill (their answer lost on the
    // way): the new process answers each the same way, and writes nothing.
    let again: Vec<(i64, Value)> = futures::stream::iter(before.iter().copied())
        .map(|i| {
            let (http, update) = (http.clone(), updates[i as usize].clone());
            async move { (i, deliver(&http, port, &update).await.0) }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for (i, body) in &again {
        assert_eq!(
            body,
            &results[i].body,
            "{} answered twice, differently",
            query_id(*i)
        );
    }
    assert_eq!(app.count("join_requests").await, QUERIES);
    server.kill9().await;
}
