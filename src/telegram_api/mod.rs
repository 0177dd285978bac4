//! The Telegram Bot API as a client: the calls ([`client`], [`methods`]), their pacing
//! ([`pacer`]) and errors ([`errors`]), the objects the calls answer with ([`answers`]) and the
//! subset of Telegram's update objects the service reads ([`types`]). Everything a caller uses
//! is reached through [`client`] and [`types`].
//!
//! A leaf over `config` and `common`: it knows Telegram's wire, never the domain.

mod answers;
pub mod client;
mod errors;
mod methods;
mod pacer;
pub mod types;
