//! The worker wakes when an effect is committed (by this process, or by another one that tells
//! it with a notification on its listening connection), not at its poll; access effects are
//! claimed before older messages; the listening connection is made again after it is
//! terminated; and two workers woken together still perform each effect once.
//!
//! The loops here run with a poll of an hour ([`HOUR`]): an effect performed while they run was
//! performed because the worker was woken, never because the poll fired.

use std::{sync::Arc, time::Duration};

use serde_json::json;
use subgate::{
    app::{
        background::effects_loop_every,
        worker::{Options, Worker, listen},
    },
    common::shutdown::ShutdownSignal,
};

use crate::support::{
    effects::*,
    fake_bot::{Call, FakeBot},
    helpers::TestApp,
};

/// The poll interval of the loops under test: longer than any test runs.
const HOUR: Duration = Duration::from_secs(3600);

/// A running effects loop; stopped (and waited for) when dropped is not possible in async, so
/// [`Loop::stop`] is called at the end of each test.
struct Loop {
    shutdown: ShutdownSignal,
    task: tokio::task::JoinHandle<()>,
}

impl Loop {
    fn start(app: &TestApp) -> Loop {
        let shutdown = ShutdownSignal::new();
        let task = tokio::spawn(effects_loop_every(
            app.state.clone(),
            shutdown.clone(),
            HOUR,
        ));
        Loop { shutdown, task }
    }

    async fn stop(self) {
        self.shutdown.trigger();
        self.task.await.unwrap();
    }
}

