//! TLS to PostgreSQL, against a private cluster started here: `ssl=on` with a server certificate
//! for `localhost` and `127.0.0.1` signed by a CA made here (rcgen), and a pg_hba.conf that admits
//! only TLS sessions with a password (SCRAM). One cluster serves every case; a guard stops it and
//! removes its files when the test ends, pass or fail.

use std::{
    fs,
    net::TcpListener,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use subgate::{Config, common::error::ApiError, db};

use crate::support::helpers::JWT_SECRET;

const BIN: &str = env!("CARGO_BIN_EXE_subgate");

/// The cluster's password for `postgres`; no error message may show it.
const PASSWORD: &str = "tls-test-password-5b1f0c9e";

/// A CA, and a server certificate it signed for `localhost` and `127.0.0.1`.
struct Pki {
    ca_pem: String,
    server_pem: String,
    server_key_pem: String,
}

fn make_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn make_pki() -> Pki {
    let ca = make_ca("subgate test CA");
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let server = params.signed_by(&key, &ca).unwrap();
    Pki {
        ca_pem: ca.pem(),
        server_pem: server.pem(),
        server_key_pem: key.serialize_pem(),
    }
}

/// The directory holding `initdb` and `pg_ctl`: `pg_config --bindir`, else `PATH`, else the
/// newest `/usr/lib/postgresql/<major>/bin` (where scripts/ensure-postgres.sh looks too).
fn pg_bindir() -> PathBuf {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_both(&dir) {
            return dir;
        }
    }
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|d| has_both(d))
    {
        return dir;
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse().ok()?;
            Some((major, e.path().join("bin")))
        })
        .filter(|(_, dir)| has_both(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir).expect(
        "initdb and pg_ctl not found (pg_config --bindir, PATH, /usr/lib/postgresql/*/bin): \
         the TLS test needs the PostgreSQL server binaries",
    )
}

fn succeeded(what: &str, out: std::io::Result<Output>) -> Output {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// PostgreSQL refuses to run as root: as root, the cluster runs as `postgres`, or as the
/// `subgate-pg` user scripts/ensure-postgres.sh creates where there is none.
fn cluster_user() -> Option<String> {
    let uid = succeeded("id -u", Command::new("id").arg("-u").output());
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return None;
    }
    for user in ["postgres", "subgate-pg"] {
        if Command::new("id")
            .args(["-u", user])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(user.to_string());
        }
    }
    succeeded(
        "useradd subgate-pg",
        Command::new("useradd")
            .args(["-r", "-M", "-s", "/usr/sbin/nologin", "subgate-pg"])
            .output(),
    );
    Some("subgate-pg".to_string())
}

/// A private cluster; dropping it stops the server and removes its directory.
struct Cluster {
    root: PathBuf,
    bindir: PathBuf,
    user: Option<String>,
    port: u16,
    started: bool,
}

impl Cluster {
    fn start(pki: &Pki) -> Cluster {
        let root = std::env::temp_dir().join(format!(
            "subgate-tls-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ));
        fs::create_dir(&root).unwrap();
        let mut cluster = Cluster {
            root,
            bindir: pg_bindir(),
            user: cluster_user(),
            port: 0,
            started: false,
        };
        let root = cluster.root.clone();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        for (name, text, mode) in [
            ("server.crt", pki.server_pem.as_str(), 0o644),
            ("server.key", pki.server_key_pem.as_str(), 0o600),
            ("password", PASSWORD, 0o600),
        ] {
            let path = root.join(name);
            fs::write(&path, text).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        }
        fs::create_dir(root.join("data")).unwrap();
        fs::set_permissions(root.join("data"), fs::Permissions::from_mode(0o700)).unwrap();
        if let Some(user) = &cluster.user {
            succeeded(
                "chown",
                Command::new("chown")
                    .arg("-R")
                    .arg(format!("{user}:"))
                    .arg(&root)
                    .output(),
            );
        }
        succeeded(
            "initdb",
            cluster
                .pg("initdb")
                .arg("-D")
                .arg(root.join("data"))
                .args(["-U", "postgres", "-E", "UTF8", "--no-locale", "--no-sync"])
                .args(["--auth", "scram-sha-256"])
                .arg(format!("--pwfile={}", root.join("password").display()))
                .output(),
        );
        // Only TLS sessions, with a password; no line for Unix sockets.
        fs::write(
            root.join("data/pg_hba.conf"),
            "hostssl   all all 127.0.0.1/32 scram-sha-256\n\
             hostnossl all all 127.0.0.1/32 reject\n",
        )
        .unwrap();
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(root.join("data/postgresql.conf"))
            .unwrap();
        std::io::Write::write_all(
            &mut conf,
            format!(
                "\nlisten_addresses = '127.0.0.1'\n\
                 unix_socket_directories = '{root}'\n\
                 ssl = on\n\
                 ssl_cert_file = '{root}/server.crt'\n\
                 ssl_key_file = '{root}/server.key'\n\
                 fsync = off\n\
                 max_connections = 20\n\
                 shared_buffers = 16MB\n",
                root = root.display()
            )
            .as_bytes(),
        )
        .unwrap();
        // A free port can be taken by someone else before the server binds it: try a few.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let out = cluster
                .pg("pg_ctl")
                .arg("-D")
                .arg(root.join("data"))
                .arg("-l")
                .arg(root.join("server.log"))
                .args(["-w", "-t", "60", "-o", &format!("-p {port}"), "start"])
                .output()
                .unwrap();
            if out.status.success() {
                cluster.port = port;
                cluster.started = true;
                return cluster;
            }
        }
        panic!(
            "the private cluster did not start; its log:\n{}",
            fs::read_to_string(root.join("server.log")).unwrap_or_default()
        );
    }

    /// A command for the PostgreSQL program `name`, run as the cluster's user.
    fn pg(&self, name: &str) -> Command {
        let program = self.bindir.join(name);
        match &self.user {
            None => Command::new(program),
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", user, "--"]).arg(program);
                cmd
            }
        }
    }

