//! Lifetime access (API.md "Offers": `expires_at` becomes `infinity`; the sweep never touches
//! it; buying it again is refused while it is live): its JSON, the grant through the one
//! extension statement, the sweep and reminders leaving it alone (over a million rows), seats
//! and join requests counting it as live, and a second purchase refused at the order (409), at
//! the pre-checkout and at the payment (`already_lifetime`). Lifetime is made here by a staff
//! correction to `infinity`, by `memberships::extend_at_least` with `Term::Lifetime` (what a
//! payment of a lifetime plan calls) or by SQL.

use serde_json::{Value, json};
use subgate::{
    access::{
        memberships::{self, Cause, Expiry, Term},
        sweep,
    },
    common::ids::{ChannelId, SubscriberId},
    db,
};

use crate::{
    bot::conversation::{payment_update, pre_checkout_update, send},
    support::helpers::{NewPlan, TestApp, id, reference},
};

/// A subscriber (Telegram user `user`) with a 30-day membership of a new channel; `extra`
/// overrides the channel's fields. Returns (membership, subscriber id, channel id).
async fn member(app: &TestApp, chat: i64, user: i64, extra: Value) -> (Value, i64, i64) {
    let channel = id(&app.create_channel(chat, extra).await);
    let subscriber = id(&app.create_subscriber(user).await);
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": subscriber, "channel_id": channel, "days": 30}),
        )
        .await
        .expect(201);
    (m, subscriber, channel)
}

/// Makes membership `id` lifetime with a staff correction; returns the answer.
async fn make_lifetime(app: &TestApp, id: i64) -> Value {
    app.patch(
        &format!("/api/memberships/{id}"),
        json!({"expires_at": "infinity"}),
    )
    .await
    .expect(200)
}

