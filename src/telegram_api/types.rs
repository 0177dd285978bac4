//! The subset of the Telegram Bot API `Update` object this service reads.
//!
//! Telegram adds fields to its objects all the time, so nothing here denies unknown fields:
//! every struct names only what subgate uses and serde skips the rest. Update kinds this door
//! does not decide itself (commands and button presses, which go to the bot's conversation in
//! [`crate::bot`] with its own view of the update; edited messages, channel posts, …) leave all
//! the options of [`Update`] empty, or a `message` without a payment. Field names and types
//! follow <https://core.telegram.org/bots/api>.

use serde::Deserialize;

/// One incoming update. At most one of the optional fields is present in a real update.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramUpdate)]
pub struct Update {
    pub update_id: i64,
    #[serde(default)]
    pub message: Option<Message>,
    #[serde(default)]
    pub pre_checkout_query: Option<PreCheckoutQuery>,
    #[serde(default)]
    pub chat_join_request: Option<ChatJoinRequest>,
    /// The bot's own status in a chat changed (made an administrator, demoted, removed).
    /// One that does not read as a `ChatMemberUpdated` is left out (ignored, not refused), so
    /// the document promises any object here.
    #[serde(default, deserialize_with = "lenient")]
    #[schema(value_type = Option<Object>)]
    pub my_chat_member: Option<ChatMemberUpdated>,
    /// A member's status in a chat changed (joined, left, banned); sent only to an
    /// administrator bot that asked for `chat_member` in `allowed_updates`. Read leniently, like
    /// `my_chat_member`.
    #[serde(default, deserialize_with = "lenient")]
    #[schema(value_type = Option<Object>)]
    pub chat_member: Option<ChatMemberUpdated>,
    /// A buyer's Stars subscription changed in Telegram: cancelled, re-enabled, or its renewal
    /// failed (Bot API 10.2; sent only to a bot that asked for `subscription` in
    /// `allowed_updates`). Its fields are read one by one, so an odd one still reaches the
    /// door, which keeps it for review.
    #[serde(default, deserialize_with = "lenient")]
    #[schema(value_type = Option<Object>)]
    pub subscription: Option<BotSubscriptionUpdated>,
}

/// An optional object field that is dropped when it does not read as `T`: an update kind we
/// only observe is never a reason to refuse the whole update (one that is not even an object
/// is not a Telegram update: refused).
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    match Option::<serde_json::Value>::deserialize(d)? {
        None => Ok(None),
        Some(v) if v.is_object() => Ok(serde_json::from_value(v).ok()),
        Some(_) => Err(D::Error::custom(
            "an update's object field is not an object",
        )),
    }
}

/// A field read as `T` when it can be, else left out (the value is still consumed).
fn lenient_field<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    Ok(Option::<serde_json::Value>::deserialize(d)?.and_then(|v| serde_json::from_value(v).ok()))
}

/// `BotSubscriptionUpdated`: a user's payment subscription to the bot changed. Every field is
/// optional here so that an update of an unexpected shape is recorded, not dropped.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramBotSubscriptionUpdated)]
pub struct BotSubscriptionUpdated {
    /// Who subscribed.
    #[serde(default, deserialize_with = "lenient_field")]
    pub user: Option<User>,
    /// What the bot put in the subscription's invoice: our order reference.
    #[serde(default, deserialize_with = "lenient_field")]
    pub invoice_payload: Option<String>,
    /// `canceled` (the user cancelled it), `active` (the user re-enabled it) or `failed` (its
    /// renewal charge failed).
    #[serde(default, deserialize_with = "lenient_field")]
    pub state: Option<String>,
}

/// A message; subgate only cares about service messages carrying a `successful_payment`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramMessage)]
pub struct Message {
    pub message_id: i64,
    /// Unix time the message was sent: for a payment, when it was paid.
    pub date: i64,
    pub chat: Chat,
    /// The sender; absent for messages sent on behalf of channels.
    #[serde(default)]
    pub from: Option<User>,
    #[serde(default)]
    pub successful_payment: Option<SuccessfulPayment>,
}

