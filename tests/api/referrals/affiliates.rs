//! Affiliates: codes given (any case, stored upper case) and drawn, their uniqueness, the link,
//! one affiliate per buyer, pages and filters, deactivation (never deletion), roles, the
//! `Idempotency-Key`, and the summary's numbers.

use std::collections::BTreeSet;

use axum::http::Method;
use serde_json::{Value, json};

use super::setup::{Line, affiliate, insert_line};
use crate::{
    ops::openapi::{assert_valid, document, response_schema},
    staff::auth::assert_problem,
    support::{
        bodies::{AffiliateBody, ListBody, body_of},
        helpers::{TestApp, id},
    },
};

#[tokio::test]
async fn a_code_is_given_in_any_case_or_drawn_and_is_unique() {
    let app = TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_BOT_USERNAME".into(), "subgate_bot".into());
    })
    .await;
    let doc = document();
    let r = app
        .post(
            "/api/affiliates",
            json!({"name": "Crypto Daily", "code": "crypto_daily"}),
        )
        .await
        .expect(201);
    assert_valid(
        &doc,
        &response_schema(&doc, "post", "/api/affiliates", 201),
        &r,
    );
    let a: AffiliateBody = body_of(&r);
    assert_eq!(a.code, "CRYPTO_DAILY");
    assert_eq!(a.name, "Crypto Daily");
    assert_eq!(a.subscriber_id, None);
    assert!(a.active);
    assert_eq!(
        a.link.as_deref(),
        Some("https://t.me/subgate_bot?start=r_CRYPTO_DAILY")
    );
    assert_eq!(a.created_at, a.updated_at);

    // Taken, in any case: 409, nothing written.
    for code in ["CRYPTO_DAILY", "Crypto_Daily"] {
        let r = app
            .post("/api/affiliates", json!({"name": "Copycat", "code": code}))
            .await;
        let problem = assert_problem(&r, 409);
        assert!(
            problem["detail"].as_str().unwrap().contains("code"),
            "{problem}"
        );
    }
    assert_eq!(app.count("affiliates").await, 1);

    // Drawn: eight upper-case letters and digits, all different.
    let mut codes = BTreeSet::new();
    for i in 0..40 {
        let a: AffiliateBody = body_of(&affiliate(&app, &format!("Partner {i}")).await);
        assert_eq!(a.code.len(), 8, "{}", a.code);
        assert!(
            a.code
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()),
            "{}",
            a.code
        );
        assert_eq!(
            a.link,
            Some(format!("https://t.me/subgate_bot?start=r_{}", a.code))
        );
        codes.insert(a.code);
    }
    assert_eq!(codes.len(), 40);
    let stored: i64 = app
        .db()
        .await
        .query_one("SELECT count(DISTINCT code) FROM affiliates", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 41);
}

#[tokio::test]
async fn invalid_fields_are_422s_naming_each() {
    let app = TestApp::spawn().await;
    for (body, field) in [
        (json!({}), "name"),
        (json!({"name": null}), "name"),
        (json!({"name": ""}), "name"),
        (json!({"name": "   "}), "name"),
        (json!({"name": "x".repeat(201)}), "name"),
        (json!({"name": "Ann\u{0}"}), "name"),
        (json!({"name": "Ann", "code": "AB"}), "code"),
        (json!({"name": "Ann", "code": "WITH-DASH"}), "code"),
        (json!({"name": "Ann", "code": "Z".repeat(33)}), "code"),
        (json!({"name": "Ann", "code": "ÄBC"}), "code"),
        (
            json!({"name": "Ann", "subscriber_id": 987654}),
            "subscriber_id",
        ),
    ] {
        let r = app.post("/api/affiliates", body.clone()).await;
        let problem = assert_problem(&r, 422);
        assert!(problem["errors"][field].is_string(), "{body}: {problem}");
    }
    assert_problem(&app.post("/api/affiliates", json!({"name": 5})).await, 400);
    assert_problem(
        &app.post("/api/affiliates", json!({"name": "A", "link": "x"}))
            .await,
        400,
    );
    assert_eq!(app.count("affiliates").await, 0);
    // Without TELEGRAM_BOT_USERNAME there is no link.
    let a: AffiliateBody = body_of(&affiliate(&app, "Ann").await);
    assert_eq!(a.link, None);
}