/// The effects of membership `id`: (kind, payload), oldest first.
async fn effects_of(app: &TestApp, id: i64) -> Vec<(String, Value)> {
    app.db()
        .await
        .query(
            "SELECT kind, payload FROM effects WHERE membership_id = $1 ORDER BY id",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Whether the database holds membership `id` with `expires_at = 'infinity'`.
async fn is_infinite(app: &TestApp, id: i64) -> bool {
    app.db()
        .await
        .query_one(
            "SELECT expires_at = 'infinity' FROM memberships WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_lifetime_membership_reads_infinity_everywhere() {
    let app = TestApp::spawn().await;
    let (m, _, _) = member(&app, -7_100_001, 7_100_001, json!({})).await;
    let mid = id(&m);
    let before = m["expires_at"].as_str().unwrap().to_string();

    let after = make_lifetime(&app, mid).await;
    assert_eq!(after["expires_at"], "infinity");
    assert_eq!(after["status"], "active");
    assert!(is_infinite(&app, mid).await);
    let got = app
        .get(&format!("/api/memberships/{mid}"))
        .await
        .expect(200);
    assert_eq!(got["expires_at"], "infinity");
    let listed = app.get("/api/memberships").await.expect(200);
    assert_eq!(listed["items"][0]["expires_at"], "infinity");

    // The staff event records the move to infinity, and its effect is a receipt that says so.
    let events = app
        .get(&format!("/api/memberships/{mid}/events"))
        .await
        .expect(200);
    let last = &events["items"][1];
    assert_eq!(last["cause"], "staff");
    assert_eq!(last["expires_at_before"], before.as_str());
    assert_eq!(last["expires_at_after"], "infinity");
    let effects = effects_of(&app, mid).await;
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert_eq!(effects[1].0, "renewal_receipt");
    assert_eq!(effects[1].1, json!({"expires_at": "infinity"}));

    // Back to a date, and to infinity again; never to -infinity or nonsense (400, nothing changed).
    for bad in ["-infinity", "Infinity", "forever", "2025-13-01T00:00:00Z"] {
        let r = app
            .patch(
                &format!("/api/memberships/{mid}"),
                json!({"expires_at": bad}),
            )
            .await;
        assert_eq!(
            r.status,
            400,
            "{bad}: {}",
            String::from_utf8_lossy(&r.bytes)
        );
    }
    assert!(is_infinite(&app, mid).await);
    let dated = app
        .patch(
            &format!("/api/memberships/{mid}"),
            json!({"expires_at": "2040-01-01T00:00:00Z"}),
        )
        .await
        .expect(200);
    assert_eq!(dated["expires_at"], "2040-01-01T00:00:00Z");
    assert_eq!(make_lifetime(&app, mid).await["expires_at"], "infinity");

    // Deleting it revokes, with the expiry it had.
    app.delete(&format!("/api/memberships/{mid}"))
        .await
        .expect(204);
    let revoke: Value = app
        .db()
        .await
        .query_one(
            "SELECT payload FROM effects WHERE dedupe_key = $1",
            &[&format!("revoke:{mid}:deleted")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        revoke,
        json!({"membership_id": mid, "deleted": true, "expires_at": "infinity"})
    );
}

/// `extend_at_least` as a payment calls it, in its own transaction holding the pair lock.
async fn extend(app: &TestApp, subscriber: i64, channel: i64, term: Term) -> (Expiry, bool) {
    let mut client = app.app_db().await;
    let tx = client.transaction().await.unwrap();
    let (s, c) = (SubscriberId(subscriber as i32), ChannelId(channel as i32));
    db::lock_pair(&tx, s, c).await.unwrap();
    let (m, created) = memberships::extend_at_least(&tx, s, c, term, Cause::Staff, None)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (m.expires_at, created)
}

#[tokio::test]
async fn a_lifetime_grant_is_an_extension_with_its_event_and_effect() {
    let app = TestApp::spawn().await;
    let channel = id(&app.create_channel(-7_200_001, json!({})).await);
    let new = id(&app.create_subscriber(7_200_001).await);
    let renewing = id(&app.create_subscriber(7_200_002).await);

    // A new membership: lifetime at once, with a grant.
    assert_eq!(
        extend(&app, new, channel, Term::Lifetime).await,
        (Expiry::Never, true)
    );
    let m = app
        .get(&format!("/api/memberships?subscriber_id={new}"))
        .await
        .expect(200)["items"][0]
        .clone();
    assert_eq!(
        (m["status"].as_str(), m["expires_at"].as_str()),
        (Some("active"), Some("infinity"))
    );
    let fx = effects_of(&app, id(&m)).await;
    assert_eq!(
        fx,
        [("grant".to_string(), json!({"expires_at": "infinity"}))]
    );

    // A dated member made lifetime: a receipt. Extended again (by days or for life): still
    // lifetime, the event is recorded, and nothing new is told.
    let (dated, _) = extend(&app, renewing, channel, Term::Days(30)).await;
    assert!(matches!(dated, Expiry::At(_)));
    assert_eq!(
        extend(&app, renewing, channel, Term::Lifetime).await,
        (Expiry::Never, false)
    );
    assert_eq!(
        extend(&app, renewing, channel, Term::Days(30)).await,
        (Expiry::Never, false)
    );
    assert_eq!(
        extend(&app, renewing, channel, Term::Lifetime).await,
        (Expiry::Never, false)
    );
    let mid = id(&app
        .get(&format!("/api/memberships?subscriber_id={renewing}"))
        .await
        .expect(200)["items"][0]);
    let kinds: Vec<String> = effects_of(&app, mid)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(kinds, ["grant", "renewal_receipt"]);
    let events = app
        .get(&format!("/api/memberships/{mid}/events"))
        .await
        .expect(200)["items"]
        .clone();
    let afters: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["expires_at_after"].as_str().unwrap())
        .collect();
    assert_eq!(afters.len(), 4);
    assert!(afters[1..].iter().all(|a| *a == "infinity"), "{afters:?}");

    // An ended lifetime membership granted again is a grant.
    app.patch(
        &format!("/api/memberships/{mid}"),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    assert_eq!(
        extend(&app, renewing, channel, Term::Lifetime).await,
        (Expiry::Never, false)
    );
    let kinds: Vec<String> = effects_of(&app, mid)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(kinds, ["grant", "renewal_receipt", "revoke", "grant"]);
}

#[tokio::test]
async fn the_sweep_reminders_seats_and_join_requests_treat_lifetime_as_live_forever() {
    let app = TestApp::spawn().await;
    let (m, _, channel) = member(&app, -7_300_001, 7_300_001, json!({"seat_limit": 1})).await;
    let mid = id(&m);
    make_lifetime(&app, mid).await;
    let updated_at: chrono::DateTime<chrono::Utc> = app
        .db()
        .await
        .query_one("SELECT updated_at FROM memberships WHERE id = $1", &[&mid])
        .await
        .unwrap()
        .get(0);
    let events = app.count("membership_events").await;
    let effects = app.count("effects").await;

    // The sweep: nothing to examine. Reminders: none due, even a decade ahead.
    let report = sweep::sweep(&app.state.db, 100).await.unwrap();
    assert_eq!(
        (report.examined, report.to_grace, report.to_expired),
        (0, 0, 0)
    );
    let client = app.db().await;
    assert_eq!(
        memberships::enqueue_due_reminders(&client, 3660)
            .await
            .unwrap(),
        0
    );
    let row = client
        .query_one(
            "SELECT status, expires_at = 'infinity', updated_at FROM memberships WHERE id = $1",
            &[&mid],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "active");
    assert!(row.get::<_, bool>(1));
    assert_eq!(row.get::<_, chrono::DateTime<chrono::Utc>>(2), updated_at);
    assert_eq!(app.count("membership_events").await, events);
    assert_eq!(app.count("effects").await, effects);

    // It holds the channel's one seat: another buyer is refused, and the overview counts it.
    let other = id(&app.create_subscriber(7_300_002).await);
    let order = app.create_order(other, channel).await;
    assert_eq!(app.checkout(id(&order)).await.status, 409);
    let overview = app.get("/api/overview").await.expect(200);
    let c = &overview["channels"][0];
    assert_eq!(c["seats_taken"], 1);
    assert_eq!(c["members"], json!({"active": 1, "grace": 0, "expired": 0}));

    // A join request of its member is let in.
    assert!(
        memberships::is_live_in_chat(&client, -7_300_001, 7_300_001)
            .await
            .unwrap()
    );
}

/// A plan of `channels` with no period (lifetime), made in SQL; returns its id.
async fn lifetime_plan(app: &TestApp, channels: &[i64], currency: &str, price: i64) -> i64 {
    let plan = NewPlan {
        title: "Forever",
        kind: "paid",
        price_minor: price,
        currency,
        period_days: None,
        position: 0,
    };
    app.insert_plan(plan, channels).await
}

#[tokio::test]
async fn an_order_of_lifetime_access_already_held_is_refused() {
    let app = TestApp::spawn().await;
    let (m, subscriber, channel) = member(&app, -7_400_001, 7_400_001, json!({})).await;
    let second = id(&app.create_channel(-7_400_002, json!({})).await);
    let single = lifetime_plan(&app, &[channel], "UAH", 99900).await;
    let bundle = lifetime_plan(&app, &[channel, second], "UAH", 149900).await;

    // While it is dated, anything may be bought.
    app.create_order(subscriber, channel).await;
    for plan in [single, bundle] {
        app.post(
            "/api/orders",
            json!({"subscriber_id": subscriber, "plan_id": plan}),
        )
        .await
        .expect(201);
    }
    make_lifetime(&app, id(&m)).await;
    let orders = app.count("orders").await;

    // Lifetime: its channel, by channel or by any plan of only it, is refused with a reason.
    let r = app
        .post(
            "/api/orders",
            json!({"subscriber_id": subscriber, "channel_id": channel}),
        )
        .await;
    let body = r.expect(409);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("already has lifetime access to this channel"),
        "{body}"
    );
    app.post(
        "/api/orders",
        json!({"subscriber_id": subscriber, "plan_id": single}),
    )
    .await
    .expect(409);
    // A bundle with a channel it does not have yet is still for sale; another buyer may buy.
    app.post(
        "/api/orders",
        json!({"subscriber_id": subscriber, "plan_id": bundle}),
    )
    .await
    .expect(201);
    let other = id(&app.create_subscriber(7_400_002).await);
    app.create_order(other, channel).await;
    assert_eq!(app.count("orders").await, orders + 2);

    // Once every channel of the bundle is lifetime, the bundle too.
    let mut client = app.app_db().await;
    let tx = client.transaction().await.unwrap();
    let (s, c) = (SubscriberId(subscriber as i32), ChannelId(second as i32));
    db::lock_pair(&tx, s, c).await.unwrap();
    memberships::extend_at_least(&tx, s, c, Term::Lifetime, Cause::Staff, None)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let body = app
        .post(
            "/api/orders",
            json!({"subscriber_id": subscriber, "plan_id": bundle}),
        )
        .await
        .expect(409);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("every channel of this plan"),
        "{body}"
    );

    // An ended lifetime membership may be bought again.
    app.patch(
        &format!("/api/memberships/{}", id(&m)),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    app.create_order(subscriber, channel).await;
}

#[tokio::test]
async fn a_card_payment_for_lifetime_access_already_held_is_kept_for_review() {
    let app = TestApp::spawn().await;
    let (m, subscriber, channel) = member(&app, -7_500_001, 7_500_001, json!({})).await;
    let order = app.create_order(subscriber, channel).await;
    make_lifetime(&app, id(&m)).await;
    let events = app.count("membership_events").await;

    let r = app.pay_order(&order, "pay_lifetime_1").await;
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.bytes)
    );
    let row = app
        .db()
        .await
        .query_one(
            "SELECT p.outcome, p.reason, o.status
             FROM payments p JOIN orders o ON o.id = p.order_id WHERE p.external_id = $1",
            &[&"pay_lifetime_1"],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            row.get::<_, String>(2)
        ),
        (
            "needs_review".into(),
            "already_lifetime".into(),
            "pending".into()
        )
    );
    // Nothing changed: still lifetime, no event.
    assert!(is_infinite(&app, id(&m)).await);
    assert_eq!(app.count("membership_events").await, events);
    // The buyer is told why.
    let text: String = app
        .db()
        .await
        .query_one(
            "SELECT payload->>'text' FROM effects WHERE kind = 'bot_message'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        text.contains("You already have lifetime access") && text.contains("review"),
        "{text}"
    );
}