/// A chat; its id is the channel's `telegram_chat_id` (or the user id for a private chat). What
/// subgate sells is a `channel` or a `supergroup` (a forum or not) and is handled alike, so the
/// type is only read to tell a private chat from the others.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramChat)]
pub struct Chat {
    pub id: i64,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// A Telegram user (or bot).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramUser)]
pub struct User {
    pub id: i64,
    #[serde(default)]
    pub username: Option<String>,
    /// The IETF tag of the language the user's Telegram app uses, when Telegram says.
    #[serde(default)]
    pub language_code: Option<String>,
}

/// A completed payment, as sent to the bot in a service message.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramSuccessfulPayment)]
pub struct SuccessfulPayment {
    /// ISO 4217 code, or `XTR` for Telegram Stars.
    pub currency: String,
    /// In the currency's smallest unit (one star for `XTR`).
    pub total_amount: i64,
    /// What the bot put in the invoice: our order reference.
    pub invoice_payload: String,
    /// Telegram's id of the charge; the key a refund (`refundStarPayment`) needs.
    pub telegram_payment_charge_id: String,
    /// The provider's id; empty for Stars.
    #[serde(default)]
    pub provider_payment_charge_id: Option<String>,
    /// True for every charge of a Stars subscription.
    #[serde(default)]
    pub is_recurring: bool,
    /// True for a subscription's first charge.
    #[serde(default)]
    pub is_first_recurring: bool,
    /// Unix time the subscription renews next (a subscription's charges only).
    #[serde(default)]
    pub subscription_expiration_date: Option<i64>,
}

/// Telegram asks whether it may charge the buyer; it must be answered within 10 seconds.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramPreCheckoutQuery)]
pub struct PreCheckoutQuery {
    pub id: String,
    pub from: User,
    pub currency: String,
    pub total_amount: i64,
    pub invoice_payload: String,
}

/// A user asks to join a chat through an invite link that needs approval.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramChatJoinRequest)]
pub struct ChatJoinRequest {
    pub chat: Chat,
    pub from: User,
    /// Unix time of the request.
    #[serde(default)]
    pub date: Option<i64>,
    /// Present when the chat assigned this bot to process its join requests (Bot API 10.1):
    /// the query to answer within 10 s, with `answerChatJoinRequestQuery` or
    /// `sendChatJoinRequestWebApp`.
    #[serde(default)]
    pub query_id: Option<String>,
}

/// `ChatMemberUpdated`: a chat member's status before and after a change.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramChatMemberUpdated)]
pub struct ChatMemberUpdated {
    pub chat: Chat,
    /// Who made the change.
    pub from: User,
    /// Unix time of the change.
    pub date: i64,
    pub old_chat_member: ChatMember,
    pub new_chat_member: ChatMember,
    /// The link the user joined by, when they did.
    #[serde(default)]
    pub invite_link: Option<ChatInviteLink>,
}

/// `ChatMember` (any of its six kinds, told apart by `status`), as an update carries it and
/// `getChatMember` answers it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramChatMember)]
pub struct ChatMember {
    /// `creator`, `administrator`, `member`, `restricted`, `left` or `kicked`.
    pub status: String,
    pub user: User,
    /// `restricted` only: whether the user is in the chat.
    #[serde(default)]
    pub is_member: Option<bool>,
    /// `administrator` only.
    #[serde(default)]
    pub can_invite_users: Option<bool>,
    /// `administrator` only.
    #[serde(default)]
    pub can_restrict_members: Option<bool>,
}

impl ChatMember {
    /// In the chat now: creator, administrator, member, or restricted but still a member.
    pub fn in_chat(&self) -> bool {
        match self.status.as_str() {
            "creator" | "administrator" | "member" => true,
            "restricted" => self.is_member.unwrap_or(false),
            _ => false,
        }
    }

    /// An owner or administrator of the chat (never removed by subgate).
    pub fn is_admin(&self) -> bool {
        matches!(self.status.as_str(), "creator" | "administrator")
    }

    /// Banned from the chat (`kicked`).
    pub fn is_banned(&self) -> bool {
        self.status == "kicked"
    }

