//! The bot speaks the buyer's language: whole conversations in Ukrainian and Russian, the
//! language taken from Telegram's `language_code`, remembered, switched with `/language` and
//! by staff, and the messages sent later (the grant, a payment notice) said in the language
//! the buyer has when they are sent.

use serde_json::{Value, json};

use crate::{
    bot::{
        conversation::{
            app_with, assert_answer, button_update, buttons, channel, messages_to, orders_of,
            payment_update, pre_checkout_update, run, send, stars_channel, text_update,
        },
        plans::{assert_contains, text},
    },
    support::fake_bot::FakeBot,
};

fn speaker(id: i64, language_code: &str) -> Value {
    json!({"id": id, "is_bot": false, "first_name": "Оля", "username": format!("buyer{id}"),
           "language_code": language_code})
}

#[tokio::test]
async fn a_ukrainian_buyer_is_answered_in_ukrainian_from_the_catalogue_to_the_join_link() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_900_001, json!({"title": "Rust щотижня"})).await;
    channel(
        &app,
        -100_900_002,
        json!({"title": "Картковий", "price_minor": 1_234_550, "currency": "UAH"}),
    )
    .await;
    let buyer = speaker(7101, "uk");

    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert_contains(
        text(&reply),
        &[
            "Ось канали та групи, до яких можна приєднатися:",
            "Rust щотижня\n250 ⭐ за 30 днів",
            // ICU4X's Ukrainian digits: a no-break space between thousands, a decimal comma.
            "12\u{a0}345,50 ₴ за 30 днів",
            "Натисніть кнопку, щоб купити.",
        ],
    );
    assert_eq!(
        buttons(&reply)[0],
        (
            "Купити: Rust щотижня · 250 ⭐".to_string(),
            format!("b:{c}")
        )
    );
    assert_eq!(buttons(&reply)[1].0, "Купити: Картковий · 12\u{a0}345,50 ₴");

    let reply = send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert_answer(&reply, "Зараз надішлю рахунок.");
    let again = send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    assert_answer(
        &again,
        "Рахунок за цей канал або групу — у чаті вище, він досі дійсний.",
    );
    run(&app).await;
    let invoice = &fake.calls_of("sendInvoice")[0].params;
    assert_eq!(
        invoice["description"],
        "Доступ до «Rust щотижня» на 30 днів."
    );
    assert_eq!(invoice["prices"][0]["label"], "Доступ на 30 днів");

    let (_, reference, _) = orders_of(&app, 7101, c).await[0].clone();
    let answer = send(&app, &pre_checkout_update("q-7101", 7101, &reference, 250)).await;
    assert_eq!(answer["ok"], true, "{answer}");
    send(
        &app,
        &payment_update("ch-7101", 7101, &reference, 250, None),
    )
    .await;
    fake.clear_calls();
    run(&app).await;
    let grant = &messages_to(&fake, 7101)[0];
    assert_contains(
        grant,
        &[
            "Оплату отримано, дякуємо! Ваш доступ до «Rust щотижня» діє до ",
            " р. о ",
            "Приєднатися: https://t.me/+fake",
        ],
    );

    let reply = send(&app, &text_update(&buyer, "/subscriptions")).await;
    assert_contains(
        text(&reply),
        &["Ваші канали та групи:", "Rust щотижня\nДіє до "],
    );
    assert_eq!(
        buttons(&reply),
        [("Продовжити: Rust щотижня".to_string(), format!("b:{c}"))]
    );
    // The language Telegram gave at the first purchase is remembered.
    let s = app
        .get("/api/subscribers?telegram_user_id=7101")
        .await
        .expect(200);
    assert_eq!(s["items"][0]["language"], "uk", "{s}");
}

