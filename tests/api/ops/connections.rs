//! Connection hygiene of `subgate serve` over raw TCP: a client that sends its headers one line
//! at a time, or nothing at all, is closed after `HEADER_READ_TIMEOUT_SECS`; a keep-alive
//! connection stays usable between requests until `IDLE_TIMEOUT_SECS`; at most
//! `MAX_CONNECTIONS` connections are served at once, a further one waits for a free slot; a
//! response its client stops reading ends once no byte has left for `IDLE_TIMEOUT_SECS`; and a
//! normal request is answered throughout.
//!
//! Waits are bounded generously (a loaded machine), and only lower bounds the server cannot
//! undercut are asserted on timing.

use std::time::{Duration, Instant};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
    process::{Child, Command},
};

use crate::support::helpers::{ADMIN_EMAIL, ADMIN_PASSWORD, JWT_SECRET, TestApp, url_for};

const BIN: &str = env!("CARGO_BIN_EXE_subgate");

/// The longest any wait in these tests may take before it counts as "never".
const NEVER: Duration = Duration::from_secs(30);

/// `subgate serve` on the test's database with `vars` added; returns once it answers.
async fn serve(app: &TestApp, vars: &[(&str, &str)]) -> (Child, String) {
    serve_limited(app, vars, None).await
}

