//! The harness of the commission ledger's proof ([`super::referral_crash`]): the payments it
//! makes and what becomes of each, the gateway that delivers them (three copies at once, again
//! while the server is down) across a SIGKILL of the server, the rows it reads back, and the
//! ledger's sums per affiliate and currency — computed from the amounts sent, read from the
//! table, and read from the CSV export — in one shape, so they compare whole.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::future::join_all;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::{
    outbox::convergence_harness::{Server, tail},
    support::helpers::{
        TestApp, WEBHOOK_SECRET, assert_wayforpay_accept, payment_event, signed_headers,
        wayforpay_callback,
    },
};

/// Each delivery is sent this many times at once.
pub(crate) const COPIES: usize = 3;
/// Payments delivered at a time (each as `COPIES` requests in flight together).
const PARALLEL: usize = 16;
pub(crate) const FIRST_PERCENT: i64 = 20;
pub(crate) const RENEWAL_PERCENT: i64 = 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Door {
    /// Door 1, the Standard Webhooks `payment.succeeded` (gateway `acme`).
    Signed,
    /// Door 2, WayForPay's `serviceUrl` callback.
    WayForPay,
}

/// One order of a referred buyer and what happens to it.
#[derive(Clone, Debug)]
pub(crate) struct Pay {
    pub(crate) buyer: usize,
    pub(crate) order_id: i64,
    pub(crate) reference: String,
    pub(crate) amount_minor: i64,
    pub(crate) currency: &'static str,
    pub(crate) literal: &'static str,
    pub(crate) door: Door,
    pub(crate) affiliate: i32,
    /// The buyer pays two orders of the channel: one first purchase, one renewal.
    pub(crate) twice: bool,
    /// The affiliate's lines are paid out before the refunds.
    pub(crate) paid_out: bool,
    /// Refunded at the gateway (door 2 only).
    pub(crate) refunded: bool,
}

impl Pay {
    pub(crate) fn gateway(&self) -> &'static str {
        match self.door {
            Door::Signed => "acme",
            Door::WayForPay => "wayforpay",
        }
    }

    pub(crate) fn external_id(&self) -> String {
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
pub(crate) struct Gateway {
    pub(crate) http: reqwest::Client,
    pub(crate) base: Arc<Mutex<String>>,
    pub(crate) answered: Arc<AtomicUsize>,
    pub(crate) retried: Arc<AtomicUsize>,
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
pub(crate) async fn deliver_across_a_kill(
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
pub(crate) struct Line {
    pub(crate) id: i64,
    pub(crate) affiliate: i32,
    pub(crate) kind: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    /// As the API reads it: `pending` past its `payable_at` is `payable`.
    pub(crate) status: String,
}

pub(crate) async fn lines(app: &TestApp) -> (HashMap<i64, Line>, HashMap<i64, Line>) {
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
pub(crate) type Stored = HashMap<(String, String), (i64, i64, i64, String, Option<String>, String)>;

pub(crate) async fn payments(app: &TestApp) -> Stored {
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

// ---- the ledger's sums ----

/// One affiliate's lines in one currency, each group as (lines, minor units): the earning
/// lines (`first`, `renewal`) by their status as it reads now, and the negative `reversal`
/// lines.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Owed {
    pub(crate) earned: BTreeMap<String, (i64, i64)>,
    pub(crate) reversals: (i64, i64),
}

impl Owed {
    fn add(&mut self, kind: &str, status: &str, amount: i64) {
        let group = if kind == "reversal" {
            &mut self.reversals
        } else {
            self.earned.entry(status.to_string()).or_default()
        };
        group.0 += 1;
        group.1 += amount;
    }

    /// The minor units of the earning lines of `status`.
    pub(crate) fn earned(&self, status: &str) -> i64 {
        self.earned.get(status).map_or(0, |g| g.1)
    }
}

/// The ledger by (affiliate, currency).
pub(crate) type Ledger = BTreeMap<(i32, String), Owed>;

/// What each of `pays` earns, computed here: its percent of the amount sent, rounded down. A
/// buyer's two payments are of one price, so which of them is the first purchase changes no
/// sum: the first listed is counted as the first.
pub(crate) fn commissions(pays: &[Pay]) -> Vec<i64> {
    let mut seen = BTreeSet::new();
    pays.iter()
        .map(|p| {
            let percent = if seen.insert(p.buyer) {
                FIRST_PERCENT
            } else {
                RENEWAL_PERCENT
            };
            p.amount_minor * percent / 100
        })
        .collect()
}

/// The ledger after the payout and the refunds, computed from what the test sent: a line paid
/// out stays `paid` (and a refund adds its negative reversal, payable at once), a line not paid
/// out is `reversed` by a refund and `payable` otherwise (there is no hold).
pub(crate) fn expected(pays: &[Pay]) -> Ledger {
    let mut ledger = Ledger::new();
    for (p, line) in pays.iter().zip(commissions(pays)) {
        let owed = ledger
            .entry((p.affiliate, p.currency.to_string()))
            .or_default();
        let status = match (p.refunded, p.paid_out) {
            (_, true) => "paid",
            (true, false) => "reversed",
            (false, false) => "payable",
        };
        owed.add("first", status, line);
        if p.refunded && p.paid_out {
            owed.add("reversal", "payable", -line);
        }
    }
    ledger
}

/// The ledger as `commission_lines` holds it.
pub(crate) async fn ledger_of_table(app: &TestApp) -> Ledger {
    let mut ledger = Ledger::new();
    let (earning, reversal) = lines(app).await;
    for l in earning.values().chain(reversal.values()) {
        ledger
            .entry((l.affiliate, l.currency.clone()))
            .or_default()
            .add(&l.kind, &l.status, l.amount);
    }
    ledger
}

/// The ledger as `GET /api/commissions.csv` exports it, and how many lines it lists (each line
/// once: a repeated id fails).
pub(crate) fn ledger_of_csv(csv: &[u8]) -> (Ledger, usize) {
    let mut reader = csv::Reader::from_reader(csv);
    let headers = reader.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let [id, affiliate, kind, amount, currency, status] = [
        "id",
        "affiliate_id",
        "kind",
        "amount_minor",
        "currency",
        "status",
    ]
    .map(column);
    let (mut ledger, mut ids) = (Ledger::new(), BTreeSet::new());
    for record in reader.records() {
        let r = record.unwrap();
        assert!(ids.insert(r[id].to_string()), "line {} twice", &r[id]);
        ledger
            .entry((r[affiliate].parse().unwrap(), r[currency].to_string()))
            .or_default()
            .add(&r[kind], &r[status], r[amount].parse().unwrap());
    }
    (ledger, ids.len())
}
