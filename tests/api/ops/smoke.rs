use serde_json::json;

use crate::support::helpers::TestApp;

#[tokio::test]
async fn login_create_and_list() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(42).await;
    assert_eq!(s["telegram_user_id"], 42);
    let c = app.create_channel(-1001, json!({})).await;
    assert_eq!(c["currency"], "UAH");
    let list = app.get("/api/subscribers").await.expect(200);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["next_after"], serde_json::Value::Null);
}
