//! The rows tests read back and the time they move, in one place: a count of any table's rows
//! with bound parameters, typed readers of the rows tests check most (a struct read by column
//! name, so an assertion names the column it checks), and [`expire_hold`], which moves a seat
//! hold into the past in the database instead of sleeping through it.

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;

use crate::support::helpers::TestApp;

/// `SELECT count(*) FROM {from}` with `params` bound (`from` is the part after `FROM`, its
/// `WHERE` included). Without parameters, [`TestApp::count`] says the same.
pub(crate) async fn count(app: &TestApp, from: &str, params: &[&(dyn ToSql + Sync)]) -> i64 {
    app.db()
        .await
        .query_one(&format!("SELECT count(*) FROM {from}"), params)
        .await
        .unwrap()
        .get(0)
}

/// Moves order `order_id`'s seat hold to `secs_ago` seconds before the database's clock, so the
/// hold has run out without the test waiting for it; returns the new `hold_until`. Panics when
/// the order holds no seat.
pub(crate) async fn expire_hold(app: &TestApp, order_id: i64, secs_ago: i64) -> DateTime<Utc> {
    app.db()
        .await
        .query_one(
            "UPDATE orders SET hold_until = statement_timestamp() - make_interval(secs => $2)
             WHERE id = $1 AND hold_until IS NOT NULL RETURNING hold_until",
            &[&order_id, &(secs_ago as f64)],
        )
        .await
        .expect("the order has a hold to expire")
        .get(0)
}

/// What the payment core decided about a payment: its row in `payments`, read by column name.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PaymentRow {
    pub(crate) outcome: String,
    pub(crate) reason: Option<String>,
    pub(crate) renewal: bool,
}

/// The payment with this external id (a Stars charge id, an order reference, …); panics unless
/// exactly one row has it.
pub(crate) async fn payment(app: &TestApp, external_id: &str) -> PaymentRow {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT outcome, reason, renewal FROM payments WHERE external_id = $1",
            &[&external_id],
        )
        .await
        .unwrap();
    PaymentRow {
        outcome: r.get("outcome"),
        reason: r.get("reason"),
        renewal: r.get("renewal"),
    }
}

/// An order's state in `orders`, read by column name: its status, its seat hold, and whether a
/// newer order of the same buyer replaced it.
#[derive(Debug)]
pub(crate) struct OrderRow {
    pub(crate) status: String,
    pub(crate) hold_until: Option<DateTime<Utc>>,
    pub(crate) superseded: bool,
}

/// Order `order_id`; panics when there is none.
pub(crate) async fn order_row(app: &TestApp, order_id: i64) -> OrderRow {
    let r = app
        .db()
        .await
        .query_one(
            "SELECT status, hold_until, superseded_at IS NOT NULL AS superseded
             FROM orders WHERE id = $1",
            &[&order_id],
        )
        .await
        .unwrap();
    OrderRow {
        status: r.get("status"),
        hold_until: r.get("hold_until"),
        superseded: r.get("superseded"),
    }
}

/// A membership in `memberships`, read by column name.
#[derive(Debug)]
pub(crate) struct MembershipRow {
    pub(crate) id: i64,
    pub(crate) status: String,
    pub(crate) expires_at: DateTime<Utc>,
}

/// The membership of subscriber `subscriber_id` in channel `channel_id`, if there is one.
pub(crate) async fn membership_row(
    app: &TestApp,
    subscriber_id: i64,
    channel_id: i64,
) -> Option<MembershipRow> {
    app.db()
        .await
        .query_opt(
            "SELECT id, status, expires_at FROM memberships
             WHERE subscriber_id = $1 AND channel_id = $2",
            &[&(subscriber_id as i32), &(channel_id as i32)],
        )
        .await
        .unwrap()
        .map(|r| MembershipRow {
            id: r.get("id"),
            status: r.get("status"),
            expires_at: r.get("expires_at"),
        })
}
