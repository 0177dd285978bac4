//! Statistics of the business, computed in SQL: revenue by interval and currency, members by
//! interval and channel, and a summary of now. Reads only, besides the daily roll-ups; the
//! indexes that keep these queries short are in migration 14 (`make bench` measures them on 1M
//! memberships and 5M payments, docs/benchmarks.md).
//!
//! Viewers may ask for any range, as often as they like: a read rolls up only the days it needs
//! from the first record on ([`roll_up`]), and everything here runs on [`StatsDb`], a quarter of
//! the pool, so statistics never take the connections the payment doors need. Sums of money are
//! `numeric` in SQL and `i128` here ([`db::exact_sum`]): no stored amount can make them fail.
//!
//! Intervals are UTC calendar days, ISO weeks (from Monday) or months; `from` is rounded down
//! to the start of its interval and `to` is exclusive, so the first interval is whole and the
//! last may be partial. Definitions (docs/staff.md repeats them for readers):
//! - **revenue**: payments by `paid_at`. `gross` is every payment the core accepted (`applied`,
//!   and those refunded, being refunded or disputed since); payments kept for review are not
//!   revenue. `refunded` is the part of those refunded or disputed (by the payment's own
//!   interval), `net` the rest. `affiliate_fees` is Telegram's affiliate commission on the
//!   payments counted in `net` (`payments.affiliate_fee_minor`; a refund gives Telegram's
//!   commission back too, so a refunded payment's fee is not counted), and `net_after_fees` is
//!   `net` minus it.
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

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{catalog::channels, common::error::ApiError, db};

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
#[schema(example = json!({"start": "2026-01-05T00:00:00Z", "currency": "XTR",
    "gross_minor": 7500, "refunded_minor": 250, "net_minor": 7250,
    "affiliate_fees_minor": 500, "net_after_fees_minor": 6750, "payments": 30}))]
pub struct Revenue {
    /// Where the interval starts (UTC).
    pub start: DateTime<Utc>,
    pub currency: String,
    /// Sums of minor units are exact integers of any size ([`crate::db::exact_sum`]).
    pub gross_minor: i128,
    pub refunded_minor: i128,
    /// `gross_minor` minus `refunded_minor`.
    pub net_minor: i128,
    /// Telegram's affiliate commission on the payments in `gross_minor` (Stars only; 0 in
    /// other currencies).
    pub affiliate_fees_minor: i128,
    /// `net_minor` minus `affiliate_fees_minor`.
    pub net_after_fees_minor: i128,
    /// How many payments make up `gross_minor`.
    pub payments: i64,
}

// The statements below are whole `.sql` files. Their parts, spelled the same in each (the unit
// tests at the end check the counts of members and the sums of revenue word for word):
// - the series' intervals `starts` (`start`, `stop` exclusive), by UTC calendar arithmetic
//   whatever the session's time zone: `$1` from, `$2` to, `$3` the interval's name;
// - the outcomes that are revenue: `applied`, `refund_pending`, `refunded`, `refund_failed`
//   and `disputed` (a disputed payment is money taken back, as a refund is);
// - the first day that is not rolled up: today, and yesterday during the first hour of today
//   (so a write stamped just before midnight has committed before its day is rolled),
//   `((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date`;
// - revenue per UTC day and currency from the payments of a range, and members per UTC day and
//   channel from the events, trials and payments of a range, where a membership event's live
//   change (`delta`) is +1 into a live status and -1 out of one.

/// Rolls up the revenue of the days `$1` (a `date[]`).
const ROLL_UP_REVENUE_SQL: &str = include_str!("stats/roll_up_revenue.sql");
/// Rolls up the members of the days `$1` (a `date[]`).
const ROLL_UP_MEMBERS_SQL: &str = include_str!("stats/roll_up_members.sql");
/// Revenue per interval and currency ([`revenue`]): the rolled-up days, then the open days raw.
const REVENUE_SQL: &str = include_str!("stats/revenue.sql");
/// Members per interval and channel ([`members`]): `$4` one channel or NULL, `$5` the channels.
const MEMBERS_SQL: &str = include_str!("stats/members.sql");
/// The live change, renewals and expirations of the last 30 days ([`summary`]).
const LAST_30_DAYS_SQL: &str = include_str!("stats/last_30_days.sql");

