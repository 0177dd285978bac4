//! Typed ids of the two rows every lock and every membership is keyed by: a subscriber and a
//! channel. The pair lock (`db::lock_pair`), the membership writes (`memberships::extend` and
//! its siblings) and the seat rule (`orders::seats`) take a [`SubscriberId`] and a
//! [`ChannelId`], so the two `integer`s cannot be passed in the wrong order.
//!
//! A leaf below `db`: plain values with no dependency. Each is its `integer` column in the
//! database (`ToSql`/`FromSql` of the `i32` inside) and in JSON (a plain number).

use std::fmt;

use postgres_types::{FromSql, ToSql};
use serde::{Deserialize, Serialize};

/// The id of a `subscribers` row.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSql, FromSql,
)]
#[serde(transparent)]
#[postgres(transparent)]
pub struct SubscriberId(pub i32);

/// The id of a `channels` row.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSql, FromSql,
)]
#[serde(transparent)]
#[postgres(transparent)]
pub struct ChannelId(pub i32);

impl fmt::Display for SubscriberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
