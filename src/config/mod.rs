//! Typed configuration, read from the environment once at start-up.
//!
//! Every variable the service reads is listed here, and only here:
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `DATABASE_URL` | PostgreSQL connection URL (required); its `sslmode` is `disable`, `prefer`, `require`, `verify-ca` or `verify-full` ([`db::tls`](crate::db::tls)); several hosts with `target_session_attrs=read-write` reach whichever is the primary (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`, [`db::pool_with_ca_cert`](crate::db::pool_with_ca_cert)); `connect_timeout` bounds each host's connect, `tcp_user_timeout` a connection to a server that vanished | — (`sslmode`: `prefer`, `connect_timeout`: 5 s per host, `tcp_user_timeout`: 15 s, `target_session_attrs`: `any`) |
//! | `DATABASE_CA_CERT` | PEM file of the roots the PostgreSQL server's certificate must chain to; with it, `prefer` and `require` check the chain too | unset: system roots for `verify-*`, no check for `prefer`/`require` |
//! | `BIND_ADDR` | address the HTTP server listens on | `127.0.0.1:8080` |
//! | `METRICS_ADDR` | address of a second listener serving Prometheus `GET /metrics` (not `BIND_ADDR`) | unset: no metrics |
//! | `LOG_FORMAT` | `pretty` or `json` | `pretty` |
//! | `JWT_SECRET` | HS256 key for staff tokens, at least 32 bytes (required) | — |
//! | `JWT_TTL_SECS` | staff token lifetime, 60..=86400 | `3600` |
//! | `TRUST_PROXY` | `true`: the login throttle keys on the right-most `X-Forwarded-For` address | `false` |
//! | `PUBLIC_URL` | the service's public base URL (`https://…`), for gateway callbacks such as WayForPay's `serviceUrl` | unset: the bot sells no card channel |
//! | `WEBHOOK_SECRET` | Standard Webhooks key `whsec_<base64>` (at least 24 bytes) for door 1 | unset: door answers 503 |
//! | `WEBHOOK_SECRETS` | several such keys (rotation), separated by spaces or commas | unset |
//! | `WAYFORPAY_MERCHANT_ACCOUNT` | our WayForPay merchant account | unset: door answers 503 |
//! | `WAYFORPAY_SECRET_KEY` | WayForPay merchant secret key, at least 16 bytes (set both or neither) | unset: door answers 503 |
//! | `WAYFORPAY_DOMAIN` | merchant domain name signed into the bot's WayForPay purchase links | the host of `PUBLIC_URL` |
//! | `WAYFORPAY_API_URL` | WayForPay's API endpoint, asked `CHECK_STATUS` about card orders whose callback has not come | `https://api.wayforpay.com/api` |
//! | `STRIPE_SECRET_KEY` | Stripe secret API key (`sk_…` or a restricted `rk_…`), for the bot's Checkout Sessions (set both Stripe secrets or neither) | unset: door 4 answers 503, the bot sells no card plan through Stripe |
//! | `STRIPE_WEBHOOK_SECRET` | the signing secret (`whsec_…`) of the Stripe webhook endpoint pointing at `/api/webhook/stripe` | unset: door 4 answers 503 |
//! | `STRIPE_API_URL` | Stripe's API base URL | `https://api.stripe.com` |
//! | `MONOBANK_TOKEN` | the Monobank acquiring token (`X-Token` of its API calls), for the bot's invoices of UAH plans and door 5's public key | unset: door 5 answers 503, the bot offers no Monobank page |
//! | `MONOBANK_API_URL` | Monobank's API base URL | `https://api.monobank.ua` |
//! | `CRYPTOPAY_TOKEN` | Crypto Pay app token from @CryptoBot (`<app id>:<secret>`), sent as `Crypto-Pay-API-Token`; its SHA-256 keys the webhook signature | unset: door 6 answers 503, the bot offers no crypto |
//! | `CRYPTOPAY_API_URL` | Crypto Pay's API base URL (`https://testnet-pay.crypt.bot/api` for the testnet) | `https://pay.crypt.bot/api` |
//! | `RECONCILE_AFTER_SECS` | how long an order with an issued payment page (a WayForPay purchase link, a Monobank or Crypto Pay invoice) stays pending before that gateway is asked about it, 1..=86400 | `600` |
//! | `CHECKBOX_LICENSE_KEY` | the license key of the Checkbox cash register that makes fiscal receipts (set `CHECKBOX_LICENSE_KEY`, `CHECKBOX_LOGIN` and `CHECKBOX_PASSWORD` together, or none) | unset: no fiscal receipts |
//! | `CHECKBOX_LOGIN` | the login of the Checkbox cashier who signs the receipts | unset: no fiscal receipts |
//! | `CHECKBOX_PASSWORD` | that cashier's password | unset: no fiscal receipts |
//! | `CHECKBOX_API_URL` | Checkbox's API base URL | `https://api.checkbox.ua` |
//! | `TELEGRAM_WEBHOOK_SECRET` | `secret_token` given to `setWebhook`, 16..=256 of `A-Za-z0-9_-` | unset: door answers 503 |
//! | `TELEGRAM_BOT_TOKEN` | bot token for Bot API calls, `<bot id>:<secret>` from @BotFather | unset: effects stay queued |
//! | `TELEGRAM_API_URL` | Bot API base URL | `https://api.telegram.org` |
//! | `TELEGRAM_DRY_RUN` | `true`: log Bot API calls instead of making them | `false` |
//! | `TELEGRAM_BOT_USERNAME` | the bot's username (without `@`), for deep links and channels' `buy_link` | unset: `buy_link` is null |
//! | `BOT_DEFAULT_LANGUAGE` | the language the bot speaks to a buyer whose language it neither remembers nor speaks: `en`, `uk` or `ru` ([`present::locale`](crate::present::locale)) | `en` |
//! | `MINI_APP_MAX_AGE_SECS` | how old a Mini App's `initData` (its `auth_date`) may be before its calls are refused (401), 60..=604800 | `86400` |
//! | `DOOR_QUERY_SECS` | how long a join request's query (`chat_join_request.query_id`) is taken to stay valid: a waiting request is approved through it that long, then by `approveChatJoinRequest`, and one still unpaid after it is declined, 60..=604800 | `3600` |
//! | `DOOR_ANSWER_MS` | how long the door may spend deciding a join request query before it answers `queue` and decides later, 100..=9000 | `2000` |
//! | `BOT_MESSAGES_DIR` | a directory of message files replacing the shipped ones: `<dir>/<language>/bot.ftl` (docs/bot.md); checked at start-up like the shipped ones | unset: the shipped messages |
//! | `OUTBOUND_ALLOW_PRIVATE` | `true`: outbound webhook endpoints may be `http://` and resolve to private, loopback or link-local addresses (development and tests only) | `false` |
//! | `REMINDER_DAYS` | days before expiry to remind a member, 0..=365 (0: off) | `3` |
//! | `SWEEP_TOKEN` | bearer token cron may use for `POST /api/sweep`, at least 32 bytes | unset |
//! | `SWEEP_INTERVAL_SECS` | run the sweep inside the server every N seconds (0: never) | `0` |
//! | `HOLD_SECS` | how long a checkout holds a seat, 1..=86400 | `300` |
//! | `HOLD_COOLDOWN_SECS` | how long a buyer whose hold ran out unpaid waits before holding a seat of that channel again, 0..=86400 (0: no wait) | `HOLD_SECS` |
//! | `HOLDS_PER_DAY` | seat holds one buyer may take of one channel in 24 hours, 1..=1000 | `3` |
//! | `AUDIT_INTERVAL_SECS` | audit every active channel's member list against the database every N seconds, 0..=604800 (0: never) | `0` |
//! | `AUDIT_FIX` | `true`: the scheduled audits also repair what they find (unban, revoke) | `false` (report only) |
//! | `ADMIN_EMAIL` / `ADMIN_PASSWORD` | first staff account, created once at start-up (set both or neither; password 8..=72 bytes) | unset |
//! | `BCRYPT_COST` | bcrypt cost for new password hashes, 4..=31 | `12` |
//! | `DB_POOL_SIZE` | maximum database connections, 1..=1000 | `16` |
//! | `REQUEST_TIMEOUT_SECS` | per-request timeout, 1..=600 | `30` |
//! | `HEADER_READ_TIMEOUT_SECS` | a connection whose request headers have not all arrived this long after it opened (or after the request's first byte) is closed, 1..=600 | `10` |
//! | `IDLE_TIMEOUT_SECS` | a keep-alive connection idle this long between requests is closed, and so is one whose response has had no byte leave for this long (a client that stopped reading), 1..=3600 | `60` |
//! | `MAX_CONNECTIONS` | connections served at once; more wait to be accepted, 1..=1000000 | `10000` |
//! | `LOGIN_MAX_FAILURES` | failed logins per (email, client address) before 429, 1..=1000 | `5` |
//! | `LOGIN_WINDOW_SECS` | window of that count, and the wait after it is reached, 1..=86400 | `900` |
//! | `LOGIN_ACCOUNT_MAX_FAILURES` | failed logins per email from all addresses within that window before addresses that never logged in to it get 429, 1..=100000 | `20` |
//!
//! An empty value counts as unset. A missing or weak required secret, or any malformed value,
//! stops start-up with one line naming the variable and never its value. Secrets are held in
//! [`Secret`], whose `Debug` never shows them.
//!
//! This table is the reference; the docs link here rather than copy it (a unit test checks that
//! it lists exactly the variables read). Parsing is split by concern — `database`, `http`,
//! `staff_auth`, `gateways` (the payment doors), `telegram`, `jobs` (background jobs and seat
//! holds) — each a small reader over the helpers of `vars`, which refuse every variable of one
//! shape (integer range, flag, minimum length) with the same words. `doors` says which payment
//! doors the configuration opens.

mod database;
mod doors;
mod fiscal;
mod gateways;
mod http;
mod jobs;
mod secret;
mod staff_auth;
mod telegram;
mod vars;
pub mod webhook_keys;

use std::{net::SocketAddr, path::PathBuf, time::Duration};

pub use doors::Doors;
pub use fiscal::CheckboxConfig;
pub use gateways::{CryptoPayConfig, MonobankConfig, StripeConfig, WayForPayConfig};
pub use http::LogFormat;
pub use jobs::HoldRules;
pub use secret::Secret;

use crate::present::locale::Language;
use database::Database;
use gateways::PaymentDoors;
use http::Http;
use jobs::Jobs;
use staff_auth::StaffAuth;
use telegram::Telegram;
use vars::{Vars, host_of};
use webhook_keys::WebhookKey;

/// The whole configuration, typed.
#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: Secret,
    /// `DATABASE_CA_CERT`: the roots for TLS to PostgreSQL, read when the pool is built.
    pub database_ca_cert: Option<PathBuf>,
    pub bind_addr: SocketAddr,
    /// Where `GET /metrics` is served; `None`: metrics are off.
    pub metrics_addr: Option<SocketAddr>,
    pub log_format: LogFormat,
    pub jwt_secret: Secret,
    pub jwt_ttl: Duration,
    pub trust_proxy: bool,
    /// The service's public base URL, without a trailing slash.
    pub public_url: Option<String>,
    /// Keys of door 1; empty means the door is closed (503).
    pub webhook_keys: Vec<WebhookKey>,
    pub wayforpay: Option<WayForPayConfig>,
    /// The merchant domain of WayForPay purchase links (`WAYFORPAY_DOMAIN`, else `PUBLIC_URL`'s
    /// host).
    pub wayforpay_domain: Option<String>,
    /// `WAYFORPAY_API_URL`, without a trailing slash.
    pub wayforpay_api_url: String,
    /// `RECONCILE_AFTER_SECS`.
    pub reconcile_after: Duration,
    pub stripe: Option<StripeConfig>,
    pub monobank: Option<MonobankConfig>,
    /// Door 6 and the bot's crypto invoices; `None`: closed (503), no crypto offered.
    pub cryptopay: Option<CryptoPayConfig>,
    /// Checkbox's cash register and cashier; `None`: no fiscal receipts.
    pub checkbox: Option<CheckboxConfig>,
    pub telegram_webhook_secret: Option<Secret>,
    pub telegram_bot_token: Option<Secret>,
    pub telegram_api_url: String,
    pub telegram_dry_run: bool,
    /// The bot's username, without `@`.
    pub telegram_bot_username: Option<String>,
    /// `BOT_DEFAULT_LANGUAGE`.
    pub bot_default_language: Language,
    /// `BOT_MESSAGES_DIR`.
    pub bot_messages_dir: Option<PathBuf>,
    /// `MINI_APP_MAX_AGE_SECS`.
    pub mini_app_max_age_secs: i64,
    /// `DOOR_QUERY_SECS`.
    pub door_query_secs: i64,
    /// `DOOR_ANSWER_MS`.
    pub door_answer: Duration,
    pub reminder_days: u32,
    /// `OUTBOUND_ALLOW_PRIVATE`.
    pub outbound_allow_private: bool,
    pub sweep_token: Option<Secret>,
    pub sweep_interval: Option<Duration>,
    pub hold_secs: i64,
    /// `HOLD_COOLDOWN_SECS` (default `HOLD_SECS`).
    pub hold_cooldown_secs: i64,
    pub holds_per_day: i64,
    /// `AUDIT_INTERVAL_SECS`; `None`: no scheduled audit.
    pub audit_interval: Option<Duration>,
    /// `AUDIT_FIX`.
    pub audit_fix: bool,
    pub admin_email: Option<String>,
    pub admin_password: Option<Secret>,
    pub bcrypt_cost: u32,
    pub db_pool_size: usize,
    pub request_timeout: Duration,
    /// `HEADER_READ_TIMEOUT_SECS`, `IDLE_TIMEOUT_SECS`, `MAX_CONNECTIONS` ([`crate::app::server`]).
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub login_max_failures: u32,
    pub login_window: Duration,
    pub login_account_max_failures: u32,
}

