//! Staff authentication under one name, without HTTP: passwords ([`super::passwords`]), JWTs
//! ([`super::tokens`]), the login throttle ([`super::throttle`]) and hashing permits
//! ([`super::permits`]), and the account reads and writes authentication needs
//! ([`super::accounts`]: lookups, creation from start-up and the command line, password changes,
//! ending sessions). The login handler and the `Staff` extractor that use them are `api::auth`.
//!
//! Login answers the same 401, in about the same time, for an unknown email and a wrong
//! password: an unknown email is still checked against a dummy bcrypt hash of the configured
//! cost. Login is reachable without credentials, so its cost is bounded: an attempt is counted
//! before its password is checked, at most one bcrypt check per core runs at a time, and an
//! overlong email is refused before any of that. docs/auth.md has the rules.

pub use super::{
    accounts::{
        LoginAccount, change_password, create_staff, create_staff_from_command_line, end_sessions,
        find_account, find_login, new_account, password_hash, set_password,
    },
    passwords::{check_new_password, hash_password, password_matches, verify_login},
    permits::{HASH_PERMIT_WAIT, HashPermits},
    throttle::{
        ACCOUNT_THROTTLE_CAPACITY, Attempt, KNOWN_ADDRESS_CAPACITY, KNOWN_ADDRESS_FOR,
        LOGIN_THROTTLE_CAPACITY, LoginThrottle, MAX_EMAIL_BYTES, PairKey, throttle_address,
    },
    tokens::{TokenSubject, issue_token, verify_token},
};
