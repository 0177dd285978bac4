//! Statistics of the business, computed in SQL: revenue by interval and currency, members by
//! interval and channel, and a summary of now. Reads only; the indexes that keep these queries
//! short are in migration 14 (`make bench` measures them on 1M memberships and 5M payments,
//! docs/benchmarks.md).
//!
//! Intervals are UTC calendar days, ISO weeks (from Monday) or months; `from` is rounded down
//! to the start of its interval and `to` is exclusive, so the first interval is whole and the
//! last may be partial. Definitions (docs/staff.md repeats them for readers):
//! - **revenue**: payments by `paid_at`. `gross` is every payment the core accepted (`applied`,
//!   and those refunded or being refunded since); payments kept for review are not revenue.
//!   `refunded` is the part of those refunded (by the payment's own interval), `net` the rest.
//! - **members**, from the membership events: `new` memberships (their creation), `renewed`
//!   (a payment extending an existing membership), `expired` (moved to expired: churn),
//!   `trials_started` (trial uses), `trials_converted` (the first paid payment of a pair after
//!   its trial), and `live` at the end of the interval: live now minus the live changes the
//!   events record after that instant (a deleted membership takes its events with it, so it
//!   is in no interval).
//! - **summary**: MRR by currency (live, non-lifetime memberships whose pair is not on an
//!   unpaid trial, each at its channel's price normalised to 30 days), active members
//!   (distinct subscribers with a live membership), and over the last 30 days the churn rate
//!   (expirations over memberships live 30 days ago) and the renewal rate (renewals over
//!   renewals plus expirations).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use tokio_postgres::Row;

use crate::{db, error::ApiError};

crate::text_enum! {
    /// The length of one interval of a series.
    pub enum Interval {
        Day => "day",
        Week => "week",
        Month => "month",
    }
}

/// The most intervals a series may have.
pub const MAX_INTERVALS: i64 = 400;

/// How many intervals `[from, to)` spans (`from` rounded down to its interval), from the
/// calendar; `None` when `to` is not after `from`.
pub fn intervals(from: DateTime<Utc>, to: DateTime<Utc>, interval: Interval) -> Option<i64> {
    use chrono::Datelike;
    if to <= from {
        return None;
    }
    let days = (to - from).num_days() + 1;
    Some(match interval {
        Interval::Day => days,
        Interval::Week => days / 7 + 2,
        Interval::Month => {
            i64::from(to.year() - from.year()) * 12 + i64::from(to.month())
                - i64::from(from.month())
                + 1
        }
    })
}

/// One interval and currency of revenue.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"start": "2026-01-05T00:00:00Z", "currency": "UAH",
    "gross_minor": 597000, "refunded_minor": 19900, "net_minor": 577100, "payments": 30}))]
pub struct Revenue {
    /// Where the interval starts (UTC).
    pub start: DateTime<Utc>,
    pub currency: String,
    pub gross_minor: i64,
    pub refunded_minor: i64,
    pub net_minor: i64,
    /// How many payments make up `gross_minor`.
    pub payments: i64,
}

/// The series' intervals, `start` and `stop` (exclusive), by UTC calendar arithmetic (whatever
/// the session's time zone): `$1` from, `$2` to, `$3` the interval's name.
const STARTS: &str = "starts AS (
         SELECT s AT TIME ZONE 'UTC' AS start,
                (s + ('1 ' || $3)::interval) AT TIME ZONE 'UTC' AS stop
         FROM generate_series(date_trunc($3, $1::timestamptz AT TIME ZONE 'UTC'),
                              $2::timestamptz AT TIME ZONE 'UTC' - interval '1 microsecond',
                              ('1 ' || $3)::interval) AS s
     )";

/// The outcomes that are revenue.
const REVENUE_OUTCOMES: &str = "('applied', 'refund_pending', 'refunded', 'refund_failed')";

