//! A private PostgreSQL cluster for the payment benchmark, so both connection kinds can be
//! measured against one server: `ssl = on` with a server certificate for `127.0.0.1` and
//! `localhost` signed by a CA made here (rcgen), `trust` for loopback connections with or
//! without TLS (`host` lines), every other setting initdb's stock default — what the shared
//! server on 5432 runs too. A client picks the kind with `sslmode=disable` or `sslmode=require`;
//! nothing else differs between the two. The cluster lives in `<dir>/subgate-pg-<tag>` (the
//! name puts "subgate" in the postmaster's command line, which `scripts/bench.sh` looks for
//! when it stops what an interrupted run left); dropping [`Cluster`] stops it (immediate
//! shutdown) and removes its files.

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

pub struct Cluster {
    pub root: PathBuf,
    bindir: PathBuf,
    user: Option<String>,
    pub port: u16,
    started: bool,
}

/// The directory holding `initdb` and `pg_ctl`: `pg_config --bindir`, else `PATH`, else the
/// newest `/usr/lib/postgresql/<major>/bin`; `None` when there is none.
fn pg_bindir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_both(&dir) {
            return Some(dir);
        }
    }
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|d| has_both(d))
    {
        return Some(dir);
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
    versions.pop().map(|(_, dir)| dir)
}

fn checked(what: &str, out: std::io::Result<Output>) -> Result<Output, String> {
    let out = out.map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

/// PostgreSQL refuses to run as root: as root, the cluster runs as `postgres`, or as the
/// `subgate-pg` user scripts/ensure-postgres.sh creates where there is none.
fn cluster_user() -> Result<Option<String>, String> {
    let uid = checked("id -u", Command::new("id").arg("-u").output())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Ok(None);
    }
    for user in ["postgres", "subgate-pg"] {
        if Command::new("id")
            .args(["-u", user])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(Some(user.to_string()));
        }
    }
    Err(
        "running as root with neither a postgres nor a subgate-pg user \
         (scripts/ensure-postgres.sh creates one)"
            .into(),
    )
}

impl Cluster {
    /// initdb and start; `Err` says why not (no server binaries, no port), and the caller
    /// falls back to the shared server without TLS.
    pub fn start(dir: &Path, tag: &str) -> Result<Cluster, String> {
        let bindir = pg_bindir().ok_or("initdb and pg_ctl not found")?;
        let root = dir.join(format!("subgate-pg-{tag}"));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let mut cluster = Cluster {
            root: root.clone(),
            bindir,
            user: cluster_user()?,
            port: 0,
            started: false,
        };
        let pki = make_pki()?;
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
        for (name, text, mode) in [
            ("ca.pem", pki.ca_pem.as_str(), 0o644),
            ("server.crt", pki.server_pem.as_str(), 0o644),
            ("server.key", pki.server_key_pem.as_str(), 0o600),
        ] {
            let path = root.join(name);
            fs::write(&path, text).map_err(|e| e.to_string())?;
            fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                .map_err(|e| e.to_string())?;
        }
        fs::create_dir(root.join("data")).map_err(|e| e.to_string())?;
        fs::set_permissions(root.join("data"), fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        if let Some(user) = &cluster.user {
            checked(
                "chown",
                Command::new("chown")
                    .arg("-R")
                    .arg(format!("{user}:"))
                    .arg(&root)
                    .output(),
            )?;
        }
        checked(
            "initdb",
            cluster
                .pg("initdb")
                .arg("-D")
                .arg(root.join("data"))
                .args(["-U", "postgres", "-E", "UTF8", "--no-locale", "--no-sync"])
                .args(["--auth", "trust"])
                .output(),
        )?;
        // Loopback, with TLS or without: the client's sslmode decides.
        fs::write(
            root.join("data/pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\n",
        )
        .map_err(|e| e.to_string())?;
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(root.join("data/postgresql.conf"))
            .map_err(|e| e.to_string())?;
        std::io::Write::write_all(
            &mut conf,
            format!(
                "\nlisten_addresses = '127.0.0.1'\n\
                 unix_socket_directories = '{root}'\n\
                 ssl = on\n\
                 ssl_cert_file = '{root}/server.crt'\n\
                 ssl_key_file = '{root}/server.key'\n",
                root = root.display()
            )
            .as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        // A free port can be taken by someone else before the server binds it: try a few.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| e.to_string())?
                .port();
            let out = cluster
                .pg("pg_ctl")
                .arg("-D")
                .arg(root.join("data"))
                .arg("-l")
                .arg(root.join("server.log"))
                .args(["-w", "-t", "60", "-o", &format!("-p {port}"), "start"])
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                cluster.port = port;
                cluster.started = true;
                if let Some(pid) = fs::read_to_string(root.join("data/postmaster.pid"))
                    .ok()
                    .and_then(|t| t.lines().next()?.trim().parse::<u32>().ok())
                {
                    crate::record_pid(pid);
                }
                return Ok(cluster);
            }
        }
        Err(format!(
            "the private cluster did not start; its log:\n{}",
            fs::read_to_string(root.join("server.log")).unwrap_or_default()
        ))
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

    /// The URL of `database` as user `postgres`, with `sslmode`.
    pub fn url(&self, database: &str, sslmode: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}?sslmode={sslmode}",
            self.port
        )
    }

    /// The CA that signed the server's certificate (`DATABASE_CA_CERT` for the server).
    pub fn ca_cert(&self) -> PathBuf {
        self.root.join("ca.pem")
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

struct Pki {
    ca_pem: String,
    server_pem: String,
    server_key_pem: String,
}

fn make_pki() -> Result<Pki, String> {
    let e = |e: rcgen::Error| e.to_string();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "subgate bench CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(e)?).map_err(e)?;
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .map_err(e)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(e)?;
    let server = params.signed_by(&key, &ca).map_err(e)?;
    Ok(Pki {
        ca_pem: ca.pem(),
        server_pem: server.pem(),
        server_key_pem: key.serialize_pem(),
    })
}
