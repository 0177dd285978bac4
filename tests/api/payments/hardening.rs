//! Payments and seats under the conditions that used to break them: a delivery delayed by days,
//! a staff PATCH of `seat_limit` racing payments and holds, a pre-checkout whose COMMIT is slow,
//! and a repeat delivery that disagrees with the stored payment.

use std::{
    io::Write,
    sync::{Arc, Mutex},
    time::{Duration as StdDuration, Instant},
};

use axum::http::Method;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::support::{
    bodies::{AppliedBody, OrderBody, body_of},
    helpers::{TestApp, TestResponse, db_now, id, payment_event, reference},
};

fn time(v: &str) -> DateTime<Utc> {
    v.parse().unwrap_or_else(|e| panic!("not a time: {v}: {e}"))
}

// ---- the term starts when the payment is applied ----

#[tokio::test]
async fn a_delivery_delayed_by_two_days_still_buys_the_whole_one_day_term() {
    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(31_001).await);
    let chan = id(&app
        .create_channel(-31_001, json!({"billing_period_days": 1}))
        .await);

    // Paid two days ago, delivered only now (a gateway outage).
    let order = app.create_order(sub, chan).await;
    let paid_at = DateTime::from_timestamp(Utc::now().timestamp() - 2 * 86_400, 0).unwrap();
    let mut body = payment_event("pay_late", &reference(&order), 19900, "UAH");
    body["paid_at"] = json!(paid_at.to_rfc3339());
    let before = db_now(&app).await;
    let r = app.post_signed_webhook(&body).await.expect(200);
    let after = db_now(&app).await;
    let applied: AppliedBody = body_of(&r);
    assert_eq!(applied.payment.outcome, "applied", "{r}");
    // paid_at stays as the gateway reported it, on the payment and on the order.
    assert_eq!(time(&applied.payment.paid_at), paid_at);
    let o: OrderBody = body_of(
        &app.get(&format!("/api/orders/{}", id(&order)))
            .await
            .expect(200),
    );
    assert_eq!(time(o.paid_at.as_deref().expect("paid_at")), paid_at);
    // The term is a full day from when the payment was applied.
    let m = applied.membership.expect("a membership");
    assert_eq!(m.status, "active");
    let expires = time(&m.expires_at);
    assert!(
        before + Duration::days(1) <= expires && expires <= after + Duration::days(1),
        "expires_at {expires} is one day after the payment was applied ({before}..{after})"
    );
    // The sweep leaves it alone: the buyer has the day they paid for.
    let report = app.post("/api/sweep", Value::Null).await.expect(200);
    assert_eq!(report["to_expired"], 0, "{report}");
    assert_eq!(report["to_grace"], 0, "{report}");

    // A renewal of the live membership, also delivered late, extends from its own expiry.
    let renewal = app.create_order(sub, chan).await;
    let mut body = payment_event("pay_late_2", &reference(&renewal), 19900, "UAH");
    body["paid_at"] = json!(paid_at.to_rfc3339());
    let r = app.post_signed_webhook(&body).await.expect(200);
    let applied: AppliedBody = body_of(&r);
    assert_eq!(applied.payment.outcome, "applied", "{r}");
    assert_eq!(
        time(&applied.membership.expect("a membership").expires_at),
        expires + Duration::days(1)
    );
    assert_eq!(time(&applied.payment.paid_at), paid_at);
}

// ---- a seat_limit PATCH racing payments, checkouts and pre-checkouts ----

const STARS_PRICE: i64 = 100;
/// Buyers per round: two pay directly, two check out, two go through Telegram's pre-checkout.
const BUYERS: i64 = 6;
/// The limit the PATCH commits.
const NEW_LIMIT: i64 = 2;
/// The limit lowered from, in the rounds that lower one: room for everybody, so nothing is
/// refused under it.
const OLD_LIMIT: i64 = 8;

fn pre_checkout_update(query_id: &str, from: i64, payload: &str) -> Value {
    json!({
        "update_id": 1,
        "pre_checkout_query": {
            "id": query_id,
            "from": {"id": from, "is_bot": false, "first_name": "Buyer"},
            "currency": "XTR",
            "total_amount": STARS_PRICE,
            "invoice_payload": payload
        }
    })
}

