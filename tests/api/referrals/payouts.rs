//! Payouts: every payable line of a currency paid once, reversals netted, nothing paid when
//! there is nothing to pay (or the net is not positive), the `payout.recorded` event, roles,
//! and concurrent payouts of one affiliate.

use axum::http::Method;
use serde_json::{Value, json};

use super::setup::{Line, affiliate, insert_line};
use crate::{
    ops::openapi::{assert_valid, document, response_schema},
    outbox::outbound::{app as app_with_outbound, endpoint},
    staff::auth::assert_problem,
    support::{
        bodies::{ListBody, PayoutBody, body_of},
        helpers::{TestApp, id},
        race::race,
    },
};

/// `(status, payout_id)` of each line of affiliate `a`, by id.
async fn line_states(app: &TestApp, a: i64) -> Vec<(String, Option<i64>)> {
    app.db()
        .await
        .query(
            "SELECT status, payout_id FROM commission_lines WHERE affiliate_id = $1 ORDER BY id",
            &[&(a as i32)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("status"), r.get("payout_id")))
        .collect()
}

async fn pay(app: &TestApp, a: i64, currency: &str) -> crate::support::helpers::TestResponse {
    app.post(
        "/api/payouts",
        json!({"affiliate_id": a, "currency": currency}),
    )
    .await
}

