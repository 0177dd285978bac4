//! A plan and its channels: a channel's default plan kept equal to its price in both
//! directions, a channel's rules toward the plans that include it (its currency, its deletion;
//! under real concurrency), and what migration 9 makes of an existing database.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_postgres::NoTls;

use crate::{
    catalog::plans::{PlanBody, assert_invalid, bundle, order_plan, plan_rows},
    staff::auth::assert_problem,
    support::{
        bodies::body_of,
        helpers::{TestApp, admin_url, id, new_database_name, url_for},
    },
};

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
