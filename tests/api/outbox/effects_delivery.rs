//! Effects through the outbox, one by one: a payment's grant and receipt, the sweep's revoke,
//! a worker dying mid-effect, reminders and grace notices, join requests (answered and decided
//! when answered) and invoice links. Set-up helpers are in [`crate::support::effects`].

use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};
use subgate::access::memberships;

use crate::support::{effects::*, fake_bot::FakeBot, helpers::TestApp, race::race};

// ---- grant and receipt ----

#[tokio::test]
async fn a_payment_grants_exactly_once_and_a_duplicate_webhook_grants_nothing() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_101, 5101);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let order = app.create_order(s, c).await;
    app.pay_order(&order, "pay-grant-1").await.expect(200);
    let dup = app.pay_order(&order, "pay-grant-1").await.expect(200);
    assert_eq!(dup["duplicate"], true);

    let grants = effects_of(&app, "grant").await;
    assert_eq!(grants.len(), 1, "one grant for one payment: {grants:?}");
    assert_eq!(grants[0]["status"], "pending");
    assert_eq!(
        (grants[0]["chat_id"].as_i64(), grants[0]["user_id"].as_i64()),
        (Some(chat), Some(user))
    );

    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    // Subgate never banned them: no unban, only the link and the message.
    assert_eq!(fake.methods(), ["createChatInviteLink", "sendMessage"]);
    let link = &fake.calls_of("createChatInviteLink")[0].params;
    assert_eq!(link["creates_join_request"], true);
    let message = &fake.calls_of("sendMessage")[0].params;
    assert_eq!(message["chat_id"].as_i64(), Some(user));
    let stored = crate::access::membership_changes::invite_link(&app, c)
        .await
        .expect("the channel's join link is stored");
    assert!(
        message["text"].as_str().unwrap().contains(&stored),
        "{message}"
    );
    assert_eq!(
        effect(&app, grants[0]["id"].as_i64().unwrap()).await["status"],
        "done"
    );

    // Nothing more to do; a late duplicate delivery changes nothing either.
    fake.clear_calls();
    assert_eq!(run(&app).await.done, 0);
    app.pay_order(&order, "pay-grant-1").await.expect(200);
    assert_eq!(run(&app).await.done, 0);
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());
    assert_eq!(effects_of(&app, "grant").await.len(), 1);

    // A second buyer of the channel gets the stored link: no second createChatInviteLink.
    let s2 = subscriber(&app, 5102).await;
    let order2 = app.create_order(s2, c).await;
    app.pay_order(&order2, "pay-grant-2").await.expect(200);
    run(&app).await;
    assert_eq!(fake.methods(), ["sendMessage"], "a grant is one call");
    assert!(
        fake.calls_of("sendMessage")[0].params["text"]
            .as_str()
            .unwrap()
            .contains(&stored)
    );
}

#[tokio::test]
async fn a_renewal_of_an_active_member_sends_a_receipt_not_a_grant() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_102, 5201);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let first = app.create_order(s, c).await;
    app.pay_order(&first, "pay-r-1").await.expect(200);
    run(&app).await;
    fake.clear_calls();

    let second = app.create_order(s, c).await;
    app.pay_order(&second, "pay-r-2").await.expect(200);
    assert_eq!(effects_of(&app, "grant").await.len(), 1);
    let receipts = effects_of(&app, "renewal_receipt").await;
    assert_eq!(receipts.len(), 1);
    assert!(receipts[0]["payment_id"].is_i64());
    run(&app).await;
    assert_eq!(fake.methods(), ["sendMessage"]);
    assert_eq!(fake.calls()[0].params["chat_id"].as_i64(), Some(user));
}

// ---- revoke ----

