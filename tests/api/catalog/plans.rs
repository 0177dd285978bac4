//! Plans as a staff resource (`/api/plans`): the CRUD round trip, every 422 naming its field
//! with nothing written, and the 409s of a plan with orders. A plan and its channels are in
//! `plan_channels`.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    staff::auth::assert_problem,
    support::{
        bodies::{ListBody, body_of},
        helpers::{TestApp, id},
    },
};

/// A plan, every field the API answers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanBody {
    pub(crate) id: i64,
    pub(crate) title: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(crate) description: Option<String>,
    pub(crate) channel_ids: Vec<i64>,
    pub(crate) kind: String,
    pub(crate) price_minor: i64,
    pub(crate) currency: String,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(crate) period_days: Option<i64>,
    pub(crate) recurring: bool,
    pub(crate) active: bool,
    pub(crate) position: i64,
    pub(crate) is_default: bool,
    #[serde(deserialize_with = "Option::deserialize")]
    pub(crate) buy_link: Option<String>,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    /// `{language: {"title", "description"}}`.
    pub(crate) translations: serde_json::Map<String, serde_json::Value>,
    /// `{asset: decimal}`, or null: not sold in crypto.
    #[serde(deserialize_with = "Option::deserialize")]
    pub(crate) crypto_prices: Option<std::collections::BTreeMap<String, String>>,
}

/// Asserts a 422 whose `errors` names exactly `fields`.
#[track_caller]
pub(crate) fn assert_invalid(r: &crate::support::helpers::TestResponse, fields: &[&str]) {
    let body = assert_problem(r, 422);
    let errors = body["errors"]
        .as_object()
        .unwrap_or_else(|| panic!("no errors: {body}"));
    let mut got: Vec<&str> = errors.keys().map(String::as_str).collect();
    got.sort();
    let mut want = fields.to_vec();
    want.sort();
    assert_eq!(got, want, "{body}");
}

/// Every plan row and its channels, as text: what "nothing changed" compares.
pub(crate) async fn plan_rows(app: &TestApp) -> Vec<String> {
    app.db()
        .await
        .query(
            "SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s', p.id, p.title, p.description,
                    p.kind, p.price_minor, p.currency, p.period_days, p.recurring, p.active,
                    p.position, p.updated_at,
                    ARRAY(SELECT channel_id FROM plan_channels pc WHERE pc.plan_id = p.id
                          ORDER BY pc.position)) AS r
             FROM plans p ORDER BY p.id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("r"))
        .collect()
}

pub(crate) fn bundle(channels: &[i64]) -> Value {
    json!({"title": "Bundle", "channel_ids": channels, "price_minor": 49900, "period_days": 90})
}

