//! Staff authentication's settings: the token key and lifetime, the first account, bcrypt's cost
//! and the login throttle.

use std::time::Duration;

use super::{
    ConfigError, Secret,
    secret::long_enough,
    vars::{Vars, err},
};

/// `JWT_SECRET`, `JWT_TTL_SECS`, `ADMIN_EMAIL`, `ADMIN_PASSWORD`, `BCRYPT_COST`,
/// `LOGIN_MAX_FAILURES`, `LOGIN_WINDOW_SECS`, `LOGIN_ACCOUNT_MAX_FAILURES`.
pub(super) struct StaffAuth {
    pub(super) jwt_secret: Secret,
    pub(super) jwt_ttl: Duration,
    pub(super) admin_email: Option<String>,
    pub(super) admin_password: Option<Secret>,
    pub(super) bcrypt_cost: u32,
    pub(super) login_max_failures: u32,
    pub(super) login_window: Duration,
    pub(super) login_account_max_failures: u32,
}

impl StaffAuth {
    pub(super) fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let jwt_secret = long_enough("JWT_SECRET", vars.required("JWT_SECRET")?, 32)?;
        let jwt_ttl = vars.secs("JWT_TTL_SECS", 3600, 60, 86_400)?;

        let admin_email = vars.get("ADMIN_EMAIL").map(|e| e.trim().to_lowercase());
        let admin_password = vars.get("ADMIN_PASSWORD").map(Secret);
        match (&admin_email, &admin_password) {
            (Some(_), None) => return Err(err("ADMIN_PASSWORD is not set (ADMIN_EMAIL is)")),
            (None, Some(_)) => return Err(err("ADMIN_EMAIL is not set (ADMIN_PASSWORD is)")),
            (Some(e), Some(_)) if !crate::common::email::valid_email(e) => {
                return Err(err("ADMIN_EMAIL is not a valid email address"));
            }
            (Some(_), Some(p)) if !(8..=72).contains(&p.0.len()) => {
                return Err(err("ADMIN_PASSWORD must be 8..72 bytes"));
            }
            _ => {}
        }

        Ok(StaffAuth {
            jwt_secret,
            jwt_ttl,
            admin_email,
            admin_password,
            bcrypt_cost: vars.int("BCRYPT_COST", 12, 4, 31)? as u32,
            login_max_failures: vars.int("LOGIN_MAX_FAILURES", 5, 1, 1000)? as u32,
            login_window: vars.secs("LOGIN_WINDOW_SECS", 900, 1, 86_400)?,
            login_account_max_failures: vars.int("LOGIN_ACCOUNT_MAX_FAILURES", 20, 1, 100_000)?
                as u32,
        })
    }
}
