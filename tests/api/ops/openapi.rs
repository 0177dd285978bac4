//! The OpenAPI document: served, describing exactly the routes the router serves, valid OpenAPI
//! 3.1, and true to what the server answers.

use std::collections::BTreeSet;

use axum::http::{Method, header};
use serde_json::{Value, json};

use crate::support::helpers::TestApp;

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// The OAS 3.1 schema (2022-10-07) of the OpenAPI Initiative; tests/fixtures/README.md says
/// where it comes from.
const OAS_31_SCHEMA: &str = include_str!("../../fixtures/oas-3.1-schema.json");

pub(crate) fn document() -> Value {
    serde_json::to_value(subgate::api::openapi::document()).unwrap()
}

/// Every (METHOD, path) the document describes.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            if item.get(m).is_some() {
                ops.insert((m.to_uppercase(), path.clone()));
            }
        }
    }
    ops
}

/// The methods the router serves at `path`: a request with a method no route has is answered
/// 405 with `Allow` listing them (HEAD, implied by GET, left out). No handler runs.
async fn routed_methods(app: &TestApp, path: &str) -> BTreeSet<String> {
    // Every path parameter filled in with `1` (an id, a file name: the route matches either).
    let concrete: String = path
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                "1"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    let probe = Method::from_bytes(b"PROBE").unwrap();
    let r = app.request(probe, &concrete, &[], "").await;
    assert_eq!(
        r.status.as_u16(),
        405,
        "{path}: a PROBE request should be 405"
    );
    r.header("allow")
        .unwrap_or_else(|| panic!("{path}: 405 without Allow"))
        .split(',')
        .map(|m| m.trim().to_uppercase())
        .filter(|m| !m.is_empty() && m != "HEAD")
        .collect()
}

#[tokio::test]
async fn the_document_is_served_without_authentication() {
    let app = TestApp::spawn().await;
    let r = app.get("/api/openapi.json").await;
    let body = r.expect(200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("x-request-id").is_some());
    assert_eq!(body, document());
    assert!(body["openapi"].as_str().unwrap().starts_with("3.1."));
}

/// The router and the document come from one registration (`api::router::routes`, utoipa-axum's
/// `routes!`): every documented path is served with exactly its documented methods.
#[tokio::test]
async fn every_documented_operation_is_routed_with_exactly_its_methods() {
    let app = TestApp::spawn().await;
    let doc = document();
    let documented = documented(&doc);
    let paths: BTreeSet<&String> = documented.iter().map(|(_, path)| path).collect();
    assert!(
        paths.len() > 20 && paths.contains(&"/api/subscribers/{id}".to_string()),
        "the document lists too few paths: {paths:?}"
    );
    let mut routed = BTreeSet::new();
    for path in paths {
        for method in routed_methods(&app, path).await {
            routed.insert((method, path.clone()));
        }
    }
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "methods served at a documented path that the document does not describe: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "operations in the OpenAPI document that no route serves: {unrouted:?}"
    );
}

/// No route is added beside the registration that documents it: outside `routes!`, nothing in
/// `src/api` calls axum's `.route(...)`, builds an axum `Router` or a method router
/// (`axum::routing`); routers are `OpenApiRouter`s, nested and merged with their documents. (The
/// metrics listener, `crate::ops::metrics`, is a separate server on its own address.)
#[test]
fn routes_are_registered_only_through_the_documented_router() {
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    rust_files(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api"),
        &mut files,
    );
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let code = code.replace("OpenApiRouter", "");
            if [
                ".route(",
                ".route_service(",
                ".nest_service(",
                "routing::",
                "Router::new",
            ]
            .iter()
            .any(|pattern| code.contains(pattern))
            {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "routes added outside utoipa-axum's routes! (serve them with #[utoipa::path] and \
         routes! in api::router::routes, so the document describes them): {found:#?}"
    );
}

#[tokio::test]
async fn every_operation_is_complete() {
    let doc = document();
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            let Some(op) = item.get(m) else { continue };
            let name = format!("{} {path}", m.to_uppercase());
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no id"));
            assert!(ids.insert(id.to_string()), "{name}: operationId {id} twice");
            assert!(
                op["tags"].as_array().is_some_and(|t| !t.is_empty()),
                "{name}: no tag"
            );
            assert!(
                op.get("security").is_some(),
                "{name}: says nothing of security"
            );
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses
                    .keys()
                    .any(|s| s.starts_with('2') || s.starts_with('3')),
                "{name}: no success or redirect response"
            );
            assert!(responses.contains_key("503"), "{name}: no 503");
            for (status, response) in responses {
                let response = resolve(&doc, response);
                assert!(
                    response["headers"].get("x-request-id").is_some(),
                    "{name} {status}: x-request-id not described"
                );
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        response["content"]["application/problem+json"]["schema"]["$ref"],
                        "#/components/schemas/Problem",
                        "{name} {status}: not a problem document"
                    );
                }
            }
            let staff = op["security"].to_string().contains("staff_jwt");
            if staff {
                assert!(
                    responses.contains_key("401"),
                    "{name}: staff route without 401"
                );
            }
        }
    }
}

