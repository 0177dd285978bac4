//! The payment core's fast path (a read without locks, then one write that verifies under the
//! locks every row version the checks read): it writes exactly what the locked path writes, a
//! change between its read and its write sends the payment the locked way (decided on the rows
//! as they are then), payments racing on one order or one membership are applied once each, and
//! a request dropped in the middle leaves no connection inside a transaction.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration as StdDuration,
};

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use subgate::payments::core::{
    Applied, NormalizedPayment, apply_payment, apply_payment_changing_rows_between,
};

use crate::support::{
    helpers::{TestApp, db_now, id, reference},
    race::race,
};

fn delivery(reference: &str, external_id: &str) -> NormalizedPayment {
    NormalizedPayment {
        gateway: "acme".into(),
        external_id: external_id.into(),
        order_reference: reference.into(),
        amount_minor: 19900,
        currency: "UAH".into(),
        paid_at: Utc::now(),
        payer_telegram_id: None,
    }
}

/// Applies `p` with `between` run between the fast path's read and its write. Returns the
/// answer and whether `between` ran, i.e. whether the payment reached the fast path's write.
async fn apply_between(
    app: &TestApp,
    p: NormalizedPayment,
    between: impl Future<Output = ()>,
) -> (Applied, bool) {
    let ran = AtomicBool::new(false);
    let applied = apply_payment_changing_rows_between(&app.state.db, p, async {
        between.await;
        ran.store(true, Ordering::SeqCst);
    })
    .await
    .expect("the payment is answered");
    (applied, ran.load(Ordering::SeqCst))
}

/// The reason of a refused payment, `None` when applied.
fn reason(a: &Applied) -> Option<&'static str> {
    a.payment.reason.map(|r| r.as_str())
}

/// Runs `sql` with `params` on the test database (a statement that changes rows directly, as a
/// concurrent writer would).
async fn sql(app: &TestApp, sql: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]) {
    app.db().await.execute(sql, params).await.unwrap();
}