/// Why the configuration was refused; the message names the variable and never its value.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads configuration through `get`, so tests can pass a map instead of the environment.
    /// Empty values count as unset. Each concern reads its own variables; a refusal names the
    /// first bad variable.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let vars = Vars(get);
        let database = Database::read(&vars)?;
        let http = Http::read(&vars)?;
        let auth = StaffAuth::read(&vars)?;
        let doors = PaymentDoors::read(&vars)?;
        let checkbox = fiscal::read(&vars)?;
        let telegram = Telegram::read(&vars)?;
        let jobs = Jobs::read(&vars)?;
        Ok(Config {
            database_url: database.url,
            database_ca_cert: database.ca_cert,
            db_pool_size: database.pool_size,
            bind_addr: http.bind_addr,
            metrics_addr: http.metrics_addr,
            log_format: http.log_format,
            request_timeout: http.request_timeout,
            header_read_timeout: http.header_read_timeout,
            idle_timeout: http.idle_timeout,
            max_connections: http.max_connections,
            trust_proxy: http.trust_proxy,
            wayforpay_domain: doors
                .wayforpay_domain
                .or_else(|| http.public_url.as_deref().and_then(host_of)),
            public_url: http.public_url,
            jwt_secret: auth.jwt_secret,
            jwt_ttl: auth.jwt_ttl,
            admin_email: auth.admin_email,
            admin_password: auth.admin_password,
            bcrypt_cost: auth.bcrypt_cost,
            login_max_failures: auth.login_max_failures,
            login_window: auth.login_window,
            login_account_max_failures: auth.login_account_max_failures,
            webhook_keys: doors.webhook_keys,
            wayforpay: doors.wayforpay,
            wayforpay_api_url: doors.wayforpay_api_url,
            reconcile_after: doors.reconcile_after,
            stripe: doors.stripe,
            monobank: doors.monobank,
            cryptopay: doors.cryptopay,
            checkbox,
            telegram_webhook_secret: telegram.webhook_secret,
            telegram_bot_token: telegram.bot_token,
            telegram_api_url: telegram.api_url,
            telegram_dry_run: telegram.dry_run,
            telegram_bot_username: telegram.bot_username,
            bot_default_language: telegram.default_language,
            bot_messages_dir: telegram.messages_dir,
            mini_app_max_age_secs: telegram.mini_app_max_age_secs,
            door_query_secs: telegram.door_query_secs,
            door_answer: telegram.door_answer,
            reminder_days: jobs.reminder_days,
            outbound_allow_private: jobs.outbound_allow_private,
            sweep_token: jobs.sweep_token,
            sweep_interval: jobs.sweep_interval,
            hold_secs: jobs.hold_secs,
            hold_cooldown_secs: jobs.hold_cooldown_secs,
            holds_per_day: jobs.holds_per_day,
            audit_interval: jobs.audit_interval,
            audit_fix: jobs.audit_fix,
        })
    }

    /// The rules every new seat hold obeys (checkout, pre-checkout, the bot's card orders).
    pub fn hold_rules(&self) -> HoldRules {
        HoldRules {
            hold_secs: self.hold_secs,
            cooldown_secs: self.hold_cooldown_secs,
            per_day: self.holds_per_day,
        }
    }
}

/// `BIND_ADDR` alone, for `subgate healthcheck`, which must work without the rest of the
/// configuration.
pub fn bind_addr_from_env() -> Result<SocketAddr, ConfigError> {
    Http::bind_addr(&Vars(|k: &str| std::env::var(k).ok()))
}

#[cfg(test)]
mod tests;
