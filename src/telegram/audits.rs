//! Audits of a channel's member list against the database (`POST /api/channels/{id}/audit`,
//! `AUDIT_INTERVAL_SECS`). Owner of `audits`, and the runner that fills a row in.
//!
//! An audit asks Telegram (`getChatMember`) about everyone who ever had a membership of the
//! channel — expired ones included, since a user removed by a revoke that never happened is
//! exactly what it looks for — and sorts each answer into one [`Category`], or none when the
//! chat and the database agree (live and in the chat, not live and not in it). The answers are
//! asked [`BATCH`] at a time with no connection held; each batch is then classified against the
//! database as it is *then* (a payment during the audit counts) and written in one short
//! transaction: the progress (`checked`), the report so far, the heartbeat and, with `fix`, the
//! effects that repair the batch's wrong rows ([`effects::enqueue_found`], keyed on the audit,
//! so a batch written twice enqueues once). The effects worker performs them and decides each
//! again when it does (an unban only while the user holds access, a revoke only while they
//! do not).
//!
//! Calls go through the bot's pacer like every other call (the rate limit holds across the
//! worker and the audit). A 429 or a pacing refusal waits `retry_after` and asks again; a
//! transient failure (timeout, transport, 5xx) is retried [`TRANSIENT_ATTEMPTS`] times, then the
//! audit fails with the error; another refusal (the chat is gone, the bot is not in it) fails
//! it at once.
//!
//! One audit of a channel runs at a time (the partial unique index `audits_one_running`). A
//! running audit beats its heartbeat with every batch and while it waits; one whose heartbeat
//! is older than [`STALE_AFTER_SECS`] was left by a process that died, and is marked `failed`
//! (`interrupted`) when another audit of its channel is asked for, and at start-up.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;

use crate::{
    access::{exemptions, memberships},
    catalog::channels,
    common::error::ApiError,
    config::Config,
    db::{self, FromRow},
    outbox::effects::{self, Kind, payload::Found},
    staff::audit_log::{self, Actor, Entry},
    telegram_api::{
        client::{BotApi, BotError, DEFAULT_TIMEOUT},
        types::ChatMember,
    },
};

/// How many users are asked about between two writes of the audit row.
pub const BATCH: usize = 10;
/// A running audit whose heartbeat is older than this many seconds was left by a dead process.
pub const STALE_AFTER_SECS: i32 = 120;
/// Attempts of one `getChatMember` that fails transiently before the audit fails.
pub const TRANSIENT_ATTEMPTS: u32 = 4;
/// The longest sleep between two heartbeats while an audit waits out a rate limit.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);

crate::text_enum! {
    /// Where an audit is: `running` until its last batch is written, then `done`, or `failed`
    /// (Telegram kept failing, the process died, or it stopped at shutdown; see `error`).
    pub enum Status {
        Running => "running",
        Done => "done",
        Failed => "failed",
    }
}

crate::text_enum! {
    /// What an audit found about one user (API.md "Audit").
    pub enum Category {
        /// Live, but not in the chat (left, or restricted and out): informational, nothing to
        /// fix (the user may come back by the join link).
        LiveNotInChat => "live_not_in_chat",
        /// Live, but banned in the chat: a fix unbans them.
        LiveButBanned => "live_but_banned",
        /// Not live, but in the chat: a fix removes them.
        NotLiveButInChat => "not_live_but_in_chat",
        /// On the channel's exemption list, or a chat administrator or its creator: never
        /// touched.
        Exempt => "exempt",
        /// Telegram does not know the account (deleted): nothing to do.
        UnknownToTelegram => "unknown_to_telegram",
    }
}

/// Telegram's answer about one user.
#[derive(Debug, Clone)]
pub enum Answer {
    Member(ChatMember),
    /// `getChatMember` answered "user not found" (or `PARTICIPANT_ID_INVALID`).
    Unknown,
}

