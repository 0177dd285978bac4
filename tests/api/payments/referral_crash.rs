//! The commission ledger's proof across real crashes (API.md "Referrals and affiliates"): 1,000
//! referred buyers pay at once through the signed webhook (door 1) and WayForPay (door 2), every
//! delivery sent three times together, and the `subgate` binary is killed with SIGKILL in the
//! middle and started again on the same database, as a gateway's redeliveries would find it.
//! Every payment is then applied once and earns exactly one line of the right percent, rounded
//! down. Two affiliates are paid out; a sixth of the buyers are refunded at the gateway (each
//! refund reported three times at once, with another SIGKILL in the middle): a line not paid is
//! `reversed`, a paid one gets exactly one negative `reversal` of its amount, and nothing is
//! reversed twice. Last, the revenue statistics and the ledger's sums per affiliate, currency
//! and status equal, to the minor unit, what the test computes from the amounts it sent.
//!
//! The program has no hold (`hold_days = 0`), so every line is payable at once and a payout can
//! take it before the refunds come. Door 1 has no refund event, so only door-2 payments are
//! refunded.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{StreamExt, future::join_all, stream};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::referrals::{affiliate, program_on};
use crate::{
    outbox::convergence_harness::{Server, tail},
    support::helpers::{
        TestApp, WEBHOOK_SECRET, assert_wayforpay_accept, id, payment_event, signed_headers,
        test_env, url_for, wayforpay_callback,
    },
};

const BUYERS: usize = 1_000;
const FIRST_USER: i64 = 39_000_000;
const AFFILIATES: usize = 5;
/// The first two affiliates are paid out before the refunds.
const PAID_OUT: usize = 2;
/// Each delivery is sent this many times at once.
const COPIES: usize = 3;
/// Payments delivered at a time (each as `COPIES` requests in flight together).
const PARALLEL: usize = 16;
/// The channels' prices: minor units, currency, and the amount as WayForPay writes it.
const PRICES: [(i64, &str, &str); 4] = [
    (19_900, "UAH", "199"),
    (12_345, "UAH", "123.45"),
    (9_999, "UAH", "99.99"),
    (4_999, "USD", "49.99"),
];
const FIRST_PERCENT: i64 = 20;
const RENEWAL_PERCENT: i64 = 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Door {
    /// Door 1, the Standard Webhooks `payment.succeeded` (gateway `acme`).
    Signed,
    /// Door 2, WayForPay's `serviceUrl` callback.
    WayForPay,
}

/// One order of a referred buyer and what happens to it.
#[derive(Clone, Debug)]
struct Pay {
    buyer: usize,
    order_id: i64,
    reference: String,
    amount_minor: i64,
    currency: &'static str,
    literal: &'static str,
    door: Door,
    affiliate: i32,
    /// The buyer pays two orders of the channel: one first purchase, one renewal.
    twice: bool,
    /// The affiliate's lines are paid out before the refunds.
    paid_out: bool,
    /// Refunded at the gateway (door 2 only).
    refunded: bool,
}

impl Pay {
    fn gateway(&self) -> &'static str {
        match self.door {
            Door::Signed => "acme",
            Door::WayForPay => "wayforpay",
        }
    }

    fn external_id(&self) -> String {
        match self.door {
            Door::Signed => format!("proof_{}", self.order_id),
            Door::WayForPay => self.reference.clone(),
        }
    }
}

/// A gateway delivering to whichever server runs now: again while the server cannot be
/// reached (killed, starting) or answers 503, until it answers; any other answer but 200 fails
/// the test.
#[derive(Clone)]
struct Gateway {
    http: reqwest::Client,
    base: Arc<Mutex<String>>,
    answered: Arc<AtomicUsize>,
    retried: Arc<AtomicUsize>,
}

