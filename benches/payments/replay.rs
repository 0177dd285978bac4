//! The references: a pgbench script (`payment_tx.sql`, `payment_minimal.sql`) run against the
//! benchmark's database with prepared statements — by pgbench itself where it is installed
//! (`pgbench -n -M prepared -c C -j J -T S`, J = as many threads as cores, at most C;
//! per-transaction log for the percentiles),
//! else by a small interpreter here that runs the same script the same way from Rust: one
//! connection per client, every statement prepared once per connection, one round trip per
//! statement. It understands what the scripts use: `\set name expression` (integers,
//! variables, `+ - * / %`, parentheses, `random(lo, hi)`), SQL commands ending in `;` or in
//! `\gset [prefix]`, `:name` variables (a `::` cast is left alone, as pgbench does), and
//! `\startpipeline` … `\endpipeline` (the commands between sent together, in order, before
//! their answers are read; no `\gset` among them).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use rand::Rng;
use tokio_postgres::{
    NoTls, Row, Statement,
    types::{ToSql, Type},
};

/// What runs the scripts.
pub enum Runner {
    Pgbench(PathBuf),
    Rust,
}

impl Runner {
    /// pgbench from `PATH`, else from `/usr/lib/postgresql/*/bin` (highest version), else the
    /// interpreter here.
    pub fn find() -> Runner {
        let works = |p: &Path| {
            Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if works(Path::new("pgbench")) {
            return Runner::Pgbench(PathBuf::from("pgbench"));
        }
        let mut installed: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|d| d.path().join("bin/pgbench"))
            .filter(|p| works(p))
            .collect();
        installed.sort_by_key(|p| {
            p.components()
                .nth(4)
                .and_then(|c| c.as_os_str().to_str()?.parse::<u32>().ok())
        });
        match installed.pop() {
            Some(p) => Runner::Pgbench(p),
            None => Runner::Rust,
        }
    }

    /// How the output names it.
    pub fn name(&self) -> &'static str {
        match self {
            Runner::Pgbench(_) => "pgbench",
            Runner::Rust => "the same statements prepared from Rust",
        }
    }
}

/// One run of a script.
pub struct Replay {
    pub clients: usize,
    /// pgbench threads (`-j`); the Rust interpreter runs on the benchmark's one thread.
    pub threads: usize,
    /// Transactions completed.
    pub transactions: u64,
    pub tps: f64,
    /// Per-transaction latency in microseconds, sorted.
    pub latencies_us: Vec<u32>,
}

/// pgbench threads for `clients` clients: as many as the machine has cores, at most one per
/// client (pgbench's own rule).
pub fn threads(clients: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, clients.max(1))
}

/// Runs `script` with `clients` clients for `duration`; client `i` (from 0) pays orders
/// `lo + i`, `lo + i + clients`, … (the scripts' own counter). `extra` are further `-D`
/// defines the script needs.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    runner: &Runner,
    database_url: &str,
    script: &Path,
    clients: usize,
    duration: Duration,
    lo: i64,
    extra: &[(&str, String)],
    work_dir: &Path,
) -> Result<Replay, String> {
    let mut defines = vec![
        ("lo", lo.to_string()),
        ("clients", clients.to_string()),
        ("k", "0".to_string()),
    ];
    defines.extend(extra.iter().map(|(k, v)| (*k, v.clone())));
    match runner {
        Runner::Pgbench(pgbench) => {
            run_pgbench(
                pgbench,
                database_url,
                script,
                clients,
                duration,
                &defines,
                work_dir,
            )
            .await
        }
        Runner::Rust => run_rust(database_url, script, clients, duration, &defines).await,
    }
}

