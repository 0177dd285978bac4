//! The staff console in a real browser: headless Chromium, driven through chromedriver by
//! `support::browser`, walks the console's screens against the real router and fails on
//! anything a person would see as broken (`[object`, `null`, `undefined`, a console error).
//! `walk` is the day's work end to end; the other files each take one screen or flow.

mod audit;
pub(crate) mod charts;
mod disputes;
mod door;
mod integrations;
mod messages;
mod offers;
mod reconciliation;
mod referrals;
mod refunds;
mod rights;
mod screens;
pub(crate) mod walk;
