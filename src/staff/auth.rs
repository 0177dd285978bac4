//! Staff authentication, without HTTP: bcrypt passwords, HS256 JWTs, the login throttle and
//! the hashing permits, the staff-account lookups, staff-account creation (start-up admin and
//! CLI), password changes (CLI) and ending an account's sessions (its token version). What the
//! CLI changes is in the audit log as the command line's. The login handler and the `Staff`
//! extractor that use them are `api::auth`.
//!
//! Login answers the same 401, in about the same time, for an unknown email and a wrong
//! password: an unknown email is still checked against a dummy bcrypt hash of the configured
//! cost. Failures are counted per (email, client address) so a stranger elsewhere cannot lock
//! the admin out, and per email over all addresses so many addresses cannot guess one
//! account's password fast (addresses that logged in to the account before are exempt from
//! that second limit); the counts live in process memory (one server process per deployment),
//! in tables of bounded size. Login is reachable without credentials, so its cost is bounded too:
//! an attempt is counted before its password is checked, at most one bcrypt check per core runs
//! at a time, and an overlong email is refused before any of that. docs/auth.md has the rules.

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
    net::{IpAddr, Ipv6Addr},
    num::NonZeroUsize,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{
    common::{email::valid_email, error::ApiError},
    db,
    staff::{
        Account, Role,
        audit_log::{self, Entry},
    },
};

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    iat: i64,
    exp: i64,
    /// The account's `token_version` when the token was issued. Tokens issued before the
    /// claim existed carry none and count as version 0, the column's default (so the upgrade
    /// logs nobody out; the first bump of the account ends them too).
    #[serde(default)]
    ver: i32,
}

/// Who a valid token speaks for: the staff account and the token version it was issued under
/// (checked against the account's current `token_version`, [`crate::staff::session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenSubject {
    pub staff_id: i64,
    pub version: i32,
}

/// Issues a token for a staff account whose `token_version` is `version`.
pub fn issue_token(
    secret: &[u8],
    staff_id: i64,
    version: i32,
    ttl: Duration,
) -> Result<String, ApiError> {
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        sub: staff_id.to_string(),
        iat: now,
        exp: now + ttl.as_secs() as i64,
        ver: version,
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .map_err(ApiError::internal)
}

/// Validates a token: HS256 only (so `alg: none` and every other algorithm fail), signature,
/// `exp` with zero leeway, `iat` not in the future (zero leeway: this server issued it, by its
/// own clock), and a lifetime `exp - iat` of at most `max_ttl` (`JWT_TTL_SECS`: no token lives
/// longer than this server would issue one for). Returns the staff id in `sub` and the token
/// version in `ver`; whether they still match the account is [`crate::staff::session`]'s question.
pub fn verify_token(secret: &[u8], token: &str, max_ttl: Duration) -> Option<TokenSubject> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 0;
    validation.validate_exp = true;
    validation.set_required_spec_claims(&["exp", "sub", "iat"]);
    let data =
        jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(secret), &validation)
            .ok()?;
    let claims = data.claims;
    let now = chrono::Utc::now().timestamp();
    // jsonwebtoken treats exp == now as valid; the contract says past exp, so this is exact.
    if claims.exp <= now || claims.iat > now {
        return None;
    }
    let lifetime = claims.exp.checked_sub(claims.iat)?;
    if lifetime > i64::try_from(max_ttl.as_secs()).unwrap_or(i64::MAX) {
        return None;
    }
    Some(TokenSubject {
        staff_id: claims.sub.parse().ok()?,
        version: claims.ver,
    })
}

/// Hashes a password with bcrypt on the blocking pool. Not capped by [`HashPermits`]: it serves
/// start-up and the CLI, which no anonymous client can reach.
pub async fn hash_password(password: String, cost: u32) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}

/// Creates a staff account of `role` unless one with that email exists (start-up's admin from
/// `ADMIN_EMAIL`, which is no staff write). Returns whether it was created. The email and
/// password are checked like the API's ([`new_account`]).
pub async fn create_staff(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    role: Role,
    cost: u32,
) -> Result<bool, ApiError> {
    insert_staff(pool, email, password, role, cost, false).await
}

/// [`create_staff`] for `subgate staff create`: the account and its `staff.create` row in the
/// audit log (the command line's, [`audit_log::record_command_line`]) in one transaction.
pub async fn create_staff_from_command_line(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    role: Role,
    cost: u32,
) -> Result<bool, ApiError> {
    insert_staff(pool, email, password, role, cost, true).await
}

const INSERT_STAFF_SQL: &str = "INSERT INTO staff_accounts (email, password_hash, role)
     VALUES ($1, $2, $3) ON CONFLICT (email) DO NOTHING
     RETURNING id, email, role, disabled, created_at, updated_at";

