//! Long streams: `GET /stream?lines=N&interval_ms=M` on the demo app's protocol (a chunked
//! answer, one line `V i/N` per chunk, then the zero chunk), read line by line in a thread.
//! Each stream is judged on what a client sees: did it run to its announced end, without
//! error, every line from the generation that served its first one? A *held* stream is
//! closed by the client a fixed time after the command ended, so it outlasts any command.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::http::{self, Timeouts};

/// At most this many problems are kept per stream (the counts are complete).
const MAX_PROBLEMS: usize = 10;

#[derive(Debug, Clone)]
pub struct StreamConfig {
    pub addr: SocketAddr,
    pub host: String,
    pub lines: u32,
    pub interval_ms: u32,
    pub connect_timeout: Duration,
    /// Held streams: the client closes them this long after the command ended (the announced
    /// lines only bound them).
    pub hold: Option<Duration>,
    pub command_end: CommandEnd,
}

/// When the command ended (ms on prove's clock), set once and seen by every stream thread.
#[derive(Debug, Clone, Default)]
pub struct CommandEnd(Arc<OnceLock<f64>>);

impl CommandEnd {
    pub fn set(&self, ms: f64) {
        let _ = self.0.set(ms);
    }
}

impl StreamConfig {
    pub fn target(&self) -> String {
        format!(
            "/stream?lines={}&interval_ms={}",
            self.lines, self.interval_ms
        )
    }

    /// Each read waits for at most three intervals, and never less than 2 s.
    fn read_timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.interval_ms) * 3).max(Duration::from_secs(2))
    }

    /// How long the whole stream should take, plus room for a slow cutover.
    pub fn expected_duration(&self) -> Duration {
        Duration::from_millis(u64::from(self.lines) * u64::from(self.interval_ms))
    }

    /// When a held stream closes (ms on prove's clock): known once the command has ended.
    pub fn close_at(&self) -> Option<f64> {
        let end = self.command_end.0.get()?;
        Some(end + self.hold?.as_secs_f64() * 1000.0)
    }
}

/// What one long stream received.
#[derive(Debug, Clone, Serialize)]
pub struct StreamLog {
    pub id: usize,
    pub target: String,
    /// The generation that served the first line: every line must come from it.
    pub version: Option<String>,
    /// The `x-version` header of the answer.
    pub header_version: Option<String>,
    pub announced: u32,
    pub received: u32,
    /// The zero chunk that ends a chunked answer arrived.
    pub final_chunk: bool,
    /// A held stream the client closed as planned, after the command's end and the hold.
    pub closed_by_client: bool,
    /// Why the stream stopped before its end, if it did.
    pub error: Option<String>,
    /// Lines from another generation than the first line's.
    pub foreign_lines: u32,
    /// Lines whose `i/N` is not the next one (or not a `V i/N` line at all).
    pub out_of_sequence: u32,
    /// The first problems met, in order.
    pub problems: Vec<String>,
    pub opened_ms: f64,
    pub first_line_ms: Option<f64>,
    pub last_line_ms: Option<f64>,
    pub ended_ms: Option<f64>,
    /// Longest pause between two consecutive lines.
    pub max_gap_ms: f64,
}

impl StreamLog {
    /// A stream not heard from yet, opened at `opened_ms`.
    pub fn new(id: usize, config: &StreamConfig, opened_ms: f64) -> StreamLog {
        StreamLog {
            id,
            target: config.target(),
            version: None,
            header_version: None,
            announced: config.lines,
            received: 0,
            final_chunk: false,
            closed_by_client: false,
            error: None,
            foreign_lines: 0,
            out_of_sequence: 0,
            problems: Vec::new(),
            opened_ms,
            first_line_ms: None,
            last_line_ms: None,
            ended_ms: None,
            max_gap_ms: 0.0,
        }
    }
}

impl StreamLog {
    /// Ran to its announced end (or, held, until the client closed it), without error, every
    /// line in sequence and from its generation.
    pub fn intact(&self) -> bool {
        self.error.is_none()
            && (self.closed_by_client || self.final_chunk && self.received == self.announced)
            && self.foreign_lines == 0
            && self.out_of_sequence == 0
    }

