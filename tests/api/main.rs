//! Integration tests against a real PostgreSQL: one binary (one link), a folder per area and a
//! file per concern; each folder's `mod.rs` says what its tests cover. `support/` holds the
//! harness ([`support::helpers::TestApp`], a database of its own per test) and the fakes of the
//! services the app calls; `cargo test --test api <folder>::` runs one area.

mod support;

mod access;
mod bot;
mod catalog;
mod console;
mod messages;
mod mini_app;
mod ops;
mod outbox;
mod payments;
mod referrals;
mod reports;
mod staff;
