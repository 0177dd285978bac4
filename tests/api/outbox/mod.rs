//! What leaves the service through the outbox, and Telegram following the database: the
//! worker's Telegram effects (`effects_*`: delivery, retries, refunds, concurrency,
//! configuration, waking, convergence after faults) and the rows that enqueue them, the
//! `subgate` binary converging through outages and kills, the bot's rights and members reported
//! by `chat_member` updates, audits of a channel's member list, and outbound webhooks to staff
//! endpoints.

pub(crate) mod audits;
pub(crate) mod chat_members;
mod convergence;
pub(crate) mod convergence_harness;
mod effect_rows;
mod effects_concurrency;
mod effects_config;
mod effects_convergence;
mod effects_delivery;
mod effects_refunds;
mod effects_retries;
mod effects_wake;
pub(crate) mod outbound;
mod outbound_delivery;
