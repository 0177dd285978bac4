//! Staff and what guards their API: logins and their throttling, bearer tokens and every way
//! one is refused, staff accounts and their roles on every operation, the audit log of staff
//! writes and `Idempotency-Key` on staff POSTs.

mod accounts;
mod audit_log;
pub(crate) mod auth;
mod idempotency;
mod roles;
mod tokens;