/// The membership of (subscriber, channel): its `expires_at`, and how many events it has.
async fn membership(app: &TestApp, sub: i64, chan: i64) -> Option<(DateTime<Utc>, i64)> {
    app.db()
        .await
        .query_opt(
            "SELECT m.expires_at, (SELECT count(*) FROM membership_events e
                                   WHERE e.membership_id = m.id)
             FROM memberships m WHERE m.subscriber_id = $1 AND m.channel_id = $2",
            &[&(sub as i32), &(chan as i32)],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

/// How many events the membership of (subscriber, channel) has.
async fn events_of(app: &TestApp, sub: i64, chan: i64) -> i64 {
    app.count(&format!(
        "membership_events e JOIN memberships m ON m.id = e.membership_id
         WHERE m.subscriber_id = {sub} AND m.channel_id = {chan}"
    ))
    .await
}

/// A staff grant of five days to (subscriber, channel): 201 when it creates the membership, 200
/// when it extends it.
async fn grant_five_days(app: &TestApp, sub: i64, chan: i64, status: u16) {
    app.post(
        "/api/memberships",
        json!({"subscriber_id": sub, "channel_id": chan, "days": 5}),
    )
    .await
    .expect(status);
}

/// Everything a payment wrote, with the ids, times and names that differ from payment to
/// payment left out and the links between the rows checked instead: the payment row, its
/// order, the membership, its events and its effects.
async fn written(app: &TestApp, payment_id: i64) -> Value {
    app.db()
        .await
        .query_one(
            "SELECT jsonb_build_object(
                 'payment', to_jsonb(p) - ARRAY['id', 'external_id', 'order_reference', 'order_id',
                     'subscriber_id', 'channel_id', 'paid_at', 'created_at', 'updated_at'],
                 'payment_links', p.order_reference = o.reference AND p.subscriber_id = o.subscriber_id
                     AND p.channel_id = o.channel_id,
                 'order', to_jsonb(o) - ARRAY['id', 'reference', 'subscriber_id', 'channel_id',
                     'created_at', 'paid_at', 'plan_id', 'invoice_link'],
                 'order_paid_at_is_the_payments', o.paid_at = p.paid_at,
                 'membership', to_jsonb(m) - ARRAY['id', 'subscriber_id', 'channel_id',
                     'created_at', 'updated_at', 'expires_at'],
                 'term', m.expires_at - p.created_at BETWEEN interval '29 days 23 hours'
                                                           AND interval '30 days 1 hour',
                 'events', (SELECT jsonb_agg(to_jsonb(e) - ARRAY['id', 'membership_id', 'payment_id',
                                'at', 'expires_at_after'] ORDER BY e.id)
                            FROM membership_events e WHERE e.payment_id = p.id),
                 'event_links', (SELECT bool_and(e.membership_id = m.id
                                                 AND e.expires_at_after = m.expires_at)
                                 FROM membership_events e WHERE e.payment_id = p.id),
                 'effects', (SELECT jsonb_agg(to_jsonb(f) - ARRAY['id', 'membership_id', 'payment_id',
                                 'chat_id', 'user_id', 'payload', 'dedupe_key', 'created_at',
                                 'updated_at', 'next_attempt_at', 'done_at', 'status',
                                 'attempts', 'last_error', 'lease_until', 'lease_token',
                                 'first_failed_at'] ORDER BY f.id)
                             FROM effects f WHERE f.payment_id = p.id),
                 'effect_links', (SELECT bool_and(f.membership_id = m.id
                                      AND f.chat_id = c.telegram_chat_id
                                      AND f.user_id = s.telegram_user_id
                                      AND f.dedupe_key LIKE 'grant:' || m.id || ':%'
                                      AND f.payload ->> 'expires_at' IS NOT NULL)
                                  FROM effects f WHERE f.payment_id = p.id))
             FROM payments p
             JOIN orders o ON o.id = p.order_id
             JOIN memberships m ON m.subscriber_id = p.subscriber_id AND m.channel_id = p.channel_id
             JOIN channels c ON c.id = m.channel_id
             JOIN subscribers s ON s.id = m.subscriber_id
             WHERE p.id = $1",
            &[&payment_id],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_common_payment_takes_the_fast_path_and_writes_what_the_locked_path_writes() {
    let app = TestApp::spawn().await;
    let chan = id(&app.create_channel(-40_001, json!({})).await);
    let fast_buyer = id(&app.create_subscriber(40_001).await);
    let locked_buyer = id(&app.create_subscriber(40_002).await);
    let fast_order = app.create_order(fast_buyer, chan).await;
    let locked_order = app.create_order(locked_buyer, chan).await;

    let (fast, ran) = apply_between(&app, delivery(&reference(&fast_order), "pay_fast"), async {
    })
    .await;
    assert!(ran, "a common payment reaches the fast path's write");
    // The same delivery for the other buyer, sent the locked way: its order row is touched (a
    // new row version, nothing else changed) between the read and the write.
    let touched = id(&locked_order);
    let (locked, _) = apply_between(
        &app,
        delivery(&reference(&locked_order), "pay_locked"),
        sql(
            &app,
            "UPDATE orders SET status = status WHERE id = $1",
            &[&touched],
        ),
    )
    .await;

    for a in [&fast, &locked] {
        assert!(!a.duplicate);
        assert_eq!(a.payment.outcome, "applied");
        assert_eq!(reason(a), None);
        let mut stored = app
            .get(&format!("/api/payments/{}", a.payment.id))
            .await
            .expect(200);
        // The staff view adds the fiscal receipt (none: receipts are off).
        assert_eq!(
            stored.as_object_mut().unwrap().remove("receipt"),
            Some(serde_json::Value::Null)
        );
        assert_eq!(
            stored.as_object_mut().unwrap().remove("refund"),
            Some(serde_json::Value::Null)
        );
        assert_eq!(
            serde_json::to_value(&a.payment).unwrap(),
            stored,
            "the answer is the stored payment"
        );
        let m = a.membership.as_ref().expect("the membership");
        assert_eq!(m.status.as_str(), "active");
    }
    let fast_rows = written(&app, fast.payment.id).await;
    let locked_rows = written(&app, locked.payment.id).await;
    assert_eq!(fast_rows["payment_links"], true, "{fast_rows}");
    assert_eq!(fast_rows["order_paid_at_is_the_payments"], true);
    assert_eq!(fast_rows["term"], true, "{fast_rows}");
    assert_eq!(fast_rows["event_links"], true);
    assert_eq!(fast_rows["effect_links"], true, "{fast_rows}");
    assert_eq!(fast_rows["events"].as_array().unwrap().len(), 1);
    assert_eq!(fast_rows["effects"][0]["kind"], "grant");
    assert_eq!(
        fast_rows, locked_rows,
        "both paths write the same rows, field for field"
    );

    // The fast path's answer names the rows as stored: the membership and the grant's payload.
    let m = fast.membership.unwrap();
    let row = app
        .db()
        .await
        .query_one(
            "SELECT m.id, m.expires_at, f.payload ->> 'expires_at'
             FROM memberships m JOIN effects f ON f.membership_id = m.id
             WHERE f.payment_id = $1",
            &[&fast.payment.id],
        )
        .await
        .unwrap();
    assert_eq!(m.id, row.get::<_, i64>(0));
    assert_eq!(
        serde_json::to_value(m.expires_at).unwrap(),
        serde_json::to_value(row.get::<_, DateTime<Utc>>(1)).unwrap()
    );
}

#[tokio::test]
async fn what_the_fast_path_leaves_to_the_locked_path() {
    let app = TestApp::spawn().await;
    let buyer = id(&app.create_subscriber(40_101).await);
    let limited = id(&app.create_channel(-40_101, json!({"seat_limit": 5})).await);
    let other = id(&app.create_channel(-40_102, json!({})).await);

    // A seat-limited channel: the seat check reads rows the fast path does not verify.
    let order = app.create_order(buyer, limited).await;
    let (a, ran) = apply_between(&app, delivery(&reference(&order), "pay_seat"), async {}).await;
    assert!(!ran, "a seat-limited channel takes the locked path");
    assert_eq!(a.payment.outcome, "applied");

    // A failed check: decided and stored by the locked path, with its notice.
    let order = app.create_order(buyer, other).await;
    let mut wrong = delivery(&reference(&order), "pay_wrong");
    wrong.amount_minor = 1;
    let (a, ran) = apply_between(&app, wrong, async {}).await;
    assert!(!ran);
    assert_eq!(reason(&a), Some("amount_mismatch"));

    // An unknown order, and a delivery naming its payer.
    let (a, ran) = apply_between(&app, delivery("ord_nope", "pay_unknown"), async {}).await;
    assert!(!ran);
    assert_eq!(reason(&a), Some("unknown_order"));
    let mut named = delivery(&reference(&order), "pay_named");
    named.payer_telegram_id = Some(40_101);
    let (a, ran) = apply_between(&app, named, async {}).await;
    assert!(!ran);
    assert_eq!(a.payment.outcome, "applied");

    // A stored payment is answered from the stored row, without a write.
    let (a, ran) = apply_between(&app, delivery(&reference(&order), "pay_named"), async {}).await;
    assert!(!ran);
    assert!(a.duplicate);
    assert_eq!(a.payment.outcome, "applied");
    assert_eq!(
        app.count("payments WHERE external_id = 'pay_named'").await,
        1
    );
}

/// One change between the fast path's read and its write (made by the test's `match` on its
/// name), and the reason the payment must then be refused for.
struct Case {
    name: &'static str,
    expected_reason: Option<&'static str>,
}

#[tokio::test]
async fn a_change_between_the_read_and_the_write_is_decided_by_the_locked_path() {
    let app = TestApp::spawn().await;
    // Each case: a new buyer and channel, an order, the change in between, the verdict.
    let cases = [
        Case {
            name: "order cancelled",
            expected_reason: Some("order_cancelled"),
        },
        Case {
            name: "order paid by another payment",
            expected_reason: Some("already_paid"),
        },
        Case {
            name: "channel deactivated",
            expected_reason: Some("channel_inactive"),
        },
        Case {
            name: "seat limit set, the last seat taken",
            expected_reason: Some("no_seat"),
        },
        Case {
            name: "membership made lifetime",
            expected_reason: Some("already_lifetime"),
        },
    ];
    for (i, case) in cases.iter().enumerate() {
        let i = i as i64;
        let chan = id(&app.create_channel(-40_200 - i, json!({})).await);
        let buyer = id(&app.create_subscriber(40_200 + i).await);
        // A membership to start from (a staff grant of 5 days).
        grant_five_days(&app, buyer, chan, 201).await;
        let order = app.create_order(buyer, chan).await;
        let order_id = id(&order);
        let before = events_of(&app, buyer, chan).await;
        let change = async {
            match case.name {
                "order cancelled" => {
                    app.post(&format!("/api/orders/{order_id}/cancel"), Value::Null)
                        .await
                        .expect(200);
                }
                "order paid by another payment" => {
                    let other = apply_payment(
                        &app.state.db,
                        delivery(&reference(&order), &format!("pay_other_{i}")),
                    )
                    .await
                    .unwrap();
                    assert_eq!(other.payment.outcome, "applied");
                }
                "channel deactivated" => {
                    app.patch(&format!("/api/channels/{chan}"), json!({"active": false}))
                        .await
                        .expect(200);
                }
                "seat limit set, the last seat taken" => {
                    // Another live member, then a limit of one seat: the buyer (a live member
                    // too) would renew without a seat, so the buyer's membership ends first.
                    let member = id(&app.create_subscriber(40_300 + i).await);
                    grant_five_days(&app, member, chan, 201).await;
                    sql(
                        &app,
                        "UPDATE memberships SET status = 'expired',
                                expires_at = statement_timestamp() - interval '1 day'
                         WHERE subscriber_id = $1 AND channel_id = $2",
                        &[&(buyer as i32), &(chan as i32)],
                    )
                    .await;
                    app.patch(&format!("/api/channels/{chan}"), json!({"seat_limit": 1}))
                        .await
                        .expect(200);
                }
                "membership made lifetime" => {
                    let mid: i64 = app
                        .db()
                        .await
                        .query_one(
                            "SELECT id FROM memberships WHERE subscriber_id = $1 AND channel_id = $2",
                            &[&(buyer as i32), &(chan as i32)],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    app.patch(
                        &format!("/api/memberships/{mid}"),
                        json!({"expires_at": "infinity"}),
                    )
                    .await
                    .expect(200);
                }
                other => panic!("no change {other}"),
            }
        };
        let (a, ran) = apply_between(
            &app,
            delivery(&reference(&order), &format!("pay_case_{i}")),
            change,
        )
        .await;
        assert!(
            ran,
            "{}: the payment reached the fast path's write",
            case.name
        );
        assert!(!a.duplicate, "{}", case.name);
        assert_eq!(reason(&a), case.expected_reason, "{}", case.name);
        assert_eq!(a.payment.outcome, "needs_review", "{}", case.name);
        // Nothing of this payment extended anything; the only extensions are the staff's and,
        // for the paid order, the other payment's one.
        assert_eq!(
            app.count(&format!(
                "membership_events WHERE payment_id = {}",
                a.payment.id
            ))
            .await,
            0,
            "{}",
            case.name
        );
        let events = events_of(&app, buyer, chan).await;
        let other_payment = i64::from(case.name == "order paid by another payment");
        let staff_change = i64::from(case.name == "membership made lifetime");
        assert_eq!(
            events,
            before + other_payment + staff_change,
            "{}",
            case.name
        );
        assert_eq!(
            app.count(&format!(
                "payments WHERE order_id = {order_id} AND outcome = 'applied'"
            ))
            .await,
            other_payment,
            "{}",
            case.name
        );
    }
}

#[tokio::test]
async fn a_membership_or_plan_changed_between_the_read_and_the_write_is_extended_as_it_is_then() {
    let app = TestApp::spawn().await;

    // A membership created in between (none was read): the payment extends it, from its end.
    let chan = id(&app.create_channel(-40_401, json!({})).await);
    let buyer = id(&app.create_subscriber(40_401).await);
    let order = app.create_order(buyer, chan).await;
    let (a, ran) = apply_between(&app, delivery(&reference(&order), "pay_created"), async {
        grant_five_days(&app, buyer, chan, 201).await;
    })
    .await;
    assert!(ran);
    assert_eq!(a.payment.outcome, "applied");
    let (expires, events) = membership(&app, buyer, chan).await.unwrap();
    assert_eq!(events, 2, "the staff grant and the payment");
    let now = db_now(&app).await;
    let expected = now + Duration::days(35);
    assert!(
        (expires - expected).num_seconds().abs() < 60,
        "5 days of the staff grant, then 30 of the payment: {expires}, not {expected}"
    );

    // A membership extended in between: the payment extends the new end, not the one read.
    let order = app.create_order(buyer, chan).await;
    let (a, ran) = apply_between(&app, delivery(&reference(&order), "pay_extended"), async {
        grant_five_days(&app, buyer, chan, 200).await;
    })
    .await;
    assert!(ran);
    assert_eq!(a.payment.outcome, "applied");
    let (after, events) = membership(&app, buyer, chan).await.unwrap();
    assert_eq!(events, 4);
    assert_eq!(after, expires + Duration::days(35));

    // The plan's period changed in between (a plan of its own: its row only; then the
    // channel's period, which changes its default plan and the channel row): the payment buys
    // the new period.
    for (k, days) in [(1, 7), (2, 9)] {
        let chan = id(&app.create_channel(-40_402 - k, json!({})).await);
        let order = if k == 1 {
            let plan = app
                .post(
                    "/api/plans",
                    json!({"title": "Monthly", "channel_ids": [chan], "price_minor": 19900,
                           "period_days": 30}),
                )
                .await
                .expect(201);
            app.post(
                "/api/orders",
                json!({"subscriber_id": buyer, "plan_id": id(&plan)}),
            )
            .await
            .expect(201)
        } else {
            app.create_order(buyer, chan).await
        };
        let plan = order["plan_id"].as_i64().expect("the order's plan");
        let (a, ran) = apply_between(
            &app,
            delivery(&reference(&order), &format!("pay_period_{k}")),
            async {
                let (path, body) = if k == 1 {
                    (format!("/api/plans/{plan}"), json!({"period_days": days}))
                } else {
                    (
                        format!("/api/channels/{chan}"),
                        json!({"billing_period_days": days}),
                    )
                };
                app.patch(&path, body).await.expect(200);
            },
        )
        .await;
        assert!(ran);
        assert_eq!(a.payment.outcome, "applied");
        let (expires, _) = membership(&app, buyer, chan).await.unwrap();
        let expected = db_now(&app).await + Duration::days(days);
        assert!(
            (expires - expected).num_seconds().abs() < 60,
            "the new period: {expires}, not {expected}"
        );
    }

    // The same payment delivered in between: answered as the duplicate it now is, once.
    let order = app.create_order(buyer, chan).await;
    let reference = reference(&order);
    let (a, ran) = apply_between(&app, delivery(&reference, "pay_twice"), async {
        let first = apply_payment(&app.state.db, delivery(&reference, "pay_twice"))
            .await
            .unwrap();
        assert!(!first.duplicate);
    })
    .await;
    assert!(ran);
    assert!(a.duplicate);
    assert_eq!(a.payment.outcome, "applied");
    assert_eq!(
        app.count("payments WHERE external_id = 'pay_twice'").await,
        1
    );
    let pid = a.payment.id;
    assert_eq!(
        app.count(&format!("membership_events WHERE payment_id = {pid}"))
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payments_racing_for_one_order_or_one_membership_are_applied_once_each() {
    let app = Arc::new(TestApp::spawn().await);
    let chan = id(&app.create_channel(-40_501, json!({})).await);
    let buyer = id(&app.create_subscriber(40_501).await);
    const RACERS: usize = 6;
    for round in 0..10 {
        // Six payments of one order: one pays it, five find it paid.
        let order = app.create_order(buyer, chan).await;
        let before = membership(&app, buyer, chan).await;
        let mut reasons = Vec::new();
        for a in race(RACERS, |k| {
            let app = app.clone();
            let p = delivery(&reference(&order), &format!("pay_{round}_{k}"));
            async move { apply_payment(&app.state.db, p).await.unwrap() }
        })
        .await
        {
            reasons.push(reason(&a));
        }
        reasons.sort();
        let mut expected = vec![Some("already_paid"); RACERS - 1];
        expected.insert(0, None);
        assert_eq!(reasons, expected, "round {round}");
        let (expires, events) = membership(&app, buyer, chan).await.unwrap();
        match before {
            Some((was, n)) => {
                assert_eq!(events, n + 1, "round {round}: one extension");
                assert_eq!(expires, was + Duration::days(30), "round {round}");
            }
            None => assert_eq!(events, 1),
        }

        // Six orders of the same buyer and channel, paid at once: six extensions, none lost.
        let orders: Vec<Value> = {
            let mut v = Vec::new();
            for _ in 0..RACERS {
                v.push(app.create_order(buyer, chan).await);
            }
            v
        };
        let (was, n) = membership(&app, buyer, chan).await.unwrap();
        for a in race(RACERS, |k| {
            let app = app.clone();
            let p = delivery(&reference(&orders[k]), &format!("pay_{round}_many_{k}"));
            async move { apply_payment(&app.state.db, p).await.unwrap() }
        })
        .await
        {
            assert_eq!(a.payment.outcome, "applied", "round {round}");
        }
        let (expires, events) = membership(&app, buyer, chan).await.unwrap();
        assert_eq!(events, n + RACERS as i64, "round {round}");
        assert_eq!(
            expires,
            was + Duration::days(30 * RACERS as i64),
            "round {round}: every payment extended the term once"
        );
    }
    // Every event continues the one before it.
    let gaps = app
        .count(
            "(SELECT expires_at_before, lag(expires_at_after) OVER (ORDER BY id) AS prev
              FROM membership_events) e
             WHERE prev IS NOT NULL AND expires_at_before IS DISTINCT FROM prev",
        )
        .await;
    assert_eq!(gaps, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_dropped_midway_leaves_no_connection_in_a_transaction_and_no_money_without_access()
 {
    let app = Arc::new(TestApp::spawn().await);
    let chan = id(&app.create_channel(-40_601, json!({})).await);
    let buyer = id(&app.create_subscriber(40_601).await);
    for k in 0..40u64 {
        let order = app.create_order(buyer, chan).await;
        let p = delivery(&reference(&order), &format!("pay_dropped_{k}"));
        let pool = app.state.db.clone();
        let task = tokio::spawn(async move { apply_payment(&pool, p).await });
        // Dropped at a different point each time: before, during and after its round trips.
        tokio::time::sleep(StdDuration::from_micros(50 * k)).await;
        task.abort();
        let _ = task.await;
    }
    // The pool still works, and hands out connections outside any transaction.
    let order = app.create_order(buyer, chan).await;
    let a = apply_payment(&app.state.db, delivery(&reference(&order), "pay_after"))
        .await
        .unwrap();
    assert_eq!(a.payment.outcome, "applied");
    let mut idle_in_transaction = -1;
    for _ in 0..50 {
        idle_in_transaction = app
            .count(
                "pg_stat_activity WHERE datname = current_database()
                 AND state LIKE 'idle in transaction%'",
            )
            .await;
        if idle_in_transaction == 0 {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
    assert_eq!(
        idle_in_transaction, 0,
        "a connection was left inside a transaction"
    );
    // Whatever committed committed whole: every applied payment paid its order and extended
    // the membership once; every paid order has its applied payment.
    let applied = app.count("payments WHERE outcome = 'applied'").await;
    assert!(applied >= 1);
    assert_eq!(app.count("orders WHERE status = 'paid'").await, applied);
    assert_eq!(
        app.count("membership_events WHERE payment_id IS NOT NULL")
            .await,
        applied
    );
    assert_eq!(
        app.count(
            "payments p WHERE outcome = 'applied' AND NOT EXISTS
                 (SELECT 1 FROM effects f WHERE f.payment_id = p.id)"
        )
        .await,
        0
    );
    let (expires, _) = membership(&app, buyer, chan).await.unwrap();
    let first: DateTime<Utc> = app
        .db()
        .await
        .query_one(
            "SELECT expires_at_after FROM membership_events ORDER BY id LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(expires, first + Duration::days(30 * (applied - 1)));
}
