//! The login throttle: failed-login counts per (email, client address) and per email, in
//! process memory (one server process per deployment), in tables of bounded size. Failures are
//! counted per pair so a stranger elsewhere cannot lock the admin out, and per email over all
//! addresses so many addresses cannot guess one account's password fast (addresses that logged
//! in to the account before are exempt from that second limit). An attempt is counted before
//! its password is checked. docs/auth.md has the rules.

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
    net::{IpAddr, Ipv6Addr},
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

/// How many (email, client address) pairs the throttle remembers. Past it the oldest pair is
/// forgotten. A pair is only added by a login that reached bcrypt, so filling the table takes
/// this many password checks; at most about 40 MB even with 254-byte emails.
pub const LOGIN_THROTTLE_CAPACITY: usize = 100_000;

/// Longest email a login accepts, in bytes (the limit of a valid address, RFC 5321).
pub const MAX_EMAIL_BYTES: usize = 254;

/// A throttle key: the normalized email and the client address (its /64 for IPv6, see
/// [`throttle_address`]).
pub type PairKey = (String, IpAddr);

/// How many emails the account-wide count remembers; like [`LOGIN_THROTTLE_CAPACITY`], an email
/// is only added by a login that reached bcrypt.
pub const ACCOUNT_THROTTLE_CAPACITY: usize = LOGIN_THROTTLE_CAPACITY;