#[tokio::test]
async fn a_russian_buyer_is_answered_in_russian_with_russian_plurals() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(
        &app,
        -100_900_011,
        json!({"title": "Сигналы", "billing_period_days": 7, "price_minor": 2000}),
    )
    .await;
    let buyer = speaker(7102, "ru-RU");
    let reply = send(&app, &text_update(&buyer, "/help")).await;
    assert_contains(
        text(&reply),
        &[
            "Вот каналы и группы, к которым можно присоединиться:",
            "Сигналы\n2000 ⭐ за 7 дней",
        ],
    );
    let reply = send(&app, &text_update(&buyer, "hello")).await;
    assert_contains(
        text(&reply),
        &[
            "Я продаю доступ к закрытым каналам и группам.",
            "/language — сменить язык",
        ],
    );
    let reply = send(&app, &text_update(&buyer, "/code")).await;
    assert_eq!(
        text(&reply),
        "Отправьте /code и свой промокод, например: /code SPRING25"
    );
    let reply = send(&app, &text_update(&buyer, "/code NOPE")).await;
    assert_eq!(
        text(&reply),
        "К сожалению, код NOPE нельзя использовать: такого кода нет."
    );
    let reply = send(&app, &button_update(&buyer, "b:999999")).await;
    assert_answer(
        &reply,
        "Эта кнопка больше не действует. Отправьте /start, чтобы увидеть каналы и группы.",
    );
    let reply = send(&app, &text_update(&buyer, "/subscriptions")).await;
    assert_eq!(
        text(&reply),
        "У вас пока нет каналов и групп. Отправьте /start, чтобы увидеть каналы и группы, к которым можно присоединиться."
    );
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    run(&app).await;
    let invoice = &fake.calls_of("sendInvoice")[0].params;
    assert_eq!(invoice["description"], "Доступ к «Сигналы» на 7 дней.");
    // A second payment of the paid order is refunded; the notice is in Russian.
    let (_, reference, _) = orders_of(&app, 7102, c).await[0].clone();
    send(&app, &payment_update("ru-1", 7102, &reference, 2000, None)).await;
    send(&app, &payment_update("ru-2", 7102, &reference, 2000, None)).await;
    run(&app).await;
    let told: Vec<String> = messages_to(&fake, 7102)
        .into_iter()
        .filter(|m| m.contains("Звёзды будут возвращены"))
        .collect();
    assert_eq!(told.len(), 1, "{:?}", messages_to(&fake, 7102));
    assert!(
        told[0].starts_with("Не удалось зачесть ваш платёж 2000 ⭐ за «Сигналы»"),
        "{told:?}"
    );
}