/// What one buyer's request ended as.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Applied, or approved (a hold may or may not have been needed).
    Admitted,
    /// Refused for want of a seat.
    Refused,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seat_limit_patch_racing_payments_and_holds_never_oversells() {
    const ROUNDS: i64 = 40;
    let app = Arc::new(TestApp::spawn().await);
    app.token().await;
    for round in 0..ROUNDS {
        // Even rounds: unlimited → NEW_LIMIT; odd rounds: OLD_LIMIT lowered to NEW_LIMIT.
        let old_limit = if round % 2 == 0 {
            Value::Null
        } else {
            json!(OLD_LIMIT)
        };
        let chan = id(&app
            .create_channel(
                -32_000 - round,
                json!({"currency": "XTR", "price_minor": STARS_PRICE, "seat_limit": old_limit}),
            )
            .await);
        // One member already.
        let member = id(&app.create_subscriber(32_000_000 + round * 100).await);
        app.post(
            "/api/memberships",
            json!({"subscriber_id": member, "channel_id": chan, "days": 30}),
        )
        .await
        .expect(201);
        let mut buyers = Vec::new();
        for n in 0..BUYERS {
            let telegram_id = 32_000_000 + round * 100 + 1 + n;
            let sub = id(&app.create_subscriber(telegram_id).await);
            buyers.push((n, telegram_id, app.create_order(sub, chan).await));
        }

        let barrier = Arc::new(Barrier::new(BUYERS as usize + 1));
        let patch = {
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                jitter(60).await;
                app.patch(
                    &format!("/api/channels/{chan}"),
                    json!({"seat_limit": NEW_LIMIT}),
                )
                .await
            })
        };
        let tasks: Vec<_> = buyers
            .into_iter()
            .map(|(n, telegram_id, order)| {
                let (app, barrier) = (app.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    jitter(60).await;
                    buy(&app, n, telegram_id, &order, round).await
                })
            })
            .collect();
        let patched = patch.await.unwrap().expect(200);
        assert_eq!(patched["seat_limit"], NEW_LIMIT);
        let mut refused = 0;
        for t in tasks {
            if t.await.unwrap() == Outcome::Refused {
                refused += 1;
            }
        }

        // Split what holds a seat by whether it was taken before the PATCH's UPDATE statement
        // (`updated_at`) or after it. That statement starts once the PATCH holds the channel
        // row FOR UPDATE: after every transaction that decided from the old terms committed,
        // before any later one could decide. Holds were set HOLD_SECS (300 s) before they end.
        let row = app
            .db()
            .await
            .query_one(
                "WITH c AS (SELECT id, updated_at AS patched FROM channels WHERE id = $1),
                      seats AS (
                        SELECT m.created_at AS taken FROM memberships m, c
                         WHERE m.channel_id = c.id AND m.status <> 'expired'
                        UNION ALL
                        SELECT min(o.hold_until) - interval '300 seconds' FROM orders o, c
                         WHERE o.channel_id = c.id AND o.status = 'pending'
                           AND o.hold_until > statement_timestamp()
                           AND NOT EXISTS (SELECT 1 FROM memberships m
                                            WHERE m.subscriber_id = o.subscriber_id
                                              AND m.channel_id = o.channel_id
                                              AND m.status <> 'expired')
                         GROUP BY o.subscriber_id)
                 SELECT count(*) FILTER (WHERE taken < c.patched),
                        count(*) FILTER (WHERE taken > c.patched),
                        count(*) FILTER (WHERE taken = c.patched)
                 FROM seats, c",
                &[&(chan as i32)],
            )
            .await
            .unwrap();
        let (before, after, same): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(
            same, 0,
            "round {round}: a seat taken in the PATCH's own statement"
        );
        // Taken before the new limit existed: allowed (the member at least). After it: only
        // what the new limit leaves free.
        assert!(before >= 1, "round {round}");
        assert!(
            after <= (NEW_LIMIT - before).max(0),
            "round {round}: {before} seats taken before the PATCH, {after} after it, \
             over the new limit {NEW_LIMIT}"
        );
        // And nobody was refused while a seat was free (nothing frees one during a round).
        if refused > 0 {
            assert!(
                before + after >= NEW_LIMIT,
                "round {round}: {refused} refused with {} seats taken of {NEW_LIMIT}",
                before + after
            );
        }
    }
}

/// A pause of 0..=`max_ms` ms after the release, so the PATCH lands at varying points among
/// the buyers' transactions rather than always first or last.
async fn jitter(max_ms: u64) {
    let ms = rand::random::<u64>() % (max_ms + 1);
    tokio::time::sleep(StdDuration::from_millis(ms)).await;
}

