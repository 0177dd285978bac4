//! Plans as a staff resource (`/api/plans`): the CRUD round trip, every 422 naming its field
//! with nothing written, the 409s of a plan with orders and of a channel's default plan, the
//! default plan and its channel kept equal in both directions, a channel's rules toward the
//! plans that include it (under real concurrency), and what migration 9 makes of an existing
//! database.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_postgres::NoTls;

use crate::staff::auth::assert_problem;
use crate::support::bodies::{ListBody, body_of};
use crate::support::helpers::{TestApp, admin_url, id, new_database_name, url_for};

/// A plan, every field the API answers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanBody {
    id: i64,
    title: String,
    #[serde(deserialize_with = "Option::deserialize")]
    description: Option<String>,
    channel_ids: Vec<i64>,
    kind: String,
    price_minor: i64,
    currency: String,
    #[serde(deserialize_with = "Option::deserialize")]
    period_days: Option<i64>,
    recurring: bool,
    active: bool,
    position: i64,
    is_default: bool,
    #[serde(deserialize_with = "Option::deserialize")]
    buy_link: Option<String>,
    created_at: String,
    updated_at: String,
    /// `{language: {"title", "description"}}`.
    translations: serde_json::Map<String, serde_json::Value>,
}

/// Asserts a 422 whose `errors` names exactly `fields`.
#[track_caller]
fn assert_invalid(r: &crate::support::helpers::TestResponse, fields: &[&str]) {
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
async fn plan_rows(app: &TestApp) -> Vec<String> {
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

/// The default plan of channel `channel_id`, through the list filter.
async fn default_plan(app: &TestApp, channel_id: i64) -> Value {
    let page = app
        .get(&format!("/api/plans?channel_id={channel_id}"))
        .await
        .expect(200);
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["is_default"] == true)
        .cloned()
        .unwrap_or_else(|| panic!("no default plan of channel {channel_id}: {page}"))
}

fn bundle(channels: &[i64]) -> Value {
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
async fn order_plan(app: &TestApp, telegram_user_id: i64, plan: i64) -> Value {
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

#[tokio::test]
async fn a_channels_default_plan_is_its_price_both_ways() {
    let app = TestApp::spawn().await;
    let channel = app
        .create_channel(
            -1001000000001,
            json!({"title": "Premium", "billing_period_days": 30}),
        )
        .await;
    let c = id(&channel);
    let plan: PlanBody = body_of(&default_plan(&app, c).await);
    assert!(plan.is_default);
    assert_eq!(plan.title, "Premium");
    assert_eq!(plan.channel_ids, vec![c]);
    assert_eq!(
        (
            plan.kind.as_str(),
            plan.price_minor,
            plan.currency.as_str(),
            plan.period_days,
            plan.recurring
        ),
        ("paid", 19900, "UAH", Some(30), false)
    );
    let path = format!("/api/plans/{}", plan.id);

    // The plan's change is the channel's change, in the same transaction.
    let changed: PlanBody = body_of(
        &app.patch(
            &path,
            json!({"price_minor": 24900, "period_days": 60, "currency": "USD", "title": "Premium, 60 days"}),
        )
        .await
        .expect(200),
    );
    assert_eq!(
        (
            changed.price_minor,
            changed.period_days,
            changed.currency.as_str()
        ),
        (24900, Some(60), "USD")
    );
    let ch = app.get(&format!("/api/channels/{c}")).await.expect(200);
    assert_eq!(
        (
            &ch["price_minor"],
            &ch["billing_period_days"],
            &ch["currency"],
            &ch["title"]
        ),
        (&json!(24900), &json!(60), &json!("USD"), &json!("Premium")),
        "the channel's price fields follow; its title is its own"
    );
    // The channel's change is the plan's.
    app.patch(
        &format!("/api/channels/{c}"),
        json!({"price_minor": 29900, "billing_period_days": 90, "currency": "UAH"}),
    )
    .await
    .expect(200);
    let plan: PlanBody = body_of(&app.get(&path).await.expect(200));
    assert_eq!(
        (plan.price_minor, plan.period_days, plan.currency.as_str()),
        (29900, Some(90), "UAH")
    );

    // It stays paid, timed and this channel's; it goes with the channel.
    let other = id(&app.create_channel(-1001000000002, json!({})).await);
    let before = plan_rows(&app).await;
    for (body, field) in [
        (json!({"kind": "trial", "price_minor": 0}), "kind"),
        (json!({"period_days": null}), "period_days"),
        (json!({"channel_ids": [c, other]}), "channel_ids"),
        (json!({"channel_ids": [other]}), "channel_ids"),
        (json!({"recurring": true}), "recurring"),
        (json!({"price_minor": 0}), "price_minor"),
        (json!({"currency": "ABC"}), "currency"),
    ] {
        assert_invalid(&app.patch(&path, body).await, &[field]);
    }
    let r = app.delete(&path).await;
    let problem = assert_problem(&r, 409);
    assert!(
        problem["detail"].as_str().unwrap().contains("channel"),
        "{problem}"
    );
    assert_eq!(plan_rows(&app).await, before);
    app.patch(&path, json!({"channel_ids": [c]}))
        .await
        .expect(200);

    // A Stars channel's default plan: recurring by the plan, and the channel's rule still holds.
    let stars = id(&app
        .create_channel(
            -1001000000003,
            json!({"currency": "XTR", "price_minor": 250}),
        )
        .await);
    let stars_plan = id(&default_plan(&app, stars).await);
    let stars_path = format!("/api/plans/{stars_plan}");
    app.patch(&stars_path, json!({"recurring": true}))
        .await
        .expect(200);
    let ch = app.get(&format!("/api/channels/{stars}")).await.expect(200);
    assert_eq!(ch["recurring"], true);
    assert_invalid(
        &app.patch(&stars_path, json!({"period_days": 60})).await,
        &["recurring"],
    );
    assert_invalid(
        &app.patch(
            &format!("/api/channels/{stars}"),
            json!({"billing_period_days": 60}),
        )
        .await,
        &["recurring"],
    );
    let ch_after = app.get(&format!("/api/channels/{stars}")).await.expect(200);
    assert_eq!(ch_after, ch, "the channel is unchanged");

    // With orders, the default plan's currency still follows the channel's rules (orders keep
    // their own currency), as the channel's own change does.
    order_plan(&app, 100000001, plan.id).await;
    app.patch(&path, json!({"currency": "EUR"}))
        .await
        .expect(200);
    assert_eq!(
        app.get(&format!("/api/channels/{c}")).await.expect(200)["currency"],
        "EUR"
    );
    // …but not while another plan includes the channel.
    let bundle_plan = id(&app
        .post(
            "/api/plans",
            json!({"title": "EUR", "channel_ids": [c], "price_minor": 100, "period_days": 30}),
        )
        .await
        .expect(201));
    let before = plan_rows(&app).await;
    let r = app.patch(&path, json!({"currency": "UAH"})).await;
    let problem = assert_problem(&r, 409);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("plan {bundle_plan}")),
        "{problem}"
    );
    assert_eq!(plan_rows(&app).await, before);
    assert_eq!(
        app.get(&format!("/api/channels/{c}")).await.expect(200)["currency"],
        "EUR"
    );
}

#[tokio::test]
async fn a_channel_in_another_plan_keeps_its_currency_and_is_not_deleted() {
    let app = TestApp::spawn().await;
    let a = id(&app.create_channel(-1001000000001, json!({})).await);
    let b = id(&app.create_channel(-1001000000002, json!({})).await);
    let plan = id(&app.post("/api/plans", bundle(&[a, b])).await.expect(201));

    let r = app.delete(&format!("/api/channels/{b}")).await;
    let problem = assert_problem(&r, 409);
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("plans other than") && !detail.contains("  "),
        "{problem}"
    );
    let r = app
        .patch(&format!("/api/channels/{b}"), json!({"currency": "USD"}))
        .await;
    let problem = assert_problem(&r, 409);
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("include it (plan {plan})")) && !detail.contains("  "),
        "{problem}"
    );
    let ch = app.get(&format!("/api/channels/{b}")).await.expect(200);
    assert_eq!(ch["currency"], "UAH");
    // Its price may change, and the same currency is no change.
    app.patch(
        &format!("/api/channels/{b}"),
        json!({"price_minor": 100, "currency": "UAH"}),
    )
    .await
    .expect(200);

    // Without the bundle, both go, with the channel's default plan.
    app.delete(&format!("/api/plans/{plan}")).await.expect(204);
    app.patch(&format!("/api/channels/{b}"), json!({"currency": "USD"}))
        .await
        .expect(200);
    assert_eq!(app.delete(&format!("/api/channels/{b}")).await.status, 204);
    assert_eq!(app.count(&format!("plans WHERE default_of = {b}")).await, 0);
    assert_eq!(
        app.count(&format!("plan_channels WHERE channel_id = {b}"))
            .await,
        0
    );
}

