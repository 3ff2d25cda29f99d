//! `hapctl init`: a new state directory — settings, database, API token, default certificate.

use std::path::{Path, PathBuf};

use super::{io_err, EdgeError};
use crate::settings::{Settings, DEFAULT_SETTINGS_TOML, DEFAULT_USER, SETTINGS_FILE};
use crate::store::Store;

/// Where the settings `hapctl init` writes put HAProxy's files and who runs the master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Everything under the state directory; hapctl runs the master itself (direct mode).
    #[default]
    StateDir,
    /// A Debian host: the distribution's `haproxy.service` runs the master (systemd mode, its
    /// master socket and pidfile), HAProxy's files live under /etc/haproxy, the edge listens
    /// on :80 and :443. The certificates get a folder of their own: hapctl removes the PEM
    /// files it does not know from it, and /etc/haproxy/certs may hold someone else's.
    Debian,
}

/// The keys a Debian layout sets (each one line of `DEFAULT_SETTINGS_TOML`).
const DEBIAN: &[(&str, &str)] = &[
    ("http_bind", "0.0.0.0:80"),
    ("https_bind", "0.0.0.0:443"),
    ("binary", "/usr/sbin/haproxy"),
    ("mode", "systemd"),
    ("config", "/etc/haproxy/haproxy.cfg"),
    ("generation", "/etc/haproxy/generation.cfg"),
    ("maps_dir", "/etc/haproxy/maps"),
    ("pages_dir", "/etc/haproxy/pages"),
    ("certs_dir", "/etc/haproxy/hapctl-certs"),
    ("master_socket", "/run/haproxy-master.sock"),
    ("admin_socket", "/run/haproxy/admin.sock"),
    ("pidfile", "/run/haproxy.pid"),
];

/// Creates the state directory: settings, database and folders. `http_bind` replaces the
/// layout's public listener.
pub fn init(
    state_dir: &Path,
    force: bool,
    layout: Layout,
    http_bind: Option<&str>,
) -> Result<PathBuf, EdgeError> {
    let settings_path = state_dir.join(SETTINGS_FILE);
    // The workers' user is decided here, once, and written down (see `settings::Privileges`).
    let user = crate::settings::user_exists(DEFAULT_USER).then_some(DEFAULT_USER);
    let text = settings_text(layout, http_bind, user);
    // Parse before writing anything, so a bad value leaves no half-made state behind.
    let label = if http_bind.is_some() {
        Path::new("hapctl init --http-bind")
    } else {
        &settings_path
    };
    let settings = Settings::parse(state_dir, label, &text)?;
    let exists = settings_path.exists() || settings.paths.database.exists();
    if exists && !force {
        return Err(EdgeError::AlreadyInitialised {
            path: state_dir.to_path_buf(),
        });
    }
    std::fs::create_dir_all(state_dir)
        .map_err(io_err(format!("cannot create {}", state_dir.display())))?;
    if force {
        for suffix in ["", "-wal", "-shm"] {
            let mut db = settings.paths.database.clone().into_os_string();
            db.push(suffix);
            crate::fsutil::remove_durable(Path::new(&db))
                .map_err(io_err("cannot remove the old database"))?;
        }
    }
    for dir in [&settings.paths.run_dir, &settings.paths.journal_dir] {
        std::fs::create_dir_all(dir).map_err(io_err(format!("cannot create {}", dir.display())))?;
    }
    let mut store = Store::open(&settings.paths.database, &settings.paths.blocks_database)?;
    crate::tls::Certs::new(&settings).ensure_files(&mut store)?;
    write_new_token(&settings.api.token_file)?;
    crate::fsutil::write_atomic(&settings_path, text.as_bytes(), 0o644)
        .map_err(io_err(format!("cannot write {}", settings_path.display())))?;
    Ok(settings_path)
}

/// The commented default settings with the layout's keys, the listener and the workers' user.
fn settings_text(layout: Layout, http_bind: Option<&str>, user: Option<&str>) -> String {
    let mut text = DEFAULT_SETTINGS_TOML.to_string();
    if layout == Layout::Debian {
        for (key, value) in DEBIAN {
            text = set_key(&text, key, value);
        }
    }
    for (key, value) in [("http_bind", http_bind), ("user", user)] {
        if let Some(value) = value {
            text = set_key(&text, key, value);
        }
    }
    text
}

