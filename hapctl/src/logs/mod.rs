//! The access log: HAProxy writes one JSON line per request (`haproxy.cfg.j2`, log-format)
//! into an in-memory `ring` and forwards the ring over loopback TCP (`[logs] listen`);
//! `hapctl serve` runs the [`Receiver`], which reads only HAProxy's connections (`peer.rs`)
//! and writes the lines to a size-rotated file (`rotate.rs`); `hapctl logs` reads them back
//! (`record.rs`).
//!
//! HAProxy never waits for the log. What the connection cannot take yet stays in the ring
//! (`[logs] buffer` per HAProxy process) and is sent when it can: while `hapctl serve` is
//! down or slow, lines wait there; only when the ring is full are its oldest lines lost. A
//! datagram socket, the earlier design, dropped every line past `net.unix.max_dgram_qlen`
//! (10 by default on Linux) queued datagrams: a quarter of them at 20,000 requests/s. A unix
//! stream socket, the next one, made HAProxy (2.6 and 3.0) spin a core while nobody
//! listened: it retries a connect that fails at once without waiting, where a refused TCP
//! connect waits 1 s.

mod peer;
mod receive;
mod record;
mod rotate;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::settings::{LogSettings, LogTarget};

pub use record::{
    read_page, read_tail, AccessRecord, DomainFilter, Filter, Follower, LogPage, RequestId,
    StatusFilter,
};
pub use rotate::{rotated_path, RotatingFile};

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("another process already listens on {0} (another `hapctl serve`?): stop it first, or set [logs] listen to a free loopback port")]
    ListenInUse(SocketAddr),
    #[error("only root may listen on {0} (a port below 1024) for the access log: run hapctl serve as root, or set [logs] listen to a higher loopback port")]
    ListenDenied(SocketAddr),
    #[error("cannot listen on {addr} for the access log: {source}")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("cannot open the access log {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot read the access log {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("the access log goes to {0}, not to a file: read it there")]
    NotAFile(String),
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

/// Sees each chunk of whole lines (HAProxy's notices among them) before it is written, on the
/// writer's thread: it must be quick (the traffic counts hand it to a thread of their own).
pub type LineTap = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// What the receiver did since it started.
#[derive(Debug, Default)]
pub struct ReceiverStats {
    pub lines: AtomicU64,
    pub bytes: AtomicU64,
    pub rotations: AtomicU64,
    /// Connections HAProxy opened (one per process and restart of the forwarder).
    pub connections: AtomicU64,
    /// Connections not read: another user's (forged lines), or one whose sender is unknown.
    pub refused: AtomicU64,
    /// HAProxy's own messages (not requests), passed to the daemon's log.
    pub notices: AtomicU64,
    /// Lines that could not be written (disk full, …): lost, and logged once per burst.
    pub write_errors: AtomicU64,
}

