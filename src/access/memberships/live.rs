//! The "live member" predicates in SQL, written once: whether a membership holds access by its
//! status, whether it is live (see [`super`]'s doc), and the channels a subscriber holds for life.
//! Macros, so SQL constants can splice them with `concat!`.

/// SQL: membership `$m` still holds access by its status (see [`Status::holds_access`](super::Status::holds_access)).
/// `holds_access_sql!("m")`, for a membership row aliased `m`. Spelled `<> 'expired'` — the
/// same rows as `IN ('active', 'grace')` under the column's CHECK — because that is the
/// predicate of the partial indexes the sweep and the seat count use
/// (`memberships_sweep_idx`, `memberships_live_channel_expiry_idx`).
macro_rules! holds_access_sql {
    ($m:literal) => {
        concat!($m, ".status <> 'expired'")
    };
}
pub(crate) use holds_access_sql;

/// SQL: membership `$m` is live — it holds access by its status and database time is before
/// its `expires_at` plus the grace period of its channel `$c` (joined by the caller). The one
/// definition of a live member (see the module doc). `live_sql!("m", "c")`.
macro_rules! live_sql {
    ($m:literal, $c:literal) => {
        concat!(
            $crate::access::memberships::holds_access_sql!($m),
            " AND statement_timestamp() < ",
            $m,
            ".expires_at + make_interval(days => ",
            $c,
            ".grace_period_days)"
        )
    };
}
pub(crate) use live_sql;

/// SQL: the channels subscriber `$s` holds live lifetime access to, ascending (a query:
/// [`lifetime_channels`](super::lifetime_channels)'s, or an `ARRAY(…)` of another statement). `lifetime_channels_sql!("$1")`.
macro_rules! lifetime_channels_sql {
    ($s:literal) => {
        concat!(
            "SELECT m.channel_id FROM memberships m
             WHERE m.subscriber_id = ",
            $s,
            " AND m.expires_at = 'infinity' AND ",
            $crate::access::memberships::holds_access_sql!("m"),
            " ORDER BY m.channel_id"
        )
    };
}
pub(crate) use lifetime_channels_sql;
