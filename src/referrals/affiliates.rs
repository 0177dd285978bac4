//! Affiliates (`affiliates`): partners by name and buyers, each with a code and a link.

/// A referral link: opens the bot with the affiliate's code.
pub fn link(bot_username: &str, code: &str) -> String {
    format!("https://t.me/{bot_username}?start=r_{code}")
}
