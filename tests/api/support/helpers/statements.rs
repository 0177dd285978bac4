//! Records every statement the application sends to PostgreSQL, for the snapshot
//! `tests/snapshots/statements.sql` that `make test` compares (docs/development.md,
//! "The statement snapshot").
//!
//! With `SUBGATE_RECORD_STATEMENTS=<dir>` set, [`route`] points a `DATABASE_URL` of the suite's
//! server at a small proxy of the PostgreSQL wire protocol that this test process runs on
//! 127.0.0.1. The proxy forwards every byte both ways unchanged and reads the frontend's
//! messages on their way to the server: the text of each Parse (`P`, which every prepared
//! statement sends) and of each simple Query (`Q`, which `batch_execute` sends) is a statement
//! exactly as PostgreSQL receives it. Each distinct text is appended once, as a JSON string on a
//! line of its own, to this process's file in `<dir>` before the server gets it, so a test that
//! panics loses nothing already sent and parallel tests never write over each other.
//! `scripts/statements.py` merges the files and compares them with the snapshot.
//!
//! The proxy declines TLS: it answers an `SSLRequest` with `N`, as a server without TLS does,
//! and the application's default `sslmode=prefer` goes on in plain text. A URL that requires TLS,
//! names other hosts or another port is never routed, and neither are the connections the tests
//! open to check rows (`TestApp::db`): those go straight to the server.

use std::{
    collections::HashSet,
    fs::{File, OpenOptions},
    io::Write,
    net::{SocketAddr, ToSocketAddrs},
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock, PoisonError},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The variable that switches recording on: the directory the statement files go to.
pub const RECORD_VAR: &str = "SUBGATE_RECORD_STATEMENTS";

/// Request codes of the startup phase that ask for an encrypted connection (TLS, GSSAPI); the
/// proxy declines both.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

/// The proxy of this process, started at the first [`route`] while recording is on.
struct Proxy {
    /// The server the suite's URLs name (`SUBGATE_TEST_DATABASE_URL`), as written there.
    host: String,
    port: u16,
    /// Where the proxy listens, on 127.0.0.1.
    listening: u16,
}

/// The statements seen by this process, and its file.
struct Log {
    seen: HashSet<String>,
    file: File,
}

/// `url` itself, or (while recording) the same URL through the recording proxy when it names
/// the suite's server alone and does not require TLS.
pub fn route(url: &str) -> String {
    let Some(proxy) = proxy() else {
        return url.to_string();
    };
    let Ok(mut parsed) = url::Url::parse(url) else {
        return url.to_string();
    };
    let same_server = parsed.host_str() == Some(proxy.host.as_str())
        && parsed.port().unwrap_or(5432) == proxy.port;
    // Hosts, ports or a TLS requirement in the query string: a connection the proxy must not
    // stand in for.
    let special = parsed.query_pairs().any(|(key, value)| match &*key {
        "host" | "hostaddr" | "port" => true,
        "sslmode" => !matches!(&*value, "disable" | "prefer"),
        _ => false,
    });
    if !same_server || special {
        return url.to_string();
    }
    parsed
        .set_host(Some("127.0.0.1"))
        .expect("a URL with a host takes another");
    parsed
        .set_port(Some(proxy.listening))
        .expect("a URL with a host takes a port");
    parsed.to_string()
}

fn proxy() -> Option<&'static Proxy> {
    static PROXY: OnceLock<Option<Proxy>> = OnceLock::new();
    PROXY.get_or_init(start).as_ref()
}

/// Opens this process's statement file and starts the proxy on a thread (and runtime) of its
/// own, so it outlives each test's runtime and serves every test of the process.
fn start() -> Option<Proxy> {
    let dir = PathBuf::from(std::env::var_os(RECORD_VAR).filter(|d| !d.is_empty())?);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("{RECORD_VAR}: cannot create {}: {e}", dir.display()));
    let path = dir.join(format!(
        "{}-{}.jsonl",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{RECORD_VAR}: cannot create {}: {e}", path.display()));
    let log = Arc::new(Mutex::new(Log {
        seen: HashSet::new(),
        file,
    }));

    let admin = url::Url::parse(&super::admin_url()).expect("SUBGATE_TEST_DATABASE_URL is a URL");
    let host = admin.host_str().unwrap_or("localhost").to_string();
    let port = admin.port().unwrap_or(5432);
    let server = (host.as_str(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| panic!("{RECORD_VAR}: cannot resolve {host}:{port}"));

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port for the proxy");
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let listening = listener.local_addr().expect("the proxy's port").port();
    std::thread::Builder::new()
        .name("statement-recorder".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the proxy's runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("the proxy's listener");
                while let Ok((client, _)) = listener.accept().await {
                    let log = log.clone();
                    tokio::spawn(async move {
                        let _ = relay(client, server, &log).await;
                    });
                }
            });
        })
        .expect("the proxy's thread");
    Some(Proxy {
        host,
        port,
        listening,
    })
}

