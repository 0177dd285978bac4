//! Reward days of buyer-referrers (`referral_rewards`).