impl Gateway {
    async fn deliver(
        &self,
        path: &str,
        make: impl Fn() -> (String, Vec<(&'static str, String)>),
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (body, headers) = make();
            let url = format!("{}{path}", self.base.lock().unwrap());
            let mut req = self
                .http
                .post(url)
                .header("content-type", "application/json")
                .body(body);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            if let Ok(r) = req.send().await {
                let status = r.status().as_u16();
                if let Ok(text) = r.text().await {
                    match status {
                        200 => {
                            self.answered.fetch_add(1, Ordering::SeqCst);
                            return serde_json::from_str(&text).unwrap();
                        }
                        503 => {}
                        _ => panic!("{path}: {status} {text}"),
                    }
                }
            }
            self.retried.fetch_add(1, Ordering::SeqCst);
            assert!(Instant::now() < deadline, "{path}: never answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One delivery of `p`'s payment through its door, answered as applied.
    async fn pay(&self, p: &Pay) {
        match p.door {
            Door::Signed => {
                let external_id = p.external_id();
                let v = self
                    .deliver("/api/webhook/payment", || {
                        let body =
                            payment_event(&external_id, &p.reference, p.amount_minor, p.currency)
                                .to_string();
                        let msg = format!("msg_{external_id}");
                        let now = chrono::Utc::now().timestamp();
                        let headers = signed_headers(WEBHOOK_SECRET, &msg, now, &body);
                        (body, headers)
                    })
                    .await;
                assert_eq!(v["payment"]["outcome"], "applied", "{v}");
            }
            Door::WayForPay => self.wayforpay(p, "Approved").await,
        }
    }

    /// One WayForPay callback of `p` with `status`, acknowledged.
    async fn wayforpay(&self, p: &Pay, status: &str) {
        let v = self
            .deliver("/api/webhook/wayforpay", || {
                let body = wayforpay_callback(&p.reference, p.literal, p.currency, status);
                (body, Vec::new())
            })
            .await;
        assert_wayforpay_accept(&v, &p.reference);
    }
}

/// Delivers `status` (`Approved`: each payment through its door; `Refunded`: a WayForPay
/// refund) for every one of `pays`, `COPIES` times at once, `PARALLEL` payments at a time; once
/// `kill_at` deliveries were answered the server is killed with SIGKILL and started again on
/// the same database. Returns when every delivery was answered 200.
async fn deliver_across_a_kill(
    server: &mut Server,
    gateway: &Gateway,
    pays: &[Pay],
    status: &'static str,
    kill_at: usize,
) {
    let total = pays.len() * COPIES;
    assert!(kill_at < total);
    gateway.answered.store(0, Ordering::SeqCst);
    gateway.retried.store(0, Ordering::SeqCst);
    let slots = Arc::new(Semaphore::new(PARALLEL));
    let tasks: Vec<_> = pays
        .iter()
        .cloned()
        .map(|p| {
            let (gateway, slots) = (gateway.clone(), slots.clone());
            tokio::spawn(async move {
                let _slot = slots.acquire_owned().await.unwrap();
                join_all((0..COPIES).map(|_| async {
                    match status {
                        "Approved" => gateway.pay(&p).await,
                        _ => gateway.wayforpay(&p, status).await,
                    }
                }))
                .await;
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while gateway.answered.load(Ordering::SeqCst) < kill_at {
        assert!(Instant::now() < deadline, "{}", tail(&server.log, 30));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server.kill9().await;
    let at_kill = gateway.answered.load(Ordering::SeqCst);
    server.start().await;
    for t in tasks {
        t.await.unwrap();
    }
    let retried = gateway.retried.load(Ordering::SeqCst);
    println!("{status}: {total} deliveries, killed after {at_kill} answers, {retried} sent again");
    assert!(at_kill < total, "the kill came after the last answer");
    assert!(retried > 0, "the kill cut no delivery off");
}

/// Every line: by payment id, its earning line and its reversal (if any).
#[derive(Debug)]
struct Line {
    id: i64,
    affiliate: i32,
    kind: String,
    amount: i64,
    currency: String,
    /// As the API reads it: `pending` past its `payable_at` is `payable`.
    status: String,
}

async fn lines(app: &TestApp) -> (HashMap<i64, Line>, HashMap<i64, Line>) {
    let rows = app
        .db()
        .await
        .query(
            "SELECT id, payment_id, affiliate_id, kind, amount_minor, currency,
                    CASE WHEN status = 'pending' AND payable_at <= statement_timestamp()
                         THEN 'payable' ELSE status END AS status
             FROM commission_lines ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let (mut earning, mut reversal) = (HashMap::new(), HashMap::new());
    for r in rows {
        let line = Line {
            id: r.get("id"),
            affiliate: r.get("affiliate_id"),
            kind: r.get("kind"),
            amount: r.get("amount_minor"),
            currency: r.get("currency"),
            status: r.get("status"),
        };
        let into = if line.kind == "reversal" {
            &mut reversal
        } else {
            &mut earning
        };
        let payment: i64 = r.get("payment_id");
        if let Some(other) = into.insert(payment, line) {
            panic!("payment {payment} has two such lines; one is {other:?}");
        }
    }
    (earning, reversal)
}

/// The stored payments by (gateway, external id): (id, order, amount, outcome, reason,
/// created_at).
type Stored = HashMap<(String, String), (i64, i64, i64, String, Option<String>, String)>;

async fn payments(app: &TestApp) -> Stored {
    app.db()
        .await
        .query(
            "SELECT gateway, external_id, id, order_id, amount_minor, outcome, reason,
                    to_char(created_at, 'YYYY-MM-DD HH24:MI:SS.US') AS created
             FROM payments",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                (r.get("gateway"), r.get("external_id")),
                (
                    r.get("id"),
                    r.get("order_id"),
                    r.get("amount_minor"),
                    r.get("outcome"),
                    r.get("reason"),
                    r.get("created"),
                ),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_referred_buyers_across_kill_9s_earn_one_line_each_and_lose_it_once() {
    let started = Instant::now();
    let app = TestApp::spawn().await;
    program_on(&app, "").await;
    let db = app.db().await;
    db.execute("UPDATE referral_program SET hold_days = 0", &[])
        .await
        .unwrap();
    let mut affiliates = Vec::new();
    for k in 0..AFFILIATES {
        affiliates.push(affiliate(&app, &format!("PROOF_{k}"), None).await);
    }
    let mut channels = Vec::new();
    for (k, (minor, currency, _)) in PRICES.iter().enumerate() {
        let body = json!({"price_minor": minor, "currency": currency});
        channels.push(id(&app
            .create_channel(-1_009_720_000 - k as i64, body)
            .await));
    }
    let subscribers: Vec<i32> = db
        .query(
            "INSERT INTO subscribers (telegram_user_id)
             SELECT generate_series($1::bigint, $1::bigint + $2::bigint - 1)
             RETURNING id, telegram_user_id",
            &[&FIRST_USER, &(BUYERS as i64)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(1), r.get::<_, i32>(0)))
        .collect::<BTreeMap<_, _>>()
        .into_values()
        .collect();
    // Buyer i: affiliate i % 5, channel (i / 2) % 4, door 1 when i is even, two orders when
    // i % 7 == 0, refunded when paid at door 2 and i % 3 == 0.
    let attributed: Vec<i32> = (0..BUYERS).map(|i| affiliates[i % AFFILIATES]).collect();
    db.execute(
        "INSERT INTO referral_attributions (subscriber_id, affiliate_id)
         SELECT * FROM unnest($1::integer[], $2::integer[])",
        &[&subscribers, &attributed],
    )
    .await
    .unwrap();
    let wanted: Vec<(usize, usize)> = (0..BUYERS)
        .flat_map(|i| (0..if i % 7 == 0 { 2 } else { 1 }).map(move |_| (i, (i / 2) % 4)))
        .collect();
    let orders: Vec<Value> = stream::iter(&wanted)
        .map(|&(i, c)| app.create_order(i64::from(subscribers[i]), channels[c]))
        .buffered(8)
        .collect()
        .await;
    let pays: Vec<Pay> = wanted
        .iter()
        .zip(&orders)
        .map(|(&(i, c), order)| {
            let (minor, currency, literal) = PRICES[c];
            assert_eq!(order["amount_minor"], minor);
            let door = if i % 2 == 0 {
                Door::Signed
            } else {
                Door::WayForPay
            };
            Pay {
                buyer: i,
                order_id: id(order),
                reference: order["reference"].as_str().unwrap().to_string(),
                amount_minor: minor,
                currency,
                literal,
                door,
                affiliate: attributed[i],
                twice: i % 7 == 0,
                paid_out: i % AFFILIATES < PAID_OUT,
                refunded: door == Door::WayForPay && i % 3 == 0,
            }
        })
        .collect();
    println!(
        "set up {} orders of {BUYERS} buyers in {:?}",
        pays.len(),
        started.elapsed()
    );

    let log = std::env::temp_dir().join(format!("{}-serve.log", app.db_name));
    let mut server = Server {
        env: test_env(&url_for(&app.db_name)),
        child: None,
        base: Arc::new(Mutex::new(String::new())),
        log: log.clone(),
        starts: 0,
    };
    server.start().await;
    let gateway = Gateway {
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap(),
        base: server.base.clone(),
        answered: Arc::new(AtomicUsize::new(0)),
        retried: Arc::new(AtomicUsize::new(0)),
    };

    // 1. Every payment delivered three times at once, the server killed after 600 answers.
    let phase = Instant::now();
    deliver_across_a_kill(&mut server, &gateway, &pays, "Approved", 600).await;
    println!("paid in {:?}", phase.elapsed());

    // 2. Each applied once, with exactly one line of the right percent.
    let stored = payments(&app).await;
    assert_eq!(stored.len(), pays.len(), "one payment per external id");
    let mut payment_of = HashMap::new();
    for p in &pays {
        let (pid, order, amount, outcome, _, _) = &stored[&(p.gateway().into(), p.external_id())];
        assert_eq!(
            (order, amount, outcome.as_str()),
            (&p.order_id, &p.amount_minor, "applied")
        );
        payment_of.insert(p.order_id, *pid);
    }
    let (earning, reversal) = lines(&app).await;
    assert!(reversal.is_empty(), "{reversal:?}");
    assert_eq!(earning.len(), pays.len(), "one line per applied payment");
    let mut kinds: HashMap<usize, (bool, Vec<(String, String)>)> = HashMap::new();
    for p in &pays {
        let pid = payment_of[&p.order_id];
        let l = &earning[&pid];
        let percent = match l.kind.as_str() {
            "first" => FIRST_PERCENT,
            "renewal" => RENEWAL_PERCENT,
            other => panic!("payment {pid}: kind {other}"),
        };
        assert_eq!(
            (
                l.affiliate,
                l.currency.as_str(),
                l.amount,
                l.status.as_str()
            ),
            (
                p.affiliate,
                p.currency,
                p.amount_minor * percent / 100,
                "payable"
            ),
            "payment {pid}: {l:?}"
        );
        let created = stored[&(p.gateway().into(), p.external_id())].5.clone();
        kinds
            .entry(p.buyer)
            .or_insert((p.twice, Vec::new()))
            .1
            .push((created, l.kind.clone()));
    }
    for (buyer, (twice, mut seen)) in kinds {
        seen.sort();
        let seen: Vec<&str> = seen.iter().map(|(_, k)| k.as_str()).collect();
        let expected: &[&str] = if twice {
            &["first", "renewal"]
        } else {
            &["first"]
        };
        assert_eq!(
            seen, expected,
            "buyer {buyer}: the earlier payment is the first"
        );
    }

    // Two affiliates are paid out: every payable line of theirs in each currency.
    for a in &affiliates[..PAID_OUT] {
        for currency in ["UAH", "USD"] {
            let paid = db
                .execute(
                    "WITH payout AS (
                         INSERT INTO payouts (affiliate_id, currency, amount_minor, lines)
                         SELECT $1, $2, sum(amount_minor), count(*) FROM commission_lines
                         WHERE affiliate_id = $1 AND currency = $2 AND status = 'pending'
                           AND payable_at <= statement_timestamp()
                         RETURNING id
                     )
                     UPDATE commission_lines c SET status = 'paid', payout_id = payout.id
                     FROM payout
                     WHERE c.affiliate_id = $1 AND c.currency = $2 AND c.status = 'pending'",
                    &[a, &currency],
                )
                .await
                .unwrap();
            assert!(paid > 0);
        }
    }

    // 3. A sixth of the buyers refunded at the gateway, three reports at once, a kill midway.
    let refunds: Vec<Pay> = pays.iter().filter(|p| p.refunded).cloned().collect();
    let phase = Instant::now();
    deliver_across_a_kill(&mut server, &gateway, &refunds, "Refunded", 150).await;
    println!("{} refunded in {:?}", refunds.len(), phase.elapsed());

    let stored = payments(&app).await;
    let (earning, reversal) = lines(&app).await;
    assert_eq!(earning.len(), pays.len());
    let (mut reversed, mut netted) = (0, 0);
    for p in &pays {
        let (pid, _, _, outcome, reason, _) = &stored[&(p.gateway().into(), p.external_id())];
        let l = &earning[pid];
        let back = reversal.get(pid);
        let shape = (
            outcome.as_str(),
            reason.as_deref(),
            l.status.as_str(),
            back.map(|b| {
                (
                    b.affiliate,
                    b.amount,
                    b.currency.as_str(),
                    b.status.as_str(),
                )
            }),
        );
        let wanted = match (p.refunded, p.paid_out) {
            (false, paid_out) => (
                "applied",
                None,
                if paid_out { "paid" } else { "payable" },
                None,
            ),
            (true, false) => ("refunded", Some("refunded_at_gateway"), "reversed", None),
            (true, true) => (
                "refunded",
                Some("refunded_at_gateway"),
                "paid",
                Some((l.affiliate, -l.amount, l.currency.as_str(), "payable")),
            ),
        };
        assert_eq!(shape, wanted, "payment {pid} (line {}): {p:?}", l.id);
        reversed += usize::from(l.status == "reversed");
        netted += usize::from(back.is_some());
    }
    assert_eq!(reversed + netted, refunds.len(), "one reversal per refund");
    assert_eq!(
        reversal.len(),
        netted,
        "no reversal of a payment not refunded"
    );
    assert!(
        reversed > 0 && netted > 0,
        "both shapes: {reversed}, {netted}"
    );

    // 4. The sums, computed here from the amounts sent.
    let mut by_status: BTreeMap<(i32, String, String), (i64, i64)> = BTreeMap::new();
    let mut add = |a: i32, currency: &str, status: &str, amount: i64| {
        let e = by_status
            .entry((a, currency.to_string(), status.to_string()))
            .or_default();
        e.0 += 1;
        e.1 += amount;
    };
    let mut seen_buyers = HashMap::new();
    for p in &pays {
        // A buyer's two payments of one price earn one first and one renewal line.
        let nth = seen_buyers.entry(p.buyer).or_insert(0);
        let percent = if *nth == 0 {
            FIRST_PERCENT
        } else {
            RENEWAL_PERCENT
        };
        *nth += 1;
        let line = p.amount_minor * percent / 100;
        let status = match (p.refunded, p.paid_out) {
            (_, true) => "paid",
            (true, false) => "reversed",
            (false, false) => "payable",
        };
        add(p.affiliate, p.currency, status, line);
        if p.refunded && p.paid_out {
            add(p.affiliate, p.currency, "payable", -line);
        }
    }
    let ledger: BTreeMap<(i32, String, String), (i64, i64)> = db
        .query(
            "SELECT affiliate_id, currency,
                    CASE WHEN status = 'pending' AND payable_at <= statement_timestamp()
                         THEN 'payable' ELSE status END AS shown,
                    count(*) AS lines, sum(amount_minor)::bigint AS minor
             FROM commission_lines GROUP BY 1, 2, 3",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                (r.get("affiliate_id"), r.get("currency"), r.get("shown")),
                (r.get("lines"), r.get("minor")),
            )
        })
        .collect();
    assert_eq!(
        ledger, by_status,
        "lines and sums per affiliate, currency, status"
    );

    let mut revenue: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for p in &pays {
        let e = revenue.entry(p.currency.to_string()).or_default();
        e.0 += p.amount_minor;
        e.1 += if p.refunded { p.amount_minor } else { 0 };
        e.2 += 1;
    }
    let today = chrono::Utc::now().date_naive();
    let (from, to) = (today.pred_opt().unwrap(), today + chrono::Days::new(2));
    let series = app
        .get(&format!(
            "/api/stats/revenue?from={from}T00:00:00Z&to={to}T00:00:00Z&interval=day"
        ))
        .await
        .expect(200);
    let mut stats: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for item in series["items"].as_array().unwrap() {
        let e = stats
            .entry(item["currency"].as_str().unwrap().to_string())
            .or_default();
        e.0 += item["gross_minor"].as_i64().unwrap();
        e.1 += item["refunded_minor"].as_i64().unwrap();
        e.2 += item["payments"].as_i64().unwrap();
        assert_eq!(
            item["net_minor"].as_i64().unwrap(),
            item["gross_minor"].as_i64().unwrap() - item["refunded_minor"].as_i64().unwrap(),
            "{item}"
        );
    }
    assert_eq!(stats, revenue, "gross, refunded and payments per currency");

    server.kill9().await;
    println!(
        "{} payments, {} refunds, {} starts of the server, {:?} in all",
        pays.len(),
        refunds.len(),
        server.starts,
        started.elapsed()
    );
}
