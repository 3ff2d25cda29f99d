//! Where hapctl and HAProxy keep their files: resolved from `[paths]` against the state
//! directory by `Settings::parse`, and the run folder's locks, markers and sockets.

use std::path::{Path, PathBuf};

use super::{check_config_path, refused, RawPaths, Refused};

/// Every file and folder hapctl or HAProxy touches.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Main configuration file (`-f`).
    pub config: PathBuf,
    /// Included generation file (second `-f`): the application backends.
    pub generation: PathBuf,
    pub maps_dir: PathBuf,
    pub pages_dir: PathBuf,
    pub known_good_dir: PathBuf,
    pub run_dir: PathBuf,
    pub journal_dir: PathBuf,
    pub database: PathBuf,
    /// Blocks have their own database file (see `store`).
    pub blocks_database: PathBuf,
    pub master_socket: PathBuf,
    pub admin_socket: PathBuf,
    pub pidfile: PathBuf,
    /// Where the master's stderr goes in `direct` mode.
    pub haproxy_log: PathBuf,
    /// Certificate files HAProxy loads (one PEM per certificate: chain then key), and the
    /// crt-list naming them. Mode 0700: the files hold private keys.
    pub certs_dir: PathBuf,
    /// The ACME account key and state. Mode 0700.
    pub acme_dir: PathBuf,
}

impl Paths {
    /// `[paths]`, each resolved by `resolve` (relative to the state directory) with its
    /// default, and refused if it could break out of a token of haproxy.cfg.
    pub(super) fn resolve(
        p: RawPaths,
        resolve: &dyn Fn(Option<PathBuf>, &str) -> PathBuf,
    ) -> Result<Paths, Refused> {
        let paths = Paths {
            config: resolve(p.config, "live/haproxy.cfg"),
            generation: resolve(p.generation, "live/generation.cfg"),
            maps_dir: resolve(p.maps_dir, "live/maps"),
            pages_dir: resolve(p.pages_dir, "live/pages"),
            known_good_dir: resolve(p.known_good_dir, "known-good"),
            run_dir: resolve(p.run_dir, "run"),
            journal_dir: resolve(p.journal_dir, "journal"),
            database: resolve(p.database, "state.db"),
            blocks_database: resolve(p.blocks_database, "blocks.db"),
            master_socket: resolve(p.master_socket, "run/master.sock"),
            admin_socket: resolve(p.admin_socket, "run/admin.sock"),
            pidfile: resolve(p.pidfile, "run/haproxy.pid"),
            haproxy_log: resolve(p.haproxy_log, "haproxy.log"),
            certs_dir: resolve(p.certs_dir, "live/certs"),
            acme_dir: resolve(p.acme_dir, "acme"),
        };
        // Paths end up inside haproxy.cfg: refuse anything that could break out of a token.
        for (key, path) in [
            ("paths.config", &paths.config),
            ("paths.generation", &paths.generation),
            ("paths.maps_dir", &paths.maps_dir),
            ("paths.pages_dir", &paths.pages_dir),
            ("paths.admin_socket", &paths.admin_socket),
            ("paths.master_socket", &paths.master_socket),
            ("paths.pidfile", &paths.pidfile),
            ("paths.certs_dir", &paths.certs_dir),
        ] {
            check_config_path(path).map_err(refused(key))?;
        }
        if paths.config == paths.generation {
            return Err(refused("paths.generation")(
                "must differ from paths.config".into(),
            ));
        }
        Ok(paths)
    }

    /// The `-f` arguments HAProxy is started and checked with, in order.
    pub fn config_files(&self) -> [&Path; 2] {
        [&self.config, &self.generation]
    }

    /// Lock serialising every apply on this host.
    pub fn apply_lock(&self) -> PathBuf {
        self.run_dir.join("apply.lock")
    }

    /// Lock serialising every write of the blocked-clients map (file and runtime).
    pub fn blocks_lock(&self) -> PathBuf {
        self.run_dir.join("blocks.lock")
    }

    /// Marker present while an apply is between its first write and its end.
    pub fn apply_marker(&self) -> PathBuf {
        self.run_dir.join("apply.pending")
    }

    /// API tokens and the audit trail (`store::AccessStore`), beside the main database.
    pub fn access_database(&self) -> PathBuf {
        self.database.with_file_name("access.db")
    }

    /// `hapctl serve`'s API on a unix socket (0600), where the CLI sends its changes.
    pub fn api_socket(&self) -> PathBuf {
        self.run_dir.join("api.sock")
    }
}
