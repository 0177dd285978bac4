//! Who is in a channel and until when: the sweep's transitions (active, grace, expired) and its
//! queued revokes, what a membership change, a deletion or a chat change enqueues for Telegram,
//! lifetime access, trials and free orders, and a subscriber's Telegram account changing.

mod lifetime;
pub(crate) mod membership_changes;
mod sweep;
mod sweep_queue;
mod sweep_races;
mod sweep_runs;
mod trials;
mod user_id_change;
