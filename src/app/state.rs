//! Shared application state, handed to every handler by axum's `State`.

use std::sync::Arc;

use axum::extract::FromRef;
use deadpool_postgres::Pool;

use crate::{
    access::sweep::LastSweep,
    bot::mini_app::rate_limit::Buckets,
    config::Config,
    payments::gateways::monobank::keys::PublicKeys,
    reports::stats::StatsDb,
    staff::{permits::HashPermits, throttle::LoginThrottle},
};

/// Everything a handler may need; cheap to clone.
#[derive(Clone, FromRef)]
pub struct AppState {
    pub db: Pool,
    pub config: Arc<Config>,
    pub login_throttle: LoginThrottle,
    /// Caps the bcrypt checks of logins running at once (one per core).
    pub hash_permits: HashPermits,
    /// A bcrypt hash of a random password at the configured cost: unknown emails are checked
    /// against it so they take as long as wrong passwords.
    pub dummy_hash: DummyHash,
    /// The last sweep this process ran, for the staff overview.
    pub last_sweep: LastSweep,
    /// The statistics' share of the pool (a cap on the connections they hold at once).
    pub stats: StatsDb,
    /// The Mini App's limit per buyer (a token bucket per Telegram user).
    pub mini_app_limits: Buckets,
    /// Monobank's webhook public key, cached (door 5).
    pub monobank_keys: PublicKeys,
}

impl AppState {
    /// Builds the state. The dummy password's bcrypt run starts in the background
    /// ([`DummyHash`]), so it does not delay start-up.
    pub async fn new(config: Config, db: Pool) -> Result<AppState, crate::common::error::ApiError> {
        let dummy_hash = DummyHash::new(config.bcrypt_cost);
        let early = dummy_hash.clone();
        tokio::spawn(async move {
            if let Err(e) = early.get().await {
                tracing::warn!(error = %e, "the dummy password hash could not be made yet");
            }
        });
        let login_throttle = LoginThrottle::new(
            crate::staff::throttle::LOGIN_THROTTLE_CAPACITY,
            config.login_account_max_failures,
        );
        Ok(AppState {
            stats: StatsDb::new(db.clone()),
            db,
            config: Arc::new(config),
            login_throttle,
            hash_permits: HashPermits::per_core(),
            dummy_hash,
            last_sweep: LastSweep::default(),
            mini_app_limits: Buckets::default(),
            monobank_keys: PublicKeys::default(),
        })
    }
}

/// The bcrypt hash unknown emails are checked against: of a random password, at the configured
/// cost, made once per process. It is made by a task started with the state, off the start path
/// (one bcrypt run at cost 12 takes a quarter of a second or more); a login for an unknown
/// email that arrives before it is done waits for that same run.
#[derive(Clone)]
pub struct DummyHash {
    cell: Arc<tokio::sync::OnceCell<String>>,
    cost: u32,
}

impl DummyHash {
    fn new(cost: u32) -> DummyHash {
        DummyHash {
            cell: Arc::default(),
            cost,
        }
    }

    /// The hash, made by the first caller (the others wait for it).
    pub async fn get(&self) -> Result<String, crate::common::error::ApiError> {
        self.cell
            .get_or_try_init(|| {
                let random = uuid::Uuid::new_v4().to_string();
                crate::staff::passwords::hash_password(random, self.cost)
            })
            .await
            .cloned()
    }
}
