//! Keyset pagination of the staff lists: across pages, and with filters combined.

use serde_json::{Value, json};

use crate::{
    catalog::subscribers::{assert_invalid, grant, ids},
    support::{
        bodies::{ListBody, SubscriberBody, body_of},
        helpers::{TestApp, id},
    },
};

// ---------------------------------------------------------------- pagination

#[tokio::test]
async fn pagination_across_pages() {
    let app = TestApp::spawn().await;
    let mut all = Vec::new();
    for i in 1..=7 {
        all.push(id(&app.create_subscriber(1000 + i).await));
    }
    let page = async |query: &str| -> ListBody<SubscriberBody> {
        body_of(
            &app.get(&format!("/api/subscribers?{query}"))
                .await
                .expect(200),
        )
    };
    let page_ids =
        |p: &ListBody<SubscriberBody>| -> Vec<i64> { p.items.iter().map(|s| s.id).collect() };
    let p1 = page("limit=3").await;
    assert_eq!(page_ids(&p1), all[0..3]);
    assert_eq!(p1.next_after, Some(all[2]));
    let p2 = page(&format!("limit=3&after={}", p1.next_after.unwrap())).await;
    assert_eq!(page_ids(&p2), all[3..6]);
    assert_eq!(p2.next_after, Some(all[5]));
    let p3 = page(&format!("after={}&limit=3", p2.next_after.unwrap())).await;
    assert_eq!(page_ids(&p3), all[6..7]);
    assert_eq!(p3.next_after, None);

    // A page that ends exactly at the last row says so (no empty extra page).
    let p = page(&format!("limit=4&after={}", all[2])).await;
    assert_eq!(page_ids(&p), all[3..7]);
    assert_eq!(p.next_after, None);
    // After the end: empty.
    let p = app
        .get(&format!("/api/subscribers?after={}", all[6]))
        .await
        .expect(200);
    assert_eq!(p, json!({"items": [], "next_after": null}));
    // Default limit covers all 7; the maximum is accepted.
    assert_eq!(ids(&app.get("/api/subscribers").await.expect(200)), all);
    assert_eq!(
        ids(&app.get("/api/subscribers?limit=200").await.expect(200)),
        all
    );
    assert_eq!(
        ids(&app
            .get("/api/subscribers?limit=1&after=-5")
            .await
            .expect(200)),
        all[0..1]
    );
    // Deleting the row a cursor points at does not break the next page.
    app.delete(&format!("/api/subscribers/{}", all[2]))
        .await
        .expect(204);
    let p = app
        .get(&format!("/api/subscribers?limit=3&after={}", all[2]))
        .await
        .expect(200);
    assert_eq!(ids(&p), all[3..6]);

    for limit in ["0", "201", "-1"] {
        for path in ["/api/subscribers", "/api/channels", "/api/memberships"] {
            assert_invalid(&app.get(&format!("{path}?limit={limit}")).await, &["limit"]);
        }
    }
}

#[tokio::test]
async fn filters_combine_with_paging() {
    let app = TestApp::spawn().await;
    let mut active = Vec::new();
    for i in 1..=7 {
        let c = app.create_channel(-i, json!({"active": i % 2 == 1})).await;
        if i % 2 == 1 {
            active.push(id(&c));
        }
    }
    assert_eq!(active.len(), 4);
    let p1 = app
        .get("/api/channels?active=true&limit=3")
        .await
        .expect(200);
    assert_eq!(ids(&p1), active[0..3]);
    assert_eq!(p1["next_after"], active[2]);
    let p2 = app
        .get(&format!(
            "/api/channels?active=true&limit=3&after={}",
            p1["next_after"]
        ))
        .await
        .expect(200);
    assert_eq!(ids(&p2), active[3..4]);
    assert_eq!(p2["next_after"], Value::Null);

    // Memberships of one channel, paged.
    let channel = active[0];
    let mut ms = Vec::new();
    for i in 1..=5 {
        let s = id(&app.create_subscriber(i).await);
        ms.push(id(&grant(&app, s, channel, 1).await));
        grant(&app, s, active[1], 1).await; // noise in another channel
    }
    let p1 = app
        .get(&format!("/api/memberships?channel_id={channel}&limit=2"))
        .await
        .expect(200);
    assert_eq!(ids(&p1), ms[0..2]);
    let p2 = app
        .get(&format!(
            "/api/memberships?channel_id={channel}&limit=2&after={}",
            p1["next_after"]
        ))
        .await
        .expect(200);
    assert_eq!(ids(&p2), ms[2..4]);
    let p3 = app
        .get(&format!(
            "/api/memberships?channel_id={channel}&limit=2&after={}",
            p2["next_after"]
        ))
        .await
        .expect(200);
    assert_eq!(ids(&p3), ms[4..5]);
    assert_eq!(p3["next_after"], Value::Null);
}
