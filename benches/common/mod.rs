//! What every benchmark shares: where its scratch databases live, how its figures are kept,
//! and, for those that drive a server, latencies and payments through door 1.

/// The admin URL benchmarks make their scratch databases with: `SUBGATE_TEST_DATABASE_URL`
/// (set by `make bench` the way `make test` sets it), else the local server.
pub fn admin_url() -> String {
    std::env::var("SUBGATE_TEST_DATABASE_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// The URL of database `name` on the same server as [`admin_url`].
pub fn url_for(name: &str) -> String {
    let mut url = url::Url::parse(&admin_url()).expect("SUBGATE_TEST_DATABASE_URL is a URL");
    url.set_path(&format!("/{name}"));
    url.to_string()
}

/// Appends a process id to `$SUBGATE_BENCH_PIDFILE`, so the script that started the benchmark
/// can stop what it started if it is interrupted.
#[allow(dead_code)] // only the benchmarks that start processes call it
pub fn record_pid(pid: u32) {
    use std::io::Write as _;
    if let Some(path) = std::env::var_os("SUBGATE_BENCH_PIDFILE").filter(|p| !p.is_empty())
        && let Ok(mut f) = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(f, "{pid}");
    }
}

/// A benchmark's `main` around its async `run`: nothing for `Ok(None)` options (`--help`),
/// exit 2 for bad options, else its pid recorded ([`record_pid`]) and `run` on one thread — the
/// load generator takes one core at most, like pgbench's single thread — exiting 1 when it
/// fails. `name` prefixes the messages.
#[allow(dead_code)] // only the benchmarks that drive a server
pub fn main_with<O, F>(name: &str, options: Result<Option<O>, String>, run: impl FnOnce(O) -> F)
where
    F: std::future::Future<Output = Result<(), String>>,
{
    let options = match options {
        Ok(Some(o)) => o,
        Ok(None) => return,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(2);
        }
    };
    record_pid(std::process::id());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(e) = runtime.block_on(run(options)) {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}

/// The benchmarks' work directory (`target/tmp/bench`), made if missing.
#[allow(dead_code)]
pub fn work_dir() -> Result<std::path::PathBuf, String> {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// A fresh server log `name` in [`work_dir`]: the path, with the file of an earlier run removed.
#[allow(dead_code)]
pub fn server_log(name: &str) -> Result<std::path::PathBuf, String> {
    let log = work_dir()?.join(name);
    let _ = std::fs::remove_file(&log);
    Ok(log)
}

/// A random Standard Webhooks secret (`whsec_` and 32 bytes in base64) for door 1.
#[allow(dead_code)]
pub fn webhook_secret() -> String {
    format!(
        "whsec_{}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            rand::random::<[u8; 32]>()
        )
    )
}

/// `bytes` random bytes in hex.
#[allow(dead_code)]
pub fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// CPU time process `pid` (or `self`) used so far, from `/proc/<pid>/stat`: its own (user +
/// system) and that of its children it has waited for.
fn process_cpu(pid: &str) -> (std::time::Duration, std::time::Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name's closing parenthesis: state is field 3, utime 14, stime 15,
    // cutime 16, cstime 17.
    let fields: Vec<u64> = stat.rsplit_once(')').map_or(Vec::new(), |(_, rest)| {
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect()
    });
    let ticks = |at: &[usize]| at.iter().filter_map(|i| fields.get(*i)).sum::<u64>();
    (
        ticks_to_time(ticks(&[11, 12])),
        ticks_to_time(ticks(&[13, 14])),
    )
}

/// Linux reports CPU time in USER_HZ, 100 per second everywhere it runs.
fn ticks_to_time(ticks: u64) -> std::time::Duration {
    std::time::Duration::from_millis(ticks * 10)
}

/// CPU time process `pid` used so far (user + system).
#[allow(dead_code)]
pub fn cpu_time(pid: u32) -> std::time::Duration {
    process_cpu(&pid.to_string()).0
}

/// CPU time used so far, read from `/proc`: the whole machine's busy time (every core: user,
/// nice, system, interrupts) and idle time (idle and waiting for I/O), this process's own, its
/// waited-for children's (pgbench) and one other process's (the server). Differences of two
/// readings say where a run's CPU went, and how much of the cores nobody used.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuClock {
    pub machine: std::time::Duration,
    pub idle: std::time::Duration,
    pub own: std::time::Duration,
    pub children: std::time::Duration,
    pub other: std::time::Duration,
}

#[allow(dead_code)]
impl CpuClock {
    /// Now, with `other`'s time when a process is named.
    pub fn now(other: Option<u32>) -> CpuClock {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        // `cpu  user nice system idle iowait irq softirq steal …`
        let ticks = |fields: &[usize]| -> u64 {
            stat.lines()
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .skip(1)
                .enumerate()
                .filter(|(i, _)| fields.contains(i))
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum()
        };
        let (own, children) = process_cpu("self");
        CpuClock {
            machine: ticks_to_time(ticks(&[0, 1, 2, 5, 6])),
            idle: ticks_to_time(ticks(&[3, 4])),
            own,
            children,
            other: other.map(cpu_time).unwrap_or_default(),
        }
    }

    /// Two spans' use added up.
    pub fn plus(&self, other: &CpuClock) -> CpuClock {
        CpuClock {
            machine: self.machine + other.machine,
            idle: self.idle + other.idle,
            own: self.own + other.own,
            children: self.children + other.children,
            other: self.other + other.other,
        }
    }