    fn problem(&mut self, p: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(p);
        }
    }
}

/// A stream whose first line arrived; it goes on in its thread.
pub struct OpenStream {
    pub id: usize,
    pub version: String,
    pub first_line_ms: f64,
    done: mpsc::Receiver<StreamLog>,
}

impl OpenStream {
    /// Waits (at most `bound`) for the stream to end and returns what it received.
    pub fn finish(self, bound: Duration) -> Result<StreamLog, String> {
        self.done.recv_timeout(bound).map_err(|_| {
            format!(
                "stream {} did not end within {bound:?} after the checks began",
                self.id
            )
        })
    }
}

/// A stream whose request is under way; [`Pending::wait_first`] waits for its first line.
pub struct Pending {
    id: usize,
    first: mpsc::Receiver<Result<(String, f64), String>>,
    done: mpsc::Receiver<StreamLog>,
}

/// Starts stream `id` in its own thread (several can be started before waiting for any).
pub fn start(id: usize, config: &StreamConfig, clock: Instant) -> Pending {
    let (first_tx, first_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let config = config.clone();
    thread::spawn(move || {
        let log = read_stream(id, &config, clock, |version, t| {
            let _ = first_tx.send(Ok((version.to_string(), t)));
        });
        if log.first_line_ms.is_none() {
            let _ = first_tx
                .send(Err(log.error.clone().unwrap_or_else(|| {
                    "the stream ended before its first line".into()
                })));
        }
        let _ = done_tx.send(log);
    });
    Pending {
        id,
        first: first_rx,
        done: done_rx,
    }
}

impl Pending {
    /// Waits (at most `timeout`) for the first line.
    pub fn wait_first(self, timeout: Duration) -> Result<OpenStream, String> {
        let id = self.id;
        match self.first.recv_timeout(timeout) {
            Ok(Ok((version, first_line_ms))) => Ok(OpenStream {
                id,
                version,
                first_line_ms,
                done: self.done,
            }),
            Ok(Err(why)) => Err(format!("stream {id}: {why}")),
            Err(_) => Err(format!("stream {id}: no first line within {timeout:?}")),
        }
    }
}

fn ms_since(clock: Instant) -> f64 {
    clock.elapsed().as_secs_f64() * 1000.0
}

/// Reads the whole stream; `on_first` is called once, when the first line arrives.
fn read_stream(
    id: usize,
    config: &StreamConfig,
    clock: Instant,
    mut on_first: impl FnMut(&str, f64),
) -> StreamLog {
    let mut log = StreamLog::new(id, config, ms_since(clock));
    let timeouts = Timeouts {
        connect: config.connect_timeout,
        read: config.read_timeout(),
    };
    let result = (|| -> Result<(), http::HttpError> {
        let mut conn = http::send_get(config.addr, &config.host, &config.target(), timeouts)?;
        let head = conn.read_head()?;
        log.header_version = head.header("x-version").map(str::to_string);
        if head.status != 200 {
            return Err(http::HttpError::new(
                http::Cause::Non2xx,
                format!("the stream was answered with status {}", head.status),
            ));
        }
        let mut pending = Vec::new();
        let mut last: Option<f64> = None;
        // Bounded: one chunk per line, and a few more for a misbehaving server.
        for _ in 0..(u64::from(config.lines) * 2 + 16) {
            let Some(chunk) = conn.next_chunk()? else {
                log.final_chunk = true;
                if !pending.is_empty() {
                    log.out_of_sequence += 1;
                    log.problem("an unterminated line before the final chunk".into());
                }
                return Ok(());
            };
            pending.extend_from_slice(&chunk);
            while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=i).collect();
                let line = String::from_utf8_lossy(&line).trim_end().to_string();
                let now = ms_since(clock);
                if let Some(last) = last {
                    log.max_gap_ms = log.max_gap_ms.max(now - last);
                }
                last = Some(now);
                take_line(&mut log, &line, now, &mut on_first);
            }
            if config.close_at().is_some_and(|t| ms_since(clock) >= t) {
                // Dropping the connection closes it: the client ends the stream.
                log.closed_by_client = true;
                return Ok(());
            }
        }
        Err(http::HttpError::new(
            http::Cause::Other,
            "more chunks than the announced lines",
        ))
    })();
    if let Err(e) = result {
        log.error = Some(format!(
            "after {} of {} lines: {e}",
            log.received, log.announced
        ));
    }
    log.ended_ms = Some(ms_since(clock));
    log
}

