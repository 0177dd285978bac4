//! Staff passwords: the strength rule a new password must pass, bcrypt hashing, and the check
//! of a login's password (on the blocking pool, under a hashing permit, judging the throttle's
//! counted attempt).

use tokio::sync::OwnedSemaphorePermit;

use crate::{common::error::ApiError, staff::throttle::Attempt};

/// Hashes a password with bcrypt on the blocking pool. Not capped by
/// [`HashPermits`](crate::staff::permits::HashPermits): it serves start-up and the CLI, which no
/// anonymous client can reach.
pub async fn hash_password(password: String, cost: u32) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
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
#[cfg(test)]
mod tests {
    use super::*;

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
}