/// The ended days of `[$1, $2)` that are not rolled up (or were changed since), from the first
/// day with a record on: days before any payment, membership event or trial have nothing to
/// roll, so a range that starts in year 1 costs no more than one that starts with the data.
const MISSING_DAYS_SQL: &str = "WITH floor AS (
         SELECT (least((SELECT min(paid_at) FROM payments),
                       (SELECT min(at) FROM membership_events),
                       (SELECT min(created_at) FROM trial_uses)) AT TIME ZONE 'UTC')::date AS day
     )
     SELECT coalesce(array_agg(d::date ORDER BY d), '{}') AS days
     FROM floor, generate_series(greatest($1::date, floor.day),
                                 least(coalesce($2::date, 'infinity'), ((statement_timestamp() - interval '1 hour')
                                                  AT TIME ZONE 'UTC')::date) - 1,
                                 interval '1 day') AS d
     WHERE NOT EXISTS (SELECT 1 FROM stats_rolled_days r WHERE r.day = d::date)";

const LOCK_DAYS_SQL: &str =
    "SELECT count(pg_advisory_xact_lock(stats_day_lock_key(day))) AS n FROM unnest($1::date[]) day";

const FORGET_ROLLED_SQL: &str = "WITH r AS (DELETE FROM stats_revenue_days WHERE day = ANY($1)),
          m AS (DELETE FROM stats_member_days WHERE day = ANY($1))
     SELECT 1";

const MARK_ROLLED_SQL: &str = "INSERT INTO stats_rolled_days (day) SELECT unnest($1::date[])
     ON CONFLICT (day) DO UPDATE SET rolled_at = statement_timestamp()";

/// How many days one roll-up transaction takes at most: each holds an advisory lock per day,
/// and PostgreSQL's lock table is shared and bounded.
const ROLL_UP_CHUNK: usize = 200;

/// The database as the statistics use it: the pool, a cap on the connections they hold at
/// once, and one roll-up at a time in this process.
///
/// Statistics are read by viewers, whose requests may be many and long (a roll-up of years);
/// every connection they take is counted against [`StatsDb::limit`] (a quarter of the pool, at
/// least one), so the rest of the pool always serves the payment doors and the staff writes.
/// Requests past the cap wait for a connection of the share, not for the pool. Roll-ups run one
/// at a time: a read waiting behind another's roll-up of the same days then finds them rolled.
#[derive(Clone)]
pub struct StatsDb {
    pool: deadpool_postgres::Pool,
    connections: Arc<Semaphore>,
    limit: usize,
    roll_ups: Arc<tokio::sync::Mutex<()>>,
}

/// A pooled connection held within the statistics' share ([`StatsDb`]).
struct StatsConn {
    client: deadpool_postgres::Object,
    _permit: OwnedSemaphorePermit,
}

impl std::ops::Deref for StatsConn {
    type Target = deadpool_postgres::Object;

    fn deref(&self) -> &Self::Target {
        &self.client
    }
}

impl StatsDb {
    /// The statistics' share of `pool`: a quarter of its connections, at least one.
    pub fn new(pool: deadpool_postgres::Pool) -> StatsDb {
        let limit = (pool.status().max_size / 4).max(1);
        StatsDb::with_limit(pool, limit)
    }

    /// A share of `limit` connections (at least one) of `pool`.
    pub fn with_limit(pool: deadpool_postgres::Pool, limit: usize) -> StatsDb {
        let limit = limit.max(1);
        StatsDb {
            pool,
            connections: Arc::new(Semaphore::new(limit)),
            limit,
            roll_ups: Arc::default(),
        }
    }

    /// How many connections the statistics may hold at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A place in the share; taken before the connection, so a request past the cap waits here
    /// and not in the pool's queue.
    async fn permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Arc::clone(&self.connections)
            .acquire_owned()
            .await
            .map_err(ApiError::internal)
    }

    async fn get(&self) -> Result<StatsConn, ApiError> {
        let permit = self.permit().await?;
        Ok(StatsConn {
            client: self.pool.get().await?,
            _permit: permit,
        })
    }
}

/// Rolls up every ended day of `[from, to)` (every ended day from `from` on, without `to`) that
/// is not rolled up (or was changed since), from the first day with a record on, in
/// transactions of at most [`ROLL_UP_CHUNK`] days; returns how many days it rolled. Reads call
/// it first for their range; the background loop and the benchmark call it for all history.
pub async fn roll_up(
    db: &StatsDb,
    from: NaiveDate,
    to: Option<NaiveDate>,
) -> Result<usize, ApiError> {
    if to.is_some_and(|to| to <= from) {
        return Ok(0);
    }
    let _one_at_a_time = db.roll_ups.lock().await;
    let missing: Vec<NaiveDate> = db::row_one(&*db.get().await?, MISSING_DAYS_SQL, &[&from, &to])
        .await?
        .try_get("days")?;
    for chunk in missing.chunks(ROLL_UP_CHUNK) {
        roll_up_days(db, chunk).await?;
    }
    Ok(missing.len())
}