/// How many (email, address) pairs that logged in successfully are remembered (the oldest is
/// forgotten past it): such an address is exempt from the account-wide limit, so an attacker
/// elsewhere cannot lock out staff who log in from where they logged in before.
pub const KNOWN_ADDRESS_CAPACITY: usize = 10_000;
/// How long after its last successful login an address stays known to an account.
pub const KNOWN_ADDRESS_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// The address a client is counted under: an IPv4 address as it is (an IPv4-mapped IPv6 address
/// as its IPv4 address), an IPv6 address by its /64 prefix, since one subscriber line or host
/// usually holds a whole /64 and could otherwise take a fresh address for every guess.
pub fn throttle_address(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

/// The key a pair is counted under ([`throttle_address`] applied).
fn normalized(key: &PairKey) -> PairKey {
    (key.0.clone(), throttle_address(key.1))
}

/// One pair's count: failures plus attempts being verified, within the window that started at
/// `since`. `seq` tells this incarnation of the pair from earlier ones in `order`.
struct Slot {
    count: u32,
    since: Instant,
    seq: u64,
}

/// The counts, bounded. `order` lists the keys oldest first, so forgetting the oldest pair or
/// the pairs whose window ended pops from its front in O(1). An entry whose key was removed or
/// re-added since is stale and skipped when it reaches the front; when stale entries make the
/// queue twice the capacity it is rebuilt once (amortized O(1) per insertion).
struct FailureTable<K = PairKey> {
    slots: HashMap<Arc<K>, Slot>,
    order: VecDeque<(u64, Arc<K>)>,
    next_seq: u64,
    capacity: usize,
}

/// Seconds until a window that started at `since` ends, rounded up, at least 1. Saturating:
/// a window that ended between two readings of the clock gives 1, never a panic.
fn retry_after(since: Instant, window: Duration, now: Instant) -> u64 {
    let left = window.saturating_sub(now.saturating_duration_since(since));
    (left.as_secs() + u64::from(left.subsec_nanos() > 0)).max(1)
}

impl<K: Hash + Eq + Clone> FailureTable<K> {
    fn new(capacity: usize) -> FailureTable<K> {
        FailureTable {
            slots: HashMap::new(),
            order: VecDeque::new(),
            next_seq: 0,
            capacity: capacity.max(1),
        }
    }

    /// The pair's slot if its window has not ended at `now`.
    fn current(&self, key: &K, window: Duration, now: Instant) -> Option<&Slot> {
        self.slots
            .get(key)
            .filter(|s| now.saturating_duration_since(s.since) < window)
    }

    /// `Err(retry_after_secs)` while the pair is locked out.
    fn check(&self, key: &K, max: u32, window: Duration, now: Instant) -> Result<(), u64> {
        match self.current(key, window, now) {
            Some(slot) if slot.count >= max => Err(retry_after(slot.since, window, now)),
            _ => Ok(()),
        }
    }

    /// Counts one attempt unless the pair is locked out; returns the slot's `seq`.
    fn reserve(&mut self, key: &K, max: u32, window: Duration, now: Instant) -> Result<u64, u64> {
        self.prune(window, now);
        if let Some(slot) = self.slots.get_mut(key) {
            if now.saturating_duration_since(slot.since) < window {
                if slot.count >= max {
                    return Err(retry_after(slot.since, window, now));
                }
                slot.count += 1;
                return Ok(slot.seq);
            }
            // Its window ended: the pair starts a new one at the back of the queue.
            self.slots.remove(key);
        }
        if max == 0 {
            return Err(retry_after(now, window, now));
        }
        if self.slots.len() >= self.capacity {
            self.evict_oldest();
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let key = Arc::new(key.clone());
        self.order.push_back((seq, key.clone()));
        self.slots.insert(
            key,
            Slot {
                count: 1,
                since: now,
                seq,
            },
        );
        if self.order.len() > 2 * self.capacity {
            let slots = &self.slots;
            self.order
                .retain(|(seq, key)| slots.get(&**key).is_some_and(|s| s.seq == *seq));
        }
        Ok(seq)
    }

    /// Gives back an attempt that was never judged (an error, a panic, a dropped request).
    fn release(&mut self, key: &K, seq: u64) {
        if let Some(slot) = self.slots.get_mut(key)
            && slot.seq == seq
        {
            slot.count = slot.count.saturating_sub(1);
            if slot.count == 0 {
                self.slots.remove(key);
            }
        }
    }

    /// Forgets the pair (a successful login).
    fn clear(&mut self, key: &K) {
        self.slots.remove(key);
    }

    /// Whether `order`'s entry is the pair's current slot.
    fn is_live(&self, seq: u64, key: &K) -> bool {
        self.slots.get(key).is_some_and(|s| s.seq == seq)
    }

    /// Drops stale entries and pairs whose window ended from the front of the queue.
    fn prune(&mut self, window: Duration, now: Instant) {
        while let Some((seq, key)) = self.order.front() {
            if self.is_live(*seq, key) {
                if self.current(key, window, now).is_some() {
                    break;
                }
                self.slots.remove(&**key);
            }
            self.order.pop_front();
        }
    }

    /// Forgets the pair that entered the table first.
    fn evict_oldest(&mut self) {
        while let Some((seq, key)) = self.order.pop_front() {
            if self.is_live(seq, &key) {
                self.slots.remove(&*key);
                return;
            }
        }
    }
}

/// The three bounded tables behind [`LoginThrottle`], under one lock so that an attempt is
/// counted for its pair and its account at once.
struct Tables {
    /// Failures per (email, address).
    pairs: FailureTable<PairKey>,
    /// Failures per email, from every address but known ones.
    accounts: FailureTable<String>,
    /// (email, address) pairs that logged in within [`KNOWN_ADDRESS_FOR`].
    known: FailureTable<PairKey>,
    /// Failures per email before the account-wide limit refuses unknown addresses.
    account_max: u32,
}

impl Tables {
    fn is_known(&self, key: &PairKey, now: Instant) -> bool {
        self.known.current(key, KNOWN_ADDRESS_FOR, now).is_some()
    }

    /// The pair's limit, then (for an address not known to the account) the account's.
    fn check(&self, key: &PairKey, max: u32, window: Duration, now: Instant) -> Result<(), u64> {
        self.pairs.check(key, max, window, now)?;
        if self.is_known(key, now) {
            return Ok(());
        }
        self.accounts.check(&key.0, self.account_max, window, now)
    }

    /// Counts one attempt for the pair and (unless the address is known) for the account;
    /// returns their `seq`s. Refused by either, nothing stays counted.
    fn reserve(
        &mut self,
        key: &PairKey,
        max: u32,
        window: Duration,
        now: Instant,
    ) -> Result<(u64, Option<u64>), u64> {
        let seq = self.pairs.reserve(key, max, window, now)?;
        if self.is_known(key, now) {
            return Ok((seq, None));
        }
        match self.accounts.reserve(&key.0, self.account_max, window, now) {
            Ok(account_seq) => Ok((seq, Some(account_seq))),
            Err(retry_after) => {
                self.pairs.release(key, seq);
                Err(retry_after)
            }
        }
    }
}

/// Failed-login counts per (email, client address) and per email, in tables of bounded size.
///
/// Two limits: `max` failures per pair within the window (a mistyping person, one guesser), and
/// an account-wide `account_max` per email within the same window over every address (many
/// guessers for one account). The account-wide limit does not apply to an address that logged
/// in to that account before (within [`KNOWN_ADDRESS_FOR`] of its last login, since this
/// process started), so an attacker using many addresses slows guessing on the account down to
/// `account_max` per window but cannot lock its staff out of the places they log in from; a
/// new address may be refused while the attack goes on. IPv6 addresses count by their /64
/// ([`throttle_address`]).
///
/// An attempt is counted *before* its password is verified ([`LoginThrottle::reserve`]), under
/// the lock, so parallel guesses cannot all pass the check before any failure is recorded. The
/// lock is never held across an await or anything that can panic, and a poisoned lock is
/// recovered rather than propagated: one panic must not lock every staff member out.
#[derive(Clone)]
pub struct LoginThrottle {
    inner: Arc<Mutex<Tables>>,
}

impl Default for LoginThrottle {
    /// No account-wide limit: the per-pair limit alone.
    fn default() -> Self {
        LoginThrottle::new(LOGIN_THROTTLE_CAPACITY, u32::MAX)
    }
}

impl LoginThrottle {
    /// A throttle that remembers at most `capacity` pairs, refusing an email from unknown
    /// addresses once it has `account_max` failures in the window.
    pub fn new(capacity: usize, account_max: u32) -> LoginThrottle {
        LoginThrottle {
            inner: Arc::new(Mutex::new(Tables {
                pairs: FailureTable::new(capacity),
                accounts: FailureTable::new(ACCOUNT_THROTTLE_CAPACITY.min(capacity)),
                known: FailureTable::new(KNOWN_ADDRESS_CAPACITY),
                account_max,
            })),
        }
    }

    /// A throttle that remembers at most `capacity` pairs, without an account-wide limit.
    pub fn with_capacity(capacity: usize) -> LoginThrottle {
        LoginThrottle::new(capacity, u32::MAX)
    }

    fn table(&self) -> MutexGuard<'_, Tables> {
        self.inner.lock().unwrap_or_else(|poisoned| {
            self.inner.clear_poison();
            poisoned.into_inner()
        })
    }

    /// How many pairs have a count.
    pub fn len(&self) -> usize {
        self.table().pairs.slots.len()
    }

    /// Whether no pair has a count.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `Err(retry_after_secs)` while the pair, or the account for this address, is locked
    /// out. Counts nothing: a cheap early refusal; [`LoginThrottle::reserve`] is the
    /// authoritative check.
    pub fn check(&self, key: &PairKey, max: u32, window: Duration) -> Result<(), u64> {
        self.table()
            .check(&normalized(key), max, window, Instant::now())
    }

    /// Counts one attempt for the pair (and the account), or `Err(retry_after_secs)` when the
    /// pair already has `max` or the account its account-wide limit. The attempt stays counted
    /// as a failure unless [`Attempt::succeed`] clears it; dropped unjudged, it is given back.
    pub fn reserve(&self, key: PairKey, max: u32, window: Duration) -> Result<Attempt, u64> {
        let key = normalized(&key);
        let (seq, account_seq) = self.table().reserve(&key, max, window, Instant::now())?;
        Ok(Attempt {
            throttle: self.clone(),
            key,
            seq,
            account_seq,
            judged: false,
        })
    }
}

/// One counted login attempt (see [`LoginThrottle::reserve`]).
pub struct Attempt {
    throttle: LoginThrottle,
    key: PairKey,
    seq: u64,
    /// Its count in the account-wide table; `None` from a known address.
    account_seq: Option<u64>,
    judged: bool,
}

impl Attempt {
    /// The password was right: the pair's count is cleared, the attempt is not an account
    /// failure, and the address becomes known to the account.
    pub fn succeed(mut self) {
        self.judged = true;
        let mut tables = self.throttle.table();
        tables.pairs.clear(&self.key);
        if let Some(seq) = self.account_seq {
            tables.accounts.release(&self.key.0, seq);
        }
        // Remembered anew from this login (at the back of the queue); a count of one never
        // reaches the limit, so this cannot be refused.
        tables.known.clear(&self.key);
        let _ = tables
            .known
            .reserve(&self.key, u32::MAX, KNOWN_ADDRESS_FOR, Instant::now());
    }

    /// The password was wrong: the attempt stays counted.
    pub fn fail(mut self) {
        self.judged = true;
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.judged {
            let mut tables = self.throttle.table();
            tables.pairs.release(&self.key, self.seq);
            if let Some(seq) = self.account_seq {
                tables.accounts.release(&self.key.0, seq);
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> PairKey {
        (format!("user{n}@example.com"), IpAddr::from([192, 0, 2, 1]))
    }

    const MINUTE: Duration = Duration::from_secs(60);

    /// The invariants every operation keeps: the table within its capacity, every pair in the
    /// queue once, the queue within twice the capacity.
    #[track_caller]
    fn assert_bounded(table: &FailureTable) {
        assert!(
            table.slots.len() <= table.capacity,
            "{} pairs",
            table.slots.len()
        );
        assert!(
            table.order.len() <= 2 * table.capacity,
            "{} queued",
            table.order.len()
        );
        let live = table
            .order
            .iter()
            .filter(|(seq, k)| table.is_live(*seq, k))
            .count();
        assert_eq!(live, table.slots.len(), "every pair is queued exactly once");
    }

    #[test]
    fn checks_at_the_end_of_a_window_never_panic() {
        // Real clock, a window of microseconds: windows end between any two instructions.
        let throttle = LoginThrottle::default();
        let window = Duration::from_micros(20);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let throttle = throttle.clone();
                std::thread::spawn(move || {
                    for _ in 0..200_000 {
                        if let Ok(attempt) = throttle.reserve(key(1), 1, window) {
                            attempt.fail();
                        }
                        let _ = throttle.check(&key(1), 1, window);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("the throttle never panics");
        }
        assert!(!throttle.inner.is_poisoned());
    }

    #[test]
    fn the_window_boundary_is_exact_and_saturating() {
        let mut table = FailureTable::new(10);
        let t0 = Instant::now();
        let window = Duration::from_secs(600);
        table.reserve(&key(1), 1, window, t0).unwrap();
        assert_eq!(table.check(&key(1), 1, window, t0), Err(600));
        let just_before = t0 + window - Duration::from_nanos(1);
        assert_eq!(table.check(&key(1), 1, window, just_before), Err(1));
        assert_eq!(table.reserve(&key(1), 1, window, just_before), Err(1));
        // A clock reading older than the window's start (taken before another thread's).
        let earlier = t0.checked_sub(Duration::from_secs(5)).unwrap_or(t0);
        assert_eq!(table.check(&key(1), 1, window, earlier), Err(600));
        // The window ends exactly at `since + window`: the pair is free and starts over.
        assert_eq!(table.check(&key(1), 1, window, t0 + window), Ok(()));
        assert!(table.reserve(&key(1), 1, window, t0 + window).is_ok());
        assert_eq!(table.check(&key(1), 1, window, t0 + window), Err(600));
        assert_bounded(&table);
    }

    #[test]
    fn a_poisoned_lock_does_not_break_later_logins() {
        let throttle = LoginThrottle::default();
        let inner = throttle.inner.clone();
        let _ = std::thread::spawn(move || {
            let _guard = inner.lock().unwrap();
            panic!("poison the throttle");
        })
        .join();
        assert!(throttle.inner.is_poisoned());
        assert!(throttle.check(&key(1), 1, MINUTE).is_ok());
        throttle.reserve(key(1), 1, MINUTE).unwrap().fail();
        assert!(throttle.check(&key(1), 1, MINUTE).is_err());
        throttle.reserve(key(2), 1, MINUTE).unwrap().succeed();
        assert_eq!(throttle.len(), 1);
        assert!(
            !throttle.inner.is_poisoned(),
            "recovered once, not on every login"
        );
    }

    #[test]
    fn attempts_are_counted_before_their_verdict() {
        let throttle = LoginThrottle::default();
        // Three attempts in flight use the allowance of three: a fourth is refused at once.
        let flying: Vec<_> = (0..3)
            .map(|_| throttle.reserve(key(1), 3, MINUTE).unwrap())
            .collect();
        assert!(throttle.reserve(key(1), 3, MINUTE).is_err());
        assert!(throttle.check(&key(1), 3, MINUTE).is_err());
        // An attempt dropped without a verdict (an error, a panic) is given back...
        let mut flying = flying.into_iter();
        drop(flying.next());
        assert!(throttle.check(&key(1), 3, MINUTE).is_ok());
        // ...a failure stays counted...
        flying.next().unwrap().fail();
        let again = throttle.reserve(key(1), 3, MINUTE).unwrap();
        assert!(throttle.reserve(key(1), 3, MINUTE).is_err());
        again.fail();
        // ...and a success clears the pair.
        flying.next().unwrap().succeed();
        assert!(throttle.is_empty());
        for _ in 0..3 {
            throttle.reserve(key(1), 3, MINUTE).unwrap().fail();
        }
        assert!(throttle.check(&key(1), 3, MINUTE).is_err());
        // Other pairs are untouched.
        assert!(throttle.check(&key(2), 3, MINUTE).is_ok());
    }

    #[test]
    fn the_table_keeps_its_capacity_and_forgets_the_oldest() {
        let mut table = FailureTable::new(3);
        let t0 = Instant::now();
        for n in 0..4 {
            table.reserve(&key(n), 5, MINUTE, t0).unwrap();
            assert_bounded(&table);
        }
        assert_eq!(table.slots.len(), 3);
        assert!(
            !table.slots.contains_key(&key(0)),
            "the oldest pair is forgotten"
        );
        for n in 1..4 {
            assert!(table.slots.contains_key(&key(n)));
        }
        // A pair counted again keeps its age: key(1) is now the oldest and goes next.
        table.reserve(&key(1), 5, MINUTE, t0).unwrap();
        table.reserve(&key(4), 5, MINUTE, t0).unwrap();
        assert!(!table.slots.contains_key(&key(1)));
        assert_eq!(table.slots.len(), 3);
        assert_bounded(&table);
    }

    #[test]
    fn ended_windows_leave_the_table() {
        let mut table = FailureTable::new(100);
        let t0 = Instant::now();
        for n in 0..50 {
            table.reserve(&key(n), 5, MINUTE, t0).unwrap();
        }
        table.reserve(&key(1000), 5, MINUTE, t0 + MINUTE).unwrap();
        assert_eq!(table.slots.len(), 1);
        assert_eq!(table.order.len(), 1);
    }

    #[test]
    fn churn_keeps_the_queue_bounded() {
        // Pairs removed by success or given back leave stale entries in the queue, behind
        // pairs whose window is still open (so pruning cannot reach them); the queue still
        // stays within twice the capacity.
        let mut table = FailureTable::new(8);
        let t0 = Instant::now();
        let window = Duration::from_secs(10);
        for n in 0..20_000u32 {
            let now = t0 + Duration::from_millis(u64::from(n));
            let seq = table.reserve(&key(n % 4), 1_000_000, window, now).unwrap();
            match n % 3 {
                0 => table.release(&key(n % 4), seq),
                1 => table.clear(&key(n % 4)),
                _ => {}
            }
            let seq = table.reserve(&key(100 + n), 5, window, now).unwrap();
            if n % 2 == 0 {
                table.release(&key(100 + n), seq);
            }
            assert_bounded(&table);
        }
    }

    fn from(email: &str, ip: &str) -> PairKey {
        (email.to_string(), ip.parse().unwrap())
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(throttle_address(ip("192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(throttle_address(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(
            throttle_address(ip("2001:db8:1:2:3:4:5:6")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(throttle_address(ip("2001:db8:1:2::")), ip("2001:db8:1:2::"));
        assert_eq!(throttle_address(ip("::1")), ip("::"));

        let throttle = LoginThrottle::default();
        for host in ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"] {
            throttle
                .reserve(from("a@example.com", host), 2, MINUTE)
                .unwrap()
                .fail();
        }
        assert!(
            throttle
                .check(&from("a@example.com", "2001:db8:1:2::9"), 2, MINUTE)
                .is_err()
        );
        assert!(
            throttle
                .check(&from("a@example.com", "2001:db8:1:3::1"), 2, MINUTE)
                .is_ok()
        );
        assert_eq!(throttle.len(), 1, "one pair for the whole /64");
    }

    #[test]
    fn many_addresses_share_the_account_wide_limit() {
        let throttle = LoginThrottle::new(100, 3);
        let victim = "admin@example.com";
        // The admin logged in from their usual address before the attack.
        throttle
            .reserve(from(victim, "198.51.100.1"), 5, MINUTE)
            .unwrap()
            .succeed();
        // A success is no account failure: three failures from three addresses use it up.
        for n in 1..=3 {
            let key = from(victim, &format!("203.0.113.{n}"));
            throttle.reserve(key, 5, MINUTE).unwrap().fail();
        }
        let fourth = from(victim, "203.0.113.4");
        let retry = throttle.check(&fourth, 5, MINUTE).unwrap_err();
        assert!((1..=60).contains(&retry), "{retry}");
        assert!(throttle.reserve(fourth.clone(), 5, MINUTE).is_err());
        // A refused attempt leaves no count behind for its pair.
        assert_eq!(throttle.len(), 3);
        // The known address is not locked out; neither is another account.
        assert!(
            throttle
                .check(&from(victim, "198.51.100.1"), 5, MINUTE)
                .is_ok()
        );
        throttle
            .reserve(from(victim, "198.51.100.1"), 5, MINUTE)
            .unwrap()
            .fail();
        assert!(
            throttle
                .check(&from("other@example.com", "203.0.113.4"), 5, MINUTE)
                .is_ok()
        );
        // Still only three account failures: a known address's failures count for its pair.
        assert!(throttle.check(&fourth, 5, MINUTE).is_err());
    }

    #[test]
    fn account_counts_are_given_back_like_pair_counts() {
        let throttle = LoginThrottle::new(100, 2);
        let email = "a@example.com";
        // In flight from two addresses: the account's allowance is in use.
        let first = throttle
            .reserve(from(email, "192.0.2.1"), 5, MINUTE)
            .unwrap();
        let second = throttle
            .reserve(from(email, "192.0.2.2"), 5, MINUTE)
            .unwrap();
        assert!(
            throttle
                .reserve(from(email, "192.0.2.3"), 5, MINUTE)
                .is_err()
        );
        // Dropped unjudged: given back to the account too.
        drop(first);
        let third = throttle
            .reserve(from(email, "192.0.2.3"), 5, MINUTE)
            .unwrap();
        // A success is not an account failure.
        second.succeed();
        throttle
            .reserve(from(email, "192.0.2.4"), 5, MINUTE)
            .unwrap()
            .fail();
        third.fail();
        assert!(
            throttle
                .check(&from(email, "192.0.2.5"), 5, MINUTE)
                .is_err()
        );
        // The address that succeeded is known now.
        assert!(throttle.check(&from(email, "192.0.2.2"), 5, MINUTE).is_ok());
    }
}