#[tokio::test]
async fn the_sweep_to_expired_kicks_exactly_once() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_103, 5301);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    fake.add_member(chat, user);
    fake.clear_calls();

    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;
    assert!(
        effects_of(&app, "revoke").await.is_empty(),
        "back-dating alone kicks nobody"
    );
    assert_eq!(sweep(&app).await["to_expired"], 1);
    assert_eq!(sweep(&app).await["to_expired"], 0);
    let revokes = effects_of(&app, "revoke").await;
    assert_eq!(revokes.len(), 1);
    assert_eq!(revokes[0]["membership_id"].as_i64(), Some(m));

    run(&app).await;
    // Out of the channel, then told so (the buyer had their join link).
    assert_eq!(
        fake.methods(),
        ["banChatMember", "unbanChatMember", "sendMessage"]
    );
    assert_eq!(
        fake.calls_of("unbanChatMember")[0].params["only_if_banned"],
        true
    );
    assert!(!fake.is_member(chat, user), "removed from the channel");
    assert!(!fake.is_banned(chat, user), "free to rejoin after paying");
    fake.clear_calls();
    sweep(&app).await;
    run(&app).await;
    assert!(fake.calls().is_empty(), "{:?}", fake.methods());
    assert_eq!(effects_of(&app, "revoke").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_racing_the_sweep_never_kicks() {
    let fake = FakeBot::start().await;
    let app = Arc::new(app_with(&fake).await);
    let chat = -1_001_000_000_104;
    let c = channel(&app, chat, json!({})).await;

    // Deterministic worst case first: the sweep expires the membership, then the renewal
    // revives it before the worker runs. The revoke exists but must not be performed.
    let s = subscriber(&app, 5400).await;
    let first = app.create_order(s, c).await;
    app.pay_order(&first, "race-0-a").await.expect(200);
    let m: i64 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM memberships WHERE subscriber_id = $1",
            &[&(s as i32)],
        )
        .await
        .unwrap()
        .get(0);
    let past = (Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;
    assert_eq!(sweep(&app).await["to_expired"], 1);
    let renewal = app.create_order(s, c).await;
    app.pay_order(&renewal, "race-0-b").await.expect(200);
    assert_eq!(effects_of(&app, "revoke").await.len(), 1);
    run(&app).await;
    assert!(
        fake.calls_of("banChatMember").is_empty(),
        "a renewed member was kicked"
    );
    let revoke = &effects_of(&app, "revoke").await[0];
    assert_eq!(revoke["status"], "done");
    assert!(
        revoke["payload"]["note"]
            .as_str()
            .unwrap()
            .contains("renewed"),
        "{revoke}"
    );

    // Then real races, released together.
    for round in 1..=10i64 {
        let user = 5400 + round;
        let s = subscriber(&app, user).await;
        let first = app.create_order(s, c).await;
        app.pay_order(&first, &format!("race-{round}-a"))
            .await
            .expect(200);
        let m: i64 = app
            .db()
            .await
            .query_one(
                "SELECT id FROM memberships WHERE subscriber_id = $1",
                &[&(s as i32)],
            )
            .await
            .unwrap()
            .get(0);
        patch_membership(&app, m, json!({"expires_at": past})).await;
        let renewal = app.create_order(s, c).await;
        // The renewal's payment and a sweep, released together.
        race(2, |i| {
            let (app, renewal) = (app.clone(), renewal.clone());
            async move {
                if i == 0 {
                    app.pay_order(&renewal, &format!("race-{round}-b"))
                        .await
                        .expect(200);
                } else {
                    app.post("/api/sweep", Value::Null).await.expect(200);
                }
            }
        })
        .await;
        assert_eq!(membership_status(&app, m).await, "active", "round {round}");
        run(&app).await;
    }
    assert!(
        fake.calls_of("banChatMember").is_empty(),
        "renewed members were kicked: {:?}",
        fake.calls_of("banChatMember")
    );
}

// ---- at least once, harmless when repeated ----

/// Makes every attempt to record an effect as done fail, as if the worker died between the
/// Telegram call and its commit.
async fn break_recording(app: &TestApp) {
    app.db()
        .await
        .batch_execute(
            "CREATE FUNCTION test_fail_done() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.status = 'done' THEN RAISE EXCEPTION 'simulated crash before commit'; END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER test_fail_done BEFORE UPDATE ON effects
                 FOR EACH ROW EXECUTE FUNCTION test_fail_done();",
        )
        .await
        .unwrap();
}

async fn repair_recording(app: &TestApp) {
    app.db()
        .await
        .batch_execute("DROP TRIGGER test_fail_done ON effects; DROP FUNCTION test_fail_done();")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_worker_dying_after_the_call_but_before_recording_repeats_harmlessly() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_105, 5501);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;

    // A grant: the member is already inside (say the first attempt got them in).
    let m = grant(&app, s, c, 30).await;
    fake.add_member(chat, user);
    break_recording(&app).await;
    let report = run(&app).await;
    assert_eq!(report.unrecorded, 1, "{report:?}");
    assert_eq!(fake.methods(), ["createChatInviteLink", "sendMessage"]);
    let g = &effects_of(&app, "grant").await[0];
    assert_eq!(
        (g["status"].as_str(), g["attempts"].as_i64()),
        (Some("pending"), Some(0))
    );
    repair_recording(&app).await;
    fake.clear_calls();
    run(&app).await;
    assert_eq!(
        effect(&app, g["id"].as_i64().unwrap()).await["status"],
        "done"
    );
    assert_eq!(fake.methods(), ["sendMessage"]);
    assert!(
        fake.is_member(chat, user),
        "repeating the grant never kicked the member"
    );
    assert!(!fake.is_banned(chat, user));

    // A revoke, same story: ban + unban twice ends exactly like once.
    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;
    sweep(&app).await;
    fake.clear_calls();
    break_recording(&app).await;
    assert_eq!(run(&app).await.unrecorded, 1);
    repair_recording(&app).await;
    run(&app).await;
    // The buyer is told once, however often the revoke ran.
    assert_eq!(
        fake.methods(),
        [
            "banChatMember",
            "unbanChatMember",
            "banChatMember",
            "unbanChatMember",
            "sendMessage"
        ]
    );
    assert!(!fake.is_member(chat, user) && !fake.is_banned(chat, user));
    assert_eq!(effects_of(&app, "revoke").await[0]["status"], "done");
}

