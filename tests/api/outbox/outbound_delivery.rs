//! Outbound webhooks as the deliverer sends them: one endpoint's slow receiver never delays
//! another's deliveries (real receivers, one held open by the test), and the proxy variables of
//! the environment are ignored (`subgate serve` run as a child process with them set).

use std::{
    future::Future,
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Router, extract::State, http::HeaderMap, routing::post};
use subgate::{common::shutdown::ShutdownSignal, outbox::outbound};
use tokio::{io::AsyncReadExt, io::AsyncWriteExt, sync::Semaphore};

use crate::{
    outbox::outbound::{Receiver, app, endpoint, paid_order},
    support::helpers::{JWT_SECRET, TestApp, url_for},
};

/// Requests open at once, and the most there were.
#[derive(Default)]
struct Open {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Open {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

struct HeldState {
    /// One permit per request that may be answered.
    gate: Semaphore,
    /// The `webhook-id` of every request that arrived.
    ids: Mutex<Vec<String>>,
    own: Open,
    all: Arc<Open>,
}

/// A receiver that answers 200 only when the test lets it (or at once, when not `held`).
struct Held {
    url: String,
    state: Arc<HeldState>,
}

impl Held {
    /// Counts its open requests and adds them to `all`, which receivers may share.
    async fn start(held: bool, all: &Arc<Open>) -> Held {
        let state = Arc::new(HeldState {
            gate: Semaphore::new(if held { 0 } else { 1_000_000 }),
            ids: Mutex::new(Vec::new()),
            own: Open::default(),
            all: all.clone(),
        });
        let app = Router::new()
            .route("/hook", post(hold))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Held {
            url: format!("http://{addr}/hook"),
            state,
        }
    }

    fn arrived(&self) -> usize {
        self.state.ids.lock().unwrap().len()
    }

    fn open_now(&self) -> usize {
        self.state.own.now.load(Ordering::SeqCst)
    }

    fn max_open(&self) -> usize {
        self.state.own.max()
    }

    /// Answers every request held and every later one.
    fn release(&self) {
        self.state.gate.add_permits(1_000_000);
    }

