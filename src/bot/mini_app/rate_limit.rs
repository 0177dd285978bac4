//! The Mini App's limit per buyer: a token bucket per Telegram user, in memory (one process
//! serves the page; a restart forgets the buckets, which only forgives). A bucket holds
//! [`CAPACITY`] requests and refills [`CAPACITY`] every [`WINDOW_SECS`]; a call finding it empty
//! is refused with the seconds until a token is back.
//!
//! The decision ([`Bucket::take`]) is a pure function of the bucket and the time; [`Buckets`]
//! keeps one per user behind a mutex held for that decision only, and forgets full buckets once
//! the map grows past [`SWEEP_AT`].

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

/// Requests a buyer may make at once.
pub const CAPACITY: f64 = 30.0;
/// The time in which an empty bucket fills again.
pub const WINDOW_SECS: f64 = 10.0;
/// Buckets kept before full ones are forgotten.
const SWEEP_AT: usize = 10_000;

/// One user's bucket: tokens left at `at` (seconds on the caller's clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    tokens: f64,
    at: f64,
}

impl Bucket {
    /// A full bucket at time `now`.
    pub fn full(now: f64) -> Bucket {
        Bucket {
            tokens: CAPACITY,
            at: now,
        }
    }

    fn refilled(self, now: f64) -> Bucket {
        let elapsed = (now - self.at).max(0.0);
        Bucket {
            tokens: (self.tokens + elapsed * CAPACITY / WINDOW_SECS).min(CAPACITY),
            at: now.max(self.at),
        }
    }

    /// Takes a token at time `now`: the bucket after, and `Err(seconds)` until one is back when
    /// there was none.
    pub fn take(self, now: f64) -> (Bucket, Result<(), u64>) {
        let b = self.refilled(now);
        if b.tokens >= 1.0 {
            (
                Bucket {
                    tokens: b.tokens - 1.0,
                    ..b
                },
                Ok(()),
            )
        } else {
            let wait = (1.0 - b.tokens) * WINDOW_SECS / CAPACITY;
            (b, Err((wait.ceil() as u64).max(1)))
        }
    }

    fn is_full(self, now: f64) -> bool {
        self.refilled(now).tokens >= CAPACITY
    }
}

/// Every user's bucket; cheap to clone (shared).
#[derive(Clone)]
pub struct Buckets {
    started: Instant,
    users: Arc<Mutex<HashMap<i64, Bucket>>>,
}

impl Default for Buckets {
    fn default() -> Buckets {
        Buckets {
            started: Instant::now(),
            users: Arc::default(),
        }
    }
}

impl Buckets {
    /// Takes a token of Telegram user `user_id`'s bucket now; `Err(seconds)` to wait when empty.
    pub fn take(&self, user_id: i64) -> Result<(), u64> {
        let now = self.started.elapsed().as_secs_f64();
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if users.len() >= SWEEP_AT {
            users.retain(|_, b| !b.is_full(now));
        }
        let bucket = users.get(&user_id).copied().unwrap_or(Bucket::full(now));
        let (after, result) = bucket.take(now);
        users.insert(user_id, after);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_gives_its_capacity_then_refuses() {
        let mut b = Bucket::full(0.0);
        for _ in 0..CAPACITY as usize {
            let (next, r) = b.take(0.0);
            assert_eq!(r, Ok(()));
            b = next;
        }
        let (b, r) = b.take(0.0);
        assert_eq!(r, Err(1), "one token comes back in a third of a second");
        assert_eq!(b.take(0.0).1, Err(1));
    }

    #[test]
    fn it_refills_with_time_up_to_its_capacity() {
        let mut b = Bucket::full(0.0);
        for _ in 0..CAPACITY as usize {
            b = b.take(0.0).0;
        }
        // One token per WINDOW_SECS / CAPACITY seconds.
        let step = WINDOW_SECS / CAPACITY;
        let (b, r) = b.take(step);
        assert_eq!(r, Ok(()));
        assert!(b.take(step).1.is_err());
        // A long pause fills it, but never past its capacity.
        let mut b = b;
        let mut given = 0;
        loop {
            let (next, r) = b.take(1000.0);
            b = next;
            if r.is_err() {
                break;
            }
            given += 1;
        }
        assert_eq!(given, CAPACITY as usize);
    }

    #[test]
    fn the_wait_grows_with_the_deficit_and_time_never_runs_backwards() {
        let b = Bucket {
            tokens: 0.0,
            at: 5.0,
        };
        // An earlier clock reading refills nothing (and takes nothing).
        let (after, r) = b.take(4.0);
        assert_eq!(r, Err(1));
        assert_eq!(after.at, 5.0);
        assert!(Bucket::full(0.0).is_full(0.0));
        assert!(!b.is_full(5.0 + WINDOW_SECS / 2.0));
        assert!(b.is_full(5.0 + WINDOW_SECS));
    }

    #[test]
    fn buckets_are_per_user() {
        let buckets = Buckets::default();
        for _ in 0..CAPACITY as usize {
            assert_eq!(buckets.take(1), Ok(()));
        }
        assert!(buckets.take(1).is_err());
        assert_eq!(buckets.take(2), Ok(()));
    }
}