#[tokio::test]
async fn a_buyer_is_the_affiliate_of_one_affiliate_row_at_most() {
    let app = TestApp::spawn().await;
    let buyer = app.create_subscriber(100_000_001).await;
    let first = app
        .post(
            "/api/affiliates",
            json!({"name": "Ann", "subscriber_id": id(&buyer)}),
        )
        .await
        .expect(201);
    assert_eq!(first["subscriber_id"], id(&buyer));
    let r = app
        .post(
            "/api/affiliates",
            json!({"name": "Ann again", "subscriber_id": id(&buyer)}),
        )
        .await;
    let problem = assert_problem(&r, 422);
    assert_eq!(
        problem["errors"]["subscriber_id"],
        format!("this subscriber is already affiliate {}", id(&first))
    );
    assert_eq!(app.count("affiliates").await, 1);

    let found: ListBody<AffiliateBody> = body_of(
        &app.get(&format!("/api/affiliates?subscriber_id={}", id(&buyer)))
            .await
            .expect(200),
    );
    assert_eq!(found.items.len(), 1);
    assert_eq!(found.items[0].id, id(&first));
}

#[tokio::test]
async fn affiliates_are_listed_by_page_and_filter_and_deactivated_never_deleted() {
    let app = TestApp::spawn().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let a = app
            .post(
                "/api/affiliates",
                json!({"name": format!("P{i}"), "code": format!("code_{i}")}),
            )
            .await
            .expect(201);
        ids.push(id(&a));
    }
    let page: ListBody<AffiliateBody> =
        body_of(&app.get("/api/affiliates?limit=2").await.expect(200));
    assert_eq!(
        page.items.iter().map(|a| a.id).collect::<Vec<_>>(),
        ids[..2]
    );
    assert_eq!(page.next_after, Some(ids[1]));
    let rest: ListBody<AffiliateBody> = body_of(
        &app.get(&format!("/api/affiliates?limit=3&after={}", ids[1]))
            .await
            .expect(200),
    );
    assert_eq!(rest.items.len(), 3);
    assert_eq!(rest.next_after, None);
    assert_problem(&app.get("/api/affiliates?limit=0").await, 422);
    assert_problem(&app.get("/api/affiliates?page=2").await, 400);

    let by_code: ListBody<AffiliateBody> =
        body_of(&app.get("/api/affiliates?code=Code_3").await.expect(200));
    assert_eq!(by_code.items.len(), 1);
    assert_eq!(by_code.items[0].id, ids[3]);

    let path = format!("/api/affiliates/{}", ids[2]);
    let off: AffiliateBody = body_of(
        &app.patch(&path, json!({"active": false, "name": "Renamed"}))
            .await
            .expect(200),
    );
    assert!(!off.active);
    assert_eq!(off.name, "Renamed");
    assert_eq!(off.code, "CODE_2");
    let inactive: ListBody<AffiliateBody> =
        body_of(&app.get("/api/affiliates?active=false").await.expect(200));
    assert_eq!(
        inactive.items.iter().map(|a| a.id).collect::<Vec<_>>(),
        [ids[2]]
    );
    let got: AffiliateBody = body_of(&app.get(&path).await.expect(200));
    assert!(!got.active);

    for (body, field) in [
        (json!({"active": null}), "active"),
        (json!({"name": null}), "name"),
        (json!({"name": ""}), "name"),
    ] {
        let problem = assert_problem(&app.patch(&path, body.clone()).await, 422);
        assert!(problem["errors"][field].is_string(), "{body}: {problem}");
    }
    assert_problem(&app.patch(&path, json!({"code": "NEW"})).await, 400);
    assert_problem(
        &app.patch("/api/affiliates/987654", json!({"active": false}))
            .await,
        404,
    );
    assert_problem(&app.get("/api/affiliates/987654").await, 404);
    assert_problem(&app.get("/api/affiliates/99999999999").await, 404);
    assert_problem(&app.get("/api/affiliates/abc").await, 404);
    // No DELETE: deactivate instead.
    assert_problem(&app.delete(&path).await, 405);
    assert_eq!(app.count("affiliates").await, 5);

    let audit: Vec<(String, Value)> = app
        .db()
        .await
        .query(
            "SELECT action, after FROM audit_log WHERE target_type = 'affiliate' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("action"), r.get("after")))
        .collect();
    assert_eq!(audit.len(), 6);
    assert_eq!(audit[5].0, "affiliate.update");
    assert_eq!(audit[5].1["active"], false);
}

