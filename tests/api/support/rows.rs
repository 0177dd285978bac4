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
