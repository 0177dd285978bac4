//! Every statement that writes effect rows, round-tripped: each writer (the extension upsert, a
//! staff correction, the sweep's batch, a membership's and a subscriber's deletion, the reminder
//! and refund scans, the join-request door, the outbox's `enqueue`, a broadcast's start and an
//! automation's message) is made to write its
//! rows, and every row's payload must parse as its kind's typed payload, serialize back to the
//! very JSON stored (so no writer spells a field its own way), show the same JSON through the
//! staff API, and carry the dedupe key of the one rule for its kind.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde_json::{Value, json};
use subgate::outbox::effects::{self, Kind, NewEffect, Payload, payload};

use crate::support::{effects::grant, helpers::TestApp};

static UPDATE_ID: AtomicI64 = AtomicI64::new(7_000_000);

fn next_id() -> i64 {
    UPDATE_ID.fetch_add(1, Ordering::Relaxed)
}

async fn subscriber(app: &TestApp, user: i64) -> i64 {
    app.create_subscriber(user).await["id"].as_i64().unwrap()
}

async fn channel(app: &TestApp, chat: i64, extra: Value) -> i64 {
    app.create_channel(chat, extra).await["id"]
        .as_i64()
        .unwrap()
}

async fn patch(app: &TestApp, m: i64, body: Value) {
    app.patch(&format!("/api/memberships/{m}"), body)
        .await
        .expect(200);
}

/// The database's now, to the whole second: an instant whose fraction is zero, which every
/// writer must still spell with six digits.
async fn whole_second_from_now(app: &TestApp, d: Duration) -> DateTime<Utc> {
    let now: DateTime<Utc> = app
        .db()
        .await
        .query_one("SELECT statement_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    (now + d).trunc_subsecs(0)
}

fn stars_payment(charge_id: &str, from: i64, reference: &str) -> Value {
    json!({
        "update_id": next_id(),
        "message": {
            "message_id": next_id(),
            "date": Utc::now().timestamp(),
            "chat": {"id": from, "type": "private", "first_name": "Buyer"},
            "from": {"id": from, "is_bot": false, "first_name": "Buyer"},
            "successful_payment": {
                "currency": "XTR", "total_amount": 50, "invoice_payload": reference,
                "telegram_payment_charge_id": charge_id, "provider_payment_charge_id": ""
            }
        }
    })
}

fn join_request(chat: i64, from: i64, date: i64) -> Value {
    json!({
        "update_id": next_id(),
        "chat_join_request": {
            "chat": {"id": chat, "type": "channel", "title": "Private"},
            "from": {"id": from, "is_bot": false, "first_name": "Joiner"},
            "user_chat_id": from,
            "date": date
        }
    })
}

/// An effect row as stored.
struct Row {
    id: i64,
    kind: Kind,
    membership_id: Option<i64>,
    payment_id: Option<i64>,
    order_id: Option<i64>,
    chat_id: Option<i64>,
    user_id: i64,
    payload: Value,
    dedupe_key: Option<String>,
}

async fn rows(app: &TestApp) -> Vec<Row> {
    app.db()
        .await
        .query(
            "SELECT id, kind, membership_id, payment_id, order_id, chat_id, user_id, payload,
                    dedupe_key
             FROM effects ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| Row {
            id: r.get("id"),
            kind: Kind::parse(r.get("kind")).unwrap(),
            membership_id: r.get("membership_id"),
            payment_id: r.get("payment_id"),
            order_id: r.get("order_id"),
            chat_id: r.get("chat_id"),
            user_id: r.get("user_id"),
            payload: r.get("payload"),
            dedupe_key: r.get("dedupe_key"),
        })
        .collect()
}

/// The status a membership transition of `kind` moves to.
fn to_status(kind: Kind) -> &'static str {
    match kind {
        Kind::Grant | Kind::RenewalReceipt => "active",
        Kind::Revoke => "expired",
        Kind::GraceNotice => "grace",
        other => panic!("{other:?} is no transition"),
    }
}

