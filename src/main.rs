//! The `subgate` binary: parses the command line and calls the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use subgate::{AppState, Config, db};

/// subgate: sells access to private Telegram channels and groups, turning each payment into
/// access once.
///
/// Configuration comes from the environment: every variable is listed in the module
/// documentation of `src/config/mod.rs` (see docs/deployment.md).
#[derive(Parser)]
#[command(name = "subgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (migrates the database first).
    Serve {
        /// Do not apply pending migrations at start-up.
        #[arg(long)]
        no_migrate: bool,
    },
    /// Apply pending database migrations and exit.
    Migrate,
    /// Manage staff accounts.
    Staff {
        #[command(subcommand)]
        command: StaffCommand,
    },
    /// Exit 0 when the server at BIND_ADDR answers /readyz (for container health checks).
    Healthcheck,
    /// Run one full sweep (active → grace → expired) and print its JSON report.
    Sweep {
        /// Memberships per batch transaction (1..=5000).
        #[arg(long, default_value_t = subgate::access::sweep::DEFAULT_BATCH_SIZE as u64,
              value_parser = clap::value_parser!(u64).range(1..=5000))]
        batch_size: u64,
    },
    /// Telegram effects (the outbox): perform due ones, or reconcile Stars, once.
    Effects {
        #[command(subcommand)]
        command: EffectsCommand,
    },
}

#[derive(Subcommand)]
enum EffectsCommand {
    /// Enqueue due reminders and refunds, perform every due effect once, print a JSON report.
    RunOnce,
    /// Page getStarTransactions: apply missed Stars payments, confirm refunds; print a report.
    Reconcile,
}