#[tokio::test]
async fn only_an_admin_creates_and_changes_affiliates() {
    let app = TestApp::spawn().await;
    let a = affiliate(&app, "Ann").await;
    for role in ["viewer", "support"] {
        let auth = format!("Bearer {}", app.token_of_role(role).await);
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        let post = app
            .request(
                Method::POST,
                "/api/affiliates",
                &headers,
                json!({"name": "Bob"}).to_string(),
            )
            .await;
        assert_problem(&post, 403);
        let patch = app
            .request(
                Method::PATCH,
                &format!("/api/affiliates/{}", id(&a)),
                &headers,
                json!({"active": false}).to_string(),
            )
            .await;
        assert_problem(&patch, 403);
        for path in [
            "/api/affiliates".to_string(),
            format!("/api/affiliates/{}", id(&a)),
            format!("/api/affiliates/{}/summary", id(&a)),
        ] {
            app.request(Method::GET, &path, &headers, "")
                .await
                .expect(200);
        }
    }
    assert_eq!(app.count("affiliates").await, 1);
    assert!(
        app.get(&format!("/api/affiliates/{}", id(&a)))
            .await
            .expect(200)["active"]
            == true
    );
}

#[tokio::test]
async fn a_create_with_an_idempotency_key_runs_once() {
    let app = TestApp::spawn().await;
    let body = json!({"name": "Ann"});
    let first = app
        .staff_with(
            Method::POST,
            "/api/affiliates",
            body.clone(),
            &[("idempotency-key", "aff-1")],
        )
        .await;
    first.expect(201);
    let again = app
        .staff_with(
            Method::POST,
            "/api/affiliates",
            body,
            &[("idempotency-key", "aff-1")],
        )
        .await;
    again.expect(201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.bytes, first.bytes);
    assert_eq!(app.count("affiliates").await, 1);
    let other = app
        .staff_with(
            Method::POST,
            "/api/affiliates",
            json!({"name": "Bob"}),
            &[("idempotency-key", "aff-1")],
        )
        .await;
    assert_problem(&other, 422);
}

