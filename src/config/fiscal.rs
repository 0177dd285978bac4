//! Fiscal receipts' settings: the Checkbox cash register's license key, its cashier's login and
//! password, and Checkbox's API address ([`crate::payments::receipts`]).

use super::{
    ConfigError, Secret,
    vars::{Vars, err},
};

/// A Checkbox cash register and the cashier who signs its receipts.
#[derive(Debug, Clone)]
pub struct CheckboxConfig {
    /// `CHECKBOX_LICENSE_KEY`: the cash register's license key (`X-License-Key`).
    pub license_key: Secret,
    /// `CHECKBOX_LOGIN`: the cashier's login.
    pub login: String,
    /// `CHECKBOX_PASSWORD`: the cashier's password.
    pub password: Secret,
    /// `CHECKBOX_API_URL`, without a trailing slash.
    pub api_url: String,
}

/// `CHECKBOX_LICENSE_KEY`, `CHECKBOX_LOGIN`, `CHECKBOX_PASSWORD` (all three or none) and
/// `CHECKBOX_API_URL`.
pub(super) fn read<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
) -> Result<Option<CheckboxConfig>, ConfigError> {
    let api_url = vars
        .get("CHECKBOX_API_URL")
        .unwrap_or_else(|| "https://api.checkbox.ua".to_string())
        .trim_end_matches('/')
        .to_string();
    if url::Url::parse(&api_url).is_err() {
        return Err(err("CHECKBOX_API_URL must be an absolute URL"));
    }
    let names = [
        "CHECKBOX_LICENSE_KEY",
        "CHECKBOX_LOGIN",
        "CHECKBOX_PASSWORD",
    ];
    let [key, login, password] = names.map(|n| vars.get(n).map(|v| v.trim().to_string()));
    match (key, login, password) {
        (Some(key), Some(login), Some(password)) => Ok(Some(CheckboxConfig {
            license_key: Secret(key),
            login,
            password: Secret(password),
            api_url,
        })),
        (None, None, None) => Ok(None),
        (key, login, password) => {
            let missing: Vec<&str> = [key.is_none(), login.is_none(), password.is_none()]
                .iter()
                .zip(names)
                .filter(|(missing, _)| **missing)
                .map(|(_, n)| n)
                .collect();
            let verb = if missing.len() == 1 { "is" } else { "are" };
            Err(err(format!(
                "{} {verb} not set (set CHECKBOX_LICENSE_KEY, CHECKBOX_LOGIN and \
                 CHECKBOX_PASSWORD together, or none of them)",
                missing.join(", ")
            )))
        }
    }
}
