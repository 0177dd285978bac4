//! The harness the tests share: [`helpers::TestApp`] gives each test its own PostgreSQL
//! database, cloned from a migrated template, and a router or a served app over it; the fakes
//! are real HTTP servers inside the test that stand for the Telegram Bot API, Stripe,
//! WayForPay, Monobank, Crypto Pay and Checkbox and record what the app asked of them; `browser`
//! drives headless Chromium for the
//! console's tests; `bodies` reads response bodies into typed structs; `race` releases n tasks
//! together; `rows` counts and reads rows by column name and moves seat holds into the past;
//! `effects` sets up the Telegram effects that the outbox worker performs (apps wired to a fake
//! Bot API, grants, sweeps, worker runs).

pub(crate) mod bodies;
pub(crate) mod browser;
pub(crate) mod effects;
pub(crate) mod fake_bot;
pub(crate) mod fake_checkbox;
pub(crate) mod fake_cryptopay;
pub(crate) mod fake_monobank;
pub(crate) mod fake_stripe;
pub(crate) mod fake_wayforpay;
pub(crate) mod helpers;
pub(crate) mod race;
pub(crate) mod rows;
