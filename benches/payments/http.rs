//! The load generator: HTTP/1.1 keep-alive connections (hyper's client connection, one request
//! in flight per connection, as a gateway's delivery worker — or Telegram's webhook — sends
//! them) replaying requests that were made (and signed) before the clock started, so making them
//! is not measured. Each connection is a task
//! on the benchmark's single-threaded runtime: the generator takes one core at most and leaves
//! the rest to the server and PostgreSQL, like pgbench's single thread does for the references.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::body::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, client::conn::http1::SendRequest};
use hyper_util::rt::TokioIo;
use subgate::payments::gateways::standard_webhooks::{WebhookKey, sign};
use tokio::net::TcpStream;

/// The gateway name every benchmark payment uses (door 1 accepts any that is not reserved).
pub const GATEWAY: &str = "bench";
/// The price of every benchmark channel, and so of every order.
pub const AMOUNT_MINOR: i64 = 19_900;

/// One request made before the clock starts: its headers (door 1's Standard Webhooks
/// signature, Telegram's secret token) and the exact body bytes.
pub struct Signed {
    headers: Vec<(&'static str, String)>,
    body: Bytes,
}

impl Signed {
    /// A request of `body` with `headers` (besides `host` and `content-type: application/json`).
    pub fn new(headers: Vec<(&'static str, String)>, body: String) -> Signed {
        Signed {
            headers,
            body: Bytes::from(body),
        }
    }
}

/// The `payment.succeeded` body paying order `n` (reference `n`) as payment `pay-{n}`.
pub fn payment_body(n: i64) -> String {
    format!(
        r#"{{"type":"payment.succeeded","gateway":"{GATEWAY}","payment_id":"pay-{n}","order_reference":"{n}","amount_minor":{AMOUNT_MINOR},"currency":"UAH","paid_at":"{}"}}"#,
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

/// Signs one delivery of `body` now. A repeat of this value is a gateway's retry of one
/// delivery: same id, timestamp, signature and body (valid for the door's 300 s tolerance).
pub fn sign_delivery(key: &WebhookKey, msg_id: String, body: String) -> Signed {
    let timestamp = chrono::Utc::now().timestamp();
    let signature = sign(key, &msg_id, timestamp, body.as_bytes());
    Signed::new(
        vec![
            ("webhook-id", msg_id),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature),
        ],
        body,
    )
}

/// Signs one delivery for each order in `orders` (`pay-{n}` for order `n`).
pub fn sign_new_payments(key: &WebhookKey, orders: std::ops::Range<i64>) -> Vec<Signed> {
    orders
        .map(|n| sign_delivery(key, format!("msg-{n}"), payment_body(n)))
        .collect()
}

/// What one load run measured.
pub struct Load {
    pub connections: usize,
    /// Requests answered 200 with the expected body.
    pub ok: u64,
    /// Requests that failed (transport error, other status, unexpected body).
    pub errors: u64,
    pub first_error: Option<String>,
    /// From the start of the run to the end of its last request.
    pub elapsed: Duration,
    /// Latency of each successful request, in microseconds, sorted.
    pub latencies_us: Vec<u32>,
    /// The run ran out of pre-signed requests before its time was up.
    pub exhausted: bool,
}

impl Load {
    /// A run of `connections` that has measured nothing yet.
    pub fn empty(connections: usize) -> Load {
        Load {
            connections,
            ok: 0,
            errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
            latencies_us: Vec::new(),
            exhausted: false,
        }
    }

    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }
}

/// How a run picks its requests.
#[derive(Clone, Copy)]
pub enum Pick {
    /// Each request once, in order, shared by all connections; the run ends early when all
    /// were sent.
    EachOnce,
    /// The same requests over and over (re-deliveries).
    Cycle,
}

/// Sends `requests` to `path` over `connections` keep-alive connections for `duration`.
/// A request succeeds when it is answered 200 and its body contains `expect`.
pub async fn run(
    addr: SocketAddr,
    path: &'static str,
    connections: usize,
    duration: Duration,
    requests: Arc<Vec<Signed>>,
    pick: Pick,
    expect: &'static str,
) -> Load {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (next, requests) = (next.clone(), requests.clone());
            tokio::spawn(worker(addr, path, next, requests, pick, deadline, expect))
        })
        .collect();
    let mut load = Load::empty(connections);
    for w in workers {
        let r = w.await.expect("a load worker panicked");
        load.ok += r.latencies_us.len() as u64;
        load.errors += r.errors;
        load.exhausted |= r.exhausted;
        if load.first_error.is_none() {
            load.first_error = r.first_error;
        }
        load.latencies_us.extend(r.latencies_us);
    }
    load.elapsed = started.elapsed();
    load.latencies_us.sort_unstable();
    load
}

