//! How the worker converges with Telegram after faults: messages never hold back access
//! changes, a dead worker's claim is taken over after a short lease that a live worker renews,
//! an outage is detected by one probe and costs no effect its back-off, a chat whose bot lost
//! its rights pauses its access effects, and a grant is one call. Set-up helpers are in
//! [`crate::effects`].

use serde_json::json;

use crate::{
    effects::*,
    fake_bot::{FakeBot, Reply},
    helpers::TestApp,
};

/// Stores a join link on channel `c`, so a grant needs no `createChatInviteLink`.
async fn store_link(app: &TestApp, c: i64) {
    app.db()
        .await
        .execute(
            "UPDATE channels SET invite_link = 'https://t.me/+stored' WHERE id = $1",
            &[&(c as i32)],
        )
        .await
        .unwrap();
}

// ---- ordering among access effects only ----

#[tokio::test]
async fn a_receipt_backing_off_holds_back_no_access_change_of_its_member() {
    let fake = FakeBot::start().await;
    let app = app_with(&fake).await;
    let (chat, user) = (-1_001_000_021_001, 21_001);
    let s = subscriber(&app, user).await;
    let c = channel(&app, chat, json!({})).await;
    store_link(&app, c).await;
    let m = grant(&app, s, c, 30).await;
    settle(&app).await;
    // A receipt of that member, then their join request's approval: the receipt fails (500).
    fake.open_join_request(chat, user);
    let ids: Vec<i64> = app
        .db()
        .await
        .query(
            "INSERT INTO effects (kind, membership_id, chat_id, user_id) VALUES
                 ('renewal_receipt', $1, $2, $3), ('join_approve', NULL, $2, $3)
             RETURNING id",
            &[&m, &chat, &user],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    fake.script("sendMessage", Reply::ServerError);
    let report = run(&app).await;
    assert_eq!((report.done, report.retried), (1, 1), "{report:?}");
    let receipt = effect(&app, ids[0]).await;
    assert_eq!(
        (receipt["status"].as_str(), receipt["attempts"].as_i64()),
        (Some("pending"), Some(1)),
        "{receipt}"
    );
    assert_eq!(effect(&app, ids[1]).await["status"], "done");
    assert!(
        fake.is_member(chat, user),
        "approved while the receipt backs off"
    );

    // The membership ends: its revoke is not held back by the receipt either.
    patch_membership(&app, m, json!({"status": "expired"})).await;
    fake.clear_calls();
    let report = run(&app).await;
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(fake.methods(), ["banChatMember", "unbanChatMember"]);
    assert!(!fake.is_member(chat, user));
    assert_eq!(effects_of(&app, "revoke").await[0]["status"], "done");
    assert_eq!(effect(&app, ids[0]).await["status"], "pending");
}