    /// What was used between `earlier` and this reading.
    pub fn since(&self, earlier: &CpuClock) -> CpuClock {
        CpuClock {
            machine: self.machine.saturating_sub(earlier.machine),
            idle: self.idle.saturating_sub(earlier.idle),
            own: self.own.saturating_sub(earlier.own),
            children: self.children.saturating_sub(earlier.children),
            other: self.other.saturating_sub(earlier.other),
        }
    }
}

/// This run's tag for database names: `SUBGATE_BENCH_RUN` when it is alphanumeric, else random.
#[allow(dead_code)]
pub fn run_tag() -> String {
    std::env::var("SUBGATE_BENCH_RUN")
        .ok()
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric()))
        .unwrap_or_else(|| random_hex(4))
        .to_lowercase()
}

/// A connection to [`admin_url`], its connection task spawned.
#[allow(dead_code)]
pub async fn connect_admin() -> Result<tokio_postgres::Client, String> {
    let (admin, connection) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot reach PostgreSQL ({e}); run `make bench`"))?;
    tokio::spawn(connection);
    Ok(admin)
}

/// This run's database of benchmark `kind`, `subgate_bench_<kind>_<tag>`, created on `admin`'s
/// server after dropping the `subgate_bench_<kind>_*` databases an interrupted run left behind
/// (one in use — another run's — refuses to go and stays). Returns its name.
#[allow(dead_code)]
pub async fn fresh_database(
    admin: &tokio_postgres::Client,
    kind: &str,
    tag: &str,
) -> Result<String, String> {
    let stale = admin
        .query(
            "SELECT datname FROM pg_database WHERE starts_with(datname, $1)",
            &[&format!("subgate_bench_{kind}_")],
        )
        .await
        .map_err(|e| e.to_string())?;
    for row in stale {
        let name: String = row.get(0);
        let _ = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\""))
            .await;
    }
    let name = format!("subgate_bench_{kind}_{tag}");
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
    Ok(name)
}

/// Runs `measure` on this run's fresh database of benchmark `kind` ([`fresh_database`]; it is
/// given the database's URL), then drops the database however `measure` ended.
#[allow(dead_code)]
pub async fn on_fresh_database<T, F, Fut>(kind: &str, measure: F) -> Result<T, String>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let admin = connect_admin().await?;
    let name = fresh_database(&admin, kind, &run_tag()).await?;
    let outcome = measure(url_for(&name)).await;
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await;
    outcome
}

/// Prints a benchmark's table of figures and leaves it, with its `key<TAB>value` lines, in
/// `$SUBGATE_BENCH_RESULTS` as `<stem>.md` and `<stem>.tsv` (when set).
#[allow(dead_code)]
pub fn keep_figures(stem: &str, table: &str, tsv: &str) {
    println!("\n{table}");
    if let Some(dir) = std::env::var_os("SUBGATE_BENCH_RESULTS").filter(|p| !p.is_empty()) {
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(format!("{stem}.tsv")), tsv);
        let _ = std::fs::write(dir.join(format!("{stem}.md")), table);
    }
}

/// Sorted latencies, read as quantiles in milliseconds.
#[allow(dead_code)]
#[derive(Debug, Default)]
pub struct Latencies {
    sorted: Vec<std::time::Duration>,
}

#[allow(dead_code)]
impl Latencies {
    pub fn new(mut all: Vec<std::time::Duration>) -> Latencies {
        all.sort();
        Latencies { sorted: all }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Quantile `q` (0 to 1) in milliseconds; NaN without latencies.
    pub fn q(&self, q: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let i = ((self.sorted.len() as f64 * q).ceil() as usize).clamp(1, self.sorted.len()) - 1;
        self.sorted[i].as_secs_f64() * 1e3
    }
}

/// The price of the orders the benchmarks' payers pay.
#[allow(dead_code)]
pub const AMOUNT_MINOR: i64 = 19_900;

/// Pays buyers' orders through door 1 of a server with signed `payment.succeeded` deliveries:
/// order `n` is the one with reference `<reference_prefix><n>`, paid as `pay-<n>`.
#[allow(dead_code)]
#[derive(Clone)]
pub struct Payer {
    pub http: reqwest::Client,
    pub url: String,
    pub key: std::sync::Arc<subgate::payments::gateways::standard_webhooks::WebhookKey>,
    pub reference_prefix: &'static str,
}

#[allow(dead_code)]
impl Payer {
    /// Door 1 of the server at `addr`.
    pub fn at(&mut self, addr: std::net::SocketAddr) {
        self.url = format!("http://{addr}/api/webhook/payment");
    }

    /// Pays order `n`; returns when its 200 arrived.
    pub async fn pay(&self, n: i64) -> Result<std::time::Instant, String> {
        let body = format!(
            r#"{{"type":"payment.succeeded","gateway":"bench","payment_id":"pay-{n}","order_reference":"{}{n}","amount_minor":{AMOUNT_MINOR},"currency":"UAH","paid_at":"{}"}}"#,
            self.reference_prefix,
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        let id = format!("msg-{n}");
        let timestamp = chrono::Utc::now().timestamp();
        let signature = subgate::payments::gateways::standard_webhooks::sign(
            &self.key,
            &id,
            timestamp,
            body.as_bytes(),
        );
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await
            .map_err(|e| format!("payment {n}: {e}"))?;
        let status = response.status().as_u16();
        let _ = response.bytes().await;
        if status != 200 {
            return Err(format!("payment {n}: HTTP {status}"));
        }
        Ok(std::time::Instant::now())
    }
}