fn revenue_sql() -> String {
    format!(
        "WITH {STARTS},
         agg AS (
             SELECT date_trunc($3, paid_at, 'UTC') AS start, currency,
                    sum(amount_minor)::bigint AS gross,
                    (coalesce(sum(amount_minor) FILTER (WHERE outcome = 'refunded'), 0))::bigint
                        AS refunded,
                    count(*) AS payments
             FROM payments
             WHERE paid_at >= (SELECT min(start) FROM starts) AND paid_at < $2
               AND outcome IN {REVENUE_OUTCOMES}
             GROUP BY 1, 2
         ),
         currencies AS (SELECT DISTINCT currency FROM agg)
         SELECT s.start, c.currency, coalesce(a.gross, 0) AS gross_minor,
                coalesce(a.refunded, 0) AS refunded_minor,
                coalesce(a.gross - a.refunded, 0) AS net_minor,
                coalesce(a.payments, 0) AS payments
         FROM starts s CROSS JOIN currencies c
         LEFT JOIN agg a ON a.start = s.start AND a.currency = c.currency
         ORDER BY s.start, c.currency"
    )
}

/// Revenue per interval and currency over `[from, to)`: every interval of every currency that
/// had revenue in the range (zeros where it had none).
pub async fn revenue(
    client: &impl GenericClient,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    interval: Interval,
) -> Result<Vec<Revenue>, ApiError> {
    let rows = db::rows(client, &revenue_sql(), &[&from, &to, &interval.as_str()]).await?;
    rows.iter()
        .map(|r| {
            Ok(Revenue {
                start: r.try_get("start")?,
                currency: r.try_get("currency")?,
                gross_minor: r.try_get("gross_minor")?,
                refunded_minor: r.try_get("refunded_minor")?,
                net_minor: r.try_get("net_minor")?,
                payments: r.try_get("payments")?,
            })
        })
        .collect()
}

/// One interval and channel of members.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"start": "2026-01-05T00:00:00Z", "channel_id": 1, "live": 412,
    "new": 31, "renewed": 58, "expired": 12, "trials_started": 9, "trials_converted": 4}))]
pub struct Members {
    /// Where the interval starts (UTC).
    pub start: DateTime<Utc>,
    pub channel_id: i32,
    /// Live (active or grace) memberships at the end of the interval (now, for an interval
    /// that has not ended).
    pub live: i64,
    pub new: i64,
    pub renewed: i64,
    /// Moved to expired (churned).
    pub expired: i64,
    pub trials_started: i64,
    pub trials_converted: i64,
}

/// Whether a status is live, as SQL over `from_status`/`to_status`.
const LIVE_DELTA: &str = "(CASE WHEN e.to_status <> 'expired' THEN 1 ELSE 0 END
     - CASE WHEN e.from_status IS NOT NULL AND e.from_status <> 'expired' THEN 1 ELSE 0 END)";