    /// The distinct `webhook-id`s received.
    fn distinct_ids(&self) -> usize {
        let mut ids = self.state.ids.lock().unwrap().clone();
        ids.sort();
        ids.dedup();
        ids.len()
    }
}

async fn hold(State(state): State<Arc<HeldState>>, headers: HeaderMap) -> &'static str {
    let id = headers["webhook-id"].to_str().unwrap().to_string();
    state.own.enter();
    state.all.enter();
    state.ids.lock().unwrap().push(id);
    state.gate.acquire().await.unwrap().forget();
    state.own.leave();
    state.all.leave();
    "ok"
}

/// Waits until `done` (checked every 20 ms); fails after a minute, naming `what`.
async fn wait_for<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(attempts recorded, deliveries delivered)` of endpoint `endpoint_id`.
async fn progress(app: &TestApp, endpoint_id: i64) -> (i64, i64) {
    let row = app
        .db()
        .await
        .query_one(
            "SELECT (SELECT count(*) FROM webhook_attempts a
                     JOIN webhook_deliveries d ON d.id = a.delivery_id
                     WHERE d.endpoint_id = $1) AS attempts,
                    (SELECT count(*) FROM webhook_deliveries
                     WHERE endpoint_id = $1 AND status = 'delivered') AS delivered",
            &[&endpoint_id],
        )
        .await
        .unwrap();
    (row.get("attempts"), row.get("delivered"))
}

const EVENTS: i64 = 20;

/// `EVENTS` paid orders: one `payment.applied` event each, for every endpoint that wants it.
async fn pay_orders(app: &TestApp) {
    for i in 0..EVENTS {
        paid_order(app, 9500 + i, -100_950_000 - i).await;
    }
}

/// The deliverer's options with a timeout far beyond any test: a held request stays open until
/// the test releases it.
fn patient(concurrency: usize, per_endpoint: usize) -> outbound::Options {
    outbound::Options {
        concurrency,
        per_endpoint,
        timeout: Duration::from_secs(600),
        poll: Duration::from_millis(50),
    }
}

/// Runs a deliverer (as one process would) until `shutdown`.
fn deliverer(
    app: &TestApp,
    options: outbound::Options,
    shutdown: &ShutdownSignal,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(outbound::run(
        app.state.db.clone(),
        true,
        options,
        shutdown.clone(),
    ))
}

/// Two deliverers (two processes) share one slow and one fast endpoint: every delivery to the
/// fast one is sent and recorded while the slow receiver holds its first requests open, the
/// slow one never has more than its per-endpoint limit in flight over both, and once released
/// everything is delivered exactly once.
#[tokio::test]
async fn a_slow_endpoint_never_delays_the_deliveries_of_another() {
    let app = app().await;
    let all = Arc::new(Open::default());
    let slow = Held::start(true, &all).await;
    let fast = Held::start(false, &all).await;
    let (slow_id, _) = endpoint(&app, &slow.url, &["payment.applied"]).await;
    let (fast_id, _) = endpoint(&app, &fast.url, &["payment.applied"]).await;
    pay_orders(&app).await;
    assert_eq!(app.count("webhook_deliveries").await, 2 * EVENTS);

    let limit = outbound::Options::default().per_endpoint;
    let shutdown = ShutdownSignal::new();
    let deliverers = [
        deliverer(&app, patient(16, limit), &shutdown),
        deliverer(&app, patient(16, limit), &shutdown),
    ];
    wait_for("every delivery to the fast endpoint recorded", || async {
        progress(&app, fast_id).await.1 == EVENTS
    })
    .await;
    wait_for("the slow endpoint's first requests", || async {
        slow.arrived() >= limit
    })
    .await;
    // All of it happened while the slow receiver held its first requests open: none of them
    // has ended, and none was given up on.
    assert_eq!(
        progress(&app, slow_id).await,
        (0, 0),
        "no attempt to the slow endpoint ended before the fast one had everything"
    );
    assert_eq!(
        slow.arrived(),
        limit,
        "the per-endpoint limit, over both deliverers"
    );
    assert_eq!(slow.open_now(), limit, "all still held");
    assert_eq!(progress(&app, fast_id).await, (EVENTS, EVENTS), "each once");

    slow.release();
    wait_for("every delivery to the slow endpoint recorded", || async {
        progress(&app, slow_id).await.1 == EVENTS
    })
    .await;
    shutdown.trigger();
    for d in deliverers {
        d.await.unwrap();
    }
    assert_eq!(progress(&app, slow_id).await, (EVENTS, EVENTS));
    assert_eq!(
        slow.max_open(),
        limit,
        "never more than the per-endpoint limit in flight, over both deliverers"
    );
    assert_eq!(fast.distinct_ids(), EVENTS as usize);
    assert_eq!(slow.distinct_ids(), EVENTS as usize);
    assert_eq!(fast.arrived() + slow.arrived(), 2 * EVENTS as usize);
    assert_eq!(
        app.count("webhook_deliveries WHERE leased_until IS NOT NULL")
            .await,
        0,
        "every lease ended with its record"
    );
}

/// Many slow endpoints cannot take more than the process's slots: three endpoints, each allowed
/// two deliveries in flight, share three slots.
#[tokio::test]
async fn slow_endpoints_together_stay_within_the_global_cap() {
    let app = app().await;
    let all = Arc::new(Open::default());
    let mut receivers = Vec::new();
    for _ in 0..3 {
        let r = Held::start(true, &all).await;
        endpoint(&app, &r.url, &["payment.applied"]).await;
        receivers.push(r);
    }
    for i in 0..2 {
        paid_order(&app, 9700 + i, -100_970_000 - i).await;
    }
    let shutdown = ShutdownSignal::new();
    let d = deliverer(&app, patient(3, 2), &shutdown);
    wait_for("three requests open", || async {
        all.now.load(Ordering::SeqCst) == 3
    })
    .await;
    // A dozen more polls: still three.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(all.max(), 3, "never more than the three slots");
    assert_eq!(app.count("webhook_attempts").await, 0);

    for r in &receivers {
        r.release();
    }
    wait_for("all six delivered", || async {
        app.count("webhook_deliveries WHERE status = 'delivered'")
            .await
            == 6
    })
    .await;
    shutdown.trigger();
    d.await.unwrap();
    assert_eq!(all.max(), 3);
    for r in &receivers {
        assert!(r.max_open() <= 2, "per endpoint: {}", r.max_open());
        assert_eq!(r.distinct_ids(), 2);
    }
    assert_eq!(app.count("webhook_attempts").await, 6, "each once");
}

/// A proxy that counts the connections it gets and answers each with 502.
struct FakeProxy {
    url: String,
    connections: Arc<AtomicUsize>,
}

impl FakeProxy {
    async fn start() -> FakeProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = socket.read(&mut buf).await;
                    let _ = socket
                        .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                        .await;
                });
            }
        });
        FakeProxy {
            url: format!("http://{addr}"),
            connections,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// `subgate serve` with every proxy variable pointing at a proxy: the delivery goes straight to
/// the receiver (the address it checked), and the proxy is never contacted.
#[tokio::test]
async fn deliveries_ignore_the_proxy_variables() {
    let app = app().await;
    let receiver = Receiver::start().await;
    let proxy = FakeProxy::start().await;
    endpoint(&app, &receiver.url, &["payment.applied"]).await;
    paid_order(&app, 9601, -100_960_001).await;
    let bind = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_subgate"));
    serve
        .arg("serve")
        .env_clear()
        .env("DATABASE_URL", url_for(&app.db_name))
        .env("JWT_SECRET", JWT_SECRET)
        .env("BCRYPT_COST", "4")
        .env("BIND_ADDR", bind.to_string())
        .env("OUTBOUND_ALLOW_PRIVATE", "true");
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        serve.env(var, &proxy.url);
    }
    let mut child = serve
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the subgate binary runs");
    wait_for("the delivery's first attempt", || async {
        app.count("webhook_attempts").await > 0
    })
    .await;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;

    assert_eq!(proxy.connections(), 0, "the proxy was not used");
    assert_eq!(receiver.got().len(), 1, "the receiver got the event");
    assert_eq!(
        app.count("webhook_deliveries WHERE status = 'delivered'")
            .await,
        1
    );
}
