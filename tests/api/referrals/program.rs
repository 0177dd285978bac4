//! The program's rules and a plan's own rates: defaults, changes, the 422 of each field, 400
//! for malformed JSON, roles, and the audit rows.

use axum::http::Method;
use serde_json::{Value, json};

use crate::{
    catalog::promo_codes::default_plan,
    ops::openapi::{assert_valid, document, response_schema},
    staff::auth::assert_problem,
    support::helpers::{TestApp, id},
};

#[tokio::test]
async fn the_program_is_off_until_switched_on_and_changes_field_by_field() {
    let app = TestApp::spawn().await;
    let doc = document();
    let p = app.get("/api/referral-program").await.expect(200);
    assert_valid(
        &doc,
        &response_schema(&doc, "get", "/api/referral-program", 200),
        &p,
    );
    assert_eq!(p["enabled"], false);
    assert_eq!(p["attribution"], "first_click");
    assert_eq!(p["window_days"], 30);
    assert_eq!(p["hold_days"], 14);
    assert_eq!(p["buyer_reward_days"], Value::Null);

    let changed = app
        .patch(
            "/api/referral-program",
            json!({"enabled": true, "attribution": "last_click", "window_days": 365,
                   "hold_days": 0, "first_percent": 90, "renewal_percent": 0,
                   "renewal_months": 120, "buyer_links": true, "buyer_reward_days": 7,
                   "max_reward_days_per_month": 3660}),
        )
        .await
        .expect(200);
    assert_valid(
        &doc,
        &response_schema(&doc, "patch", "/api/referral-program", 200),
        &changed,
    );
    assert_eq!(changed["enabled"], true);
    assert_eq!(changed["attribution"], "last_click");
    assert_eq!(changed["window_days"], 365);
    assert_eq!(changed["hold_days"], 0);
    assert_eq!(changed["first_percent"], 90);
    assert_eq!(changed["renewal_months"], 120);
    assert_eq!(changed["buyer_reward_days"], 7);
    assert_eq!(changed["max_reward_days_per_month"], 3660);
    assert_eq!(app.get("/api/referral-program").await.expect(200), changed);

    // A field left out keeps its value; null clears the two nullable ones.
    let cleared = app
        .patch(
            "/api/referral-program",
            json!({"buyer_reward_days": null, "max_reward_days_per_month": null}),
        )
        .await
        .expect(200);
    assert_eq!(cleared["buyer_reward_days"], Value::Null);
    assert_eq!(cleared["max_reward_days_per_month"], Value::Null);
    assert_eq!(cleared["first_percent"], 90);
    assert_eq!(cleared["attribution"], "last_click");

    let audit = app
        .db()
        .await
        .query(
            "SELECT before, after FROM audit_log WHERE action = 'referral_program.update'
             ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(audit.len(), 2);
    let before: Value = audit[0].get("before");
    let after: Value = audit[0].get("after");
    assert_eq!(before["enabled"], false);
    assert_eq!(after["enabled"], true);
}

#[tokio::test]
async fn each_value_out_of_range_is_a_422_naming_its_field() {
    let app = TestApp::spawn().await;
    for (body, field) in [
        (json!({"window_days": 0}), "window_days"),
        (json!({"window_days": 366}), "window_days"),
        (json!({"hold_days": -1}), "hold_days"),
        (json!({"hold_days": 181}), "hold_days"),
        (json!({"first_percent": 91}), "first_percent"),
        (json!({"renewal_percent": -1}), "renewal_percent"),
        (json!({"renewal_months": 121}), "renewal_months"),
        (json!({"buyer_reward_days": 0}), "buyer_reward_days"),
        (json!({"buyer_reward_days": 366}), "buyer_reward_days"),
        (
            json!({"max_reward_days_per_month": 0}),
            "max_reward_days_per_month",
        ),
        (
            json!({"max_reward_days_per_month": 3661}),
            "max_reward_days_per_month",
        ),
        (json!({"attribution": "every_click"}), "attribution"),
        (json!({"attribution": null}), "attribution"),
        (json!({"enabled": null}), "enabled"),
        (json!({"window_days": null}), "window_days"),
    ] {
        let r = app.patch("/api/referral-program", body.clone()).await;
        let problem = assert_problem(&r, 422);
        assert!(problem["errors"][field].is_string(), "{body}: {problem}");
        assert_eq!(problem["errors"].as_object().unwrap().len(), 1, "{body}");
    }
    // Several at once: each named.
    let r = app
        .patch(
            "/api/referral-program",
            json!({"first_percent": 95, "renewal_percent": 95}),
        )
        .await;
    let problem = assert_problem(&r, 422);
    assert!(problem["errors"]["first_percent"].is_string());
    assert!(problem["errors"]["renewal_percent"].is_string());
    // Nothing changed.
    let p = app.get("/api/referral-program").await.expect(200);
    assert_eq!(p["first_percent"], 0);
    assert_eq!(p["window_days"], 30);

    // Malformed JSON, wrong types and unknown fields: 400, never a 500.
    for raw in [
        "{\"enabled\": tru",
        "[1, 2]",
        "{\"window_days\": \"30\"}",
        "{\"window_days\": 1e99}",
        "{\"window_days\": 99999999999}",
        "{\"percent\": 10}",
        "\"enabled\"",
    ] {
        let auth = format!("Bearer {}", app.token().await);
        let r = app
            .request(
                Method::PATCH,
                "/api/referral-program",
                &[
                    ("authorization", &auth),
                    ("content-type", "application/json"),
                ],
                raw.to_string(),
            )
            .await;
        assert_problem(&r, 400);
    }
}

#[tokio::test]
async fn a_viewer_reads_the_program_and_only_an_admin_changes_it() {
    let app = TestApp::spawn().await;
    let channel = app.create_channel(-1001, json!({})).await;
    let plan = default_plan(&app, id(&channel)).await;
    for role in ["viewer", "support"] {
        let auth = format!("Bearer {}", app.token_of_role(role).await);
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        let r = app
            .request(Method::GET, "/api/referral-program", &headers, "")
            .await;
        r.expect(200);
        let r = app
            .request(
                Method::GET,
                &format!("/api/plans/{}/referral", plan),
                &headers,
                "",
            )
            .await;
        r.expect(200);
        for (method, path, body) in [
            (
                Method::PATCH,
                "/api/referral-program".to_string(),
                json!({"enabled": true}),
            ),
            (
                Method::PUT,
                format!("/api/plans/{}/referral", plan),
                json!({"first_percent": 10, "renewal_percent": 5}),
            ),
            (
                Method::DELETE,
                format!("/api/plans/{}/referral", plan),
                Value::Null,
            ),
        ] {
            let r = app
                .request(method.clone(), &path, &headers, body.to_string())
                .await;
            assert_problem(&r, 403);
        }
    }
    assert_eq!(app.count("plan_referral_rates").await, 0);
    let p = app.get("/api/referral-program").await.expect(200);
    assert_eq!(p["enabled"], false);
}

#[tokio::test]
async fn a_plan_earns_at_its_own_rates_until_they_are_removed() {
    let app = TestApp::spawn().await;
    let doc = document();
    app.patch(
        "/api/referral-program",
        json!({"first_percent": 20, "renewal_percent": 5}),
    )
    .await
    .expect(200);
    let channel = app.create_channel(-1001, json!({})).await;
    let plan = default_plan(&app, id(&channel)).await;
    let path = format!("/api/plans/{}/referral", plan);

    let rates = app.get(&path).await.expect(200);
    assert_eq!(
        rates,
        json!({"plan_id": plan, "first_percent": 20, "renewal_percent": 5,
               "source": "program"})
    );
    let own = app
        .staff(
            Method::PUT,
            &path,
            json!({"first_percent": 40, "renewal_percent": 0}),
        )
        .await
        .expect(200);
    assert_valid(
        &doc,
        &response_schema(&doc, "put", "/api/plans/{id}/referral", 200),
        &own,
    );
    assert_eq!(
        own,
        json!({"plan_id": plan, "first_percent": 40, "renewal_percent": 0,
               "source": "plan"})
    );
    // Again, changed: one row.
    app.staff(
        Method::PUT,
        &path,
        json!({"first_percent": 45, "renewal_percent": 15}),
    )
    .await
    .expect(200);
    assert_eq!(app.get(&path).await.expect(200)["first_percent"], 45);
    assert_eq!(app.count("plan_referral_rates").await, 1);

    for (body, field) in [
        (
            json!({"first_percent": 91, "renewal_percent": 0}),
            "first_percent",
        ),
        (
            json!({"first_percent": 10, "renewal_percent": -1}),
            "renewal_percent",
        ),
        (json!({"first_percent": 10}), "renewal_percent"),
        (json!({"renewal_percent": 10}), "first_percent"),
    ] {
        let r = app.staff(Method::PUT, &path, body.clone()).await;
        let problem = assert_problem(&r, 422);
        assert!(problem["errors"][field].is_string(), "{body}: {problem}");
    }

    app.delete(&path).await.expect(204);
    assert_eq!(app.get(&path).await.expect(200)["source"], "program");
    // Removing rates it does not have is still a 204.
    app.delete(&path).await.expect(204);
    assert_eq!(app.count("plan_referral_rates").await, 0);

    for p in [
        "/api/plans/987654/referral",
        "/api/plans/99999999999/referral",
    ] {
        assert_problem(&app.get(p).await, 404);
        assert_problem(&app.delete(p).await, 404);
        let r = app
            .staff(
                Method::PUT,
                p,
                json!({"first_percent": 10, "renewal_percent": 10}),
            )
            .await;
        assert_problem(&r, 404);
    }
    let actions: Vec<String> = app
        .db()
        .await
        .query(
            "SELECT action FROM audit_log WHERE target_type = 'plan_referral' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("action"))
        .collect();
    assert_eq!(
        actions,
        [
            "plan_referral.update",
            "plan_referral.update",
            "plan_referral.delete",
            "plan_referral.delete"
        ]
    );
}

#[test]
fn the_document_names_each_referral_body_apart_from_the_others() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    for name in [
        "ReferralProgram",
        "ReferralProgramPatch",
        "PlanReferralRates",
        "ReferralRatesInput",
        "Affiliate",
        "AffiliateSummary",
        "AffiliateCurrencySummary",
        "CommissionByStatus",
        "CommissionLine",
        "LineKind",
        "LineStatus",
        "Payout",
    ] {
        assert!(schemas.get(name).is_some(), "{name} is not in the document");
    }
    // The statistics' summary keeps its own name and shape.
    assert!(schemas["Summary"]["properties"].get("mrr").is_some());
}
