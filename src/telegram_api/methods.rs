//! The Bot API methods the service calls, each a typed wrapper of [`BotApi::call`].

use serde_json::{Value, json};

use super::{
    answers::{ChatInviteLink, StarTransactions},
    client::BotApi,
    errors::BotError,
    types::ChatMember,
};

impl BotApi {
    /// `unbanChatMember(only_if_banned = true)`: lifts a ban and nothing else (a member who is
    /// in the chat stays in it).
    pub async fn unban_chat_member(&self, chat_id: i64, user_id: i64) -> Result<bool, BotError> {
        self.call(
            "unbanChatMember",
            &json!({"chat_id": chat_id, "user_id": user_id, "only_if_banned": true}),
        )
        .await
    }

    /// `banChatMember`: removes the user from the chat (and bans them until unbanned).
    pub async fn ban_chat_member(&self, chat_id: i64, user_id: i64) -> Result<bool, BotError> {
        self.call(
            "banChatMember",
            &json!({"chat_id": chat_id, "user_id": user_id, "revoke_messages": false}),
        )
        .await
    }

    /// `getMe`: the cheapest call, used as the probe that tells whether Telegram answers.
    pub async fn get_me(&self) -> Result<Value, BotError> {
        self.call("getMe", &json!({})).await
    }

    /// `getChatMember`: the user's status in the chat now.
    pub async fn get_chat_member(
        &self,
        chat_id: i64,
        user_id: i64,
    ) -> Result<ChatMember, BotError> {
        self.call(
            "getChatMember",
            &json!({"chat_id": chat_id, "user_id": user_id}),
        )
        .await
    }

    /// `createChatInviteLink(creates_join_request = true)`.
    pub async fn create_join_request_link(
        &self,
        chat_id: i64,
        name: &str,
    ) -> Result<ChatInviteLink, BotError> {
        self.call(
            "createChatInviteLink",
            &json!({"chat_id": chat_id, "name": name, "creates_join_request": true}),
        )
        .await
    }

    /// `sendMessage` of plain text, link previews off.
    pub async fn send_message(&self, chat_id: i64, text: &str) -> Result<Value, BotError> {
        self.call(
            "sendMessage",
            &json!({
                "chat_id": chat_id,
                "text": text,
                "link_preview_options": {"is_disabled": true},
            }),
        )
        .await
    }

    /// `sendMessage` of plain text with an inline keyboard (`reply_markup`), link previews off.
    pub async fn send_message_with_markup(
        &self,
        chat_id: i64,
        text: &str,
        reply_markup: &Value,
    ) -> Result<Value, BotError> {
        self.call(
            "sendMessage",
            &json!({
                "chat_id": chat_id,
                "text": text,
                "link_preview_options": {"is_disabled": true},
                "reply_markup": reply_markup,
            }),
        )
        .await
    }

    /// `sendInvoice` in Telegram Stars: currency `XTR`, one price, no provider token. Telegram
    /// shows its own Pay button.
    pub async fn send_stars_invoice(
        &self,
        chat_id: i64,
        invoice: &StarsInvoice<'_>,
    ) -> Result<Value, BotError> {
        self.call(
            "sendInvoice",
            &json!({
                "chat_id": chat_id,
                "title": invoice.title,
                "description": invoice.description,
                "payload": invoice.payload,
                "currency": "XTR",
                "prices": [{"label": invoice.label, "amount": invoice.amount}],
            }),
        )
        .await
    }

    /// `createInvoiceLink` for a Telegram Stars subscription: charged now and again every
    /// `period_secs` (Telegram accepts 2592000, 30 days) until cancelled.
    pub async fn create_stars_subscription_link(
        &self,
        invoice: &StarsInvoice<'_>,
        period_secs: i64,
    ) -> Result<String, BotError> {
        self.call(
            "createInvoiceLink",
            &json!({
                "title": invoice.title,
                "description": invoice.description,
                "payload": invoice.payload,
                "currency": "XTR",
                "prices": [{"label": invoice.label, "amount": invoice.amount}],
                "subscription_period": period_secs,
            }),
        )
        .await
    }