#[tokio::test]
async fn a_plan_is_created_read_listed_changed_and_deleted() {
    let app = TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_BOT_USERNAME".into(), "subgate_bot".into());
    })
    .await;
    let a = id(&app.create_channel(-1001000000001, json!({})).await);
    let b = id(&app.create_channel(-1001000000002, json!({})).await);
    let created = app
        .post(
            "/api/plans",
            json!({"title": "Signals + Chat", "description": "Both channels.",
                   "channel_ids": [b, a], "price_minor": 49900, "period_days": 90,
                   "position": 2}),
        )
        .await
        .expect(201);
    let plan: PlanBody = body_of(&created);
    assert_eq!(plan.channel_ids, vec![b, a], "the plan's own order");
    assert_eq!(
        (plan.kind.as_str(), plan.currency.as_str(), plan.price_minor),
        ("paid", "UAH", 49900),
        "currency defaults to the channels'"
    );
    assert_eq!(plan.period_days, Some(90));
    assert!(plan.active && !plan.recurring && !plan.is_default);
    assert_eq!(plan.position, 2);
    assert_eq!(
        plan.buy_link.as_deref(),
        Some(format!("https://t.me/subgate_bot?start=p{}", plan.id).as_str())
    );
    let stored: Vec<(i32, i16)> = app
        .db()
        .await
        .query(
            "SELECT channel_id, position FROM plan_channels WHERE plan_id = $1 ORDER BY position",
            &[&plan.id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("channel_id"), r.get("position")))
        .collect();
    assert_eq!(stored, vec![(b as i32, 0), (a as i32, 1)]);

    let read = app
        .get(&format!("/api/plans/{}", plan.id))
        .await
        .expect(200);
    assert_eq!(read, created);

    // Lists: by id, filtered by a channel (its default plan and the bundle) and by `active`.
    let all: ListBody<PlanBody> = body_of(&app.get("/api/plans").await.expect(200));
    let ids: Vec<i64> = all.items.iter().map(|p| p.id).collect();
    assert_eq!(ids.len(), 3, "two default plans and the bundle: {ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        all.items.iter().all(|p| p.translations.is_empty()),
        "no translations unless given"
    );
    assert!(
        all.items.iter().all(|p| p.crypto_prices.is_none()),
        "no crypto prices unless given"
    );
    let of_a: ListBody<PlanBody> = body_of(
        &app.get(&format!("/api/plans?channel_id={a}"))
            .await
            .expect(200),
    );
    assert_eq!(of_a.items.len(), 2);
    assert!(
        of_a.items
            .iter()
            .any(|p| p.is_default && p.channel_ids == vec![a])
    );
    assert!(of_a.items.iter().any(|p| p.id == plan.id));
    let first: ListBody<PlanBody> = body_of(&app.get("/api/plans?limit=1").await.expect(200));
    assert_eq!(first.items.len(), 1);
    let next = first.next_after.expect("a next page");
    let rest: ListBody<PlanBody> = body_of(
        &app.get(&format!("/api/plans?after={next}"))
            .await
            .expect(200),
    );
    assert_eq!(rest.items.len(), 2);
    assert_eq!(rest.next_after, None);
    let none = app.get("/api/plans?channel_id=999999").await.expect(200);
    assert_eq!(none["items"], json!([]));

    let changed = app
        .patch(
            &format!("/api/plans/{}", plan.id),
            json!({"title": "Signals + Chat forever", "description": null, "period_days": null,
                   "price_minor": 99900, "active": false, "position": 5, "channel_ids": [a, b]}),
        )
        .await
        .expect(200);
    let changed: PlanBody = body_of(&changed);
    assert_eq!(changed.title, "Signals + Chat forever");
    assert_eq!(changed.description, None);
    assert_eq!(changed.period_days, None, "lifetime");
    assert_eq!(changed.price_minor, 99900);
    assert!(!changed.active);
    assert_eq!(changed.position, 5);
    assert_eq!(changed.channel_ids, vec![a, b]);
    assert!(changed.updated_at > plan.updated_at);
    assert_eq!(changed.created_at, plan.created_at);
    let inactive: ListBody<PlanBody> =
        body_of(&app.get("/api/plans?active=false").await.expect(200));
    assert_eq!(
        inactive.items.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![plan.id]
    );
    // An empty PATCH changes nothing but is answered.
    app.patch(&format!("/api/plans/{}", plan.id), Value::Null)
        .await
        .expect(200);

    // A trial, with its defaults.
    let trial: PlanBody = body_of(
        &app.post(
            "/api/plans",
            json!({"title": "Try it", "channel_ids": [a], "kind": "trial", "period_days": 7}),
        )
        .await
        .expect(201),
    );
    assert_eq!((trial.kind.as_str(), trial.price_minor), ("trial", 0));

    let deleted = app.delete(&format!("/api/plans/{}", plan.id)).await;
    assert_eq!(deleted.status, 204);
    assert_problem(&app.get(&format!("/api/plans/{}", plan.id)).await, 404);
    assert_eq!(
        app.count(&format!("plan_channels WHERE plan_id = {}", plan.id))
            .await,
        0
    );
    assert_problem(&app.delete(&format!("/api/plans/{}", plan.id)).await, 404);
    assert_problem(
        &app.patch("/api/plans/999999", json!({"title": "x"})).await,
        404,
    );
    assert_problem(&app.get("/api/plans/abc").await, 404);
}

