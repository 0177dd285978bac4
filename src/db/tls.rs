//! TLS to PostgreSQL: the `sslmode` of `DATABASE_URL`, the rustls connector, and what it checks
//! of the server's certificate.
//!
//! | `sslmode` | TLS | certificate check, no `DATABASE_CA_CERT` | with `DATABASE_CA_CERT` |
//! |---|---|---|---|
//! | `disable` | never | — | — (the file is not read) |
//! | `prefer` (default) | when the server offers it, else plain | none | chain to the file's roots |
//! | `require` | always; a server without TLS is refused | none | chain to the file's roots |
//! | `verify-ca` | always | chain to the system roots | chain to the file's roots |
//! | `verify-full` | always | chain and host name, system roots | chain and host name, the file's roots |
//!
//! This is libpq's behaviour, including its rule that a root certificate makes `require` (and
//! `prefer`) check the chain, as `verify-ca` does. "Chain" means the certificate is signed, through
//! the intermediates the server sends, by one of the roots, is in its validity period and is meant
//! for a TLS server. "Host name" is the `host` of the URL (not `hostaddr`), matched against the
//! certificate's subject alternative names, DNS names or IP addresses; with several hosts, the
//! host being connected to (tokio-postgres hands each its own name). Without a check, the
//! session is still encrypted (the server proves it holds the key of the certificate it shows)
//! but not authenticated: it protects against eavesdropping, not against an active attacker.
//!
//! `DATABASE_CA_CERT` names a PEM file of one or more certificates; when it is set, those are the
//! only roots trusted. When it is not, `verify-ca`/`verify-full` use the system's roots (the
//! platform store, e.g. `/etc/ssl/certs`, or `SSL_CERT_FILE`/`SSL_CERT_DIR`), or Mozilla's roots
//! bundled in the binary where the system has none.
//!
//! `prefer` falls back to plain text only when the server declines TLS; a handshake that fails
//! (a certificate that fails its check, for one) fails the connection, unlike libpq, which then
//! tries again in plain text — an attacker who can break the handshake must not get the session
//! in the clear.
//!
//! tokio-postgres parses `sslmode` itself but knows only `disable`, `prefer` and `require`, so
//! [`parse_url`] finds the `sslmode` settings first (in the URL's query or in the `key=value`
//! form), gives tokio-postgres `require` in place of `verify-ca`/`verify-full`, and keeps the mode
//! for [`connector`], whose certificate verifier does the rest.

use std::{ops::Range, path::Path, sync::Arc};

use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::{
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        verify_server_cert_signed_by_trust_anchor,
    },
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
    server::ParsedCertificate,
};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How the connection uses TLS (the `sslmode` of `DATABASE_URL`); see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// `DATABASE_URL`, parsed: the tokio-postgres configuration and the TLS mode.
#[derive(Debug, Clone)]
pub struct Target {
    /// The configuration to connect with; its own `sslmode` is `require` for the `verify-*` modes.
    pub config: tokio_postgres::Config,
    pub ssl_mode: SslMode,
}

/// Why `DATABASE_URL` was refused; the message never contains the URL.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("DATABASE_URL is not a valid PostgreSQL connection URL")]
    Invalid,
    #[error("DATABASE_URL sslmode must be disable, prefer, require, verify-ca or verify-full")]
    SslMode,
}

/// Why no TLS connector could be made; the message names the variable, never a path or secret.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("DATABASE_CA_CERT cannot be read: {0}")]
    CaUnreadable(std::io::Error),
    #[error("DATABASE_CA_CERT holds no PEM certificate")]
    CaEmpty,
    #[error("DATABASE_CA_CERT holds a certificate that cannot be a root: {0}")]
    CaInvalid(rustls::Error),
    #[error("TLS to PostgreSQL cannot be set up: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Parses `DATABASE_URL` (a `postgres://` URL or the `key=value` form), taking `verify-ca` and
