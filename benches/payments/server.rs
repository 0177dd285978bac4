//! The real server under test: the release-built `subgate serve` binary started as a child
//! process on its own database and a free loopback port, timed from spawn to its first 200 from
//! `/readyz`, measured through `/proc/<pid>/status`, and stopped with SIGTERM (SIGKILL if it
//! lingers, if the benchmark itself fails while it runs, or to crash it on purpose).

use std::{
    fs::File,
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::http;

/// A running `subgate serve`.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// From `spawn` to the first 200 from `/readyz`.
    pub ready_after: Duration,
}

/// The configuration the server is started with: the bench database, a fresh staff-token key
/// and the door-1 key the load generator signs with, and whatever `extra` a benchmark adds
/// (the payment benchmark: nothing — no Telegram, no in-process sweep — so the payment path is
/// all it does).
pub struct ServerEnv<'a> {
    pub database_url: &'a str,
    /// `DATABASE_CA_CERT`: the CA of the private cluster's certificate, for `sslmode=require`.
    pub ca_cert: Option<&'a Path>,
    pub webhook_secret: &'a str,
    pub jwt_secret: &'a str,
    pub extra: &'a [(&'a str, String)],
    /// Another `subgate` binary to start (an older build, to compare); `None`: this build's.
    pub bin: Option<&'a str>,
}

impl Server {
    /// Starts the server as an operator would (`subgate serve`, which checks that every
    /// migration is applied) and waits until it is ready (at most 30 s). Its output goes to
    /// `log` (appended: one file for every start of a run).
    pub async fn start(env: &ServerEnv<'_>, log: &Path) -> Result<Server, String> {
        let addr = free_port()?;
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let bin = env.bin.unwrap_or(env!("CARGO_BIN_EXE_subgate"));
        let mut command = Command::new(bin);
        command
            .arg("serve")
            .env_clear()
            .env("DATABASE_URL", env.database_url)
            .env("BIND_ADDR", addr.to_string())
            .env("JWT_SECRET", env.jwt_secret)
            .env("WEBHOOK_SECRET", env.webhook_secret)
            .env("LOG_FORMAT", "json")
            .envs(env.extra.iter().map(|(k, v)| (*k, v.as_str())));
        if let Some(ca) = env.ca_cert {
            command.env("DATABASE_CA_CERT", ca);
        }
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        let started = Instant::now();
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {bin}: {e}"))?;
        crate::record_pid(child.id());
        let mut server = Server {
            child,
            addr,
            ready_after: Duration::ZERO,
        };
        loop {
            if http::get_status(addr, "/readyz").await == Some(200) {
                server.ready_after = started.elapsed();
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "the server exited ({status}) before it was ready; see {}",
                    log.display()
                ));
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "the server was not ready after 30 s; see {}",
                    log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size in bytes (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// SIGKILL, as `kill -9` does: no graceful shutdown, nothing in hand finished. Returns once
    /// the process is gone.
    #[allow(dead_code)] // only the benchmarks that crash the server
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to 10 s for the graceful shutdown; SIGKILL after that.
    pub async fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    /// A server still running here was left by a failure: it must not outlive the benchmark.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A loopback port nobody listens on now (the kernel's pick; the server binds it right after).
fn free_port() -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map_err(|e| e.to_string())
}