async fn run_pgbench(
    pgbench: &Path,
    database_url: &str,
    script: &Path,
    clients: usize,
    duration: Duration,
    defines: &[(&str, String)],
    work_dir: &Path,
) -> Result<Replay, String> {
    let stem = script
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("script");
    let prefix = work_dir.join(format!("pgbench-{stem}-c{clients}"));
    let threads = threads(clients);
    // Logs of an earlier run with the same prefix would be read as this run's.
    for old in log_files(&prefix) {
        let _ = std::fs::remove_file(old);
    }
    let mut command = tokio::process::Command::new(pgbench);
    command
        .args(["-n", "-M", "prepared"])
        .arg("-j")
        .arg(threads.to_string())
        .arg("-c")
        .arg(clients.to_string())
        .arg("-T")
        .arg(duration.as_secs().max(1).to_string())
        .arg("-f")
        .arg(script)
        .arg("-l")
        .arg(format!("--log-prefix={}", prefix.display()));
    for (name, value) in defines {
        command.arg("-D").arg(format!("{name}={value}"));
    }
    command
        .arg(database_url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", pgbench.display()))?;
    if let Some(pid) = child.id() {
        crate::record_pid(pid);
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| format!("pgbench: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "pgbench failed ({}): {}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    let field = |label: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .map(str::trim)
    };
    let tps: f64 = field("tps = ")
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no tps in pgbench's output: {stdout}"))?;
    let transactions: u64 = field("number of transactions actually processed: ")
        .and_then(|v| v.split(['/', ' ']).next()?.parse().ok())
        .ok_or_else(|| format!("no transaction count in pgbench's output: {stdout}"))?;
    let failed: u64 = field("number of failed transactions: ")
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    if failed > 0 {
        return Err(format!("pgbench: {failed} failed transactions"));
    }
    // Per-transaction log: `client transaction latency_us script epoch_s epoch_us`.
    let mut latencies_us = Vec::new();
    for file in log_files(&prefix) {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{file:?}: {e}"))?;
        latencies_us.extend(
            text.lines()
                .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u32>().ok()),
        );
        let _ = std::fs::remove_file(file);
    }
    latencies_us.sort_unstable();
    Ok(Replay {
        clients,
        threads,
        transactions,
        tps,
        latencies_us,
    })
}

/// pgbench's per-transaction logs for `prefix` (`prefix.<pid>` and `prefix.<pid>.<thread>`).
fn log_files(prefix: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (prefix.parent(), prefix.file_name().and_then(|n| n.to_str()))
    else {
        return Vec::new();
    };
    let start = format!("{name}.");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&start))
        })
        .map(|e| e.path())
        .collect()
}

// ---------------------------------------------------------------- the Rust interpreter

/// One command of a script.
enum Step {
    Set { name: String, expr: String },
    Sql(Sql),
}

struct Sql {
    /// The text with `$1`, `$2`, … in place of the variables.
    text: String,
    /// The variable of each parameter, in order.
    params: Vec<String>,
    /// `\gset [prefix]`: store the single row's columns as variables.
    gset: Option<String>,
    /// Between `\startpipeline` and `\endpipeline`.
    pipelined: bool,
}

