//! Integration tests against a real PostgreSQL: one binary (one link), a module per area.

mod bodies;
mod browser;
mod fake_bot;
mod helpers;

mod access;
mod auth;
mod bot;
mod bot_plans;
mod bundles;
mod connections;
mod console;
mod convergence;
mod crud;
mod effect_rows;
mod effects;
mod effects_concurrency;
mod effects_config;
mod effects_convergence;
mod effects_delivery;
mod effects_refunds;
mod effects_retries;
mod hardening_payments;
mod openapi;
mod ops;

mod idempotency;
mod lifetime;
mod logs;
mod metrics;
mod orders;
mod overview;
mod payments;
mod plans;
mod promo_codes;
mod schema;
mod smoke;
mod stars_subscriptions;
mod sweep;
mod telegram;
mod tls;
mod trials;
mod user_id_change;
mod wayforpay;
