//! What a buyer reads: every text ([`texts`]) and the pure rendering that fills them in within
//! Telegram's limits ([`render`]: prices, periods, titles, catalogue pages, buttons). Pure code
//! over values, below everything that talks to buyers — the bot's conversation (`crate::bot`),
//! the payment core's notice to a buyer whose payment could not be used, the pre-checkout's
//! refusals and the effects worker's messages — so each of them can use it without depending
//! on the others.

pub mod locale;
pub mod patterns;
pub mod render;
pub mod texts;
pub mod translations;
