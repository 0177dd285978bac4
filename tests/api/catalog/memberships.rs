//! Memberships through the staff API: read with filters, a patch that writes exactly the given
//! fields and one staff event, a patch that refuses `null`, and delete.

use axum::http::Method;
use serde_json::{Value, json};

use crate::{
    catalog::subscribers::{assert_invalid, grant, ids, raw},
    staff::auth::assert_problem,
    support::{
        bodies::{EventBody, ListBody, MembershipBody, body_of},
        helpers::{TestApp, id},
    },
};

// ---------------------------------------------------------------- memberships

#[tokio::test]
async fn membership_read_filters_and_404s() {
    let app = TestApp::spawn().await;
    let s1 = id(&app.create_subscriber(1).await);
    let s2 = id(&app.create_subscriber(2).await);
    let c1 = id(&app.create_channel(-1, json!({})).await);
    let c2 = id(&app.create_channel(-2, json!({})).await);
    let m11 = grant(&app, s1, c1, 5).await;
    let m12 = grant(&app, s1, c2, 5).await;
    let m21 = grant(&app, s2, c1, 5).await;
    let m22 = grant(&app, s2, c2, 5).await;
    app.patch(
        &format!("/api/memberships/{}", id(&m22)),
        json!({"status": "expired"}),
    )
    .await
    .expect(200);

    assert_eq!(
        ids(&app.get("/api/memberships").await.expect(200)),
        vec![id(&m11), id(&m12), id(&m21), id(&m22)]
    );
    assert_eq!(
        ids(&app
            .get(&format!("/api/memberships?subscriber_id={s1}"))
            .await
            .expect(200)),
        vec![id(&m11), id(&m12)]
    );
    assert_eq!(
        ids(&app
            .get(&format!("/api/memberships?channel_id={c1}"))
            .await
            .expect(200)),
        vec![id(&m11), id(&m21)]
    );
    assert_eq!(
        ids(&app.get("/api/memberships?status=expired").await.expect(200)),
        vec![id(&m22)]
    );
    assert_eq!(
        ids(&app.get("/api/memberships?status=active").await.expect(200)),
        vec![id(&m11), id(&m12), id(&m21)]
    );
    assert_eq!(
        ids(&app
            .get(&format!(
                "/api/memberships?subscriber_id={s2}&channel_id={c2}&status=expired"
            ))
            .await
            .expect(200)),
        vec![id(&m22)]
    );
    assert_eq!(
        ids(&app
            .get(&format!("/api/memberships?subscriber_id={s2}&status=grace"))
            .await
            .expect(200)),
        Vec::<i64>::new()
    );

    let got = app
        .get(&format!("/api/memberships/{}", id(&m11)))
        .await
        .expect(200);
    assert_eq!(got, m11);
    assert_eq!(got["status"], "active");
    assert_eq!(got["subscriber_id"], s1);
    assert_eq!(got["channel_id"], c1);

    assert_invalid(
        &app.get("/api/memberships?status=paused").await,
        &["status"],
    );
    for q in ["?subscriber_id=x", "?bogus=1", "?channel_id=1.5"] {
        assert_problem(&app.get(&format!("/api/memberships{q}")).await, 400);
    }
    for p in [
        "/api/memberships/999999",
        "/api/memberships/abc",
        "/api/memberships/999999/events",
        "/api/memberships/x/events",
    ] {
        assert_problem(&app.get(p).await, 404);
    }
    assert_problem(
        &app.patch("/api/memberships/999999", json!({"status": "active"}))
            .await,
        404,
    );
    assert_problem(&app.delete("/api/memberships/999999").await, 404);
}