#[tokio::test]
async fn every_invalid_field_is_a_422_naming_it_and_nothing_is_written() {
    let app = TestApp::spawn().await;
    let uah = id(&app.create_channel(-1001000000001, json!({})).await);
    let uah2 = id(&app.create_channel(-1001000000002, json!({})).await);
    let xtr = id(&app
        .create_channel(
            -1001000000003,
            json!({"currency": "XTR", "price_minor": 250}),
        )
        .await);
    let base =
        json!({"title": "Plan", "channel_ids": [uah], "price_minor": 100, "period_days": 30});
    let with = |extra: Value| {
        let mut b = base.clone();
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let without = |field: &str| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().remove(field);
        b
    };
    let eleven: Vec<i64> = (1..=11).collect();
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (without("title"), vec!["title"]),
        (with(json!({"title": ""})), vec!["title"]),
        (with(json!({"title": "x".repeat(256)})), vec!["title"]),
        (with(json!({"title": "a\u{0}b"})), vec!["title"]),
        (
            with(json!({"description": "d".repeat(1001)})),
            vec!["description"],
        ),
        (without("channel_ids"), vec!["channel_ids"]),
        (with(json!({"channel_ids": []})), vec!["channel_ids"]),
        (
            with(json!({"channel_ids": [uah, uah]})),
            vec!["channel_ids"],
        ),
        (
            with(json!({"channel_ids": [uah, 999999]})),
            vec!["channel_ids"],
        ),
        (with(json!({"channel_ids": eleven})), vec!["channel_ids"]),
        (
            with(json!({"channel_ids": [uah, xtr]})),
            vec!["channel_ids"],
        ),
        (with(json!({"kind": "free"})), vec!["kind"]),
        (without("price_minor"), vec!["price_minor"]),
        (with(json!({"price_minor": 0})), vec!["price_minor"]),
        (with(json!({"price_minor": -1})), vec!["price_minor"]),
        (
            with(json!({"kind": "trial", "price_minor": 100, "period_days": 7})),
            vec!["price_minor"],
        ),
        (without("period_days"), vec!["period_days"]),
        (with(json!({"period_days": 0})), vec!["period_days"]),
        (with(json!({"period_days": 3661})), vec!["period_days"]),
        (
            with(json!({"kind": "trial", "price_minor": 0, "period_days": 91})),
            vec!["period_days"],
        ),
        (
            with(json!({"kind": "trial", "price_minor": 0, "period_days": null})),
            vec!["period_days"],
        ),
        (with(json!({"currency": "USD"})), vec!["currency"]),
        (with(json!({"currency": "uah"})), vec!["currency"]),
        (with(json!({"recurring": true})), vec!["recurring"]),
        (
            with(json!({"channel_ids": [xtr], "recurring": true, "period_days": 31})),
            vec!["recurring"],
        ),
        (
            with(json!({"channel_ids": [xtr], "recurring": true, "period_days": null})),
            vec!["recurring"],
        ),
        (
            with(
                json!({"channel_ids": [xtr], "kind": "trial", "price_minor": 0, "recurring": true}),
            ),
            vec!["recurring"],
        ),
        (
            json!({"title": "", "channel_ids": [], "price_minor": 0}),
            vec!["channel_ids", "period_days", "title"],
        ),
        (
            with(json!({"kind": "trial", "price_minor": 5, "period_days": 100, "currency": "USD"})),
            vec!["currency", "period_days", "price_minor"],
        ),
    ];
    let before = plan_rows(&app).await;
    for (body, fields) in &cases {
        let r = app.post("/api/plans", body.clone()).await;
        assert_invalid(&r, fields);
    }
    // Wrong types and unknown fields: 400, like every resource.
    for body in [
        with(json!({"position": "first"})),
        with(json!({"channel_ids": "1"})),
        with(json!({"is_default": true})),
        with(json!({"buy_link": "x"})),
        with(json!({"colour": "red"})),
    ] {
        assert_problem(&app.post("/api/plans", body).await, 400);
    }
    assert_eq!(
        plan_rows(&app).await,
        before,
        "nothing written by a refused create"
    );

    // The same rules on a change, against the stored fields.
    let plan = id(&app.post("/api/plans", base.clone()).await.expect(201));
    let trial = id(&app
        .post(
            "/api/plans",
            json!({"title": "Trial", "channel_ids": [uah], "kind": "trial", "period_days": 7}),
        )
        .await
        .expect(201));
    let stars = id(&app
        .post(
            "/api/plans",
            json!({"title": "Stars", "channel_ids": [xtr], "price_minor": 250, "period_days": 30,
                   "recurring": true}),
        )
        .await
        .expect(201));
    let patches: Vec<(i64, Value, Vec<&str>)> = vec![
        (plan, json!({"title": null}), vec!["title"]),
        (plan, json!({"title": ""}), vec!["title"]),
        (
            plan,
            json!({"description": "d".repeat(1001)}),
            vec!["description"],
        ),
        (plan, json!({"channel_ids": null}), vec!["channel_ids"]),
        (plan, json!({"channel_ids": []}), vec!["channel_ids"]),
        (
            plan,
            json!({"channel_ids": [uah, uah]}),
            vec!["channel_ids"],
        ),
        (plan, json!({"channel_ids": [999999]}), vec!["channel_ids"]),
        (
            plan,
            json!({"channel_ids": [uah2, xtr]}),
            vec!["channel_ids"],
        ),
        (
            plan,
            json!({"channel_ids": [xtr], "currency": "UAH"}),
            vec!["currency"],
        ),
        (plan, json!({"kind": null}), vec!["kind"]),
        (plan, json!({"kind": "gift"}), vec!["kind"]),
        (plan, json!({"price_minor": 0}), vec!["price_minor"]),
        (plan, json!({"price_minor": null}), vec!["price_minor"]),
        (plan, json!({"currency": "USD"}), vec!["currency"]),
        (plan, json!({"currency": null}), vec!["currency"]),
        (plan, json!({"period_days": 0}), vec!["period_days"]),
        (plan, json!({"recurring": true}), vec!["recurring"]),
        (plan, json!({"active": null}), vec!["active"]),
        (plan, json!({"position": null}), vec!["position"]),
        (
            plan,
            json!({"kind": "trial", "period_days": null}),
            vec!["period_days"],
        ),
        (
            plan,
            json!({"kind": "trial", "price_minor": 100}),
            vec!["price_minor"],
        ),
        (trial, json!({"price_minor": 100}), vec!["price_minor"]),
        (trial, json!({"period_days": 91}), vec!["period_days"]),
        (trial, json!({"period_days": null}), vec!["period_days"]),
        (trial, json!({"kind": "paid"}), vec!["price_minor"]),
        (stars, json!({"period_days": 60}), vec!["recurring"]),
        (stars, json!({"kind": "trial"}), vec!["recurring"]),
    ];
    let before = plan_rows(&app).await;
    for (plan, body, fields) in &patches {
        let r = app.patch(&format!("/api/plans/{plan}"), body.clone()).await;
        assert_invalid(&r, fields);
    }
    assert_problem(
        &app.patch(&format!("/api/plans/{plan}"), json!({"is_default": false}))
            .await,
        400,
    );
    assert_eq!(
        plan_rows(&app).await,
        before,
        "nothing written by a refused change"
    );

    // The valid versions of some of those changes.
    let to_trial: PlanBody = body_of(
        &app.patch(&format!("/api/plans/{plan}"), json!({"kind": "trial"}))
            .await
            .expect(200),
    );
    assert_eq!((to_trial.kind.as_str(), to_trial.price_minor), ("trial", 0));
    let to_stars: PlanBody = body_of(
        &app.patch(
            &format!("/api/plans/{plan}"),
            json!({"kind": "paid", "price_minor": 500, "channel_ids": [xtr]}),
        )
        .await
        .expect(200),
    );
    assert_eq!(
        (to_stars.currency.as_str(), to_stars.channel_ids.clone()),
        ("XTR", vec![xtr]),
        "other channels: their currency"
    );
    let unlimited: PlanBody = body_of(
        &app.patch(
            &format!("/api/plans/{stars}"),
            json!({"recurring": false, "period_days": null}),
        )
        .await
        .expect(200),
    );
    assert_eq!((unlimited.recurring, unlimited.period_days), (false, None));
}