/// A `$ref` to a component, followed once.
pub(crate) fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => doc
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("dangling {r}")),
        None => v,
    }
}

#[test]
fn the_document_is_valid_openapi_3_1() {
    let doc = document();
    let schema: Value = serde_json::from_str(OAS_31_SCHEMA).unwrap();
    let validator = jsonschema::draft202012::new(&schema).expect("the OAS 3.1 schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "not valid OpenAPI 3.1: {errors:#?}");

    // The OAS schema leaves Schema Objects to JSON Schema 2020-12: check each one, and that
    // every example satisfies the schema it illustrates.
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
            panic!("schema {name} is not valid JSON Schema 2020-12: {e}");
        }
        if let Some(example) = schema.get("example") {
            assert_valid(&doc, &format!("#/components/schemas/{name}"), example);
        }
    }
    // Every `$ref` points at something.
    let text = doc.to_string();
    for r in text.split("\"$ref\":\"").skip(1) {
        let target = &r[..r.find('"').unwrap()];
        assert!(
            doc.pointer(target.trim_start_matches('#')).is_some(),
            "dangling $ref {target}"
        );
    }
}

/// Asserts `instance` is valid against the schema at `pointer` of the document.
#[track_caller]
pub(crate) fn assert_valid(doc: &Value, pointer: &str, instance: &Value) {
    let mut root = doc.clone();
    root["$ref"] = json!(pointer);
    let validator = jsonschema::draft202012::new(&root)
        .unwrap_or_else(|e| panic!("{pointer} does not compile: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{instance} does not match {pointer}: {errors:#?}"
    );
}

/// The schema of a documented response body: (method, path, status).
pub(crate) fn response_schema(doc: &Value, method: &str, path: &str, status: u16) -> String {
    let op = &doc["paths"][path][method];
    let response = resolve(doc, &op["responses"][status.to_string()]);
    let content = response["content"]
        .as_object()
        .unwrap_or_else(|| panic!("{method} {path} {status}: no content documented"));
    let (ctype, media) = content.iter().next().unwrap();
    assert!(
        media.get("schema").is_some(),
        "{method} {path} {status}: no schema"
    );
    // A JSON pointer inside a URI fragment: `~` and `/` escaped, braces percent-encoded.
    let escape = |s: &str| {
        s.replace('~', "~0")
            .replace('/', "~1")
            .replace('{', "%7B")
            .replace('}', "%7D")
    };
    match op["responses"][status.to_string()].get("$ref") {
        Some(r) => format!("{}/content/{}/schema", r.as_str().unwrap(), escape(ctype)),
        None => format!(
            "#/paths/{}/{method}/responses/{status}/content/{}/schema",
            escape(path),
            escape(ctype)
        ),
    }
}

/// Real answers of the main flows match the document (`make fuzz` checks every operation
/// against a live server; this keeps the common ones checked in every test run).
#[tokio::test]
async fn real_answers_match_the_document() {
    let app = TestApp::spawn().await;
    let doc = document();
    let check = |method: &str, path: &str, r: &crate::support::helpers::TestResponse| {
        let status = r.status.as_u16();
        let pointer = response_schema(&doc, method, path, status);
        let documented = resolve(
            &doc,
            &doc["paths"][path][method]["responses"][status.to_string()],
        );
        let ctype = r.header(header::CONTENT_TYPE.as_str()).unwrap_or_default();
        assert!(
            documented["content"].get(ctype).is_some(),
            "{method} {path} {status}: content type {ctype} not documented"
        );
        assert_valid(&doc, &pointer, &r.json());
    };

    let login = app
        .login(crate::support::helpers::ADMIN_EMAIL, "wrong password")
        .await;
    check("post", "/api/auth/login", &login);
    let subscriber = app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": 100000001, "username": "ann"}),
        )
        .await;
    check("post", "/api/subscribers", &subscriber);
    let invalid = app.post("/api/channels", json!({"title": ""})).await;
    assert_eq!(invalid.status, 422);
    check("post", "/api/channels", &invalid);
    let channel = app.create_channel(-1001000000001, json!({})).await;
    let order = app
        .post(
            "/api/orders",
            json!({"subscriber_id": subscriber.json()["id"], "channel_id": channel["id"]}),
        )
        .await;
    check("post", "/api/orders", &order);
    let order = order.json();
    let paid = app.pay_order(&order, "pay_doc_1").await;
    check("post", "/api/webhook/payment", &paid);
    for path in [
        "/api/subscribers",
        "/api/channels",
        "/api/memberships",
        "/api/orders",
        "/api/payments",
        "/api/effects",
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status, 200, "{path}");
        check("get", path, &r);
    }
    let membership = paid.json()["membership"]["id"].as_i64().unwrap();
    let events = app
        .get(&format!("/api/memberships/{membership}/events"))
        .await;
    check("get", "/api/memberships/{id}/events", &events);
    let missing = app.get("/api/orders/999999").await;
    check("get", "/api/orders/{id}", &missing);
    let sweep = app.post("/api/sweep", json!({})).await;
    check("post", "/api/sweep", &sweep);
    let update = app
        .post_telegram_update(json!({"update_id": 1, "pre_checkout_query": {"id": "q1",
            "from": {"id": 100000001}, "currency": "XTR", "total_amount": 1,
            "invoice_payload": "ord_unknown"}}))
        .await;
    check("post", "/api/webhook/telegram", &update);

    // The bodies handlers build from typed structs (Token, Health, OrderEnvelope, Retried).
    let login = app
        .login(
            crate::support::helpers::ADMIN_EMAIL,
            crate::support::helpers::ADMIN_PASSWORD,
        )
        .await;
    assert_eq!(login.status, 200);
    check("post", "/api/auth/login", &login);
    for path in ["/healthz", "/readyz"] {
        let r = app.get(path).await;
        assert_eq!(r.status, 200, "{path}");
        check("get", path, &r);
    }
    let limited = app
        .create_channel(-1001000000002, json!({"seat_limit": 5}))
        .await;
    let second = app
        .create_order(
            subscriber.json()["id"].as_i64().unwrap(),
            limited["id"].as_i64().unwrap(),
        )
        .await;
    let checkout = app.checkout(second["id"].as_i64().unwrap()).await;
    assert_eq!(checkout.status, 200);
    check("post", "/api/orders/{id}/checkout", &checkout);
    let retried = app.post("/api/effects/retry", Value::Null).await;
    assert_eq!(retried.status, 200);
    check("post", "/api/effects/retry", &retried);

    // Plans: made, listed, read, changed, refused and deleted.
    let plan = app
        .post(
            "/api/plans",
            json!({"title": "Both", "channel_ids": [channel["id"], limited["id"]],
                   "price_minor": 29900, "period_days": null}),
        )
        .await;
    assert_eq!(plan.status, 201);
    check("post", "/api/plans", &plan);
    let invalid = app
        .post("/api/plans", json!({"title": "", "channel_ids": []}))
        .await;
    assert_eq!(invalid.status, 422);
    check("post", "/api/plans", &invalid);
    let plans = app.get("/api/plans").await;
    assert_eq!(plans.status, 200);
    check("get", "/api/plans", &plans);
    let plan_path = format!("/api/plans/{}", plan.json()["id"]);
    let read = app.get(&plan_path).await;
    check("get", "/api/plans/{id}", &read);
    let changed = app.patch(&plan_path, json!({"active": false})).await;
    assert_eq!(changed.status, 200);
    check("patch", "/api/plans/{id}", &changed);
    let refused = app.patch(&plan_path, json!({"kind": "trial"})).await;
    assert_eq!(refused.status, 422);
    check("patch", "/api/plans/{id}", &refused);
    let default_plan = plans.json()["items"][0]["id"].as_i64().unwrap();
    let kept = app.delete(&format!("/api/plans/{default_plan}")).await;
    assert_eq!(kept.status, 409);
    check("delete", "/api/plans/{id}", &kept);
    let deleted = app.delete(&plan_path).await;
    assert_eq!(deleted.status, 204);

    // Staff accounts, the audit log, the statistics, and a role's refusal.
    let account = app
        .post(
            "/api/staff",
            json!({"email": "viewer@example.org", "role": "viewer", "password": "a viewer passphrase"}),
        )
        .await;
    assert_eq!(account.status, 201);
    check("post", "/api/staff", &account);
    let staff = app.get("/api/staff").await;
    check("get", "/api/staff", &staff);
    let weak = app
        .post(
            "/api/staff",
            json!({"email": "x@example.org", "role": "viewer", "password": "12345678"}),
        )
        .await;
    assert_eq!(weak.status, 422);
    check("post", "/api/staff", &weak);
    let account_path = format!("/api/staff/{}", account.json()["id"]);
    let disabled = app.patch(&account_path, json!({"disabled": true})).await;
    assert_eq!(disabled.status, 200);
    check("patch", "/api/staff/{id}", &disabled);
    let admin_id = staff.json()["items"][0]["id"].clone();
    let last = app.delete(&format!("/api/staff/{admin_id}")).await;
    assert_eq!(last.status, 409);
    check("delete", "/api/staff/{id}", &last);
    let log = app.get("/api/audit-log?action=plan.update").await;
    assert_eq!(log.status, 200);
    assert_eq!(log.json()["items"].as_array().unwrap().len(), 1);
    check("get", "/api/audit-log", &log);
    let range = "from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z&interval=week";
    let revenue = app.get(&format!("/api/stats/revenue?{range}")).await;
    assert_eq!(revenue.status, 200);
    check("get", "/api/stats/revenue", &revenue);
    let members = app.get(&format!("/api/stats/members?{range}")).await;
    assert_eq!(members.status, 200);
    check("get", "/api/stats/members", &members);
    let reversed = app
        .get("/api/stats/members?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z")
        .await;
    assert_eq!(reversed.status, 422);
    check("get", "/api/stats/members", &reversed);
    let summary = app.get("/api/stats/summary").await;
    assert_eq!(summary.status, 200);
    check("get", "/api/stats/summary", &summary);
    let viewer = app.token_of_role("viewer").await;
    let forbidden = app
        .request(
            Method::DELETE,
            &plan_path,
            &[("authorization", &format!("Bearer {viewer}"))],
            "",
        )
        .await;
    assert_eq!(forbidden.status, 403);
    check("delete", "/api/plans/{id}", &forbidden);
    let password = app
        .post(
            "/api/auth/password",
            json!({"current_password": crate::support::helpers::ADMIN_PASSWORD,
                   "new_password": "another admin passphrase"}),
        )
        .await;
    assert_eq!(password.status, 200);
    check("post", "/api/auth/password", &password);
}