    /// `editUserStarSubscription`: cancels (`is_canceled` true) or re-enables the renewal of a
    /// user's Stars subscription, named by its first payment's charge id.
    pub async fn edit_user_star_subscription(
        &self,
        user_id: i64,
        charge_id: &str,
        is_canceled: bool,
    ) -> Result<bool, BotError> {
        self.call(
            "editUserStarSubscription",
            &json!({
                "user_id": user_id,
                "telegram_payment_charge_id": charge_id,
                "is_canceled": is_canceled,
            }),
        )
        .await
    }

    /// `setChatMenuButton` of the bot's default menu (every private chat): a `web_app` button
    /// labelled `text` opening `url`.
    pub async fn set_menu_web_app(&self, text: &str, url: &str) -> Result<bool, BotError> {
        self.call(
            "setChatMenuButton",
            &json!({
                "menu_button": {"type": "web_app", "text": text, "web_app": {"url": url}},
            }),
        )
        .await
    }

    /// `approveChatJoinRequest`.
    pub async fn approve_join_request(&self, chat_id: i64, user_id: i64) -> Result<bool, BotError> {
        self.call(
            "approveChatJoinRequest",
            &json!({"chat_id": chat_id, "user_id": user_id}),
        )
        .await
    }

    /// `declineChatJoinRequest`.
    pub async fn decline_join_request(&self, chat_id: i64, user_id: i64) -> Result<bool, BotError> {
        self.call(
            "declineChatJoinRequest",
            &json!({"chat_id": chat_id, "user_id": user_id}),
        )
        .await
    }

    /// `answerChatJoinRequestQuery`: `result` is `approve`, `decline` or `queue`.
    pub async fn answer_join_request_query(
        &self,
        query_id: &str,
        result: &str,
    ) -> Result<bool, BotError> {
        self.call(
            "answerChatJoinRequestQuery",
            &json!({"chat_join_request_query_id": query_id, "result": result}),
        )
        .await
    }

    /// The user ids of `getChatAdministrators` (the creator among them).
    pub async fn chat_administrator_ids(&self, chat_id: i64) -> Result<Vec<i64>, BotError> {
        let admins: Vec<serde_json::Value> = self
            .call("getChatAdministrators", &json!({"chat_id": chat_id}))
            .await?;
        Ok(admins
            .iter()
            .filter_map(|m| m["user"]["id"].as_i64())
            .collect())
    }

    /// `refundStarPayment`.
    pub async fn refund_star_payment(
        &self,
        user_id: i64,
        charge_id: &str,
    ) -> Result<bool, BotError> {
        self.call(
            "refundStarPayment",
            &json!({"user_id": user_id, "telegram_payment_charge_id": charge_id}),
        )
        .await
    }

    /// `getStarTransactions(offset, limit ≤ 100)`.
    pub async fn get_star_transactions(
        &self,
        offset: i64,
        limit: i64,
    ) -> Result<StarTransactions, BotError> {
        self.call(
            "getStarTransactions",
            &json!({"offset": offset, "limit": limit}),
        )
        .await
    }

    /// `createInvoiceLink` for Telegram Stars: currency `XTR`, one price, no provider token.
    pub async fn create_stars_invoice_link(
        &self,
        title: &str,
        description: &str,
        payload: &str,
        label: &str,
        amount: i64,
    ) -> Result<String, BotError> {
        self.call(
            "createInvoiceLink",
            &json!({
                "title": title,
                "description": description,
                "payload": payload,
                "currency": "XTR",
                "prices": [{"label": label, "amount": amount}],
            }),
        )
        .await
    }
}

/// A Telegram Stars invoice: `title` 1..32 and `description` 1..255 characters, `payload` (our
/// order reference) 1..128 bytes, one price of `amount` stars labelled `label`.
#[derive(Debug, Clone, Copy)]
pub struct StarsInvoice<'a> {
    pub title: &'a str,
    pub description: &'a str,
    pub payload: &'a str,
    pub label: &'a str,
    pub amount: i64,
}