/// A plan made of a channel while the channel's currency changes: whichever commits first,
/// every plan's currency is its channels' (the plan reads the channel `FOR SHARE`, the change
/// locks it `FOR UPDATE` before it looks for plans).
#[tokio::test]
async fn a_plan_and_its_channels_currency_change_never_disagree() {
    let app = Arc::new(TestApp::spawn().await);
    for round in 0..10 {
        let c = id(&app.create_channel(-1001000000100 - round, json!({})).await);
        let new_currency = if round % 2 == 0 { "USD" } else { "EUR" };
        let barrier = Arc::new(Barrier::new(2));
        let (plan, patch) = tokio::join!(
            {
                let (app, barrier) = (app.clone(), barrier.clone());
                async move {
                    barrier.wait().await;
                    app.post(
                        "/api/plans",
                        json!({"title": "Race", "channel_ids": [c], "price_minor": 100,
                               "period_days": 30}),
                    )
                    .await
                }
            },
            {
                let (app, barrier) = (app.clone(), barrier.clone());
                async move {
                    barrier.wait().await;
                    app.patch(
                        &format!("/api/channels/{c}"),
                        json!({"currency": new_currency}),
                    )
                    .await
                }
            }
        );
        assert_eq!(
            plan.status, 201,
            "round {round}: the plan is made either way"
        );
        assert!(
            patch.status == 200 || patch.status == 409,
            "round {round}: {}",
            patch.status
        );
        let mismatched = app
            .count(
                "plans p JOIN plan_channels pc ON pc.plan_id = p.id
                 JOIN channels ch ON ch.id = pc.channel_id WHERE ch.currency <> p.currency",
            )
            .await;
        assert_eq!(
            mismatched, 0,
            "round {round}: a plan's currency is its channels'"
        );
        let plan_currency = plan.json()["currency"].as_str().unwrap().to_string();
        let expected = if patch.status == 200 {
            new_currency
        } else {
            "UAH"
        };
        assert_eq!(plan_currency, expected, "round {round}");
    }
}