/// The category of a user who is `live` in the database (or not) and `exempt` (on the
/// exemption list) or not, by Telegram's `answer`; `None` when the two agree.
pub fn categorize(live: bool, exempt: bool, answer: &Answer) -> Option<Category> {
    let member = match answer {
        _ if exempt => return Some(Category::Exempt),
        Answer::Unknown => return Some(Category::UnknownToTelegram),
        Answer::Member(m) => m,
    };
    if member.is_admin() {
        Some(Category::Exempt)
    } else if live && member.is_banned() {
        Some(Category::LiveButBanned)
    } else if live && !member.in_chat() {
        Some(Category::LiveNotInChat)
    } else if !live && member.in_chat() {
        Some(Category::NotLiveButInChat)
    } else {
        None
    }
}

/// The effect that repairs a row of `category`, if any.
pub fn repair(category: Category) -> Option<Kind> {
    match category {
        Category::LiveButBanned => Some(Kind::Unban),
        Category::NotLiveButInChat => Some(Kind::Revoke),
        _ => None,
    }
}

/// One user in an audit's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(example = json!({"telegram_user_id": 123456789, "subscriber_id": 7,
    "membership_id": 12, "telegram_status": "member"}))]
pub struct Finding {
    pub telegram_user_id: i64,
    pub subscriber_id: i32,
    pub membership_id: i64,
    /// The status `getChatMember` answered (`member`, `left`, `kicked`, `restricted`,
    /// `administrator`, `creator`); `null` when Telegram does not know the user.
    pub telegram_status: Option<String>,
}

/// How many users fell in each category (every category, 0 included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = AuditCounts)]
#[serde(default)]
pub struct Counts {
    pub live_not_in_chat: i64,
    pub live_but_banned: i64,
    pub not_live_but_in_chat: i64,
    pub exempt: i64,
    pub unknown_to_telegram: i64,
}

/// The users of each category (every category, an empty list included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Rows {
    pub live_not_in_chat: Vec<Finding>,
    pub live_but_banned: Vec<Finding>,
    pub not_live_but_in_chat: Vec<Finding>,
    pub exempt: Vec<Finding>,
    pub unknown_to_telegram: Vec<Finding>,
}

impl Rows {
    fn of(&mut self, category: Category) -> &mut Vec<Finding> {
        match category {
            Category::LiveNotInChat => &mut self.live_not_in_chat,
            Category::LiveButBanned => &mut self.live_but_banned,
            Category::NotLiveButInChat => &mut self.not_live_but_in_chat,
            Category::Exempt => &mut self.exempt,
            Category::UnknownToTelegram => &mut self.unknown_to_telegram,
        }
    }

    /// The counts of these rows.
    pub fn counts(&self) -> Counts {
        let n = |v: &Vec<Finding>| v.len() as i64;
        Counts {
            live_not_in_chat: n(&self.live_not_in_chat),
            live_but_banned: n(&self.live_but_banned),
            not_live_but_in_chat: n(&self.not_live_but_in_chat),
            exempt: n(&self.exempt),
            unknown_to_telegram: n(&self.unknown_to_telegram),
        }
    }
}

/// An audit as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 3, "channel_id": 1, "fix": false, "status": "done",
    "checked": 2, "total": 2,
    "counts": {"live_not_in_chat": 0, "live_but_banned": 0, "not_live_but_in_chat": 1,
               "exempt": 1, "unknown_to_telegram": 0},
    "rows": {"live_not_in_chat": [], "live_but_banned": [],
             "not_live_but_in_chat": [{"telegram_user_id": 123456789, "subscriber_id": 7,
                                       "membership_id": 12, "telegram_status": "member"}],
             "exempt": [{"telegram_user_id": 555, "subscriber_id": 8, "membership_id": 13,
                         "telegram_status": "administrator"}],
             "unknown_to_telegram": []},
    "error": null, "started_at": "2026-01-01T10:00:00Z", "finished_at": "2026-01-01T10:00:01Z"}))]