/// [`serve`], with at most `open_files` file descriptors (`ulimit -n`) when given.
async fn serve_limited(
    app: &TestApp,
    vars: &[(&str, &str)],
    open_files: Option<u32>,
) -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = match open_files {
        None => Command::new(BIN),
        Some(n) => {
            let mut sh = Command::new("/bin/sh");
            sh.arg("-c")
                .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                .arg(BIN);
            sh
        }
    };
    cmd.arg("serve")
        .env_clear()
        .env("DATABASE_URL", url_for(&app.db_name))
        .env("JWT_SECRET", JWT_SECRET)
        .env("BCRYPT_COST", "4")
        .env("BIND_ADDR", &addr)
        .env("ADMIN_EMAIL", ADMIN_EMAIL)
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("the subgate binary runs");
    let deadline = Instant::now() + NEVER;
    loop {
        if let Ok(mut s) = TcpStream::connect(&addr).await
            && get(&mut s, "/healthz")
                .await
                .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        {
            return (child, addr);
        }
        assert!(Instant::now() < deadline, "serve did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `GET path` on a kept-alive connection and reads its whole response (head and a
/// `content-length` body); `None` when the connection closed first.
async fn get(stream: &mut TcpStream, path: &str) -> Option<String> {
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    read_response(stream).await
}

async fn read_response(stream: &mut TcpStream) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return Some(text);
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// How long after `since` the server closed the connection (a read gives EOF or an error),
/// discarding anything it sent; `None` if it was still open after [`NEVER`].
async fn closed_after<R: AsyncReadExt + Unpin>(stream: &mut R, since: Instant) -> Option<Duration> {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(NEVER, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return since.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// A normal request on a fresh connection is answered.
async fn answered(addr: &str) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(NEVER)
        .build()
        .unwrap();
    let r = http.get(format!("http://{addr}/readyz")).send().await;
    assert_eq!(r.expect("a normal request is answered").status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_connections_are_closed_while_others_are_served() {
    let app = TestApp::spawn().await;
    let (_server, addr) = serve(
        &app,
        &[
            ("HEADER_READ_TIMEOUT_SECS", "1"),
            ("IDLE_TIMEOUT_SECS", "6"),
        ],
    )
    .await;

    // Slowloris: a request line, then one header line every 200 ms, never the blank line. Bytes
    // keep arriving, so only a deadline on the whole head can close it.
    let slow_start = Instant::now();
    let slow = TcpStream::connect(&addr).await.unwrap();
    let (mut slow_read, mut slow_write) = slow.into_split();
    let trickle = tokio::spawn(async move {
        slow_write
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n")
            .await?;
        for n in 0.. {
            tokio::time::sleep(Duration::from_millis(200)).await;
            slow_write
                .write_all(format!("x-slow-{n}: 1\r\n").as_bytes())
                .await?;
            if slow_start.elapsed() > NEVER {
                break;
            }
        }
        std::io::Result::Ok(())
    });
    // Silent: connects and sends nothing.
    let silent_start = Instant::now();
    let mut silent = TcpStream::connect(&addr).await.unwrap();

    // Meanwhile a normal client is served.
    answered(&addr).await;

    let slow_closed = closed_after(&mut slow_read, slow_start).await;
    let slow_closed = slow_closed.expect("a connection sending its headers slowly is closed");
    assert!(slow_closed >= Duration::from_millis(900), "{slow_closed:?}");
    assert!(
        trickle.await.unwrap().is_err(),
        "the slow client's writes fail once it is closed"
    );
    let silent_closed = closed_after(&mut silent, silent_start)
        .await
        .expect("a connection that sends nothing is closed");
    assert!(
        silent_closed >= Duration::from_millis(900),
        "{silent_closed:?}"
    );

    // Keep-alive: the connection outlives the header timeout between requests...
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    let first = get(&mut kept, "/healthz").await.expect("first response");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sent = Instant::now();
    let second = get(&mut kept, "/healthz")
        .await
        .expect("a keep-alive connection idle past the header timeout still serves");
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    // ...and is closed once idle for IDLE_TIMEOUT_SECS.
    let idle_closed = closed_after(&mut kept, sent)
        .await
        .expect("an idle keep-alive connection is closed");
    assert!(idle_closed >= Duration::from_secs(5), "{idle_closed:?}");

    answered(&addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_client_waits_for_a_free_slot() {
    let app = TestApp::spawn().await;
    let (_server, addr) = serve(
        &app,
        &[("MAX_CONNECTIONS", "4"), ("HEADER_READ_TIMEOUT_SECS", "1")],
    )
    .await;
    // serve()'s readiness probe has closed its connection; give the server a moment to see it.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Four kept-alive connections, each served once and then idle (IDLE_TIMEOUT_SECS is 60).
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let r = get(&mut s, "/healthz").await.expect("served under the cap");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        held.push(s);
    }
    // A fifth connects (the kernel queues it) but is not served while the four are open.
    let mut fifth = TcpStream::connect(&addr).await.unwrap();
    fifth
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    let early = tokio::time::timeout(Duration::from_millis(1500), read_response(&mut fifth)).await;
    assert!(
        early.is_err(),
        "a fifth connection is not served beside four: {early:?}"
    );
    // One of the four leaves: the fifth is accepted and its waiting request answered.
    drop(held.pop());
    let r = tokio::time::timeout(NEVER, read_response(&mut fifth))
        .await
        .expect("the fifth is served once a slot frees")
        .expect("a response");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    drop(held);
    drop(fifth);

    // Four silent connections fill the cap; the header timeout frees their slots, so a normal
    // request is still answered.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    answered(&addr).await;
    for mut s in silent {
        closed_after(&mut s, Instant::now())
            .await
            .expect("a silent connection is closed");
    }
    answered(&addr).await;
}

/// The reported scenario: with 64 file descriptors, 60 connections that never send their headers
/// used to leave the server unable to answer. Now the cap keeps descriptors for the database
/// and the header timeout frees the slots, so a normal request (one that needs the database)
/// is answered and every slow connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_silent_connections_do_not_starve_a_server_with_64_descriptors() {
    let app = TestApp::spawn().await;
    let (_server, addr) = serve_limited(
        &app,
        &[("MAX_CONNECTIONS", "24"), ("HEADER_READ_TIMEOUT_SECS", "1")],
        Some(64),
    )
    .await;
    let start = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..60 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    answered(&addr).await;
    for s in &mut silent {
        closed_after(s, start)
            .await
            .expect("every silent connection is closed");
    }
    answered(&addr).await;
}

/// The reported scenario: as many clients as `MAX_CONNECTIONS` ask for a large CSV export and
/// read nothing (a small receive buffer, so the server's send buffer fills). Each response
/// ends once no byte of it has left for `IDLE_TIMEOUT_SECS`, its connection is closed and its
/// slot freed: `/healthz`, queued behind them, is answered, and so is a second client while
/// the first still holds its slot, so both stalled connections were cut. Each stalled client
/// then finds its file cut short (no last chunk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_a_response_are_cut_off_after_the_idle_timeout() {
    const ROWS: i64 = 60_000;
    let app = TestApp::spawn().await;
    // About 13 MB of CSV: more than the kernel and hyper buffer for one connection.
    app.db()
        .await
        .execute(
            "INSERT INTO subscribers (telegram_user_id, username, display_name)
             SELECT g, 'user' || g, repeat('n', 120) FROM generate_series(1, $1::bigint) g",
            &[&ROWS],
        )
        .await
        .unwrap();
    let token = app.token().await;
    let (_server, addr) = serve(
        &app,
        &[("MAX_CONNECTIONS", "2"), ("IDLE_TIMEOUT_SECS", "2")],
    )
    .await;
    // serve()'s readiness probe has closed its connection; give the server a moment to see it.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut stalled = Vec::new();
    for _ in 0..2 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(addr.parse().unwrap()).await.unwrap();
        s.write_all(
            format!(
                "GET /api/subscribers.csv HTTP/1.1\r\nhost: test\r\n\
                 authorization: Bearer {token}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        stalled.push(s);
    }
    let start = Instant::now();
    let health = |mut probe: TcpStream| async move {
        let r = tokio::time::timeout(NEVER, get(&mut probe, "/healthz"))
            .await
            .expect("/healthz is answered once a stalled response is cut off")
            .expect("a response");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        probe
    };
    let mut first = health(TcpStream::connect(&addr).await.unwrap()).await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(1),
        "/healthz waited for a slot: {waited:?}"
    );
    // The first client keeps its slot (a request's head under way: HEADER_READ_TIMEOUT_SECS is
    // 10), so the second is served only in the other stalled connection's slot.
    first.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    health(TcpStream::connect(&addr).await.unwrap()).await;
    first.write_all(b"host: test\r\n\r\n").await.unwrap();
    let r = read_response(&mut first)
        .await
        .expect("the first client's connection was open throughout");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");

    for mut s in stalled {
        let mut got = Vec::new();
        tokio::time::timeout(NEVER, s.read_to_end(&mut got))
            .await
            .expect("a cut-off response's connection is closed")
            .ok();
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 200"),
            "{:?}",
            &text[..text.len().min(200)]
        );
        assert!(
            !text.ends_with("\r\n0\r\n\r\n"),
            "the file is cut short ({} bytes arrived)",
            got.len()
        );
        let lines = text.matches("\r\n").count();
        assert!(lines < ROWS as usize, "{lines} lines arrived of {ROWS}");
    }
    answered(&addr).await;
}
