//! Work the database owes the outside world, written in the transaction that decided it and
//! performed later: the Telegram effects ([`effects`]) and the worker that performs them
//! ([`worker`]), the bot's messages to buyers ([`bot_messages`]), audits of a chat's member
//! list ([`audits`]) and outbound events to staff endpoints ([`outbound`]).
//!
//! Below `access` (which enqueues effects); imports `catalog`, `staff`, `present`,
//! `telegram_api`, `config`, `db` and `common`.

pub mod bot_messages;
pub mod effects;
pub mod outbound;
