//! Telegram's `subscription` updates (`BotSubscriptionUpdated`): a Stars subscription the buyer
//! cancelled in Telegram is recorded cancelled by the buyer (and the reminder says when access
//! ends), one re-enabled is active again (its renewal is applied), a failed renewal is told to
//! the buyer once; repeats change nothing, and odd updates are kept for review with a 200.
//! Also: the `setWebhook` call the docs give asks Telegram for every kind the door handles.

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use subgate::{
    access::memberships,
    present::texts::{self, Language},
};

use crate::{
    bot::conversation::{
        app_with, membership_of, messages_to, next_id, payment_update, person, send, stars_channel,
        text_update,
    },
    support::{
        effects::run_until_done,
        fake_bot::{FakeBot, TOKEN},
        helpers::TestApp,
    },
};

/// A `subscription` update as Telegram sends it.
fn subscription_update(user: i64, payload: &str, state: &str) -> Value {
    json!({
        "update_id": next_id(),
        "subscription": {
            "user": {"id": user, "is_bot": false, "first_name": "Ann", "language_code": "en"},
            "invoice_payload": payload,
            "state": state
        }
    })
}

/// A recurring Stars channel «Daily» and Telegram user `user` subscribed to it through its
/// first charge `charge` (renewing in 30 days): (channel id, order reference).
async fn subscribed(app: &TestApp, chat: i64, user: i64, charge: &str) -> (i64, String) {
    let c = stars_channel(
        app,
        chat,
        json!({"title": "Daily", "recurring": true, "billing_period_days": 30}),
    )
    .await;
    let s = app.create_subscriber(user).await["id"].as_i64().unwrap();
    let order = app
        .post("/api/orders", json!({"subscriber_id": s, "channel_id": c}))
        .await
        .expect(201);
    let reference = order["reference"].as_str().unwrap().to_string();
    let renews_at = Utc::now() + Duration::days(30);
    send(
        app,
        &payment_update(charge, user, &reference, 250, Some((true, renews_at))),
    )
    .await;
    (c, reference)
}

/// `(status, cancelled_by)` of the subscription started by `charge`.
async fn subscription_of(app: &TestApp, charge: &str) -> (String, Option<String>) {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT status, cancelled_by FROM star_subscriptions WHERE charge_id = $1",
            &[&charge],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// `(outcome, note)` of every recorded `subscription` update, oldest first.
async fn recorded(app: &TestApp) -> Vec<(String, Option<String>)> {
    app.db()
        .await
        .query(
            "SELECT outcome, note FROM star_subscription_updates ORDER BY created_at, update_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Enqueues every reminder due within 40 days and sends everything out.
async fn remind(app: &TestApp) {
    memberships::enqueue_due_reminders(&app.app_db().await, 40)
        .await
        .unwrap();
    run_until_done(app).await;
}

fn said_to(fake: &FakeBot, user: i64, part: &str) -> Vec<String> {
    messages_to(fake, user)
        .into_iter()
        .filter(|m| m.contains(part))
        .collect()
}

#[tokio::test]
async fn a_subscription_cancelled_in_telegram_is_recorded_and_re_enabled() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (c, reference) = subscribed(&app, -100_900_001, 7901, "tg-1").await;
    run_until_done(&app).await;

    // While it renews, the reminder says so (nothing to buy).
    remind(&app).await;
    let reminders = said_to(&fake, 7901, "«Daily»");
    assert!(
        reminders
            .iter()
            .any(|m| m.starts_with("Your subscription to «Daily» renews automatically on ")),
        "{reminders:?}"
    );

    // The buyer cancels in Telegram: recorded cancelled by the buyer, Telegram not asked again.
    fake.clear_calls();
    let cancel = subscription_update(7901, &reference, "canceled");
    assert_eq!(send(&app, &cancel).await, json!({}));
    assert_eq!(
        subscription_of(&app, "tg-1").await,
        ("cancelled".into(), Some("buyer".into()))
    );
    // A redelivery changes nothing and is recorded once.
    assert_eq!(send(&app, &cancel).await, json!({}));
    assert_eq!(recorded(&app).await, [("applied".to_string(), None)]);
    run_until_done(&app).await;
    assert!(fake.calls_of("editUserStarSubscription").is_empty());
    let reply = send(&app, &text_update(&person(7901), "/subscriptions")).await;
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("Renewal cancelled: it will not renew."),
        "{reply}"
    );

    // Re-enabled in Telegram: active again, and its next renewal is applied, not reviewed.
    send(&app, &subscription_update(7901, &reference, "active")).await;
    assert_eq!(subscription_of(&app, "tg-1").await, ("active".into(), None));
    let (_, before) = membership_of(&app, 7901, c).await.unwrap();
    send(
        &app,
        &payment_update(
            "tg-2",
            7901,
            &reference,
            250,
            Some((false, Utc::now() + Duration::days(60))),
        ),
    )
    .await;
    let outcome: String = app
        .db()
        .await
        .query_one(
            "SELECT outcome FROM payments WHERE external_id = 'tg-2'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(outcome, "applied");
    // One period more (to at least Telegram's renewal date plus a day).
    let (_, after) = membership_of(&app, 7901, c).await.unwrap();
    assert!(after >= before + Duration::days(30), "{before} → {after}");
}

#[tokio::test]
async fn the_reminder_of_a_cancelled_subscription_says_when_access_ends() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (c, reference) = subscribed(&app, -100_900_002, 7902, "tg-c").await;
    send(&app, &subscription_update(7902, &reference, "canceled")).await;
    run_until_done(&app).await;
    fake.clear_calls();

    remind(&app).await;
    let (status, ends) = membership_of(&app, 7902, c).await.unwrap();
    assert_eq!(status, "active");
    let l = Language::En;
    assert_eq!(
        messages_to(&fake, 7902),
        [texts::reminder(l, "Daily", &texts::day(l, ends))]
    );
}

#[tokio::test]
async fn a_failed_renewal_is_told_to_the_buyer_once_with_how_to_renew() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (c, reference) = subscribed(&app, -100_900_003, 7903, "tg-f").await;
    run_until_done(&app).await;
    fake.clear_calls();

    let failed = subscription_update(7903, &reference, "failed");
    send(&app, &failed).await;
    send(&app, &failed).await;
    // Telegram reporting the same failure again (a new update) says nothing new either.
    send(&app, &subscription_update(7903, &reference, "failed")).await;
    run_until_done(&app).await;
    let (_, until) = membership_of(&app, 7903, c).await.unwrap();
    let told = messages_to(&fake, 7903);
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        told[0],
        format!(
            "Telegram could not charge the renewal of your subscription to «Daily». Your access \
             stays until {}. To keep it, top up your Telegram Stars and renew the subscription \
             in Telegram (Settings → My Stars), or buy again here: /subscriptions",
            texts::day(Language::En, until)
        )
    );
    assert_eq!(
        recorded(&app).await,
        [
            ("applied".to_string(), None),
            ("unchanged".to_string(), None)
        ]
    );
    // Still active: Telegram may yet charge it.
    assert_eq!(subscription_of(&app, "tg-f").await, ("active".into(), None));
}