#[tokio::test]
async fn the_summary_counts_clicks_buyers_and_money_by_currency_and_status() {
    let app = TestApp::spawn().await;
    let doc = document();
    let a = affiliate(&app, "Ann").await;
    let other = affiliate(&app, "Bob").await;
    let (aid, oid) = (id(&a), id(&other));
    let buyers: Vec<i64> = {
        let mut v = Vec::new();
        for n in 0..4 {
            v.push(id(&app.create_subscriber(200_000_000 + n).await));
        }
        v
    };
    let db = app.db().await;
    for (affiliate_id, subscriber, outcome) in [
        (aid, Some(buyers[0]), "attributed"),
        (aid, Some(buyers[1]), "attributed"),
        (aid, Some(buyers[1]), "kept"),
        (aid, None, "program_off"),
        (oid, Some(buyers[2]), "attributed"),
    ] {
        db.execute(
            "INSERT INTO referral_clicks (affiliate_id, subscriber_id, outcome)
             VALUES ($1, $2, $3)",
            &[
                &(affiliate_id as i32),
                &subscriber.map(|s| s as i32),
                &outcome,
            ],
        )
        .await
        .unwrap();
    }
    for (subscriber, affiliate_id) in [(buyers[0], aid), (buyers[1], aid), (buyers[2], oid)] {
        db.execute(
            "INSERT INTO referral_attributions (subscriber_id, affiliate_id) VALUES ($1, $2)",
            &[&(subscriber as i32), &(affiliate_id as i32)],
        )
        .await
        .unwrap();
    }
    let line = |amount, subscriber: i64| Line {
        subscriber_id: Some(subscriber),
        ..Line::payable(aid, amount)
    };
    // UAH: payable 3000 (buyer 0) and 600 (buyer 1, a renewal), pending 900 (buyer 1),
    // reversed 1200 (buyer 3, taken back before it was paid); a paid line of 1500 taken back
    // after its payout, with its reversal of -1500 payable.
    insert_line(
        &app,
        Line {
            base_minor: 10_000,
            ..line(3000, buyers[0])
        },
    )
    .await;
    insert_line(
        &app,
        Line {
            kind: "renewal",
            base_minor: 2000,
            ..line(600, buyers[1])
        },
    )
    .await;
    insert_line(
        &app,
        Line {
            due: false,
            base_minor: 3000,
            ..line(900, buyers[1])
        },
    )
    .await;
    insert_line(
        &app,
        Line {
            status: "reversed",
            base_minor: 4000,
            ..line(1200, buyers[3])
        },
    )
    .await;
    let (_, refunded) = insert_line(
        &app,
        Line {
            base_minor: 5000,
            ..line(1500, buyers[0])
        },
    )
    .await;
    // Paid by a payout of everything payable then: 3000 + 600 + 1500.
    let payout = app
        .post(
            "/api/payouts",
            json!({"affiliate_id": aid, "currency": "UAH"}),
        )
        .await
        .expect(201);
    assert_eq!(payout["amount_minor"], 5100);
    insert_line(
        &app,
        Line {
            kind: "reversal",
            amount_minor: -1500,
            base_minor: 5000,
            payment_id: Some(refunded),
            ..line(0, buyers[0])
        },
    )
    .await;
    // XTR: one payable line; and another affiliate's line, which is not counted.
    insert_line(
        &app,
        Line {
            currency: "XTR",
            base_minor: 500,
            ..line(150, buyers[1])
        },
    )
    .await;
    insert_line(
        &app,
        Line {
            subscriber_id: Some(buyers[2]),
            ..Line::payable(oid, 999)
        },
    )
    .await;

    let s = app
        .get(&format!("/api/affiliates/{aid}/summary"))
        .await
        .expect(200);
    assert_valid(
        &doc,
        &response_schema(&doc, "get", "/api/affiliates/{id}/summary", 200),
        &s,
    );
    assert_eq!(
        s,
        json!({
            "affiliate_id": aid,
            "clicks": 4,
            "attributed_buyers": 2,
            "paying_buyers": 3,
            "currencies": [
                {"currency": "UAH",
                 // 10000 + 2000 + 3000: the reversed line's 4000 and the refunded 5000 are out.
                 "revenue_minor": 15000,
                 "commission": {"pending": 900, "payable": 0, "paid": 5100, "reversed": 1200},
                 "reversals_minor": -1500,
                 "balance_minor": -1500},
                {"currency": "XTR", "revenue_minor": 500,
                 "commission": {"pending": 0, "payable": 150, "paid": 0, "reversed": 0},
                 "reversals_minor": 0, "balance_minor": 150},
            ],
        })
    );
    let empty = app
        .get(&format!(
            "/api/affiliates/{}/summary",
            id(&affiliate(&app, "New").await)
        ))
        .await
        .expect(200);
    assert_eq!(empty["clicks"], 0);
    assert_eq!(empty["currencies"], json!([]));
    assert_problem(&app.get("/api/affiliates/987654/summary").await, 404);
}
