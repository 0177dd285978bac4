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
//! | `RECONCILE_AFTER_SECS` | how long a card order with an issued purchase link stays pending before WayForPay is asked about it, 1..=86400 | `600` |
//! | `TELEGRAM_WEBHOOK_SECRET` | `secret_token` given to `setWebhook`, 16..=256 of `A-Za-z0-9_-` | unset: door answers 503 |
//! | `TELEGRAM_BOT_TOKEN` | bot token for Bot API calls, `<bot id>:<secret>` from @BotFather | unset: effects stay queued |
//! | `TELEGRAM_API_URL` | Bot API base URL | `https://api.telegram.org` |
//! | `TELEGRAM_DRY_RUN` | `true`: log Bot API calls instead of making them | `false` |
//! | `TELEGRAM_BOT_USERNAME` | the bot's username (without `@`), for deep links and channels' `buy_link` | unset: `buy_link` is null |
//! | `BOT_DEFAULT_LANGUAGE` | the language the bot speaks to a buyer whose language it neither remembers nor speaks: `en`, `uk` or `ru` ([`present::locale`](crate::present::locale)) | `en` |
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
//! it lists exactly the variables read). Parsing is split by concern — database, HTTP, staff
//! auth, payment doors, Telegram, background jobs — each a small reader over shared
//! helpers that refuse every variable of one shape (integer range, flag, minimum length) with
//! the same words.

use std::{fmt, net::SocketAddr, path::PathBuf, time::Duration};

pub mod webhook_keys;

use crate::present::locale::Language;
use webhook_keys::WebhookKey;

/// The rules of a new seat hold, from the configuration (`HOLD_SECS`, `HOLD_COOLDOWN_SECS`,
/// `HOLDS_PER_DAY`): how long a hold lasts, how long a buyer whose hold ran out unpaid waits
/// before holding a seat of that channel again, and how many holds of one channel a buyer may
/// take in 24 hours. A hold already granted is never affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRules {
    pub hold_secs: i64,
    pub cooldown_secs: i64,
    pub per_day: i64,
}

/// A secret string: `Debug` prints `<redacted>`, so a config dump never leaks it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret's text. Call sites that need it are the only places that see it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether a presented credential equals this secret. Both sides are hashed with SHA-256
    /// first and the digests compared in constant time, so neither the content nor the length
    /// of the secret leaks through timing.
    pub fn matches(&self, given: &[u8]) -> bool {
        use sha2::{Digest, Sha256};
        use subtle::ConstantTimeEq;
        Sha256::digest(self.0.as_bytes())
            .ct_eq(&Sha256::digest(given))
            .into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// WayForPay merchant credentials (door 2).
#[derive(Debug, Clone)]
pub struct WayForPayConfig {
    pub merchant_account: String,
    pub secret_key: Secret,
}

/// Stripe credentials (door 4 and the bot's Checkout Sessions).
#[derive(Debug, Clone)]
pub struct StripeConfig {
    /// `STRIPE_SECRET_KEY`.
    pub secret_key: Secret,
    /// `STRIPE_WEBHOOK_SECRET`: the key of `Stripe-Signature`, the whole `whsec_…` text.
    pub webhook_secret: Secret,
    /// `STRIPE_API_URL`, without a trailing slash.
    pub api_url: String,
}

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

fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

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
            telegram_webhook_secret: telegram.webhook_secret,
            telegram_bot_token: telegram.bot_token,
            telegram_api_url: telegram.api_url,
            telegram_dry_run: telegram.dry_run,
            telegram_bot_username: telegram.bot_username,
            bot_default_language: telegram.default_language,
            bot_messages_dir: telegram.messages_dir,
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

/// The variables, read through a lookup. Each method reads one variable of one shape and
/// refuses it with the same words for every variable of that shape.
struct Vars<F>(F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    /// The value, or `None` when unset or blank.
    fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    fn required(&self, name: &str) -> Result<String, ConfigError> {
        self.get(name)
            .ok_or_else(|| err(format!("{name} is not set")))
    }

    /// An optional value that must pass `valid`, refused with `refusal`.
    fn checked(
        &self,
        name: &str,
        valid: impl Fn(&str) -> bool,
        refusal: &str,
    ) -> Result<Option<String>, ConfigError> {
        match self.get(name) {
            Some(v) if !valid(&v) => Err(err(refusal)),
            v => Ok(v),
        }
    }

    fn int(&self, name: &str, default: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(err(format!(
                    "{name} must be an integer from {min} to {max}"
                ))),
            },
        }
    }

    fn secs(&self, name: &str, default: u64, min: u64, max: u64) -> Result<Duration, ConfigError> {
        self.int(name, default, min, max).map(Duration::from_secs)
    }

    fn flag(&self, name: &str) -> Result<bool, ConfigError> {
        match self
            .get(name)
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("false") | Some("0") | Some("no") => Ok(false),
            Some("true") | Some("1") | Some("yes") => Ok(true),
            Some(_) => Err(err(format!("{name} must be true or false"))),
        }
    }
}

/// `DATABASE_URL`, `DATABASE_CA_CERT`, `DB_POOL_SIZE`.
struct Database {
    url: Secret,
    ca_cert: Option<PathBuf>,
    pool_size: usize,
}

impl Database {
    fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let url = vars.required("DATABASE_URL")?;
        // DATABASE_CA_CERT is only a path here: the pool reads the file when it is built.
        crate::db::tls::parse_url(&url).map_err(|e| err(e.to_string()))?;
        Ok(Database {
            url: Secret(url),
            ca_cert: vars.get("DATABASE_CA_CERT").map(PathBuf::from),
            pool_size: vars.int("DB_POOL_SIZE", 16, 1, 1000)? as usize,
        })
    }
}

