//! Messages to members: what the owner says to buyers beyond their own access and payments —
//! **broadcasts** to a chosen segment ([`broadcasts`], [`segment`]) and four **automations**
//! ([`automations`]): a reminder of an unpaid checkout, a win-back offer after access ended, an
//! offer when a Stars subscription is cancelled, and how to renew when its renewal failed.
//!
//! Every message is one `messages` row ([`sent`]), written with a `member_message` effect of
//! the outbox in one statement, so it is sent after commit, retried, counted against the
//! bot's pace, and claimed after every access effect and every other message (the claim's
//! third tier): a broadcast never holds back a grant or a buyer's invoice. Its text is made
//! when it is sent, from the owner's pattern in the buyer's language
//! ([`crate::present::patterns`]) with the line on how to stop such messages, and it is never
//! sent to a buyer who said `/stop` or blocked the bot (`subscribers.marketing_opt_out`,
//! `reachable`).
//!
//! **Exactly once.** A message is sent at most once per row (its `dedupe_key`: a broadcast's
//! recipient, an order, a membership's end, a subscription), and its row is marked
//! `attempted_at` just before the Bot API call, once the pacer's slot is taken. The effect is
//! at least once, so a repeat of an attempt a crash interrupted finds the mark and records the
//! message `skipped` instead of calling again: a buyer may miss a message cut off mid-call by a
//! crash, never receive one twice. A call Telegram refused, or one whose connection was never
//! made, clears the mark and is retried as any effect.
//!
//! Owns the tables `automations`, `broadcasts` and `messages`; reads orders, memberships and
//! Stars subscriptions in its own statements (who is due a message, what it is about). Imports
//! the layers below: catalog (plans, a buyer's promo code), access (a blocked buyer marked
//! unreachable), outbox (outbound events), config, present (the texts), db and common.

pub mod automations;
pub mod broadcasts;
pub mod compose;
pub mod segment;
pub mod sent;

crate::text_enum! {
    /// What a message is.
    pub enum Kind {
        /// One recipient of a broadcast.
        Broadcast => "broadcast",
        /// An order still unpaid some time after its invoice or card page was sent.
        UnpaidCheckout => "unpaid_checkout",
        /// A membership that ended and was not renewed: an offer to come back.
        WinBack => "win_back",
        /// A Stars subscription the buyer cancelled: an offer to stay.
        CancelOffer => "cancel_offer",
        /// A Stars subscription whose renewal Telegram could not charge: how to renew.
        RenewalFailed => "renewal_failed",
    }
}

crate::text_enum! {
    /// What came of a message.
    pub enum Outcome {
        /// Telegram accepted it.
        Sent => "sent",
        /// Telegram answered 403: the buyer blocked the bot (they are marked unreachable).
        Blocked => "blocked",
        /// Refused for good, or failing past the retry horizon.
        Failed => "failed",
        /// Not sent: the buyer said `/stop` or is unreachable, the broadcast was cancelled, the
        /// automation no longer applies (the order was paid, the membership renewed), or an
        /// attempt a crash interrupted might have reached the buyer (never sent twice).
        Skipped => "skipped",
    }
}
