//! The automations: their texts and codes checked, an unpaid checkout reminded once and never
//! after it is paid, a win-back with a code no other buyer can use, an offer when a Stars
//! subscription is cancelled, a failed renewal in the owner's words; and `/stop`, which stops
//! them all but not the messages about the buyer's own access.

use serde_json::{Value, json};

use super::{app, buyer, member, sent_to};
use crate::catalog::promo_codes::default_plan;
use crate::{
    bot::conversation::{
        button_update, buttons, next_id, payment_update, person, run, send, stars_channel,
        text_update,
    },
    support::{effects::run_until_done, helpers::TestApp},
};

async fn automation(app: &TestApp, kind: &str, body: Value) -> Value {
    app.patch(&format!("/api/automations/{kind}"), body)
        .await
        .expect(200)
}

/// Moves the last minutes of the clock for automation scans: every invoice sent and every
/// membership ended `minutes` earlier than recorded.
async fn age(app: &TestApp, minutes: i32) {
    let db = app.db().await;
    db.execute(
        "UPDATE effects SET done_at = done_at - make_interval(mins => $1) WHERE kind = 'invoice'",
        &[&minutes],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE membership_events SET at = at - make_interval(mins => $1)",
        &[&minutes],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn automations_are_off_until_switched_on_and_their_texts_are_checked() {
    let (_fake, app) = app().await;
    let list = app.get("/api/automations").await.expect(200);
    let kinds: Vec<(&str, bool)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["kind"].as_str().unwrap(), a["enabled"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("unpaid_checkout", false),
            ("win_back", false),
            ("cancel_offer", false),
            ("renewal_failed", false)
        ]
    );
    let e = app
        .patch("/api/automations/win_back", json!({"enabled": true}))
        .await
        .expect(422);
    assert!(e["errors"]["enabled"].is_string(), "{e}");
    let e = app
        .patch(
            "/api/automations/unpaid_checkout",
            json!({"texts": {"en": "Code { $code }", "uk": "Hi { $nobody }", "de": "Hallo",
                             "ru": "{"},
                   "promo": {"percent_off": 10, "valid_days": 3}, "delay_minutes": -1}),
        )
        .await
        .expect(422);
    for field in [
        "texts.en",
        "texts.uk",
        "texts.de",
        "texts.ru",
        "promo",
        "delay_minutes",
    ] {
        assert!(e["errors"][field].is_string(), "{field}: {e}");
    }
    let e = app
        .patch(
            "/api/automations/win_back",
            json!({"promo": {"percent_off": 101, "valid_days": 0, "plan_ids": [999999]}}),
        )
        .await
        .expect(422);
    for field in ["promo.percent_off", "promo.valid_days", "promo.plan_ids"] {
        assert!(e["errors"][field].is_string(), "{field}: {e}");
    }
    app.patch("/api/automations/broadcast", json!({}))
        .await
        .expect(404);
    app.patch("/api/automations/win_back", json!({"colour": "red"}))
        .await
        .expect(400);
    let on = automation(
        &app,
        "win_back",
        json!({"enabled": true, "texts": {"en": "Back, { $name }? { $code }"},
               "promo": {"percent_off": 20, "valid_days": 7}}),
    )
    .await;
    assert_eq!(on["enabled"], true);
    assert_eq!(
        on["promo"],
        json!({"percent_off": 20, "valid_days": 7, "plan_ids": null})
    );
    // A viewer reads them; only an admin changes them.
    let viewer = format!("Bearer {}", app.token_of_role("viewer").await);
    let headers = [
        ("authorization", viewer.as_str()),
        ("content-type", "application/json"),
    ];
    let r = app
        .request(
            axum::http::Method::PATCH,
            "/api/automations/win_back",
            &headers,
            r#"{"enabled": false}"#,
        )
        .await;
    assert_eq!(r.status, 403);
}

#[tokio::test]
async fn an_unpaid_checkout_is_reminded_once_and_never_once_paid() {
    let (fake, app) = app().await;
    let c = stars_channel(&app, -100_371_001, json!({"title": "Signals"})).await;
    let plan = default_plan(&app, c).await;
    automation(
        &app,
        "unpaid_checkout",
        json!({"enabled": true, "delay_minutes": 30,
               "texts": {"en": "{ $name }, your { $channel } order ({ $price }) is waiting.",
                         "uk": "{ $name }, ваше замовлення «{ $channel }» чекає."}}),
    )
    .await;
    // Two buyers press buy; each gets an invoice.
    buyer(&app, 37_501, "uk").await;
    buyer(&app, 37_502, "en").await;
    for user in [37_501, 37_502] {
        send(&app, &button_update(&person(user), &format!("b:{c}"))).await;
    }
    run_until_done(&app).await;
    // Too early: nothing.
    age(&app, 10).await;
    run(&app).await;
    assert_eq!(app.count("messages").await, 0);
    // The second pays meanwhile.
    let reference: String = app
        .db()
        .await
        .query_one(
            "SELECT o.reference FROM orders o JOIN subscribers s ON s.id = o.subscriber_id
             WHERE s.telegram_user_id = 37502",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    send(
        &app,
        &payment_update("ch-37502", 37_502, &reference, 250, None),
    )
    .await;
    age(&app, 30).await;
    fake.clear_calls();
    run_until_done(&app).await;
    run_until_done(&app).await;
    let to_first = sent_to(&fake, 37_501);
    assert_eq!(to_first.len(), 1, "{to_first:?}");
    let text = to_first[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("Ann Buyer, ваше замовлення «Signals» чекає."),
        "{text}"
    );
    assert_eq!(
        buttons(&to_first[0]),
        [("Завершити оплату".to_string(), format!("p:{plan}"))]
    );
    let reminders: Vec<String> = sent_to(&fake, 37_502)
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .filter(|t| t.contains("waiting"))
        .collect();
    assert!(reminders.is_empty(), "paid, so not reminded: {reminders:?}");
    let listed = app.get("/api/automations").await.expect(200);
    assert_eq!(listed["items"][0]["sent"], 1);
}

#[tokio::test]
async fn a_win_back_code_is_made_for_its_buyer_alone() {
    let (fake, app) = app().await;
    let c = stars_channel(&app, -100_371_101, json!({"title": "Club"})).await;
    automation(
        &app,
        "win_back",
        json!({"enabled": true, "delay_minutes": 60,
               "texts": {"en": "We miss you. { $code } brings «{ $channel }» back for { $price }."},
               "promo": {"percent_off": 20, "valid_days": 7}}),
    )
    .await;
    let s = buyer(&app, 37_601, "en").await;
    let m = member(&app, s, c, "active", 0).await;
    app.patch(
        &format!("/api/memberships/{m}"),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);
    run_until_done(&app).await;
    age(&app, 61).await;
    fake.clear_calls();
    run_until_done(&app).await;
    let to = sent_to(&fake, 37_601);
    assert_eq!(to.len(), 1, "{to:?}");
    let text = to[0]["text"].as_str().unwrap();
    let code: String = app
        .db()
        .await
        .query_one(
            "SELECT code FROM promo_codes WHERE subscriber_id = $1",
            &[&(s as i32)],
        )
        .await
        .unwrap()
        .get(0);
    assert!(code.starts_with("BACK-"), "{code}");
    assert!(
        text.starts_with(&format!(
            "We miss you. {code} brings «Club» back for 200 ⭐."
        )),
        "{text}"
    );
    let plan = default_plan(&app, c).await;
    let (_, url) = buttons(&to[0])[0].clone();
    assert_eq!(
        url,
        format!("https://t.me/subgate_test_bot?start=p{plan}-{code}")
    );
    // Another buyer cannot use it.
    let reply = send(
        &app,
        &text_update(&person(37_602), &format!("/code {code}")),
    )
    .await;
    assert!(
        reply["text"].as_str().unwrap().contains("no such"),
        "{reply}"
    );
    // Once per membership end.
    run_until_done(&app).await;
    assert_eq!(sent_to(&fake, 37_601).len(), 1);
}

#[tokio::test]
async fn a_cancelled_stars_subscription_gets_one_offer_and_a_failed_renewal_the_owner_s_words() {
    let (fake, app) = app().await;
    let c = stars_channel(
        &app,
        -100_371_201,
        json!({"title": "Daily", "recurring": true, "billing_period_days": 30}),
    )
    .await;
    automation(
        &app,
        "cancel_offer",
        json!({"enabled": true, "texts": {"en": "Stay with «{ $channel }»: { $code }"},
               "promo": {"percent_off": 50, "valid_days": 3}}),
    )
    .await;
    automation(
        &app,
        "renewal_failed",
        json!({"enabled": true, "texts": {"en": "Top up your Stars to keep «{ $channel }»."}}),
    )
    .await;
    let s = app.create_subscriber(37_701).await["id"].as_i64().unwrap();
    let order = app
        .post("/api/orders", json!({"subscriber_id": s, "channel_id": c}))
        .await
        .expect(201);
    let reference = order["reference"].as_str().unwrap().to_string();
    let renews = chrono::Utc::now() + chrono::Duration::days(30);
    send(
        &app,
        &payment_update("tg-377", 37_701, &reference, 250, Some((true, renews))),
    )
    .await;
    run_until_done(&app).await;
    fake.clear_calls();
    let update = |state: &str| {
        json!({"update_id": next_id(), "subscription": {
            "user": {"id": 37_701, "is_bot": false, "first_name": "Ann"},
            "invoice_payload": reference, "state": state}})
    };
    send(&app, &update("failed")).await;
    send(&app, &update("canceled")).await;
    send(&app, &update("canceled")).await;
    run_until_done(&app).await;
    let mut texts: Vec<String> = sent_to(&fake, 37_701)
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    texts.sort();
    assert_eq!(texts.len(), 2, "one of each: {texts:?}");
    assert!(
        texts[0].starts_with("Stay with «Daily»: STAY-"),
        "{texts:?}"
    );
    assert!(
        texts[1].starts_with("Top up your Stars to keep «Daily»."),
        "{texts:?}"
    );
}

#[tokio::test]
async fn stop_ends_broadcasts_and_automations_but_not_news_of_one_s_own_access() {
    let (fake, app) = app().await;
    let c = stars_channel(&app, -100_371_301, json!({"title": "Quiet"})).await;
    let s = buyer(&app, 37_801, "uk").await;
    let reply = send(&app, &text_update(&person(37_801), "/stop")).await;
    assert_eq!(
        reply["text"],
        "Готово: ви більше не отримуватимете новин і пропозицій від цього бота. Повідомлення \
         про ваш доступ і платежі надходитимуть і далі. Надішліть /start, щоб знову їх \
         отримувати."
    );
    let sub = app.get(&format!("/api/subscribers/{s}")).await.expect(200);
    assert_eq!(sub["marketing_opt_out"], true);
    // Access news still comes: the grant.
    member(&app, s, c, "active", 0).await;
    run_until_done(&app).await;
    assert_eq!(sent_to(&fake, 37_801).len(), 1, "the grant");
    // A broadcast does not.
    let b = app
        .post(
            "/api/broadcasts",
            json!({"texts": {"en": "News"}, "segment": {}}),
        )
        .await
        .expect(201);
    assert_eq!(b["recipients"], 0);
    // /start takes them back.
    send(&app, &text_update(&person(37_801), "/start")).await;
    let sub = app.get(&format!("/api/subscribers/{s}")).await.expect(200);
    assert_eq!(sub["marketing_opt_out"], false);
    app.post(
        "/api/broadcasts",
        json!({"texts": {"en": "News"}, "segment": {}}),
    )
    .await
    .expect(201);
    run_until_done(&app).await;
    let last = sent_to(&fake, 37_801).last().unwrap()["text"].clone();
    assert_eq!(
        last,
        "News\n\nНадішліть /stop, щоб більше не отримувати таких повідомлень."
    );
}