/// The process ids of the listening connections on this test's database that have run their
/// `LISTEN` (their last statement is it, or the probe that follows it).
async fn listeners(app: &TestApp) -> Vec<i32> {
    app.db()
        .await
        .query(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = $1
               AND (query ILIKE 'LISTEN%' OR query = 'SELECT 1')
             ORDER BY pid",
            &[&listen::APPLICATION_NAME],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Waits (at most a minute, then fails) until `done` holds, checking every 20 ms.
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut done: impl FnMut() -> F,
) {
    for _ in 0..3000 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within a minute");
}

fn messages_to(fake: &FakeBot, user: i64) -> Vec<Call> {
    fake.delivered_messages()
        .into_iter()
        .filter(|c| c.method == "sendMessage" && c.params["chat_id"].as_i64() == Some(user))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_grant_is_sent_without_waiting_for_the_poll() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -1_001_000_002_501, json!({})).await;
    let worker = Loop::start(&app);
    // The loop's first run and the listener's first pass happen at start-up; wait for both.
    eventually("the listener listens", || async {
        listeners(&app).await.len() == 1
    })
    .await;
    let first = subscriber(&app, 7_250_001).await;
    grant(&app, first, c, 30).await;
    eventually("the first grant", || async {
        !messages_to(&fake, 7_250_001).is_empty()
    })
    .await;
    // Now idle (nothing due), with an hour to its next poll: only a wake-up sends this one.
    let second = subscriber(&app, 7_250_002).await;
    grant(&app, second, c, 30).await;
    eventually("the second grant", || async {
        !messages_to(&fake, 7_250_002).is_empty()
    })
    .await;
    // Recorded right after the call.
    eventually("both grants recorded", || async {
        app.count("effects WHERE kind = 'grant' AND status = 'done'")
            .await
            == 2
    })
    .await;
    worker.stop().await;
    assert_eq!(messages_to(&fake, 7_250_001).len(), 1);
    assert_eq!(messages_to(&fake, 7_250_002).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_reconnects_after_its_connection_is_terminated() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -1_001_000_002_502, json!({})).await;
    let worker = Loop::start(&app);
    eventually("the listener listens", || async {
        listeners(&app).await.len() == 1
    })
    .await;
    let old = listeners(&app).await[0];
    let terminated: bool = app
        .db()
        .await
        .query_one("SELECT pg_terminate_backend($1)", &[&old])
        .await
        .unwrap()
        .get(0);
    assert!(terminated);
    eventually("a new listening connection", || async {
        let now = listeners(&app).await;
        now.len() == 1 && now[0] != old
    })
    .await;
    // Woken through the new connection (the poll is an hour away).
    for (i, user) in (7_250_101..7_250_104).enumerate() {
        let s = subscriber(&app, user).await;
        grant(&app, s, c, 30 + i as i64).await;
        eventually("a grant after the reconnect", || async {
            !messages_to(&fake, user).is_empty()
        })
        .await;
    }
    worker.stop().await;
    // Shut down: the listening connection is closed with the loop.
    eventually("the listener closes", || async {
        listeners(&app).await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_effects_are_claimed_before_older_messages() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_002_503;
    let c = channel(&app, chat, json!({})).await;
    // The channel's join link is stored: the grant is one sendMessage.
    app.db()
        .await
        .execute(
            "UPDATE channels SET invite_link = 'https://t.me/+stored' WHERE id = $1",
            &[&(c as i32)],
        )
        .await
        .unwrap();
    // Forty messages due for an hour, and older than the grant by id.
    app.db()
        .await
        .execute(
            "INSERT INTO effects (kind, chat_id, user_id, payload, next_attempt_at)
             SELECT 'bot_message', u, u, '{\"text\": \"an older message\"}',
                    now() - interval '1 hour'
             FROM generate_series(7250200, 7250239) AS u",
            &[],
        )
        .await
        .unwrap();
    let s = subscriber(&app, 7_250_300).await;
    grant(&app, s, c, 30).await;
    let one = Worker::new(
        app.state.clone(),
        Options {
            concurrency: 1,
            max_effects: 1,
            ..Options::default()
        },
    );
    let report = one.run(false, &|| false).await.unwrap();
    assert_eq!(report.done, 1, "{report:?}");
    let calls = fake.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].params["chat_id"].as_i64(), Some(7_250_300));
    assert_eq!(
        app.count("effects WHERE kind = 'grant' AND status = 'done'")
            .await,
        1
    );
    assert_eq!(
        app.count("effects WHERE kind = 'bot_message' AND status = 'pending'")
            .await,
        40
    );
    // Then the messages, oldest first.
    let report = Worker::new(
        app.state.clone(),
        Options {
            concurrency: 1,
            max_effects: 1,
            ..Options::default()
        },
    )
    .run(false, &|| false)
    .await
    .unwrap();
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(fake.calls()[1].params["chat_id"].as_i64(), Some(7_250_200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_woken_workers_perform_each_effect_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = channel(&app, -1_001_000_002_504, json!({})).await;
    fake.set_delay(Duration::from_millis(5));
    // Two workers (as two processes would run), each with its own listening connection.
    let a = Loop::start(&app);
    let b = Loop::start(&app);
    eventually("both listen", || async { listeners(&app).await.len() == 2 }).await;
    let users: Vec<i64> = (7_250_400..7_250_440).collect();
    let grants = users.iter().map(|&user| {
        let app = &app;
        async move {
            let s = subscriber(app, user).await;
            grant(app, s, c, 30).await;
        }
    });
    futures::future::join_all(grants).await;
    eventually("every grant", || async {
        app.count("effects WHERE kind = 'grant' AND status = 'done'")
            .await
            == 40
    })
    .await;
    a.stop().await;
    b.stop().await;
    for user in users {
        assert_eq!(messages_to(&fake, user).len(), 1, "user {user}");
    }
    assert_eq!(fake.overlaps(), 0, "an effect was performed twice at once");
    assert_eq!(app.count("effects WHERE status <> 'done'").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_grants_in_a_channel_without_a_link_make_one_link() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_002_505;
    let c = channel(&app, chat, json!({})).await;
    let users: Vec<i64> = (7_250_500..7_250_512).collect();
    for &user in &users {
        let s = subscriber(&app, user).await;
        grant(&app, s, c, 30).await;
    }
    // Slow answers, so the lanes overlap while the first makes the link.
    fake.set_delay(Duration::from_millis(50));
    let report = Worker::new(app.state.clone(), Options::default())
        .run(false, &|| false)
        .await
        .unwrap();
    assert_eq!(report.done, 12, "{report:?}");
    assert_eq!(fake.calls_of("createChatInviteLink").len(), 1);
    let links: Vec<String> = users
        .iter()
        .map(|&u| {
            let m = messages_to(&fake, u);
            assert_eq!(m.len(), 1, "user {u}");
            m[0].params["text"].as_str().unwrap().to_string()
        })
        .collect();
    let stored = crate::access::membership_changes::invite_link(&app, c)
        .await
        .expect("the channel's join link is stored");
    for text in links {
        assert!(text.contains(&stored), "{text} lacks {stored}");
    }
}

/// A listener of this test's database with a wake-up of its own, as another process's worker
/// has; its first wake-up (the pass after connecting) is awaited.
async fn listener(app: &TestApp, shutdown: &ShutdownSignal) -> Arc<tokio::sync::Notify> {
    let wake = Arc::new(tokio::sync::Notify::new());
    let target = listen::Target {
        database_url: app.state.config.database_url.clone(),
        ca_cert: None,
    };
    tokio::spawn(listen::listen(target, wake.clone(), shutdown.clone()));
    woken(&wake, "the pass after connecting").await;
    wake
}

/// Waits for `wake` (at most a minute, then fails).
async fn woken(wake: &tokio::sync::Notify, what: &str) {
    tokio::time::timeout(Duration::from_secs(60), wake.notified())
        .await
        .unwrap_or_else(|_| panic!("{what}: no wake-up within a minute"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_from_another_process_wakes_the_listener() {
    let app = TestApp::spawn().await;
    let shutdown = ShutdownSignal::new();
    let wake = listener(&app, &shutdown).await;
    // Another process's commit, told on the channel (its payload is not this listener's).
    app.db()
        .await
        .execute(
            "SELECT pg_notify($1, 'another process')",
            &[&listen::CHANNEL],
        )
        .await
        .unwrap();
    woken(&wake, "the notification").await;
    shutdown.trigger();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_here_is_told_to_the_workers_of_other_processes() {
    let app = TestApp::spawn().await;
    let shutdown = ShutdownSignal::new();
    // Two listeners, as two processes have: each forwards this process's commits, and each
    // hears the other's notification (never its own).
    let a = listener(&app, &shutdown).await;
    let b = listener(&app, &shutdown).await;
    let c = channel(&app, -1_001_000_002_506, json!({})).await;
    let s = subscriber(&app, 7_250_600).await;
    grant(&app, s, c, 30).await;
    woken(&a, "listener a").await;
    woken(&b, "listener b").await;
    shutdown.trigger();
}