/// [`create_staff`], with the command line's audit row when `audited`.
async fn insert_staff(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    role: Role,
    cost: u32,
    audited: bool,
) -> Result<bool, ApiError> {
    let (email, hash) = new_account(email, password, cost).await?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let Some(account) = db::opt::<Account>(&tx, INSERT_STAFF_SQL, &[&email, &hash, &role]).await?
    else {
        return Ok(false);
    };
    if audited {
        let entry = Entry::new("staff.create", Some(account.id)).after(&account);
        audit_log::record_command_line(&tx, entry).await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// A new account's normalized email and the bcrypt hash of its password, both checked (422
/// naming the field: an invalid email, a weak or over-long password, [`check_new_password`]).
pub async fn new_account(
    email: &str,
    password: &str,
    cost: u32,
) -> Result<(String, String), ApiError> {
    let email = email.trim().to_lowercase();
    let mut errors = std::collections::BTreeMap::new();
    if !valid_email(&email) {
        errors.insert(
            "email".to_string(),
            "must be a valid email address".to_string(),
        );
    }
    if let Err(why) = check_new_password(password, &email) {
        errors.insert("password".to_string(), why);
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let hash = hash_password(password.to_string(), cost).await?;
    Ok((email, hash))
}

/// A staff account as login needs it.
#[derive(Debug, Clone)]
pub struct LoginAccount {
    pub id: i64,
    pub password_hash: String,
    /// Goes into the token (`ver`), read in the same row as the hash it was checked against:
    /// a password changed after this read ends the token being issued too.
    pub token_version: i32,
}

impl db::FromRow for LoginAccount {
    const COLUMNS: &'static str = "id, password_hash, token_version";

    fn from_row(r: &tokio_postgres::Row) -> Result<LoginAccount, tokio_postgres::Error> {
        Ok(LoginAccount {
            id: r.try_get("id")?,
            password_hash: r.try_get("password_hash")?,
            token_version: r.try_get("token_version")?,
        })
    }
}

const LOGIN_ACCOUNT_SQL: &str = "SELECT id, password_hash, token_version FROM staff_accounts
     WHERE email = $1 AND NOT disabled";

/// The enabled staff account with this (normalized) email, if any, as login needs it (a
/// disabled account is answered like an unknown email).
pub async fn find_login(
    client: &deadpool_postgres::Object,
    email: &str,
) -> Result<Option<LoginAccount>, ApiError> {
    db::opt(client, LOGIN_ACCOUNT_SQL, &[&email]).await
}

const ACCOUNT_SQL: &str = "SELECT id, password_hash FROM staff_accounts WHERE email = $1";

/// The id and password hash of the staff account with this (normalized) email, if any,
/// disabled or not.
pub async fn find_account(
    client: &deadpool_postgres::Object,
    email: &str,
) -> Result<Option<(i64, String)>, ApiError> {
    Ok(db::row_opt(client, ACCOUNT_SQL, &[&email])
        .await?
        .map(|r| (r.get("id"), r.get("password_hash"))))
}

const PASSWORD_HASH_SQL: &str = "SELECT password_hash FROM staff_accounts WHERE id = $1";

/// The password hash of staff account `id`, if it exists.
pub async fn password_hash(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<Option<String>, ApiError> {
    Ok(db::row_opt(client, PASSWORD_HASH_SQL, &[&id])
        .await?
        .map(|r| r.get("password_hash")))
}

const SET_PASSWORD_BY_ID_SQL: &str = "UPDATE staff_accounts
     SET password_hash = $2, token_version = token_version + 1, updated_at = statement_timestamp()
     WHERE id = $1 RETURNING token_version";

/// Sets the password hash of staff account `id` and ends its sessions, in `tx`; returns the
/// new token version (for the token that replaces the caller's).
pub async fn change_password(
    tx: &deadpool_postgres::Transaction<'_>,
    id: i64,
    hash: &str,
) -> Result<i32, ApiError> {
    let row = db::row_opt(tx, SET_PASSWORD_BY_ID_SQL, &[&id, &hash])
        .await?
        .ok_or(ApiError::NotFound("staff account"))?;
    Ok(row.try_get("token_version")?)
}

const END_SESSIONS_SQL: &str = "UPDATE staff_accounts SET token_version = token_version + 1
     WHERE id = $1";

/// Ends every session of staff account `id` at once: bumps its `token_version`, so every token
/// issued before is refused from the next request on ([`crate::staff::session`]); a new login gets a
/// token of the new version. Call it in the transaction of the change that must end them (a
/// password change, [`set_password`]; a role change or a disabling). Returns whether the
/// account exists.
pub async fn end_sessions(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<bool, ApiError> {
    Ok(db::execute(client, END_SESSIONS_SQL, &[&id]).await? == 1)
}

const SET_PASSWORD_SQL: &str = "UPDATE staff_accounts SET password_hash = $2 WHERE email = $1
     RETURNING id";

/// Sets the password of the staff account with this email (8..72 bytes, like
/// [`create_staff`]) and ends its sessions ([`end_sessions`]), in one transaction with its
/// `staff.change_password` row in the audit log: `subgate staff set-password`, so the row is
/// the command line's ([`audit_log::record_command_line`]). Returns whether the account exists.
pub async fn set_password(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    cost: u32,
) -> Result<bool, ApiError> {
    let email = email.trim().to_lowercase();
    check_new_password(password, &email).map_err(|why| ApiError::field("password", why))?;
    let hash = hash_password(password.to_string(), cost).await?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let Some(row) = db::row_opt(&tx, SET_PASSWORD_SQL, &[&email, &hash]).await? else {
        return Ok(false);
    };
    let id: i64 = row.try_get("id")?;
    end_sessions(&tx, id).await?;
    // No password, old or new, in the record: only that it changed.
    audit_log::record_command_line(&tx, Entry::new("staff.change_password", Some(id))).await?;
    tx.commit().await?;
    Ok(true)
}

/// Passwords everyone tries first (of the length this service accepts), lower-case.
const COMMON_PASSWORDS: &[&str] = &[
    "password",
    "password1",
    "password12",
    "password123",
    "passw0rd",
    "12345678",
    "123456789",
    "1234567890",
    "87654321",
    "11111111",
    "00000000",
    "qwertyui",
    "qwertyuiop",
    "qwerty123",
    "1q2w3e4r",
    "1qaz2wsx",
    "asdfghjk",
    "zxcvbnm1",
    "abc12345",
    "abcd1234",
    "iloveyou",
    "sunshine",
    "princess",
    "football",
    "baseball",
    "welcome1",
    "admin123",
    "letmein1",
    "trustno1",
    "superman",
    "changeme",
    "subgate1",
    "administrator",
];

/// Checks a new password: 8..72 bytes (bcrypt truncates past 72), at least 5 distinct
/// characters, not one of the passwords everyone tries first, and still 8 characters long
/// without the account's email and its part before the `@` (`admin2024!` is refused for
/// `admin@…`, `a long admin passphrase` is not). The error says which rule failed, for a 422
/// on `password`.
pub fn check_new_password(password: &str, email: &str) -> Result<(), String> {
    if password.len() < 8 || password.len() > 72 {
        return Err("must be 8..72 bytes".into());
    }
    let lower = password.to_lowercase();
    let distinct: std::collections::HashSet<char> = lower.chars().collect();
    if distinct.len() < 5 {
        return Err("is too weak: use at least 5 different characters".into());
    }
    if COMMON_PASSWORDS.contains(&lower.as_str()) {
        return Err("is too weak: it is one of the most common passwords".into());
    }
    let local = email.split('@').next().unwrap_or("");
    let mut rest = lower.clone();
    for part in [email, local] {
        if part.len() >= 3 {
            rest = rest.replace(part, "");
        }
    }
    if rest.chars().count() < 8 {
        return Err("is too weak: it is mostly the account's email".into());
    }
    Ok(())
}

/// Checks a login's password against `hash` on the blocking pool, holding `permit` meanwhile,
/// and judges the counted `attempt` there (so a dropped request cannot un-count a guess that
/// was checked). `known`: the hash is the account's, not the dummy one. True: let them in.
pub async fn verify_login(
    permit: OwnedSemaphorePermit,
    attempt: Attempt,
    password: String,
    hash: String,
    known: bool,
) -> Result<bool, ApiError> {
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let ok = bcrypt::verify(password, &hash).unwrap_or(false) && known;
        if ok {
            attempt.succeed();
        } else {
            attempt.fail();
        }
        ok
    })
    .await
    .map_err(ApiError::internal)
}

/// Whether `password` is the password of an existing account's `hash` (start-up's check of
/// `ADMIN_PASSWORD`); bcrypt runs on the blocking pool.
pub async fn password_matches(password: String, hash: String) -> bool {
    tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
        .await
        .unwrap_or(false)
}

/// How many (email, client address) pairs the throttle remembers. Past it the oldest pair is
/// forgotten. A pair is only added by a login that reached bcrypt, so filling the table takes
/// this many password checks; at most about 40 MB even with 254-byte emails.
pub const LOGIN_THROTTLE_CAPACITY: usize = 100_000;

/// Longest email a login accepts, in bytes (the limit of a valid address, RFC 5321).
pub const MAX_EMAIL_BYTES: usize = 254;

/// How long a login waits for a free password-hashing permit before it is refused with 503.
pub const HASH_PERMIT_WAIT: Duration = Duration::from_secs(1);

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

    #[test]
    fn weak_and_overlong_passwords_are_refused() {
        let email = "admin@example.com";
        for weak in [
            "short",
            "aaaaaaaaaaaa",
            "abababab1212",
            "Password123",
            "QWERTYUIOP",
            "admin2024!",
            "admin@example.com",
            "admin@example.com!!",
            &"x1y2z3w4v5".repeat(8),
        ] {
            assert!(check_new_password(weak, email).is_err(), "{weak:?}");
        }
        for fine in [
            "a long admin passphrase",
            "correct horse battery staple",
            "Tr0ub4dor&3x",
            "ünïcödé pässwörd",
        ] {
            assert_eq!(check_new_password(fine, email), Ok(()), "{fine:?}");
        }
    }

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