/// One buyer's way in: `n` 0–1 pay directly (door 1), 2–3 check out, 4–5 pre-checkout in
/// Telegram. Never a 5xx.
async fn buy(app: &TestApp, n: i64, telegram_id: i64, order: &Value, round: i64) -> Outcome {
    match n {
        0 | 1 => {
            let body = payment_event(
                &format!("seat-{round}-{n}"),
                &reference(order),
                STARS_PRICE,
                "XTR",
            );
            let r = app.post_signed_webhook(&body).await.expect(200);
            match (
                r["payment"]["outcome"].as_str(),
                r["payment"]["reason"].as_str(),
            ) {
                (Some("applied"), None) => Outcome::Admitted,
                (_, Some("no_seat")) => Outcome::Refused,
                other => panic!("round {round}: unexpected payment result {other:?}: {r}"),
            }
        }
        2 | 3 => {
            let r = app.checkout(id(order)).await;
            match r.status.as_u16() {
                200 => Outcome::Admitted,
                409 => Outcome::Refused,
                s => panic!(
                    "round {round}: checkout answered {s}: {}",
                    String::from_utf8_lossy(&r.bytes)
                ),
            }
        }
        _ => {
            let query_id = format!("seat-{round}-{n}");
            let r = app
                .post_telegram_update(pre_checkout_update(
                    &query_id,
                    telegram_id,
                    &reference(order),
                ))
                .await
                .expect(200);
            match (r["ok"].as_bool(), r["error_message"].as_str()) {
                (Some(true), _) => Outcome::Admitted,
                (Some(false), Some(m)) if m.contains("seat") => Outcome::Refused,
                _ => panic!("round {round}: unexpected pre-checkout answer {r}"),
            }
        }
    }
}

// ---- a pre-checkout's answer matches what its COMMIT stored ----

/// Makes every COMMIT that stored a pre-checkout decision slow, with a deferred constraint
/// trigger that sleeps `secs`. With `ignore_cancel`, a cancel request does not stop it (the
/// commit then lands late); otherwise a cancel aborts the commit.
async fn slow_decision_commits(app: &TestApp, secs: f64, ignore_cancel: bool) {
    let body = if ignore_cancel {
        format!(
            "DECLARE t0 timestamptz := clock_timestamp();
             BEGIN
               WHILE clock_timestamp() < t0 + make_interval(secs => {secs}) LOOP
                 BEGIN PERFORM pg_sleep(0.05);
                 EXCEPTION WHEN query_canceled THEN NULL;
                 END;
               END LOOP;
               RETURN NULL;
             END"
        )
    } else {
        format!("BEGIN PERFORM pg_sleep({secs}); RETURN NULL; END")
    };
    app.db()
        .await
        .batch_execute(&format!(
            "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $f$ {body} $f$;
             CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON pre_checkout_decisions
               DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();"
        ))
        .await
        .unwrap();
}

/// Waits until no other session of this test's database is running a statement, so a commit
/// left running (by the code under test) has landed or been rolled back.
async fn wait_until_quiet(app: &TestApp) {
    let deadline = Instant::now() + StdDuration::from_secs(20);
    loop {
        let busy: i64 = app
            .count(
                "pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND state NOT IN ('idle')",
            )
            .await;
        if busy == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "a session is still busy");
        tokio::time::sleep(StdDuration::from_millis(50)).await;
    }
}

async fn stars_order_with_one_seat(app: &TestApp, telegram_id: i64) -> (i64, String) {
    let chan = id(&app
        .create_channel(
            -telegram_id,
            json!({"currency": "XTR", "price_minor": STARS_PRICE, "seat_limit": 1}),
        )
        .await);
    let sub = id(&app.create_subscriber(telegram_id).await);
    let order = app.create_order(sub, chan).await;
    (id(&order), reference(&order))
}

async fn pre_checkout(app: &TestApp, query_id: &str, from: i64, payload: &str) -> Value {
    let r: TestResponse = app
        .post_telegram_update(pre_checkout_update(query_id, from, payload))
        .await;
    r.expect(200)
}

