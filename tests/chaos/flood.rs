//! The flood: signed door-1 deliveries, each sent again byte for byte until it is answered
//! 200, as a gateway's delivery worker does, and the tally of what every answer was.

use super::*;

/// One delivery, signed once: every retry sends these same bytes, as a gateway does.
pub(super) struct Delivery {
    pub(super) id: String,
    pub(super) timestamp: String,
    pub(super) signature: String,
    pub(super) body: String,
}

pub(super) fn delivery(key: &WebhookKey, n: i64) -> Delivery {
    let body = format!(
        r#"{{"type":"payment.succeeded","gateway":"{GATEWAY}","payment_id":"pay-{n}","order_reference":"{n}","amount_minor":{AMOUNT_MINOR},"currency":"UAH","paid_at":"{}"}}"#,
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let id = format!("msg-{n}");
    let timestamp = chrono::Utc::now().timestamp();
    let signature = sign(key, &id, timestamp, body.as_bytes());
    Delivery {
        id,
        timestamp: timestamp.to_string(),
        signature,
        body,
    }
}

/// What the flood saw, shared by the workers.
#[derive(Default)]
pub(super) struct Tally {
    /// Payment `n` → attempts until its 200, and whether the 200 said `duplicate: true` (its
    /// first commit's acknowledgement was lost).
    pub(super) acked: BTreeMap<i64, (u32, bool)>,
    /// Payments given up on (no 200 within the bound).
    pub(super) unacked: Vec<i64>,
    /// Answers by status (0: no answer: a refused or broken connection, a timeout).
    pub(super) statuses: BTreeMap<u16, u64>,
    /// Answers that are neither 200 nor 503 (with `Retry-After`), the first few in full.
    pub(super) wrong: Vec<String>,
    pub(super) wrong_count: u64,
}

pub(super) struct Flood {
    pub(super) addr: String,
    pub(super) key: WebhookKey,
    pub(super) next: AtomicI64,
    pub(super) total: i64,
    /// Set when no new payment is to be started.
    pub(super) stop: AtomicBool,
    /// When the primary was killed, and the first 200 to a request sent after that.
    pub(super) killed_at: Mutex<Option<Instant>>,
    pub(super) first_ok_after_kill: Mutex<Option<Instant>>,
    pub(super) tally: Mutex<Tally>,
    /// How long a delivery is retried before it counts as never acknowledged.
    pub(super) bound: Duration,
}

pub(super) async fn worker(flood: Arc<Flood>) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client");
    let url = format!("http://{}/api/webhook/payment", flood.addr);
    while !flood.stop.load(Ordering::SeqCst) {
        let n = flood.next.fetch_add(1, Ordering::SeqCst);
        if n > flood.total {
            break;
        }
        let d = delivery(&flood.key, n);
        let first_sent = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let sent = Instant::now();
            let answer = client
                .post(&url)
                .header("content-type", "application/json")
                .header("webhook-id", &d.id)
                .header("webhook-timestamp", &d.timestamp)
                .header("webhook-signature", &d.signature)
                .body(d.body.clone())
                .send()
                .await;
            let (status, retry_after, body) = match answer {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let retry_after = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok());
                    (status, retry_after, r.text().await.unwrap_or_default())
                }
                Err(_) => (0, None, String::new()),
            };
            {
                let mut t = flood.tally.lock().unwrap();
                *t.statuses.entry(status).or_default() += 1;
                let expected =
                    status == 200 || status == 0 || (status == 503 && retry_after.is_some());
                if !expected {
                    t.wrong_count += 1;
                    if t.wrong.len() < 5 {
                        t.wrong
                            .push(format!("payment {n}: status {status}: {body}"));
                    }
                }
            }
            if status == 200 {
                let duplicate = body.contains(r#""duplicate":true"#);
                if !duplicate && !body.contains(r#""duplicate":false"#) {
                    let mut t = flood.tally.lock().unwrap();
                    t.wrong_count += 1;
                    t.wrong
                        .push(format!("payment {n}: a 200 without duplicate: {body}"));
                }
                let killed_at = *flood.killed_at.lock().unwrap();
                if killed_at.is_some_and(|k| sent >= k) {
                    flood
                        .first_ok_after_kill
                        .lock()
                        .unwrap()
                        .get_or_insert_with(Instant::now);
                }
                flood
                    .tally
                    .lock()
                    .unwrap()
                    .acked
                    .insert(n, (attempts, duplicate));
                break;
            }
            if first_sent.elapsed() > flood.bound {
                flood.tally.lock().unwrap().unacked.push(n);
                break;
            }
            // A gateway's redelivery: after Retry-After, here capped at a fraction of a second
            // so the recovery time is seen at that resolution.
            let pause = retry_after.map_or(200, |s| (s * 1000).min(200));
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
}
