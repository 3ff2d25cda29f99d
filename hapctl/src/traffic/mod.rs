//! Traffic per domain (`docs/traffic.md`): what the access log says, counted in memory as the
//! daemon receives it (`daemon/traffic.rs` hands [`Traffic::record_lines`] the lines in
//! batches), over the windows 1 min, 15 min and 1 h; and HAProxy's own counters per backend
//! (`stat.rs`).
//!
//! `batch.rs` holds lines until the counting thread takes them, `sample.rs` reads a line,
//! `window.rs` keeps counts in rings of time slots, `book.rs` keeps them per domain within a
//! bound, `report.rs` is what `GET /v1/traffic`, `hapctl top`, the metrics and the dashboard
//! read. All of it is pure but for the lock here and `stat.rs`. Nothing is written to disk: a
//! restarted daemon starts with an empty history (`since`).

mod batch;
mod book;
mod expose;
mod report;
mod sample;
mod stat;
mod window;

use std::sync::Mutex;

pub use batch::Batch;
pub use book::{Book, NO_HOST, OTHER};
pub use expose::render_metrics;
pub use report::{
    BackendStat, DomainReport, Point, Reasons, StatusClasses, TimeQuantiles, Totals, TrafficReport,
    WindowReport,
};
pub use stat::{parse as parse_stat, read_backends};
pub use window::Window;

/// What a list of domains is sorted by (largest first; `domain`: by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    #[default]
    Requests,
    Errors,
    TurnedAway,
    Bytes,
    P95,
    Domain,
}

impl SortKey {
    const ALL: [SortKey; 6] = [
        SortKey::Requests,
        SortKey::Errors,
        SortKey::TurnedAway,
        SortKey::Bytes,
        SortKey::P95,
        SortKey::Domain,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Requests => "requests",
            SortKey::Errors => "errors",
            SortKey::TurnedAway => "turned_away",
            SortKey::Bytes => "bytes",
            SortKey::P95 => "p95",
            SortKey::Domain => "domain",
        }
    }
}

impl std::str::FromStr for SortKey {
    type Err = String;
    fn from_str(s: &str) -> Result<SortKey, String> {
        SortKey::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!("{s:?} is not a sort key: requests, errors (5xx), turned_away, bytes, p95 or domain")
            })
    }
}

impl SortKey {
    /// What a domain's counts over a window weigh in this order (larger first; `domain`:
    /// all the same, so names decide).
    fn rank(self) -> impl Fn(&window::Counts) -> f64 {
        move |c| match self {
            SortKey::Requests => c.requests() as f64,
            SortKey::Errors => f64::from(c.classes[5]),
            SortKey::TurnedAway => f64::from(c.turned_away),
            SortKey::Bytes => (c.bytes_in + c.bytes_out) as f64,
            SortKey::P95 => c.times.quantile(0.95).unwrap_or(0.0),
            SortKey::Domain => 0.0,
        }
    }
}

/// The lines of `chunk`, cut at each newline (found with SIMD: a chunk is thousands of lines).
fn lines(chunk: &[u8]) -> impl Iterator<Item = &[u8]> {
    let ends = memchr::memchr_iter(b'\n', chunk).chain(std::iter::once(chunk.len()));
    let mut start = 0;
    ends.map(move |end| {
        let line = &chunk[start..end];
        start = end + 1;
        line
    })
}

/// The daemon's traffic book, shared by the access log's writer and the readers.
#[derive(Debug)]
pub struct Traffic {
    book: Mutex<Book>,
}

impl Traffic {
    pub fn new(started: u64, max_domains: usize) -> Traffic {
        Traffic {
            book: Mutex::new(Book::new(started, max_domains)),
        }
    }

    /// Counts one access-log line received at `at` (Unix seconds); other lines are ignored.
    pub fn record_line(&self, at: u64, line: &[u8]) {
        self.record_lines(at, line);
    }

    /// Counts the access-log lines of `chunk` (newline-separated) received at `at`; other
    /// lines are ignored. Parsed before the lock is taken, counted under one lock.
    pub fn record_lines(&self, at: u64, chunk: &[u8]) {
        let samples: Vec<_> = lines(chunk).filter_map(sample::parse).collect();
        if !samples.is_empty() {
            self.with(|b| samples.iter().for_each(|s| b.record(at, s)));
        }
    }

    /// Runs `f` on the book (a short read or a count).
    pub fn with<T>(&self, f: impl FnOnce(&mut Book) -> T) -> T {
        f(&mut self.book.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The report of the edge and its first `limit` domains by `key` over `window`.
    pub fn report(&self, now: u64, key: SortKey, window: Window, limit: usize) -> TrafficReport {
        let (since, tracked, edge, domains) = self.with(|b| {
            (
                b.started(),
                b.domain_count(),
                b.edge_report(now),
                b.top_reports(now, window, limit, key.rank()),
            )
        });
        TrafficReport {
            since,
            now,
            tracked_domains: tracked,
            edge,
            domains,
            backends: None,
            backends_error: None,
        }
    }
}
