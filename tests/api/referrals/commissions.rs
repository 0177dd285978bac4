//! The commission lines as staff list and export them: the status as it reads now, the
//! filters, pages, and the CSV.

use serde_json::json;

use super::setup::{Line, affiliate, insert_line};
use crate::{
    ops::openapi::{assert_valid, document, response_schema},
    staff::auth::assert_problem,
    support::{
        bodies::{CommissionLineBody, ListBody, body_of},
        helpers::{TestApp, db_now, id},
    },
};

fn ids(page: &ListBody<CommissionLineBody>) -> Vec<i64> {
    page.items.iter().map(|l| l.id).collect()
}

#[tokio::test]
async fn lines_read_their_status_now_and_filter_by_it() {
    let app = TestApp::spawn().await;
    let doc = document();
    let a = id(&affiliate(&app, "Ann").await);
    let b = id(&affiliate(&app, "Bob").await);
    let buyer = id(&app.create_subscriber(300_000_001).await);
    let (payable, payment) = insert_line(
        &app,
        Line {
            subscriber_id: Some(buyer),
            ..Line::payable(a, 3000)
        },
    )
    .await;
    let (pending, _) = insert_line(
        &app,
        Line {
            due: false,
            ..Line::payable(a, 900)
        },
    )
    .await;
    let (reversed, _) = insert_line(
        &app,
        Line {
            status: "reversed",
            ..Line::payable(a, 1200)
        },
    )
    .await;
    let (reversal, _) = insert_line(
        &app,
        Line {
            kind: "reversal",
            amount_minor: -700,
            ..Line::payable(a, 0)
        },
    )
    .await;
    let (xtr, _) = insert_line(
        &app,
        Line {
            currency: "XTR",
            ..Line::payable(b, 50)
        },
    )
    .await;

    let all = app.get("/api/commissions").await.expect(200);
    assert_valid(
        &doc,
        &response_schema(&doc, "get", "/api/commissions", 200),
        &all,
    );
    let all: ListBody<CommissionLineBody> = body_of(&all);
    assert_eq!(ids(&all), [payable, pending, reversed, reversal, xtr]);
    let first = &all.items[0];
    assert_eq!(first.affiliate_id, a);
    assert_eq!(first.payment_id, payment);
    assert_eq!(first.subscriber_id, Some(buyer));
    assert_eq!(first.kind, "first");
    assert_eq!(first.amount_minor, 3000);
    assert_eq!(first.currency, "UAH");
    assert_eq!(first.percent, 30);
    assert_eq!(first.base_minor, 10_000);
    assert_eq!(first.status, "payable");
    assert_eq!(first.payout_id, None);
    assert_eq!(first.reversed_at, None);
    assert_eq!(all.items[1].status, "pending");
    assert_eq!(all.items[2].status, "reversed");
    assert!(all.items[2].reversed_at.is_some());
    assert_eq!(all.items[3].kind, "reversal");
    assert_eq!(all.items[3].amount_minor, -700);

    for (query, expected) in [
        (
            format!("affiliate_id={a}"),
            vec![payable, pending, reversed, reversal],
        ),
        (format!("affiliate_id={b}"), vec![xtr]),
        ("status=payable".into(), vec![payable, reversal, xtr]),
        ("status=pending".into(), vec![pending]),
        ("status=reversed".into(), vec![reversed]),
        ("status=paid".into(), vec![]),
        (
            format!("affiliate_id={a}&status=payable"),
            vec![payable, reversal],
        ),
        ("kind=reversal".into(), vec![reversal]),
        ("currency=XTR".into(), vec![xtr]),
        (
            "from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z".into(),
            vec![payable, pending, reversed, reversal, xtr],
        ),
        ("to=2000-01-01T00:00:00Z".into(), vec![]),
    ] {
        let page: ListBody<CommissionLineBody> = body_of(
            &app.get(&format!("/api/commissions?{query}"))
                .await
                .expect(200),
        );
        assert_eq!(ids(&page), expected, "{query}");
    }
    // After a payout, the paid lines read `paid` and carry it.
    let p = app
        .post(
            "/api/payouts",
            json!({"affiliate_id": a, "currency": "UAH"}),
        )
        .await
        .expect(201);
    let paid: ListBody<CommissionLineBody> = body_of(
        &app.get(&format!("/api/commissions?payout_id={}", id(&p)))
            .await
            .expect(200),
    );
    assert_eq!(ids(&paid), [payable, reversal]);
    assert!(
        paid.items
            .iter()
            .all(|l| l.status == "paid" && l.payout_id == Some(id(&p)))
    );
    let by_status: ListBody<CommissionLineBody> =
        body_of(&app.get("/api/commissions?status=paid").await.expect(200));
    assert_eq!(ids(&by_status), [payable, reversal]);

    let page: ListBody<CommissionLineBody> =
        body_of(&app.get("/api/commissions?limit=2").await.expect(200));
    assert_eq!(ids(&page), [payable, pending]);
    assert_eq!(page.next_after, Some(pending));

    for query in [
        "status=owed",
        "kind=bonus",
        "currency=uah",
        "limit=201",
        "from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z",
    ] {
        assert_problem(&app.get(&format!("/api/commissions?{query}")).await, 422);
    }
    assert_problem(&app.get("/api/commissions?affiliate=1").await, 400);
    assert_problem(&app.get("/api/commissions?from=yesterday").await, 400);
}

