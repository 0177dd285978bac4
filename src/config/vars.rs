//! The readers every group of settings shares ([`Vars`]), and the refusal they build.

use std::time::Duration;

use super::ConfigError;

pub(super) fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// The variables, read through a lookup. Each method reads one variable of one shape and
/// refuses it with the same words for every variable of that shape.
pub(super) struct Vars<F>(pub(super) F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    /// The value, or `None` when unset or blank.
    pub(super) fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    pub(super) fn required(&self, name: &str) -> Result<String, ConfigError> {
        self.get(name)
            .ok_or_else(|| err(format!("{name} is not set")))
    }

    /// An optional value that must pass `valid`, refused with `refusal`.
    pub(super) fn checked(
        &self,
        name: &str,
        valid: impl Fn(&str) -> bool,
        refusal: &str,
    ) -> Result<Option<String>, ConfigError> {
        match self.get(name) {
            Some(v) if !valid(&v) => Err(err(refusal)),
            v => Ok(v),
        }
    }

    pub(super) fn int(
        &self,
        name: &str,
        default: u64,
        min: u64,
        max: u64,
    ) -> Result<u64, ConfigError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(err(format!(
                    "{name} must be an integer from {min} to {max}"
                ))),
            },
        }
    }

    pub(super) fn secs(
        &self,
        name: &str,
        default: u64,
        min: u64,
        max: u64,
    ) -> Result<Duration, ConfigError> {
        self.int(name, default, min, max).map(Duration::from_secs)
    }

    pub(super) fn flag(&self, name: &str) -> Result<bool, ConfigError> {
        match self
            .get(name)
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("false") | Some("0") | Some("no") => Ok(false),
            Some("true") | Some("1") | Some("yes") => Ok(true),
            Some(_) => Err(err(format!("{name} must be true or false"))),
        }
    }
}

/// The host of an absolute `http` or `https` URL.
pub(super) fn host_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    parsed.host_str().map(str::to_string)
}
