//! A small Telegram Bot API client: `POST {TELEGRAM_API_URL}/bot{token}/{method}` with a JSON
//! body, answers decoded from Telegram's `{"ok", "result" | "error_code", "description",
//! "parameters"}` envelope.
//!
//! The bot token is part of every request URL, so it is handled as a secret end to end: the
//! client never logs a URL, redirects are not followed (a redirect would be logged with its
//! URL by reqwest), transport errors are stripped of their URL (`reqwest::Error::without_url`)
//! and every message that leaves this module passes through [`BotApi::redact`] as a last line of
//! defence. Callers may therefore log a [`BotError`] or store it (`effects.last_error`) freely.
//!
//! Every call goes through the bot's [`Pacer`], shared by all clients of one bot in the process:
//! at most [`GLOBAL_RATE`] calls per second, urgent calls (access changes, [`Urgency`]) before
//! waiting normal ones, at most one message per second to one chat, and a
//! chat (or, for calls that name none, the whole bot) that Telegram answered 429 is left alone
//! for `retry_after`. A wait longer than [`MAX_WAIT`] is not slept (the caller's lane would idle
//! and its lease run on meanwhile): the call fails at once with [`BotError::Paused`], to be
//! rescheduled.
//! In dry-run mode (`TELEGRAM_DRY_RUN=true`) calls are logged and answered with a stand-in
//! result instead of being made.
//!
//! Failures are told apart by what they mean for a retry: Telegram's own refusal (with its
//! `error_code`, `description` and `retry_after`), a timeout (the call may or may not have
//! happened), a transport failure, or an answer that is not the Bot API's envelope.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::config::{Config, Secret};

/// How long one Bot API call may take before it counts as a timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bot API calls per second, per bot, at most. Telegram allows "about 30 messages per second"
/// to different users (the Bot API FAQ, "Broadcasting to users"); 28 leaves a margin for the
/// few calls other processes of the same bot make.
pub const GLOBAL_RATE: u32 = 28;
/// Messages per chat: at most one per this interval (Telegram's limit for private chats).
pub const MESSAGE_INTERVAL: Duration = Duration::from_secs(1);
/// The longest pacing wait a call sleeps through; a longer one fails with [`BotError::Paused`].
pub const MAX_WAIT: Duration = Duration::from_secs(2);

/// How urgent a call is to the [`Pacer`]: an urgent call (an access change: a grant's message,
/// a revoke, a join answer, an unban) takes the next free slot before every waiting normal call
/// (invoices, receipts, reminders, bot messages), so a queue of those never holds it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Urgency {
    #[default]
    Normal,
    Urgent,
}

/// The pace of one bot: the next free slot for any call (one every `1 / GLOBAL_RATE` s) and, per
/// chat, the next moment a message to that chat may be sent. Shared by every [`BotApi`] of the
/// bot in this process. A slot is taken by a caller that is ready for it; callers waiting for one
/// sleep until it and try again, and a normal caller gives way while an urgent one waits for
/// the next slot (not while it waits for its chat's).
#[derive(Debug, Default)]
pub struct Pacer {
    state: Mutex<PacerState>,
}

#[derive(Debug, Default)]
struct PacerState {
    next_call: Option<Instant>,
    next_for_chat: HashMap<i64, Instant>,
    /// Callers sleeping until a slot, by urgency.
    waiting: usize,
    urgent_waiting: usize,
}

/// Counts a caller among the waiting while it waits (also when its future is dropped), and
/// among the urgent ones while it is urgent and waits for the global slot only.
struct Waiting<'a> {
    pacer: &'a Pacer,
    urgent: bool,
}

