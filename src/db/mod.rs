//! The database, one concern a file: connecting ([`connect`]: the pool and its timeouts, TLS as
//! the `sslmode` of `DATABASE_URL` says in [`tls`]), the embedded migrations and readiness
//! ([`migrations`]), the transaction runner with its retry of deadlock victims and
//! serialization failures, the commit announcement and the pair lock ([`transaction`]), rows
//! read by column name ([`rows`](mod@rows): `FromRow`, `from_row!` and the helpers that run a statement
//! prepared once per connection), and the state enums stored as text ([`text_enum`]). Every
//! item is re-exported here, so callers say `db::pool`, `db::lock_pair`, `db::one`.

mod connect;
mod migrations;
mod rows;
mod text_enum;
pub mod tls;
mod transaction;

pub use connect::*;
pub use migrations::*;
pub use rows::*;
pub use text_enum::*;
pub use transaction::*;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TCP_USER_TIMEOUT, complete_config, tls};

    fn completed(url: &str) -> (tokio_postgres::Config, Duration) {
        let mut pg = tls::parse_url(url).unwrap().config;
        let create = complete_config(&mut pg);
        (pg, create)
    }

    /// Unset timeouts get the defaults, and making a connection may take one connect timeout
    /// per host plus the login: an unreachable first host leaves the second its full time.
    #[test]
    fn timeouts_default_and_grow_with_the_hosts() {
        let (pg, one) = completed("postgres://u@db:5432/app");
        assert_eq!(pg.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(pg.get_tcp_user_timeout(), Some(&DEFAULT_TCP_USER_TIMEOUT));
        assert_eq!(pg.get_application_name(), Some("subgate"));
        let (pg, two) =
            completed("postgres://u@db-a:5432,db-b:5432/app?target_session_attrs=read-write");
        assert_eq!(pg.get_hosts().len(), 2);
        assert_eq!(two - one, DEFAULT_CONNECT_TIMEOUT);
        assert!(one > DEFAULT_CONNECT_TIMEOUT);
    }

    /// What the URL sets is kept, and the bound follows its `connect_timeout`.
    #[test]
    fn the_url_settings_win() {
        let (pg, create) = completed(
            "postgres://u@a,b,c/app?connect_timeout=2&tcp_user_timeout=7&application_name=x",
        );
        assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(2)));
        assert_eq!(pg.get_tcp_user_timeout(), Some(&Duration::from_secs(7)));
        assert_eq!(pg.get_application_name(), Some("x"));
        let (_, single) = completed("postgres://u@a/app?connect_timeout=2");
        assert_eq!(create - single, Duration::from_secs(4));
    }
}
