//! Monobank's webhook public key, held in memory ([`PublicKeys`], one per process, in the
//! application state) rather than fetched per delivery, as Monobank asks: "the key can be
//! cached; request a new key only when verification with the current key stops working".
//!
//! A delivery whose `X-Sign` does not verify with the cached key has the key fetched again
//! once, and is checked again with the new key before it is refused. Fetches are one at a
//! time: concurrent deliveries that failed with the same key wait for one fetch and check
//! against its key, so a burst of deliveries signed by a rotated key makes one call, not one
//! each. An `X-Sign` that is missing or not a DER signature is refused without a fetch (no key
//! can make it verify). A fetch that fails leaves the cached key as it was, and the delivery is
//! answered 503 (Monobank delivers it again; nothing was stored).

use std::sync::{Arc, RwLock};

use p256::ecdsa::VerifyingKey;

use super::{ApiCallError, SignatureError, fetch_public_key, parse_signature, verifies};
use crate::config::MonobankConfig;

/// Why a delivery's signature was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum KeyCheck {
    /// The signature is missing, malformed, or verifies with neither key: 401.
    #[error(transparent)]
    Refused(SignatureError),
    /// The key could not be fetched: 503.
    #[error("Monobank's public key could not be fetched: {0}")]
    Unavailable(ApiCallError),
}

/// The cached key and its generation (how many fetches stored a key), shared by the state's
/// clones.
#[derive(Clone, Default)]
pub struct PublicKeys {
    current: Arc<RwLock<Option<(u64, VerifyingKey)>>>,
    /// Held while a key is fetched, so fetches are one at a time.
    fetching: Arc<tokio::sync::Mutex<()>>,
}

impl PublicKeys {
    fn cached(&self) -> Option<(u64, VerifyingKey)> {
        *self.current.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks `header` (`X-Sign`) over `body` with the cached key, and — when there is none or
    /// it does not verify — once more with a key fetched now (see the module doc).
    pub async fn verify(
        &self,
        config: &MonobankConfig,
        header: Option<&str>,
        body: &[u8],
    ) -> Result<(), KeyCheck> {
        let signature = parse_signature(header).map_err(KeyCheck::Refused)?;
        let seen = self.cached();
        if let Some((_, key)) = &seen
            && verifies(key, &signature, body)
        {
            return Ok(());
        }
        let key = self
            .refetch(config, seen.map(|(generation, _)| generation))
            .await?;
        if verifies(&key, &signature, body) {
            Ok(())
        } else {
            Err(KeyCheck::Refused(SignatureError::NoMatch))
        }
    }

    /// A key newer than generation `seen`: one another delivery fetched while this one waited,
    /// or one fetched now.
    async fn refetch(
        &self,
        config: &MonobankConfig,
        seen: Option<u64>,
    ) -> Result<VerifyingKey, KeyCheck> {
        let _one_at_a_time = self.fetching.lock().await;
        if let Some((generation, key)) = self.cached()
            && Some(generation) != seen
        {
            return Ok(key);
        }
        let key = fetch_public_key(&config.api_url, config.token.expose())
            .await
            .map_err(KeyCheck::Unavailable)?;
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        let generation = current.map_or(1, |(g, _)| g + 1);
        *current = Some((generation, key));
        tracing::info!(generation, "Monobank public key fetched");
        Ok(key)
    }
}
