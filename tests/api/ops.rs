//! Operations basics — request ids, problem+json for unknown routes, health and
//! readiness (including a database outage and recovery without restart), configuration errors,
//! and the `subgate` binary's commands (serve, migrate, staff create and set-password,
//! healthcheck).

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

use crate::{
    auth::assert_problem,
    helpers::{self, ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp, test_env, url_for},
};

const BIN: &str = env!("CARGO_BIN_EXE_subgate");

fn is_uuid(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok()
}

/// A token for staff account `id`, signed with the test secret (for apps whose database is
/// unreachable, so login cannot be used).
fn token_for(id: i64) -> String {
    subgate::auth::issue_token(JWT_SECRET.as_bytes(), id, 0, Duration::from_secs(600)).unwrap()
}

// ---------------------------------------------------------------- request ids, routes

/// method, path, headers, body, expected status.
type Case<'a> = (Method, &'a str, Vec<(&'a str, &'a str)>, &'a str, u16);

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let app = TestApp::spawn().await;
    let token = format!("Bearer {}", app.token().await);
    let cases: Vec<Case> = vec![
        (Method::GET, "/healthz", vec![], "", 200),
        (Method::GET, "/readyz", vec![], "", 200),
        (
            Method::GET,
            "/api/subscribers",
            vec![("authorization", &token)],
            "",
            200,
        ),
        (Method::GET, "/api/subscribers", vec![], "", 401),
        (
            Method::GET,
            "/api/subscribers/999",
            vec![("authorization", &token)],
            "",
            404,
        ),
        (
            Method::POST,
            "/api/subscribers",
            vec![("authorization", &token)],
            "{}",
            422,
        ),
        (
            Method::POST,
            "/api/subscribers",
            vec![("authorization", &token)],
            "{",
            400,
        ),
        (Method::GET, "/no/such/route", vec![], "", 404),
        (
            Method::POST,
            "/api/auth/login",
            vec![],
            r#"{"email":"a@b.c","password":"x"}"#,
            401,
        ),
    ];
    let mut seen = std::collections::HashSet::new();
    for (method, path, headers, body, status) in &cases {
        let r = app
            .request(method.clone(), path, headers, body.to_string())
            .await;
        assert_eq!(r.status.as_u16(), *status, "{method} {path}");
        let id = r
            .header("x-request-id")
            .unwrap_or_else(|| panic!("{method} {path}: no id"));
        assert!(is_uuid(id), "{method} {path}: generated id {id:?}");
        assert!(seen.insert(id.to_string()), "ids are unique");

        // A request id the client sends is echoed.
        let mut with_id = headers.clone();
        with_id.push(("x-request-id", "client-chosen-id-42"));
        let r = app
            .request(method.clone(), path, &with_id, body.to_string())
            .await;
        assert_eq!(r.status.as_u16(), *status);
        assert_eq!(
            r.header("x-request-id"),
            Some("client-chosen-id-42"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problem_json() {
    let app = TestApp::spawn().await;
    for path in ["/", "/nope", "/api", "/api/nope", "/api/subscribers/1/nope"] {
        let r = app.request(Method::GET, path, &[], Body::empty()).await;
        assert_problem(&r, 404);
        assert!(r.header("x-request-id").is_some());
    }
    // A known path with a method it does not serve: 405 with Allow, as a problem document.
    let token = format!("Bearer {}", app.token().await);
    let r = app
        .request(
            Method::PUT,
            "/api/subscribers",
            &[("authorization", &token)],
            Body::empty(),
        )
        .await;
    assert_problem(&r, 405);
    let allow = r.header("allow").expect("Allow header");
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    assert!(r.header("x-request-id").is_some());
}

#[tokio::test]
async fn oversized_body_is_413() {
    let app = TestApp::spawn().await;
    let big = json!({"email": "a@example.com", "password": "x".repeat(300 * 1024)}).to_string();
    let r = app
        .request(
            Method::POST,
            "/api/auth/login",
            &[("content-type", "application/json")],
            big.clone(),
        )
        .await;
    assert_problem(&r, 413);
    let token = format!("Bearer {}", app.token().await);
    let r = app
        .request(
            Method::PATCH,
            "/api/subscribers/1",
            &[("authorization", &token)],
            big,
        )
        .await;
    assert_problem(&r, 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_timeout_is_503_problem_json() {
    let app = TestApp::spawn_with(|env| {
        env.insert("REQUEST_TIMEOUT_SECS".into(), "1".into());
    })
    .await;
    let s = app.create_subscriber(1).await;
    let sid = s["id"].as_i64().unwrap() as i32;
    // Hold the subscriber's row lock so the PATCH waits past the request timeout.
    let mut holder = app.db().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM subscribers WHERE id = $1 FOR UPDATE",
        &[&sid],
    )
    .await
    .unwrap();
    let started = Instant::now();
    let r = app
        .patch(
            &format!("/api/subscribers/{sid}"),
            json!({"username": "late"}),
        )
        .await;
    assert_problem(&r, 503);
    assert!(r.header("x-request-id").is_some());
    assert!(started.elapsed() < Duration::from_secs(5));
    tx.rollback().await.unwrap();
    // The abandoned request changed nothing, and the service goes on.
    let got = app
        .get(&format!("/api/subscribers/{sid}"))
        .await
        .expect(200);
    assert_eq!(got["username"], s["username"]);
    app.patch(
        &format!("/api/subscribers/{sid}"),
        json!({"username": "now"}),
    )
    .await
    .expect(200);
}

// ---------------------------------------------------------------- health and readiness

#[tokio::test]
async fn healthz_and_readyz() {
    let app = TestApp::spawn().await;
    let r = app
        .request(Method::GET, "/healthz", &[], Body::empty())
        .await;
    assert_eq!(r.expect(200), json!({"status": "ok"}));
    let r = app
        .request(Method::GET, "/readyz", &[], Body::empty())
        .await;
    assert_eq!(r.expect(200), json!({"status": "ready"}));
    // No credentials needed.
    assert_eq!(r.header("content-type"), Some("application/json"));
}

/// Config for an app whose database cannot be reached: no admin bootstrap (it would fail).
fn unreachable_db(env: &mut HashMap<String, String>) {
    env.insert(
        "DATABASE_URL".into(),
        "postgres://postgres@127.0.0.1:1/subgate".into(),
    );
    env.insert("ADMIN_EMAIL".into(), String::new());
    env.insert("ADMIN_PASSWORD".into(), String::new());
}

#[tokio::test]
async fn unreachable_database_gives_503_not_500() {
    let app = TestApp::spawn_with(unreachable_db).await;
    app.request(Method::GET, "/healthz", &[], Body::empty())
        .await
        .expect(200);
    let r = app
        .request(Method::GET, "/readyz", &[], Body::empty())
        .await;
    assert_problem(&r, 503);
    assert!(r.header("retry-after").is_some());

    let token = format!("Bearer {}", token_for(1));
    for (method, path, body) in [
        (Method::GET, "/api/subscribers", ""),
        (
            Method::POST,
            "/api/subscribers",
            r#"{"telegram_user_id": 1}"#,
        ),
        (Method::GET, "/api/channels/1", ""),
    ] {
        let r = app
            .request(
                method.clone(),
                path,
                &[
                    ("authorization", &token),
                    ("content-type", "application/json"),
                ],
                body.to_string(),
            )
            .await;
        let problem = assert_problem(&r, 503);
        let text = problem.to_string();
        assert!(
            !text.contains("127.0.0.1") && !text.contains("refused"),
            "opaque: {text}"
        );
    }
    // Login needs the database too: 503, not a misleading 401.
    assert_problem(&app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_exhaustion_gives_503_and_passes() {
    let app = TestApp::spawn_with(|env| {
        env.insert("DB_POOL_SIZE".into(), "1".into());
    })
    .await;
    app.token().await;
    let held = app.app_db().await; // the only connection
    let started = Instant::now();
    let r = app.get("/api/subscribers").await;
    assert_problem(&r, 503);
    assert!(r.header("retry-after").is_some());
    assert!(started.elapsed() < Duration::from_secs(15), "bounded wait");
    drop(held);
    app.get("/api/subscribers").await.expect(200);
}

#[tokio::test]
async fn readyz_is_503_until_migrations_are_applied() {
    let name = helpers::new_database_name();
    create_empty_database(&name).await;
    let url = url_for(&name);
    let app = TestApp::spawn_with(|env| {
        unreachable_db(env);
        env.insert("DATABASE_URL".into(), url.clone());
    })
    .await;
    assert_problem(
        &app.request(Method::GET, "/readyz", &[], Body::empty())
            .await,
        503,
    );
    subgate::db::migrate(&app.state.db).await.unwrap();
    app.request(Method::GET, "/readyz", &[], Body::empty())
        .await
        .expect(200);
}

/// A TCP proxy to the real PostgreSQL that a test can stop (closing every proxied connection)
/// and start again on the same port: a database outage and its end, without touching the server.
struct Proxy {
    port: u16,
    target: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let mut proxy = Proxy {
            port: 0,
            target,
            tasks: Arc::default(),
        };
        proxy.listen().await;
        proxy
    }

    async fn listen(&mut self) {
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
    async fn stop(&self) {
        let tasks: Vec<_> = self.tasks.lock().unwrap().drain(..).collect();
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

fn real_postgres() -> SocketAddr {
    let url = url::Url::parse(&helpers::admin_url()).unwrap();
    let host = url.host_str().unwrap_or("127.0.0.1").to_string();
    let port = url.port().unwrap_or(5432);
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .unwrap()
        .next()
        .unwrap()
}

async fn ready(app: &TestApp) -> u16 {
    app.request(Method::GET, "/readyz", &[], Body::empty())
        .await
        .status
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn service_recovers_from_a_database_outage_without_restart() {
    let mut proxy = Proxy::start(real_postgres()).await;
    let db_name = helpers::fresh_database().await;
    let mut url = url::Url::parse(&url_for(&db_name)).unwrap();
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(proxy.port)).unwrap();
    let url = url.to_string();
    let app = TestApp::spawn_with(|env| {
        env.insert("DATABASE_URL".into(), url.clone());
    })
    .await;
    assert_eq!(ready(&app).await, 200);
    app.create_subscriber(1).await;
    // Several pooled connections, so the outage hits idle ones too.
    let gets: Vec<_> = (0..4).map(|_| app.get("/api/subscribers")).collect();
    for r in futures::future::join_all(gets).await {
        r.expect(200);
    }

    proxy.stop().await;
    for _ in 0..3 {
        assert_problem(
            &app.request(Method::GET, "/readyz", &[], Body::empty())
                .await,
            503,
        );
        assert_problem(&app.get("/api/subscribers").await, 503);
        assert_problem(
            &app.post("/api/subscribers", json!({"telegram_user_id": 2}))
                .await,
            503,
        );
    }

    proxy.listen().await;
    // Recovers by itself: the next requests open new connections.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ready(&app).await != 200 {
        assert!(Instant::now() < deadline, "/readyz did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let list = app.get("/api/subscribers").await.expect(200);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    app.create_subscriber(2).await;
    proxy.stop().await;
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
    crate::auth::assert_bearer_401(
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
    let n: i64 = app
        .db()
        .await
        .query_one("SELECT count(*) FROM staff_accounts", &[])
        .await
        .unwrap()
        .get(0);
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
    crate::auth::assert_bearer_401(&list(old).await);
    crate::auth::assert_bearer_401(&app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await);
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

async fn create_empty_database(name: &str) {
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

// ---------------------------------------------------------------- malformed input

/// Bodies a careless or hostile client might send.
fn malformed_bodies() -> Vec<Vec<u8>> {
    let mut bodies: Vec<Vec<u8>> = [
        "",
        "{",
        "}",
        "null",
        "[]",
        "0",
        "\"text\"",
        "{\"a\":1}",
        "{\"id\": 1}",
        "{\"telegram_user_id\": 1e400}",
        "{\"telegram_user_id\": 18446744073709551616}",
        "{\"telegram_user_id\": -9223372036854775808}",
        "{\"telegram_chat_id\": 9223372036854775807, \"title\": \"t\", \"price_minor\": 9223372036854775807, \"currency\": \"UAH\", \"billing_period_days\": 2147483647}",
        "{\"subscriber_id\": 2147483647, \"channel_id\": -2147483648, \"days\": 3660}",
        "{\"username\": \"\\u0000\", \"title\": \"\\u0000\", \"display_name\": \"\\ud800\"}",
        "{\"expires_at\": \"0000-01-01T00:00:00Z\"}",
        "{\"expires_at\": \"9999-12-31T23:59:59Z\", \"status\": \"active\"}",
        "{\"expires_at\": \"2024-02-30T00:00:00Z\"}",
        "{\"email\": \"\\u0000\", \"password\": \"\\u0000\"}",
        "{\"email\": [], \"password\": {}}",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    bodies.push(vec![0xff, 0xfe, b'{', b'}']);
    bodies.push(format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes());
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_foundation_route_answers_5xx_to_malformed_input() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(1).await["id"].as_i64().unwrap();
    let c = app.create_channel(-1, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let m = app
        .post(
            "/api/memberships",
            json!({"subscriber_id": s, "channel_id": c, "days": 1}),
        )
        .await
        .expect(201)["id"]
        .as_i64()
        .unwrap();
    let token = format!("Bearer {}", app.token().await);
    let mut routes: Vec<(Method, String)> = vec![(Method::POST, "/api/auth/login".into())];
    for (collection, id) in [("subscribers", s), ("channels", c), ("memberships", m)] {
        routes.push((Method::POST, format!("/api/{collection}")));
        for item in [
            id.to_string(),
            "0".into(),
            "-1".into(),
            "99999999999999999999".into(),
            "%00".into(),
            "%F0%28".into(),
        ] {
            routes.push((Method::PATCH, format!("/api/{collection}/{item}")));
            routes.push((Method::GET, format!("/api/{collection}/{item}")));
        }
    }
    for (method, path) in &routes {
        for body in malformed_bodies() {
            let r = app
                .request(
                    method.clone(),
                    path,
                    &[
                        ("authorization", &token),
                        ("content-type", "application/json"),
                    ],
                    body.clone(),
                )
                .await;
            assert!(
                r.status.as_u16() < 500,
                "{method} {path} {:?} → {}: {}",
                String::from_utf8_lossy(&body[..body.len().min(80)]),
                r.status,
                String::from_utf8_lossy(&r.bytes)
            );
        }
    }
    for query in [
        "limit=99999999999999999999",
        "after=-99999999999999999999",
        "after=9223372036854775807",
        "limit=%00",
        "telegram_user_id=%00",
        "status=%00",
        "subscriber_id=2147483648",
        "active=%FF",
        "=",
        "&&&",
        "limit",
    ] {
        for collection in [
            "subscribers",
            "channels",
            "memberships",
            &format!("memberships/{m}/events"),
        ] {
            let path = format!("/api/{collection}?{query}");
            let r = app
                .request(
                    Method::GET,
                    &path,
                    &[("authorization", &token)],
                    Body::empty(),
                )
                .await;
            assert!(
                r.status.as_u16() < 500,
                "GET {path} → {}: {}",
                r.status,
                String::from_utf8_lossy(&r.bytes)
            );
        }
    }
}
