//! Standard Webhooks secrets (`WEBHOOK_SECRET`, `WEBHOOK_SECRETS`) as configuration reads
//! them: `whsec_<base64>` keys checked at start-up, so a pasted password fails there and not at
//! the first webhook. The signing and verifying are
//! [`crate::payments::gateways::standard_webhooks`].

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// HMAC-SHA256, the only Standard Webhooks scheme (`v1`).
pub(crate) type HmacSha256 = Hmac<Sha256>;

/// Prefix every Standard Webhooks secret carries. Requiring it catches a plain password pasted
/// into `WEBHOOK_SECRET` at start-up instead of at the first (rejected) webhook.
const SECRET_PREFIX: &str = "whsec_";

/// An HMAC-SHA256 key decoded from a `whsec_<base64>` secret.
///
/// `Debug` is redacted so the key cannot leak through a stray `{:?}` on a config struct.
#[derive(Clone)]
pub struct WebhookKey(pub(crate) Vec<u8>);

impl fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookKey(<redacted>)")
    }
}

/// Why a configured webhook secret was rejected.
///
/// Messages name the problem and, for lists, the position of the bad entry, but never echo the
/// secret text, because these errors end up in start-up logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The secret does not start with `whsec_`.
    #[error("webhook secret must have the form whsec_<base64>")]
    MissingPrefix,
    /// The part after `whsec_` is not standard (padded) base64.
    #[error("webhook secret is not valid base64 after the whsec_ prefix")]
    InvalidBase64,
    /// The secret decodes to zero bytes, which would make every signature forgeable.
    #[error("webhook secret decodes to an empty key")]
    EmptyKey,
    /// A secrets list contained no entries at all.
    #[error("no webhook secret configured")]
    NoKeys,
    /// One entry of a secrets list was invalid (`position` counts from 1).
    #[error("webhook secret #{position} in the list: {reason}")]
    InList {
        /// 1-based position of the bad entry in the list.
        position: usize,
        /// What is wrong with that entry.
        reason: Box<KeyError>,
    },
}

impl WebhookKey {
    /// Parses one `whsec_<base64>` secret (standard alphabet, with padding).
    ///
    /// Surrounding whitespace is ignored because secrets often come from files or env vars with a
    /// trailing newline; the `whsec_` prefix is mandatory.
    pub fn parse(s: &str) -> Result<WebhookKey, KeyError> {
        let encoded = s
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .ok_or(KeyError::MissingPrefix)?;
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| KeyError::InvalidBase64)?;
        if key.is_empty() {
            return Err(KeyError::EmptyKey);
        }
        Ok(WebhookKey(key))
    }

    /// The HMAC-SHA256 state keyed with this key, for the signature code.
    pub(crate) fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC accepts keys of any length")
    }
}

/// Parses a list of secrets separated by whitespace and/or commas (`WEBHOOK_SECRETS`).
///
/// Used for key rotation: during a roll-over both the old and the new secret are configured and
/// a webhook signed by either is accepted. An empty list is an error so that a blank variable
/// does not silently disable the door.
pub fn parse_keys(var: &str) -> Result<Vec<WebhookKey>, KeyError> {
    let keys = var
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|part| !part.is_empty())
        .enumerate()
        .map(|(i, part)| {
            WebhookKey::parse(part).map_err(|reason| KeyError::InList {
                position: i + 1,
                reason: Box::new(reason),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(KeyError::NoKeys);
    }
    Ok(keys)
}