#[tokio::test]
async fn odd_subscription_updates_are_kept_for_review_never_a_5xx() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (_, reference) = subscribed(&app, -100_900_004, 7904, "tg-o").await;
    // Staff cancel it: Telegram re-enabling it is for staff to look at, not applied.
    let id: i64 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM star_subscriptions WHERE charge_id = 'tg-o'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    app.post(&format!("/api/star-subscriptions/{id}/cancel"), json!({}))
        .await
        .expect(200);

    for update in [
        subscription_update(7904, "ord_nope", "canceled"),
        subscription_update(7904, &reference, "paused"),
        subscription_update(1234, &reference, "canceled"),
        subscription_update(7904, &reference, "active"),
        json!({"update_id": next_id(), "subscription": {"invoice_payload": 5, "state": 1}}),
        json!({"update_id": next_id(), "subscription": {"user": {"id": 7904},
               "invoice_payload": "ord\u{0}x", "state": "failed"}}),
    ] {
        assert_eq!(send(&app, &update).await, json!({}), "{update}");
    }
    let notes: Vec<(String, Option<String>)> = recorded(&app).await;
    assert_eq!(
        notes,
        [
            "no Stars subscription was started by this invoice_payload",
            "unknown state",
            "the user is not the subscription's buyer",
            "re-enabled in Telegram, but staff or subgate cancelled it",
            "the update lacks its user, invoice_payload or state",
            "no Stars subscription was started by this invoice_payload",
        ]
        .map(|n| ("review".to_string(), Some(n.to_string())))
    );
    assert_eq!(
        subscription_of(&app, "tg-o").await,
        ("cancelled".into(), Some("staff".into()))
    );
}

#[tokio::test]
async fn the_documented_set_webhook_asks_for_every_update_the_door_handles() {
    let fake = FakeBot::start().await;
    let handled = [
        "message",
        "callback_query",
        "pre_checkout_query",
        "chat_join_request",
        "chat_member",
        "my_chat_member",
        "subscription",
    ];
    for doc in ["docs/bot.md", "docs/telegram.md"] {
        let text =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(doc))
                .unwrap();
        // The JSON body of the documented `curl … setWebhook -d '…'`, with the secret spliced.
        let start = text.find("setWebhook\" \\").expect(doc);
        let body = &text[start..];
        let body = &body[body.find("-d '").unwrap() + 4..];
        let body = &body[..body.find("}'").unwrap() + 1];
        let body = body.replace(
            "\"'\"$TELEGRAM_WEBHOOK_SECRET\"'\"",
            "\"s3cret-s3cret-s3cret\"",
        );
        let params: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{doc}: {e}"));
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/bot{TOKEN}/setWebhook", fake.url))
            .json(&params)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["ok"], true, "{doc}: {answer}");
        let allowed = fake.allowed_updates().unwrap();
        for kind in handled {
            assert!(
                allowed.iter().any(|k| k == kind),
                "{doc} lacks {kind}: {allowed:?}"
            );
        }
    }
}
