//! A refund at the gateway that arrives before its payment, or while the payment waits for its
//! locks (API.md "Card payments reconciled with the gateway", "Either order"): the refund is
//! recorded as the payment (`refunded`, `refunded_before_payment`), so the payment that follows
//! is a duplicate and grants nothing. Whichever of the two comes first — in turn, released
//! together, or queued on the pair lock — the rows end the same: one `refunded` payment, the
//! order `paid`, no membership holding access, no grant left standing.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};

use crate::{
    payments::stripe::{post_event, session_completed, stripe_app},
    support::{
        bodies::{ListBody, PaymentBody, body_of},
        helpers::{TestApp, assert_wayforpay_accept, id, reference, wayforpay_callback},
    },
};

/// What a refunded purchase leaves behind.
#[derive(Debug, PartialEq, Eq)]
struct Left {
    /// Payments stored under the purchase's (gateway, external id).
    payments: i64,
    outcome: String,
    /// The order's status.
    order: String,
    /// Memberships of the buyer that hold access.
    access: i64,
    /// Grants sent to the buyer and not followed by a revoke.
    grants_standing: i64,
}

/// One payment refunded, the order paid, nobody let in.
fn refunded() -> Left {
    Left {
        payments: 1,
        outcome: "refunded".into(),
        order: "paid".into(),
        access: 0,
        grants_standing: 0,
    }
}

async fn left(app: &TestApp, gateway: &str, external_id: &str, order: &Value) -> Left {
    let db = app.db().await;
    let payments = db
        .query(
            "SELECT outcome FROM payments WHERE gateway = $1 AND external_id = $2",
            &[&gateway, &external_id],
        )
        .await
        .unwrap();
    let row = db
        .query_one(
            "SELECT o.status,
                    (SELECT count(*) FROM memberships m
                     WHERE m.subscriber_id = o.subscriber_id AND m.status <> 'expired'),
                    (SELECT count(*) FILTER (WHERE e.kind = 'grant')
                            - count(*) FILTER (WHERE e.kind = 'revoke')
                     FROM effects e JOIN memberships m ON m.id = e.membership_id
                     WHERE m.subscriber_id = o.subscriber_id)
             FROM orders o WHERE o.id = $1",
            &[&id(order)],
        )
        .await
        .unwrap();
    Left {
        payments: payments.len() as i64,
        outcome: payments
            .first()
            .map(|r| r.get::<_, String>(0))
            .unwrap_or_default(),
        order: row.get(0),
        access: row.get(1),
        grants_standing: row.get(2),
    }
}

/// A new buyer of a 199.00 UAH channel, and their order.
async fn buyer(app: &TestApp, user: i64) -> Value {
    let s = app.create_subscriber(user).await;
    let c = app.create_channel(-100_000_000_000 - user, json!({})).await;
    app.create_order(id(&s), id(&c)).await
}

/// The payment stored under (gateway, external id), as the staff API shows it.
async fn payment(app: &TestApp, external_id: &str) -> PaymentBody {
    let list: ListBody<PaymentBody> =
        body_of(&app.get("/api/payments?limit=200").await.expect(200));
    list.items
        .into_iter()
        .find(|p| p.external_id == external_id)
        .expect("the payment is listed")
}

async fn wayforpay(app: &TestApp, order: &Value, status: &str) {
    let r = reference(order);
    let ack = app
        .post_wayforpay(&wayforpay_callback(&r, "199", "UAH", status))
        .await
        .expect(200);
    assert_wayforpay_accept(&ack, &r);
}

/// A full `charge.refunded` of `intent`, saying what it charged (199.00 UAH) and, when
/// `order` is given, which order (the payment intent's `metadata.order`, copied to the charge).
fn charge_refunded(intent: &str, order: Option<&str>) -> Value {
    let mut charge = json!({
        "id": format!("ch_{intent}"), "object": "charge", "payment_intent": intent,
        "amount": 19900, "amount_refunded": 19900, "currency": "uah", "refunded": true,
        "created": chrono::Utc::now().timestamp() - 60, "metadata": {}
    });
    if let Some(order) = order {
        charge["metadata"] = json!({"order": order});
    }
    json!({
        "id": format!("evt_r_{intent}"), "object": "event", "type": "charge.refunded",
        "created": chrono::Utc::now().timestamp(), "data": {"object": charge}
    })
}