struct WorkerResult {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
    exhausted: bool,
}

async fn worker(
    addr: SocketAddr,
    path: &'static str,
    next: Arc<AtomicUsize>,
    requests: Arc<Vec<Signed>>,
    pick: Pick,
    deadline: Instant,
    expect: &'static str,
) -> WorkerResult {
    let mut r = WorkerResult {
        latencies_us: Vec::with_capacity(16_384),
        errors: 0,
        first_error: None,
        exhausted: false,
    };
    let host = addr.to_string();
    let mut sender: Option<SendRequest<Full<Bytes>>> = None;
    let expect = expect.as_bytes();
    while Instant::now() < deadline {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let signed = match pick {
            Pick::EachOnce if i >= requests.len() => {
                r.exhausted = true;
                break;
            }
            Pick::EachOnce => &requests[i],
            Pick::Cycle => &requests[i % requests.len()],
        };
        let mut request = Request::post(path)
            .header("host", &host)
            .header("content-type", "application/json");
        for (name, value) in &signed.headers {
            request = request.header(*name, value);
        }
        let request = request
            .body(Full::new(signed.body.clone()))
            .expect("a valid request");
        let t = Instant::now();
        let outcome = async {
            if sender.is_none() {
                sender = Some(connect(addr).await?);
            }
            let s = sender.as_mut().expect("connected above");
            s.ready().await.map_err(|e| e.to_string())?;
            let response = s.send_request(request).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if status == 200 && contains(&body, expect) {
                Ok(())
            } else {
                Err(format!(
                    "status {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                ))
            }
        }
        .await;
        match outcome {
            Ok(()) => r
                .latencies_us
                .push(t.elapsed().as_micros().min(u32::MAX as u128) as u32),
            Err(e) => {
                r.errors += 1;
                r.first_error.get_or_insert(e);
                // A broken connection is replaced; an error answer leaves it usable, but a fresh
                // one is harmless.
                sender = None;
            }
        }
    }
    r
}

async fn connect<B>(addr: SocketAddr) -> Result<SendRequest<B>, String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// `GET path` on a new connection: the status, or `None` when nothing answered.
pub async fn get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut sender = connect::<Empty<Bytes>>(addr).await.ok()?;
    let request = Request::get(path)
        .header("host", addr.to_string())
        .body(Empty::new())
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await;
    Some(status)
}

/// Opens `n` keep-alive connections, each having made one `GET /healthz`, and returns them
/// open (idle) with the number of failures. Dropping the result closes them.
pub async fn open_idle(addr: SocketAddr, n: usize) -> (Vec<SendRequest<Empty<Bytes>>>, usize) {
    let mut open = Vec::with_capacity(n);
    let mut failed = 0;
    let host = addr.to_string();
    for _ in 0..n {
        let Ok(mut sender) = connect::<Empty<Bytes>>(addr).await else {
            failed += 1;
            continue;
        };
        let request = Request::get("/healthz")
            .header("host", &host)
            .body(Empty::new())
            .expect("a valid request");
        match sender.send_request(request).await {
            Ok(response) if response.status() == 200 => {
                let _ = response.into_body().collect().await;
                open.push(sender);
            }
            _ => failed += 1,
        }
    }
    (open, failed)
}
