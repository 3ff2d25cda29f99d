//! One-shot client for HAProxy's CLI sockets: the master socket (`-S`) and a worker's
//! `stats socket`.
//!
//! Each command opens its own connection, sends one line, half-closes, and reads to EOF. The
//! half-close matters: the master socket only ends its answer once the client has shut down
//! its write side; without it the client would sit until its own timeout.

use std::io::{self, Read, Write};
use std::mem;
use std::net::Shutdown;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("HAProxy socket {path} does not exist; start HAProxy (`hapctl haproxy start`) or check the socket path in the settings")]
    Absent { path: PathBuf },
    #[error("nothing listens on HAProxy socket {path} (connection refused): HAProxy is not running or is re-executing; start it or retry")]
    Refused { path: PathBuf },
    #[error("HAProxy socket {path} did not answer `{command}` within {after:?}; HAProxy may be overloaded or stuck")]
    Timeout {
        path: PathBuf,
        command: String,
        after: Duration,
    },
    #[error("I/O error on HAProxy socket {path} during `{command}`: {source}")]
    Io {
        path: PathBuf,
        command: String,
        #[source]
        source: io::Error,
    },
}

impl SocketError {
    /// True when no HAProxy process listens on the socket (absent file or refused connection).
    pub fn is_not_listening(&self) -> bool {
        matches!(
            self,
            SocketError::Absent { .. } | SocketError::Refused { .. }
        )
    }

    /// True for errors a master produces while it re-executes during a reload: the socket is
    /// briefly closed, or a connection is dropped half-way.
    pub fn is_transient(&self) -> bool {
        match self {
            SocketError::Absent { .. } | SocketError::Refused { .. } => true,
            SocketError::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
            ),
            SocketError::Timeout { .. } => false,
        }
    }
}

/// A CLI socket and the bound on each command sent to it (connect, write and read together).
#[derive(Debug, Clone)]
pub struct CliSocket {
    path: PathBuf,
    timeout: Duration,
}

impl CliSocket {
    pub fn new(path: impl Into<PathBuf>, timeout: Duration) -> CliSocket {
        CliSocket {
            path: path.into(),
            timeout,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The same socket with another bound, e.g. for a `reload` that answers only once done.
    pub fn with_timeout(&self, timeout: Duration) -> CliSocket {
        CliSocket {
            path: self.path.clone(),
            timeout,
        }
    }

    /// Sends `cmd` (a newline is appended) and returns everything HAProxy answered.
    pub fn command(&self, cmd: &str) -> Result<String, SocketError> {
        let deadline = Instant::now() + self.timeout;
        let fail = |source: io::Error| self.classify(cmd, source);
        let mut stream = connect(&self.path, self.timeout).map_err(fail)?;

        stream
            .set_write_timeout(Some(remaining(deadline)))
            .map_err(fail)?;
        let mut line = String::with_capacity(cmd.len() + 1);
        line.push_str(cmd);
        line.push('\n');
        stream.write_all(line.as_bytes()).map_err(fail)?;
        stream.shutdown(Shutdown::Write).map_err(fail)?;

        let mut answer = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            // Re-armed before every read so the whole answer, not each read, is bounded.
            stream
                .set_read_timeout(Some(remaining(deadline)))
                .map_err(fail)?;
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    fn classify(&self, cmd: &str, source: io::Error) -> SocketError {
        let path = self.path.clone();
        // Only the first line: a bulk payload would drown the message.
        let command: String = cmd.lines().next().unwrap_or("").chars().take(80).collect();
        match source.kind() {
            io::ErrorKind::NotFound => SocketError::Absent { path },
            io::ErrorKind::ConnectionRefused => SocketError::Refused { path },
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => SocketError::Timeout {
                path,
                command,
                after: self.timeout,
            },
            _ => SocketError::Io {
                path,
                command,
                source,
            },
        }
    }
}

/// Never zero: a zero timeout means "block forever" to setsockopt, and std rejects it.
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Connects with a bound. `UnixStream::connect` blocks without limit when the listener's
/// backlog is full (a stuck HAProxy); on Linux a unix-socket connect waits at most the socket's
/// send timeout, which can only be set before connecting, hence the raw socket.
fn connect(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path is {} bytes long; unix sockets allow at most {}",
                bytes.len(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket owned by nobody else; the stream closes it on every path.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let len = (mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    loop {
        // SAFETY: `addr` is a valid sockaddr_un and `len` does not exceed its size.
        let rc = unsafe {
            libc::connect(
                fd,
                (&addr as *const libc::sockaddr_un).cast::<libc::sockaddr>(),
                len,
            )
        };
        if rc == 0 {
            return Ok(stream);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::thread;

    /// Answers like the master socket: reads until the client half-closes, then replies.
    fn serve_once(listener: UnixListener, reply: &'static str) -> thread::JoinHandle<String> {
        thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut got = String::new();
            conn.read_to_string(&mut got).unwrap();
            conn.write_all(reply.as_bytes()).unwrap();
            got
        })
    }

    #[test]
    fn sends_one_line_half_closes_and_reads_to_eof() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.sock");
        let server = serve_once(UnixListener::bind(&path).unwrap(), "line 1\nline 2\n");
        let sock = CliSocket::new(&path, Duration::from_secs(5));
        assert_eq!(sock.command("show proc").unwrap(), "line 1\nline 2\n");
        assert_eq!(server.join().unwrap(), "show proc\n");
    }

    #[test]
    fn absent_and_refused_sockets_mean_not_listening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.sock");
        let sock = CliSocket::new(&path, Duration::from_secs(1));
        let err = sock.command("show proc").unwrap_err();
        assert!(matches!(err, SocketError::Absent { .. }), "{err}");
        assert!(err.is_not_listening());

        // A socket file whose listener is gone, as HAProxy leaves behind when it exits.
        drop(UnixListener::bind(&path).unwrap());
        let err = sock.command("show proc").unwrap_err();
        assert!(matches!(err, SocketError::Refused { .. }), "{err}");
        assert!(err.is_not_listening() && err.is_transient());
    }

    #[test]
    fn a_silent_server_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            thread::sleep(Duration::from_millis(800));
            drop(conn);
        });
        let started = Instant::now();
        let err = CliSocket::new(&path, Duration::from_millis(200))
            .command("add map x 1 1")
            .unwrap_err();
        assert!(matches!(err, SocketError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_millis(700));
        assert!(err.to_string().contains("add map x 1 1"));
        server.join().unwrap();
    }

    #[test]
    fn an_overlong_path_is_an_error_not_a_truncation() {
        let long = PathBuf::from(format!("/tmp/{}.sock", "x".repeat(200)));
        let err = CliSocket::new(long, Duration::from_secs(1))
            .command("show proc")
            .unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
    }
}
