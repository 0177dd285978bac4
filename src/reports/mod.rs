//! Read models for staff: the statistics of revenue and members ([`stats`]), computed in SQL
//! over the other layers' tables with a connection budget of their own.
//!
//! Below `api` and `app`; reads `catalog` and `db`, writes only its own daily roll-ups.

pub mod stats;