fn parse_script(source: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut sql = String::new();
    let mut pipelined = false;
    for line in source.lines() {
        let trimmed = line.trim();
        if sql.is_empty() && (trimmed.is_empty() || trimmed.starts_with("--")) {
            continue;
        }
        if sql.is_empty() && (trimmed == "\\startpipeline" || trimmed == "\\endpipeline") {
            let start = trimmed == "\\startpipeline";
            if start == pipelined {
                return Err(format!("unmatched {trimmed}"));
            }
            pipelined = start;
            continue;
        }
        if sql.is_empty()
            && let Some(rest) = trimmed.strip_prefix("\\set ")
        {
            let (name, expr) = rest
                .trim()
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("bad \\set: {line}"))?;
            steps.push(Step::Set {
                name: name.to_string(),
                expr: expr.trim().to_string(),
            });
            continue;
        }
        if let Some((before, prefix)) = line.split_once("\\gset") {
            if pipelined {
                return Err(format!("\\gset in a pipeline: {line}"));
            }
            sql.push_str(before);
            steps.push(Step::Sql(substitute(
                &sql,
                Some(prefix.trim().to_string()),
                false,
            )));
            sql.clear();
        } else if let Some(before) = trimmed.strip_suffix(';') {
            sql.push_str(before);
            steps.push(Step::Sql(substitute(&sql, None, pipelined)));
            sql.clear();
        } else {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    if !sql.trim().is_empty() {
        return Err(format!("unterminated SQL command: {sql}"));
    }
    if pipelined {
        return Err("\\startpipeline without \\endpipeline".into());
    }
    Ok(steps)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Replaces each `:name` with `$n` the way pgbench's prepared mode does (a variable used twice
/// is two parameters); a `:` not followed by a name character — `::` casts — is kept.
fn substitute(sql: &str, gset: Option<String>, pipelined: bool) -> Sql {
    let mut text = String::with_capacity(sql.len());
    let mut params = Vec::new();
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c != ':' {
            text.push(c);
            continue;
        }
        match chars.peek() {
            Some(&(_, n)) if is_name_char(n) => {
                let mut name = String::new();
                while let Some(&(_, n)) = chars.peek() {
                    if !is_name_char(n) {
                        break;
                    }
                    name.push(n);
                    chars.next();
                }
                params.push(name);
                text.push_str(&format!("${}", params.len()));
            }
            _ => {
                text.push(':');
                while let Some(&(_, ':')) = chars.peek() {
                    text.push(':');
                    chars.next();
                }
            }
        }
    }
    Sql {
        text: text.trim().to_string(),
        params,
        gset,
        pipelined,
    }
}

/// A variable's value: pgbench keeps text (or NULL from `\gset`).
type Vars = HashMap<String, Option<String>>;

fn var<'a>(vars: &'a Vars, name: &str) -> Result<&'a str, String> {
    match vars.get(name) {
        Some(Some(v)) => Ok(v),
        Some(None) => Err(format!("variable {name} is NULL")),
        None => Err(format!("undefined variable {name}")),
    }
}

/// Evaluates a `\set` expression: integers, variables, `+ - * / %`, parentheses, `random(a, b)`.
fn eval(expr: &str, vars: &Vars) -> Result<i64, String> {
    let tokens = tokenize(expr)?;
    let mut p = Parser {
        tokens: &tokens,
        at: 0,
        vars,
    };
    let v = p.sum()?;
    if p.at != tokens.len() {
        return Err(format!("unexpected input in expression {expr:?}"));
    }
    Ok(v)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(i64),
    Var(String),
    Name(String),
    Sym(char),
}

fn tokenize(expr: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c.is_ascii_digit() {
            let mut s = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                s.push(d);
                chars.next();
            }
            out.push(Tok::Num(s.parse().map_err(|e| format!("{s}: {e}"))?));
        } else if c == ':' || c.is_ascii_alphabetic() {
            chars.next();
            let mut s = if c == ':' {
                String::new()
            } else {
                c.to_string()
            };
            while let Some(&d) = chars.peek().filter(|d| is_name_char(**d)) {
                s.push(d);
                chars.next();
            }
            out.push(if c == ':' { Tok::Var(s) } else { Tok::Name(s) });
        } else if "+-*/%(),".contains(c) {
            out.push(Tok::Sym(c));
            chars.next();
        } else {
            return Err(format!("unexpected {c:?} in expression {expr:?}"));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: &'a [Tok],
    at: usize,
    vars: &'a Vars,
}

impl Parser<'_> {
    fn peek_sym(&self) -> Option<char> {
        match self.tokens.get(self.at) {
            Some(Tok::Sym(c)) => Some(*c),
            _ => None,
        }
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.peek_sym() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected {c:?}"))
        }
    }

    fn sum(&mut self) -> Result<i64, String> {
        let mut v = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek_sym() {
            self.at += 1;
            let r = self.product()?;
            v = if op == '+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn product(&mut self) -> Result<i64, String> {
        let mut v = self.factor()?;
        while let Some(op @ ('*' | '/' | '%')) = self.peek_sym() {
            self.at += 1;
            let r = self.factor()?;
            v = match op {
                '*' => v * r,
                _ if r == 0 => return Err("division by zero".into()),
                '/' => v / r,
                _ => v % r,
            };
        }
        Ok(v)
    }

    fn factor(&mut self) -> Result<i64, String> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        match token {
            Some(Tok::Num(n)) => Ok(n),
            Some(Tok::Var(name)) => var(self.vars, &name)?
                .trim()
                .parse()
                .map_err(|_| format!("variable {name} is not an integer")),
            Some(Tok::Sym('-')) => Ok(-self.factor()?),
            Some(Tok::Sym('(')) => {
                let v = self.sum()?;
                self.expect(')')?;
                Ok(v)
            }
            Some(Tok::Name(f)) if f == "random" => {
                self.expect('(')?;
                let lo = self.sum()?;
                self.expect(',')?;
                let hi = self.sum()?;
                self.expect(')')?;
                Ok(rand::thread_rng().gen_range(lo..=hi))
            }
            other => Err(format!("unexpected {other:?} in expression")),
        }
    }
}

