//! The HTTP listener's settings: addresses, log format, timeouts, the connection cap, the proxy
//! and the public URL.

use std::{net::SocketAddr, time::Duration};

use super::{
    ConfigError,
    vars::{Vars, err, host_of},
};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// `BIND_ADDR`, `METRICS_ADDR`, `LOG_FORMAT`, `REQUEST_TIMEOUT_SECS`,
/// `HEADER_READ_TIMEOUT_SECS`, `IDLE_TIMEOUT_SECS`, `MAX_CONNECTIONS`, `TRUST_PROXY`,
/// `PUBLIC_URL`.
pub(super) struct Http {
    pub(super) bind_addr: SocketAddr,
    pub(super) metrics_addr: Option<SocketAddr>,
    pub(super) log_format: LogFormat,
    pub(super) request_timeout: Duration,
    pub(super) header_read_timeout: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) max_connections: usize,
    pub(super) trust_proxy: bool,
    pub(super) public_url: Option<String>,
}

impl Http {
    pub(super) fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let bind_addr = Http::bind_addr(vars)?;
        let metrics_addr = match vars.get("METRICS_ADDR") {
            None => None,
            Some(v) => match v.trim().parse::<SocketAddr>() {
                Ok(a) if a == bind_addr => {
                    return Err(err("METRICS_ADDR must differ from BIND_ADDR"));
                }
                Ok(a) => Some(a),
                Err(_) => {
                    return Err(err("METRICS_ADDR must be host:port, e.g. 127.0.0.1:9090"));
                }
            },
        };
        let log_format = match vars.get("LOG_FORMAT").as_deref() {
            None | Some("pretty") => LogFormat::Pretty,
            Some("json") => LogFormat::Json,
            Some(_) => return Err(err("LOG_FORMAT must be `json` or `pretty`")),
        };
        Ok(Http {
            bind_addr,
            metrics_addr,
            log_format,
            request_timeout: vars.secs("REQUEST_TIMEOUT_SECS", 30, 1, 600)?,
            header_read_timeout: vars.secs("HEADER_READ_TIMEOUT_SECS", 10, 1, 600)?,
            idle_timeout: vars.secs("IDLE_TIMEOUT_SECS", 60, 1, 3600)?,
            max_connections: vars.int("MAX_CONNECTIONS", 10_000, 1, 1_000_000)? as usize,
            trust_proxy: vars.flag("TRUST_PROXY")?,
            public_url: vars
                .checked(
                    "PUBLIC_URL",
                    |v| host_of(v.trim()).is_some(),
                    "PUBLIC_URL must be an absolute http(s) URL, e.g. https://pay.example.com",
                )?
                .map(|v| v.trim().trim_end_matches('/').to_string()),
        })
    }

    pub(super) fn bind_addr<F: Fn(&str) -> Option<String>>(
        vars: &Vars<F>,
    ) -> Result<SocketAddr, ConfigError> {
        match vars.get("BIND_ADDR") {
            Some(v) => v
                .parse()
                .map_err(|_| err("BIND_ADDR must be host:port, e.g. 127.0.0.1:8080")),
            None => Ok(SocketAddr::from(([127, 0, 0, 1], 8080))),
        }
    }
}
