//! The log on stderr: a line at start, then one line per request,
//! `<unix time> demo-app[V] <peer> <METHOD> <target> <status> [note] <ms>ms`.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Writes one log line to stderr, ignoring failures (a closed stderr must
/// not take the server down).
pub fn line(version: &str, msg: std::fmt::Arguments) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let line = format!(
        "{}.{:03} demo-app[{version}] {msg}\n",
        now.as_secs(),
        now.subsec_millis()
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// The log line of one request, written by [`RequestLog::finish`] when its
/// response is complete.
#[derive(Clone)]
pub struct RequestLog {
    version: Arc<str>,
    peer: SocketAddr,
    method: String,
    target: String,
    started: Instant,
}

/// Marks a response whose body writes the request's log line itself, at its
/// end (`/stream`).
#[derive(Clone, Copy)]
pub struct LoggedByBody;

impl RequestLog {
    pub fn new(version: Arc<str>, peer: SocketAddr, method: &str, target: &str) -> RequestLog {
        RequestLog {
            version,
            peer,
            method: method.to_string(),
            target: target.to_string(),
            started: Instant::now(),
        }
    }

    pub fn finish(&self, status: u16, note: &str) {
        let ms = self.started.elapsed().as_millis();
        let sep = if note.is_empty() { "" } else { " " };
        let RequestLog {
            peer,
            method,
            target,
            ..
        } = self;
        line(
            &self.version,
            format_args!("{peer} {method} {target} {status}{sep}{note} {ms}ms"),
        );
    }
}