/// The dedupe key the one rule gives `row`, checked against the database where the rule names
/// rows (the transition's event, the payment's charge).
async fn check_key(app: &TestApp, row: &Row, typed: &Payload) {
    let db = app.db().await;
    let key = row.dedupe_key.clone();
    let want = match typed {
        Payload::Revoke(payload::Revoke {
            found: Some(found), ..
        })
        | Payload::Unban(payload::Unban { found }) => {
            // `{kind}:{chat}:{user}:{found}:{marker}`, the marker being the update's date or the
            // audit's id.
            let k = key.as_deref().unwrap();
            let marker = k.rsplit(':').next().unwrap().parse().unwrap();
            Some(effects::found_key(
                row.kind,
                row.chat_id.unwrap(),
                row.user_id,
                *found,
                marker,
            ))
        }
        Payload::Revoke(payload::Revoke {
            deleted: true,
            membership_id,
            ..
        }) => {
            assert_eq!(row.membership_id, None, "a deleted membership's revoke");
            Some(effects::deleted_revoke_key(
                membership_id.expect("the deleted membership"),
            ))
        }
        Payload::Grant(_)
        | Payload::RenewalReceipt(_)
        | Payload::Revoke(_)
        | Payload::GraceNotice(_) => {
            let Some(m) = row.membership_id else {
                // Its membership was deleted since (the effect's id was cleared with it): the
                // key still has the rule's form.
                let k = key.as_deref().unwrap();
                let (m, ev) = k
                    .split_once(':')
                    .and_then(|(_, rest)| rest.split_once(":ev"))
                    .unwrap_or_else(|| panic!("{k}"));
                let (m, ev) = (m.parse().unwrap(), ev.parse().unwrap());
                assert_eq!(effects::transition_key(row.kind, m, ev), key);
                return;
            };
            // The event of the transition: of this membership, to the kind's status, ending the
            // term the payload names; the key names one of them.
            let events: Vec<i64> = db
                .query(
                    "SELECT id FROM membership_events
                     WHERE membership_id = $1 AND to_status = $2 AND expires_at_after = $3",
                    &[&m, &to_status(row.kind), &typed.expires_at().unwrap()],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            let keys: Vec<Option<String>> = events
                .iter()
                .map(|&ev| effects::transition_key(row.kind, m, ev))
                .collect();
            assert!(keys.contains(&key), "{key:?} not among {keys:?}");
            key.clone()
        }
        Payload::Reminder(p) => Some(effects::reminder_key(
            row.membership_id.expect("a reminder's membership"),
            p.expires_at
                .at()
                .expect("a reminder's expiry is an instant"),
        )),
        Payload::Refund(p) => {
            let payment = row.payment_id.expect("a refund's payment");
            let charge: Option<String> = db
                .query_one(
                    "SELECT external_id FROM payments WHERE id = $1",
                    &[&payment],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(p.charge_id, charge);
            Some(format!("refund:{payment}"))
        }
        Payload::JoinApprove(p) | Payload::JoinDecline(p) => p
            .request_date
            .map(|d| format!("join:{}:{}:{d}", row.chat_id.unwrap(), row.user_id)),
        Payload::Invoice(_) => Some(format!("invoice:{}", row.order_id.unwrap())),
        Payload::SubscriptionCancel(p) => {
            Some(format!("subscription_cancel:{}", p.subscription_id))
        }
        Payload::BotMessage(_) => key.clone(),
        Payload::MemberMessage(p) => Some(format!("message:{}", p.message_id)),
        Payload::GatewayRefund(_) => Some(effects::gateway_refund_key(
            row.payment_id.expect("a staff refund's payment"),
        )),
        Payload::ReferralReward(p) => {
            // `referral_reward:{reward}:grant` or `…:back`.
            let k = key.clone().unwrap();
            assert!(
                k == format!("referral_reward:{}:grant", p.reward_id)
                    || k == format!("referral_reward:{}:back", p.reward_id),
                "{k}"
            );
            key.clone()
        }
        Payload::FiscalReceipt(p) => {
            // `receipt:{sale|return}:{payment}`, of the receipt row the payload names.
            let r = db
                .query_one(
                    "SELECT kind, payment_id FROM fiscal_receipts WHERE id = $1",
                    &[&p.fiscal_receipt_id],
                )
                .await
                .unwrap();
            assert_eq!(row.payment_id, Some(r.get::<_, i64>("payment_id")));
            Some(format!(
                "receipt:{}:{}",
                r.get::<_, String>("kind"),
                r.get::<_, i64>("payment_id")
            ))
        }
    };
    assert_eq!(key, want, "effect {} ({:?})", row.id, row.kind);
}

#[tokio::test]
async fn every_writer_s_rows_parse_as_their_kind_s_payload_and_follow_the_key_rule() {
    // A bot configured (dry run), so the join-request door writes through the outbox.
    let app = TestApp::spawn_with(|env| {
        env.insert("TELEGRAM_DRY_RUN".into(), "true".into());
        // Receipts on, so a card payment writes its fiscal receipt (no worker runs here).
        env.insert("CHECKBOX_LICENSE_KEY".into(), "rows-license-key".into());
        env.insert("CHECKBOX_LOGIN".into(), "rows".into());
        env.insert("CHECKBOX_PASSWORD".into(), "rows-password".into());
    })
    .await;
    let (chat, no_grace_chat, stars_chat) =
        (-1_007_000_000_001, -1_007_000_000_002, -1_007_000_000_003);
    let c = channel(&app, chat, json!({"grace_period_days": 3})).await;
    let c0 = channel(&app, no_grace_chat, json!({})).await;
    let cs = channel(
        &app,
        stars_chat,
        json!({"currency": "XTR", "price_minor": 50}),
    )
    .await;

    // The extension statement: a grant, then a receipt.
    let a = subscriber(&app, 7101).await;
    let ma = grant(&app, a, c, 30).await;
    grant(&app, a, c, 30).await;
    // The reminder scan, on an expiry of a whole second.
    let soon = whole_second_from_now(&app, Duration::days(2)).await;
    patch(&app, ma, json!({"expires_at": soon})).await;
    let reminders = subgate::access::memberships::enqueue_due_reminders(&app.app_db().await, 3)
        .await
        .unwrap();
    assert_eq!(reminders, 1);
    // A staff correction: a revoke, then a grant, each at a whole second.
    let ended = whole_second_from_now(&app, Duration::hours(-1)).await;
    patch(&app, ma, json!({"status": "expired", "expires_at": ended})).await;
    let again = whole_second_from_now(&app, Duration::days(10)).await;
    patch(&app, ma, json!({"status": "active", "expires_at": again})).await;

    // The sweep's batch: a grace notice (3 days of grace) and a revoke (none).
    let b = subscriber(&app, 7102).await;
    let mb = grant(&app, b, c, 30).await;
    let d = subscriber(&app, 7103).await;
    let md = grant(&app, d, c0, 30).await;
    let overdue = whole_second_from_now(&app, Duration::hours(-1)).await;
    for m in [mb, md] {
        patch(&app, m, json!({"expires_at": overdue})).await;
    }
    let swept = app.post("/api/sweep", Value::Null).await.expect(200);
    assert_eq!(
        (swept["to_grace"].as_i64(), swept["to_expired"].as_i64()),
        (Some(1), Some(1)),
        "{swept}"
    );
    // Its queued effects, made rows as the worker's next run begins by doing.
    crate::support::effects::materialize(&app).await;

    // Deletions: of a membership, and of a subscriber with a live membership.
    let e = subscriber(&app, 7104).await;
    let me = grant(&app, e, c, 30).await;
    app.delete(&format!("/api/memberships/{me}"))
        .await
        .expect(204);
    let f = subscriber(&app, 7105).await;
    grant(&app, f, c, 30).await;
    app.delete(&format!("/api/subscribers/{f}"))
        .await
        .expect(204);

    // A card payment in hryvnias (door 1): its fiscal receipt, written with it; then its
    // refund at WayForPay: the return receipt.
    let h = subscriber(&app, 7121).await;
    let card = app.create_order(h, c0).await;
    app.pay_order(&card, "pay-rows").await.expect(200);
    let wfp = app.create_order(subscriber(&app, 7122).await, c0).await;
    let wfp_ref = wfp["reference"].as_str().unwrap().to_string();
    for status in ["Approved", "Refunded"] {
        app.post_wayforpay(&crate::support::helpers::wayforpay_callback(
            &wfp_ref, "199", "UAH", status,
        ))
        .await
        .expect(200);
    }
    // One sale receipt per card payment, one return for the refunded one.
    assert_eq!(app.count("effects WHERE kind = 'fiscal_receipt'").await, 3);

    // The refund scan: an order paid twice in Stars, the second payment refund_pending.
    let g = subscriber(&app, 7106).await;
    let order = app.create_order(g, cs).await;
    let reference = order["reference"].as_str().unwrap();
    for charge in ["stx-rows-1", "stx-rows-2"] {
        app.post_telegram_update(stars_payment(charge, 7106, reference))
            .await
            .expect(200);
    }
    let refunds = effects::enqueue_pending_refunds(&app.app_db().await)
        .await
        .unwrap();
    assert_eq!(refunds, 1);
    // A refund staff ask for, of the order's applied Stars payment.
    let applied: i64 = app
        .db()
        .await
        .query_one(
            "SELECT id FROM payments WHERE external_id = 'stx-rows-1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    app.post(
        &format!("/api/payments/{applied}/refund"),
        json!({"reason": "rows"}),
    )
    .await
    .expect(202);

    // The join-request door: a member approved, a stranger declined.
    let date = Utc::now().timestamp();
    for user in [7101, 7199] {
        app.post_telegram_update(join_request(chat, user, date))
            .await
            .expect(200);
    }

    // The outbox's `enqueue`, with each payload its other writers pass (bot messages with and
    // without buttons, an invoice, a subscription cancel).
    let order_id = order["id"].as_i64().unwrap();
    let client = app.app_db().await;
    for (payload, key) in [
        (
            Payload::BotMessage(payload::BotMessage {
                text: "Channels".into(),
                reply_markup: Some(
                    json!({"inline_keyboard": [[{"text": "Buy", "callback_data": "b:1"}]]}),
                ),
            }),
            None,
        ),
        (
            Payload::BotMessage(payload::BotMessage {
                text: "That payment could not be used".into(),
                reply_markup: None,
            }),
            Some("payment_notice:rows".to_string()),
        ),
        (
            Payload::Invoice(payload::Invoice::default()),
            Some(format!("invoice:{order_id}")),
        ),
        (
            Payload::SubscriptionCancel(payload::SubscriptionCancel {
                subscription_id: 41,
            }),
            Some("subscription_cancel:41".to_string()),
        ),
    ] {
        let order_id = matches!(payload, Payload::Invoice(_)).then_some(order_id);
        effects::enqueue(
            &**client,
            &NewEffect {
                membership_id: None,
                payment_id: None,
                order_id,
                chat_id: None,
                user_id: 7106,
                payload,
                dedupe_key: key,
            },
        )
        .await
        .unwrap();
    }
    // The one writer of a revoke or an unban that a look at Telegram asks for (a `chat_member`
    // update, an audit's fix).
    for (kind, found, marker) in [
        (Kind::Revoke, payload::Found::ChatMember, 1_700_000_000),
        (Kind::Unban, payload::Found::Audit, 3),
    ] {
        effects::enqueue_found(&**client, kind, -1007106, 7106, found, marker)
            .await
            .unwrap();
    }
    // A buyer-referrer's reward days, owed by a referred buyer's payment.
    let referrer = subscriber(&app, 7108).await;
    let referred = subscriber(&app, 7109).await;
    client
        .batch_execute(&format!(
            "UPDATE referral_program SET enabled = true, buyer_reward_days = 7;
             INSERT INTO affiliates (name, code, subscriber_id) VALUES ('Friend', 'FRIEND', {referrer});
             INSERT INTO referral_attributions (subscriber_id, affiliate_id)
             SELECT {referred}, id FROM affiliates WHERE code = 'FRIEND';"
        ))
        .await
        .unwrap();
    let order = app.create_order(referred, c0).await;
    app.pay_order(&order, "referred_rows").await.expect(200);
    // Messages to members: a broadcast's start (every recipient's in one statement) and an
    // automation's message.
    let w = subscriber(&app, 7107).await;
    app.post(
        "/api/broadcasts",
        json!({"texts": {"en": "News"}, "segment": {"statuses": ["never_paid"]}}),
    )
    .await
    .expect(201);
    subgate::messages::sent::enqueue(
        &client,
        &subgate::messages::sent::NewMessage {
            subscriber_id: w as i32,
            kind: subgate::messages::Kind::UnpaidCheckout,
            order_id: None,
            membership_id: None,
            star_subscription_id: None,
            promo_code_id: None,
            dedupe_key: "unpaid_checkout:rows".into(),
            delay_minutes: 0,
        },
        subgate::present::locale::Language::En,
    )
    .await
    .unwrap()
    .expect("a new message");
    drop(client);

    let rows = rows(&app).await;
    let api: Value = app.get("/api/effects?limit=200").await.expect(200);
    let api = api["items"].as_array().unwrap();
    assert_eq!(api.len(), rows.len());
    for kind in Kind::ALL {
        assert!(
            rows.iter().any(|r| r.kind == kind),
            "no writer of {kind:?} was exercised"
        );
    }
    for (row, shown) in rows.iter().zip(api) {
        let typed = Payload::parse(row.kind, &row.payload)
            .unwrap_or_else(|e| panic!("effect {} ({:?}): {e}: {}", row.id, row.kind, row.payload));
        assert_eq!(typed.kind(), row.kind);
        assert_eq!(
            typed.to_json(),
            row.payload,
            "effect {} ({:?}) spells its payload its own way",
            row.id,
            row.kind
        );
        assert_eq!(shown["id"].as_i64(), Some(row.id));
        assert_eq!(
            shown["payload"], row.payload,
            "the staff API shows the payload as stored"
        );
        check_key(&app, row, &typed).await;
    }
    // Both deletion writers, both sweep transitions, the correction's and the refund's revokes
    // are there.
    let revokes = rows.iter().filter(|r| r.kind == Kind::Revoke).count();
    assert_eq!(
        revokes, 6,
        "staff, sweep, membership delete, subscriber delete, found in the chat, a refund"
    );
}