#[tokio::test]
async fn a_wayforpay_refund_before_approved_is_recorded_and_the_approved_grants_nothing() {
    let app = TestApp::spawn().await;
    let first = buyer(&app, 9_700_001).await;
    let r = reference(&first);

    wayforpay(&app, &first, "Refunded").await;

    let p = payment(&app, &r).await;
    assert_eq!(
        (p.outcome.as_str(), p.reason.as_deref()),
        ("refunded", Some("refunded_before_payment"))
    );
    assert_eq!(p.gateway, "wayforpay");
    assert_eq!(p.order_reference.as_deref(), Some(r.as_str()));
    assert_eq!(p.order_id, Some(id(&first)));
    assert_eq!((p.amount_minor, p.currency.as_str()), (19900, "UAH"));
    let filtered: ListBody<PaymentBody> =
        body_of(&app.get("/api/payments?outcome=refunded").await.expect(200));
    assert_eq!(filtered.items.len(), 1);

    wayforpay(&app, &first, "Approved").await;
    // Reported again, and approved again: nothing more.
    wayforpay(&app, &first, "Voided").await;
    wayforpay(&app, &first, "Approved").await;

    assert_eq!(left(&app, "wayforpay", &r, &first).await, refunded());
    assert_eq!(app.count("memberships").await, 0, "nothing was granted");
    assert_eq!(app.count("effects").await, 0, "nobody was told anything");
    assert_eq!(payment(&app, &r).await.id, p.id, "the same row");

    // The other order of the two events leaves the same rows.
    let second = buyer(&app, 9_700_002).await;
    wayforpay(&app, &second, "Approved").await;
    wayforpay(&app, &second, "Refunded").await;
    assert_eq!(
        left(&app, "wayforpay", &reference(&second), &second).await,
        refunded()
    );
}

#[tokio::test]
async fn a_stripe_refund_before_its_session_is_recorded_and_the_session_grants_nothing() {
    let app = stripe_app("http://127.0.0.1:9").await;
    let o = buyer(&app, 9_700_011).await;
    let r = reference(&o);

    let answer = post_event(&app, &charge_refunded("pi_early", Some(&r)))
        .await
        .expect(200);
    assert_eq!(answer, json!({"refund": "recorded_before_payment"}));
    let paid = post_event(&app, &session_completed(&r, "pi_early", 19900, "uah"))
        .await
        .expect(200);
    assert_eq!(paid["duplicate"], true, "{paid}");
    assert_eq!(paid["payment"]["outcome"], "refunded");
    assert_eq!(paid["payment"]["reason"], "refunded_before_payment");
    assert_eq!(paid["membership"], Value::Null);
    let again = post_event(&app, &charge_refunded("pi_early", Some(&r)))
        .await
        .expect(200);
    assert_eq!(again, json!({"refund": "already_refunded"}));
    assert_eq!(left(&app, "stripe", "pi_early", &o).await, refunded());
    assert_eq!(app.count("memberships").await, 0);

    // A charge that names no order: recorded all the same, under the payment intent; the
    // session that follows is a duplicate and grants nothing (its order is left as it was).
    let bare = buyer(&app, 9_700_012).await;
    let answer = post_event(&app, &charge_refunded("pi_bare", None))
        .await
        .expect(200);
    assert_eq!(answer, json!({"refund": "recorded_before_payment"}));
    let p = payment(&app, "pi_bare").await;
    assert_eq!((p.order_id, p.order_reference.as_deref()), (None, None));
    assert_eq!(p.reason.as_deref(), Some("refunded_before_payment"));
    let paid = post_event(
        &app,
        &session_completed(&reference(&bare), "pi_bare", 19900, "uah"),
    )
    .await
    .expect(200);
    assert_eq!(paid["duplicate"], true, "{paid}");
    let rows = left(&app, "stripe", "pi_bare", &bare).await;
    assert_eq!((rows.payments, rows.access), (1, 0), "{rows:?}");
    assert_eq!(app.count("memberships").await, 0);

    // The other order of the two events leaves the same rows.
    let second = buyer(&app, 9_700_013).await;
    let r2 = reference(&second);
    post_event(&app, &session_completed(&r2, "pi_late", 19900, "uah"))
        .await
        .expect(200);
    let answer = post_event(&app, &charge_refunded("pi_late", Some(&r2)))
        .await
        .expect(200);
    assert_eq!(answer, json!({"refund": "refunded"}));
    assert_eq!(left(&app, "stripe", "pi_late", &second).await, refunded());
}

