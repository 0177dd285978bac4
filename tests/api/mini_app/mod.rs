//! The Mini App: its page (`/app/`) in a real browser, as a buyer sees it inside Telegram (`page`),
//! and its API (`/app/api/`): who may call it (`initData` checked, the limit per buyer),
//! the offer as the bot would list it, orders made from the page and paid by a Stars link or a
//! card page (or granted at once), and the member portal with its Stars subscriptions.
//! `support` here builds signed `initData` ([`subgate::bot::mini_app::sign_init_data`]) and the
//! calls the other files make.

mod auth;
mod buying;
mod page;
mod portal;

use axum::http::Method;
use chrono::Utc;
use serde_json::{Value, json};
use subgate::bot::mini_app::sign_init_data;

use crate::support::{
    fake_bot::TOKEN,
    helpers::{TestApp, TestResponse},
};

/// `initData` of Telegram user `user` whose app speaks `language`, signed with `token` at
/// `auth_date`.
pub(crate) fn init_data_with(token: &str, user: i64, language: &str, auth_date: i64) -> String {
    let user = json!({"id": user, "first_name": "Ann", "last_name": "Buyer",
                      "username": format!("buyer{user}"), "language_code": language})
    .to_string();
    sign_init_data(
        token,
        &[
            ("query_id", "AAHdF6IQAAAAAN0XohDhrOrc"),
            ("user", &user),
            ("auth_date", &auth_date.to_string()),
        ],
    )
}

/// `initData` of Telegram user `user` speaking `language`, signed now with the tests' bot token.
pub(crate) fn init_data(user: i64, language: &str) -> String {
    init_data_with(TOKEN, user, language, Utc::now().timestamp())
}

/// A Mini App call with `Authorization: tma <init_data>`.
pub(crate) async fn call_as(
    app: &TestApp,
    init_data: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> TestResponse {
    let auth = format!("tma {init_data}");
    app.request(
        method,
        path,
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body.map(|b| b.to_string()).unwrap_or_default(),
    )
    .await
}

/// A call by Telegram user `user` speaking English.
pub(crate) async fn call(
    app: &TestApp,
    user: i64,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> TestResponse {
    call_as(app, &init_data(user, "en"), method, path, body).await
}

/// The default plan of channel `channel`.
pub(crate) async fn default_plan(app: &TestApp, channel: i64) -> i64 {
    app.db()
        .await
        .query_one(
            "SELECT id FROM plans WHERE default_of = $1",
            &[&(channel as i32)],
        )
        .await
        .unwrap()
        .get("id")
}

/// `POST /app/api/orders` of `plan` by `user`.
pub(crate) async fn order(app: &TestApp, user: i64, body: Value) -> TestResponse {
    call(app, user, Method::POST, "/app/api/orders", Some(body)).await
}

/// The keys of a JSON object, sorted: what a body must spell exactly as the page expects.
#[track_caller]
pub(crate) fn assert_keys(v: &Value, expected: &[&str]) {
    let mut keys: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut expected = expected.to_vec();
    expected.sort_unstable();
    assert_eq!(keys, expected, "{v}");
}