/// A default plan as migration 9 made it: `default_of`, title, kind, price, currency, period,
/// recurring, active, channels.
type DefaultPlanRow = (
    i32,
    String,
    String,
    i64,
    String,
    Option<i32>,
    bool,
    bool,
    Vec<i32>,
);

/// Migration 9 over a database at version 8 with channels and orders: each channel gets a
/// default plan with its terms, each order that plan at its own amount.
#[tokio::test]
async fn migration_9_gives_each_channel_a_default_plan_and_each_order_that_plan() {
    let name = new_database_name();
    let (admin, conn) = tokio_postgres::connect(&admin_url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap();
    let result = async {
        let (client, conn) = tokio_postgres::connect(&url_for(&name), NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        // Version 8, as db::migrate leaves it.
        client
            .batch_execute(
                "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .await
            .unwrap();
        for (version, migration, sql) in subgate::db::MIGRATIONS.iter().filter(|m| m.0 <= 8) {
            client.batch_execute(sql).await.unwrap();
            client
                .execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    &[version, migration],
                )
                .await
                .unwrap();
        }
        client
            .batch_execute(
                "INSERT INTO channels (telegram_chat_id, title, price_minor, currency,
                                       billing_period_days, recurring)
                 VALUES (-1001, 'Signals', 19900, 'UAH', 30, false),
                        (-1002, 'Stars', 250, 'XTR', 30, true),
                        (-1003, 'Yearly', 99900, 'USD', 365, false);
                 INSERT INTO subscribers (telegram_user_id) VALUES (1), (2);
                 INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency,
                                     status, paid_at)
                 VALUES ('ord_a', 1, 1, 19900, 'UAH', 'paid', now()),
                        ('ord_b', 2, 1, 15000, 'UAH', 'pending', NULL),
                        ('ord_c', 1, 2, 250, 'XTR', 'cancelled', NULL);",
            )
            .await
            .unwrap();
        let pool = subgate::db::pool(&url_for(&name), 2).unwrap();
        assert_eq!(
            subgate::db::migrate(&pool).await.unwrap(),
            subgate::db::MIGRATIONS.len() - 8
        );
        pool.close();

        let plans: Vec<DefaultPlanRow> = client
            .query(
                "SELECT p.default_of, p.title, p.kind, p.price_minor, p.currency,
                            p.period_days, p.recurring, p.active,
                            ARRAY(SELECT channel_id FROM plan_channels pc
                                  WHERE pc.plan_id = p.id ORDER BY position) AS channels
                     FROM plans p ORDER BY p.default_of",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.get("default_of"),
                    r.get("title"),
                    r.get("kind"),
                    r.get("price_minor"),
                    r.get("currency"),
                    r.get("period_days"),
                    r.get("recurring"),
                    r.get("active"),
                    r.get("channels"),
                )
            })
            .collect();
        let s = |t: &str| t.to_string();
        assert_eq!(
            plans,
            vec![
                (
                    1,
                    s("Signals"),
                    s("paid"),
                    19900,
                    s("UAH"),
                    Some(30),
                    false,
                    true,
                    vec![1]
                ),
                (
                    2,
                    s("Stars"),
                    s("paid"),
                    250,
                    s("XTR"),
                    Some(30),
                    true,
                    true,
                    vec![2]
                ),
                (
                    3,
                    s("Yearly"),
                    s("paid"),
                    99900,
                    s("USD"),
                    Some(365),
                    false,
                    true,
                    vec![3]
                ),
            ]
        );
        let orders: Vec<(String, i32, i64, i64, i64)> = client
            .query(
                "SELECT o.reference, p.default_of, o.amount_minor, o.list_price_minor,
                        o.discount_minor
                 FROM orders o JOIN plans p ON p.id = o.plan_id ORDER BY o.reference",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.get("reference"),
                    r.get("default_of"),
                    r.get("amount_minor"),
                    r.get("list_price_minor"),
                    r.get("discount_minor"),
                )
            })
            .collect();
        assert_eq!(
            orders,
            vec![
                (s("ord_a"), 1, 19900, 19900, 0),
                (s("ord_b"), 1, 15000, 15000, 0),
                (s("ord_c"), 2, 250, 250, 0),
            ]
        );
        // After the migration the triggers keep the rule: a new channel gets its default plan,
        // an order made by channel buys it.
        client
            .batch_execute(
                "INSERT INTO channels (telegram_chat_id, title, price_minor, currency,
                                       billing_period_days)
                 VALUES (-1004, 'New', 500, 'EUR', 7);
                 INSERT INTO orders (reference, subscriber_id, channel_id, amount_minor, currency)
                 VALUES ('ord_d', 2, 4, 500, 'EUR');",
            )
            .await
            .unwrap();
        let row = client
            .query_one(
                "SELECT p.default_of, p.price_minor, p.period_days, o.list_price_minor
                 FROM orders o JOIN plans p ON p.id = o.plan_id WHERE o.reference = 'ord_d'",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>("default_of"), 4);
        assert_eq!(row.get::<_, i64>("price_minor"), 500);
        assert_eq!(row.get::<_, Option<i32>>("period_days"), Some(7));
        assert_eq!(row.get::<_, i64>("list_price_minor"), 500);
    };
    // Drop the database whatever happened, then report.
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await
        .unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// An order of a plan while the plan's channels (and so its currency) change: the order is