/// `BIND_ADDR`, `METRICS_ADDR`, `LOG_FORMAT`, `REQUEST_TIMEOUT_SECS`,
/// `HEADER_READ_TIMEOUT_SECS`, `IDLE_TIMEOUT_SECS`, `MAX_CONNECTIONS`, `TRUST_PROXY`,
/// `PUBLIC_URL`.
struct Http {
    bind_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    log_format: LogFormat,
    request_timeout: Duration,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
    trust_proxy: bool,
    public_url: Option<String>,
}

impl Http {
    fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let bind_addr = Http::bind_addr(vars)?;
        let metrics_addr = match vars.get("METRICS_ADDR") {
            None => None,
            Some(v) => match v.trim().parse::<SocketAddr>() {
                Ok(a) if a == bind_addr => {
                    return Err(err("METRICS_ADDR must differ from BIND_ADDR"));
                }
                Ok(a) => Some(a),
                Err(_) => {
                    return Err(err("METRICS_ADDR must be host:port, e.g. 127.0.0.1:9090"));
                }
            },
        };
        let log_format = match vars.get("LOG_FORMAT").as_deref() {
            None | Some("pretty") => LogFormat::Pretty,
            Some("json") => LogFormat::Json,
            Some(_) => return Err(err("LOG_FORMAT must be `json` or `pretty`")),
        };
        Ok(Http {
            bind_addr,
            metrics_addr,
            log_format,
            request_timeout: vars.secs("REQUEST_TIMEOUT_SECS", 30, 1, 600)?,
            header_read_timeout: vars.secs("HEADER_READ_TIMEOUT_SECS", 10, 1, 600)?,
            idle_timeout: vars.secs("IDLE_TIMEOUT_SECS", 60, 1, 3600)?,
            max_connections: vars.int("MAX_CONNECTIONS", 10_000, 1, 1_000_000)? as usize,
            trust_proxy: vars.flag("TRUST_PROXY")?,
            public_url: vars
                .checked(
                    "PUBLIC_URL",
                    |v| host_of(v.trim()).is_some(),
                    "PUBLIC_URL must be an absolute http(s) URL, e.g. https://pay.example.com",
                )?
                .map(|v| v.trim().trim_end_matches('/').to_string()),
        })
    }

    fn bind_addr<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<SocketAddr, ConfigError> {
        match vars.get("BIND_ADDR") {
            Some(v) => v
                .parse()
                .map_err(|_| err("BIND_ADDR must be host:port, e.g. 127.0.0.1:8080")),
            None => Ok(SocketAddr::from(([127, 0, 0, 1], 8080))),
        }
    }
}

/// `JWT_SECRET`, `JWT_TTL_SECS`, `ADMIN_EMAIL`, `ADMIN_PASSWORD`, `BCRYPT_COST`,
/// `LOGIN_MAX_FAILURES`, `LOGIN_WINDOW_SECS`, `LOGIN_ACCOUNT_MAX_FAILURES`.
struct StaffAuth {
    jwt_secret: Secret,
    jwt_ttl: Duration,
    admin_email: Option<String>,
    admin_password: Option<Secret>,
    bcrypt_cost: u32,
    login_max_failures: u32,
    login_window: Duration,
    login_account_max_failures: u32,
}

impl StaffAuth {
    fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let jwt_secret = long_enough("JWT_SECRET", vars.required("JWT_SECRET")?, 32)?;
        let jwt_ttl = vars.secs("JWT_TTL_SECS", 3600, 60, 86_400)?;

        let admin_email = vars.get("ADMIN_EMAIL").map(|e| e.trim().to_lowercase());
        let admin_password = vars.get("ADMIN_PASSWORD").map(Secret);
        match (&admin_email, &admin_password) {
            (Some(_), None) => return Err(err("ADMIN_PASSWORD is not set (ADMIN_EMAIL is)")),
            (None, Some(_)) => return Err(err("ADMIN_EMAIL is not set (ADMIN_PASSWORD is)")),
            (Some(e), Some(_)) if !crate::common::email::valid_email(e) => {
                return Err(err("ADMIN_EMAIL is not a valid email address"));
            }
            (Some(_), Some(p)) if !(8..=72).contains(&p.0.len()) => {
                return Err(err("ADMIN_PASSWORD must be 8..72 bytes"));
            }
            _ => {}
        }

        Ok(StaffAuth {
            jwt_secret,
            jwt_ttl,
            admin_email,
            admin_password,
            bcrypt_cost: vars.int("BCRYPT_COST", 12, 4, 31)? as u32,
            login_max_failures: vars.int("LOGIN_MAX_FAILURES", 5, 1, 1000)? as u32,
            login_window: vars.secs("LOGIN_WINDOW_SECS", 900, 1, 86_400)?,
            login_account_max_failures: vars.int("LOGIN_ACCOUNT_MAX_FAILURES", 20, 1, 100_000)?
                as u32,
        })
    }
}

