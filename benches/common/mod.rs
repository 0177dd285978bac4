//! What every benchmark shares: where its scratch databases live.

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
