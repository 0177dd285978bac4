//! Work the database owes the outside world, written in the transaction that decided it and
//! performed later: the Telegram effects ([`effects`]), the bot's messages to buyers
//! ([`bot_messages`], effects too) and outbound events to staff endpoints ([`outbound`], with
//! their deliverer). The effects worker, which needs the domain above to perform an effect, is
//! [`crate::app::worker`].
//!
//! Below `access` and `catalog` (which enqueue effects in their own transactions); imports
//! only `staff`, `telegram_api`, `config`, `present`, `db` and `common`.

pub mod bot_messages;
pub mod effects;
pub mod outbound;
