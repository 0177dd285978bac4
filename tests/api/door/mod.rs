//! The door: join requests that carry a query (the chat made this bot the processor of its
//! join requests) — answered in the webhook's reply, the requests waiting at a Mini App door,
//! and their one decision — against the fake Bot API, which keeps the chat's member list and
//! every answer each query got; and the door of the real binary across a `kill -9`.

mod crash;
pub(crate) mod queries;