/// `(stored decisions of the query, ok of the stored one, the order's hold_until)`.
async fn stored(app: &TestApp, query_id: &str, order_id: i64) -> (i64, Option<bool>, bool) {
    let db = app.db().await;
    let decisions: i64 = db
        .query_one(
            "SELECT count(*) FROM pre_checkout_decisions WHERE query_id = $1",
            &[&query_id],
        )
        .await
        .unwrap()
        .get(0);
    let ok: Option<bool> = db
        .query_opt(
            "SELECT ok FROM pre_checkout_decisions WHERE query_id = $1",
            &[&query_id],
        )
        .await
        .unwrap()
        .map(|r| r.get(0));
    let held: bool = db
        .query_one(
            "SELECT hold_until IS NOT NULL FROM orders WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap()
        .get(0);
    (decisions, ok, held)
}

#[tokio::test]
async fn a_commit_slower_than_its_wait_is_cancelled_and_the_try_again_stores_nothing() {
    let app = TestApp::spawn().await;
    let (order_id, payload) = stars_order_with_one_seat(&app, 33_001).await;
    // Slower than the whole budget too: the time limit used to cut the answer short while
    // the commit went on and stored an approval with its hold.
    slow_decision_commits(&app, 6.0, false).await;

    let started = Instant::now();
    let answer = pre_checkout(&app, "slow-1", 33_001, &payload).await;
    let took = started.elapsed();
    assert!(took < StdDuration::from_secs(9), "answered in {took:?}");
    wait_until_quiet(&app).await;
    // The answer and the rows agree: "try again", nothing stored, no seat held.
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(answer["error_message"], "Please try again in a moment.");
    assert_eq!(stored(&app, "slow-1", order_id).await, (0, None, false));

    // Once commits are fast again, the same query is decided for real.
    app.db()
        .await
        .batch_execute("DROP TRIGGER slow_commit ON pre_checkout_decisions")
        .await
        .unwrap();
    let answer = pre_checkout(&app, "slow-1", 33_001, &payload).await;
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(
        stored(&app, "slow-1", order_id).await,
        (1, Some(true), true)
    );
}

#[tokio::test]
async fn a_commit_that_lands_after_its_wait_is_read_back_and_its_approval_answered() {
    let app = TestApp::spawn().await;
    let (order_id, payload) = stars_order_with_one_seat(&app, 33_002).await;
    // Ignores the cancel and lands after the commit wait (2 s), inside the read-back (2 s).
    slow_decision_commits(&app, 3.0, true).await;

    let started = Instant::now();
    let answer = pre_checkout(&app, "slow-2", 33_002, &payload).await;
    let took = started.elapsed();
    assert!(took < StdDuration::from_secs(9), "answered in {took:?}");
    wait_until_quiet(&app).await;
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(
        stored(&app, "slow-2", order_id).await,
        (1, Some(true), true)
    );
}

// ---- a repeat delivery that differs from the stored payment ----

/// Log output captured for the current thread.
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

impl Captured {
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

// Single-threaded, so the handler runs on the thread whose log subscriber captures its output.
#[tokio::test(flavor = "current_thread")]
async fn a_repeat_delivery_that_differs_is_answered_as_a_duplicate_and_logged() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let app = TestApp::spawn().await;
    let sub = id(&app.create_subscriber(34_001).await);
    let chan = id(&app.create_channel(-34_001, json!({})).await);
    let order = app.create_order(sub, chan).await;
    let other = app.create_order(sub, chan).await;
    let body = payment_event("pay_x", &reference(&order), 19900, "UAH");
    let first = app.post_signed_webhook(&body).await.expect(200);
    assert_eq!(first["duplicate"], false);

    // A faithful repeat: the stored payment, no warning.
    logs.take();
    let faithful = app.post_signed_webhook(&body).await.expect(200);
    assert_eq!(faithful["duplicate"], true);
    assert_eq!(faithful["payment"], first["payment"]);
    assert!(
        !logs.take().contains("differs"),
        "a faithful repeat is not warned about"
    );

    // A repeat with another amount, currency and order: the same answer, and a warning that
    // names both values of each.
    let mut changed = body.clone();
    changed["amount_minor"] = json!(1);
    changed["currency"] = json!("USD");
    changed["order_reference"] = json!(reference(&other));
    let repeat = app.post_signed_webhook(&changed).await.expect(200);
    assert_eq!(repeat, faithful, "answered exactly like a faithful repeat");
    let log = logs.take();
    let warning = log
        .lines()
        .find(|l| l.contains("differs from the stored payment"))
        .unwrap_or_else(|| panic!("no warning logged; captured: {log}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("external_id=pay_x"), "{warning}");
    for (field, stored, delivered) in [
        ("amount_minor", "19900".to_string(), "1".to_string()),
        ("currency", "UAH".to_string(), "USD".to_string()),
        ("order_reference", reference(&order), reference(&other)),
    ] {
        let named = format!("{field}: stored \\\"{stored}\\\", delivered \\\"{delivered}\\\"");
        let plain = format!("{field}: stored \"{stored}\", delivered \"{delivered}\"");
        assert!(
            warning.contains(&named) || warning.contains(&plain),
            "{field} not named with both values: {warning}"
        );
    }
    // Nothing changed: one payment, the other order still pending.
    assert_eq!(app.count("payments").await, 1);
    let o = app
        .staff(
            Method::GET,
            &format!("/api/orders/{}", id(&other)),
            Value::Null,
        )
        .await
        .expect(200);
    assert_eq!(o["status"], "pending");
}
