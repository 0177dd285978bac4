//! The database settings.

use std::path::PathBuf;

use super::{
    ConfigError, Secret,
    vars::{Vars, err},
};

/// `DATABASE_URL`, `DATABASE_CA_CERT`, `DB_POOL_SIZE`.
pub(super) struct Database {
    pub(super) url: Secret,
    pub(super) ca_cert: Option<PathBuf>,
    pub(super) pool_size: usize,
}

impl Database {
    pub(super) fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let url = vars.required("DATABASE_URL")?;
        // DATABASE_CA_CERT is only a path here: the pool reads the file when it is built.
        crate::db::tls::parse_url(&url).map_err(|e| err(e.to_string()))?;
        Ok(Database {
            url: Secret(url),
            ca_cert: vars.get("DATABASE_CA_CERT").map(PathBuf::from),
            pool_size: vars.int("DB_POOL_SIZE", 16, 1, 1000)? as usize,
        })
    }
}
