//! The commission ledger's proof across real crashes (API.md "Referrals and affiliates"): 1,000
//! referred buyers pay at once through the signed webhook (door 1) and WayForPay (door 2), every
//! delivery sent three times together, and the `subgate` binary is killed with SIGKILL in the
//! middle and started again on the same database, as a gateway's redeliveries would find it.
//! Every payment is then applied once and earns exactly one line of the right percent, rounded
//! down (a buyer's second payment of a channel a renewal's). Two affiliates are paid out
//! (`POST /api/payouts`); a sixth of the buyers are refunded at the gateway, each refund
//! reported three times at once, with another SIGKILL in the middle and a third affiliate's
//! payout among its refunds: a line not paid is `reversed`, a paid one gets exactly one negative
//! `reversal` of its amount, and nothing is reversed twice. Last, the revenue statistics, the
//! ledger's table, `GET /api/commissions.csv` and every affiliate's page
//! (`GET /api/affiliates/{id}/summary`) equal, to the minor unit, what the test computes from
//! the amounts it sent.
//!
//! The program has no hold (`hold_days = 0`), so every line is payable at once and a payout can
//! take it before the refunds come. Door 1 has no refund event, so only door-2 payments are
//! refunded. The harness is in [`super::referral_crash_harness`].

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use serde_json::{Value, json};

use super::{
    referral_crash_harness::{
        Door, FIRST_PERCENT, Gateway, Pay, RENEWAL_PERCENT, commissions, deliver_across_a_kill,
        expected, ledger_of_csv, ledger_of_table, lines, payments,
    },
    referrals::{affiliate, program_on},
};
use crate::{
    outbox::convergence_harness::Server,
    support::helpers::{TestApp, id, test_env, url_for},
};

const BUYERS: usize = 1_000;
const FIRST_USER: i64 = 39_000_000;
const AFFILIATES: usize = 5;
/// The first two affiliates are paid out before the refunds.
const PAID_OUT: usize = 2;
/// The channels' prices: minor units, currency, and the amount as WayForPay writes it.
const PRICES: [(i64, &str, &str); 4] = [
    (19_900, "UAH", "199"),
    (12_345, "UAH", "123.45"),
    (9_999, "UAH", "99.99"),
    (4_999, "USD", "49.99"),
];

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
    let mut pays: Vec<Pay> = wanted
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

    // Two affiliates are paid out (`POST /api/payouts`): every payable line of theirs, by
    // currency.
    let mut due: BTreeMap<(i32, &str), (i64, i64)> = BTreeMap::new();
    for (p, line) in pays.iter().zip(commissions(&pays)) {
        if p.paid_out {
            let d = due.entry((p.affiliate, p.currency)).or_default();
            d.0 += 1;
            d.1 += line;
        }
    }
    for ((a, currency), (count, minor)) in &due {
        let payout = app
            .post(
                "/api/payouts",
                json!({"affiliate_id": a, "currency": currency}),
            )
            .await
            .expect(201);
        assert_eq!(
            (&payout["lines"], &payout["amount_minor"]),
            (&json!(count), &json!(minor)),
            "{payout}"
        );
    }

    // 3. A sixth of the buyers refunded at the gateway, three reports at once, a kill midway,
    // while the next affiliate's UAH lines are paid out among its refunds (by this process's
    // app, which the kill spares): each of its refunded lines is either reversed before the
    // payout or paid by it and netted by a reversal after, never both, never neither.
    let refunds: Vec<Pay> = pays.iter().filter(|p| p.refunded).cloned().collect();
    let racing = affiliates[PAID_OUT];
    let phase = Instant::now();
    gateway.answered.store(0, Ordering::SeqCst);
    let ((), payout) = tokio::join!(
        deliver_across_a_kill(&mut server, &gateway, &refunds, "Refunded", 150),
        async {
            while gateway.answered.load(Ordering::SeqCst) < 75 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let body = json!({"affiliate_id": racing, "currency": "UAH"});
            app.post("/api/payouts", body).await.expect(201)
        }
    );
    println!("{} refunded in {:?}", refunds.len(), phase.elapsed());

    let stored = payments(&app).await;
    let (earning, reversal) = lines(&app).await;
    let mut late = (0, 0);
    for p in pays
        .iter_mut()
        .filter(|p| p.affiliate == racing && p.currency == "UAH")
    {
        let pid = stored[&(p.gateway().into(), p.external_id())].0;
        // Paid by the payout, unless its refund reversed it first.
        p.paid_out = !p.refunded || earning[&pid].status != "reversed";
        if p.refunded {
            late.0 += usize::from(!p.paid_out);
            late.1 += usize::from(p.paid_out);
        }
    }
    println!(
        "affiliate {racing}: {} refunds before its payout, {} after",
        late.0, late.1
    );
    let (count, minor) = pays
        .iter()
        .zip(commissions(&pays))
        .filter(|(p, _)| p.affiliate == racing && p.currency == "UAH" && p.paid_out)
        .fold((0, 0), |(n, sum), (_, line)| (n + 1, sum + line));
    assert_eq!(
        (&payout["lines"], &payout["amount_minor"]),
        (&json!(count), &json!(minor)),
        "the payout among the refunds: {payout}"
    );
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

    // 4. The sums: the ledger computed here from the amounts sent equals the table, the CSV
    // and every affiliate's page, to the minor unit.
    let ledger = expected(&pays);
    assert_eq!(ledger_of_table(&app).await, ledger, "the table");
    let csv = app.get("/api/commissions.csv").await;
    assert_eq!(csv.status, 200);
    let (exported, count) = ledger_of_csv(&csv.bytes);
    assert_eq!(count, pays.len() + netted, "the CSV lists every line");
    assert_eq!(exported, ledger, "the CSV");
    for (k, a) in affiliates.iter().enumerate() {
        let page = app
            .get(&format!("/api/affiliates/{a}/summary"))
            .await
            .expect(200);
        let buyers = (0..BUYERS).filter(|i| i % AFFILIATES == k).count();
        assert_eq!(
            (
                &page["clicks"],
                &page["attributed_buyers"],
                &page["paying_buyers"]
            ),
            (&json!(0), &json!(buyers), &json!(buyers)),
            "{page}"
        );
        let mut shown = BTreeMap::new();
        for c in page["currencies"].as_array().unwrap() {
            shown.insert(c["currency"].as_str().unwrap().to_string(), c.clone());
        }
        let mut wanted = BTreeMap::new();
        for ((_, currency), owed) in ledger.range((*a, String::new())..(*a + 1, String::new())) {
            let revenue: i64 = pays
                .iter()
                .filter(|p| p.affiliate == *a && p.currency == currency && !p.refunded)
                .map(|p| p.amount_minor)
                .sum();
            wanted.insert(
                currency.clone(),
                json!({
                    "currency": currency,
                    "revenue_minor": revenue,
                    "commission": {
                        "pending": owed.earned("pending"),
                        "payable": owed.earned("payable"),
                        "paid": owed.earned("paid"),
                        "reversed": owed.earned("reversed"),
                    },
                    "reversals_minor": owed.reversals.1,
                    "balance_minor": owed.earned("payable") + owed.reversals.1,
                }),
            );
        }
        assert_eq!(shown, wanted, "affiliate {a}'s page");
    }

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