pub struct Audit {
    pub id: i64,
    pub channel_id: i32,
    /// Whether it enqueues the unban or revoke each wrong row needs.
    pub fix: bool,
    pub status: Status,
    /// Users asked about so far.
    #[schema(minimum = 0)]
    pub checked: i32,
    /// Users to ask about: everyone who ever had a membership of the channel.
    #[schema(minimum = 0)]
    pub total: i32,
    pub counts: Counts,
    pub rows: Rows,
    /// Why it failed (`interrupted`: the process running it died or stopped).
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl FromRow for Audit {
    const COLUMNS: &'static str =
        "id, channel_id, fix, status, checked, total, counts, rows, error, started_at, finished_at";

    fn from_row(r: &Row) -> Result<Audit, tokio_postgres::Error> {
        let rows: Rows = serde_json::from_value(r.try_get("rows")?).unwrap_or_default();
        Ok(Audit {
            id: r.try_get("id")?,
            channel_id: r.try_get("channel_id")?,
            fix: r.try_get("fix")?,
            status: r.try_get("status")?,
            checked: r.try_get("checked")?,
            total: r.try_get("total")?,
            // Always the counts of the rows stored with them (one write sets both).
            counts: rows.counts(),
            rows,
            error: r.try_get("error")?,
            started_at: r.try_get("started_at")?,
            finished_at: r.try_get("finished_at")?,
        })
    }
}

const COLUMNS_SQL: &str =
    "id, channel_id, fix, status, checked, total, counts, rows, error, started_at, finished_at";
const GET_SQL: &str = "SELECT id, channel_id, fix, status, checked, total, counts, rows, error,
            started_at, finished_at
     FROM audits WHERE id = $1";
const LIST_SQL: &str = "SELECT id, channel_id, fix, status, checked, total, counts, rows, error,
            started_at, finished_at
     FROM audits
     WHERE ($1::integer IS NULL OR channel_id = $1) AND ($2::bigint IS NULL OR id < $2)
     ORDER BY id DESC LIMIT $3";
const INTERRUPT_SQL: &str = "UPDATE audits
     SET status = 'failed', error = 'interrupted', finished_at = statement_timestamp()
     WHERE status = 'running' AND ($1::integer IS NULL OR channel_id = $1)
       AND heartbeat_at < statement_timestamp() - make_interval(secs => $2)";
const RUNNING_SQL: &str = "SELECT id FROM audits WHERE channel_id = $1 AND status = 'running'";
const INSERT_SQL: &str = "INSERT INTO audits (channel_id, fix, counts, rows)
     VALUES ($1, $2, $3, $4) RETURNING id";
const TOTAL_SQL: &str = "UPDATE audits SET total = $2, heartbeat_at = statement_timestamp()
     WHERE id = $1 AND status = 'running'";
const PROGRESS_SQL: &str = "UPDATE audits
     SET checked = $2, counts = $3, rows = $4, heartbeat_at = statement_timestamp()
     WHERE id = $1 AND status = 'running'";
const BEAT_SQL: &str = "UPDATE audits SET heartbeat_at = statement_timestamp()
     WHERE id = $1 AND status = 'running'";
const FINISH_SQL: &str = "UPDATE audits
     SET status = $2, error = $3, finished_at = statement_timestamp(),
         heartbeat_at = statement_timestamp()
     WHERE id = $1 AND status = 'running'";

/// Audit `id`.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Audit>, ApiError> {
    debug_assert_eq!(COLUMNS_SQL, Audit::COLUMNS);
    db::opt(client, GET_SQL, &[&id]).await
}