/// `verify-full` out of tokio-postgres's sight.
pub fn parse_url(database_url: &str) -> Result<Target, UrlError> {
    let settings = sslmode_settings(database_url).unwrap_or_default();
    let mut modes = Vec::with_capacity(settings.len());
    for setting in &settings {
        modes.push(SslMode::parse(&setting.value).ok_or(UrlError::SslMode)?);
    }
    // Every verify-* value becomes `require`, from the end so the earlier spans stay valid.
    let mut rewritten = database_url.to_string();
    for (setting, mode) in settings.iter().zip(&modes).rev() {
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
            rewritten.replace_range(setting.span.clone(), "require");
        }
    }
    let config: tokio_postgres::Config = rewritten.parse().map_err(|_| UrlError::Invalid)?;
    // The last setting wins, as in tokio-postgres and libpq.
    let ssl_mode = match modes.last() {
        Some(mode) => *mode,
        None => match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => SslMode::Disable,
            tokio_postgres::config::SslMode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        },
    };
    Ok(Target { config, ssl_mode })
}

/// The TLS connector for `mode`, with the roots of the PEM file `ca_cert` when given. The file is
/// read now, once: a change to it needs a restart.
pub fn connector(mode: SslMode, ca_cert: Option<&Path>) -> Result<MakeRustlsConnect, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let file_roots = match (mode, ca_cert) {
        (SslMode::Disable, _) | (_, None) => None,
        (_, Some(path)) => Some(Arc::new(roots_from_file(path)?)),
    };
    let config = match mode {
        SslMode::VerifyFull => builder
            .with_root_certificates(match file_roots {
                Some(roots) => roots,
                None => Arc::new(system_roots()),
            })
            .with_no_client_auth(),
        _ => {
            let chain = match (mode, file_roots) {
                (SslMode::VerifyCa, None) => Some(Arc::new(system_roots())),
                (_, roots) => roots,
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly { chain, provider }))
                .with_no_client_auth()
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The certificates of a PEM file, every one of them a root.
fn roots_from_file(path: &Path) -> Result<RootCertStore, TlsError> {
    let pem = std::fs::read(path).map_err(TlsError::CaUnreadable)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        // A PEM section that does not decode is as wrong as a certificate that does not parse.
        let cert = cert.map_err(|_| TlsError::CaEmpty)?;
        roots.add(cert).map_err(TlsError::CaInvalid)?;
    }
    if roots.is_empty() {
        return Err(TlsError::CaEmpty);
    }
    Ok(roots)
}

/// The platform's roots, or Mozilla's bundled roots when the platform has none usable.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if added > 0 {
        tracing::info!(
            roots = added,
            "PostgreSQL TLS: trusting the system's root certificates"
        );
    } else {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        tracing::info!(
            roots = roots.len(),
            "PostgreSQL TLS: the system has no root certificates; trusting the bundled Mozilla roots"
        );
    }
    roots
}

