//! The background jobs' settings (reminders, sweep, audits, outbound addresses) and the rules of
//! a seat hold.

use std::time::Duration;

use super::{ConfigError, Secret, secret::long_enough, vars::Vars};

/// The rules of a new seat hold, from the configuration (`HOLD_SECS`, `HOLD_COOLDOWN_SECS`,
/// `HOLDS_PER_DAY`): how long a hold lasts, how long a buyer whose hold ran out unpaid waits
/// before holding a seat of that channel again, and how many holds of one channel a buyer may
/// take in 24 hours. A hold already granted is never affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRules {
    pub hold_secs: i64,
    pub cooldown_secs: i64,
    pub per_day: i64,
}

/// `REMINDER_DAYS`, `OUTBOUND_ALLOW_PRIVATE`, `SWEEP_TOKEN`, `SWEEP_INTERVAL_SECS`,
/// `HOLD_SECS`, `HOLD_COOLDOWN_SECS`, `HOLDS_PER_DAY`, `AUDIT_INTERVAL_SECS`, `AUDIT_FIX`: the
/// background jobs and the seat hold.
pub(super) struct Jobs {
    pub(super) reminder_days: u32,
    pub(super) outbound_allow_private: bool,
    pub(super) sweep_token: Option<Secret>,
    pub(super) sweep_interval: Option<Duration>,
    pub(super) hold_secs: i64,
    pub(super) hold_cooldown_secs: i64,
    pub(super) holds_per_day: i64,
    pub(super) audit_interval: Option<Duration>,
    pub(super) audit_fix: bool,
}

impl Jobs {
    pub(super) fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let hold_secs = vars.int("HOLD_SECS", 300, 1, 86_400)?;
        Ok(Jobs {
            reminder_days: vars.int("REMINDER_DAYS", 3, 0, 365)? as u32,
            outbound_allow_private: vars.flag("OUTBOUND_ALLOW_PRIVATE")?,
            sweep_token: vars
                .get("SWEEP_TOKEN")
                .map(|t| long_enough("SWEEP_TOKEN", t, 32))
                .transpose()?,
            sweep_interval: match vars.int("SWEEP_INTERVAL_SECS", 0, 0, 86_400)? {
                0 => None,
                n => Some(Duration::from_secs(n)),
            },
            hold_secs: hold_secs as i64,
            hold_cooldown_secs: vars.int("HOLD_COOLDOWN_SECS", hold_secs, 0, 86_400)? as i64,
            holds_per_day: vars.int("HOLDS_PER_DAY", 3, 1, 1000)? as i64,
            audit_interval: match vars.int("AUDIT_INTERVAL_SECS", 0, 0, 604_800)? {
                0 => None,
                n => Some(Duration::from_secs(n)),
            },
            audit_fix: vars.flag("AUDIT_FIX")?,
        })
    }
}
