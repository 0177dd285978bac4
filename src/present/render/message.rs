//! A message to send ([`Rendered`]) and its buttons, the webhook replies that carry it, and the
//! short messages made of one text and a button or two.

use serde_json::{Value, json};

use super::{
    callback::Callback,
    text::{
        self, BUTTON_MAX, CALLBACK_ANSWER_MAX, CALLBACK_DATA_MAX, MESSAGE_MAX, TITLE_IN_LIST_MAX,
        clip, units,
    },
};
use crate::present::texts::{self, Language};

/// A message to send: its text and inline keyboard (rows of buttons).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    pub text: String,
    pub rows: Vec<Vec<Value>>,
}

impl Rendered {
    /// The `reply_markup` of the message, if it has buttons.
    pub fn reply_markup(&self) -> Option<Value> {
        (!self.rows.is_empty()).then(|| json!({ "inline_keyboard": self.rows }))
    }
}

/// A button sending `callback`.
pub fn button(text: &str, callback: Callback) -> Value {
    let data = callback.data();
    debug_assert!(data.len() <= CALLBACK_DATA_MAX);
    json!({"text": clip(text, BUTTON_MAX), "callback_data": data})
}

/// A button opening `url`.
pub fn url_button(text: &str, url: &str) -> Value {
    json!({"text": clip(text, BUTTON_MAX), "url": url})
}

/// A button opening the Mini App at `url` (inside Telegram, with the user's `initData`).
pub fn web_app_button(text: &str, url: &str) -> Value {
    json!({"text": clip(text, BUTTON_MAX), "web_app": {"url": url}})
}

/// `/language`: the choice of languages, each button in the language's own name.
pub fn language_choice(l: Language) -> Rendered {
    Rendered {
        text: texts::language_choose(l),
        rows: Language::ALL
            .iter()
            .zip(1u8..)
            .map(|(lang, n)| vec![button(lang.own_name(), Callback::Language(n))])
            .collect(),
    }
}

/// The webhook reply sending `r` to chat `chat_id`.
pub fn send_message(chat_id: i64, r: &Rendered) -> Value {
    let mut call = json!({
        "method": "sendMessage",
        "chat_id": chat_id,
        "text": clip(&r.text, MESSAGE_MAX),
        "link_preview_options": {"is_disabled": true},
    });
    if let Some(markup) = r.reply_markup() {
        call["reply_markup"] = markup;
    }
    call
}

/// The webhook reply answering button press `query_id` with `text`, as an alert (a dialog the
/// buyer closes) or a passing notification.
pub fn answer_callback(query_id: &str, text: &str, alert: bool) -> Value {
    json!({
        "method": "answerCallbackQuery",
        "callback_query_id": query_id,
        "text": clip(text, CALLBACK_ANSWER_MAX),
        "show_alert": alert,
    })
}

/// The alert of a buyer the hold rules hold back until `when` ([`texts::hold_limited`]): the
/// channel's title is shortened so that the whole text, the time to try again included, fits
/// a callback answer (a cut at the end would drop the time).
pub fn hold_limited_answer(l: Language, channel_title: &str, when: &str, cooldown: bool) -> String {
    let room =
        CALLBACK_ANSWER_MAX.saturating_sub(units(&texts::hold_limited(l, "", when, cooldown)));
    texts::hold_limited(l, &clip(channel_title, room), when, cooldown)
}

/// The notice that a buyer's access to channel `channel_id` (titled `title`) ended, why, and a
/// renew button when the channel can be bought again (`renew`).
pub fn access_ended(
    l: Language,
    ending: texts::Ending,
    title: &str,
    channel_id: i32,
    renew: Option<Callback>,
) -> Rendered {
    let name = text::title(l, title, channel_id);
    let rows = renew
        .map(|r| {
            vec![vec![button(
                &texts::renew_button(l, &clip(&name, TITLE_IN_LIST_MAX)),
                r,
            )]]
        })
        .unwrap_or_default();
    Rendered {
        text: texts::access_ended(l, ending, &name),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_limit_answer_keeps_when_to_try_again_whatever_the_title() {
        let when = "2030-01-02 03:04 UTC";
        for cooldown in [true, false] {
            for title in [
                "Short",
                &"Л".repeat(255),
                &"👨\u{200D}👩\u{200D}👧".repeat(60),
            ] {
                let text = super::hold_limited_answer(Language::En, title, when, cooldown);
                assert!(super::units(&text) <= super::CALLBACK_ANSWER_MAX, "{text}");
                assert!(text.ends_with(&format!("after {when}.")), "{text}");
                assert_eq!(super::clip(&text, super::CALLBACK_ANSWER_MAX), text);
            }
        }
        assert!(super::hold_limited_answer(Language::En, "Short", when, true).contains("«Short»"));
    }

    #[test]
    fn callback_answers_fit() {
        let a = answer_callback("q", &"x".repeat(500), true);
        assert_eq!(a["method"], "answerCallbackQuery");
        assert!(units(a["text"].as_str().unwrap()) <= CALLBACK_ANSWER_MAX);
        assert_eq!(a["show_alert"], true);
    }
}