impl<'a> Waiting<'a> {
    fn new(pacer: &'a Pacer, s: &mut PacerState) -> Waiting<'a> {
        s.waiting += 1;
        Waiting {
            pacer,
            urgent: false,
        }
    }

    fn set_urgent(&mut self, s: &mut PacerState, urgent: bool) {
        match (self.urgent, urgent) {
            (false, true) => s.urgent_waiting += 1,
            (true, false) => s.urgent_waiting -= 1,
            _ => {}
        }
        self.urgent = urgent;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut s = self.pacer.lock();
        s.waiting -= 1;
        if self.urgent {
            s.urgent_waiting -= 1;
        }
    }
}

impl Pacer {
    /// The pacer of the bot `key` (base URL and bot id), created on first use.
    pub fn for_bot(key: &str) -> Arc<Pacer> {
        static PACERS: OnceLock<Mutex<HashMap<String, Arc<Pacer>>>> = OnceLock::new();
        let mut all = PACERS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        all.entry(key.to_string()).or_default().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PacerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot for one call (for `chat`, when it concerns one, keeping `spacing`
    /// between calls for that chat) and takes it. When the wait is expected to be longer than
    /// [`MAX_WAIT`] (the chat's next slot, or the callers already waiting), or a normal call
    /// has given way to urgent ones for that long, nothing is taken and the wait is returned
    /// instead.
    pub async fn acquire(
        &self,
        chat: Option<i64>,
        spacing: Duration,
        urgency: Urgency,
    ) -> Result<(), Duration> {
        let interval = Duration::from_secs(1) / GLOBAL_RATE;
        let urgent = urgency == Urgency::Urgent;
        let started = Instant::now();
        let mut waiting: Option<Waiting<'_>> = None;
        loop {
            let sleep_until = {
                let mut s = self.lock();
                let now = Instant::now();
                let slot = s.next_call.map_or(now, |t| t.max(now));
                let chat_slot = chat
                    .and_then(|c| s.next_for_chat.get(&c).copied())
                    .map_or(now, |t| t.max(now));
                let at = slot.max(chat_slot);
                let ahead = if urgent {
                    s.urgent_waiting - usize::from(waiting.as_ref().is_some_and(|w| w.urgent))
                } else {
                    s.waiting - usize::from(waiting.is_some())
                };
                let expected = at.max(now + interval * ahead as u32);
                if expected - now > MAX_WAIT || (!urgent && now - started > MAX_WAIT) {
                    return Err((expected - now).max(interval));
                }
                // A normal call gives way while an urgent one waits for a slot.
                let yields = !urgent && s.urgent_waiting > 0;
                if at <= now && !yields {
                    // A caller woken a little late keeps the pace of the slot it waited for.
                    let base = s
                        .next_call
                        .filter(|t| now.saturating_duration_since(*t) < interval / 4)
                        .unwrap_or(now);
                    s.next_call = Some(base + interval);
                    if let Some(c) = chat {
                        s.next_for_chat.insert(c, now + spacing);
                    }
                    if s.next_for_chat.len() > 10_000 {
                        s.next_for_chat.retain(|_, t| *t > now);
                    }
                    return Ok(());
                }
                // An urgent call waiting for its chat's slot holds nobody back meanwhile.
                let w = waiting.get_or_insert_with(|| Waiting::new(self, &mut s));
                w.set_urgent(&mut s, urgent && chat_slot <= now);
                if yields && at <= now {
                    now + interval
                } else {
                    at
                }
            };
            tokio::time::sleep_until(sleep_until).await;
        }
    }

    /// Telegram answered 429: leave `chat` (or, for `None`, every call) alone for `wait`.
    pub fn pause(&self, chat: Option<i64>, wait: Duration) {
        let mut s = self.lock();
        let until = Instant::now() + wait;
        let slot = match chat {
            Some(c) => s.next_for_chat.entry(c).or_insert(until),
            None => s.next_call.get_or_insert(until),
        };
        *slot = (*slot).max(until);
    }
}

/// A Bot API client for one bot. Cheap to clone (the HTTP pool and the pacer are shared).
#[derive(Clone)]
pub struct BotApi {
    http: reqwest::Client,
    base: String,
    /// `None` only in dry-run mode without a token.
    token: Option<Secret>,
    timeout: Duration,
    dry_run: bool,
    pacer: Arc<Pacer>,
    urgency: Urgency,
}

impl fmt::Debug for BotApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BotApi")
            .field("base", &self.base)
            .field("bot_id", &self.bot_id())
            .field("token", &"<redacted>")
            .field("dry_run", &self.dry_run)
            .finish()
    }
}

/// Why a Bot API call failed. Its `Display` never contains the bot token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BotError {
    /// Telegram answered `ok: false`.
    #[error("{method}: Telegram answered {code}: {description}")]
    Api {
        method: String,
        code: i64,
        description: String,
        /// `parameters.retry_after` of a 429: seconds to wait before calling again.
        retry_after: Option<u64>,
    },
    /// No answer in time: the call may or may not have taken effect.
    #[error("{method}: no answer within {secs} s (the call may or may not have taken effect)")]
    Timeout { method: String, secs: u64 },
    /// The request could not be sent or its answer not read.
    #[error("{method}: Bot API unreachable: {detail}")]
    Transport { method: String, detail: String },
    /// An answer that is not the Bot API's JSON envelope (a proxy's error page, …).
    #[error("{method}: unexpected answer (HTTP {status}): {detail}")]
    BadResponse {
        method: String,
        status: u16,
        detail: String,
    },
    /// Not called: the pace (or an earlier 429) asks to wait `retry_after` seconds first.
    #[error("{method}: not called, rate limit: retry after {retry_after} s")]
    Paused { method: String, retry_after: u64 },
}

