//! The bot conversation's view of a Telegram update: a buyer's text message in a private chat,
//! or a button press. Everything else — messages from bots or on behalf of channels, messages
//! in groups and supergroups (a forum's topics and service messages such as
//! `new_chat_members` included: the bot, an administrator there, receives them all), channel
//! posts, stickers and photos, edited messages — is not a conversation and is ignored
//! ([`Action::of`] is `None`).
//!
//! Like [`crate::telegram_api::types`], only the fields used are named and unknown ones skipped.

use serde::Deserialize;

/// An update, as far as the conversation reads it.
#[derive(Debug, Clone, Deserialize)]
pub struct BotUpdate {
    pub update_id: i64,
    #[serde(default)]
    pub message: Option<BotMessage>,
    #[serde(default)]
    pub callback_query: Option<CallbackQuery>,
}

/// A message to the bot.
#[derive(Debug, Clone, Deserialize)]
pub struct BotMessage {
    pub chat: BotChat,
    /// Absent for messages sent on behalf of a channel.
    #[serde(default)]
    pub from: Option<Sender>,
    /// Set when the message was sent on behalf of a chat (a channel, a group's anonymous admin).
    #[serde(default)]
    pub sender_chat: Option<BotChat>,
    #[serde(default)]
    pub text: Option<String>,
}

/// A chat: for a private chat, its id is the user's.
#[derive(Debug, Clone, Deserialize)]
pub struct BotChat {
    pub id: i64,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// The Telegram user behind a message or a button press.
#[derive(Debug, Clone, Deserialize)]
pub struct Sender {
    pub id: i64,
    #[serde(default)]
    pub is_bot: bool,
    #[serde(default)]
    pub first_name: Option<String>,
    #[serde(default)]
    pub last_name: Option<String>,
    /// Many users have none.
    #[serde(default)]
    pub username: Option<String>,
    /// The IETF tag of the language their Telegram app uses (`uk`, `ru-RU`), when Telegram
    /// says.
    #[serde(default)]
    pub language_code: Option<String>,
}

/// A press of one of the bot's inline buttons.
#[derive(Debug, Clone, Deserialize)]
pub struct CallbackQuery {
    pub id: String,
    pub from: Sender,
    /// The button's `callback_data` (absent for game buttons).
    #[serde(default)]
    pub data: Option<String>,
}

/// What a buyer asks of the bot.
#[derive(Debug, Clone)]
pub enum Action {
    /// A text message in the private chat `chat_id` with the bot.
    Text {
        chat_id: i64,
        from: Sender,
        text: String,
    },
    /// A button press, answered with `answerCallbackQuery` on `query_id`.
    Button {
        query_id: String,
        from: Sender,
        data: Option<String>,
    },
}

impl Action {
    /// Who asked.
    pub fn from(&self) -> &Sender {
        match self {
            Action::Text { from, .. } | Action::Button { from, .. } => from,
        }
    }

    /// The conversation step an update asks for, if it is one: a human's text message in a
    /// private chat, or a human's button press.
    pub fn of(update: &BotUpdate) -> Option<Action> {
        if let Some(q) = &update.callback_query {
            if !is_person(&q.from) || q.id.is_empty() {
                return None;
            }
            return Some(Action::Button {
                query_id: q.id.clone(),
                from: q.from.clone(),
                data: q.data.clone(),
            });
        }
        let m = update.message.as_ref()?;
        let from = m.from.as_ref()?;
        if m.chat.kind.as_deref() != Some("private")
            || m.sender_chat.is_some()
            || !is_person(from)
            || m.chat.id != from.id
        {
            return None;
        }
        Some(Action::Text {
            chat_id: m.chat.id,
            from: from.clone(),
            text: m.text.clone()?,
        })
    }
}

/// A human Telegram account: not a bot, with a valid (positive) user id.
fn is_person(user: &Sender) -> bool {
    !user.is_bot && user.id > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Option<Action> {
        Action::of(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn a_private_text_and_a_button_press_are_conversation() {
        let a = parse(
            r#"{"update_id": 1, "message": {"message_id": 1, "date": 0, "text": "/start",
                "chat": {"id": 7, "type": "private"}, "from": {"id": 7, "is_bot": false,
                "first_name": "A"}}}"#,
        );
        assert!(matches!(a, Some(Action::Text { chat_id: 7, .. })));
        let b = parse(
            r#"{"update_id": 2, "callback_query": {"id": "q", "chat_instance": "c",
                "from": {"id": 7, "is_bot": false, "first_name": "A"}, "data": "b:1"}}"#,
        );
        assert!(matches!(b, Some(Action::Button { .. })));
    }

    #[test]
    fn bots_channels_groups_and_non_text_are_not() {
        for json in [
            // A bot writing.
            r#"{"update_id": 1, "message": {"message_id": 1, "date": 0, "text": "/start",
                "chat": {"id": 7, "type": "private"}, "from": {"id": 7, "is_bot": true,
                "first_name": "B"}}}"#,
            // A channel post.
            r#"{"update_id": 1, "channel_post": {"message_id": 1, "date": 0, "text": "/start",
                "chat": {"id": -100, "type": "channel"}, "sender_chat": {"id": -100,
                "type": "channel"}}}"#,
            // A group message.
            r#"{"update_id": 1, "message": {"message_id": 1, "date": 0, "text": "/start",
                "chat": {"id": -5, "type": "group"}, "from": {"id": 7, "first_name": "A"}}}"#,
            // A supergroup's message, a forum topic's, and a service message about a member.
            r#"{"update_id": 1, "message": {"message_id": 1, "date": 0, "text": "/start",
                "chat": {"id": -1005, "type": "supergroup"}, "from": {"id": 7,
                "first_name": "A"}}}"#,
            r#"{"update_id": 1, "message": {"message_id": 1, "date": 0, "text": "/start",
                "message_thread_id": 3, "is_topic_message": true, "chat": {"id": -1005,
                "type": "supergroup", "is_forum": true}, "from": {"id": 7, "first_name": "A"}}}"#,
            r#"{"update_id": 1, "message": {"message_id": 1, "date": 0, "chat": {"id": -1005,
                "type": "supergroup"}, "from": {"id": 7, "first_name": "A"},
                "new_chat_members": [{"id": 7, "is_bot": false, "first_name": "A"}]}}"#,
            // On behalf of a channel (no from).
            r#"{"update_id": 1, "message": {"message_id": 1, "date": 0, "text": "/start",
                "chat": {"id": 7, "type": "private"}, "sender_chat": {"id": -100}}}"#,
            // A sticker.
            r#"{"update_id": 1, "message": {"message_id": 1, "date": 0, "sticker": {},
                "chat": {"id": 7, "type": "private"}, "from": {"id": 7, "first_name": "A"}}}"#,
            // A bot pressing a button.
            r#"{"update_id": 2, "callback_query": {"id": "q", "from": {"id": 7,
                "is_bot": true, "first_name": "B"}, "data": "b:1"}}"#,
        ] {
            assert!(parse(json).is_none(), "{json}");
        }
    }
}
