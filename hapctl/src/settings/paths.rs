//! Where hapctl and HAProxy keep their files: resolved from `[paths]` against the state
//! directory by `Settings::parse`, and the run folder's locks, markers and sockets.

use std::path::{Path, PathBuf};

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

    /// `hapctl serve`'s API on a unix socket (0600), where the CLI sends its changes.
    pub fn api_socket(&self) -> PathBuf {
        self.run_dir.join("api.sock")
    }
}