/// The threads reading the access log. Stopped (and the file flushed) on drop.
pub struct Receiver {
    pub stats: Arc<ReceiverStats>,
    listen: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Receiver {
    /// Listens on `settings.listen` and starts writing what HAProxy sends to `settings.file`.
    /// `worker_uid` is the user HAProxy's workers drop to (`Privileges::worker_user`): their
    /// connections are read, like root's and this process user's; anyone else's are closed.
    /// `tap`, if any, sees every chunk of lines before it is written.
    pub fn start(
        settings: &LogSettings,
        worker_uid: Option<u32>,
        tap: Option<LineTap>,
    ) -> Result<Receiver, LogError> {
        let addr = settings.listen;
        let listen_error = |source: io::Error| match source.kind() {
            io::ErrorKind::AddrInUse => LogError::ListenInUse(addr),
            io::ErrorKind::PermissionDenied => LogError::ListenDenied(addr),
            _ => LogError::Listen { addr, source },
        };
        let listener = std::net::TcpListener::bind(addr).map_err(listen_error)?;
        let listen = listener.local_addr().map_err(listen_error)?;
        if listen.port() >= unprivileged_port_start() {
            tracing::warn!(
                "access log: {listen} is a port any local user may listen on while hapctl serve is down, and HAProxy would send them the access log; on a shared host use a port below 1024 ([logs] listen, as root)"
            );
        }
        // Accepting polls so that the acceptor notices a stop.
        listener.set_nonblocking(true).map_err(listen_error)?;
        let file = RotatingFile::open(&settings.file, settings.max_size, settings.keep).map_err(
            |source| LogError::Open {
                path: settings.file.clone(),
                source,
            },
        )?;
        let stats = Arc::new(ReceiverStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let senders = peer::Senders::haproxy(worker_uid);
        let threads = receive::start(listener, senders, (file, tap), stats.clone(), stop.clone())
            .map_err(listen_error)?;
        Ok(Receiver {
            stats,
            listen,
            stop,
            threads: threads.into(),
        })
    }

    /// The address it listens on.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }
}

/// The lowest port a process without `CAP_NET_BIND_SERVICE` may listen on.
fn unprivileged_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(1024)
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
    use std::net::TcpStream;
    use std::os::unix::process::CommandExt;
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::settings::LogTarget;

    fn settings(dir: &Path) -> LogSettings {
        LogSettings {
            target: LogTarget::File,
            listen: "127.0.0.1:0".parse().unwrap(),
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

    /// Connects and waits until the receiver took the connection (it reads only open ones).
    fn connect(receiver: &Receiver, count: u64) -> TcpStream {
        let stream = TcpStream::connect(receiver.listen()).unwrap();
        wait_for("the connection is accepted", || {
            receiver.stats.connections.load(Ordering::SeqCst) == count
        });
        stream
    }

    #[test]
    fn streams_become_whole_lines_and_a_second_receiver_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path());
        let receiver = Receiver::start(&s, None, None).unwrap();
        s.listen = receiver.listen();
        assert!(matches!(
            Receiver::start(&s, None, None),
            Err(LogError::ListenInUse(a)) if a == s.listen
        ));
        // Two workers at once (a reload), lines cut across writes, a notice, an empty line.
        let mut old = connect(&receiver, 1);
        let mut new = connect(&receiver, 2);
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
        drop(receiver);
        let text = std::fs::read_to_string(&s.file).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 501);
        lines.sort_by_key(|l| l.len());
        assert!(lines.contains(&"{\"n\":499}") && lines.contains(&"{\"n\":500}"));
        // The port is free again: the next receiver takes it.
        drop(Receiver::start(&s, None, None).unwrap());
    }

    #[test]
    fn a_stop_flushes_what_an_open_connection_sent() {
        let dir = tempfile::tempdir().unwrap();
        let receiver = Receiver::start(&settings(dir.path()), None, None).unwrap();
        let mut worker = connect(&receiver, 1);
        worker.write_all(b"{\"a\":1}\n{\"a\":2}\n").unwrap();
        wait_for("2 lines", || {
            receiver.stats.lines.load(Ordering::SeqCst) == 2
        });
        // The worker's connection is still open: the stop must not wait for it.
        drop(receiver);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("logs/access.log")).unwrap(),
            "{\"a\":1}\n{\"a\":2}\n"
        );
    }

    #[test]
    fn another_users_lines_are_not_written() {
        // Needs root to run the sender as user 65534; the suites run as root (README).
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "run the tests as root");
        let dir = tempfile::tempdir().unwrap();
        let receiver = Receiver::start(&settings(dir.path()), Some(108), None).unwrap();
        let addr = receiver.listen();
        // Holds the connection open (as HAProxy does) so the receiver sees who owns it.
        let forge = format!(
            "exec 3<>/dev/tcp/{}/{}; echo '{{\"forged\":1}}' >&3; sleep 2",
            addr.ip(),
            addr.port()
        );
        let mut nobody = std::process::Command::new("bash")
            .args(["-c", &forge])
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        wait_for("the forger's connection is refused", || {
            receiver.stats.refused.load(Ordering::SeqCst) == 1
        });
        let mut worker = connect(&receiver, 1);
        worker.write_all(b"{\"real\":1}\n").unwrap();
        wait_for("the real line", || {
            receiver.stats.lines.load(Ordering::SeqCst) == 1
        });
        let _ = nobody.kill();
        let _ = nobody.wait();
        drop(receiver);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("logs/access.log")).unwrap(),
            "{\"real\":1}\n"
        );
    }
}