/// The verifier of every mode but `verify-full`: the certificate's chain to `chain` when given,
/// no check of it otherwise, never the host name. The handshake signature is always checked, so
/// the session is encrypted to the holder of the certificate's key.
#[derive(Debug)]
struct ChainOnly {
    chain: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.chain {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// One `sslmode` setting of a connection string: its (decoded) value and where the value is
/// written.
#[derive(Debug, PartialEq, Eq)]
struct Setting {
    value: String,
    span: Range<usize>,
}

/// The `sslmode` settings of a connection string, found the way tokio-postgres reads it; `None`
/// for a string it would refuse anyway.
fn sslmode_settings(s: &str) -> Option<Vec<Setting>> {
    let rest = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|prefix| s.strip_prefix(prefix));
    match rest {
        Some(rest) => Some(url_settings(s, s.len() - rest.len())),
        None => keyword_settings(s),
    }
}

/// The URL form: the credentials end at the first `@`, the query starts at the next `?`, and its
/// `key=value` pairs are separated by `&` and percent-encoded.
fn url_settings(s: &str, start: usize) -> Vec<Setting> {
    let after_credentials = s[start..].find('@').map_or(start, |at| start + at + 1);
    let Some(question) = s[after_credentials..].find('?') else {
        return Vec::new();
    };
    let mut settings = Vec::new();
    let mut pos = after_credentials + question + 1;
    while pos < s.len() {
        let Some(eq) = s[pos..].find('=') else { break };
        let key = &s[pos..pos + eq];
        let value_start = pos + eq + 1;
        let value_end = s[value_start..]
            .find('&')
            .map_or(s.len(), |amp| value_start + amp);
        if decode(key) == "sslmode" {
            settings.push(Setting {
                value: decode(&s[value_start..value_end]),
                span: value_start..value_end,
            });
        }
        pos = value_end + 1;
    }
    settings
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The `key=value` form: whitespace between settings and around `=`; a value is either quoted
/// with `'` or runs to the next whitespace, and `\` escapes the next character in both.
fn keyword_settings(s: &str) -> Option<Vec<Setting>> {
    let mut settings = Vec::new();
    let mut it = s.char_indices().peekable();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while it.next_if(|&(_, c)| c.is_whitespace()).is_some() {}
    };
    let at = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        it.peek().map_or(s.len(), |&(i, _)| i)
    };
    loop {
        skip_ws(&mut it);
        let key_start = at(&mut it);
        while it
            .next_if(|&(_, c)| !c.is_whitespace() && c != '=')
            .is_some()
        {}
        let key = &s[key_start..at(&mut it)];
        if key.is_empty() {
            return (it.peek().is_none()).then_some(settings);
        }
        skip_ws(&mut it);
        it.next_if(|&(_, c)| c == '=')?;
        skip_ws(&mut it);
        let quoted = it.next_if(|&(_, c)| c == '\'').is_some();
        let value_start = at(&mut it);
        let mut value = String::new();
        while let Some(&(_, c)) = it.peek() {
            if (quoted && c == '\'') || (!quoted && c.is_whitespace()) {
                break;
            }
            it.next();
            if c == '\\' {
                value.extend(it.next().map(|(_, escaped)| escaped));
            } else {
                value.push(c);
            }
        }
        let value_end = at(&mut it);
        if quoted {
            it.next_if(|&(_, c)| c == '\'')?;
        } else if value.is_empty() {
            return None;
        }
        if key == "sslmode" {
            settings.push(Setting {
                value,
                span: value_start..value_end,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio_postgres::config::{Host, SslMode as PgSslMode};

    use super::{SslMode, UrlError, parse_url};

    fn mode(url: &str) -> SslMode {
        parse_url(url).unwrap().ssl_mode
    }

    #[test]
    fn every_mode_parses_in_both_forms() {
        for (value, expected, pg) in [
            ("disable", SslMode::Disable, PgSslMode::Disable),
            ("prefer", SslMode::Prefer, PgSslMode::Prefer),
            ("require", SslMode::Require, PgSslMode::Require),
            ("verify-ca", SslMode::VerifyCa, PgSslMode::Require),
            ("verify-full", SslMode::VerifyFull, PgSslMode::Require),
        ] {
            for url in [
                format!("postgres://u:pw@db.example.com:5433/app?sslmode={value}"),
                format!("postgresql://u@db.example.com/app?application_name=x&sslmode={value}"),
                format!("host=db.example.com user=u sslmode={value} dbname=app"),
                format!("host=db.example.com sslmode = '{value}'"),
            ] {
                let target = parse_url(&url).unwrap();
                assert_eq!(target.ssl_mode, expected, "{url}");
                assert_eq!(target.config.get_ssl_mode(), pg, "{url}");
                assert_eq!(
                    target.config.get_hosts(),
                    [Host::Tcp("db.example.com".into())],
                    "{url}"
                );
            }
        }
    }

    /// Several hosts (tried in order by tokio-postgres) and `target_session_attrs`, with every
    /// `sslmode`: each host keeps its own port and name (the name a `verify-full` certificate is
    /// checked against, host by host), and only the `sslmode` value is rewritten.
    #[test]
    fn several_hosts_and_target_session_attrs() {
        use tokio_postgres::config::TargetSessionAttrs;
        for (value, expected) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            for url in [
                format!(
                    "postgres://app:pw@db-a.example.com:5432,db-b.example.com:5433/app\
                     ?target_session_attrs=read-write&sslmode={value}&connect_timeout=3"
                ),
                format!(
                    "host=db-a.example.com,db-b.example.com port=5432,5433 user=app \
                     dbname=app sslmode={value} target_session_attrs=read-write \
                     connect_timeout=3"
                ),
            ] {
                let target = parse_url(&url).unwrap();
                assert_eq!(target.ssl_mode, expected, "{url}");
                let pg = &target.config;
                assert_eq!(
                    pg.get_hosts(),
                    [
                        Host::Tcp("db-a.example.com".into()),
                        Host::Tcp("db-b.example.com".into())
                    ],
                    "{url}"
                );
                assert_eq!(pg.get_ports(), [5432, 5433], "{url}");
                assert_eq!(
                    pg.get_target_session_attrs(),
                    TargetSessionAttrs::ReadWrite,
                    "{url}"
                );
                assert_eq!(
                    pg.get_connect_timeout(),
                    Some(&std::time::Duration::from_secs(3))
                );
                assert_eq!(pg.get_dbname(), Some("app"));
            }
        }
        // One port for every host; IP addresses as hosts.
        let pg = parse_url(
            "postgresql://u@10.0.0.1,10.0.0.2:6432/db?sslmode=verify-full&target_session_attrs=any",
        )
        .unwrap()
        .config;
        assert_eq!(
            pg.get_hosts(),
            [Host::Tcp("10.0.0.1".into()), Host::Tcp("10.0.0.2".into())]
        );
        assert_eq!(pg.get_ports(), [5432, 6432]);
        assert_eq!(pg.get_target_session_attrs(), TargetSessionAttrs::Any);
        assert!(matches!(
            parse_url("postgres://u@h1,h2/db?target_session_attrs=primary"),
            Err(UrlError::Invalid)
        ));
    }

    #[test]
    fn the_default_is_prefer() {
        assert_eq!(mode("postgres://u@127.0.0.1:5432/db"), SslMode::Prefer);
        assert_eq!(mode("host=127.0.0.1 user=u"), SslMode::Prefer);
    }

    /// Only the `sslmode` value changes: the password, other parameters and their encoding reach
    /// tokio-postgres as written.
    #[test]
    fn the_rest_of_the_url_is_left_alone() {
        let target = parse_url(
            "postgres://app:p%40ss%3Fw%26rd=@db.example.com:6432/app%20db\
             ?options=-c%20search_path%3Dx&sslmode=verify-full&hostaddr=10.0.0.5",
        )
        .unwrap();
        assert_eq!(target.ssl_mode, SslMode::VerifyFull);
        let pg = target.config;
        assert_eq!(pg.get_password(), Some(&b"p@ss?w&rd="[..]));
        assert_eq!(pg.get_dbname(), Some("app db"));
        assert_eq!(pg.get_options(), Some("-c search_path=x"));
        assert_eq!(pg.get_ports(), [6432]);
        assert_eq!(
            pg.get_hostaddrs(),
            ["10.0.0.5".parse::<std::net::IpAddr>().unwrap()]
        );

        let pg = parse_url(r"host=h password='it\'s verify-full' sslmode='verify-ca'")
            .unwrap()
            .config;
        assert_eq!(pg.get_password(), Some(&b"it's verify-full"[..]));
    }

    #[test]
    fn percent_encoded_and_repeated_settings_read_like_tokio_postgres() {
        assert_eq!(
            mode("postgres://h/db?ssl%6Dode=verify%2Dfull"),
            SslMode::VerifyFull
        );
        // The last setting wins.
        assert_eq!(
            mode("postgres://h/db?sslmode=verify-full&sslmode=disable"),
            SslMode::Disable
        );
        assert_eq!(
            mode("sslmode=disable host=h sslmode=verify-ca"),
            SslMode::VerifyCa
        );
        // An `@` ends the credentials, even when a `?` came before it.
        assert_eq!(
            mode("postgres://u:a?b@h/db?sslmode=verify-ca"),
            SslMode::VerifyCa
        );
    }

    #[test]
    fn refusals_never_show_the_url() {
        for (url, expected) in [
            ("postgres://u:hunter2@h/db?sslmode=allow", UrlError::SslMode),
            (
                "postgres://u:hunter2@h/db?sslmode=verify_full",
                UrlError::SslMode,
            ),
            (
                "host=h password=hunter2 sslmode=VERIFY-FULL",
                UrlError::SslMode,
            ),
            ("postgres://u:hunter2@h:port/db", UrlError::Invalid),
            (
                "postgres://u:hunter2@h/db?sslrootcert=/ca.pem",
                UrlError::Invalid,
            ),
            ("host=h password=hunter2 sslmode=", UrlError::Invalid),
            ("host=h password='hunter2", UrlError::Invalid),
        ] {
            let err = parse_url(url).unwrap_err();
            assert_eq!(err, expected, "{url}");
            assert!(!err.to_string().contains("hunter2"));
        }
    }
}