/// Sends a refund and its payment of `order` at once, through WayForPay (`stripe: false`) or
/// Stripe, `refund_first` deciding which task starts first once both are released.
async fn race(app: &Arc<TestApp>, order: &Value, stripe: bool, refund_first: bool) {
    let r = reference(order);
    let intent = format!("pi_{r}");
    // Task 0 sends the refund when `refund_first`, the payment otherwise; task 1 the other.
    crate::support::race::race(2, |i| {
        let refund = (i == 0) == refund_first;
        let (app, r, intent) = (app.clone(), r.clone(), intent.clone());
        async move {
            if stripe {
                let event = if refund {
                    charge_refunded(&intent, Some(&r))
                } else {
                    session_completed(&r, &intent, 19900, "uah")
                };
                post_event(&app, &event).await.expect(200);
            } else {
                let status = if refund { "Refunded" } else { "Approved" };
                let ack = app
                    .post_wayforpay(&wayforpay_callback(&r, "199", "UAH", status))
                    .await
                    .expect(200);
                assert_wayforpay_accept(&ack, &r);
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refund_and_its_payment_released_together_leave_the_same_rows() {
    let app = Arc::new(stripe_app("http://127.0.0.1:9").await);
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..16 {
        let stripe = round % 2 == 1;
        let o = buyer(&app, 9_700_100 + round).await;
        race(&app, &o, stripe, round % 4 < 2).await;
        let (gateway, external_id) = if stripe {
            ("stripe", format!("pi_{}", reference(&o)))
        } else {
            ("wayforpay", reference(&o))
        };
        assert_eq!(
            left(&app, gateway, &external_id, &o).await,
            refunded(),
            "round {round} ({gateway})"
        );
        seen.insert(payment(&app, &external_id).await.reason.unwrap());
    }
    // Which came first is the race's; the rows are the same either way.
    eprintln!("reasons seen: {seen:?}");
}

/// How many sessions of this test's database wait for an advisory lock.
async fn waiting_for_pair_lock(app: &TestApp) -> i64 {
    app.count(
        "pg_locks l JOIN pg_database d ON d.oid = l.database
             WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()",
    )
    .await
}

async fn until_waiting(app: &TestApp, n: i64) {
    for _ in 0..200 {
        if waiting_for_pair_lock(app).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} sessions never waited for the pair lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refund_sent_while_its_payment_waits_for_the_pair_lock_is_not_lost() {
    let app = Arc::new(stripe_app("http://127.0.0.1:9").await);
    for round in 0..8 {
        let stripe = round % 2 == 1;
        let payment_queues_first = round % 4 < 2;
        let o = buyer(&app, 9_700_200 + round).await;
        let r = reference(&o);
        let intent = format!("pi_{r}");
        // Someone else holds the pair lock (a renewal, a sweep batch, a staff grant).
        let mut holder = app.db().await;
        let tx = holder.transaction().await.unwrap();
        tx.execute(
            "SELECT pg_advisory_xact_lock(subscriber_id, channel_id) FROM orders WHERE id = $1",
            &[&id(&o)],
        )
        .await
        .unwrap();
        let send = |refund: bool| {
            let (app, r, intent) = (app.clone(), r.clone(), intent.clone());
            tokio::spawn(async move {
                if stripe {
                    let event = if refund {
                        charge_refunded(&intent, Some(&r))
                    } else {
                        session_completed(&r, &intent, 19900, "uah")
                    };
                    post_event(&app, &event).await.expect(200)
                } else {
                    let status = if refund { "Refunded" } else { "Approved" };
                    app.post_wayforpay(&wayforpay_callback(&r, "199", "UAH", status))
                        .await
                        .expect(200)
                }
            })
        };
        let (first, second) = if payment_queues_first {
            let payment = send(false);
            until_waiting(&app, 1).await;
            (payment, send(true))
        } else {
            let refund = send(true);
            until_waiting(&app, 1).await;
            (refund, send(false))
        };
        // The second one has had its chance to answer without waiting.
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.commit().await.unwrap();
        first.await.unwrap();
        second.await.unwrap();
        let (gateway, external_id) = if stripe {
            ("stripe", intent.clone())
        } else {
            ("wayforpay", r.clone())
        };
        assert_eq!(
            left(&app, gateway, &external_id, &o).await,
            refunded(),
            "round {round} ({gateway}, payment queued first: {payment_queues_first})"
        );
    }
}
