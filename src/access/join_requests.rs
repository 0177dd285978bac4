//! Owns `join_requests`: the join requests that came to a `mini_app` door with a query, each
//! waiting until its buyer's access is granted (approved) or it is declined
//! (migrations/0027_the_door.sql says what each column means).

use deadpool_postgres::{GenericClient, Transaction};

use crate::{common::error::ApiError, db};

crate::text_enum! {
    /// A request's fate: the `state` column.
    pub enum State {
        Waiting => "waiting",
        Approved => "approved",
        Declined => "declined",
    }
}

/// Ties the waiting request `reference` of Telegram user `user_id` to order `order_id`, when
/// the request's channel is one of the order's plan; no other request changes.
const LINK_ORDER_SQL: &str = "UPDATE join_requests j SET order_id = $3
     FROM orders o
     WHERE j.reference = $1 AND j.user_id = $2 AND j.state = 'waiting'
       AND o.id = $3
       AND EXISTS (SELECT 1 FROM plan_channels pc
                   WHERE pc.plan_id = o.plan_id AND pc.channel_id = j.channel_id)
     RETURNING j.id";

/// The state of the newest request of Telegram user `$2` tied to order `$1`.
const STATE_OF_ORDER_SQL: &str = "SELECT state FROM join_requests
     WHERE order_id = $1 AND user_id = $2
     ORDER BY id DESC LIMIT 1";

/// Links the Mini App's order `order_id` to the waiting join request `reference` (the page's
/// `r`) of Telegram user `user_id`, when it is one for a channel of the order's plan; whether a
/// request was linked.
pub async fn link_order(
    tx: &Transaction<'_>,
    reference: &str,
    user_id: i64,
    order_id: i64,
) -> Result<bool, ApiError> {
    Ok(
        db::row_opt(tx, LINK_ORDER_SQL, &[&reference, &user_id, &order_id])
            .await?
            .is_some(),
    )
}

/// The state of Telegram user `user_id`'s request tied to order `order_id`, if one is.
pub async fn state_of_order(
    client: &impl GenericClient,
    order_id: i64,
    user_id: i64,
) -> Result<Option<State>, ApiError> {
    Ok(
        match db::row_opt(client, STATE_OF_ORDER_SQL, &[&order_id, &user_id]).await? {
            Some(row) => Some(row.try_get("state")?),
            None => None,
        },
    )
}