/// Lifetime access matches the document: a membership, its events and its PATCH answer with
/// `"expires_at": "infinity"`, and the 409 of ordering it again.
#[tokio::test]
async fn lifetime_answers_match_the_document() {
    let app = TestApp::spawn().await;
    let doc = document();
    let check = |method: &str, path: &str, r: &crate::support::helpers::TestResponse| {
        let pointer = response_schema(&doc, method, path, r.status.as_u16());
        assert_valid(&doc, &pointer, &r.json());
    };
    let subscriber = app.create_subscriber(100000001).await["id"].clone();
    let channel = app.create_channel(-1001000000001, json!({})).await["id"].clone();
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": subscriber, "channel_id": channel, "days": 30}),
        )
        .await
        .expect(201);
    let path = format!("/api/memberships/{}", m["id"]);
    let patched = app.patch(&path, json!({"expires_at": "infinity"})).await;
    assert_eq!(patched.json()["expires_at"], "infinity");
    check("patch", "/api/memberships/{id}", &patched);
    check("get", "/api/memberships/{id}", &app.get(&path).await);
    check(
        "get",
        "/api/memberships",
        &app.get("/api/memberships").await,
    );
    let events = app.get(&format!("{path}/events")).await;
    assert_eq!(events.json()["items"][1]["expires_at_after"], "infinity");
    check("get", "/api/memberships/{id}/events", &events);
    let again = app
        .post(
            "/api/orders",
            json!({"subscriber_id": subscriber, "channel_id": channel}),
        )
        .await;
    assert_eq!(again.status, 409);
    check("post", "/api/orders", &again);
    // The schema names both forms, and refuses anything else.
    let expiry = "#/components/schemas/Expiry";
    assert_valid(&doc, expiry, &json!("infinity"));
    assert_valid(&doc, expiry, &json!("2025-01-31T10:00:00Z"));
    assert!(
        jsonschema::draft202012::new(&{
            let mut root = doc.clone();
            root["$ref"] = json!(expiry);
            root
        })
        .unwrap()
        .validate(&json!(42))
        .is_err()
    );
}
