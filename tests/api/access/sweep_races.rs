//! The sweep racing the writers of a membership: renewals racing sweeps on one overdue
//! membership, checkout, payment, grant and sweep at once on a seat-limited channel (never a
//! 5xx), and a renewal committed between the lock statement and the decision. The events of
//! each membership are read back as one chain.

use std::time::Duration;

use axum::http::Method;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use subgate::access::sweep;

use crate::{
    access::sweep::{back_date, membership, set, status_of, sweep_events},
    support::helpers::{SWEEP_TOKEN, TestApp, db_now},
};

// ---- the sweep racing payments, checkouts and staff grants ----

/// A door-1 payment of `order` as payment `payment_id`, paid at `paid_at`.
fn payment_at(order: &Value, payment_id: &str, paid_at: DateTime<Utc>) -> Value {
    json!({
        "type": "payment.succeeded",
        "gateway": "acme",
        "payment_id": payment_id,
        "order_reference": order["reference"],
        "amount_minor": order["amount_minor"],
        "currency": order["currency"],
        "paid_at": paid_at,
    })
}

/// `POST /api/sweep` with the sweep token (the cron path; no staff lookup).
async fn sweep_with_token(app: &TestApp) -> crate::support::helpers::TestResponse {
    app.request(
        Method::POST,
        "/api/sweep",
        &[("authorization", &format!("Bearer {SWEEP_TOKEN}"))],
        "",
    )
    .await
}

/// The membership's events in order: (from, to, expires_at_before, expires_at_after, cause).
type EventRow = (
    Option<String>,
    String,
    Option<DateTime<Utc>>,
    DateTime<Utc>,
    String,
);

