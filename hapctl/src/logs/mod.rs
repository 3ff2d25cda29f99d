//! The access log: HAProxy sends one JSON line per request (`haproxy.cfg.j2`, log-format) as
//! a datagram to a unix socket; `hapctl serve` runs the [`Receiver`], which writes the lines to
//! a size-rotated file (`rotate.rs`); `hapctl logs` reads them back (`record.rs`).
//!
//! HAProxy never waits for the log: its send is non-blocking and a datagram the socket cannot
//! take (no receiver, or a receive queue full — `net.unix.max_dgram_qlen` datagrams, 10 by
//! default on Linux) is dropped and counted by HAProxy as `DroppedLogs` (`show info`).

mod record;
mod rotate;

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::settings::LogSettings;

pub use record::{read_tail, AccessRecord, DomainFilter, Filter, Follower, StatusFilter};
pub use rotate::{rotated_path, RotatingFile};

/// Largest datagram read; HAProxy's lines are cut at `render::LOG_LEN`, below it.
const DATAGRAM_MAX: usize = 64 * 1024;
/// Bound on one wait for a datagram: the loop flushes and checks for a stop this often.
const READ_TIMEOUT: Duration = Duration::from_millis(100);
/// Buffered lines reach the file at least this often under a steady stream.
const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// Socket receive buffer asked for (the kernel caps it at `net.core.rmem_max` unless root).
const RECEIVE_BUFFER: libc::c_int = 4 * 1024 * 1024;

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

/// What the receiver did since it started.
#[derive(Debug, Default)]
pub struct ReceiverStats {
    pub lines: AtomicU64,
    pub bytes: AtomicU64,
    pub rotations: AtomicU64,
    /// HAProxy's own messages (not requests), passed to the daemon's log.
    pub notices: AtomicU64,
    /// Lines that could not be written (disk full, …): lost, and logged once per burst.
    pub write_errors: AtomicU64,
}

/// The thread reading the access-log socket. Stopped (and its buffer flushed) on drop.
pub struct Receiver {
    pub stats: Arc<ReceiverStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// Binds `settings.socket` (replacing a stale socket file nobody reads) and starts writing
    /// what arrives to `settings.file`. `worker_gid` is the group HAProxy's workers drop to
    /// (`Privileges::worker_group`): the socket gets that group (mode 0660), and every folder
    /// above it must let that group through.
    pub fn start(settings: &LogSettings, worker_gid: Option<u32>) -> Result<Receiver, LogError> {
        let socket = bind(&settings.socket, worker_gid)?;
        let file = RotatingFile::open(&settings.file, settings.max_size, settings.keep).map_err(
            |source| LogError::Open {
                path: settings.file.clone(),
                source,
            },
        )?;
        let stats = Arc::new(ReceiverStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (s, flag) = (stats.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || receive(socket, file, &s, &flag))
            .map_err(|source| LogError::Bind {
                path: settings.socket.clone(),
                source,
            })?;
        Ok(Receiver {
            stats,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bind(path: &Path, worker_gid: Option<u32>) -> Result<UnixDatagram, LogError> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(LogError::NotASocket(path.to_path_buf()));
        }
        // A datagram socket someone is bound to accepts a connect; a stale file refuses it.
        let probe = UnixDatagram::unbound().and_then(|p| p.connect(path));
        if probe.is_ok() {
            return Err(LogError::SocketInUse(path.to_path_buf()));
        }
        let _ = std::fs::remove_file(path);
    }
    let bind_error = |source| LogError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(bind_error)?;
    }
    let socket = UnixDatagram::bind(path).map_err(bind_error)?;
    // Owner and group: HAProxy's workers send as the user they run as.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(bind_error)?;
    if let Some(gid) = worker_gid {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(bind_error)?;
        check_reachable(path, gid)?;
    }
    socket
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(bind_error)?;
    set_receive_buffer(&socket);
    Ok(socket)
}

/// Every folder above `socket` must be searchable by a process of group `gid` that is not the
/// folder's owner (the workers' user owns none of hapctl's folders).
fn check_reachable(socket: &Path, gid: u32) -> Result<(), LogError> {
    use std::os::unix::fs::MetadataExt;
    for dir in socket.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let meta = std::fs::metadata(dir).map_err(|source| LogError::Bind {
            path: socket.to_path_buf(),
            source,
        })?;
        let mode = meta.mode();
        if mode & 0o001 == 0 && !(mode & 0o010 != 0 && meta.gid() == gid) {
            return Err(LogError::Unreachable {
                socket: socket.to_path_buf(),
                dir: dir.to_path_buf(),
                gid,
            });
        }
    }
    Ok(())
}