#[tokio::test]
async fn a_payout_pays_every_payable_line_of_its_currency_netting_reversals() {
    let app = TestApp::spawn().await;
    let doc = document();
    let a = id(&affiliate(&app, "Ann").await);
    let other = id(&affiliate(&app, "Bob").await);
    let (_, refunded) = insert_line(&app, Line::payable(a, 3000)).await;
    insert_line(&app, Line::payable(a, 1200)).await;
    insert_line(
        &app,
        Line {
            due: false,
            ..Line::payable(a, 900)
        },
    )
    .await;
    insert_line(
        &app,
        Line {
            status: "reversed",
            ..Line::payable(a, 500)
        },
    )
    .await;
    insert_line(
        &app,
        Line {
            currency: "XTR",
            ..Line::payable(a, 70)
        },
    )
    .await;
    insert_line(&app, Line::payable(other, 4000)).await;

    let r = pay(&app, a, "UAH").await.expect(201);
    assert_valid(
        &doc,
        &response_schema(&doc, "post", "/api/payouts", 201),
        &r,
    );
    let first: PayoutBody = body_of(&r);
    assert_eq!(first.affiliate_id, a);
    assert_eq!(first.currency, "UAH");
    assert_eq!(first.amount_minor, 4200);
    assert_eq!(first.lines, 2);
    let p1 = Some(first.id);
    assert_eq!(
        line_states(&app, a).await,
        [
            ("paid".into(), p1),
            ("paid".into(), p1),
            ("pending".into(), None),
            ("reversed".into(), None),
            ("pending".into(), None),
        ]
    );

    // The first payment is refunded after its line was paid: a reversal of -3000, and a new
    // line of 1000. Their net is negative: nothing is paid, nothing changes.
    insert_line(
        &app,
        Line {
            kind: "reversal",
            amount_minor: -3000,
            payment_id: Some(refunded),
            ..Line::payable(a, 0)
        },
    )
    .await;
    insert_line(&app, Line::payable(a, 1000)).await;
    let before = line_states(&app, a).await;
    let problem = assert_problem(&pay(&app, a, "UAH").await, 409);
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("-2000") && detail.contains("2 lines"),
        "{detail}"
    );
    assert_eq!(line_states(&app, a).await, before);
    assert_eq!(app.count("payouts").await, 1);

    // More earned: the next payout nets the reversal (1000 + 2500 - 3000).
    insert_line(&app, Line::payable(a, 2500)).await;
    let second: PayoutBody = body_of(&pay(&app, a, "UAH").await.expect(201));
    assert_eq!(second.amount_minor, 500);
    assert_eq!(second.lines, 3);
    let states = line_states(&app, a).await;
    assert_eq!(states[5], ("paid".into(), Some(second.id)));
    assert_eq!(states[6], ("paid".into(), Some(second.id)));
    assert_eq!(states[7], ("paid".into(), Some(second.id)));
    // The pending line, the reversed line and the XTR line are untouched.
    assert_eq!(states[2], ("pending".into(), None));
    assert_eq!(states[3], ("reversed".into(), None));
    assert_eq!(states[4], ("pending".into(), None));

    // Nothing payable left in UAH: 409 naming it.
    let problem = assert_problem(&pay(&app, a, "UAH").await, 409);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("no payable UAH lines"),
        "{problem}"
    );
    // XTR is its own payout.
    let xtr: PayoutBody = body_of(&pay(&app, a, "XTR").await.expect(201));
    assert_eq!((xtr.amount_minor, xtr.lines), (70, 1));

    // The sum of the payouts is what the paid lines add up to.
    let paid_sum: i64 = app
        .db()
        .await
        .query_one(
            "SELECT sum(amount_minor)::bigint FROM commission_lines
             WHERE affiliate_id = $1 AND status = 'paid' AND currency = 'UAH'",
            &[&(a as i32)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(paid_sum, 4200 + 500);

    let list: ListBody<PayoutBody> = body_of(
        &app.get(&format!("/api/payouts?affiliate_id={a}"))
            .await
            .expect(200),
    );
    assert_eq!(
        list.items.iter().map(|p| p.id).collect::<Vec<_>>(),
        [first.id, second.id, xtr.id]
    );
    let uah: ListBody<PayoutBody> =
        body_of(&app.get("/api/payouts?currency=UAH").await.expect(200));
    assert_eq!(uah.items.len(), 2);
    let none: ListBody<PayoutBody> = body_of(
        &app.get(&format!("/api/payouts?affiliate_id={other}"))
            .await
            .expect(200),
    );
    assert!(none.items.is_empty());
    let one: PayoutBody = body_of(
        &app.get(&format!("/api/payouts/{}", second.id))
            .await
            .expect(200),
    );
    assert_eq!(one.amount_minor, 500);
    assert_problem(&app.get("/api/payouts/987654").await, 404);

    let audit: Vec<(String, Option<i64>)> = app
        .db()
        .await
        .query(
            "SELECT action, target_id FROM audit_log WHERE target_type = 'payout' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("action"), r.get("target_id")))
        .collect();
    assert_eq!(
        audit,
        [
            ("payout.create".to_string(), Some(first.id)),
            ("payout.create".to_string(), Some(second.id)),
            ("payout.create".to_string(), Some(xtr.id)),
        ]
    );
    let staff: Option<i32> = app
        .db()
        .await
        .query_one("SELECT staff_id FROM payouts WHERE id = $1", &[&first.id])
        .await
        .unwrap()
        .get(0);
    assert!(staff.is_some());
}

#[tokio::test]
async fn a_payout_of_nothing_or_of_no_affiliate_is_refused() {
    let app = TestApp::spawn().await;
    let a = id(&affiliate(&app, "Ann").await);
    let problem = assert_problem(&pay(&app, a, "UAH").await, 409);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("no payable UAH lines")
    );
    // Held lines are not payable yet.
    insert_line(
        &app,
        Line {
            due: false,
            ..Line::payable(a, 900)
        },
    )
    .await;
    assert_problem(&pay(&app, a, "UAH").await, 409);
    // A lone payable reversal: a negative balance, carried.
    insert_line(
        &app,
        Line {
            kind: "reversal",
            amount_minor: -100,
            ..Line::payable(a, 0)
        },
    )
    .await;
    let problem = assert_problem(&pay(&app, a, "UAH").await, 409);
    assert!(
        problem["detail"].as_str().unwrap().contains("-100"),
        "{problem}"
    );
    assert_eq!(app.count("payouts").await, 0);
    assert_eq!(app.count("commission_lines WHERE status = 'paid'").await, 0);

    assert_problem(&pay(&app, 987654, "UAH").await, 404);
    for (body, field) in [
        (json!({"currency": "UAH"}), "affiliate_id"),
        (json!({"affiliate_id": a}), "currency"),
        (json!({"affiliate_id": a, "currency": "uah"}), "currency"),
        (json!({"affiliate_id": a, "currency": "EURO"}), "currency"),
    ] {
        let problem = assert_problem(&app.post("/api/payouts", body.clone()).await, 422);
        assert!(problem["errors"][field].is_string(), "{body}: {problem}");
    }
    assert_problem(
        &app.post(
            "/api/payouts",
            json!({"affiliate_id": "1", "currency": "UAH"}),
        )
        .await,
        400,
    );
    assert_problem(&app.get("/api/payouts?currency=uah").await, 422);
}

#[tokio::test]
async fn only_an_admin_records_a_payout() {
    let app = TestApp::spawn().await;
    let a = id(&affiliate(&app, "Ann").await);
    insert_line(&app, Line::payable(a, 1000)).await;
    for role in ["viewer", "support"] {
        let auth = format!("Bearer {}", app.token_of_role(role).await);
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        let r = app
            .request(
                Method::POST,
                "/api/payouts",
                &headers,
                json!({"affiliate_id": a, "currency": "UAH"}).to_string(),
            )
            .await;
        assert_problem(&r, 403);
        for path in ["/api/payouts", "/api/commissions", "/api/commissions.csv"] {
            assert_eq!(
                app.request(Method::GET, path, &headers, "").await.status,
                200,
                "{role} {path}"
            );
        }
    }
    assert_eq!(app.count("payouts").await, 0);
    // An Idempotency-Key replays the payout instead of refusing a second one.
    let key = [("idempotency-key", "payout-1")];
    let body = json!({"affiliate_id": a, "currency": "UAH"});
    let first = app
        .staff_with(Method::POST, "/api/payouts", body.clone(), &key)
        .await;
    first.expect(201);
    let again = app
        .staff_with(Method::POST, "/api/payouts", body, &key)
        .await;
    again.expect(201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.bytes, first.bytes);
    assert_eq!(app.count("payouts").await, 1);
}

#[tokio::test]
async fn a_payout_writes_its_outbound_event() {
    let app = app_with_outbound().await;
    // The endpoints API takes the four referral event types.
    let (endpoint_id, _) = endpoint(
        &app,
        "http://127.0.0.1:9/hook",
        &[
            "payout.recorded",
            "referral.attributed",
            "commission.created",
            "commission.reversed",
        ],
    )
    .await;
    assert!(endpoint_id > 0);
    let a = id(&affiliate(&app, "Ann").await);
    insert_line(&app, Line::payable(a, 1000)).await;
    insert_line(&app, Line::payable(a, 234)).await;
    let p = pay(&app, a, "UAH").await.expect(201);
    let events: Vec<Value> = app
        .db()
        .await
        .query(
            "SELECT body FROM webhook_events WHERE type = 'payout.recorded' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>("body")).unwrap())
        .collect();
    assert_eq!(events.len(), 1);
    let data = &events[0]["data"];
    assert_eq!(events[0]["type"], "payout.recorded");
    assert_eq!(data["id"], p["id"]);
    assert_eq!(data["affiliate_id"], a);
    assert_eq!(data["currency"], "UAH");
    assert_eq!(data["amount_minor"], 1234);
    assert_eq!(data["lines"], 2);
    assert_eq!(
        app.count(
            "webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
                   WHERE e.type = 'payout.recorded'"
        )
        .await,
        1
    );
    // A refused payout writes none.
    assert_problem(&pay(&app, a, "UAH").await, 409);
    assert_eq!(
        app.count("webhook_events WHERE type = 'payout.recorded'")
            .await,
        1
    );
}

#[tokio::test]
async fn concurrent_payouts_of_one_affiliate_pay_each_line_once() {
    let app = TestApp::spawn().await;
    for round in 0..8 {
        let a = id(&affiliate(&app, &format!("Round {round}")).await);
        let mut expected = 0;
        for n in 0..5 {
            let amount = 100 * (n + 1) + round;
            insert_line(&app, Line::payable(a, amount)).await;
            expected += amount;
        }
        insert_line(
            &app,
            Line {
                kind: "reversal",
                amount_minor: -50,
                ..Line::payable(a, 0)
            },
        )
        .await;
        expected -= 50;
        let app = &app;
        let token = app.token().await;
        let statuses = race(6, |_| {
            let router = app.router.clone();
            let token = token.clone();
            async move {
                let req = axum::http::Request::builder()
                    .method(Method::POST)
                    .uri("/api/payouts")
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(
                        json!({"affiliate_id": a, "currency": "UAH"}).to_string(),
                    ))
                    .unwrap();
                tower::ServiceExt::oneshot(router, req)
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            }
        })
        .await;
        let mut sorted = statuses.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [201, 409, 409, 409, 409, 409], "round {round}");
        let db = app.db().await;
        let row = db
            .query_one(
                "SELECT count(*) AS n, sum(amount_minor)::bigint AS amount, sum(lines)::bigint
                     AS lines
                 FROM payouts WHERE affiliate_id = $1",
                &[&(a as i32)],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>("n"), 1, "round {round}");
        assert_eq!(row.get::<_, i64>("amount"), expected, "round {round}");
        assert_eq!(row.get::<_, i64>("lines"), 6, "round {round}");
        let unpaid = app
            .count(&format!(
                "commission_lines WHERE affiliate_id = {a} AND status <> 'paid'"
            ))
            .await;
        assert_eq!(unpaid, 0, "round {round}");
    }
}