/// A parameter bound from a variable's text, converted to the type PostgreSQL inferred for it
/// when the statement was prepared (tokio-postgres sends parameters in binary).
fn bind(value: &str, ty: &Type) -> Result<Box<dyn ToSql + Sync + Send>, String> {
    let bad = |e: &dyn std::fmt::Display| format!("{value:?} as {ty}: {e}");
    Ok(match *ty {
        Type::INT2 => Box::new(value.parse::<i16>().map_err(|e| bad(&e))?),
        Type::INT4 => Box::new(value.parse::<i32>().map_err(|e| bad(&e))?),
        Type::INT8 => Box::new(value.parse::<i64>().map_err(|e| bad(&e))?),
        Type::FLOAT8 => Box::new(value.parse::<f64>().map_err(|e| bad(&e))?),
        Type::BOOL => Box::new(matches!(value, "t" | "true" | "1")),
        Type::TIMESTAMPTZ => Box::new(
            DateTime::parse_from_rfc3339(value)
                .map_err(|e| bad(&e))?
                .with_timezone(&Utc),
        ),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            Box::new(value.to_string())
        }
        Type::INT4_ARRAY => Box::new(
            value
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .filter(|v| !v.is_empty())
                .map(|v| v.trim().parse::<i32>().map_err(|e| bad(&e)))
                .collect::<Result<Vec<i32>, String>>()?,
        ),
        _ => return Err(format!("no binding for a parameter of type {ty}")),
    })
}

/// A column's value as text for `\gset` (NULL is `None`; a type not handled here is `None`
/// too, which only matters if the script uses it).
fn column_text(row: &Row, i: usize) -> Option<String> {
    let ty = row.columns()[i].type_();
    match *ty {
        Type::INT2 => row.get::<_, Option<i16>>(i).map(|v| v.to_string()),
        Type::INT4 => row.get::<_, Option<i32>>(i).map(|v| v.to_string()),
        Type::INT8 => row.get::<_, Option<i64>>(i).map(|v| v.to_string()),
        Type::FLOAT8 => row.get::<_, Option<f64>>(i).map(|v| v.to_string()),
        Type::BOOL => row
            .get::<_, Option<bool>>(i)
            .map(|v| if v { "t" } else { "f" }.to_string()),
        Type::TIMESTAMPTZ => row
            .get::<_, Option<DateTime<Utc>>>(i)
            .map(|v| v.to_rfc3339()),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row.get::<_, Option<String>>(i),
        Type::INT4_ARRAY => row.get::<_, Option<Vec<i32>>>(i).map(|v| {
            let items: Vec<String> = v.iter().map(i32::to_string).collect();
            format!("{{{}}}", items.join(","))
        }),
        _ => None,
    }
}

