//! The worker's configuration: no token leaves effects queued, a dry run logs instead of calling,
//! and the bot token never reaches logs, errors or the API. Set-up helpers are in
//! [`crate::support::effects`].

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use serde_json::{Value, json};
use subgate::app::worker::RunReport;

use crate::support::{
    effects::*,
    fake_bot::{FakeBot, Reply, TOKEN, TOKEN_SECRET},
    helpers::TestApp,
};

// ---- configuration: no token, dry run ----

#[tokio::test]
async fn without_a_token_effects_stay_queued() {
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
    })
    .await;
    let s = subscriber(&app, 6501).await;
    let c = channel(&app, -1_001_000_000_701, json!({})).await;
    grant(&app, s, c, 30).await;
    assert_eq!(run(&app).await, RunReport::default());
    assert_eq!(effects_of(&app, "grant").await[0]["status"], "pending");
    assert!(fake.calls().is_empty());
    // Join requests keep being answered in the webhook reply (the only way left).
    let r = app
        .post_telegram_update(join_request_update(-1_001_000_000_701, 6501, 1))
        .await;
    assert_eq!(r.expect(200)["method"], "approveChatJoinRequest");
}

#[tokio::test]
async fn dry_run_logs_instead_of_calling_and_marks_done() {
    let fake = FakeBot::start().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(move |env| {
        env.insert("TELEGRAM_API_URL".into(), url);
        env.insert("TELEGRAM_DRY_RUN".into(), "true".into());
    })
    .await;
    let s = subscriber(&app, 6601).await;
    let c = channel(&app, -1_001_000_000_702, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    let link = crate::access::membership_changes::invite_link(&app, c).await;
    assert_eq!(link, None, "a dry-run link is never stored");
    patch_membership(&app, m, json!({"status": "expired"})).await;
    assert_eq!(
        run(&app).await.done,
        2,
        "the revoke, then the access-ended notice"
    );
    assert!(
        fake.calls().is_empty(),
        "dry run called Telegram: {:?}",
        fake.methods()
    );
    assert_eq!(app.count("effects WHERE status = 'done'").await, 3);
}

// ---- the bot token never leaks ----

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Every log line (all levels, all crates) written on this thread while the test runs — the
/// runtime is current-thread, so that is everything the app and its HTTP client log.
#[tokio::test(flavor = "current_thread")]
async fn the_bot_token_never_reaches_logs_errors_or_the_api() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Another test's thread may have been registering a callsite at the moment the subscriber
    // above was registered, caching "nobody listens" for it; recompute every cached interest.
    let relisten = tracing::callsite::rebuild_interest_cache;
    relisten();

    // 1. Nothing listens at the API URL: transport errors.
    let dead = TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_API_URL".into(), "http://127.0.0.1:1".into());
        env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    })
    .await;
    let s = subscriber_id(&dead, 6901).await;
    let c = channel(&dead, -1_001_000_000_901, json!({})).await;
    grant(&dead, s, c, 30).await;
    relisten();
    // The probe fails too: an outage, put back without counting.
    assert_eq!(run(&dead).await.outage, 1);
    // 2. A fake that answers 500, then hangs (timeouts), then refuses.
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let s = subscriber_id(&app, 6902).await;
    let c = channel(&app, -1_001_000_000_902, json!({})).await;
    grant(&app, s, c, 30).await;
    fake.script("sendMessage", Reply::ServerError);
    fake.script("sendMessage", Reply::Hang);
    fake.script(
        "sendMessage",
        Reply::Error(403, "Forbidden: bot was blocked by the user".into()),
    );
    let mut errors = Vec::new();
    for _ in 0..3 {
        relisten();
        worker(&app, 300).run(false, &|| false).await.unwrap();
        let g = &effects_of(&app, "grant").await[0];
        errors.push(g["last_error"].as_str().unwrap_or_default().to_string());
        make_due(&app).await;
    }
    // 3. An invoice link whose call fails.
    let stars = stars_channel(&app, -1_001_000_000_903).await;
    let order = app.create_order(s, stars).await;
    fake.script("createInvoiceLink", Reply::ServerError);
    let r = app
        .post(
            &format!("/api/orders/{}/invoice-link", order["id"]),
            Value::Null,
        )
        .await;
    assert_eq!(r.status.as_u16(), 503);
    let body = String::from_utf8_lossy(&r.bytes).to_string();
    assert!(!body.contains(TOKEN_SECRET), "{body}");

    for a in [&dead, &app] {
        for e in a.get("/api/effects").await.expect(200)["items"]
            .as_array()
            .unwrap()
        {
            if let Some(err) = e["last_error"].as_str() {
                errors.push(err.to_string());
            }
        }
    }
    assert!(errors.len() >= 4, "errors were recorded: {errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("unreachable")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.contains("no answer")), "{errors:?}");
    for e in &errors {
        assert!(
            !e.contains(TOKEN_SECRET) && !e.contains(TOKEN),
            "token in last_error: {e}"
        );
    }
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).to_string();
    assert!(
        text.contains("effect attempted"),
        "the capture works: {} bytes",
        text.len()
    );
    assert!(text.contains("unreachable"), "transport errors were logged");
    assert!(!text.contains(TOKEN_SECRET), "the token reached a log line");
}