/// Up to `limit` audits (of channel `channel_id` when given), newest first, older than
/// `before` when given.
pub async fn list(
    client: &impl GenericClient,
    channel_id: Option<i32>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<Audit>, ApiError> {
    db::all(client, LIST_SQL, &[&channel_id, &before, &limit]).await
}

/// Marks every running audit whose heartbeat stopped (see the module doc) `failed`
/// (`interrupted`), of channel `channel_id` or of all; returns how many.
pub async fn interrupt_stale(
    client: &impl GenericClient,
    channel_id: Option<i32>,
) -> Result<u64, ApiError> {
    let secs = f64::from(STALE_AFTER_SECS);
    db::execute(client, INTERRUPT_SQL, &[&channel_id, &secs]).await
}

/// What asking for an audit of a channel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A new `running` audit, to be run by [`run`].
    Started(i64),
    /// An audit of the channel is running already.
    Running(i64),
    NoChannel,
}

/// Records a `running` audit of channel `channel_id` (after marking a stale one interrupted),
/// unless one is running. The caller runs it ([`run`]) after this commits. Started by staff
/// (`by`), the start is in the audit log, in the same transaction.
pub async fn start(
    pool: &Pool,
    channel_id: i32,
    fix: bool,
    by: Option<&Actor>,
) -> Result<Start, ApiError> {
    let empty = serde_json::to_value(Rows::default()).map_err(ApiError::internal)?;
    let counts = serde_json::to_value(Counts::default()).map_err(ApiError::internal)?;
    crate::transaction!(pool, |tx| {
        if channels::get(tx, channel_id).await?.is_none() {
            return Ok(Start::NoChannel);
        }
        interrupt_stale(tx, Some(channel_id)).await?;
        if let Some(r) = db::row_opt(tx, RUNNING_SQL, &[&channel_id]).await? {
            return Ok(Start::Running(r.try_get("id")?));
        }
        // Two requests racing here: the second waits on `audits_one_running` and fails (409).
        let row = db::row_one(tx, INSERT_SQL, &[&channel_id, &fix, &counts, &empty]).await?;
        let id: i64 = row.try_get("id")?;
        if let Some(actor) = by {
            let entry = Entry::new("channel.audit", Some(channel_id.into()))
                .after(serde_json::json!({"audit_id": id, "fix": fix}));
            audit_log::record(tx, actor, entry).await?;
        }
        Ok(Start::Started(id))
    })
}

/// The bot an audit asks: `None` without `TELEGRAM_BOT_TOKEN` or in dry-run mode (a dry run
/// answers `left` for everyone, which would make a report of nothing).
pub fn bot(config: &Config) -> Option<BotApi> {
    if config.telegram_dry_run {
        return None;
    }
    BotApi::from_config(config, DEFAULT_TIMEOUT)
}