/// An order of `plan` for a new subscriber.
pub(crate) async fn order_plan(app: &TestApp, telegram_user_id: i64, plan: i64) -> Value {
    let s = id(&app.create_subscriber(telegram_user_id).await);
    app.post("/api/orders", json!({"subscriber_id": s, "plan_id": plan}))
        .await
        .expect(201)
}

#[tokio::test]
async fn a_plan_with_orders_keeps_its_kind_currency_and_channels_and_is_not_deleted() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_channel(-1001000000001, json!({})).await);
    let b = id(&app.create_channel(-1001000000002, json!({})).await);
    let xtr = id(&app
        .create_channel(
            -1001000000003,
            json!({"currency": "XTR", "price_minor": 250}),
        )
        .await);
    let plan = id(&app.post("/api/plans", bundle(&[a, b])).await.expect(201));
    // Without orders each of these may change.
    let path = format!("/api/plans/{plan}");
    app.patch(&path, json!({"channel_ids": [a]}))
        .await
        .expect(200);
    app.patch(&path, json!({"channel_ids": [a, b]}))
        .await
        .expect(200);
    let order = order_plan(&app, 100000001, plan).await;
    assert_eq!(order["plan_id"], plan);

    let before = plan_rows(&app).await;
    for body in [
        json!({"kind": "trial"}),
        json!({"channel_ids": [a]}),
        json!({"channel_ids": [b, a]}),
        json!({"channel_ids": [xtr], "currency": "XTR"}),
    ] {
        let r = app.patch(&path, body.clone()).await;
        let problem = assert_problem(&r, 409);
        assert!(
            problem["detail"].as_str().unwrap().contains("orders"),
            "{body}: {problem}"
        );
    }
    let r = app.delete(&path).await;
    let problem = assert_problem(&r, 409);
    assert!(
        problem["detail"].as_str().unwrap().contains("deactivate"),
        "{problem}"
    );
    assert_eq!(plan_rows(&app).await, before, "nothing changed");

    // Price, period, text and `active` may change; the order keeps its price.
    let changed: PlanBody = body_of(
        &app.patch(
            &path,
            json!({"price_minor": 59900, "period_days": 120, "title": "New", "active": false,
                   "channel_ids": [a, b], "kind": "paid", "currency": "UAH"}),
        )
        .await
        .expect(200),
    );
    assert_eq!(
        (changed.price_minor, changed.period_days),
        (59900, Some(120))
    );
    let order = app
        .get(&format!("/api/orders/{}", id(&order)))
        .await
        .expect(200);
    assert_eq!(order["amount_minor"], 49900);
    assert_eq!(order["list_price_minor"], 49900);
}
