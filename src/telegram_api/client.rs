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
//! Every call goes through the bot's [`Pacer`] ([`super::pacer`]), shared by all clients of one
//! bot in the process. A wait longer than [`MAX_WAIT`] is not slept (the caller's lane would
//! idle and its lease run on meanwhile): the call fails at once with [`BotError::Paused`], to be
//! rescheduled. In dry-run mode (`TELEGRAM_DRY_RUN=true`) calls are logged and answered with a
//! stand-in result instead of being made.
//!
//! Failures are told apart by what they mean for a retry ([`BotError`], [`super::errors`]):
//! Telegram's own refusal (with its `error_code`, `description` and `retry_after`), a timeout
//! (the call may or may not have happened), a transport failure, or an answer that is not the
//! Bot API's envelope. The methods the service calls are [`super::methods`].

use std::{fmt, sync::Arc, time::Duration};

use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};

pub use super::{
    answers::{ChatInviteLink, PartnerUser, StarTransaction, StarTransactions, TransactionPartner},
    errors::BotError,
    methods::StarsInvoice,
    pacer::{GLOBAL_RATE, Lane, MAX_WAIT, MESSAGE_INTERVAL, PAID_RATE, Pacer, Urgency},
};
use crate::config::{Config, Secret};

/// How long one Bot API call may take before it counts as a timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

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
        let called = self
            .call_when_ready(method, params, Lane::Free, || async { true })
            .await?;
        Ok(called.expect("a call that is always ready is made"))
    }

    /// [`call`](Self::call) on `lane`, with `ready` awaited once the pacer's slot is taken and
    /// just before the request is sent: `false` makes no call (`Ok(None)`). A message that must
    /// never be sent twice writes down that it is about to be sent there, so a crash can only
    /// leave it unsent, never sent twice; the slot's wait is over by then.
    pub async fn call_when_ready<T, F, Fut>(
        &self,
        method: &str,
        params: &Value,
        lane: Lane,
        ready: F,
    ) -> Result<Option<T>, BotError>
    where
        T: DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        // Messages are spaced per recipient; chat administration only honours a chat's 429.
        let chat = params.get("chat_id").and_then(Value::as_i64);
        let spacing = if method == "sendMessage" || method == "sendInvoice" {
            MESSAGE_INTERVAL
        } else {
            Duration::ZERO
        };
        let slot = match lane {
            Lane::Free => self.pacer.acquire(chat, spacing, self.urgency).await,
            Lane::Paid => self.pacer.acquire_paid(chat, spacing).await,
        };
        if let Err(wait) = slot {
            return Err(BotError::Paused {
                method: method.to_string(),
                retry_after: wait.as_secs_f64().ceil() as u64,
            });
        }
        if !ready().await {
            return Ok(None);
        }
        if self.dry_run {
            tracing::info!(method, params = %params, "dry run: Bot API call logged, not made");
            return serde_json::from_value(dry_run_result(method))
                .map(Some)
                .map_err(|e| BotError::BadResponse {
                    method: method.to_string(),
                    status: 200,
                    detail: format!("dry run: {e}"),
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
        result.map(Some)
    }

    async fn send<T: DeserializeOwned>(&self, method: &str, params: &Value) -> Result<T, BotError> {
        let Some(token) = &self.token else {
            return Err(BotError::Transport {
                method: method.to_string(),
                detail: "TELEGRAM_BOT_TOKEN is not set".into(),
                sent: false,
            });
        };
        let url = format!("{}/bot{}/{}", self.base, token.expose(), method);
        let transport = |e: reqwest::Error| {
            // A failed connection (refused, or timed out while connecting) sent nothing.
            if e.is_connect() {
                BotError::Transport {
                    method: method.to_string(),
                    detail: self.redact(&error_chain(e.without_url())),
                    sent: false,
                }
            } else if e.is_timeout() {
                BotError::Timeout {
                    method: method.to_string(),
                    secs: self.timeout.as_secs().max(1),
                }
            } else {
                BotError::Transport {
                    method: method.to_string(),
                    detail: self.redact(&error_chain(e.without_url())),
                    sent: true,
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
}

/// The stand-in result of a dry-run call: what Telegram would answer, minus real data.
fn dry_run_result(method: &str) -> Value {
    match method {
        "createChatInviteLink" => {
            json!({"invite_link": "https://t.me/+dry-run", "creates_join_request": true})
        }
        "createInvoiceLink" => json!("https://t.me/$dry-run"),
        "getStarTransactions" => json!({"transactions": []}),
        "getChatAdministrators" => json!([]),
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
}