#[derive(Subcommand)]
enum StaffCommand {
    /// Create a staff account; the password is read from standard input (one line).
    Create {
        /// The account's email address (its login).
        #[arg(long)]
        email: String,
        /// What the account may do: owner (everything, manages staff), admin (everything but
        /// staff accounts), support (reads; grants, corrections, cancels, retries) or viewer
        /// (reads only).
        #[arg(long, default_value = "owner",
              value_parser = clap::builder::PossibleValuesParser::new(["owner", "admin", "support", "viewer"]))]
        role: String,
    },
    /// Change a staff account's password (read from standard input, one line) and end every
    /// session of the account: tokens issued before stop working at once.
    SetPassword {
        /// The account's email address (its login).
        #[arg(long)]
        email: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("subgate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("subgate: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    if let Command::Healthcheck = cli.command {
        return healthcheck().await;
    }
    let config = Config::from_env().map_err(|e| e.to_string())?;
    // The bot's words, checked before anything is said (one line naming file and message).
    subgate::present::locale::install(
        config.bot_messages_dir.as_deref(),
        config.bot_default_language,
    )?;
    if matches!(cli.command, Command::Sweep { .. } | Command::Effects { .. }) {
        // Its standard output is the JSON report.
        subgate::init_tracing_stderr(config.log_format);
    } else {
        subgate::init_tracing(config.log_format);
    }
    let pool = db::pool_with_ca_cert(
        config.database_url.expose(),
        config.db_pool_size,
        config.database_ca_cert.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    match cli.command {
        Command::Serve { no_migrate } => {
            if !no_migrate {
                migrate(&pool).await?;
            }
            let state = AppState::new(config, pool)
                .await
                .map_err(|e| e.to_string())?;
            subgate::bootstrap_admin(&state)
                .await
                .map_err(|e| format!("cannot create the admin account: {e}"))?;
            subgate::bootstrap_receipts(&state).await;
            subgate::serve(state).await.map_err(|e| e.to_string())
        }
        Command::Migrate => migrate(&pool).await,
        Command::Sweep { batch_size } => {
            let report = subgate::access::sweep::sweep(&pool, batch_size as usize)
                .await
                .map_err(|e| format!("sweep failed: {e}"))?;
            println!(
                "{}",
                serde_json::to_string(&report).map_err(|e| e.to_string())?
            );
            Ok(())
        }
        Command::Effects { command } => effects(config, pool, command).await,
        Command::Staff {
            command: StaffCommand::Create { email, role },
        } => {
            let role = subgate::staff::Role::parse(&role).ok_or("unknown role")?;
            let password = read_password()?;
            let created = subgate::staff::accounts::create_staff_from_command_line(
                &pool,
                &email,
                &password,
                role,
                config.bcrypt_cost,
            )
            .await
            .map_err(staff_error)?;
            if created {
                println!("staff account {email} created with role {role}");
                Ok(())
            } else {
                Err(format!("a staff account with email {email} already exists"))
            }
        }
        Command::Staff {
            command: StaffCommand::SetPassword { email },
        } => {
            let password = read_password()?;
            let changed = subgate::staff::accounts::set_password(
                &pool,
                &email,
                &password,
                config.bcrypt_cost,
            )
            .await
            .map_err(staff_error)?;
            if changed {
                println!("password of staff account {email} changed; its sessions are ended");
                Ok(())
            } else {
                Err(format!("no staff account with email {email}"))
            }
        }
        Command::Healthcheck => unreachable!("handled above"),
    }
}

/// The password of a `staff` command: one line of standard input, so an interactive user ends
/// it with Enter rather than Ctrl-D.
fn read_password() -> Result<String, String> {
    let mut password = String::new();
    std::io::stdin()
        .read_line(&mut password)
        .map_err(|e| format!("cannot read the password from stdin: {e}"))?;
    Ok(password.trim_end_matches(['\r', '\n']).to_string())
}

/// A `staff` command's error as one line: field errors as "field message; …".
fn staff_error(e: subgate::common::error::ApiError) -> String {
    match e {
        subgate::common::error::ApiError::Validation(fields) => fields
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join("; "),
        other => other.to_string(),
    }
}

/// `subgate effects …`: one run of the effects worker or of the Stars reconcile.
async fn effects(
    config: Config,
    pool: deadpool_postgres::Pool,
    command: EffectsCommand,
) -> Result<(), String> {
    use subgate::app::worker::{Options, Worker};
    let state = AppState::new(config, pool)
        .await
        .map_err(|e| e.to_string())?;
    let worker_state = state.clone();
    let worker = Worker::new(state, Options::default());
    if !worker.is_enabled() {
        return Err(
            "TELEGRAM_BOT_TOKEN is not set (and TELEGRAM_DRY_RUN is off): effects stay queued"
                .into(),
        );
    }
    let report = match command {
        EffectsCommand::RunOnce => worker
            .run(true, &|| false)
            .await
            .map(|r| serde_json::to_string(&r)),
        EffectsCommand::Reconcile => {
            subgate::telegram::recovery::reconcile(&worker_state.db, &worker_state.config)
                .await
                .map(|r| serde_json::to_string(&r))
        }
    }
    .map_err(|e| format!("effects: {e}"))?
    .map_err(|e| e.to_string())?;
    println!("{report}");
    Ok(())
}

async fn migrate(pool: &deadpool_postgres::Pool) -> Result<(), String> {
    let applied = db::migrate(pool)
        .await
        .map_err(|e| format!("migration failed: {e}"))?;
    tracing::info!(
        applied,
        latest = db::latest_migration(),
        "database migrated"
    );
    Ok(())
}

/// Reads only `BIND_ADDR` (through `config`), so it works without the rest of the configuration.
/// Proxy variables are ignored: they are meant for outbound calls (Docker hands its configured
/// proxies to every container), and no proxy can reach this container's loopback.
async fn healthcheck() -> Result<(), String> {
    let port = subgate::config::bind_addr_from_env()
        .map_err(|e| e.to_string())?
        .port();
    let url = format!("http://127.0.0.1:{port}/readyz");
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let response = client
        .get(&url)
        .timeout(std::time::Duration::from_secs(3))
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("{url} answered {}", response.status()))
    }
}
