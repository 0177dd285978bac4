//! Messages to members: broadcasts to a segment (preview, exactly once under concurrent
//! workers, a crash mid-call never sent twice, blocked buyers, cancel, the paid budget, access
//! first; a real `kill -9` mid-broadcast), the four automations (their texts checked, an unpaid checkout reminded once, a
//! win-back code for one buyer alone, an offer at cancel, a failed renewal), and the buyer's
//! consent (`/stop`, `/start`).

mod automations;
mod broadcasts;
mod crash;

use serde_json::{Value, json};

use crate::{
    bot::conversation::{app_with, person, send, text_update},
    support::{fake_bot::FakeBot, helpers::TestApp},
};

/// An app whose Bot API is a fresh fake.
pub(crate) async fn app() -> (FakeBot, TestApp) {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    (fake, app)
}

/// A buyer: Telegram user `user` who wrote `/language <lang>` to the bot (so they are a
/// subscriber speaking it); their subscriber id.
pub(crate) async fn buyer(app: &TestApp, user: i64, lang: &str) -> i64 {
    send(
        app,
        &text_update(&person(user), &format!("/language {lang}")),
    )
    .await;
    app.db()
        .await
        .query_one(
            "SELECT id::bigint FROM subscribers WHERE telegram_user_id = $1",
            &[&user],
        )
        .await
        .unwrap()
        .get(0)
}

/// Grants subscriber `s` 30 days of channel `c` (staff); then sets the membership's status to
/// `status` (and, for `expired`, its end `days_ago` days back); the membership's id.
pub(crate) async fn member(app: &TestApp, s: i64, c: i64, status: &str, days_ago: i64) -> i64 {
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": 30}),
        )
        .await
        .expect(201)["id"]
        .as_i64()
        .unwrap();
    if status != "active" {
        app.db()
            .await
            .execute(
                "UPDATE memberships SET status = $2,
                     expires_at = statement_timestamp() - make_interval(days => $3::integer),
                     updated_at = statement_timestamp() - make_interval(days => $3::integer)
                 WHERE id = $1",
                &[&m, &status, &(days_ago as i32)],
            )
            .await
            .unwrap();
    }
    m
}

/// The `sendMessage` calls to `user`: their parameters.
pub(crate) fn sent_to(fake: &FakeBot, user: i64) -> Vec<Value> {
    fake.calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == user)
        .map(|c| c.params)
        .collect()
}