/// Rolls `days` up in one transaction, after taking each day's lock exclusively (so writes of
/// those days in flight have committed). Rolling a day twice gives the same rows.
async fn roll_up_days(db: &StatsDb, days: &[NaiveDate]) -> Result<(), ApiError> {
    let days = days.to_vec();
    let _permit = db.permit().await?;
    crate::transaction!(db.pool, |tx| {
        db::row_one(tx, LOCK_DAYS_SQL, &[&days]).await?;
        db::row_one(tx, FORGET_ROLLED_SQL, &[&days]).await?;
        db::execute(tx, ROLL_UP_REVENUE_SQL, &[&days]).await?;
        db::execute(tx, ROLL_UP_MEMBERS_SQL, &[&days]).await?;
        db::execute(tx, MARK_ROLLED_SQL, &[&days]).await?;
        Ok(())
    })
}

/// The first day a roll-up for `[from, …)` must cover: `from`'s interval start, as a date.
fn first_day(from: DateTime<Utc>, interval: Interval) -> NaiveDate {
    use chrono::Datelike;
    let day = from.date_naive();
    match interval {
        Interval::Day => day,
        Interval::Week => day - chrono::Days::new(u64::from(day.weekday().num_days_from_monday())),
        Interval::Month => day.with_day(1).unwrap_or(day),
    }
}

/// The first day a range ending (exclusively) at `to` does not read: `to`'s day at its
/// midnight, else the day after.
fn day_after(to: DateTime<Utc>) -> NaiveDate {
    let last = (to - chrono::Duration::microseconds(1)).date_naive();
    last.succ_opt().unwrap_or(NaiveDate::MAX)
}