/// `WEBHOOK_SECRET`, `WEBHOOK_SECRETS` (door 1); `WAYFORPAY_MERCHANT_ACCOUNT`,
/// `WAYFORPAY_SECRET_KEY` (door 2), `WAYFORPAY_DOMAIN` (the bot's purchase links);
/// `STRIPE_SECRET_KEY`, `STRIPE_WEBHOOK_SECRET`, `STRIPE_API_URL` (door 4). A door
/// without its secret stays closed.
struct PaymentDoors {
    webhook_keys: Vec<WebhookKey>,
    wayforpay: Option<WayForPayConfig>,
    wayforpay_domain: Option<String>,
    wayforpay_api_url: String,
    reconcile_after: Duration,
    stripe: Option<StripeConfig>,
}

impl PaymentDoors {
    fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let mut webhook_keys = Vec::new();
        if let Some(v) = vars.get("WEBHOOK_SECRET") {
            let key = WebhookKey::parse(v.trim())
                .ok()
                .filter(|_| strong_webhook_key(v.trim()))
                .ok_or_else(|| {
                    err("WEBHOOK_SECRET must be whsec_ followed by base64 of at least 24 bytes")
                })?;
            webhook_keys.push(key);
        }
        if let Some(v) = vars.get("WEBHOOK_SECRETS") {
            let keys = webhook_keys::parse_keys(&v)
                .ok()
                .filter(|_| {
                    v.split(|c: char| c.is_whitespace() || c == ',')
                        .filter(|part| !part.is_empty())
                        .all(strong_webhook_key)
                })
                .ok_or_else(|| {
                    err(
                        "WEBHOOK_SECRETS must list whsec_<base64> keys of at least 24 bytes, \
                         separated by spaces or commas",
                    )
                })?;
            webhook_keys.extend(keys);
        }

        let wayforpay = match (
            vars.get("WAYFORPAY_MERCHANT_ACCOUNT"),
            vars.get("WAYFORPAY_SECRET_KEY"),
        ) {
            (Some(merchant_account), Some(key)) => Some(WayForPayConfig {
                merchant_account,
                secret_key: long_enough("WAYFORPAY_SECRET_KEY", key, 16)?,
            }),
            (None, None) => None,
            (Some(_), None) => return Err(err("WAYFORPAY_SECRET_KEY is not set")),
            (None, Some(_)) => return Err(err("WAYFORPAY_MERCHANT_ACCOUNT is not set")),
        };
        let wayforpay_domain = vars
            .checked(
                "WAYFORPAY_DOMAIN",
                |d| {
                    let d = d.trim();
                    (1..=253).contains(&d.len())
                        && d.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
                },
                "WAYFORPAY_DOMAIN must be a domain name, e.g. pay.example.com",
            )?
            .map(|d| d.trim().to_ascii_lowercase());
        let wayforpay_api_url = vars
            .get("WAYFORPAY_API_URL")
            .unwrap_or_else(|| "https://api.wayforpay.com/api".to_string())
            .trim_end_matches('/')
            .to_string();
        if url::Url::parse(&wayforpay_api_url).is_err() {
            return Err(err("WAYFORPAY_API_URL must be an absolute URL"));
        }
        let stripe_api_url = vars
            .get("STRIPE_API_URL")
            .unwrap_or_else(|| "https://api.stripe.com".to_string())
            .trim_end_matches('/')
            .to_string();
        if url::Url::parse(&stripe_api_url).is_err() {
            return Err(err("STRIPE_API_URL must be an absolute URL"));
        }
        let stripe = match (
            vars.get("STRIPE_SECRET_KEY"),
            vars.get("STRIPE_WEBHOOK_SECRET"),
        ) {
            (Some(key), Some(webhook_secret)) => {
                let key = key.trim().to_string();
                if !(key.starts_with("sk_") || key.starts_with("rk_")) || key.len() < 16 {
                    return Err(err(
                        "STRIPE_SECRET_KEY must be a Stripe secret key (sk_… or rk_…)",
                    ));
                }
                let webhook_secret = webhook_secret.trim().to_string();
                if !webhook_secret.starts_with("whsec_") || webhook_secret.len() < 16 {
                    return Err(err(
                        "STRIPE_WEBHOOK_SECRET must be a Stripe signing secret (whsec_…)",
                    ));
                }
                Some(StripeConfig {
                    secret_key: Secret(key),
                    webhook_secret: Secret(webhook_secret),
                    api_url: stripe_api_url,
                })
            }
            (None, None) => None,
            (Some(_), None) => return Err(err("STRIPE_WEBHOOK_SECRET is not set")),
            (None, Some(_)) => return Err(err("STRIPE_SECRET_KEY is not set")),
        };
        Ok(PaymentDoors {
            stripe,
            webhook_keys,
            wayforpay,
            wayforpay_domain,
            wayforpay_api_url,
            reconcile_after: Duration::from_secs(vars.int(
                "RECONCILE_AFTER_SECS",
                600,
                1,
                86_400,
            )?),
        })
    }
}

/// `TELEGRAM_WEBHOOK_SECRET` (door 3), `TELEGRAM_BOT_TOKEN`, `TELEGRAM_API_URL`,
/// `TELEGRAM_DRY_RUN` (the effects worker), `TELEGRAM_BOT_USERNAME` (deep links),
/// `BOT_DEFAULT_LANGUAGE` and `BOT_MESSAGES_DIR` (the bot's words).
struct Telegram {
    webhook_secret: Option<Secret>,
    bot_token: Option<Secret>,
    api_url: String,
    dry_run: bool,
    bot_username: Option<String>,
    default_language: Language,
    messages_dir: Option<PathBuf>,
}