    /// What the bot needs to do its work in a channel or a supergroup: to be its creator, or an
    /// administrator who may invite users (the join link, approvals) and ban them (revokes). A
    /// bot added to a group as a plain `member` (or `restricted`) has neither.
    pub fn can_manage_members(&self) -> bool {
        match self.status.as_str() {
            "creator" => true,
            "administrator" => {
                self.can_invite_users.unwrap_or(false) && self.can_restrict_members.unwrap_or(false)
            }
            _ => false,
        }
    }
}

/// `ChatInviteLink`, as an update carries it (only what we read).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[schema(as = TelegramChatInviteLink)]
pub struct ChatInviteLink {
    pub invite_link: String,
    #[serde(default)]
    pub is_revoked: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_updates_are_read_leniently_but_must_be_objects() {
        let u: Update =
            serde_json::from_str(r#"{"update_id": 1, "my_chat_member": {"chat": {"id": -1}}}"#)
                .unwrap();
        assert!(
            u.my_chat_member.is_none(),
            "an unreadable object is ignored"
        );
        assert!(serde_json::from_str::<Update>(r#"{"update_id": 1, "chat_member": 5}"#).is_err());
        assert!(
            serde_json::from_str::<Update>(r#"{"update_id": 1, "chat_member": null}"#)
                .unwrap()
                .chat_member
                .is_none()
        );
    }

    #[test]
    fn parses_a_successful_payment_and_ignores_unknown_fields() {
        let u: Update = serde_json::from_str(
            r#"{"update_id": 10, "message": {"message_id": 5, "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "A"},
                "from": {"id": 42, "is_bot": false, "first_name": "A"},
                "successful_payment": {"currency": "XTR", "total_amount": 250,
                    "invoice_payload": "ord_x", "telegram_payment_charge_id": "stxABC",
                    "provider_payment_charge_id": "", "is_recurring": false}},
                "some_future_field": {"x": 1}}"#,
        )
        .unwrap();
        let m = u.message.unwrap();
        let p = m.successful_payment.unwrap();
        assert_eq!((m.date, m.from.unwrap().id), (1_700_000_000, 42));
        assert_eq!((p.currency.as_str(), p.total_amount), ("XTR", 250));
        assert_eq!(p.telegram_payment_charge_id, "stxABC");
        assert!(u.pre_checkout_query.is_none() && u.chat_join_request.is_none());
    }

    #[test]
    fn parses_pre_checkout_and_join_request() {
        let u: Update = serde_json::from_str(
            r#"{"update_id": 11, "pre_checkout_query": {"id": "q1",
                "from": {"id": 7, "is_bot": false, "first_name": "B", "language_code": "en"},
                "currency": "XTR", "total_amount": 100, "invoice_payload": "ref"}}"#,
        )
        .unwrap();
        let q = u.pre_checkout_query.unwrap();
        assert_eq!((q.id.as_str(), q.from.id, q.total_amount), ("q1", 7, 100));

        let u: Update = serde_json::from_str(
            r#"{"update_id": 12, "chat_join_request": {"chat": {"id": -1001, "type": "channel",
                "title": "T"}, "from": {"id": 7, "is_bot": false, "first_name": "B"},
                "user_chat_id": 7, "date": 1700000000}}"#,
        )
        .unwrap();
        let j = u.chat_join_request.unwrap();
        assert_eq!((j.chat.id, j.from.id), (-1001, 7));
    }

    #[test]
    fn a_restricted_member_of_a_forum_is_in_it_while_is_member_says_so() {
        let u: Update = serde_json::from_str(
            r#"{"update_id": 16, "chat_member": {"chat": {"id": -1002, "type": "supergroup",
                "title": "F", "is_forum": true}, "from": {"id": 1, "is_bot": false,
                "first_name": "O"}, "date": 1700000000,
                "old_chat_member": {"status": "restricted", "is_member": false,
                    "user": {"id": 7, "is_bot": false, "first_name": "B"}, "until_date": 0},
                "new_chat_member": {"status": "restricted", "is_member": true,
                    "user": {"id": 7, "is_bot": false, "first_name": "B"}, "until_date": 0}}}"#,
        )
        .unwrap();
        let c = u.chat_member.expect("a supergroup's update is read");
        assert_eq!(c.chat.kind.as_deref(), Some("supergroup"));
        assert!(!c.old_chat_member.in_chat() && c.new_chat_member.in_chat());
        assert!(!c.new_chat_member.is_admin() && !c.new_chat_member.can_manage_members());
    }

    #[test]
    fn a_subscription_update_is_read_field_by_field() {
        let u: Update = serde_json::from_str(
            r#"{"update_id": 14, "subscription": {"user": {"id": 7, "is_bot": false,
                "first_name": "A"}, "invoice_payload": "ord_x", "state": "canceled"}}"#,
        )
        .unwrap();
        let s = u.subscription.unwrap();
        assert_eq!(s.user.map(|u| u.id), Some(7));
        assert_eq!(
            (s.invoice_payload.as_deref(), s.state.as_deref()),
            (Some("ord_x"), Some("canceled"))
        );
        let odd: Update = serde_json::from_str(
            r#"{"update_id": 15, "subscription": {"user": "x", "invoice_payload": 5,
                "state": "paused"}}"#,
        )
        .unwrap();
        let s = odd
            .subscription
            .expect("an odd subscription object is still read");
        assert!(s.user.is_none() && s.invoice_payload.is_none());
        assert_eq!(s.state.as_deref(), Some("paused"));
    }

    #[test]
    fn an_unknown_update_kind_parses_to_nothing() {
        let u: Update = serde_json::from_str(
            r#"{"update_id": 13, "callback_query": {"id": "c", "from": {"id": 1}}}"#,
        )
        .unwrap();
        assert!(u.message.is_none() && u.pre_checkout_query.is_none());
        assert!(u.chat_join_request.is_none());
    }
}