#[tokio::test]
async fn language_is_chosen_with_slash_language_and_by_staff_and_later_messages_follow_it() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(&app, -100_900_021, json!({"title": "Club"})).await;
    // A language the bot does not speak: the default, English.
    let buyer = speaker(7103, "de");
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(text(&reply).starts_with("Here are the channels and groups you can join:"));

    let reply = send(&app, &text_update(&buyer, "/language")).await;
    assert_eq!(text(&reply), "Choose the language I write in:");
    assert_eq!(
        buttons(&reply),
        [
            ("English".to_string(), "g:1".to_string()),
            ("Українська".to_string(), "g:2".to_string()),
            ("Русский".to_string(), "g:3".to_string()),
        ]
    );
    let reply = send(&app, &button_update(&buyer, "g:2")).await;
    assert_answer(&reply, "Відтепер я пишу українською.");
    let reply = send(&app, &text_update(&buyer, "/start")).await;
    assert!(text(&reply).starts_with("Ось канали"), "{reply}");
    // A forged language button is refused in the buyer's language.
    let reply = send(&app, &button_update(&buyer, "g:9")).await;
    assert_answer(
        &reply,
        "Ця кнопка вже не діє. Надішліть /start, щоб побачити канали та групи.",
    );

    // Bought in Ukrainian; before the grant is sent the buyer switches to Russian: the grant
    // (rendered when it is sent) is in Russian.
    send(&app, &button_update(&buyer, &format!("b:{c}"))).await;
    let (_, reference, _) = orders_of(&app, 7103, c).await[0].clone();
    send(
        &app,
        &payment_update("ch-7103", 7103, &reference, 250, None),
    )
    .await;
    let reply = send(&app, &text_update(&buyer, "/language ru")).await;
    assert_eq!(text(&reply), "Теперь я пишу по-русски.");
    fake.clear_calls();
    run(&app).await;
    let grant = &messages_to(&fake, 7103)[0];
    assert!(
        grant.starts_with("Оплата получена, спасибо! Ваш доступ к «Club» действует до "),
        "{grant}"
    );
    assert!(grant.contains(" г. в "), "{grant}");

    // Staff see and set it; null goes back to the default (Telegram's language, else English).
    let list = app
        .get("/api/subscribers?telegram_user_id=7103")
        .await
        .expect(200);
    assert_eq!(list["items"][0]["language"], "ru");
    let id = list["items"][0]["id"].as_i64().unwrap();
    let s = app
        .patch(&format!("/api/subscribers/{id}"), json!({"language": "en"}))
        .await
        .expect(200);
    assert_eq!(s["language"], "en");
    let reply = send(&app, &text_update(&buyer, "/subscriptions")).await;
    assert!(
        text(&reply).starts_with("Your channels and groups:"),
        "{reply}"
    );
    let bad = app
        .patch(&format!("/api/subscribers/{id}"), json!({"language": "de"}))
        .await
        .expect(422);
    assert!(bad.to_string().contains("language"), "{bad}");
    let s = app
        .patch(&format!("/api/subscribers/{id}"), json!({"language": null}))
        .await
        .expect(200);
    assert_eq!(s["language"], Value::Null);
    let created = app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": 7104, "language": "uk"}),
        )
        .await
        .expect(201);
    assert_eq!(created["language"], "uk");
    let uk_buyer = speaker(7104, "en");
    let reply = send(&app, &text_update(&uk_buyer, "/start")).await;
    assert!(text(&reply).starts_with("Ось канали"), "{reply}");
}

#[tokio::test]
async fn channel_and_plan_translations_are_read_in_the_buyers_language_with_fallback() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let c = stars_channel(
        &app,
        -100_900_031,
        json!({"title": "Club", "description": "About the club.",
               "translations": {"uk": {"title": "Клуб", "description": "Про клуб."},
                                "ru": {"title": "Клуб по-русски"}}}),
    )
    .await;
    let channel = app.get(&format!("/api/channels/{c}")).await.expect(200);
    assert_eq!(
        channel["translations"],
        json!({"uk": {"title": "Клуб", "description": "Про клуб."},
               "ru": {"title": "Клуб по-русски", "description": null}})
    );
    let plan = app
        .post(
            "/api/plans",
            json!({"title": "Yearly", "channel_ids": [c], "price_minor": 2000,
                   "period_days": 365, "translations": {"uk": {"title": "Річний"}}}),
        )
        .await
        .expect(201);
    assert_eq!(plan["translations"]["uk"]["title"], "Річний");

    let uk = speaker(7105, "uk");
    let reply = send(&app, &text_update(&uk, &format!("/start c{c}"))).await;
    assert_contains(
        text(&reply),
        &[
            "Клуб\nПро клуб.",
            "• Клуб: 250 ⭐ за 30 днів",
            "• Річний: 2000 ⭐ за 365 днів",
        ],
    );
    // Russian: the title translated, the description falls back to the default one.
    let ru = speaker(7106, "ru");
    let reply = send(&app, &text_update(&ru, &format!("/start c{c}"))).await;
    assert_contains(
        text(&reply),
        &[
            "Клуб по-русски\nAbout the club.",
            "• Yearly: 2000 ⭐ за 365 дней",
        ],
    );
    // English: the default title and description.
    let en = speaker(7107, "en");
    let reply = send(&app, &text_update(&en, &format!("/start c{c}"))).await;
    assert_contains(
        text(&reply),
        &["Club\nAbout the club.", "• Yearly: 2000 ⭐ for 365 days"],
    );

    // The invoice of the plan, in Ukrainian.
    let plan_id = plan["id"].as_i64().unwrap();
    send(&app, &button_update(&uk, &format!("p:{plan_id}"))).await;
    run(&app).await;
    let invoice = &fake.calls_of("sendInvoice")[0].params;
    assert_eq!(invoice["title"], "Річний");
    assert_eq!(invoice["description"], "Доступ до «Річний» на 365 днів.");

    // Staff input is checked; {} removes every translation.
    for (bad, field) in [
        (
            json!({"translations": {"de": {"title": "Klub"}}}),
            "translations.de",
        ),
        (
            json!({"translations": {"uk": {"title": ""}}}),
            "translations.uk.title",
        ),
        (
            json!({"translations": {"uk": {"title": "Клуб", "description": "я".repeat(1001)}}}),
            "translations.uk.description",
        ),
        (json!({"translations": null}), "translations"),
        (json!({"translations": "uk"}), "translations"),
    ] {
        let e = app
            .patch(&format!("/api/channels/{c}"), bad.clone())
            .await
            .expect(422);
        assert!(e.to_string().contains(field), "{bad}: {e}");
    }
    let e = app
        .patch(
            &format!("/api/plans/{plan_id}"),
            json!({"translations": {"uk": {"title": "я".repeat(256)}}}),
        )
        .await
        .expect(422);
    assert!(e.to_string().contains("translations.uk.title"), "{e}");
    let changed = app
        .patch(&format!("/api/channels/{c}"), json!({"translations": {}}))
        .await
        .expect(200);
    assert_eq!(changed["translations"], json!({}));
    let reply = send(&app, &text_update(&uk, &format!("/start c{c}"))).await;
    assert_contains(text(&reply), &["Club\nAbout the club."]);
}

