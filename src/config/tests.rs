//! Unit tests of the configuration: defaults, every variable reaching its field, the words of
//! every refusal, and the variable table against what is read and what docker-compose passes.

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
    assert!(c.monobank.is_none());
    assert!(c.cryptopay.is_none());
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
        ("MONOBANK_TOKEN", " uQ3fK8pLm2Nx7Rt5Vw9Yz1Ab "),
        ("MONOBANK_API_URL", "http://127.0.0.1:12112/"),
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
    let monobank = c.monobank.clone().unwrap();
    assert_eq!(monobank.token.expose(), "uQ3fK8pLm2Nx7Rt5Vw9Yz1Ab");
    assert_eq!(monobank.api_url, "http://127.0.0.1:12112");
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
    let int =
        |name: &str, min: u64, max: u64| format!("{name} must be an integer from {min} to {max}");
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
            vec![("MONOBANK_TOKEN", "short")],
            "MONOBANK_TOKEN must be a Monobank acquiring token (at least 16 visible ASCII \
             characters)"
                .into(),
        ),
        (
            vec![("MONOBANK_TOKEN", "has spaces in it, not allowed")],
            "MONOBANK_TOKEN must be a Monobank acquiring token (at least 16 visible ASCII \
             characters)"
                .into(),
        ),
        (
            vec![("MONOBANK_API_URL", "not a url")],
            "MONOBANK_API_URL must be an absolute URL".into(),
        ),
        (
            vec![("CHECKBOX_API_URL", "not a url")],
            "CHECKBOX_API_URL must be an absolute URL".into(),
        ),
        (
            vec![("CHECKBOX_LICENSE_KEY", "test-license-key")],
            "CHECKBOX_LOGIN, CHECKBOX_PASSWORD are not set (set CHECKBOX_LICENSE_KEY, \
             CHECKBOX_LOGIN and CHECKBOX_PASSWORD together, or none of them)"
                .into(),
        ),
        (
            vec![
                ("CHECKBOX_LOGIN", "cashier"),
                ("CHECKBOX_PASSWORD", "secret"),
            ],
            "CHECKBOX_LICENSE_KEY is not set (set CHECKBOX_LICENSE_KEY, CHECKBOX_LOGIN and \
             CHECKBOX_PASSWORD together, or none of them)"
                .into(),
        ),
        (
            vec![("CRYPTOPAY_TOKEN", "not-a-token")],
            "CRYPTOPAY_TOKEN must be a Crypto Pay app token (<app id>:<secret>)".into(),
        ),
        (
            vec![("CRYPTOPAY_TOKEN", "12345:short")],
            "CRYPTOPAY_TOKEN must be a Crypto Pay app token (<app id>:<secret>)".into(),
        ),
        (
            vec![("CRYPTOPAY_API_URL", "not a url")],
            "CRYPTOPAY_API_URL must be an absolute URL".into(),
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

/// The variables named in the table of the `config` module's documentation (`mod.rs`), the
/// reference for operators: it must list exactly the variables `from_lookup` reads.
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

#[test]
fn crypto_pay_is_its_token_and_api_url() {
    let mut env = minimal();
    env.insert(
        "CRYPTOPAY_TOKEN",
        " 12345:AAzQcZWQqQAbsfgPnOLr4FHC8Doa4L7KryC ".into(),
    );
    let c = parse(&env).unwrap();
    let cp = c.cryptopay.clone().unwrap();
    assert_eq!(
        cp.token.expose(),
        "12345:AAzQcZWQqQAbsfgPnOLr4FHC8Doa4L7KryC"
    );
    assert_eq!(cp.api_url, "https://pay.crypt.bot/api");
    assert!(!format!("{c:?}").contains("AAzQcZWQqQAbsfgPnOLr4FHC8Doa4L7KryC"));
    env.insert(
        "CRYPTOPAY_API_URL",
        "https://testnet-pay.crypt.bot/api/".into(),
    );
    assert_eq!(
        parse(&env).unwrap().cryptopay.unwrap().api_url,
        "https://testnet-pay.crypt.bot/api"
    );
}