fn members_sql() -> String {
    format!(
        "WITH {STARTS},
         bounds AS (SELECT min(start) AS first, max(stop) AS last FROM starts),
         chans AS (SELECT id AS channel_id FROM channels WHERE ($4::int IS NULL OR id = $4)),
         live_now AS (
             SELECT channel_id, count(*) AS n FROM memberships
             WHERE status <> 'expired' AND ($4::int IS NULL OR channel_id = $4)
             GROUP BY channel_id
         ),
         ev AS (
             SELECT e.at, m.channel_id, {LIVE_DELTA} AS delta,
                    (e.from_status IS NULL) AS is_new,
                    (e.cause = 'payment' AND e.from_status IS NOT NULL) AS is_renewal,
                    (e.to_status = 'expired' AND e.from_status IS DISTINCT FROM 'expired')
                        AS is_expiry
             FROM membership_events e JOIN memberships m ON m.id = e.membership_id
             WHERE e.at >= (SELECT first FROM bounds)
               AND ($4::int IS NULL OR m.channel_id = $4)
         ),
         tail AS (
             SELECT channel_id, sum(delta) AS delta FROM ev
             WHERE at >= (SELECT last FROM bounds) GROUP BY channel_id
         ),
         per_interval AS (
             SELECT date_trunc($3, at, 'UTC') AS start, channel_id,
                    count(*) FILTER (WHERE is_new) AS new,
                    count(*) FILTER (WHERE is_renewal) AS renewed,
                    count(*) FILTER (WHERE is_expiry) AS expired,
                    sum(delta) AS delta
             FROM ev WHERE at < (SELECT last FROM bounds)
             GROUP BY 1, 2
         ),
         trials AS (
             SELECT date_trunc($3, created_at, 'UTC') AS start, channel_id, count(*) AS n
             FROM trial_uses
             WHERE created_at >= (SELECT first FROM bounds) AND created_at < $2
               AND ($4::int IS NULL OR channel_id = $4)
             GROUP BY 1, 2
         ),
         conversions AS (
             SELECT date_trunc($3, p.paid_at, 'UTC') AS start, p.channel_id, count(*) AS n
             FROM payments p
             JOIN trial_uses t ON t.subscriber_id = p.subscriber_id
                              AND t.channel_id = p.channel_id AND t.created_at < p.paid_at
             WHERE p.paid_at >= (SELECT first FROM bounds) AND p.paid_at < $2
               AND p.outcome = 'applied' AND p.amount_minor > 0
               AND ($4::int IS NULL OR p.channel_id = $4)
               AND NOT EXISTS (
                   SELECT 1 FROM payments q
                   WHERE q.subscriber_id = p.subscriber_id AND q.channel_id = p.channel_id
                     AND q.outcome = 'applied' AND q.amount_minor > 0
                     AND q.paid_at > t.created_at
                     AND (q.paid_at, q.id) < (p.paid_at, p.id))
             GROUP BY 1, 2
         ),
         grid AS (
             SELECT s.start, c.channel_id, coalesce(p.new, 0) AS new,
                    coalesce(p.renewed, 0) AS renewed, coalesce(p.expired, 0) AS expired,
                    coalesce(p.delta, 0) AS delta
             FROM starts s CROSS JOIN chans c
             LEFT JOIN per_interval p ON p.start = s.start AND p.channel_id = c.channel_id
         )
         SELECT g.start, g.channel_id,
                (coalesce(l.n, 0) - coalesce(tl.delta, 0)
                 - coalesce(sum(g.delta) OVER (PARTITION BY g.channel_id ORDER BY g.start DESC
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::bigint AS live,
                g.new, g.renewed, g.expired,
                coalesce(t.n, 0) AS trials_started, coalesce(v.n, 0) AS trials_converted
         FROM grid g
         LEFT JOIN live_now l ON l.channel_id = g.channel_id
         LEFT JOIN tail tl ON tl.channel_id = g.channel_id
         LEFT JOIN trials t ON t.start = g.start AND t.channel_id = g.channel_id
         LEFT JOIN conversions v ON v.start = g.start AND v.channel_id = g.channel_id
         ORDER BY g.start, g.channel_id"
    )
}

/// Members per interval and channel over `[from, to)`, every channel (or only `channel_id`).
pub async fn members(
    client: &impl GenericClient,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    interval: Interval,
    channel_id: Option<i32>,
) -> Result<Vec<Members>, ApiError> {
    let rows = db::rows(
        client,
        &members_sql(),
        &[&from, &to, &interval.as_str(), &channel_id],
    )
    .await?;
    rows.iter().map(members_row).collect()
}

fn members_row(r: &Row) -> Result<Members, ApiError> {
    Ok(Members {
        start: r.try_get("start")?,
        channel_id: r.try_get("channel_id")?,
        live: r.try_get("live")?,
        new: r.try_get("new")?,
        renewed: r.try_get("renewed")?,
        expired: r.try_get("expired")?,
        trials_started: r.try_get("trials_started")?,
        trials_converted: r.try_get("trials_converted")?,
    })
}

/// Monthly recurring revenue in one currency.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Mrr {
    pub currency: String,
    pub amount_minor: i64,
}

/// The business now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"mrr": [{"currency": "UAH", "amount_minor": 8217000}],
    "active_members": 412, "live_memberships": 455, "churn_rate_30d": 0.041,
    "renewal_rate_30d": 0.82, "at": "2026-01-31T12:00:00Z"}))]