/// Runs `subgate migrate` with the bot's language settings; returns whether it succeeded and
/// its standard error.
async fn start_with(
    app: &crate::support::helpers::TestApp,
    vars: Vec<(&'static str, String)>,
) -> (bool, String) {
    let url = crate::support::helpers::url_for(&app.db_name);
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_subgate"))
            .arg("migrate")
            .env_clear()
            .env("DATABASE_URL", &url)
            .env("JWT_SECRET", crate::support::helpers::JWT_SECRET)
            .envs(vars)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("the subgate binary runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn start_up_stops_with_one_line_on_a_bad_message_file_or_language() {
    let app = crate::support::helpers::TestApp::spawn().await;
    let dir = std::env::temp_dir().join(format!("subgate-bot-messages-{}", app.db_name));
    std::fs::create_dir_all(dir.join("uk")).unwrap();
    let shipped = include_str!("../../../locales/uk/bot.ftl");
    let file = dir.join("uk").join("bot.ftl");
    let dir_var = dir.to_string_lossy().into_owned();

    // A file that passes the check replaces the shipped one; start-up goes on.
    std::fs::write(&file, shipped.replace("Ось канали", "Наші канали")).unwrap();
    let (ok, stderr) = start_with(&app, vec![("BOT_MESSAGES_DIR", dir_var.clone())]).await;
    assert!(ok, "{stderr}");

    // A placeholder that does not match the English message's.
    std::fs::write(&file, shipped.replace("{ $ends }", "{ $until }")).unwrap();
    let (ok, stderr) = start_with(&app, vec![("BOT_MESSAGES_DIR", dir_var.clone())]).await;
    assert!(!ok);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: message reminder uses placeholders",
            file.display()
        )),
        "{stderr}"
    );

    // A message missing.
    let without: String = shipped
        .lines()
        .filter(|l| !l.starts_with("renew-button"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, without).unwrap();
    let (ok, stderr) = start_with(&app, vec![("BOT_MESSAGES_DIR", dir_var.clone())]).await;
    assert!(
        !ok && stderr.contains("message renew-button is missing"),
        "{stderr}"
    );

    let (ok, stderr) = start_with(&app, vec![("BOT_DEFAULT_LANGUAGE", "de".into())]).await;
    assert!(
        !ok && stderr.contains("BOT_DEFAULT_LANGUAGE must be en, uk or ru"),
        "{stderr}"
    );
    let (ok, stderr) = start_with(&app, vec![("BOT_DEFAULT_LANGUAGE", "ru".into())]).await;
    assert!(ok, "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn reminders_and_grace_notices_are_said_in_the_remembered_language() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let user = 7108;
    let s = app
        .post(
            "/api/subscribers",
            json!({"telegram_user_id": user, "language": "uk"}),
        )
        .await
        .expect(201)["id"]
        .as_i64()
        .unwrap();
    let c = channel(
        &app,
        -100_900_041,
        json!({"title": "Club", "grace_period_days": 3,
               "translations": {"uk": {"title": "Клуб"}}}),
    )
    .await;
    let m = crate::support::effects::grant(&app, s, c, 30).await;
    run(&app).await;
    assert!(
        messages_to(&fake, user)[0].starts_with("Вам надано доступ до «Клуб» до "),
        "{:?}",
        messages_to(&fake, user)
    );

    let soon = (chrono::Utc::now() + chrono::Duration::days(2)).to_rfc3339();
    crate::support::effects::patch_membership(&app, m, json!({"expires_at": soon})).await;
    fake.clear_calls();
    run(&app).await;
    let reminder = &messages_to(&fake, user)[0];
    assert!(
        reminder.starts_with("Ваш доступ до «Клуб» закінчується ")
            && reminder.contains(" р. о ")
            && reminder.ends_with("щоб не втратити: /subscriptions"),
        "{reminder}"
    );

    // The buyer switches to Russian; the grace notice follows.
    let reply = send(&app, &text_update(&speaker(user, "uk"), "/language ru")).await;
    assert_eq!(text(&reply), "Теперь я пишу по-русски.");
    let past = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    crate::support::effects::patch_membership(&app, m, json!({"expires_at": past})).await;
    assert_eq!(crate::support::effects::sweep(&app).await["to_grace"], 1);
    fake.clear_calls();
    run(&app).await;
    let notice = &messages_to(&fake, user)[0];
    assert!(
        notice.starts_with("Ваш доступ к «Club» закончился ") && notice.contains("льготный период"),
        "{notice}"
    );
}

#[tokio::test]
async fn the_configured_default_language_speaks_to_buyers_the_bot_knows_nothing_about() {
    let app = crate::support::helpers::TestApp::spawn().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let secret = "default-language-secret";
    let _server = tokio::process::Command::new(env!("CARGO_BIN_EXE_subgate"))
        .args(["serve", "--no-migrate"])
        .env_clear()
        .env(
            "DATABASE_URL",
            crate::support::helpers::url_for(&app.db_name),
        )
        .env("JWT_SECRET", crate::support::helpers::JWT_SECRET)
        .env("BIND_ADDR", format!("127.0.0.1:{port}"))
        .env("TELEGRAM_WEBHOOK_SECRET", secret)
        .env("BOT_DEFAULT_LANGUAGE", "ru")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the subgate binary runs");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let ask = |from: Value| {
        let http = http.clone();
        let url = format!("{base}/api/webhook/telegram");
        async move {
            let r = http
                .post(url)
                .header("X-Telegram-Bot-Api-Secret-Token", secret)
                .json(&text_update(&from, "/help"))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            r.json::<Value>().await.unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    // A language the bot does not speak, and none at all: the configured default.
    assert_eq!(
        ask(speaker(7109, "de")).await,
        "Сейчас нет каналов и групп в продаже. Загляните, пожалуйста, позже."
    );
    let mut silent = speaker(7110, "en");
    silent.as_object_mut().unwrap().remove("language_code");
    assert!(ask(silent).await.starts_with("Сейчас нет каналов и групп"));
    // A language it speaks wins over the default.
    assert_eq!(
        ask(speaker(7111, "uk")).await,
        "Зараз немає каналів і груп у продажу. Загляньте, будь ласка, пізніше."
    );
}
