//! [`Secret`]: a configured secret, never printed.

use std::fmt;

use super::{ConfigError, vars::err};

/// A secret string: `Debug` prints `<redacted>`, so a config dump never leaks it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub(super) String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret's text. Call sites that need it are the only places that see it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether a presented credential equals this secret. Both sides are hashed with SHA-256
    /// first and the digests compared in constant time, so neither the content nor the length
    /// of the secret leaks through timing.
    pub fn matches(&self, given: &[u8]) -> bool {
        use sha2::{Digest, Sha256};
        use subtle::ConstantTimeEq;
        Sha256::digest(self.0.as_bytes())
            .ct_eq(&Sha256::digest(given))
            .into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A secret of at least `min_bytes`; a shorter one is refused without showing it.
pub(super) fn long_enough(
    name: &str,
    value: String,
    min_bytes: usize,
) -> Result<Secret, ConfigError> {
    if value.len() < min_bytes {
        return Err(err(format!("{name} must be at least {min_bytes} bytes")));
    }
    Ok(Secret(value))
}