#[tokio::test]
async fn the_csv_has_a_header_and_every_matching_line() {
    let app = TestApp::spawn().await;
    let a = id(&affiliate(&app, "Ann").await);
    let (one, p1) = insert_line(&app, Line::payable(a, 3000)).await;
    let (two, p2) = insert_line(
        &app,
        Line {
            due: false,
            ..Line::payable(a, 900)
        },
    )
    .await;
    let (three, _) = insert_line(
        &app,
        Line {
            kind: "reversal",
            amount_minor: -3000,
            payment_id: Some(p1),
            ..Line::payable(a, 0)
        },
    )
    .await;

    let r = app.get("/api/commissions.csv").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/csv; charset=utf-8; header=present")
    );
    assert_eq!(
        r.header("content-disposition"),
        Some("attachment; filename=\"commissions.csv\"")
    );
    let text = String::from_utf8(r.bytes.clone()).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(
        reader.headers().unwrap().iter().collect::<Vec<_>>(),
        [
            "id",
            "affiliate_id",
            "payment_id",
            "subscriber_id",
            "kind",
            "amount_minor",
            "currency",
            "percent",
            "base_minor",
            "status",
            "payable_at",
            "payout_id",
            "created_at",
            "reversed_at"
        ]
    );
    let rows: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0][0], one.to_string());
    assert_eq!(rows[0][2], p1.to_string());
    assert_eq!(rows[0][3], "");
    assert_eq!(rows[0][4], "first");
    assert_eq!(rows[0][5], "3000");
    assert_eq!(rows[0][9], "payable");
    assert_eq!(rows[1][0], two.to_string());
    assert_eq!(rows[1][2], p2.to_string());
    assert_eq!(rows[1][9], "pending");
    // A negative amount stays a number.
    assert_eq!(rows[2][0], three.to_string());
    assert_eq!(rows[2][5], "-3000");
    assert!(text.ends_with("\r\n") && text.contains("\r\n"));

    let payable = app.get("/api/commissions.csv?status=payable").await;
    assert_eq!(payable.status, 200);
    let text = String::from_utf8(payable.bytes).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    let now = db_now(&app).await + chrono::Duration::days(1);
    let none = app
        .get(&format!(
            "/api/commissions.csv?from={}",
            now.format("%Y-%m-%dT%H:%M:%SZ")
        ))
        .await;
    assert_eq!(String::from_utf8(none.bytes).unwrap().lines().count(), 1);
    assert_problem(&app.get("/api/commissions.csv?status=owed").await, 422);
    assert_problem(&app.get("/api/commissions.csv?limit=5").await, 400);
}

#[tokio::test]
async fn the_csv_streams_every_page() {
    let app = TestApp::spawn().await;
    let a = id(&affiliate(&app, "Ann").await);
    // Past one page of the export (1000 rows).
    for _ in 0..1001 {
        insert_line(&app, Line::payable(a, 100)).await;
    }
    let r = app.get("/api/commissions.csv").await;
    assert_eq!(r.status, 200);
    let mut reader = csv::Reader::from_reader(r.bytes.as_slice());
    let ids: Vec<i64> = reader
        .records()
        .map(|r| r.unwrap()[0].parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 1001);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
}
