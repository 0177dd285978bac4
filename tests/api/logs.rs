//! Log output of the `subgate` binary: colour codes only on a terminal, so logs written to a
//! file or a pipe stay plain text.

use std::process::{Command, Stdio};

use crate::helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp, url_for};

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
/// up to "listening".
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
            if line.contains("listening") {
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
