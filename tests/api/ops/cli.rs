//! The `subgate` binary's commands: configuration errors that name the variable and never the
//! secret, `serve` without a JWT secret, `help`, `staff create` and `staff set-password`,
//! `migrate` run twice at once, and `serve` answering and exiting cleanly on SIGTERM; and the
//! helpers that run the binary.

use std::{
    collections::HashMap,
    io::Write,
    net::SocketAddr,
    process::{Command, Output, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{body::Body, http::Method};
use serde_json::{Value, json};
use subgate::Config;
use tokio::{net::TcpListener, task::JoinHandle};

use crate::support::helpers::{
    self, ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp, test_env, url_for,
};

const BIN: &str = env!("CARGO_BIN_EXE_subgate");

/// A TCP proxy to the real PostgreSQL that a test can stop (closing every proxied connection)
/// and start again on the same port: a database outage and its end, without touching the server.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    pub(crate) target: SocketAddr,
    pub(crate) tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    pub(crate) async fn start(target: SocketAddr) -> Proxy {
        let mut proxy = Proxy {
            port: 0,
            target,
            tasks: Arc::default(),
        };
        proxy.listen().await;
        proxy
    }

    pub(crate) async fn listen(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.port = listener.local_addr().unwrap().port();
        let (target, tasks) = (self.target, self.tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(conn);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    /// Closes the listener and every proxied connection.
    pub(crate) async fn stop(&self) {
        let tasks: Vec<_> = self.tasks.lock().unwrap().drain(..).collect();
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

pub(crate) async fn ready(app: &TestApp) -> u16 {
    app.request(Method::GET, "/readyz", &[], Body::empty())
        .await
        .status
        .as_u16()
}

// ---------------------------------------------------------------- configuration

fn lookup(env: &HashMap<String, String>) -> Result<Config, subgate::config::ConfigError> {
    Config::from_lookup(|k| env.get(k).cloned())
}

#[track_caller]
fn assert_refused(env: &HashMap<String, String>, variable: &str, secret: Option<&str>) {
    let message = match lookup(env) {
        Ok(_) => panic!("config with bad {variable} was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains(variable), "{message:?} names {variable}");
    assert!(!message.contains('\n'), "one line: {message:?}");
    if let Some(secret) = secret {
        assert!(!message.contains(secret), "{message:?} leaks the value");
    }
}

#[test]
fn config_errors_name_the_variable_and_never_the_secret() {
    let base = test_env("postgres://postgres:dbpassw0rd@127.0.0.1:5432/x");
    lookup(&base).expect("the base config is valid");
    let change = |k: &str, v: &str| {
        let mut env = base.clone();
        env.insert(k.to_string(), v.to_string());
        env
    };
    let remove = |k: &str| {
        let mut env = base.clone();
        env.remove(k);
        env
    };
    assert_refused(&remove("DATABASE_URL"), "DATABASE_URL", None);
    assert_refused(&change("DATABASE_URL", "  "), "DATABASE_URL", None);
    assert_refused(
        &change("DATABASE_URL", "postgres://u:pw-secret-1@h:notaport/db"),
        "DATABASE_URL",
        Some("pw-secret-1"),
    );
    assert_refused(&remove("JWT_SECRET"), "JWT_SECRET", None);
    assert_refused(&change("JWT_SECRET", ""), "JWT_SECRET", None);
    let short = "s3cret-jwt-of-31-bytes-00000000";
    assert_eq!(short.len(), 31);
    assert_refused(&change("JWT_SECRET", short), "JWT_SECRET", Some(short));
    lookup(&change("JWT_SECRET", &format!("{short}0"))).expect("32 bytes is enough");
    for bad in [
        "not-a-whsec-value-xyz",
        "whsec_!!!!not*base64!!!!",
        "whsec_c2hvcnQ=",
    ] {
        assert_refused(&change("WEBHOOK_SECRET", bad), "WEBHOOK_SECRET", Some(bad));
    }
    assert_refused(
        &change(
            "WEBHOOK_SECRETS",
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD bogus-key-value",
        ),
        "WEBHOOK_SECRETS",
        Some("bogus-key-value"),
    );
    let sweep = "sweep-token-only-31-bytes-long!";
    assert_eq!(sweep.len(), 31);
    assert_refused(&change("SWEEP_TOKEN", sweep), "SWEEP_TOKEN", Some(sweep));
    assert_refused(&remove("ADMIN_PASSWORD"), "ADMIN_PASSWORD", None);
    assert_refused(&remove("ADMIN_EMAIL"), "ADMIN_EMAIL", None);
    assert_refused(
        &change("ADMIN_PASSWORD", "short7!"),
        "ADMIN_PASSWORD",
        Some("short7!"),
    );
    assert_refused(&change("ADMIN_EMAIL", "not-an-email"), "ADMIN_EMAIL", None);
    assert_refused(&change("LOG_FORMAT", "xml"), "LOG_FORMAT", None);
    lookup(&change("LOG_FORMAT", "json")).unwrap();
    assert_refused(
        &remove("WAYFORPAY_SECRET_KEY"),
        "WAYFORPAY_SECRET_KEY",
        None,
    );
    assert_refused(
        &change("WAYFORPAY_SECRET_KEY", "tooshortkey"),
        "WAYFORPAY_SECRET_KEY",
        Some("tooshortkey"),
    );
    assert_refused(
        &change("TELEGRAM_WEBHOOK_SECRET", "has spaces in it, not allowed"),
        "TELEGRAM_WEBHOOK_SECRET",
        Some("has spaces in it"),
    );
    assert_refused(
        &change("TELEGRAM_BOT_TOKEN", "nocolon-secret-bot-token"),
        "TELEGRAM_BOT_TOKEN",
        Some("nocolon-secret-bot-token"),
    );
    for (k, v) in [
        ("JWT_TTL_SECS", "0"),
        ("JWT_TTL_SECS", "86401"),
        ("JWT_TTL_SECS", "abc"),
        ("BIND_ADDR", "localhost"),
        ("TRUST_PROXY", "maybe"),
        ("HOLD_SECS", "0"),
        ("BCRYPT_COST", "3"),
        ("DB_POOL_SIZE", "0"),
        ("REQUEST_TIMEOUT_SECS", "0"),
        ("LOGIN_MAX_FAILURES", "0"),
        ("REMINDER_DAYS", "366"),
    ] {
        assert_refused(&change(k, v), k, None);
    }
}

#[test]
fn config_debug_output_shows_no_secret() {
    let bot_token = "123456:AAbbCCddEEffGGhhIIjjKKllMMnnOOpp";
    let mut env = test_env("postgres://postgres:db-passw0rd-secret@127.0.0.1:5432/x");
    env.insert("TELEGRAM_BOT_TOKEN".into(), bot_token.into());
    let config = lookup(&env).unwrap();
    let debug = format!("{config:?}");
    let alternate = format!("{config:#?}");
    for secret in [
        JWT_SECRET,
        ADMIN_PASSWORD,
        helpers::SWEEP_TOKEN,
        helpers::TELEGRAM_SECRET,
        helpers::WAYFORPAY_KEY,
        "C2FVsBQIhrscChlQIMV+b5sSYspob7oD", // the webhook key's base64 part
        "db-passw0rd-secret",
        bot_token,
        "AAbbCCddEEffGGhhIIjjKKllMMnnOOpp",
    ] {
        assert!(!debug.contains(secret), "Debug shows {secret}: {debug}");
        assert!(!alternate.contains(secret), "Debug shows {secret}");
    }
    // Non-secret settings are still visible, so the dump is useful.
    assert!(debug.contains(helpers::WAYFORPAY_ACCOUNT), "{debug}");
    assert!(debug.contains(ADMIN_EMAIL), "{debug}");
}

// ---------------------------------------------------------------- the binary

/// A command for the built binary with a cleared environment plus `vars`.
pub(crate) fn subgate(args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_clear();
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) async fn run(mut cmd: Command, stdin: Option<&str>) -> Output {
    let stdin = stdin.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("the subgate binary runs");
        let mut pipe = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            pipe.write_all(s.as_bytes()).unwrap();
        }
        drop(pipe);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn serve_without_jwt_secret_exits_with_one_line_naming_it() {
    let db = url_for("postgres");
    for vars in [
        vec![("DATABASE_URL", db.as_str())],
        vec![
            ("DATABASE_URL", db.as_str()),
            ("JWT_SECRET", "too-short-jwt-secret-value"),
        ],
    ] {
        let out = run(subgate(&["serve"], &vars), None).await;
        assert!(!out.status.success());
        let stderr = text(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr:?}");
        assert!(stderr.contains("JWT_SECRET"), "{stderr:?}");
        assert!(!stderr.contains("too-short-jwt-secret-value"), "{stderr:?}");
        assert!(out.stdout.is_empty(), "{:?}", text(&out.stdout));
    }
    let out = run(subgate(&["serve"], &[("JWT_SECRET", JWT_SECRET)]), None).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("DATABASE_URL"));
}

#[tokio::test]
async fn help_lists_the_commands() {
    let out = run(subgate(&["--help"], &[]), None).await;
    assert!(out.status.success());
    let help = text(&out.stdout);
    for command in ["serve", "migrate", "staff", "healthcheck"] {
        assert!(help.contains(command), "{help}");
    }
    let out = run(subgate(&["staff", "create", "--help"], &[]), None).await;
    assert!(text(&out.stdout).contains("--email"));
    assert!(text(&out.stdout).contains("stdin") || text(&out.stdout).contains("standard input"));
}

#[tokio::test]
async fn staff_create_makes_an_account_that_can_log_in() {
    let app = TestApp::spawn().await;
    let url = url_for(&app.db_name);
    let vars = [
        ("DATABASE_URL", url.as_str()),
        ("JWT_SECRET", JWT_SECRET),
        ("BCRYPT_COST", "4"),
    ];
    let password = "a long staff passphrase";
    let out = run(
        subgate(&["staff", "create", "--email", "x@example.com"], &vars),
        Some(&format!("{password}\n")),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains(password) && !text(&out.stderr).contains(password));
    let body = app.login("x@example.com", password).await.expect(200);
    assert_eq!(body["token_type"], "Bearer");

    // A second time: refused with a clear message; the first password still works.
    let out = run(
        subgate(&["staff", "create", "--email", "X@Example.com"], &vars),
        Some("another password entirely\n"),
    )
    .await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("already exists"), "{stderr}");
    assert!(!stderr.contains("another password"), "{stderr}");
    app.login("x@example.com", password).await.expect(200);
    crate::staff::auth::assert_bearer_401(
        &app.login("x@example.com", "another password entirely")
            .await,
    );

    // Bad input: a short password, an invalid email.
    let out = run(
        subgate(&["staff", "create", "--email", "y@example.com"], &vars),
        Some("short\n"),
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("password"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        subgate(&["staff", "create", "--email", "not-an-email"], &vars),
        Some("long enough password\n"),
    )
    .await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("email"), "{}", text(&out.stderr));
    let n: i64 = app.count("staff_accounts").await;
    assert_eq!(n, 2, "the admin and x@example.com");
}

#[tokio::test]
async fn staff_set_password_changes_the_password_and_ends_the_account_s_sessions() {
    let app = TestApp::spawn().await;
    let url = url_for(&app.db_name);
    let vars = [
        ("DATABASE_URL", url.as_str()),
        ("JWT_SECRET", JWT_SECRET),
        ("BCRYPT_COST", "4"),
    ];
    let old = format!("Bearer {}", app.token().await);
    let list = |authorization: String| {
        let app = &app;
        async move {
            app.request(
                Method::GET,
                "/api/channels",
                &[("authorization", authorization.as_str())],
                Body::empty(),
            )
            .await
        }
    };
    list(old.clone()).await.expect(200);

    let password = "a brand new admin passphrase";
    let out = run(
        subgate(&["staff", "set-password", "--email", ADMIN_EMAIL], &vars),
        Some(&format!("{password}\n")),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains(password) && !text(&out.stderr).contains(password));
    // The token issued before is refused at once; the old password no longer logs in, the new
    // one does, and its token works.
    crate::staff::auth::assert_bearer_401(&list(old).await);
    crate::staff::auth::assert_bearer_401(&app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await);
    let body = app.login(ADMIN_EMAIL, password).await.expect(200);
    let new = format!("Bearer {}", body["access_token"].as_str().unwrap());
    list(new.clone()).await.expect(200);

    // Refusals change nothing: an unknown account, a short password.
    let out = run(
        subgate(
            &["staff", "set-password", "--email", "nobody@example.com"],
            &vars,
        ),
        Some("long enough password\n"),
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no staff account"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        subgate(&["staff", "set-password", "--email", ADMIN_EMAIL], &vars),
        Some("short\n"),
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("password"),
        "{}",
        text(&out.stderr)
    );
    list(new).await.expect(200);
    app.login(ADMIN_EMAIL, password).await.expect(200);
}

pub(crate) async fn create_empty_database(name: &str) {
    let (client, conn) = tokio_postgres::connect(&helpers::admin_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_is_idempotent_and_safe_when_two_start_together() {
    for round in 0..3 {
        let name = helpers::new_database_name();
        create_empty_database(&name).await;
        let url = url_for(&name);
        let vars = [("DATABASE_URL", url.as_str()), ("JWT_SECRET", JWT_SECRET)];
        let (a, b) = tokio::join!(
            run(subgate(&["migrate"], &vars), None),
            run(subgate(&["migrate"], &vars), None)
        );
        for out in [&a, &b] {
            assert!(
                out.status.success(),
                "round {round}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        let again = run(subgate(&["migrate"], &vars), None).await;
        assert!(again.status.success(), "{}", text(&again.stderr));

        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let rows = client
            .query(
                "SELECT version FROM schema_migrations ORDER BY version",
                &[],
            )
            .await
            .unwrap();
        let versions: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        let expected: Vec<i32> = subgate::db::MIGRATIONS.iter().map(|m| m.0).collect();
        assert_eq!(versions, expected, "each migration applied once");
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_and_exits_cleanly_on_sigterm() {
    let db_name = helpers::fresh_database().await;
    let url = url_for(&db_name);
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let vars = [
        ("DATABASE_URL", url.as_str()),
        ("JWT_SECRET", JWT_SECRET),
        ("BCRYPT_COST", "4"),
        ("BIND_ADDR", bind.as_str()),
        ("ADMIN_EMAIL", "boss@example.com"),
        ("ADMIN_PASSWORD", "boss password 1"),
        ("LOG_FORMAT", "json"),
    ];
    let mut child = subgate(&["serve"], &vars)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://{bind}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await
            && r.status() == 200
        {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!("serve exited early ({status}): {}", text(&out.stderr));
        }
        assert!(Instant::now() < deadline, "serve never answered /healthz");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // The admin from the environment exists and logs in over a real socket.
    let r = http
        .post(format!("{base}/api/auth/login"))
        .json(&json!({"email": "boss@example.com", "password": "boss password 1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-request-id"));
    let body: Value = r.json().await.unwrap();
    assert!(body["access_token"].is_string());

    let healthcheck = run(
        subgate(&["healthcheck"], &[("BIND_ADDR", bind.as_str())]),
        None,
    )
    .await;
    assert!(
        healthcheck.status.success(),
        "{}",
        text(&healthcheck.stderr)
    );
    // Proxy variables meant for outbound calls (Docker passes its configured proxies into
    // containers) must not send the loopback health check to a proxy.
    let dead_proxy = format!("http://127.0.0.1:{}", free_port());
    let healthcheck = run(
        subgate(
            &["healthcheck"],
            &[
                ("BIND_ADDR", bind.as_str()),
                ("HTTP_PROXY", dead_proxy.as_str()),
                ("http_proxy", dead_proxy.as_str()),
                ("ALL_PROXY", dead_proxy.as_str()),
            ],
        ),
        None,
    )
    .await;
    assert!(
        healthcheck.status.success(),
        "healthcheck with proxy variables set: {}",
        text(&healthcheck.stderr)
    );

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let out = child.wait_with_output().unwrap();
    let logs = text(&out.stdout) + &text(&out.stderr);
    assert!(status.success(), "exit {status}: {logs}");
    assert!(
        !logs.contains("boss password 1"),
        "the password never reaches the log"
    );
    assert!(!logs.contains(JWT_SECRET));
    assert!(
        logs.contains("request_id"),
        "log lines carry the request id: {logs}"
    );

    let healthcheck = run(
        subgate(&["healthcheck"], &[("BIND_ADDR", bind.as_str())]),
        None,
    )
    .await;
    assert!(!healthcheck.status.success(), "nothing listens any more");
}