async fn events_of(app: &TestApp, id: i64, after_event: i64) -> Vec<EventRow> {
    app.db()
        .await
        .query(
            "SELECT from_status, to_status, expires_at_before, expires_at_after, cause
             FROM membership_events WHERE membership_id = $1 AND id > $2 ORDER BY id",
            &[&id, &after_event],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

async fn last_event_id(app: &TestApp) -> i64 {
    app.db()
        .await
        .query_one("SELECT COALESCE(max(id), 0) FROM membership_events", &[])
        .await
        .unwrap()
        .get(0)
}

/// Every event continues from the one before it (no lost update), starting from `start`, and
/// the chain ends at the membership's current row.
#[track_caller]
fn assert_chain(
    events: &[EventRow],
    start: (&str, DateTime<Utc>),
    end: (&str, DateTime<Utc>),
    round: usize,
) {
    let mut at = (start.0.to_string(), start.1);
    for e in events {
        assert_eq!(
            (e.0.as_deref(), e.2),
            (Some(at.0.as_str()), Some(at.1)),
            "round {round}: event {e:?} does not continue from {at:?}; all: {events:#?}"
        );
        if e.4 == "sweep" {
            assert_eq!(
                e.2,
                Some(e.3),
                "round {round}: a sweep never moves expires_at"
            );
        }
        at = (e.1.clone(), e.3);
    }
    assert_eq!(
        (at.0.as_str(), at.1),
        end,
        "round {round}: the row is not where its events lead; events: {events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_renewals_racing_five_sweeps_on_one_overdue_membership() {
    const ROUNDS: usize = 20;
    const RENEWALS: usize = 5;
    const SWEEPS: usize = 5;
    let app = std::sync::Arc::new(TestApp::spawn().await);
    // Zero grace and overdue: a sweep acting on a stale read would write `expired`.
    let (m, subscriber_id, channel_id) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    let period = chrono::Duration::days(30);
    app.token().await;

    for round in 0..ROUNDS {
        let now = db_now(&app).await;
        let expires_at = now - chrono::Duration::hours(2);
        let paid_at = now - chrono::Duration::hours(1);
        set(
            &app,
            id,
            json!({"status": "active", "expires_at": expires_at}),
        )
        .await;
        let mut orders = Vec::new();
        for _ in 0..RENEWALS {
            orders.push(app.create_order(subscriber_id, channel_id).await);
        }
        let before = last_event_id(&app).await;

        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(RENEWALS + SWEEPS));
        let mut renewals = Vec::new();
        for (n, order) in orders.iter().enumerate() {
            let (app, barrier) = (app.clone(), barrier.clone());
            let body = payment_at(order, &format!("race-{round}-{n}"), paid_at);
            renewals.push(tokio::spawn(async move {
                barrier.wait().await;
                app.post_signed_webhook(&body).await
            }));
        }
        let mut sweeps = Vec::new();
        for _ in 0..SWEEPS {
            let (app, barrier) = (app.clone(), barrier.clone());
            sweeps.push(tokio::spawn(async move {
                barrier.wait().await;
                sweep_with_token(&app).await
            }));
        }
        for r in renewals {
            let body = r.await.unwrap().expect(200);
            assert_eq!(body["duplicate"], false, "round {round}: {body}");
            assert_eq!(
                body["payment"]["outcome"], "applied",
                "round {round}: {body}"
            );
        }
        for s in sweeps {
            s.await.unwrap().expect(200);
        }

        let (status, final_expires) = status_of(&app, id).await;
        let after = db_now(&app).await;
        assert_eq!(status, "active", "round {round}");
        let events = events_of(&app, id, before).await;
        // The first renewal's base is GREATEST(expires_at, database now) = when it was applied
        // (not the paid_at an hour ago); every later one extends from the expiry before it.
        let first = events
            .iter()
            .find(|e| e.4 == "payment")
            .expect("a payment event");
        let base = first.3 - period;
        assert!(now <= base && base <= after, "round {round}: base {base}");
        assert_eq!(
            final_expires,
            base + period * RENEWALS as i32,
            "round {round}"
        );
        assert_chain(
            &events,
            ("active", expires_at),
            ("active", final_expires),
            round,
        );
        assert_eq!(
            events.iter().filter(|e| e.4 == "payment").count(),
            RENEWALS,
            "round {round}"
        );
        // A sweep may have expired the membership before the first renewal, never after one.
        for e in events.iter().filter(|e| e.4 == "sweep") {
            assert_eq!(
                e.3, expires_at,
                "round {round}: sweep on a renewed term: {e:?}"
            );
        }
        let paid = app
            .count(&format!(
                "orders WHERE status = 'paid' AND id = ANY('{{{}}}'::bigint[])",
                orders
                    .iter()
                    .map(|o| o["id"].to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ))
            .await;
        assert_eq!(paid, RENEWALS as i64, "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkout_payment_grant_and_sweep_at_once_never_5xx() {
    const ROUNDS: usize = 20;
    let app = std::sync::Arc::new(TestApp::spawn().await);
    // A seat-limited channel with one seat, held by member A whose term has run out; B wants in.
    let (m, a, channel_id) = membership(&app, 1, 0).await;
    app.patch(
        &format!("/api/channels/{channel_id}"),
        json!({"seat_limit": 1}),
    )
    .await
    .expect(200);
    let id = m["id"].as_i64().unwrap();
    let b = app.create_subscriber(9_999).await["id"].as_i64().unwrap();
    app.token().await;
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();

    for round in 0..ROUNDS {
        // Odd rounds start with A already expired: then B may take the seat and A's payment
        // may find none (a renewal of an expired membership needs a seat again).
        let start = if round % 2 == 0 { "active" } else { "expired" };
        let expires_at = db_now(&app).await - chrono::Duration::hours(1);
        set(&app, id, json!({"status": start, "expires_at": expires_at})).await;
        let order_a = app.create_order(a, channel_id).await;
        let order_b = app.create_order(b, channel_id).await;
        let before = last_event_id(&app).await;
        let paid_at = db_now(&app).await;

        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(7));
        let mut tasks: Vec<(
            &str,
            tokio::task::JoinHandle<crate::support::helpers::TestResponse>,
        )> = Vec::new();
        macro_rules! task {
            ($name:expr, |$app:ident| $body:expr) => {{
                let ($app, barrier) = (app.clone(), barrier.clone());
                // Released together, then staggered by up to 2 ms (varying per round and task) so
                // the rounds cover many interleavings, not just the one the scheduler prefers.
                let stagger = Duration::from_micros(rand::random::<u64>() % 2_000);
                tasks.push((
                    $name,
                    tokio::spawn(async move {
                        barrier.wait().await;
                        tokio::time::sleep(stagger).await;
                        $body
                    }),
                ));
            }};
        }
        let (oa, ob) = (
            order_a["id"].as_i64().unwrap(),
            order_b["id"].as_i64().unwrap(),
        );
        let pay = payment_at(&order_a, &format!("mix-{round}"), paid_at);
        task!("checkout A", |app| app.checkout(oa).await);
        task!("pay A", |app| app.post_signed_webhook(&pay).await);
        task!("grant A", |app| app
            .post(
                "/api/memberships",
                json!({"subscriber_id": a, "channel_id": channel_id, "days": 1})
            )
            .await);
        task!("sweep", |app| sweep_with_token(&app).await);
        task!("checkout B", |app| app.checkout(ob).await);
        task!("sweep (staff)", |app| app
            .post("/api/sweep", Value::Null)
            .await);
        task!("cancel B", |app| app
            .post(&format!("/api/orders/{ob}/cancel"), Value::Null)
            .await);

        for (name, task) in tasks {
            let r = task.await.unwrap();
            let status = r.status.as_u16();
            assert!(
                status < 500,
                "round {round}: {name} answered {status}: {}",
                String::from_utf8_lossy(&r.bytes)
            );
            let allowed: &[u16] = match name {
                "checkout A" | "checkout B" => &[200, 409],
                "pay A" | "sweep" | "sweep (staff)" => &[200],
                "grant A" => &[200, 201],
                "cancel B" => &[200, 409],
                _ => unreachable!(),
            };
            assert!(
                allowed.contains(&status),
                "round {round}: {name} answered {status}: {}",
                String::from_utf8_lossy(&r.bytes)
            );
            if name.starts_with("checkout") {
                *outcomes.entry(format!("{name} {status}")).or_default() += 1;
            }
            if name == "pay A" {
                let body = r.json();
                let outcome = format!(
                    "{}/{}",
                    body["payment"]["outcome"].as_str().unwrap(),
                    body["payment"]["reason"].as_str().unwrap_or("-")
                );
                *outcomes.entry(outcome).or_default() += 1;
            }
        }

        // Rows are consistent: the membership is where its events lead, nothing was lost.
        let (status, final_expires) = status_of(&app, id).await;
        assert_eq!(
            status, "active",
            "round {round}: the staff grant always revives"
        );
        let events = events_of(&app, id, before).await;
        assert_chain(
            &events,
            (start, expires_at),
            ("active", final_expires),
            round,
        );
        let db = app.db().await;
        let row = db
            .query_one(
                "SELECT o.status, o.paid_at IS NOT NULL, p.outcome, p.reason
                 FROM orders o JOIN payments p ON p.order_id = o.id
                 WHERE o.id = $1 AND p.external_id = $2",
                &[&oa, &format!("mix-{round}")],
            )
            .await
            .unwrap();
        let (order_status, has_paid_at, outcome): (String, bool, String) =
            (row.get(0), row.get(1), row.get(2));
        let payment_events = events.iter().filter(|e| e.4 == "payment").count();
        if outcome == "applied" {
            assert_eq!((order_status.as_str(), has_paid_at), ("paid", true));
            assert_eq!(payment_events, 1, "round {round}");
        } else {
            assert_eq!(order_status, "pending", "round {round}: {outcome}");
            assert_eq!(payment_events, 0, "round {round}");
        }
        assert_eq!(
            events.iter().filter(|e| e.4 == "staff").count(),
            1,
            "round {round}: one grant"
        );
        // B's order ended cancelled (its cancel always runs) with no hold left.
        let row = db
            .query_one(
                "SELECT status, hold_until FROM orders WHERE id = $1",
                &[&ob],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "cancelled", "round {round}");
        assert_eq!(row.get::<_, Option<DateTime<Utc>>>(1), None);
        // Clean up A's unpaid order so its hold (if any) does not count next round.
        if outcome != "applied" {
            app.post(&format!("/api/orders/{oa}/cancel"), Value::Null)
                .await
                .expect(200);
        }
    }
    eprintln!("outcomes over {ROUNDS} rounds: {outcomes:?}");
}

#[tokio::test]
async fn a_renewal_committed_between_the_lock_statement_and_the_decision_is_respected() {
    // Under READ COMMITTED the statement that takes the pair locks reads from a snapshot taken
    // before them; a renewal can commit in between. Commit one exactly there and check the batch
    // writes nothing: its decision was made from the older row, and the write is conditional
    // on the row still being what the decision saw.
    let app = TestApp::spawn().await;
    let (m, _, _) = membership(&app, 1, 0).await;
    let id = m["id"].as_i64().unwrap();
    let expires_at = back_date(&app, id, chrono::Duration::hours(1)).await;

    let mut client = app.app_db().await;
    let tx = client.transaction().await.unwrap();
    let now = db_now(&app).await;
    let candidates = sweep::lock_candidates(&tx, now, &[id]).await.unwrap();
    assert_eq!(candidates.len(), 1);
    assert_eq!(
        (
            candidates[0].id,
            candidates[0].status,
            candidates[0].expires_at
        ),
        (id, sweep::Status::Active, expires_at)
    );
    assert!(candidates[0].locked);

    // The renewal that slipped in (written directly: the pair lock is ours now).
    let renewed: DateTime<Utc> = app
        .db()
        .await
        .query_one(
            "UPDATE memberships SET expires_at = statement_timestamp() + interval '30 days'
             WHERE id = $1 RETURNING expires_at",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);

    // Decided from the row as the locking statement read it: expire it.
    let decisions = sweep::decide(&candidates);
    assert_eq!(
        decisions,
        [sweep::Decision {
            id,
            from: sweep::Status::Active,
            to: sweep::Status::Expired,
            expires_at
        }]
    );
    assert!(
        sweep::apply_batch(&tx, &decisions)
            .await
            .unwrap()
            .is_empty(),
        "a decision made from an older row must write nothing"
    );
    tx.commit().await.unwrap();
    assert_eq!(status_of(&app, id).await, ("active".into(), renewed));
    assert!(sweep_events(&app, id).await.is_empty());
}
