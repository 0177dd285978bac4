//! The limit on guessing promo codes through the bot (`/code CODE`, a deep link
//! `p<plan>-<CODE>`): each Telegram user may give [`PER_USER`] wrong codes in
//! [`PER_USER_WINDOW_SECS`], and everyone together [`PER_MINUTE`] in a minute; past either,
//! code attempts are refused unread until the window ends. A wrong code is one the bot answers
//! "there is no such code" — unknown or no longer active, which read alike.
//!
//! The counters are rows of `bot_code_guesses` (one per user, one for everyone), not memory:
//! they hold across restarts and across several `subgate serve` processes behind one webhook,
//! and an attempt locks its user's row, then everyone's, until its transaction ends, so
//! attempts racing each other are counted one after another and none gets past a limit. Code
//! attempts are rare next to other updates, so taking one shared row lock per attempt costs
//! nothing that matters; every other conversation step leaves these rows alone.

use deadpool_postgres::GenericClient;

use crate::{common::error::ApiError, db};

/// Wrong codes one Telegram user may give in [`PER_USER_WINDOW_SECS`].
pub const PER_USER: i32 = 5;
/// The window of [`PER_USER`]: 15 minutes from the first wrong code of a window.
pub const PER_USER_WINDOW_SECS: i64 = 900;
/// Wrong codes everyone together may give in a minute.
pub const PER_MINUTE: i32 = 30;
/// The window of [`PER_MINUTE`].
const EVERYONE_WINDOW_SECS: i64 = 60;
/// The `who` of the row counting everyone (a user's row is their positive Telegram id).
const EVERYONE: i64 = 0;

/// Whether a code attempt may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Open,
    /// Refused: a limit was reached; it lifts in this many seconds.
    Limited {
        retry_after_secs: i64,
    },
}

/// SQL: when row `g`'s window ends (`$2`/`$3`: the user's and everyone's window in seconds).
macro_rules! window_end {
    () => {
        "(g.window_start + make_interval(secs => CASE WHEN g.who = 0 THEN $3::float8 ELSE $2::float8 END))"
    };
}

/// SQL: row `g`'s window has ended.
macro_rules! stale {
    () => {
        concat!(window_end!(), " <= statement_timestamp()")
    };
}

/// Makes both rows if need be, starts a new window where the last one ended, and locks the
/// rows (the user's first: the same order in every attempt). `$2`/`$3`: the user's and
/// everyone's window in seconds.
const OPEN_SQL: &str = concat!(
    "INSERT INTO bot_code_guesses AS g (who, window_start)
     VALUES ($1, statement_timestamp()), (0, statement_timestamp())
     ON CONFLICT (who) DO UPDATE
         SET window_start = CASE WHEN ",
    stale!(),
    " THEN statement_timestamp() ELSE g.window_start END,
             wrong = CASE WHEN ",
    stale!(),
    " THEN 0 ELSE g.wrong END
     RETURNING who, wrong,
               ceil(extract(epoch FROM ",
    window_end!(),
    " - statement_timestamp()))::bigint AS left_secs"
);
const WRONG_SQL: &str = "UPDATE bot_code_guesses SET wrong = wrong + 1 WHERE who = $1 OR who = 0";

/// Opens a code attempt of Telegram user `user_id` in the caller's transaction: locks its
/// counters (until the transaction ends) and says whether a limit was reached.
pub async fn open(client: &impl GenericClient, user_id: i64) -> Result<Gate, ApiError> {
    debug_assert!(user_id != EVERYONE, "a person's Telegram id is positive");
    let rows = db::rows(
        client,
        OPEN_SQL,
        &[
            &user_id,
            &(PER_USER_WINDOW_SECS as f64),
            &(EVERYONE_WINDOW_SECS as f64),
        ],
    )
    .await?;
    let mut wait = 0i64;
    for r in &rows {
        let (who, wrong, left): (i64, i32, i64) = (
            r.try_get("who")?,
            r.try_get("wrong")?,
            r.try_get("left_secs")?,
        );
        let limit = if who == EVERYONE {
            PER_MINUTE
        } else {
            PER_USER
        };
        if wrong >= limit {
            wait = wait.max(left.max(1));
        }
    }
    Ok(if wait > 0 {
        Gate::Limited {
            retry_after_secs: wait,
        }
    } else {
        Gate::Open
    })
}

/// Counts a wrong code of `user_id`, whose attempt [`open`] opened in this transaction.
pub async fn wrong(client: &impl GenericClient, user_id: i64) -> Result<(), ApiError> {
    db::execute(client, WRONG_SQL, &[&user_id]).await?;
    Ok(())
}