/// One client connection: the startup phase (encryption declined, the startup packet passed on),
/// then bytes both ways, the frontend's read on the way.
async fn relay(mut client: TcpStream, server: SocketAddr, log: &Mutex<Log>) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    // Startup packets have no type byte: a length (itself included), then a request code.
    let startup = loop {
        let len = client.read_u32().await? as usize;
        if !(8..=65_536).contains(&len) {
            return Err(std::io::Error::other("not a PostgreSQL startup packet"));
        }
        let mut packet = (len as u32).to_be_bytes().to_vec();
        packet.resize(len, 0);
        client.read_exact(&mut packet[4..]).await?;
        let code = u32::from_be_bytes(packet[4..8].try_into().expect("four bytes"));
        if code == SSL_REQUEST || code == GSSENC_REQUEST {
            client.write_all(b"N").await?;
            continue;
        }
        break packet;
    };
    let mut upstream = TcpStream::connect(server).await?;
    upstream.set_nodelay(true)?;
    upstream.write_all(&startup).await?;

    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = upstream.into_split();
    // The server's side passes untouched; its end (a terminated backend, say) closes the
    // client's, as a direct connection would.
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    let mut frontend = Frontend::default();
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        frontend.feed(&buf[..n], &mut |text| record(log, text));
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    // The client's end (a dropped connection, say) reaches the server, which ends its backend.
    let _ = server_write.shutdown().await;
    let _ = back.await;
    Ok(())
}

/// Appends `text` to the process's file the first time the process sees it.
fn record(log: &Mutex<Log>, text: &str) {
    let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
    if log.seen.contains(text) {
        return;
    }
    let mut line = serde_json::to_string(text).expect("a string serializes");
    line.push('\n');
    log.file
        .write_all(line.as_bytes())
        .unwrap_or_else(|e| panic!("{RECORD_VAR}: cannot write a statement: {e}"));
    log.seen.insert(text.to_string());
}

/// The frontend's messages after the startup phase, read from the bytes as they come: a type
/// byte, a length (itself included), the body. Only Parse and Query bodies are kept whole;
/// the others (Bind values, COPY data) are skipped as they pass.
#[derive(Default)]
struct Frontend {
    pending: Vec<u8>,
    /// Bytes of a skipped message still to come.
    skip: usize,
    /// A length that cannot be: the stream is passed on without reading it further.
    lost: bool,
}

impl Frontend {
    fn feed(&mut self, bytes: &[u8], statement: &mut impl FnMut(&str)) {
        if self.lost {
            return;
        }
        let skipped = self.skip.min(bytes.len());
        self.skip -= skipped;
        self.pending.extend_from_slice(&bytes[skipped..]);
        let mut at = 0;
        while self.pending.len() - at >= 5 {
            let kind = self.pending[at];
            let len =
                u32::from_be_bytes(self.pending[at + 1..at + 5].try_into().expect("four bytes"))
                    as usize;
            if len < 4 {
                self.lost = true;
                self.pending.clear();
                return;
            }
            let end = at + 1 + len;
            if kind != b'P' && kind != b'Q' {
                if end > self.pending.len() {
                    self.skip = end - self.pending.len();
                    at = self.pending.len();
                    break;
                }
                at = end;
                continue;
            }
            if end > self.pending.len() {
                break;
            }
            // Parse: statement name, NUL, query, NUL, parameter types. Query: query, NUL.
            let mut fields = self.pending[at + 5..end].split(|b| *b == 0);
            if kind == b'P' {
                fields.next();
            }
            if let Some(text) = fields.next() {
                statement(&String::from_utf8_lossy(text));
            }
            at = end;
        }
        self.pending.drain(..at);
    }
}

#[cfg(test)]
mod tests {
    use super::Frontend;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend(((body.len() + 4) as u32).to_be_bytes());
        m.extend(body);
        m
    }

    #[test]
    fn parse_and_query_texts_are_read_across_any_split_and_the_rest_is_skipped() {
        let mut stream = Vec::new();
        stream.extend(message(b'P', b"s1\0SELECT $1::int\0\0\x01\0\0\0\x17"));
        stream.extend(message(b'B', &[7; 70_000]));
        stream.extend(message(b'Q', b"BEGIN; SELECT 'P'\0"));
        stream.extend(message(b'P', b"\0SELECT\n  2\0\0\0"));
        stream.extend(message(b'S', b""));
        for chunk in [1, 2, 5, 7, 4096, stream.len()] {
            let mut frontend = Frontend::default();
            let mut seen = Vec::new();
            for part in stream.chunks(chunk) {
                frontend.feed(part, &mut |text| seen.push(text.to_string()));
            }
            assert_eq!(
                seen,
                ["SELECT $1::int", "BEGIN; SELECT 'P'", "SELECT\n  2"],
                "chunks of {chunk}"
            );
            assert!(frontend.pending.is_empty() && frontend.skip == 0);
        }
    }
}
