//! Leaves every layer shares: typed ids ([`ids`]), money ([`currency`]), the domain's shared
//! words ([`vocabulary`]), when a term ends ([`expiry`]), the one error type ([`error`]), a syntactic email check ([`email`]), the
//! metric series ([`metrics`]) and the shutdown signal ([`shutdown`]).
//!
//! The bottom of the tree: imports nothing of the crate outside this folder.

pub mod currency;
pub mod email;
pub mod error;
pub mod expiry;
pub mod ids;
pub mod metrics;
pub mod shutdown;
pub mod vocabulary;
