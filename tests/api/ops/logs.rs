//! Log output of the `subgate` binary: colour codes only on a terminal, so logs written to a
//! file or a pipe stay plain text; with `LOG_FORMAT=json`, one JSON object per line, a line per
//! request with its request id, route, status and latency, no secret in any line, and each 5xx
//! logged once with its cause.

use std::process::{Command, Stdio};

use crate::support::helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp, url_for};

const BIN: &str = env!("CARGO_BIN_EXE_subgate");

/// Runs `subgate <args>` on a test's database with pretty logs, stdout and stderr piped.
async fn run_piped(app: &TestApp, args: &[&str]) -> (String, String) {
    let url = url_for(&app.db_name);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .args(&args)
            .env_clear()
            .env("DATABASE_URL", &url)
            .env("JWT_SECRET", JWT_SECRET)
            .env("LOG_FORMAT", "pretty")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("the subgate binary runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn logs_to_a_pipe_carry_no_colour_codes() {
    let app = TestApp::spawn().await;
    // `migrate` logs to standard output.
    let (stdout, _) = run_piped(&app, &["migrate"]).await;
    assert!(stdout.contains("database migrated"), "{stdout:?}");
    assert!(!stdout.contains('\u{1b}'), "ANSI escape in {stdout:?}");

    // `sweep` prints its report on standard output and logs to standard error.
    let (stdout, stderr) = run_piped(&app, &["sweep"]).await;
    assert!(stdout.starts_with('{'), "{stdout:?}");
    assert!(!stdout.contains('\u{1b}'), "ANSI escape in {stdout:?}");
    assert!(!stderr.contains('\u{1b}'), "ANSI escape in {stderr:?}");
}

/// Starts `subgate serve` on a test's database (whose admin already exists with
/// `helpers::ADMIN_PASSWORD`) with `password` as `ADMIN_PASSWORD`, and returns what it logged
/// until it has said both "listening" and whether `ADMIN_PASSWORD` was applied.
async fn serve_start_log(app: &TestApp, password: &str) -> String {
    use std::io::{BufRead, BufReader};
    let url = url_for(&app.db_name);
    let password = password.to_string();
    tokio::task::spawn_blocking(move || {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(BIN)
            .arg("serve")
            .env_clear()
            .env("DATABASE_URL", &url)
            .env("JWT_SECRET", JWT_SECRET)
            .env("BCRYPT_COST", "4")
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .env("ADMIN_EMAIL", ADMIN_EMAIL)
            .env("ADMIN_PASSWORD", &password)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the subgate binary runs");
        let mut log = String::new();
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            log.push_str(&line);
            log.push('\n');
            // The admin check runs beside start-up: its line may come before or after.
            if log.contains("listening") && log.contains("ADMIN_PASSWORD") {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        log
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn serve_says_whether_admin_password_was_applied_to_an_existing_account() {
    let app = TestApp::spawn().await;

    let log = serve_start_log(&app, "another password 1").await;
    assert!(log.contains("listening"), "{log}");
    assert!(
        log.contains("WARN") && log.contains("ADMIN_PASSWORD was NOT applied"),
        "{log}"
    );
    // The existing password still works; the other one was not applied.
    app.login(ADMIN_EMAIL, ADMIN_PASSWORD).await.expect(200);
    app.login(ADMIN_EMAIL, "another password 1")
        .await
        .expect(401);

    let log = serve_start_log(&app, ADMIN_PASSWORD).await;
    assert!(log.contains("ADMIN_PASSWORD is its password"), "{log}");
    assert!(!log.contains("NOT applied"), "{log}");
}

// ---- JSON logs: one object per line, request fields, no secrets, a 5xx logged once ----

/// Every line of `text` as a JSON object (panics naming a line that is not one).
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"));
            assert!(v.is_object(), "not an object: {l}");
            for field in ["timestamp", "level", "message"] {
                assert!(v.get(field).is_some(), "no {field} in {l}");
            }
            v
        })
        .collect()
}

/// The request id a line was logged under (its request span's field).
fn request_id_of(line: &serde_json::Value) -> Option<&str> {
    line["span"]["request_id"].as_str()
}

/// The "request finished" line of each request, checked: request id, matched route, method,
/// status and latency.
fn finished_lines(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    let finished: Vec<_> = lines
        .iter()
        .filter(|l| l["message"] == "request finished")
        .collect();
    for l in &finished {
        assert!(
            request_id_of(l).is_some_and(|id| uuid::Uuid::parse_str(id).is_ok()),
            "{l}"
        );
        assert!(l["span"]["route"].is_string(), "{l}");
        assert!(l["span"]["method"].is_string(), "{l}");
        assert!(l["status"].is_u64(), "{l}");
        assert!(l["latency_ms"].is_number(), "{l}");
    }
    finished
}

/// `subgate serve` with `LOG_FORMAT=json`, every secret configured and a bot token whose Bot
/// API is the fake: requests bearing each kind of credential (a staff JWT, the sweep token, a
/// Standard Webhooks signature, Telegram's secret header, passwords) and an effect performed
/// through the Bot API leave one JSON object per line, a "request finished" line per request
/// with its request id, route, status and latency, and no secret anywhere.
#[tokio::test]
async fn json_logs_have_request_fields_and_no_secrets() {
    use crate::support::{
        fake_bot::{FakeBot, TOKEN, TOKEN_SECRET},
        helpers::{
            SWEEP_TOKEN, TELEGRAM_SECRET, WAYFORPAY_ACCOUNT, WAYFORPAY_KEY, WEBHOOK_SECRET,
            payment_event, signed_headers,
        },
    };
    use serde_json::json;

    let fake = FakeBot::start().await;
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(7501).await["id"].as_i64().unwrap();
    let c = app.create_channel(-1_001_000_007_501, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let order = app.create_order(s, c).await;

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let child = tokio::process::Command::new(BIN)
        .arg("serve")
        .env_clear()
        .env("DATABASE_URL", url_for(&app.db_name))
        .env("JWT_SECRET", JWT_SECRET)
        .env("BCRYPT_COST", "4")
        .env("BIND_ADDR", format!("127.0.0.1:{port}"))
        .env("LOG_FORMAT", "json")
        .env("ADMIN_EMAIL", ADMIN_EMAIL)
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("WEBHOOK_SECRET", WEBHOOK_SECRET)
        .env("WAYFORPAY_MERCHANT_ACCOUNT", WAYFORPAY_ACCOUNT)
        .env("WAYFORPAY_SECRET_KEY", WAYFORPAY_KEY)
        .env("TELEGRAM_WEBHOOK_SECRET", TELEGRAM_SECRET)
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_API_URL", &fake.url)
        .env("SWEEP_TOKEN", SWEEP_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the subgate binary runs");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while http.get(format!("{base}/readyz")).send().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "serve did not start");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let mut request_ids = Vec::new();
    let mut note = |r: &reqwest::Response| {
        request_ids.push(r.headers()["x-request-id"].to_str().unwrap().to_string());
    };
    let r = http.get(format!("{base}/readyz")).send().await.unwrap();
    note(&r);
    // Logins: the right password and a wrong one.
    let r = http
        .post(format!("{base}/api/auth/login"))
        .json(&json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))
        .send()
        .await
        .unwrap();
    note(&r);
    let token = r.json::<serde_json::Value>().await.unwrap()["access_token"]
        .as_str()
        .unwrap()
        .to_string();
    let wrong_password = "wrong horse battery staple 7501";
    let r = http
        .post(format!("{base}/api/auth/login"))
        .json(&json!({"email": ADMIN_EMAIL, "password": wrong_password}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    note(&r);
    // Staff requests with the JWT, a forged JWT, and the sweep token.
    let r = http
        .get(format!("{base}/api/subscribers/{s}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    note(&r);
    let forged = format!("{token}x");
    let r = http
        .get(format!("{base}/api/subscribers"))
        .bearer_auth(&forged)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    note(&r);
    let r = http
        .post(format!("{base}/api/sweep"))
        .bearer_auth(SWEEP_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    note(&r);
    // Door 1: a signed payment (its grant is performed through the Bot API), and a body whose
    // signature does not verify.
    let body = payment_event(
        "pay_logs_7501",
        order["reference"].as_str().unwrap(),
        order["amount_minor"].as_i64().unwrap(),
        "UAH",
    )
    .to_string();
    let headers = signed_headers(
        WEBHOOK_SECRET,
        "msg_logs_7501",
        chrono::Utc::now().timestamp(),
        &body,
    );
    let mut signatures = Vec::new();
    let mut send_signed = |body: String, headers: Vec<(&'static str, String)>| {
        let mut req = http
            .post(format!("{base}/api/webhook/payment"))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            if k == "webhook-signature" {
                signatures.push(v.clone());
            }
            req = req.header(k, v);
        }
        req.send()
    };
    let r = send_signed(body.clone(), headers.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    note(&r);
    let tampered = body.replace("pay_logs_7501", "pay_logs_7502");
    let r = send_signed(tampered, headers).await.unwrap();
    assert_eq!(r.status(), 401);
    note(&r);
    // Door 3 with Telegram's secret header, and with a wrong one.
    for secret in [TELEGRAM_SECRET, "wrong-telegram-secret-7501"] {
        let r = http
            .post(format!("{base}/api/webhook/telegram"))
            .header("x-telegram-bot-api-secret-token", secret)
            .json(&json!({"update_id": 7501}))
            .send()
            .await
            .unwrap();
        note(&r);
    }

    // The worker inside serve performs the grant through the fake Bot API.
    while !fake.calls().iter().any(|c| c.method == "sendMessage") {
        assert!(
            std::time::Instant::now() < deadline,
            "the grant was not performed: {:?}",
            fake.methods()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Let the worker record the attempt before stopping.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let pid = child.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = tokio::time::timeout(std::time::Duration::from_secs(15), child.wait_with_output())
        .await
        .expect("serve stops on SIGTERM")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");

    let lines = json_lines(&stdout);
    let finished = finished_lines(&lines);
    for id in &request_ids {
        let of_request: Vec<_> = finished
            .iter()
            .filter(|l| request_id_of(l) == Some(id.as_str()))
            .collect();
        assert_eq!(of_request.len(), 1, "one finished line for {id}:\n{stdout}");
    }
    let routes: Vec<&str> = finished
        .iter()
        .filter_map(|l| l["span"]["route"].as_str())
        .collect();
    assert!(routes.contains(&"/api/subscribers/{id}"), "{routes:?}");
    assert!(routes.contains(&"/api/webhook/payment"), "{routes:?}");
    assert!(
        stdout.contains("effect attempted"),
        "the effect was performed and logged:\n{stdout}"
    );

    let whsec_key = WEBHOOK_SECRET.trim_start_matches("whsec_");
    let mut secrets = vec![
        JWT_SECRET,
        token.as_str(),
        forged.as_str(),
        ADMIN_PASSWORD,
        wrong_password,
        WEBHOOK_SECRET,
        whsec_key,
        WAYFORPAY_KEY,
        TELEGRAM_SECRET,
        "wrong-telegram-secret-7501",
        TOKEN,
        TOKEN_SECRET,
        SWEEP_TOKEN,
    ];
    let signature_values: Vec<String> = signatures
        .iter()
        .flat_map(|s| {
            s.split(' ')
                .map(|v| v.trim_start_matches("v1,").to_string())
        })
        .collect();
    secrets.extend(signature_values.iter().map(String::as_str));
    // The JWT's signature part alone, too.
    let jwt_signature = token.rsplit('.').next().unwrap().to_string();
    secrets.push(&jwt_signature);
    for line in stdout.lines().chain(stderr.lines()) {
        for secret in &secrets {
            assert!(
                !line.contains(secret),
                "a secret ({}…) reached a log line: {line}",
                &secret[..6]
            );
        }
    }
}

/// A writer the test's subscriber logs into.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// The lines logged under any of the requests `ids`, cloned.
fn lines_of_requests(lines: &[serde_json::Value], ids: &[&str]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .filter(|l| request_id_of(l).is_some_and(|id| ids.contains(&id)))
        .cloned()
        .collect()
}

/// The lines logged under request `id`.
fn lines_of<'a>(lines: &'a [serde_json::Value], id: &str) -> Vec<&'a serde_json::Value> {
    lines
        .iter()
        .filter(|l| request_id_of(l) == Some(id))
        .collect()
}

/// A 5xx is logged once with its cause, at the place that made it: a database error (500) and
/// the request timeout (503). The request's "request finished" line carries the status; no
/// second error line says the same without the cause.
#[tokio::test]
async fn a_5xx_is_logged_once_with_its_cause() {
    use axum::http::Method;
    use serde_json::json;

    let logs = Captured::default();
    // The service's JSON format (`subgate::init_tracing`), into `logs`, for this thread only.
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_span_list(false)
        .with_target(false)
        .with_env_filter("info")
        .with_writer(logs.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();

    let app = TestApp::spawn_with(|env| {
        env.insert("REQUEST_TIMEOUT_SECS".into(), "1".into());
    })
    .await;
    let s = app.create_subscriber(7601).await["id"].as_i64().unwrap();

    // A schema the code does not expect: the list query fails with 42703, a 500.
    app.db()
        .await
        .batch_execute("ALTER TABLE subscribers RENAME COLUMN username TO username_gone")
        .await
        .unwrap();
    tracing::callsite::rebuild_interest_cache();
    let broken = app.get("/api/subscribers").await;
    assert_eq!(broken.status.as_u16(), 500);
    let broken_id = broken.header("x-request-id").unwrap().to_string();
    app.db()
        .await
        .batch_execute("ALTER TABLE subscribers RENAME COLUMN username_gone TO username")
        .await
        .unwrap();

    // A write stuck behind a row lock past REQUEST_TIMEOUT_SECS: the timeout's 503.
    let (holder, conn) = tokio_postgres::connect(&url_for(&app.db_name), tokio_postgres::NoTls)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM subscribers WHERE id = {s} FOR UPDATE"
        ))
        .await
        .unwrap();
    tracing::callsite::rebuild_interest_cache();
    let slow = app
        .patch(
            &format!("/api/subscribers/{s}"),
            json!({"username": "late"}),
        )
        .await;
    assert_eq!(slow.status.as_u16(), 503);
    let slow_id = slow.header("x-request-id").unwrap().to_string();
    holder.batch_execute("ROLLBACK").await.unwrap();
    drop(holder);
    let _ = conn.await;
    let fine = app
        .staff(Method::GET, &format!("/api/subscribers/{s}"), json!(null))
        .await;
    assert_eq!(fine.status.as_u16(), 200);

    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    let lines = json_lines(&text);
    // Only this test's requests after the interest rebuilds are checked: a callsite another
    // test's thread was registering while this subscriber was set may have missed it at first.
    let checked = lines_of_requests(&lines, &[&broken_id, &slow_id]);
    let finished = finished_lines(&checked);
    assert!(
        !text.contains("response failed"),
        "no second error line for a 5xx:\n{text}"
    );

    let cases = [
        (&broken_id, 500, "42703", "/api/subscribers"),
        (&slow_id, 503, "timed out", "/api/subscribers/{id}"),
    ];
    for (id, status, cause, route) in cases {
        let of_request = lines_of(&lines, id);
        let problems: Vec<_> = of_request
            .iter()
            .filter(|l| l["level"] == "ERROR" || l["level"] == "WARN")
            .collect();
        assert_eq!(
            problems.len(),
            1,
            "the {status} is logged once, with its cause:\n{text}"
        );
        assert!(
            problems[0].to_string().contains(cause),
            "its cause ({cause}) is in the line: {}",
            problems[0]
        );
        let done: Vec<_> = finished
            .iter()
            .filter(|l| request_id_of(l) == Some(id.as_str()))
            .collect();
        assert_eq!(done.len(), 1, "{text}");
        assert_eq!(done[0]["status"], status);
        assert_eq!(done[0]["span"]["route"], route);
    }
}

/// A client-chosen `x-request-id` is echoed and logged only when it is 1..64 of
/// `A-Za-z0-9-_.`; any other (overlong, with spaces or control characters, non-ASCII, sent
/// twice) is replaced by a generated UUID in the response and in the request's log lines, and
/// never appears in the log.
#[tokio::test]
async fn only_a_plain_client_request_id_is_echoed_and_logged() {
    use axum::{
        body::Body,
        http::{HeaderValue, Request},
    };

    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_span_list(false)
        .with_target(false)
        .with_env_filter("info")
        .with_writer(logs.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    let app = TestApp::spawn().await;
    tracing::callsite::rebuild_interest_cache();

    let send = |ids: Vec<Vec<u8>>| {
        let mut req = Request::get("/healthz");
        for id in ids {
            req = req.header("x-request-id", HeaderValue::from_bytes(&id).unwrap());
        }
        app.send(req.body(Body::empty()).unwrap())
    };
    let kept = ["plain-id_7.x", &"k".repeat(64)];
    let mut echoed = Vec::new();
    for id in kept {
        let r = send(vec![id.as_bytes().to_vec()]).await;
        assert_eq!(r.header("x-request-id"), Some(id));
        echoed.push(id.to_string());
    }
    let refused: Vec<Vec<Vec<u8>>> = vec![
        vec!["r".repeat(65).into_bytes()],
        vec![b"two words".to_vec()],
        vec![b"tab\there".to_vec()],
        vec!["caf\u{e9}-id".as_bytes().to_vec()],
        vec![b"obs\xfftext".to_vec()],
        vec![b"quote\"id".to_vec()],
        vec![b"first-id".to_vec(), b"second-id".to_vec()],
    ];
    let mut generated = Vec::new();
    for ids in &refused {
        let r = send(ids.clone()).await;
        let id = r.header("x-request-id").expect("a request id").to_string();
        assert!(
            uuid::Uuid::parse_str(&id).is_ok(),
            "{ids:?} replaced by a generated id, got {id:?}"
        );
        generated.push(id);
    }

    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    let lines = json_lines(&text);
    for id in echoed.iter().chain(&generated) {
        let done: Vec<_> = lines_of(&lines, id)
            .into_iter()
            .filter(|l| l["message"] == "request finished")
            .collect();
        assert_eq!(
            done.len(),
            1,
            "one finished line logged under {id}:\n{text}"
        );
    }
    for ids in &refused {
        for id in ids {
            let shown = String::from_utf8_lossy(id);
            assert!(
                !text.contains(shown.as_ref()),
                "a refused id ({shown:?}) reached the log:\n{text}"
            );
        }
    }
}