    /// A URL for this cluster: user `postgres` with its password, `host`, then `params`.
    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@{host}:{}/postgres?{params}",
            self.port
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.started {
            let _ = self
                .pg("pg_ctl")
                .arg("-D")
                .arg(self.root.join("data"))
                .args(["-m", "immediate", "-w", "stop"])
                .output();
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Connects once through the service's pool; `Ok(ssl)` tells whether the session is encrypted.
/// An error reads as the service would log it.
async fn connect(url: &str, ca_cert: Option<&Path>) -> Result<bool, String> {
    let pool = db::pool_with_ca_cert(url, 1, ca_cert).map_err(|e| e.to_string())?;
    let client = pool
        .get()
        .await
        .map_err(|e| ApiError::from(e).to_string())?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

/// The error of a connection that must fail, checked to name `cause` and not the password.
async fn refused(url: &str, ca_cert: Option<&Path>, cause: &str) {
    let error = match connect(url, ca_cert).await {
        Ok(ssl) => panic!("{url} connected (ssl: {ssl}) but must not"),
        Err(e) => e,
    };
    assert!(
        error.contains(cause),
        "{url}: expected `{cause}` in: {error}"
    );
    assert!(!error.contains(PASSWORD), "the password leaked: {error}");
}

#[tokio::test]
async fn sslmode_and_ca_cert_against_a_server_with_tls() {
    let pki = make_pki();
    let cluster = Cluster::start(&pki);
    let ca = cluster.root.join("ca.pem");
    fs::write(&ca, &pki.ca_pem).unwrap();
    let wrong_ca = cluster.root.join("wrong-ca.pem");
    fs::write(&wrong_ca, make_ca("another CA").pem()).unwrap();
    let (ca, wrong_ca) = (Some(ca.as_path()), Some(wrong_ca.as_path()));
    // A host name the certificate does not name, reaching the same server through `hostaddr`.
    let elsewhere = |mode: &str| {
        cluster.url(
            "db.example.invalid",
            &format!("hostaddr=127.0.0.1&sslmode={mode}"),
        )
    };
    let unknown_issuer = "invalid peer certificate: UnknownIssuer";
    let not_for_name = "certificate not valid for name";

    // No check of the certificate without a CA, but encrypted all the same.
    assert_eq!(
        connect(&cluster.url("localhost", "sslmode=require"), None).await,
        Ok(true)
    );
    assert_eq!(connect(&elsewhere("require"), None).await, Ok(true));
    // prefer, also the default, takes TLS when the server offers it.
    assert_eq!(
        connect(&cluster.url("localhost", "sslmode=prefer"), None).await,
        Ok(true)
    );
    assert_eq!(connect(&cluster.url("localhost", ""), None).await, Ok(true));
    // disable against a server that admits TLS sessions only.
    refused(
        &cluster.url("localhost", "sslmode=disable"),
        ca,
        "no encryption",
    )
    .await;

    // verify-full: the chain to the CA and the host name, a DNS name or an IP address.
    assert_eq!(
        connect(&cluster.url("localhost", "sslmode=verify-full"), ca).await,
        Ok(true)
    );
    assert_eq!(
        connect(&cluster.url("127.0.0.1", "sslmode=verify-full"), ca).await,
        Ok(true)
    );
    refused(
        &cluster.url("localhost", "sslmode=verify-full"),
        wrong_ca,
        unknown_issuer,
    )
    .await;
    refused(&elsewhere("verify-full"), ca, not_for_name).await;
    // Without DATABASE_CA_CERT the system's roots, which do not hold the test CA.
    refused(
        &cluster.url("localhost", "sslmode=verify-full"),
        None,
        unknown_issuer,
    )
    .await;

    // Several hosts (a failover setup): each is checked against its own name. A dead first
    // host is passed over; so is one whose certificate does not name it, for the next one.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let port = cluster.port;
    let hosts = |list: &str, params: &str| {
        format!("postgres://postgres:{PASSWORD}@{list}/postgres?sslmode=verify-full&{params}")
    };
    assert_eq!(
        connect(
            &hosts(
                &format!("127.0.0.1:{dead},localhost:{port}"),
                "target_session_attrs=read-write"
            ),
            ca
        )
        .await,
        Ok(true)
    );
    assert_eq!(
        connect(
            &hosts(
                &format!("db.example.invalid:{port},localhost:{port}"),
                "hostaddr=127.0.0.1,127.0.0.1"
            ),
            ca
        )
        .await,
        Ok(true)
    );
    refused(
        &hosts(
            &format!("localhost:{dead},db.example.invalid:{port}"),
            "hostaddr=127.0.0.1,127.0.0.1&target_session_attrs=read-write",
        ),
        ca,
        not_for_name,
    )
    .await;

    // verify-ca: the chain, not the host name.
    assert_eq!(connect(&elsewhere("verify-ca"), ca).await, Ok(true));
    refused(&elsewhere("verify-ca"), wrong_ca, unknown_issuer).await;
    refused(&elsewhere("verify-ca"), None, unknown_issuer).await;

    // With DATABASE_CA_CERT, require and prefer check the chain as verify-ca does.
    assert_eq!(connect(&elsewhere("require"), ca).await, Ok(true));
    refused(&elsewhere("require"), wrong_ca, unknown_issuer).await;
    refused(&elsewhere("prefer"), wrong_ca, unknown_issuer).await;

    // The binary reads DATABASE_URL and DATABASE_CA_CERT from its environment. Returns whether
    // it succeeded and all it printed.
    let migrate = |url: &str, ca_cert: &Path| {
        let out = Command::new(BIN)
            .arg("migrate")
            .env_clear()
            .env("DATABASE_URL", url)
            .env("DATABASE_CA_CERT", ca_cert)
            .env("JWT_SECRET", JWT_SECRET)
            .output()
            .unwrap();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !printed.contains(PASSWORD),
            "the password leaked: {printed}"
        );
        (out.status.success(), printed)
    };
    let verify_full = cluster.url("localhost", "sslmode=verify-full");
    let (ok, printed) = migrate(&verify_full, ca.unwrap());
    assert!(ok && printed.contains("database migrated"), "{printed}");
    let (ok, printed) = migrate(&verify_full, wrong_ca.unwrap());
    assert!(!ok && printed.contains(unknown_issuer), "{printed}");
    let (ok, printed) = migrate(&verify_full, &cluster.root.join("missing.pem"));
    assert!(
        !ok && printed.contains("DATABASE_CA_CERT cannot be read"),
        "{printed}"
    );

    drop(cluster);
}

/// A `DATABASE_CA_CERT` that cannot serve stops the pool from being built, naming the variable
/// and not the URL; with `sslmode=disable` the file is not read.
#[test]
fn an_unusable_ca_cert_file_is_refused_at_start_up() {
    let dir = std::env::temp_dir().join(format!(
        "subgate-tls-ca-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ));
    fs::create_dir(&dir).unwrap();
    let not_pem = dir.join("not-pem.txt");
    fs::write(&not_pem, "not a certificate").unwrap();
    let key_only = dir.join("key.pem");
    fs::write(&key_only, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let url = format!("postgres://postgres:{PASSWORD}@localhost/db?sslmode=verify-full");
    for (file, expected) in [
        (dir.join("missing.pem"), "DATABASE_CA_CERT cannot be read"),
        (not_pem, "DATABASE_CA_CERT holds no PEM certificate"),
        (key_only, "DATABASE_CA_CERT holds no PEM certificate"),
    ] {
        let error = db::pool_with_ca_cert(&url, 1, Some(&file))
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{error}");
        assert!(
            !error.contains(PASSWORD) && !error.contains("localhost"),
            "{error}"
        );
    }
    let disabled = url.replace("verify-full", "disable");
    assert!(db::pool_with_ca_cert(&disabled, 1, Some(&dir.join("missing.pem"))).is_ok());

    // The same through the configuration: a bad sslmode is refused before any pool exists.
    let env = [
        ("DATABASE_URL", url.replace("verify-full", "verify")),
        ("JWT_SECRET", JWT_SECRET.to_string()),
    ];
    let error = Config::from_lookup(|k| {
        env.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        error,
        "configuration error: DATABASE_URL sslmode must be disable, prefer, require, \
         verify-ca or verify-full"
    );
    let _ = fs::remove_dir_all(&dir);
}