async fn run_rust(
    database_url: &str,
    script: &Path,
    clients: usize,
    duration: Duration,
    defines: &[(&str, String)],
) -> Result<Replay, String> {
    let source =
        std::fs::read_to_string(script).map_err(|e| format!("{}: {e}", script.display()))?;
    let steps = Arc::new(parse_script(&source)?);
    // Connect and prepare everything before the clock starts, as pgbench does.
    let mut sessions = Vec::new();
    for id in 0..clients {
        let (client, connection) = tokio_postgres::connect(database_url, NoTls)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        tokio::spawn(connection);
        let mut prepared = Vec::new();
        for step in steps.iter() {
            if let Step::Sql(sql) = step {
                prepared.push(Some(
                    client
                        .prepare(&sql.text)
                        .await
                        .map_err(|e| format!("prepare {:?}: {e}", sql.text))?,
                ));
            } else {
                prepared.push(None);
            }
        }
        let mut vars: Vars = defines
            .iter()
            .map(|(k, v)| (k.to_string(), Some(v.clone())))
            .collect();
        vars.insert("client_id".into(), Some(id.to_string()));
        sessions.push((client, prepared, vars));
    }
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = sessions
        .into_iter()
        .map(|(client, prepared, mut vars)| {
            let steps = steps.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    transaction(&client, &steps, &prepared, &mut vars).await?;
                    latencies.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                Ok::<_, String>(latencies)
            })
        })
        .collect();
    let mut latencies_us = Vec::new();
    for t in tasks {
        latencies_us.extend(t.await.map_err(|e| e.to_string())??);
    }
    let elapsed = started.elapsed();
    latencies_us.sort_unstable();
    Ok(Replay {
        clients,
        threads: 1,
        transactions: latencies_us.len() as u64,
        tps: latencies_us.len() as f64 / elapsed.as_secs_f64(),
        latencies_us,
    })
}

/// One run of the script on one client's connection.
async fn transaction(
    client: &tokio_postgres::Client,
    steps: &[Step],
    prepared: &[Option<Statement>],
    vars: &mut Vars,
) -> Result<(), String> {
    let mut i = 0;
    while i < steps.len() {
        match (&steps[i], &prepared[i]) {
            (Step::Set { name, expr }, _) => {
                let v = eval(expr, vars)?;
                vars.insert(name.clone(), Some(v.to_string()));
                i += 1;
            }
            (Step::Sql(sql), Some(_)) if sql.pipelined => {
                // The pipeline's commands: bound first, then sent together (each query hands
                // its messages to the connection on its first poll, and `join_all` polls them
                // in order), then their answers read.
                let mut bound = Vec::new();
                while let (Some(Step::Sql(sql)), Some(Some(statement))) =
                    (steps.get(i), prepared.get(i))
                    && sql.pipelined
                {
                    bound.push((sql, statement, values(sql, statement, vars)?));
                    i += 1;
                }
                let lists: Vec<_> = bound.iter().map(|(_, _, v)| params(v)).collect();
                let answers = futures::future::join_all(
                    bound
                        .iter()
                        .zip(&lists)
                        .map(|((_, statement, _), list)| client.query(*statement, list)),
                )
                .await;
                for ((sql, _, _), answer) in bound.iter().zip(answers) {
                    answer.map_err(|e| format!("{}: {e}", sql.text))?;
                }
            }
            (Step::Sql(sql), Some(statement)) => {
                let values = values(sql, statement, vars)?;
                let rows = client
                    .query(statement, &params(&values))
                    .await
                    .map_err(|e| format!("{}: {e}", sql.text))?;
                if let Some(prefix) = &sql.gset {
                    let [row] = rows.as_slice() else {
                        return Err(format!(
                            "\\gset expected one row, got {}: {}",
                            rows.len(),
                            sql.text
                        ));
                    };
                    for (i, column) in row.columns().iter().enumerate() {
                        vars.insert(format!("{prefix}{}", column.name()), column_text(row, i));
                    }
                }
                i += 1;
            }
            (Step::Sql(_), None) => unreachable!("every SQL step is prepared"),
        }
    }
    Ok(())
}

/// The values of a command's parameters, from the variables, typed as the statement wants.
fn values(
    sql: &Sql,
    statement: &Statement,
    vars: &Vars,
) -> Result<Vec<Box<dyn ToSql + Sync + Send>>, String> {
    sql.params
        .iter()
        .zip(statement.params())
        .map(|(name, ty)| bind(var(vars, name)?, ty))
        .collect()
}

/// `values` as the parameter list of a query.
fn params(values: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    values
        .iter()
        .map(|v| v.as_ref() as &(dyn ToSql + Sync))
        .collect()
}
