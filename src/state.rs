//! Shared application state, handed to every handler by axum's `State`.

use std::sync::Arc;

use axum::extract::FromRef;
use deadpool_postgres::Pool;

use crate::{
    auth::{HashPermits, LoginThrottle},
    config::Config,
    sweep::LastSweep,
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
    pub dummy_hash: Arc<String>,
    /// The last sweep this process ran, for the staff overview.
    pub last_sweep: LastSweep,
}

impl AppState {
    /// Builds the state; hashes the dummy password (one bcrypt run at start-up).
    pub async fn new(config: Config, db: Pool) -> Result<AppState, crate::error::ApiError> {
        let random: String = uuid::Uuid::new_v4().to_string();
        let dummy_hash = crate::auth::hash_password(random, config.bcrypt_cost).await?;
        Ok(AppState {
            db,
            config: Arc::new(config),
            login_throttle: LoginThrottle::default(),
            hash_permits: HashPermits::per_core(),
            dummy_hash: Arc::new(dummy_hash),
            last_sweep: LastSweep::default(),
        })
    }
}