#[tokio::test]
async fn a_stars_purchase_of_lifetime_access_already_held_is_refused_and_refunded() {
    let app = TestApp::spawn().await;
    let user = 7_600_001;
    let (m, subscriber, channel) = member(
        &app,
        -7_600_001,
        user,
        json!({"currency": "XTR", "price_minor": 250}),
    )
    .await;
    let order = app.create_order(subscriber, channel).await;
    let payload = reference(&order);
    make_lifetime(&app, id(&m)).await;
    let events = app.count("membership_events").await;

    // The pre-checkout refuses, and stores why.
    let answer = send(
        &app,
        &pre_checkout_update("pcq_lifetime", user, &payload, 250),
    )
    .await;
    assert_eq!(answer["ok"], false, "{answer}");
    assert_eq!(
        answer["error_message"],
        "You already have lifetime access to this channel or group."
    );
    let reason: String = app
        .db()
        .await
        .query_one(
            "SELECT reason FROM pre_checkout_decisions WHERE query_id = 'pcq_lifetime'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reason, "already_lifetime");

    // A payment that arrives anyway is refunded, and changes nothing.
    send(
        &app,
        &payment_update("ch_lifetime", user, &payload, 250, None),
    )
    .await;
    let row = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason FROM payments WHERE external_id = 'ch_lifetime'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("refund_pending".into(), "already_lifetime".into())
    );
    assert!(is_infinite(&app, id(&m)).await);
    assert_eq!(app.count("membership_events").await, events);
    let text: String = app
        .db()
        .await
        .query_one(
            "SELECT payload->>'text' FROM effects WHERE kind = 'bot_message'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(text.contains("Your stars will be refunded."), "{text}");
}

/// Memberships in the million-row sweep.
const MILLION: i64 = 1_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifetime_memberships_survive_a_sweep_of_a_million_rows_untouched() {
    let app = TestApp::spawn().await;
    let no_grace = id(&app.create_channel(-7_700_001, json!({})).await) as i32;
    let grace = id(&app
        .create_channel(-7_700_002, json!({"grace_period_days": 3}))
        .await) as i32;
    let client = app.db().await;
    let started = std::time::Instant::now();
    // A million buyers with lifetime access, written long ago; ten more with dated terms that
    // ran out an hour ago in each channel. The rows are valid by construction, so the bulk load
    // skips the foreign-key triggers (`session_replication_role = replica`), which would
    // triple its time; every index is kept, the sweep's among them.
    client
        .batch_execute(&format!(
            "INSERT INTO subscribers (telegram_user_id)
             SELECT 8000000000 + g FROM generate_series(1, {n}) g;
             BEGIN;
             SET LOCAL session_replication_role = replica;
             INSERT INTO memberships (subscriber_id, channel_id, status, expires_at, created_at,
                                      updated_at)
             SELECT id, CASE WHEN id % 2 = 0 THEN {no_grace} ELSE {grace} END, 'active',
                    'infinity', '2020-01-01T00:00:00Z', '2020-01-01T00:00:00Z'
             FROM subscribers WHERE telegram_user_id > 8000000000;
             COMMIT;
             INSERT INTO subscribers (telegram_user_id)
             SELECT 8100000000 + g FROM generate_series(1, 20) g;
             INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
             SELECT id, CASE WHEN id % 2 = 0 THEN {no_grace} ELSE {grace} END, 'active',
                    statement_timestamp() - interval '1 hour'
             FROM subscribers WHERE telegram_user_id > 8100000000;",
            n = MILLION
        ))
        .await
        .unwrap();
    let inserted = started.elapsed();

    // The sweep's first read, its window of candidates, holds only the twenty: it stops before
    // the first lifetime row.
    let now = crate::support::helpers::db_now(&app).await;
    let window = sweep::due_window(&client, now, None, sweep::WINDOW_SIZE)
        .await
        .unwrap();
    assert_eq!(window.ids.len(), 20);

    let started = std::time::Instant::now();
    let report = sweep::sweep(&app.state.db, sweep::DEFAULT_BATCH_SIZE)
        .await
        .unwrap();
    let swept = started.elapsed();
    eprintln!("a million lifetime rows: inserted in {inserted:?}, swept in {swept:?}");
    // Only the twenty dated ones were looked at, and moved.
    assert_eq!(
        (
            report.examined,
            report.to_grace,
            report.to_expired,
            report.skipped
        ),
        (20, 10, 10, 0)
    );

    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE expires_at = 'infinity' AND status = 'active'
                                     AND updated_at = '2020-01-01T00:00:00Z'),
                    count(*) FILTER (WHERE expires_at = 'infinity'),
                    count(*) FILTER (WHERE expires_at <> 'infinity' AND status = 'grace'),
                    count(*) FILTER (WHERE expires_at <> 'infinity' AND status = 'expired')
             FROM memberships",
            &[],
        )
        .await
        .unwrap();
    let counts: (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(counts, (MILLION, MILLION, 10, 10));
    // Events and effects only for the twenty.
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM membership_events ev
                     JOIN memberships m ON m.id = ev.membership_id
                     WHERE m.expires_at = 'infinity'),
                    (SELECT count(*) FROM membership_events),
                    (SELECT count(*) FROM effects e
                     JOIN memberships m ON m.id = e.membership_id
                     WHERE m.expires_at = 'infinity')",
            &[],
        )
        .await
        .unwrap();
    let counts: (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(counts, (0, 20, 0));
    // A second run finds only the grace rows (inside their window), and no reminder is due.
    let again = sweep::sweep(&app.state.db, sweep::DEFAULT_BATCH_SIZE)
        .await
        .unwrap();
    assert_eq!(
        (again.examined, again.to_grace, again.to_expired),
        (10, 0, 0)
    );
    assert_eq!(
        memberships::enqueue_due_reminders(&client, 3660)
            .await
            .unwrap(),
        0
    );
}