impl Telegram {
    fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let webhook_secret = vars.checked(
            "TELEGRAM_WEBHOOK_SECRET",
            |s| {
                (16..=256).contains(&s.len())
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            },
            "TELEGRAM_WEBHOOK_SECRET must be 16..256 characters of A-Z a-z 0-9 _ -",
        )?;
        let bot_token = vars.checked(
            "TELEGRAM_BOT_TOKEN",
            |t| {
                t.split_once(':').is_some_and(|(id, rest)| {
                    !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && rest.len() >= 20
                })
            },
            "TELEGRAM_BOT_TOKEN must look like <bot id>:<secret> (from @BotFather)",
        )?;
        let api_url = vars
            .get("TELEGRAM_API_URL")
            .unwrap_or_else(|| "https://api.telegram.org".to_string())
            .trim_end_matches('/')
            .to_string();
        if url::Url::parse(&api_url).is_err() {
            return Err(err("TELEGRAM_API_URL must be an absolute URL"));
        }
        // Telegram usernames are 5 to 32 characters of letters, digits and underscores; the
        // `@` people write in front is not part of it.
        let bot_username = vars
            .checked(
                "TELEGRAM_BOT_USERNAME",
                |u| {
                    let u = u.trim().trim_start_matches('@');
                    (5..=32).contains(&u.len())
                        && u.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                },
                "TELEGRAM_BOT_USERNAME must be the bot's username: 5..32 characters of A-Z a-z 0-9 _",
            )?
            .map(|u| u.trim().trim_start_matches('@').to_string());
        Ok(Telegram {
            webhook_secret: webhook_secret.map(Secret),
            bot_token: bot_token.map(Secret),
            api_url,
            dry_run: vars.flag("TELEGRAM_DRY_RUN")?,
            bot_username,
            default_language: match vars.get("BOT_DEFAULT_LANGUAGE") {
                None => Language::En,
                Some(code) => Language::parse(code.trim()).ok_or_else(|| {
                    err(format!(
                        "BOT_DEFAULT_LANGUAGE must be {}",
                        Language::spellings()
                    ))
                })?,
            },
            messages_dir: vars.get("BOT_MESSAGES_DIR").map(PathBuf::from),
        })
    }
}

/// `REMINDER_DAYS`, `SWEEP_TOKEN`, `SWEEP_INTERVAL_SECS`, `HOLD_SECS`, `HOLD_COOLDOWN_SECS`,
/// `HOLDS_PER_DAY`: the background jobs and the seat hold.
struct Jobs {
    reminder_days: u32,
    outbound_allow_private: bool,
    sweep_token: Option<Secret>,
    sweep_interval: Option<Duration>,
    hold_secs: i64,
    hold_cooldown_secs: i64,
    holds_per_day: i64,
    audit_interval: Option<Duration>,
    audit_fix: bool,
}

impl Jobs {
    fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let hold_secs = vars.int("HOLD_SECS", 300, 1, 86_400)?;
        Ok(Jobs {
            reminder_days: vars.int("REMINDER_DAYS", 3, 0, 365)? as u32,
            outbound_allow_private: vars.flag("OUTBOUND_ALLOW_PRIVATE")?,
            sweep_token: vars
                .get("SWEEP_TOKEN")
                .map(|t| long_enough("SWEEP_TOKEN", t, 32))
                .transpose()?,
            sweep_interval: match vars.int("SWEEP_INTERVAL_SECS", 0, 0, 86_400)? {
                0 => None,
                n => Some(Duration::from_secs(n)),
            },
            hold_secs: hold_secs as i64,
            hold_cooldown_secs: vars.int("HOLD_COOLDOWN_SECS", hold_secs, 0, 86_400)? as i64,
            holds_per_day: vars.int("HOLDS_PER_DAY", 3, 1, 1000)? as i64,
            audit_interval: match vars.int("AUDIT_INTERVAL_SECS", 0, 0, 604_800)? {
                0 => None,
                n => Some(Duration::from_secs(n)),
            },
            audit_fix: vars.flag("AUDIT_FIX")?,
        })
    }
}

/// A secret of at least `min_bytes`; a shorter one is refused without showing it.
fn long_enough(name: &str, value: String, min_bytes: usize) -> Result<Secret, ConfigError> {
    if value.len() < min_bytes {
        return Err(err(format!("{name} must be at least {min_bytes} bytes")));
    }
    Ok(Secret(value))
}

/// The host of an absolute `http` or `https` URL.
fn host_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    parsed.host_str().map(str::to_string)
}