/// Judges one line `V i/N`.
fn take_line(log: &mut StreamLog, line: &str, now: f64, on_first: &mut impl FnMut(&str, f64)) {
    log.received += 1;
    log.last_line_ms = Some(now);
    let expected = log.received;
    let parsed = line.rsplit_once(' ').and_then(|(v, count)| {
        let (i, n) = count.split_once('/')?;
        Some((v, i.parse::<u32>().ok()?, n.parse::<u32>().ok()?))
    });
    let Some((version, i, n)) = parsed.filter(|(v, _, _)| http::is_version(v)) else {
        log.out_of_sequence += 1;
        log.problem(format!("line {expected} is not `V i/N`: {line:?}"));
        return;
    };
    match &log.version {
        None => {
            log.version = Some(version.to_string());
            log.first_line_ms = Some(now);
            on_first(version, now);
        }
        Some(first) if first != version => {
            log.foreign_lines += 1;
            log.problem(format!(
                "line {expected} came from {version}, the stream started on {first}"
            ));
        }
        Some(_) => {}
    }
    if i != expected || n != log.announced {
        log.out_of_sequence += 1;
        log.problem(format!(
            "line {expected} reads {i}/{n}, expected {expected}/{}",
            log.announced
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> StreamLog {
        StreamLog {
            id: 1,
            target: String::new(),
            version: None,
            header_version: None,
            announced: 3,
            received: 0,
            final_chunk: false,
            closed_by_client: false,
            error: None,
            foreign_lines: 0,
            out_of_sequence: 0,
            problems: vec![],
            opened_ms: 0.0,
            first_line_ms: None,
            last_line_ms: None,
            ended_ms: None,
            max_gap_ms: 0.0,
        }
    }

    #[test]
    fn judges_lines() {
        let mut l = log();
        let mut firsts = Vec::new();
        let mut on_first = |v: &str, _t: f64| firsts.push(v.to_string());
        take_line(&mut l, "1.4.2 1/3", 1.0, &mut on_first);
        take_line(&mut l, "1.5.0 2/3", 2.0, &mut on_first);
        take_line(&mut l, "1.4.2 4/3", 3.0, &mut on_first);
        assert_eq!(firsts, ["1.4.2"]);
        assert_eq!(l.received, 3);
        assert_eq!(l.foreign_lines, 1);
        assert_eq!(l.out_of_sequence, 1);
        l.final_chunk = true;
        assert!(!l.intact());

        let mut l = log();
        for (i, line) in ["v 1/3", "v 2/3", "v 3/3"].iter().enumerate() {
            take_line(&mut l, line, i as f64, &mut |_, _| {});
        }
        assert!(!l.intact(), "no final chunk yet");
        l.final_chunk = true;
        assert!(l.intact());

        // Held: closed by the client before its announced end, intact only if in sequence.
        let mut l = log();
        take_line(&mut l, "v 1/3", 1.0, &mut |_, _| {});
        assert!(!l.intact(), "neither ended nor closed");
        l.closed_by_client = true;
        assert!(l.intact());
        take_line(&mut l, "w 2/3", 2.0, &mut |_, _| {});
        assert!(!l.intact(), "a foreign line breaks a held stream too");

        let mut l = log();
        take_line(&mut l, "garbage", 1.0, &mut |_, _| {});
        assert_eq!(l.out_of_sequence, 1);
    }
}