pub struct Summary {
    /// By currency: live, non-lifetime memberships not on an unpaid trial, each at its
    /// channel's price normalised to 30 days.
    pub mrr: Vec<Mrr>,
    /// Distinct subscribers with a live (active or grace) membership.
    pub active_members: i64,
    pub live_memberships: i64,
    /// Expirations in the last 30 days over memberships live 30 days ago (null when none were).
    pub churn_rate_30d: Option<f64>,
    /// Renewals over renewals plus expirations in the last 30 days (null when neither).
    pub renewal_rate_30d: Option<f64>,
    pub at: DateTime<Utc>,
}

const MRR_SQL: &str = "WITH live AS (
         SELECT channel_id, count(*) AS n FROM memberships
         WHERE status <> 'expired' AND expires_at <> 'infinity'
         GROUP BY channel_id
     ),
     on_trial AS (
         SELECT t.channel_id, count(*) AS n
         FROM trial_uses t
         JOIN memberships m ON m.subscriber_id = t.subscriber_id AND m.channel_id = t.channel_id
         WHERE m.status <> 'expired' AND m.expires_at <> 'infinity'
           AND NOT EXISTS (
               SELECT 1 FROM payments p
               WHERE p.subscriber_id = t.subscriber_id AND p.channel_id = t.channel_id
                 AND p.outcome = 'applied' AND p.amount_minor > 0 AND p.paid_at > t.created_at)
         GROUP BY t.channel_id
     )
     SELECT c.currency,
            round(sum((l.n - coalesce(t.n, 0))::numeric * c.price_minor * 30
                      / c.billing_period_days))::bigint AS amount_minor
     FROM live l JOIN channels c ON c.id = l.channel_id
     LEFT JOIN on_trial t ON t.channel_id = l.channel_id
     GROUP BY c.currency ORDER BY c.currency";

const MEMBERS_NOW_SQL: &str = "SELECT count(*) AS live_memberships,
            count(DISTINCT subscriber_id) AS active_members,
            statement_timestamp() AS at
     FROM memberships WHERE status <> 'expired'";

fn last_30_days_sql() -> String {
    format!(
        "SELECT coalesce(sum({LIVE_DELTA}), 0)::bigint AS delta,
                count(*) FILTER (WHERE e.cause = 'payment' AND e.from_status IS NOT NULL)
                    AS renewed,
                count(*) FILTER (WHERE e.to_status = 'expired'
                                   AND e.from_status IS DISTINCT FROM 'expired') AS expired
         FROM membership_events e
         WHERE e.at >= statement_timestamp() - interval '30 days'"
    )
}

/// The summary of now.
pub async fn summary(client: &impl GenericClient) -> Result<Summary, ApiError> {
    let mrr = db::rows(client, MRR_SQL, &[])
        .await?
        .iter()
        .map(|r| {
            Ok(Mrr {
                currency: r.try_get("currency")?,
                amount_minor: r.try_get("amount_minor")?,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let now = db::row_one(client, MEMBERS_NOW_SQL, &[]).await?;
    let live: i64 = now.try_get("live_memberships")?;
    let month = db::row_one(client, &last_30_days_sql(), &[]).await?;
    let delta: i64 = month.try_get("delta")?;
    let renewed: i64 = month.try_get("renewed")?;
    let expired: i64 = month.try_get("expired")?;
    let live_then = live - delta;
    let ratio = |a: i64, b: i64| (b > 0).then(|| a as f64 / b as f64);
    Ok(Summary {
        mrr,
        active_members: now.try_get("active_members")?,
        live_memberships: live,
        churn_rate_30d: ratio(expired, live_then),
        renewal_rate_30d: ratio(renewed, renewed + expired),
        at: now.try_get("at")?,
    })
}