impl BotError {
    /// Telegram's `description`, when Telegram answered.
    pub fn description(&self) -> Option<&str> {
        match self {
            BotError::Api { description, .. } => Some(description),
            _ => None,
        }
    }

    /// True when Telegram's description mentions `needle` (e.g. `CHARGE_ALREADY_REFUNDED`).
    pub fn mentions(&self, needle: &str) -> bool {
        self.description().is_some_and(|d| {
            d.to_ascii_uppercase()
                .contains(&needle.to_ascii_uppercase())
        })
    }

    /// The label of this failure in the Bot API call metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BotError::Api { code: 429, .. } => "rate_limited",
            BotError::Api { .. } => "refused",
            BotError::Timeout { .. } => "timeout",
            BotError::Transport { .. } => "transport",
            BotError::BadResponse { .. } => "bad_response",
            BotError::Paused { .. } => "paused",
        }
    }

    /// Seconds to wait before calling again, for a 429 or a pacing refusal.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            BotError::Api {
                code: 429,
                retry_after,
                ..
            } => Some(retry_after.unwrap_or(1)),
            BotError::Paused { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

/// The Bot API's answer envelope.
#[derive(Deserialize)]
struct Envelope {
    ok: bool,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error_code: Option<i64>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<ResponseParameters>,
}

#[derive(Deserialize)]
struct ResponseParameters {
    #[serde(default)]
    retry_after: Option<u64>,
}

/// `ChatInviteLink` (only what we use).
#[derive(Debug, Clone, Deserialize)]
pub struct ChatInviteLink {
    pub invite_link: String,
}

/// `StarTransactions`.
#[derive(Debug, Clone, Deserialize)]
pub struct StarTransactions {
    #[serde(default)]
    pub transactions: Vec<StarTransaction>,
}

/// `StarTransaction`: incoming ones have a `source`, outgoing ones (refunds, withdrawals) a
/// `receiver`. For a user's payment `id` is its `telegram_payment_charge_id`; a refund carries
/// the id of the payment it refunds.
#[derive(Debug, Clone, Deserialize)]
pub struct StarTransaction {
    pub id: String,
    pub amount: i64,
    /// Unix time.
    pub date: i64,
    #[serde(default)]
    pub source: Option<TransactionPartner>,
    #[serde(default)]
    pub receiver: Option<TransactionPartner>,
}

/// `TransactionPartner` (the `user` variant's fields; other variants leave them empty).
#[derive(Debug, Clone, Deserialize)]
pub struct TransactionPartner {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub transaction_type: Option<String>,
    #[serde(default)]
    pub user: Option<PartnerUser>,
    #[serde(default)]
    pub invoice_payload: Option<String>,
}

/// The user of a `TransactionPartnerUser`.
#[derive(Debug, Clone, Deserialize)]
pub struct PartnerUser {
    pub id: i64,
}

impl StarTransaction {
    /// The paying user and the invoice payload, when this is an incoming payment from a user
    /// for one of our invoices.
    pub fn incoming_user_payment(&self) -> Option<(i64, &str)> {
        let s = self.source.as_ref()?;
        if s.kind != "user" || self.receiver.is_some() || self.amount <= 0 {
            return None;
        }
        if s.transaction_type
            .as_deref()
            .is_some_and(|t| t != "invoice_payment")
        {
            return None;
        }
        Some((s.user.as_ref()?.id, s.invoice_payload.as_deref()?))
    }

    /// True when this is an outgoing transaction to `user_id` carrying `charge_id`: the refund
    /// of that payment. The id alone is not enough (incoming payments carry it too).
    pub fn is_refund_of(&self, charge_id: &str, user_id: i64) -> bool {
        self.id == charge_id && self.source.is_none() && self.refunded_user() == Some(user_id)
    }

    /// The user an outgoing transaction went to, when it went to a user (a refund).
    pub fn refunded_user(&self) -> Option<i64> {
        if self.source.is_some() {
            return None;
        }
        let r = self.receiver.as_ref()?;
        if r.kind != "user" {
            return None;
        }
        r.user.as_ref().map(|u| u.id)
    }
}

impl BotApi {
    /// A client for `base_url` (no trailing slash needed) and `token`; each call may take up to
    /// `timeout`. Redirects are never followed.
    pub fn new(base_url: &str, token: Secret, timeout: Duration) -> BotApi {
        BotApi::build(base_url, Some(token), timeout, false)
    }

    fn build(base_url: &str, token: Option<Secret>, timeout: Duration, dry_run: bool) -> BotApi {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            // Building fails only when the TLS backend cannot initialise, which the process
            // cannot run without; the default client has the same requirement.
            .unwrap_or_default();
        let base = base_url.trim_end_matches('/').to_string();
        let bot_id = token
            .as_ref()
            .and_then(|t| t.expose().split(':').next().map(str::to_string))
            .unwrap_or_else(|| "dry-run".into());
        BotApi {
            http,
            pacer: Pacer::for_bot(&format!("{base} {bot_id}")),
            urgency: Urgency::Normal,
            base,
            token,
            timeout,
            dry_run,
        }
    }

    /// The configured bot: `None` when `TELEGRAM_BOT_TOKEN` is unset and dry-run is off (then
    /// nothing can be sent and effects stay queued).
    pub fn from_config(config: &Config, timeout: Duration) -> Option<BotApi> {
        let token = config.telegram_bot_token.clone();
        if token.is_none() && !config.telegram_dry_run {
            return None;
        }
        Some(BotApi::build(
            &config.telegram_api_url,
            token,
            timeout,
            config.telegram_dry_run,
        ))
    }

    /// This client with its calls paced as `urgency` ([`Urgency::Urgent`]: before every
    /// waiting normal call).
    pub fn with_urgency(&self, urgency: Urgency) -> BotApi {
        BotApi {
            urgency,
            ..self.clone()
        }
    }

    /// True when calls are logged instead of made (`TELEGRAM_DRY_RUN=true`).
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// The bot's numeric id: the part of the token before `:`, public (it is the bot's user id).
    pub fn bot_id(&self) -> &str {
        self.token
            .as_ref()
            .and_then(|t| t.expose().split(':').next())
            .unwrap_or("")
    }

    /// The API base URL (without the token).
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Replaces every occurrence of the token (and of its secret half) in `text`.
    pub fn redact(&self, text: &str) -> String {
        match &self.token {
            Some(t) => redact_token(text, t.expose()),
            None => text.to_string(),
        }
    }

    /// Calls `method` with JSON `params` and decodes `result` as `T`, paced (see the module
    /// doc). In dry-run mode the call is logged and answered with a stand-in result.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: &Value,
    ) -> Result<T, BotError> {
        // Messages are spaced per recipient; chat administration only honours a chat's 429.
        let chat = params.get("chat_id").and_then(Value::as_i64);
        let spacing = if method == "sendMessage" || method == "sendInvoice" {
            MESSAGE_INTERVAL
        } else {
            Duration::ZERO
        };
        if let Err(wait) = self.pacer.acquire(chat, spacing, self.urgency).await {
            return Err(BotError::Paused {
                method: method.to_string(),
                retry_after: wait.as_secs_f64().ceil() as u64,
            });
        }
        if self.dry_run {
            tracing::info!(method, params = %params, "dry run: Bot API call logged, not made");
            return serde_json::from_value(dry_run_result(method)).map_err(|e| {
                BotError::BadResponse {
                    method: method.to_string(),
                    status: 200,
                    detail: format!("dry run: {e}"),
                }
            });
        }
        let result = self.send(method, params).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.metric_label(),
        };
        crate::common::metrics::bot_api_call(method, outcome);
        if let Err(e) = &result
            && let Some(secs) = e.retry_after()
        {
            self.pacer.pause(chat, Duration::from_secs(secs));
        }
        result
    }

    async fn send<T: DeserializeOwned>(&self, method: &str, params: &Value) -> Result<T, BotError> {
        let Some(token) = &self.token else {
            return Err(BotError::Transport {
                method: method.to_string(),
                detail: "TELEGRAM_BOT_TOKEN is not set".into(),
            });
        };
        let url = format!("{}/bot{}/{}", self.base, token.expose(), method);
        let transport = |e: reqwest::Error| {
            if e.is_timeout() {
                BotError::Timeout {
                    method: method.to_string(),
                    secs: self.timeout.as_secs().max(1),
                }
            } else {
                BotError::Transport {
                    method: method.to_string(),
                    detail: self.redact(&error_chain(e.without_url())),
                }
            }
        };
        let response = self
            .http
            .post(url)
            .json(params)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(transport)?;
        let bad = |detail: String| BotError::BadResponse {
            method: method.to_string(),
            status,
            detail: self.redact(&detail),
        };
        let envelope: Envelope = serde_json::from_slice(&bytes).map_err(|_| {
            let text = String::from_utf8_lossy(&bytes);
            bad(format!("not a Bot API answer: {}", truncate(&text, 200)))
        })?;
        if !envelope.ok {
            return Err(BotError::Api {
                method: method.to_string(),
                code: envelope.error_code.unwrap_or(i64::from(status)),
                description: self.redact(
                    envelope
                        .description
                        .as_deref()
                        .unwrap_or("(no description)"),
                ),
                retry_after: envelope.parameters.and_then(|p| p.retry_after),
            });
        }
        serde_json::from_value(envelope.result.unwrap_or(Value::Null))
            .map_err(|e| bad(format!("unexpected result: {e}")))
    }

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
    ) -> Result<crate::telegram_api::types::ChatMember, BotError> {
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

/// The stand-in result of a dry-run call: what Telegram would answer, minus real data.
fn dry_run_result(method: &str) -> Value {
    match method {
        "createChatInviteLink" => {
            json!({"invite_link": "https://t.me/+dry-run", "creates_join_request": true})
        }
        "createInvoiceLink" => json!("https://t.me/$dry-run"),
        "getStarTransactions" => json!({"transactions": []}),
        "getMe" => json!({"id": 0, "is_bot": true, "first_name": "dry run"}),
        "getChatMember" => json!({"status": "left", "user": {"id": 0, "is_bot": false}}),
        "sendMessage" | "sendInvoice" => {
            json!({"message_id": 0, "date": 0, "chat": {"id": 0, "type": "private"}})
        }
        _ => json!(true),
    }
}

/// Replaces `token` and its secret half (after `:`) in `text` with `<redacted>`.
pub fn redact_token(text: &str, token: &str) -> String {
    let mut out = text.to_string();
    if !token.is_empty() {
        out = out.replace(token, "<redacted>");
    }
    if let Some((_, secret)) = token.split_once(':')
        && secret.len() >= 8
    {
        out = out.replace(secret, "<redacted>");
    }
    out
}

/// An error and its sources, `a: b: c`.
fn error_chain(e: reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef";

    fn bot(base: &str, timeout_ms: u64) -> BotApi {
        BotApi::new(base, Secret::new(TOKEN), Duration::from_millis(timeout_ms))
    }

    fn assert_clean(text: &str) {
        assert!(!text.contains(TOKEN), "token leaked: {text}");
        assert!(
            !text.contains("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef"),
            "token secret leaked: {text}"
        );
    }

    /// Serves one canned answer to every request on a fresh port.
    async fn serve(status: u16, body: &'static str) -> String {
        use axum::{Router, http::StatusCode, routing::any};
        let app = Router::new().fallback(any(move || async move {
            (
                StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                body,
            )
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn an_urgent_call_takes_the_next_slot_before_waiting_normal_calls() {
        let pacer = Arc::new(Pacer::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let call = |name: &'static str, urgency: Urgency| {
            let (pacer, order) = (pacer.clone(), order.clone());
            tokio::spawn(async move {
                pacer
                    .acquire(None, Duration::ZERO, urgency)
                    .await
                    .expect("within MAX_WAIT");
                order.lock().unwrap().push(name);
            })
        };
        // The first normal call takes the free slot; four more wait for theirs.
        let mut calls = vec![call("normal", Urgency::Normal)];
        for _ in 0..4 {
            calls.push(call("normal", Urgency::Normal));
        }
        // Let them all start waiting, then an urgent call arrives.
        while pacer.lock().waiting < 4 {
            tokio::task::yield_now().await;
        }
        calls.push(call("urgent", Urgency::Urgent));
        for c in calls {
            c.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order.len(), 6);
        assert_eq!(order[1], "urgent", "{order:?}");
    }

    #[tokio::test]
    async fn an_urgent_call_waiting_for_its_chat_holds_no_normal_call_back() {
        let pacer = Arc::new(Pacer::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let call = |name: &'static str, chat: Option<i64>, urgency: Urgency| {
            let (pacer, order) = (pacer.clone(), order.clone());
            tokio::spawn(async move {
                pacer
                    .acquire(chat, Duration::from_millis(300), urgency)
                    .await
                    .expect("within MAX_WAIT");
                order.lock().unwrap().push(name);
            })
        };
        call("first to the chat", Some(7), Urgency::Urgent)
            .await
            .unwrap();
        // The chat's next message is 300 ms away: this urgent call waits for its chat.
        let second = call("second to the chat", Some(7), Urgency::Urgent);
        while pacer.lock().waiting < 1 {
            tokio::task::yield_now().await;
        }
        let other = call("normal", None, Urgency::Normal);
        other.await.unwrap();
        second.await.unwrap();
        assert_eq!(
            order.lock().unwrap().clone(),
            ["first to the chat", "normal", "second to the chat"]
        );
    }

    #[test]
    fn redaction_replaces_the_token_and_its_secret_half() {
        let text = format!("GET http://x/bot{TOKEN}/getMe and ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef");
        let clean = redact_token(&text, TOKEN);
        assert_clean(&clean);
        assert!(clean.contains("<redacted>"));
        assert_eq!(redact_token("nothing here", TOKEN), "nothing here");
    }

    #[test]
    fn debug_never_shows_the_token() {
        let b = bot("http://127.0.0.1:1", 100);
        let debug = format!("{b:?}");
        assert_clean(&debug);
        assert!(
            debug.contains("123456"),
            "the public bot id is shown: {debug}"
        );
        assert_eq!(b.bot_id(), "123456");
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_transport_error_without_the_token() {
        // Port 1 on loopback: nothing listens there.
        let e = bot("http://127.0.0.1:1", 2000)
            .unban_chat_member(-100, 7)
            .await
            .unwrap_err();
        assert!(matches!(e, BotError::Transport { .. }), "{e:?}");
        assert_clean(&e.to_string());
        assert_clean(&format!("{e:?}"));
    }

    #[tokio::test]
    async fn a_hanging_server_is_a_timeout_without_the_token() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Accept and never answer.
        tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                if let Ok((s, _)) = listener.accept().await {
                    held.push(s);
                }
            }
        });
        let e = bot(&format!("http://{addr}"), 300)
            .send_message(1, "hi")
            .await
            .unwrap_err();
        assert!(matches!(e, BotError::Timeout { .. }), "{e:?}");
        assert_clean(&e.to_string());
        assert_clean(&format!("{e:?}"));
    }

    #[tokio::test]
    async fn telegram_errors_are_decoded_with_retry_after() {
        let base = serve(
            429,
            r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 7","parameters":{"retry_after":7}}"#,
        )
        .await;
        let e = bot(&base, 2000).ban_chat_member(-1, 2).await.unwrap_err();
        assert_eq!(
            e,
            BotError::Api {
                method: "banChatMember".into(),
                code: 429,
                description: "Too Many Requests: retry after 7".into(),
                retry_after: Some(7),
            }
        );
        assert!(e.mentions("too many requests"));
    }

    #[tokio::test]
    async fn results_are_decoded() {
        let base = serve(
            200,
            r#"{"ok":true,"result":{"invite_link":"https://t.me/+abc","creates_join_request":true}}"#,
        )
        .await;
        let link = bot(&base, 2000)
            .create_join_request_link(-1, "subgate")
            .await
            .unwrap();
        assert_eq!(link.invite_link, "https://t.me/+abc");
    }

    #[tokio::test]
    async fn a_non_api_answer_is_a_bad_response() {
        let base = serve(502, "<html>bad gateway</html>").await;
        let e = bot(&base, 2000).unban_chat_member(-1, 2).await.unwrap_err();
        assert!(
            matches!(e, BotError::BadResponse { status: 502, .. }),
            "{e:?}"
        );
        assert_clean(&e.to_string());
    }

    #[test]
    fn star_transactions_are_classified() {
        let incoming: StarTransaction = serde_json::from_value(json!({
            "id": "ch_1", "amount": 50, "date": 1,
            "source": {"type": "user", "transaction_type": "invoice_payment",
                       "user": {"id": 7, "is_bot": false, "first_name": "A"},
                       "invoice_payload": "ord_x"}
        }))
        .unwrap();
        assert_eq!(incoming.incoming_user_payment(), Some((7, "ord_x")));
        assert!(
            !incoming.is_refund_of("ch_1", 7),
            "an id match alone is not a refund"
        );

        let refund: StarTransaction = serde_json::from_value(json!({
            "id": "ch_1", "amount": 50, "date": 2,
            "receiver": {"type": "user", "user": {"id": 7, "is_bot": false, "first_name": "A"}}
        }))
        .unwrap();
        assert!(refund.is_refund_of("ch_1", 7));
        assert!(!refund.is_refund_of("ch_1", 8), "a refund to someone else");
        assert!(!refund.is_refund_of("ch_2", 7));
        assert_eq!(refund.incoming_user_payment(), None);

        let withdrawal: StarTransaction = serde_json::from_value(json!({
            "id": "ch_1", "amount": 50, "date": 3,
            "receiver": {"type": "fragment"}
        }))
        .unwrap();
        assert!(!withdrawal.is_refund_of("ch_1", 7));
    }
}
