//! `subgate serve` as the flood's target: started on a free port against the failover pair,
//! killed when dropped, and the script's failover steps.

use super::*;

/// `subgate serve`, killed when dropped.
pub(super) struct Server {
    pub(super) child: Child,
    pub(super) addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) async fn get_status(client: &reqwest::Client, url: &str) -> Option<u16> {
    client
        .get(url)
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

pub(super) async fn start_server(env: &Env, secret: &str) -> Result<Server, String> {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .to_string();
    let log = env.dir.join("subgate.log");
    let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let jwt: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let child = Command::new(env!("CARGO_BIN_EXE_subgate"))
        .arg("serve")
        .env_clear()
        .env("DATABASE_URL", &env.database_url)
        .env("BIND_ADDR", &addr)
        .env("JWT_SECRET", jwt)
        .env("WEBHOOK_SECRET", secret)
        .env("LOG_FORMAT", "json")
        .env("SWEEP_INTERVAL_SECS", "2")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot start subgate: {e}"))?;
    record_pid(child.id());
    let mut server = Server { child, addr };
    let http = reqwest::Client::new();
    let ready = format!("http://{}/readyz", server.addr);
    let started = Instant::now();
    loop {
        if get_status(&http, &ready).await == Some(200) {
            return Ok(server);
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!(
                "subgate exited ({status}) before it was ready; see {}",
                log.display()
            ));
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "subgate was not ready after 60 s; see {}",
                log.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs one failover step of the script: `kill` (the primary, then fences it) or `promote`.
pub(super) async fn failover_step(env: &Env, step: &str) -> Result<(), String> {
    let status = tokio::process::Command::new(&env.script)
        .arg(step)
        .arg(&env.dir)
        .stdin(Stdio::null())
        .status()
        .await
        .map_err(|e| format!("{} {step}: {e}", env.script))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{} {step} failed ({status})", env.script))
    }
}

/// How many sweeps the server's log reports finished.
pub(super) fn sweeps_logged(env: &Env) -> usize {
    std::fs::read_to_string(env.dir.join("subgate.log"))
        .unwrap_or_default()
        .matches(r#""message":"sweep finished""#)
        .count()
}