/// Standard Webhooks secrets are 24 to 64 random bytes; a shorter key is too weak to accept.
fn strong_webhook_key(secret: &str) -> bool {
    use base64::{Engine, engine::general_purpose::STANDARD};
    secret
        .strip_prefix("whsec_")
        .and_then(|b64| STANDARD.decode(b64).ok())
        .is_some_and(|key| key.len() >= 24)
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, net::SocketAddr, time::Duration};

    use super::{Config, Language, LogFormat, Secret};

    const JWT: &str = "jwt-secret-for-unit-tests-0123456789";

    /// The smallest valid environment: the two required variables.
    fn minimal() -> HashMap<&'static str, String> {
        HashMap::from([
            ("DATABASE_URL", "postgres://u@127.0.0.1:5432/db".to_string()),
            ("JWT_SECRET", JWT.to_string()),
        ])
    }

    fn parse(env: &HashMap<&'static str, String>) -> Result<Config, String> {
        Config::from_lookup(|k| env.get(k).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_fill_everything_but_the_required_variables() {
        let c = parse(&minimal()).unwrap();
        assert_eq!(c.database_url.expose(), "postgres://u@127.0.0.1:5432/db");
        assert_eq!(c.database_ca_cert, None);
        assert_eq!(c.bind_addr, SocketAddr::from(([127, 0, 0, 1], 8080)));
        assert_eq!(c.metrics_addr, None);
        assert_eq!(c.log_format, LogFormat::Pretty);
        assert_eq!(c.jwt_secret.expose(), JWT);
        assert_eq!(c.jwt_ttl, Duration::from_secs(3600));
        assert!(!c.trust_proxy);
        assert!(c.webhook_keys.is_empty());
        assert!(c.wayforpay.is_none());
        assert!(c.stripe.is_none());
        assert!(c.telegram_webhook_secret.is_none());
        assert!(c.telegram_bot_token.is_none());
        assert_eq!(c.telegram_api_url, "https://api.telegram.org");
        assert!(!c.telegram_dry_run);
        assert_eq!(c.telegram_bot_username, None);
        assert_eq!(c.bot_default_language, Language::En);
        assert_eq!(c.bot_messages_dir, None);
        assert_eq!(c.public_url, None);
        assert_eq!(c.wayforpay_domain, None);
        assert_eq!(c.reminder_days, 3);
        assert!(c.sweep_token.is_none());
        assert_eq!(c.sweep_interval, None);
        assert_eq!(c.hold_secs, 300);
        assert_eq!(c.hold_cooldown_secs, 300, "defaults to HOLD_SECS");
        assert_eq!(c.holds_per_day, 3);
        assert_eq!(c.admin_email, None);
        assert!(c.admin_password.is_none());
        assert_eq!(c.bcrypt_cost, 12);
        assert_eq!(c.db_pool_size, 16);
        assert_eq!(c.request_timeout, Duration::from_secs(30));
        assert_eq!(c.header_read_timeout, Duration::from_secs(10));
        assert_eq!(c.idle_timeout, Duration::from_secs(60));
        assert_eq!(c.max_connections, 10_000);
        assert_eq!(c.login_max_failures, 5);
        assert_eq!(c.login_window, Duration::from_secs(900));
        assert_eq!(c.login_account_max_failures, 20);
    }

    #[test]
    fn every_variable_reaches_its_field() {
        let mut env = minimal();
        for (k, v) in [
            (
                "DATABASE_URL",
                "postgres://u:pw@db.example.com/db?sslmode=verify-full",
            ),
            ("DATABASE_CA_CERT", "/etc/subgate/db-ca.pem"),
            ("BIND_ADDR", "0.0.0.0:9000"),
            ("METRICS_ADDR", " 127.0.0.1:9090 "),
            ("LOG_FORMAT", "json"),
            ("JWT_TTL_SECS", "60"),
            ("TRUST_PROXY", " Yes "),
            ("WEBHOOK_SECRET", " whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD "),
            (
                "WEBHOOK_SECRETS",
                "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD,whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            ),
            ("WAYFORPAY_MERCHANT_ACCOUNT", "test_merch_n1"),
            ("WAYFORPAY_SECRET_KEY", "flk3409refn54t54t*FNJRET"),
            ("STRIPE_SECRET_KEY", " sk_test_0123456789abcdef "),
            ("STRIPE_WEBHOOK_SECRET", "whsec_0123456789abcdef"),
            ("STRIPE_API_URL", "http://127.0.0.1:12111/"),
            ("TELEGRAM_WEBHOOK_SECRET", "abcdefghijklmnop_-"),
            ("TELEGRAM_BOT_TOKEN", "123456:AAbbCCddEEffGGhhIIjjKK"),
            ("TELEGRAM_API_URL", "http://127.0.0.1:9999/"),
            ("TELEGRAM_DRY_RUN", "1"),
            ("TELEGRAM_BOT_USERNAME", "@SubGate_bot"),
            ("BOT_DEFAULT_LANGUAGE", "uk"),
            ("BOT_MESSAGES_DIR", "/etc/subgate/messages"),
            ("PUBLIC_URL", "https://pay.example.com/"),
            ("WAYFORPAY_DOMAIN", "Shop.Example.com"),
            ("REMINDER_DAYS", "0"),
            ("SWEEP_TOKEN", "sweep-token-0123456789abcdef0123456789"),
            ("SWEEP_INTERVAL_SECS", "300"),
            ("HOLD_SECS", "86400"),
            ("HOLD_COOLDOWN_SECS", "0"),
            ("HOLDS_PER_DAY", "1000"),
            ("ADMIN_EMAIL", " Boss@Example.COM "),
            ("ADMIN_PASSWORD", "boss password 1"),
            ("BCRYPT_COST", "4"),
            ("DB_POOL_SIZE", "1000"),
            ("REQUEST_TIMEOUT_SECS", " 600 "),
            ("HEADER_READ_TIMEOUT_SECS", "1"),
            ("IDLE_TIMEOUT_SECS", "3600"),
            ("MAX_CONNECTIONS", "4"),
            ("LOGIN_MAX_FAILURES", "1"),
            ("LOGIN_WINDOW_SECS", "1"),
            ("LOGIN_ACCOUNT_MAX_FAILURES", "100000"),
        ] {
            env.insert(k, v.to_string());
        }
        let c = parse(&env).unwrap();
        assert_eq!(
            c.database_url.expose(),
            "postgres://u:pw@db.example.com/db?sslmode=verify-full"
        );
        assert_eq!(
            c.database_ca_cert.as_deref(),
            Some(std::path::Path::new("/etc/subgate/db-ca.pem"))
        );
        assert_eq!(c.bind_addr, SocketAddr::from(([0, 0, 0, 0], 9000)));
        assert_eq!(
            c.metrics_addr,
            Some(SocketAddr::from(([127, 0, 0, 1], 9090)))
        );
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.jwt_ttl, Duration::from_secs(60));
        assert!(c.trust_proxy);
        assert_eq!(c.webhook_keys.len(), 3);
        let stripe = c.stripe.clone().unwrap();
        assert_eq!(stripe.secret_key.expose(), "sk_test_0123456789abcdef");
        assert_eq!(stripe.webhook_secret.expose(), "whsec_0123456789abcdef");
        assert_eq!(stripe.api_url, "http://127.0.0.1:12111");
        let wfp = c.wayforpay.unwrap();
        assert_eq!(wfp.merchant_account, "test_merch_n1");
        assert_eq!(wfp.secret_key.expose(), "flk3409refn54t54t*FNJRET");
        assert_eq!(
            c.telegram_webhook_secret.unwrap().expose(),
            "abcdefghijklmnop_-"
        );
        assert_eq!(
            c.telegram_bot_token.unwrap().expose(),
            "123456:AAbbCCddEEffGGhhIIjjKK"
        );
        assert_eq!(c.telegram_api_url, "http://127.0.0.1:9999");
        assert!(c.telegram_dry_run);
        assert_eq!(c.telegram_bot_username.as_deref(), Some("SubGate_bot"));
        assert_eq!(c.bot_default_language, Language::Uk);
        assert_eq!(
            c.bot_messages_dir.as_deref(),
            Some(std::path::Path::new("/etc/subgate/messages"))
        );
        assert_eq!(c.public_url.as_deref(), Some("https://pay.example.com"));
        assert_eq!(c.wayforpay_domain.as_deref(), Some("shop.example.com"));
        assert_eq!(c.reminder_days, 0);
        assert_eq!(
            c.sweep_token.unwrap().expose(),
            "sweep-token-0123456789abcdef0123456789"
        );
        assert_eq!(c.sweep_interval, Some(Duration::from_secs(300)));
        assert_eq!(c.hold_secs, 86400);
        assert_eq!(c.hold_cooldown_secs, 0);
        assert_eq!(c.holds_per_day, 1000);
        assert_eq!(c.admin_email.as_deref(), Some("boss@example.com"));
        assert_eq!(c.admin_password.unwrap().expose(), "boss password 1");
        assert_eq!(c.bcrypt_cost, 4);
        assert_eq!(c.db_pool_size, 1000);
        assert_eq!(c.request_timeout, Duration::from_secs(600));
        assert_eq!(c.header_read_timeout, Duration::from_secs(1));
        assert_eq!(c.idle_timeout, Duration::from_secs(3600));
        assert_eq!(c.max_connections, 4);
        assert_eq!(c.login_max_failures, 1);
        assert_eq!(c.login_window, Duration::from_secs(1));
        assert_eq!(c.login_account_max_failures, 100_000);
    }

    /// Every refusal, word for word: each names its variable and none shows a value.
    #[test]
    fn every_refusal_reads_the_same() {
        let int = |name: &str, min: u64, max: u64| {
            format!("{name} must be an integer from {min} to {max}")
        };
        let too_long = "p".repeat(73);
        let cases: Vec<(Vec<(&'static str, &str)>, String)> = vec![
            (vec![("DATABASE_URL", "")], "DATABASE_URL is not set".into()),
            (
                vec![("DATABASE_URL", "postgres://u:pw@h:notaport/db")],
                "DATABASE_URL is not a valid PostgreSQL connection URL".into(),
            ),
            (
                vec![("DATABASE_URL", "postgres://u:pw@h/db?sslmode=allow")],
                "DATABASE_URL sslmode must be disable, prefer, require, verify-ca or verify-full"
                    .into(),
            ),
            (
                vec![("BIND_ADDR", "localhost")],
                "BIND_ADDR must be host:port, e.g. 127.0.0.1:8080".into(),
            ),
            (
                vec![("METRICS_ADDR", ":9090")],
                "METRICS_ADDR must be host:port, e.g. 127.0.0.1:9090".into(),
            ),
            (
                vec![("METRICS_ADDR", "127.0.0.1:8080")],
                "METRICS_ADDR must differ from BIND_ADDR".into(),
            ),
            (
                vec![("LOG_FORMAT", "xml")],
                "LOG_FORMAT must be `json` or `pretty`".into(),
            ),
            (vec![("JWT_SECRET", " ")], "JWT_SECRET is not set".into()),
            (
                vec![("JWT_SECRET", "31-bytes-0123456789abcdef012345")],
                "JWT_SECRET must be at least 32 bytes".into(),
            ),
            (
                vec![("JWT_TTL_SECS", "59")],
                int("JWT_TTL_SECS", 60, 86_400),
            ),
            (vec![("JWT_TTL_SECS", "x")], int("JWT_TTL_SECS", 60, 86_400)),
            (
                vec![("TRUST_PROXY", "maybe")],
                "TRUST_PROXY must be true or false".into(),
            ),
            (
                vec![("WEBHOOK_SECRET", "whsec_c2hvcnQ=")],
                "WEBHOOK_SECRET must be whsec_ followed by base64 of at least 24 bytes".into(),
            ),
            (
                vec![("WEBHOOK_SECRET", "not-a-key")],
                "WEBHOOK_SECRET must be whsec_ followed by base64 of at least 24 bytes".into(),
            ),
            (
                vec![(
                    "WEBHOOK_SECRETS",
                    "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD whsec_c2hvcnQ=",
                )],
                "WEBHOOK_SECRETS must list whsec_<base64> keys of at least 24 bytes, \
                 separated by spaces or commas"
                    .into(),
            ),
            (
                vec![("WEBHOOK_SECRETS", " , ")],
                "WEBHOOK_SECRETS must list whsec_<base64> keys of at least 24 bytes, \
                 separated by spaces or commas"
                    .into(),
            ),
            (
                vec![("WAYFORPAY_MERCHANT_ACCOUNT", "m")],
                "WAYFORPAY_SECRET_KEY is not set".into(),
            ),
            (
                vec![("WAYFORPAY_SECRET_KEY", "0123456789abcdef")],
                "WAYFORPAY_MERCHANT_ACCOUNT is not set".into(),
            ),
            (
                vec![
                    ("WAYFORPAY_MERCHANT_ACCOUNT", "m"),
                    ("WAYFORPAY_SECRET_KEY", "0123456789abcde"),
                ],
                "WAYFORPAY_SECRET_KEY must be at least 16 bytes".into(),
            ),
            (
                vec![("STRIPE_SECRET_KEY", "sk_test_0123456789abcdef")],
                "STRIPE_WEBHOOK_SECRET is not set".into(),
            ),
            (
                vec![("STRIPE_WEBHOOK_SECRET", "whsec_0123456789abcdef")],
                "STRIPE_SECRET_KEY is not set".into(),
            ),
            (
                vec![
                    ("STRIPE_SECRET_KEY", "pk_test_0123456789abcdef"),
                    ("STRIPE_WEBHOOK_SECRET", "whsec_0123456789abcdef"),
                ],
                "STRIPE_SECRET_KEY must be a Stripe secret key (sk_… or rk_…)".into(),
            ),
            (
                vec![
                    ("STRIPE_SECRET_KEY", "sk_test_0123456789abcdef"),
                    ("STRIPE_WEBHOOK_SECRET", "0123456789abcdef0123"),
                ],
                "STRIPE_WEBHOOK_SECRET must be a Stripe signing secret (whsec_…)".into(),
            ),
            (
                vec![("STRIPE_API_URL", "not a url")],
                "STRIPE_API_URL must be an absolute URL".into(),
            ),
            (
                vec![("TELEGRAM_WEBHOOK_SECRET", "short_secret")],
                "TELEGRAM_WEBHOOK_SECRET must be 16..256 characters of A-Z a-z 0-9 _ -".into(),
            ),
            (
                vec![("TELEGRAM_WEBHOOK_SECRET", "has spaces in it, not allowed")],
                "TELEGRAM_WEBHOOK_SECRET must be 16..256 characters of A-Z a-z 0-9 _ -".into(),
            ),
            (
                vec![("TELEGRAM_BOT_TOKEN", "12a:AAbbCCddEEffGGhhIIjjKK")],
                "TELEGRAM_BOT_TOKEN must look like <bot id>:<secret> (from @BotFather)".into(),
            ),
            (
                vec![("TELEGRAM_BOT_TOKEN", "123:short")],
                "TELEGRAM_BOT_TOKEN must look like <bot id>:<secret> (from @BotFather)".into(),
            ),
            (
                vec![("TELEGRAM_API_URL", "api.telegram.org")],
                "TELEGRAM_API_URL must be an absolute URL".into(),
            ),
            (
                vec![("TELEGRAM_DRY_RUN", "sometimes")],
                "TELEGRAM_DRY_RUN must be true or false".into(),
            ),
            (
                vec![("BOT_DEFAULT_LANGUAGE", "de")],
                "BOT_DEFAULT_LANGUAGE must be en, uk or ru".into(),
            ),
            (
                vec![("TELEGRAM_BOT_USERNAME", "bot")],
                "TELEGRAM_BOT_USERNAME must be the bot's username: 5..32 characters of A-Z a-z 0-9 _"
                    .into(),
            ),
            (
                vec![("TELEGRAM_BOT_USERNAME", "https://t.me/some_bot")],
                "TELEGRAM_BOT_USERNAME must be the bot's username: 5..32 characters of A-Z a-z 0-9 _"
                    .into(),
            ),
            (
                vec![("PUBLIC_URL", "pay.example.com")],
                "PUBLIC_URL must be an absolute http(s) URL, e.g. https://pay.example.com".into(),
            ),
            (
                vec![("PUBLIC_URL", "ftp://pay.example.com")],
                "PUBLIC_URL must be an absolute http(s) URL, e.g. https://pay.example.com".into(),
            ),
            (
                vec![("WAYFORPAY_DOMAIN", "https://shop.example.com")],
                "WAYFORPAY_DOMAIN must be a domain name, e.g. pay.example.com".into(),
            ),
            (vec![("REMINDER_DAYS", "366")], int("REMINDER_DAYS", 0, 365)),
            (
                vec![("SWEEP_TOKEN", "31-bytes-0123456789abcdef012345")],
                "SWEEP_TOKEN must be at least 32 bytes".into(),
            ),
            (
                vec![("SWEEP_INTERVAL_SECS", "86401")],
                int("SWEEP_INTERVAL_SECS", 0, 86_400),
            ),
            (vec![("HOLD_SECS", "0")], int("HOLD_SECS", 1, 86_400)),
            (
                vec![("ADMIN_EMAIL", "a@example.com")],
                "ADMIN_PASSWORD is not set (ADMIN_EMAIL is)".into(),
            ),
            (
                vec![("ADMIN_PASSWORD", "long enough")],
                "ADMIN_EMAIL is not set (ADMIN_PASSWORD is)".into(),
            ),
            (
                vec![("ADMIN_EMAIL", "not-an-email"), ("ADMIN_PASSWORD", "short")],
                "ADMIN_EMAIL is not a valid email address".into(),
            ),
            (
                vec![
                    ("ADMIN_EMAIL", "a@example.com"),
                    ("ADMIN_PASSWORD", "short7!"),
                ],
                "ADMIN_PASSWORD must be 8..72 bytes".into(),
            ),
            (
                vec![
                    ("ADMIN_EMAIL", "a@example.com"),
                    ("ADMIN_PASSWORD", &too_long),
                ],
                "ADMIN_PASSWORD must be 8..72 bytes".into(),
            ),
            (vec![("BCRYPT_COST", "32")], int("BCRYPT_COST", 4, 31)),
            (vec![("DB_POOL_SIZE", "0")], int("DB_POOL_SIZE", 1, 1000)),
            (
                vec![("REQUEST_TIMEOUT_SECS", "601")],
                int("REQUEST_TIMEOUT_SECS", 1, 600),
            ),
            (
                vec![("LOGIN_MAX_FAILURES", "-1")],
                int("LOGIN_MAX_FAILURES", 1, 1000),
            ),
            (
                vec![("LOGIN_WINDOW_SECS", "0")],
                int("LOGIN_WINDOW_SECS", 1, 86_400),
            ),
        ];
        for (vars, expected) in cases {
            let mut env = minimal();
            for (k, v) in &vars {
                env.insert(k, v.to_string());
            }
            assert_eq!(
                parse(&env).err().as_deref(),
                Some(format!("configuration error: {expected}").as_str()),
                "for {vars:?}"
            );
        }
    }

    /// The table in this module's documentation is the reference for operators: it must list
    /// exactly the variables `from_lookup` reads.
    /// The variables named in the table of this module's documentation.
    fn documented_variables() -> std::collections::BTreeSet<String> {
        include_str!("mod.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("//! | `"))
            .flat_map(|row| {
                let names = row.split(" |").next().unwrap_or_default();
                names
                    .split(" / ")
                    .map(|name| name.trim_matches('`').to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The keys of `services.subgate.environment` in a compose file (block style, as ours is
    /// written: two spaces per level, one `KEY: value` a line).
    fn compose_service_environment(compose: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let (mut in_service, mut in_environment) = (false, false);
        for line in compose.lines() {
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = line.len() - trimmed.len();
            match indent {
                0 => in_service = false,
                2 => {
                    in_service = trimmed == "subgate:";
                    in_environment = false;
                }
                4 => in_environment = in_service && trimmed == "environment:",
                6 if in_environment => {
                    let key = trimmed.split(':').next().unwrap_or_default();
                    keys.push(key.trim().to_string());
                }
                _ => {}
            }
        }
        keys
    }

    /// A deployment by docker-compose must be able to set every variable: the service's
    /// `environment` passes exactly the variables of the table, each once.
    #[test]
    fn the_compose_file_passes_exactly_the_variables_of_the_table() {
        let passed = compose_service_environment(include_str!("../../docker-compose.yml"));
        let unique: std::collections::BTreeSet<String> = passed.iter().cloned().collect();
        assert_eq!(
            unique.len(),
            passed.len(),
            "a variable is passed twice: {passed:?}"
        );
        let documented = documented_variables();
        let missing: Vec<_> = documented.difference(&unique).collect();
        let unknown: Vec<_> = unique.difference(&documented).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "docker-compose.yml's subgate environment and the table disagree: \
             not passed {missing:?}, not in the table {unknown:?}"
        );
    }

    #[test]
    fn the_compose_reader_finds_only_the_service_environment() {
        let compose = "services:\n  postgres:\n    environment:\n      POSTGRES_DB: x\n  \
                       subgate:\n    build: .\n    environment:\n      # a comment\n      \
                       A: ${A:-}\n\n      B: b\n    ports:\n      - \"1:1\"\nvolumes:\n  \
                       pgdata:\n";
        assert_eq!(compose_service_environment(compose), ["A", "B"]);
    }

    #[test]
    fn the_module_table_lists_exactly_the_variables_read() {
        let documented = documented_variables();
        let read = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let env = minimal();
        Config::from_lookup(|k| {
            read.borrow_mut().insert(k.to_string());
            env.get(k).cloned()
        })
        .unwrap();
        assert_eq!(read.into_inner(), documented);
    }

    #[test]
    fn the_wayforpay_domain_defaults_to_the_public_url_host() {
        let mut env = minimal();
        env.insert(
            "PUBLIC_URL",
            "https://pay.example.com:8443/base/".to_string(),
        );
        let c = parse(&env).unwrap();
        assert_eq!(
            c.public_url.as_deref(),
            Some("https://pay.example.com:8443/base")
        );
        assert_eq!(c.wayforpay_domain.as_deref(), Some("pay.example.com"));
    }

    #[test]
    fn secret_matches_only_itself() {
        let t = "sweep-token-0123456789abcdef0123456789";
        let secret = Secret::new(t);
        assert!(secret.matches(t.as_bytes()));
        assert!(!secret.matches(&t.as_bytes()[..t.len() - 1]));
        assert!(!secret.matches(format!("{t}x").as_bytes()));
        assert!(!secret.matches(b""));
        assert_eq!(format!("{secret:?}"), "<redacted>");
    }
}