// ---- reminders and grace notices ----

#[tokio::test]
async fn reminders_once_per_period_and_a_notice_on_entering_grace() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_501, 6301);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({"grace_period_days": 3})).await;
    let m = grant(&app, s, c, 30).await;
    run(&app).await;
    assert!(
        effects_of(&app, "reminder").await.is_empty(),
        "30 days left: no reminder"
    );

    let soon = (Utc::now() + chrono::Duration::days(2)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": soon})).await;
    fake.clear_calls();
    run(&app).await;
    run(&app).await;
    let reminders = effects_of(&app, "reminder").await;
    assert_eq!(reminders.len(), 1, "one reminder per period");
    assert_eq!(reminders[0]["status"], "done");
    assert_eq!(fake.methods(), ["sendMessage"]);

    // A reminder overtaken by a renewal is not sent.
    let sooner = (Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": sooner})).await;
    let enqueued = memberships::enqueue_due_reminders(&app.app_db().await, 3)
        .await
        .unwrap();
    assert_eq!(enqueued, 1, "a new expiry is a new period");
    grant(&app, s, c, 30).await; // renewal before the worker runs
    fake.clear_calls();
    run(&app).await;
    let texts: Vec<String> = fake
        .calls_of("sendMessage")
        .iter()
        .map(|c| c.params["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts.len(), 1, "only the receipt: {texts:?}");
    assert!(
        texts[0].starts_with("Your access to «") && texts[0].contains("has been extended until"),
        "a staff grant's receipt: {texts:?}"
    );
    let skipped = effects_of(&app, "reminder").await;
    assert_eq!(skipped.len(), 2);
    assert!(
        skipped[1]["payload"]["note"]
            .as_str()
            .unwrap()
            .contains("skipped")
    );

    // Entering grace: one notice.
    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    patch_membership(&app, m, json!({"expires_at": past})).await;
    assert_eq!(sweep(&app).await["to_grace"], 1);
    sweep(&app).await;
    fake.clear_calls();
    run(&app).await;
    assert_eq!(effects_of(&app, "grace_notice").await.len(), 1);
    assert_eq!(fake.methods(), ["sendMessage"]);
    assert!(
        fake.calls()[0].params["text"]
            .as_str()
            .unwrap()
            .contains("grace")
    );
}

// ---- join requests through the outbox ----

#[tokio::test]
async fn join_requests_are_answered_through_the_outbox() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let chat = -1_001_000_000_601;
    let c = channel(&app, chat, json!({})).await;
    let member = subscriber(&app, 6401).await;
    let m = grant(&app, member, c, 30).await;
    settle(&app).await;

    let date = Utc::now().timestamp();
    for user in [6401, 6402] {
        fake.open_join_request(chat, user);
        let r = app
            .post_telegram_update(join_request_update(chat, user, date))
            .await;
        assert_eq!(
            r.expect(200),
            json!({}),
            "answered through the outbox, not the reply"
        );
    }
    // Telegram redelivers the member's update: nothing new.
    app.post_telegram_update(join_request_update(chat, 6401, date))
        .await
        .expect(200);
    let approvals = effects_of(&app, "join_approve").await;
    let declines = effects_of(&app, "join_decline").await;
    assert_eq!((approvals.len(), declines.len()), (1, 1));
    assert_eq!(approvals[0]["user_id"], 6401);
    assert_eq!(declines[0]["user_id"], 6402);
    run(&app).await;
    assert!(fake.is_member(chat, 6401));
    assert!(!fake.is_member(chat, 6402));
    assert_eq!(fake.calls_of("approveChatJoinRequest").len(), 1);
    assert_eq!(fake.calls_of("declineChatJoinRequest").len(), 1);

    // A repeat of a settled request (Telegram says the requester is gone / already inside)
    // counts as done, not as a failure.
    let later = date + 60;
    app.post_telegram_update(join_request_update(chat, 6401, later))
        .await
        .expect(200);
    app.post_telegram_update(join_request_update(chat, 6402, later))
        .await
        .expect(200);
    let report = run(&app).await;
    assert_eq!((report.done, report.failed), (2, 0), "{report:?}");

    // The membership ends between the decision and the call: declined instead.
    fake.open_join_request(chat, 6401);
    app.post_telegram_update(join_request_update(chat, 6401, later + 60))
        .await
        .expect(200);
    patch_membership(&app, m, json!({"status": "expired"})).await;
    settle_kind(&app, "revoke").await;
    fake.clear_calls();
    run(&app).await;
    assert_eq!(fake.methods(), ["declineChatJoinRequest"]);
}

async fn settle_kind(app: &TestApp, kind: &str) {
    app.db()
        .await
        .execute(
            "UPDATE effects SET status = 'done', done_at = now() WHERE status = 'pending' AND kind = $1",
            &[&kind],
        )
        .await
        .unwrap();
}

// ---- invoice links ----

#[tokio::test]
async fn invoice_links_are_made_once_for_stars_orders() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let s = subscriber(&app, 6701).await;
    let c = stars_channel(&app, -1_001_000_000_801).await;
    let order = app.create_order(s, c).await;
    let id = order["id"].as_i64().unwrap();
    let path = format!("/api/orders/{id}/invoice-link");
    let r = app.post(&path, Value::Null).await.expect(200);
    let link = r["order"]["invoice_link"].as_str().unwrap().to_string();
    assert!(link.starts_with("https://t.me/$"), "{r}");
    let calls = fake.calls_of("createInvoiceLink");
    assert_eq!(calls.len(), 1);
    let p = &calls[0].params;
    assert_eq!(p["payload"], order["reference"]);
    assert_eq!(p["currency"], "XTR");
    assert_eq!(p["prices"].as_array().unwrap().len(), 1);
    assert_eq!(p["prices"][0]["amount"], 50);
    assert!(p.get("provider_token").is_none() || p["provider_token"] == "");
    // Again: the stored link, no second invoice.
    let again = app.post(&path, Value::Null).await.expect(200);
    assert_eq!(again["order"]["invoice_link"], link.as_str());
    assert_eq!(fake.calls_of("createInvoiceLink").len(), 1);
    assert_eq!(
        app.get(&format!("/api/orders/{id}")).await.expect(200)["invoice_link"],
        link.as_str()
    );

    // An order of another plan: the link says that plan's title and term, as the bot's
    // invoice of it does.
    let plan = app
        .post(
            "/api/plans",
            json!({"title": "For life", "channel_ids": [c], "price_minor": 900,
                   "period_days": null}),
        )
        .await
        .expect(201);
    let lifetime = app
        .post(
            "/api/orders",
            json!({"subscriber_id": s, "plan_id": plan["id"]}),
        )
        .await
        .expect(201);
    app.post(
        &format!("/api/orders/{}/invoice-link", lifetime["id"]),
        Value::Null,
    )
    .await
    .expect(200);
    let calls = fake.calls_of("createInvoiceLink");
    let p = &calls.last().unwrap().params;
    assert_eq!(p["title"], "For life");
    assert_eq!(
        p["prices"],
        json!([{"label": "Lifetime access", "amount": 900}])
    );
    assert_eq!(calls.len(), 2);

    // A card order: 422. Unknown: 404. A cancelled order without a link: 409.
    let card = channel(&app, -1_001_000_000_802, json!({})).await;
    let card_order = app.create_order(s, card).await;
    app.post(
        &format!("/api/orders/{}/invoice-link", card_order["id"]),
        Value::Null,
    )
    .await
    .expect(422);
    app.post("/api/orders/999999/invoice-link", Value::Null)
        .await
        .expect(404);
    let other = app.create_order(s, c).await;
    app.post(&format!("/api/orders/{}/cancel", other["id"]), Value::Null)
        .await
        .expect(200);
    app.post(
        &format!("/api/orders/{}/invoice-link", other["id"]),
        Value::Null,
    )
    .await
    .expect(409);
}

#[tokio::test]
async fn invoice_links_need_a_bot() {
    let app = TestApp::spawn().await;
    let s = subscriber(&app, 6801).await;
    let c = stars_channel(&app, -1_001_000_000_803).await;
    let order = app.create_order(s, c).await;
    app.post(
        &format!("/api/orders/{}/invoice-link", order["id"]),
        Value::Null,
    )
    .await
    .expect(503);
}

// ---- join requests are decided when they are answered ----

#[tokio::test]
async fn a_decline_is_decided_again_and_a_buyer_who_paid_meanwhile_is_approved() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_000_602, 6411);
    let c = channel(&app, chat, json!({})).await;
    let s = subscriber(&app, user).await;
    fake.open_join_request(chat, user);
    app.post_telegram_update(join_request_update(chat, user, Utc::now().timestamp()))
        .await
        .expect(200);
    let declines = effects_of(&app, "join_decline").await;
    assert_eq!(declines.len(), 1, "not a member yet: a decline is queued");
    // The buyer pays before the worker sends the decline.
    let order = app.create_order(s, c).await;
    app.pay_order(&order, "pay-join-1").await.expect(200);
    run(&app).await;
    assert!(
        fake.calls_of("declineChatJoinRequest").is_empty(),
        "a paying member was declined"
    );
    assert_eq!(fake.calls_of("approveChatJoinRequest").len(), 1);
    assert!(fake.is_member(chat, user));
    let d = effect(&app, declines[0]["id"].as_i64().unwrap()).await;
    assert_eq!(d["status"], "done");
    assert!(
        d["payload"]["note"].as_str().unwrap().contains("approved"),
        "{d}"
    );
}