/// Why an audit stopped before its end.
#[derive(Debug, thiserror::Error)]
enum Stop {
    #[error("{0}")]
    Db(#[from] ApiError),
    #[error("{0}")]
    Telegram(BotError),
    /// Its row is no longer running (marked interrupted meanwhile): nothing more to write.
    #[error("the audit is no longer running")]
    Gone,
    #[error("interrupted: the server is shutting down")]
    Shutdown,
}

/// Runs audit `id` to its end (see the module doc) and records how it ended; `stop` is asked
/// between users (true: the audit ends `failed`, interrupted). Returns the audit as recorded.
pub async fn run(
    pool: &Pool,
    bot: &BotApi,
    id: i64,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Option<Audit>, ApiError> {
    let outcome = check_all(pool, bot, id, stop).await;
    let (status, error) = match &outcome {
        Ok(()) => (Status::Done, None),
        Err(Stop::Gone) => (Status::Failed, None),
        Err(e) => (Status::Failed, Some(e.to_string())),
    };
    if let Err(e) = &outcome {
        tracing::warn!(audit_id = id, error = %e, "audit failed");
    }
    let client = pool.get().await?;
    db::execute(&client, FINISH_SQL, &[&id, &status, &error]).await?;
    let audit = get(&client, id).await?;
    if let Some(a) = &audit {
        tracing::info!(audit_id = id, channel_id = a.channel_id, status = %a.status,
            checked = a.checked, counts = ?a.counts, "audit finished");
    }
    Ok(audit)
}

/// Spawns [`run`] of audit `id` (a staff request's audit: it runs on after the response).
pub fn spawn(pool: Pool, bot: BotApi, id: i64) {
    tokio::spawn(async move {
        if let Err(e) = run(&pool, &bot, id, &|| false).await {
            tracing::error!(audit_id = id, error = %e, "audit could not be recorded");
        }
    });
}

async fn check_all(
    pool: &Pool,
    bot: &BotApi,
    id: i64,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), Stop> {
    let client = pool.get().await.map_err(ApiError::from)?;
    let audit = get(&client, id).await?.ok_or(Stop::Gone)?;
    let channel = channels::get(&client, audit.channel_id)
        .await?
        .ok_or(Stop::Gone)?;
    let chat = channel.telegram_chat_id;
    let subjects = memberships::audit_subjects(&client, channel.id, None).await?;
    let total = i32::try_from(subjects.len()).unwrap_or(i32::MAX);
    if db::execute(&client, TOTAL_SQL, &[&id, &total]).await? == 0 {
        return Err(Stop::Gone);
    }
    drop(client);

    let mut rows = Rows::default();
    let mut checked = 0i32;
    for batch in subjects.chunks(BATCH) {
        // Telegram first, with no connection held.
        let mut answers = Vec::with_capacity(batch.len());
        for s in batch {
            if stop() {
                return Err(Stop::Shutdown);
            }
            answers.push(ask(pool, bot, id, chat, s.telegram_user_id).await?);
        }
        // Then the database as it is now, the report and the repairs in one transaction.
        let users: Vec<i64> = batch.iter().map(|s| s.telegram_user_id).collect();
        let mut next = rows.clone();
        let found = crate::transaction!(pool, |tx| {
            let now = memberships::audit_subjects(tx, channel.id, Some(users.as_slice())).await?;
            let exempt = exemptions::list(tx, channel.id).await?;
            let mut batch_rows = rows.clone();
            let mut found = Vec::new();
            for (s, answer) in batch.iter().zip(&answers) {
                // A membership deleted meanwhile: the user has no access now.
                let current = now
                    .iter()
                    .find(|n| n.telegram_user_id == s.telegram_user_id);
                let live = current.is_some_and(|n| n.live);
                let is_exempt = exempt
                    .iter()
                    .any(|x| x.telegram_user_id == s.telegram_user_id);
                let Some(category) = categorize(live, is_exempt, answer) else {
                    continue;
                };
                let telegram_status = match answer {
                    Answer::Member(m) => Some(m.status.clone()),
                    Answer::Unknown => None,
                };
                let c = current.unwrap_or(s);
                batch_rows.of(category).push(Finding {
                    telegram_user_id: c.telegram_user_id,
                    subscriber_id: c.subscriber_id,
                    membership_id: c.membership_id,
                    telegram_status,
                });
                if audit.fix
                    && let Some(kind) = repair(category)
                {
                    effects::enqueue_found(&**tx, kind, chat, s.telegram_user_id, Found::Audit, id)
                        .await?;
                }
                found.push(category);
            }
            let progress = checked + batch.len() as i32;
            let counts = serde_json::to_value(batch_rows.counts()).map_err(ApiError::internal)?;
            let stored = serde_json::to_value(&batch_rows).map_err(ApiError::internal)?;
            if db::execute(tx, PROGRESS_SQL, &[&id, &progress, &counts, &stored]).await? == 0 {
                return Ok(None);
            }
            next = batch_rows;
            Ok(Some(found))
        })?;
        let Some(found) = found else {
            return Err(Stop::Gone);
        };
        for category in found {
            crate::common::metrics::audit_finding(category.as_str());
        }
        rows = next;
        checked += batch.len() as i32;
    }
    Ok(())
}

/// Asks Telegram about `user` in `chat` until it answers (see the module doc for the retries).
async fn ask(pool: &Pool, bot: &BotApi, id: i64, chat: i64, user: i64) -> Result<Answer, Stop> {
    let mut transient = 0u32;
    loop {
        let err = match bot.get_chat_member(chat, user).await {
            Ok(member) => return Ok(Answer::Member(member)),
            Err(e) => e,
        };
        if err.mentions("user not found")
            || err.mentions("PARTICIPANT_ID_INVALID")
            || err.mentions("USER_ID_INVALID")
        {
            return Ok(Answer::Unknown);
        }
        if let Some(secs) = err.retry_after() {
            wait(pool, id, Duration::from_secs(secs.max(1))).await?;
            continue;
        }
        let refused = matches!(err, BotError::Api { code, .. } if code < 500);
        transient += 1;
        if refused || transient >= TRANSIENT_ATTEMPTS {
            return Err(Stop::Telegram(err));
        }
        tracing::info!(audit_id = id, error = %err, "getChatMember failed; asking again");
        wait(pool, id, Duration::from_millis(500 << transient)).await?;
    }
}

/// Sleeps `total`, beating the audit's heartbeat at least every [`HEARTBEAT_EVERY`].
async fn wait(pool: &Pool, id: i64, total: Duration) -> Result<(), Stop> {
    let mut left = total;
    while !left.is_zero() {
        let step = left.min(HEARTBEAT_EVERY);
        tokio::time::sleep(step).await;
        left -= step;
        let client = pool.get().await.map_err(ApiError::from)?;
        if db::execute(&client, BEAT_SQL, &[&id]).await? == 0 {
            return Err(Stop::Gone);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(status: &str, is_member: Option<bool>) -> Answer {
        Answer::Member(
            serde_json::from_value(serde_json::json!({"status": status, "is_member": is_member,
                "user": {"id": 1, "is_bot": false, "first_name": "U"}}))
            .unwrap(),
        )
    }

    #[test]
    fn every_answer_falls_in_its_category() {
        use Category::*;
        let cases = [
            // (live, exempt, status, is_member) → category
            (true, false, "member", None, None),
            (false, false, "left", None, None),
            (false, false, "kicked", None, None),
            (true, false, "kicked", None, Some(LiveButBanned)),
            (true, false, "left", None, Some(LiveNotInChat)),
            (true, false, "restricted", Some(false), Some(LiveNotInChat)),
            (true, false, "restricted", Some(true), None),
            (false, false, "member", None, Some(NotLiveButInChat)),
            (
                false,
                false,
                "restricted",
                Some(true),
                Some(NotLiveButInChat),
            ),
            (false, false, "administrator", None, Some(Exempt)),
            (true, false, "creator", None, Some(Exempt)),
            (false, true, "member", None, Some(Exempt)),
            (true, true, "kicked", None, Some(Exempt)),
        ];
        for (live, exempt, status, is_member, want) in cases {
            assert_eq!(
                categorize(live, exempt, &member(status, is_member)),
                want,
                "{live} {exempt} {status} {is_member:?}"
            );
        }
        assert_eq!(
            categorize(true, false, &Answer::Unknown),
            Some(UnknownToTelegram)
        );
        assert_eq!(categorize(false, true, &Answer::Unknown), Some(Exempt));
    }

    #[test]
    fn only_the_two_wrong_categories_are_repaired() {
        let repaired: Vec<_> = Category::ALL
            .iter()
            .filter_map(|c| repair(*c).map(|k| (*c, k)))
            .collect();
        assert_eq!(
            repaired,
            [
                (Category::LiveButBanned, Kind::Unban),
                (Category::NotLiveButInChat, Kind::Revoke)
            ]
        );
    }

    #[test]
    fn a_report_names_every_category() {
        let v = serde_json::to_value(Rows::default()).unwrap();
        let c = serde_json::to_value(Counts::default()).unwrap();
        for cat in Category::ALL {
            assert_eq!(v[cat.as_str()], serde_json::json!([]), "{cat}");
            assert_eq!(c[cat.as_str()], serde_json::json!(0), "{cat}");
        }
    }
}
