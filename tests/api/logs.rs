//! Log output of the `subgate` binary: colour codes only on a terminal, so logs written to a
//! file or a pipe stay plain text.

use std::process::{Command, Stdio};

use crate::helpers::{JWT_SECRET, TestApp, url_for};

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
