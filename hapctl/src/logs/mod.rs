//! The access log: HAProxy writes one JSON line per request (`haproxy.cfg.j2`, log-format)
//! into an in-memory `ring` and forwards the ring over a unix stream socket; `hapctl serve`
//! runs the [`Receiver`], which writes the lines to a size-rotated file (`rotate.rs`);
//! `hapctl logs` reads them back (`record.rs`).
//!
//! HAProxy never waits for the log. What the socket cannot take yet stays in the ring
//! (`[logs] buffer` per HAProxy process) and is sent when it can: while `hapctl serve` is
//! down or slow, lines wait there; only when the ring is full are its oldest lines lost. A
//! datagram socket, the earlier design, dropped every line past `net.unix.max_dgram_qlen`
//! (10 by default on Linux) queued datagrams: a quarter of them at 20,000 requests/s.

mod receive;
mod record;
mod rotate;
mod socket;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::settings::{LogSettings, LogTarget};

pub use record::{
    read_page, read_tail, AccessRecord, DomainFilter, Filter, Follower, Page, RequestId,
    StatusFilter,
};
pub use rotate::{rotated_path, RotatingFile};

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("another process already reads the access-log socket {0}; stop the other `hapctl serve` first")]
    SocketInUse(PathBuf),
    #[error("{0} exists and is not a socket; remove it or set [logs] socket")]
    NotASocket(PathBuf),
    #[error("cannot bind the access-log socket {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
    #[error("cannot open the access log {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot read the access log {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("the access log goes to {0}, not to a file: read it there")]
    NotAFile(String),
    #[error("HAProxy's workers (group {gid}) cannot reach the access-log socket {socket}: {dir} has no search permission for them; chmod o+x (or g+x with that group) {dir}, or set [logs] socket elsewhere")]
    Unreachable {
        socket: PathBuf,
        dir: PathBuf,
        gid: u32,
    },
}

/// The file `hapctl serve` writes the access log to, for `hapctl logs` and `GET /v1/logs`;
/// an error naming where it goes instead when it goes elsewhere.
pub fn access_log_file(settings: &LogSettings) -> Result<&std::path::Path, LogError> {
    match &settings.target {
        LogTarget::File => Ok(&settings.file),
        LogTarget::Syslog { host, port } => {
            Err(LogError::NotAFile(format!("syslog at {host}:{port}")))
        }
        LogTarget::Journald => Err(LogError::NotAFile(
            "journald (journalctl -t haproxy)".into(),
        )),
    }
}

/// What the receiver did since it started.
#[derive(Debug, Default)]
pub struct ReceiverStats {
    pub lines: AtomicU64,
    pub bytes: AtomicU64,
    pub rotations: AtomicU64,
    /// Connections HAProxy opened (one per process and restart of the forwarder).
    pub connections: AtomicU64,
    /// HAProxy's own messages (not requests), passed to the daemon's log.
    pub notices: AtomicU64,
    /// Lines that could not be written (disk full, …): lost, and logged once per burst.
    pub write_errors: AtomicU64,
}

/// The threads reading the access-log socket. Stopped (and the file flushed) on drop.
pub struct Receiver {
    pub stats: Arc<ReceiverStats>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Receiver {
    /// Binds `settings.socket` (replacing a stale socket file nobody reads) and starts writing
    /// what arrives to `settings.file`. `worker_gid` is the group HAProxy's workers drop to
    /// (`Privileges::worker_group`): the socket gets that group (mode 0660), and every folder
    /// above it must let that group through.
    pub fn start(settings: &LogSettings, worker_gid: Option<u32>) -> Result<Receiver, LogError> {
        let listener = socket::bind(&settings.socket, worker_gid)?;
        let file = RotatingFile::open(&settings.file, settings.max_size, settings.keep).map_err(
            |source| LogError::Open {
                path: settings.file.clone(),
                source,
            },
        )?;
        let stats = Arc::new(ReceiverStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let threads =
            receive::start(listener, file, stats.clone(), stop.clone()).map_err(|source| {
                LogError::Bind {
                    path: settings.socket.clone(),
                    source,
                }
            })?;
        Ok(Receiver {
            stats,
            stop,
            threads: threads.into(),
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The acceptor (and its readers) first: the writer ends when their senders are gone.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::settings::LogTarget;

    fn settings(dir: &Path) -> LogSettings {
        LogSettings {
            target: LogTarget::File,
            socket: dir.join("run/log.sock"),
            file: dir.join("logs/access.log"),
            max_size: 1 << 20,
            keep: 1,
            buffer: 1 << 20,
        }
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(done(), "{what}");
    }

    #[test]
    fn streams_become_whole_lines_and_a_second_receiver_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        let receiver = Receiver::start(&s, None).unwrap();
        assert!(matches!(
            Receiver::start(&s, None),
            Err(LogError::SocketInUse(_))
        ));
        // Two workers at once (a reload), lines cut across writes, a notice, an empty line.
        let mut old = UnixStream::connect(&s.socket).unwrap();
        let mut new = UnixStream::connect(&s.socket).unwrap();
        for i in 0..500 {
            let line = format!("{{\"n\":{i}}}\n");
            let (a, b) = line.as_bytes().split_at(3);
            let w = if i % 2 == 0 { &mut old } else { &mut new };
            w.write_all(a).unwrap();
            w.flush().unwrap();
            w.write_all(b).unwrap();
        }
        old.write_all(b"\nProxy fe_http stopped.\n").unwrap();
        // A last line without its newline, from a worker that exits: kept.
        new.write_all(b"{\"n\":500}").unwrap();
        drop((old, new));
        wait_for("501 lines and 1 notice", || {
            receiver.stats.lines.load(Ordering::SeqCst) == 501
                && receiver.stats.notices.load(Ordering::SeqCst) == 1
        });
        // The two workers, and the probe of the refused second receiver.
        assert_eq!(receiver.stats.connections.load(Ordering::SeqCst), 3);
        drop(receiver);
        let text = std::fs::read_to_string(&s.file).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 501);
        lines.sort_by_key(|l| l.len());
        assert!(lines.contains(&"{\"n\":499}") && lines.contains(&"{\"n\":500}"));
        // The socket file is stale now: the next receiver takes it over.
        drop(Receiver::start(&s, None).unwrap());
    }

    #[test]
    fn a_stop_flushes_what_an_open_connection_sent() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        let receiver = Receiver::start(&s, None).unwrap();
        let mut worker = UnixStream::connect(&s.socket).unwrap();
        worker.write_all(b"{\"a\":1}\n{\"a\":2}\n").unwrap();
        wait_for("2 lines", || {
            receiver.stats.lines.load(Ordering::SeqCst) == 2
        });
        // The worker's connection is still open: the stop must not wait for it.
        drop(receiver);
        assert_eq!(
            std::fs::read_to_string(&s.file).unwrap(),
            "{\"a\":1}\n{\"a\":2}\n"
        );
    }

    #[test]
    fn a_file_in_the_way_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        std::fs::create_dir_all(s.socket.parent().unwrap()).unwrap();
        std::fs::write(&s.socket, b"keep me").unwrap();
        assert!(matches!(
            Receiver::start(&s, None),
            Err(LogError::NotASocket(_))
        ));
        assert_eq!(std::fs::read(&s.socket).unwrap(), b"keep me");
    }
}