/// Revenue per interval and currency over `[from, to)`: every interval of every currency that
/// had revenue in the range (zeros where it had none).
pub async fn revenue(
    db: &StatsDb,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    interval: Interval,
) -> Result<Vec<Revenue>, ApiError> {
    roll_up(db, first_day(from, interval), Some(day_after(to))).await?;
    let client = db.get().await?;
    let rows = db::rows(&*client, REVENUE_SQL, &[&from, &to, &interval.as_str()]).await?;
    rows.iter()
        .map(|r| {
            Ok(Revenue {
                start: r.try_get("start")?,
                currency: r.try_get("currency")?,
                gross_minor: db::exact_sum(r, "gross_minor")?,
                refunded_minor: db::exact_sum(r, "refunded_minor")?,
                net_minor: db::exact_sum(r, "net_minor")?,
                affiliate_fees_minor: db::exact_sum(r, "affiliate_fees_minor")?,
                net_after_fees_minor: db::exact_sum(r, "net_after_fees_minor")?,
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

crate::from_row!(Members {
    start,
    channel_id,
    live,
    new,
    renewed,
    expired,
    trials_started,
    trials_converted,
});

/// Members per interval and channel over `[from, to)`, every channel (or only `channel_id`).
pub async fn members(
    db: &StatsDb,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    interval: Interval,
    channel_id: Option<i32>,
) -> Result<Vec<Members>, ApiError> {
    // Live members at the end of an interval are counted back from now, through every day
    // after it: those days are rolled up too (the hourly loop has usually done so).
    roll_up(db, first_day(from, interval), None).await?;
    let conn = db.get().await?;
    let client = &*conn;
    let channels: Vec<i32> = match channel_id {
        Some(id) => channels::ids(client)
            .await?
            .into_iter()
            .filter(|c| *c == id)
            .collect(),
        None => channels::ids(client).await?,
    };
    db::all(
        client,
        MEMBERS_SQL,
        &[&from, &to, &interval.as_str(), &channel_id, &channels],
    )
    .await
}

/// Monthly recurring revenue in one currency.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Mrr {
    pub currency: String,
    /// An exact integer of any size ([`crate::db::exact_sum`]).
    pub amount_minor: i128,
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
     -- A trial can only still be running within the longest trial plus the longest grace:
     -- older ones were paid for (or extended by staff) if their membership is live.
     trial_horizon AS (
         SELECT statement_timestamp()
                - ((SELECT coalesce(max(period_days), 0) FROM plans WHERE kind = 'trial')
                   + (SELECT coalesce(max(grace_period_days), 0) FROM channels))
                  * interval '1 day' AS since
     ),
     on_trial AS (
         SELECT t.channel_id, count(*) AS n
         FROM trial_uses t
         JOIN memberships m ON m.subscriber_id = t.subscriber_id AND m.channel_id = t.channel_id
         WHERE t.created_at >= (SELECT since FROM trial_horizon)
           AND m.status <> 'expired' AND m.expires_at <> 'infinity'
           AND NOT EXISTS (
               SELECT 1 FROM payments p
               WHERE p.subscriber_id = t.subscriber_id AND p.channel_id = t.channel_id
                 AND p.outcome = 'applied' AND p.amount_minor > 0 AND p.paid_at > t.created_at)
         GROUP BY t.channel_id
     )
     SELECT c.currency,
            round(sum((l.n - coalesce(t.n, 0))::numeric * c.price_minor * 30
                      / c.billing_period_days))::text AS amount_minor
     FROM live l JOIN channels c ON c.id = l.channel_id
     LEFT JOIN on_trial t ON t.channel_id = l.channel_id
     GROUP BY c.currency ORDER BY c.currency";

const MEMBERS_NOW_SQL: &str = "SELECT count(*) AS live_memberships,
            count(DISTINCT subscriber_id) AS active_members,
            statement_timestamp() AS at
     FROM memberships WHERE status <> 'expired'";

/// The summary of now. Its three parts run at once, on three connections.
pub async fn summary(db: &StatsDb) -> Result<Summary, ApiError> {
    let since = (Utc::now() - chrono::Duration::days(31)).date_naive();
    roll_up(db, since, None).await?;
    let mrr = async {
        db::rows(&*db.get().await?, MRR_SQL, &[])
            .await?
            .iter()
            .map(|r| {
                Ok(Mrr {
                    currency: r.try_get("currency")?,
                    amount_minor: db::exact_sum(r, "amount_minor")?,
                })
            })
            .collect::<Result<Vec<_>, ApiError>>()
    };
    let now = async { db::row_one(&*db.get().await?, MEMBERS_NOW_SQL, &[]).await };
    let month = async { db::row_one(&*db.get().await?, LAST_30_DAYS_SQL, &[]).await };
    let (mrr, now, month) = tokio::try_join!(mrr, now, month)?;
    let live: i64 = now.try_get("live_memberships")?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The part of `sql` from `start` to the end of `end`, word by word, each bound of `bounds`
    /// replaced by its placeholder (every bound must be there).
    fn part(sql: &str, start: &str, end: &str, bounds: &[(&str, &str)]) -> String {
        let sql = db::sql_words(sql);
        let from = sql.find(start).expect("the part's start");
        let to = from + sql[from..].find(end).expect("the part's end") + end.len();
        let mut part = sql[from..to].to_string();
        for (bound, placeholder) in bounds {
            assert!(part.contains(bound), "{bound} in {part}");
            part = part.replace(bound, placeholder);
        }
        part
    }

    const OPEN_DAY: &str = "(((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC')";
    const ROLL_FROM: &str =
        "((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')";
    const ROLL_TO: &str =
        "(((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')";

    /// The members of a range of days are counted alike by the roll-up, the series and the
    /// summary: the statements differ only in the range.
    #[test]
    fn every_statement_counts_the_members_of_a_range_alike() {
        let (start, end) = (
            "SELECT day, channel_id, sum(new)::bigint AS new",
            "GROUP BY day, channel_id",
        );
        let series_from = format!("greatest((SELECT first FROM bounds), {OPEN_DAY})");
        let rolled = part(
            ROLL_UP_MEMBERS_SQL,
            start,
            end,
            &[(ROLL_FROM, "<from>"), (ROLL_TO, "<to>")],
        );
        let series = part(
            MEMBERS_SQL,
            start,
            end,
            &[(&series_from, "<from>"), ("'infinity'", "<to>")],
        );
        let summary = part(
            LAST_30_DAYS_SQL,
            start,
            end,
            &[(OPEN_DAY, "<from>"), ("'infinity'", "<to>")],
        );
        assert_eq!(series, rolled);
        assert_eq!(summary, rolled);
    }

    /// The revenue of a range of days is summed alike by the roll-up and the series.
    #[test]
    fn every_statement_sums_the_revenue_of_a_range_alike() {
        let (start, end) = (
            "SELECT (paid_at AT TIME ZONE 'UTC')::date AS day, currency",
            "GROUP BY 1, 2",
        );
        let series_from = format!("greatest((SELECT first FROM bounds), {OPEN_DAY})");
        let rolled = part(
            ROLL_UP_REVENUE_SQL,
            start,
            end,
            &[(ROLL_FROM, "<from>"), (ROLL_TO, "<to>")],
        );
        let series = part(
            REVENUE_SQL,
            start,
            end,
            &[(&series_from, "<from>"), ("paid_at < $2", "paid_at < <to>")],
        );
        assert_eq!(series, rolled);
    }
}
