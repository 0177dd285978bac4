//! Staff: the accounts of the people who run the service, how they prove who they are, and what
//! they did. No HTTP here; the login handler, the `Staff` extractor and the staff routes are
//! `api`'s.
//!
//! - [`accounts`]: the `staff_accounts` table, its rows and every rule of changing them
//!   (creation, roles, disabling, deletion, passwords, ending sessions, never losing the last
//!   enabled owner), and the session a token opens;
//! - [`role`]: the ranked roles a route asks for;
//! - [`tokens`]: the JWTs a login issues;
//! - [`passwords`]: the strength rule, bcrypt, a login's password check;
//! - [`throttle`]: failed-login counts per (email, address) and per email;
//! - [`permits`]: the cap on password checks running at once;
//! - [`audit_log`]: what staff and the command line changed;
//! - [`idempotency`]: `Idempotency-Key` rows of staff writes.

pub mod accounts;
pub mod audit_log;
pub mod idempotency;
pub mod passwords;
pub mod permits;
pub mod role;
pub mod throttle;
pub mod tokens;

pub use accounts::{Account, Change, Session, change, create, delete, get, list, session};
pub use role::Role;