fn set_receive_buffer(socket: &UnixDatagram) {
    let size = RECEIVE_BUFFER;
    for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: a valid fd and a c_int option value of the right length.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                &size as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return;
        }
    }
}

fn receive(socket: UnixDatagram, mut file: RotatingFile, stats: &ReceiverStats, stop: &AtomicBool) {
    let mut buf = vec![0u8; DATAGRAM_MAX];
    let mut dirty = false;
    let mut last_flush = Instant::now();
    let mut failing = false;
    while !stop.load(Ordering::SeqCst) {
        let result = match socket.recv(&mut buf) {
            Ok(n) => {
                let line = trim_line(&buf[..n]);
                if line.is_empty() {
                    continue;
                }
                // HAProxy's own notices (a proxy stopped at a reload, a server went down)
                // share the socket; the access log holds only the JSON records.
                if !line.starts_with(b"{") {
                    stats.notices.fetch_add(1, Ordering::Relaxed);
                    tracing::info!("haproxy: {}", String::from_utf8_lossy(line));
                    continue;
                }
                let written = file.write_line(line);
                if written.is_ok() {
                    stats.lines.fetch_add(1, Ordering::Relaxed);
                    stats
                        .bytes
                        .fetch_add(line.len() as u64 + 1, Ordering::Relaxed);
                    stats.rotations.store(file.rotations, Ordering::Relaxed);
                    dirty = true;
                }
                if dirty && last_flush.elapsed() >= FLUSH_EVERY {
                    last_flush = Instant::now();
                    dirty = false;
                    written.and_then(|()| file.flush())
                } else {
                    written
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                last_flush = Instant::now();
                if std::mem::take(&mut dirty) {
                    file.flush()
                } else {
                    Ok(())
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => {
                tracing::error!("access log: reading the socket failed: {e}; stopping");
                break;
            }
        };
        match result {
            Ok(()) => failing = false,
            Err(e) => {
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
                if !failing {
                    tracing::error!(
                        "access log: cannot write: {e}; lines are lost until it works again"
                    );
                }
                failing = true;
            }
        }
    }
    let _ = file.flush();
}

/// The datagram without its trailing newline (`format raw` ends each message with one).
fn trim_line(data: &[u8]) -> &[u8] {
    let end = data
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r' | 0))
        .map_or(0, |i| i + 1);
    &data[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::LogTarget;

    fn settings(dir: &Path) -> LogSettings {
        LogSettings {
            target: LogTarget::File,
            socket: dir.join("run/log.sock"),
            file: dir.join("logs/access.log"),
            max_size: 1 << 20,
            keep: 1,
        }
    }

    #[test]
    fn datagrams_become_lines_and_a_second_receiver_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        let receiver = Receiver::start(&s, None).unwrap();
        assert!(matches!(
            Receiver::start(&s, None),
            Err(LogError::SocketInUse(_))
        ));
        let tx = UnixDatagram::unbound().unwrap();
        for i in 0..500 {
            tx.send_to(format!("{{\"n\":{i}}}\n").as_bytes(), &s.socket)
                .unwrap();
        }
        tx.send_to(b"\n", &s.socket).unwrap();
        tx.send_to(b"Proxy fe_http stopped.\n", &s.socket).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let done = |r: &Receiver| {
            r.stats.lines.load(Ordering::SeqCst) == 500
                && r.stats.notices.load(Ordering::SeqCst) == 1
        };
        while !done(&receiver) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(done(&receiver), "500 lines and 1 notice");
        drop(receiver);
        let text = std::fs::read_to_string(&s.file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 500);
        assert_eq!(lines[499], "{\"n\":499}");
        // The socket file is stale now: the next receiver takes it over.
        drop(Receiver::start(&s, None).unwrap());
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
