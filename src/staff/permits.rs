//! Hashing permits: the cap on login password checks running at once.

use std::{num::NonZeroUsize, sync::Arc, time::Duration};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a login waits for a free password-hashing permit before it is refused with 503.
pub const HASH_PERMIT_WAIT: Duration = Duration::from_secs(1);

/// Caps how many login password checks run at once, so a flood of logins cannot take every
/// core (and the blocking pool) from the rest of the service. A login that finds no permit
/// within its wait is refused with 503 instead of queueing.
#[derive(Clone)]
pub struct HashPermits {
    semaphore: Arc<Semaphore>,
    permits: usize,
    wait: Duration,
}

impl HashPermits {
    /// `permits` checks at once (at least one); a login waits up to `wait` for one.
    pub fn new(permits: usize, wait: Duration) -> HashPermits {
        let permits = permits.max(1);
        HashPermits {
            semaphore: Arc::new(Semaphore::new(permits)),
            permits,
            wait,
        }
    }

    /// One permit per core this process may use, and [`HASH_PERMIT_WAIT`].
    pub fn per_core() -> HashPermits {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        HashPermits::new(cores, HASH_PERMIT_WAIT)
    }

    /// How many checks may run at once.
    pub fn permits(&self) -> usize {
        self.permits
    }

    /// A permit if one is free now.
    pub fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        self.semaphore.clone().try_acquire_owned().ok()
    }

    /// A permit, waiting at most the configured wait.
    pub async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        tokio::time::timeout(self.wait, self.semaphore.clone().acquire_owned())
            .await
            .ok()?
            .ok()
    }
}
#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[tokio::test]
    async fn hash_permits_refuse_quickly_when_all_are_taken() {
        let permits = HashPermits::new(2, Duration::from_millis(50));
        let held: Vec<_> = std::iter::from_fn(|| permits.try_acquire()).collect();
        assert_eq!(held.len(), 2);
        let started = Instant::now();
        assert!(permits.acquire().await.is_none());
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(held);
        assert!(permits.acquire().await.is_some());
    }
}