/// either made first, and the change refused (409), or made after, of the new channels at the
/// new currency; never an order of the old terms on a plan that no longer has them.
#[tokio::test]
async fn an_order_and_a_change_of_its_plans_channels_never_disagree() {
    let app = Arc::new(TestApp::spawn().await);
    let a = id(&app.create_channel(-1001000000001, json!({})).await);
    let b = id(&app
        .create_channel(-1001000000002, json!({"currency": "USD"}))
        .await);
    for round in 0..10 {
        let plan = id(&app
            .post(
                "/api/plans",
                json!({"title": "Race", "channel_ids": [a], "price_minor": 100,
                       "period_days": 30}),
            )
            .await
            .expect(201));
        let s = id(&app.create_subscriber(200000000 + round).await);
        let barrier = Arc::new(Barrier::new(2));
        let (order, patch) = tokio::join!(
            {
                let (app, barrier) = (app.clone(), barrier.clone());
                async move {
                    barrier.wait().await;
                    app.post("/api/orders", json!({"subscriber_id": s, "plan_id": plan}))
                        .await
                }
            },
            {
                let (app, barrier) = (app.clone(), barrier.clone());
                async move {
                    barrier.wait().await;
                    app.patch(&format!("/api/plans/{plan}"), json!({"channel_ids": [b]}))
                        .await
                }
            }
        );
        assert_eq!(order.status, 201, "round {round}");
        assert!(
            patch.status == 200 || patch.status == 409,
            "round {round}: {}",
            patch.status
        );
        let disagreeing = app
            .count(&format!(
                "orders o JOIN plans p ON p.id = o.plan_id
                 WHERE p.id = {plan} AND (o.currency <> p.currency OR o.channel_id <> ALL (
                     SELECT channel_id FROM plan_channels pc WHERE pc.plan_id = p.id))"
            ))
            .await;
        assert_eq!(
            disagreeing, 0,
            "round {round}: the order has its plan's terms"
        );
        let order = order.json();
        let expected = if patch.status == 200 {
            (b, "USD")
        } else {
            (a, "UAH")
        };
        assert_eq!(
            (
                order["channel_id"].as_i64().unwrap(),
                order["currency"].as_str().unwrap()
            ),
            expected,
            "round {round}"
        );
    }
}
