//! Integration tests against a real PostgreSQL: one binary (one link), a module per area.

mod helpers;

mod smoke;
