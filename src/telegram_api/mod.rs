//! The Telegram Bot API as a client: the calls, their pacing and errors ([`client`]) and the
//! subset of Telegram's objects the service reads ([`types`]).
//!
//! A leaf over `config` and `common`: it knows Telegram's wire, never the domain.

pub mod client;
pub mod types;