/// Replaces the value of the uncommented line `key = …` (the default file has one per key).
fn set_key(text: &str, key: &str, value: &str) -> String {
    let prefix = format!("{key} = ");
    let value = toml::Value::String(value.to_string()).to_string();
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line.strip_prefix(&prefix) {
            Some(_) => format!("{prefix}{value}"),
            None => line.to_string(),
        })
        .collect();
    lines.join("\n") + "\n"
}

/// A fresh random API token in a file only its owner can read.
fn write_new_token(path: &Path) -> Result<(), EdgeError> {
    let token =
        crate::access::Secret::generate().map_err(io_err("cannot make a random API token"))?;
    // Remove first: an existing file would keep its (possibly wider) mode.
    crate::fsutil::remove_durable(path).map_err(io_err("cannot replace the API token file"))?;
    crate::fsutil::write_atomic(path, format!("{}\n", token.reveal()).as_bytes(), 0o600)
        .map_err(io_err(format!("cannot write {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Mode;

    fn parse(text: &str) -> Settings {
        Settings::parse(Path::new("/var/lib/hapctl"), Path::new("test"), text).unwrap()
    }

    #[test]
    fn every_debian_key_is_one_line_of_the_default_file() {
        for key in DEBIAN.iter().map(|(k, _)| *k).chain(["user"]) {
            let prefix = format!("{key} = ");
            let n = DEFAULT_SETTINGS_TOML
                .lines()
                .filter(|l| l.starts_with(&prefix))
                .count();
            assert_eq!(n, 1, "`{key} = ` lines in DEFAULT_SETTINGS_TOML");
        }
    }

    #[test]
    fn the_debian_layout_fits_the_stock_unit_and_keeps_state_in_the_state_dir() {
        // No user here: parsing looks the account up on this host.
        let text = settings_text(Layout::Debian, None, None);
        let s = parse(&text);
        assert_eq!(s.haproxy.mode, Mode::Systemd);
        assert_eq!(s.haproxy.systemd_unit, "haproxy.service");
        assert_eq!(s.haproxy.binary, Path::new("/usr/sbin/haproxy"));
        assert_eq!(s.edge.http_bind.to_string(), "0.0.0.0:80");
        assert_eq!(s.edge.https_bind.unwrap().to_string(), "0.0.0.0:443");
        let p = &s.paths;
        assert_eq!(p.config, Path::new("/etc/haproxy/haproxy.cfg"));
        assert_eq!(p.generation, Path::new("/etc/haproxy/generation.cfg"));
        assert_eq!(p.maps_dir, Path::new("/etc/haproxy/maps"));
        assert_eq!(p.pages_dir, Path::new("/etc/haproxy/pages"));
        assert_eq!(p.certs_dir, Path::new("/etc/haproxy/hapctl-certs"));
        // The stock haproxy.service: `-S /run/haproxy-master.sock`, `-p /run/haproxy.pid`.
        assert_eq!(p.master_socket, Path::new("/run/haproxy-master.sock"));
        assert_eq!(p.pidfile, Path::new("/run/haproxy.pid"));
        // /run/haproxy is the package's own folder (tmpfiles.d, 2775 haproxy).
        assert_eq!(p.admin_socket, Path::new("/run/haproxy/admin.sock"));
        assert_eq!(s.logs.listen.to_string(), "127.0.0.1:601");
        for state in [
            &p.database,
            &p.blocks_database,
            &p.known_good_dir,
            &p.run_dir,
        ]
        .into_iter()
        .chain([&p.journal_dir, &p.acme_dir, &s.api.token_file, &s.logs.file])
        {
            assert!(state.starts_with("/var/lib/hapctl"), "{}", state.display());
        }
        // The comments stay: the file documents every key.
        assert_eq!(text.lines().count(), DEFAULT_SETTINGS_TOML.lines().count());
        let with_user = settings_text(Layout::Debian, None, Some("haproxy"));
        assert!(with_user.contains("\nuser = \"haproxy\"\n"), "{with_user}");
    }

    #[test]
    fn http_bind_and_user_apply_to_either_layout() {
        let s = parse(&settings_text(Layout::Debian, Some("192.0.2.1:8080"), None));
        assert_eq!(s.edge.http_bind.to_string(), "192.0.2.1:8080");
        assert!(s.haproxy.privileges.user.is_none());
        let text = settings_text(Layout::StateDir, Some("[::1]:80"), None);
        assert_eq!(parse(&text).edge.http_bind.to_string(), "[::1]:80");
        assert_eq!(parse(&text).haproxy.mode, Mode::Direct);
        assert_eq!(
            settings_text(Layout::StateDir, None, None),
            DEFAULT_SETTINGS_TOML,
            "the default layout is the default file"
        );
    }
}