#[tokio::test]
async fn membership_patch_writes_exactly_the_given_fields_and_one_staff_event() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(1).await);
    let c = id(&app
        .create_channel(-1, json!({"grace_period_days": 3}))
        .await);
    let m: MembershipBody = body_of(&grant(&app, s, c, 30).await);
    let path = format!("/api/memberships/{}", m.id);
    let events_path = format!("{path}/events");

    let events: ListBody<EventBody> = body_of(&app.get(&events_path).await.expect(200));
    assert_eq!(events.items.len(), 1, "creation event");
    assert_eq!(events.items[0].cause, "staff");
    assert_eq!(events.items[0].from_status, None);
    assert_eq!(events.next_after, None);

    // Status only: expires_at untouched.
    let p: MembershipBody = body_of(
        &app.patch(&path, json!({"status": "grace"}))
            .await
            .expect(200),
    );
    assert_eq!(p.status, "grace");
    assert_eq!(p.expires_at, m.expires_at);
    let events: ListBody<EventBody> = body_of(&app.get(&events_path).await.expect(200));
    let items = &events.items;
    assert_eq!(items.len(), 2);
    let e = &items[1];
    assert_eq!(e.cause, "staff");
    assert_eq!(e.from_status.as_deref(), Some("active"));
    assert_eq!(e.to_status, "grace");
    assert_eq!(e.membership_id, m.id);
    assert_eq!(e.payment_id, None);
    assert_eq!(e.expires_at_before.as_ref(), Some(&m.expires_at));
    assert_eq!(e.expires_at_after, m.expires_at);

    // expires_at only, back-dated: written exactly, status untouched, no extension.
    let back = "2020-01-02T03:04:05Z";
    let p: MembershipBody = body_of(
        &app.patch(&path, json!({"expires_at": back}))
            .await
            .expect(200),
    );
    assert_eq!(p.expires_at, back);
    assert_eq!(p.status, "grace");
    let row = app
        .db()
        .await
        .query_one(
            "SELECT status, expires_at = '2020-01-02T03:04:05Z'::timestamptz FROM memberships WHERE id = $1",
            &[&m.id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "grace");
    assert!(row.get::<_, bool>(1));

    // Both at once: one more event, not two.
    let future = "2099-12-31T23:59:59Z";
    let p = app
        .patch(&path, json!({"expires_at": future, "status": "active"}))
        .await
        .expect(200);
    let typed: MembershipBody = body_of(&p);
    assert_eq!(
        (typed.status.as_str(), typed.expires_at.as_str()),
        ("active", future)
    );
    let events: ListBody<EventBody> = body_of(&app.get(&events_path).await.expect(200));
    let items = &events.items;
    assert_eq!(items.len(), 4);
    assert_eq!(items[3].from_status.as_deref(), Some("grace"));
    assert_eq!(items[3].to_status, "active");
    assert_eq!(items[3].expires_at_before.as_deref(), Some(back));
    assert_eq!(items[3].expires_at_after, future);
    assert!(items.iter().all(|e| e.cause == "staff"));
    // Event paging works like every list.
    let first = app.get(&format!("{events_path}?limit=3")).await.expect(200);
    assert_eq!(first["items"].as_array().unwrap().len(), 3);
    let rest = app
        .get(&format!(
            "{events_path}?limit=3&after={}",
            first["next_after"]
        ))
        .await
        .expect(200);
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_after"], Value::Null);

    // Refusals change nothing and record nothing.
    assert_invalid(
        &app.patch(&path, json!({"status": "paused"})).await,
        &["status"],
    );
    assert_problem(&app.patch(&path, json!({})).await, 422);
    for body in [
        r#"{"expires_at": "tomorrow"}"#,
        r#"{"expires_at": 5}"#,
        r#"{"days": 3}"#,
        r#"{"status": 1}"#,
        "{",
    ] {
        assert_problem(&raw(&app, Method::PATCH, &path, body).await, 400);
    }
    assert_eq!(
        app.get(&events_path).await.expect(200)["items"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(app.get(&path).await.expect(200), p);
}

#[tokio::test]
async fn membership_delete_is_204_then_404() {
    let app = TestApp::spawn().await;
    let s = id(&app.create_subscriber(1).await);
    let c = id(&app.create_channel(-1, json!({})).await);
    let m = grant(&app, s, c, 30).await;
    let path = format!("/api/memberships/{}", id(&m));
    app.delete(&path).await.expect(204);
    assert_problem(&app.get(&path).await, 404);
    assert_problem(&app.get(&format!("{path}/events")).await, 404);
    assert_problem(&app.delete(&path).await, 404);
    assert_problem(&app.patch(&path, json!({"status": "active"})).await, 404);
    assert_eq!(app.count("membership_events").await, 0);
    // The subscriber and channel remain; a new grant creates a new membership (201).
    let r = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": 1}),
        )
        .await;
    assert_ne!(id(&r.expect(201)), id(&m));
}

#[tokio::test]
async fn a_membership_patch_refuses_null_like_every_patch() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(900).await;
    let c = app.create_channel(-900, json!({})).await;
    let m = grant(&app, id(&s), id(&c), 30).await;
    let path = format!("/api/memberships/{}", id(&m));

    // An explicit null is not "leave alone": it is refused, naming the field, and nothing changes.
    for field in ["status", "expires_at"] {
        let mut body = json!({"status": "grace", "expires_at": "2030-01-01T00:00:00Z"});
        body[field] = Value::Null;
        let r = app.patch(&path, body).await;
        assert_problem(&r, 422);
        assert_eq!(r.json()["errors"][field], "must not be null", "{field}");
    }
    let now = app.get(&path).await.expect(200);
    assert_eq!(now["status"], "active");
    assert_eq!(now["expires_at"], m["expires_at"]);
    assert_eq!(
        app.count("membership_events WHERE cause = 'staff'").await,
        1,
        "only the grant's event"
    );
}
