//! The traffic counts this daemon keeps (`crate::traffic`), as the API reads them: the
//! report, chart points, the metrics, and HAProxy's counters per backend when asked.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::Services;
use crate::clock::unix_now;
use crate::contract::TrafficQuery;
use crate::logs::LineTap;
use crate::traffic::{read_backends, render_metrics, Batch, Point, Traffic, TrafficReport};

/// Bound on one `show stat` (megabytes at 10,000 backends).
const STAT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why there are no traffic counts to read.
pub const NOT_COLLECTED: &str = "this daemon does not count traffic: [traffic] collect = false, or [logs] target is not \"file\" (the counts come from the access log hapctl serve receives); change hapctl.toml and restart hapctl serve";

/// How often the counting thread takes the lines the access log's writer received: a few
/// times a second, not once per chunk (a thread woken per chunk costs a context switch for a
/// few lines, on the cores HAProxy needs).
const BATCH_EVERY: Duration = Duration::from_millis(100);
/// Bytes waiting at most. Past it the writer waits for the counting thread (HAProxy's ring
/// holds the lines meanwhile), as a slow disk makes it wait.
const BATCH_MAX: usize = 16 << 20;

fn now() -> u64 {
    unix_now().max(0) as u64
}

/// The lines between the access log's writer and the counting thread.
#[derive(Default)]
struct Pending {
    batch: Mutex<Batch>,
    taken: Condvar,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, at: u64, chunk: &[u8]) {
        let mut batch = self.lock();
        while batch.len() >= BATCH_MAX {
            batch = self.taken.wait(batch).unwrap_or_else(|e| e.into_inner());
        }
        batch.push(at, chunk);
    }
}

/// The access log's tap: each chunk joins the batch a thread counts every [`BATCH_EVERY`],
/// off the writer's thread. `None` when the thread cannot start (the log is still written;
/// nothing counted).
pub(super) fn tap(traffic: Arc<Traffic>) -> Option<LineTap> {
    let pending = Arc::new(Pending::default());
    let taken = Arc::downgrade(&pending);
    let spawned = std::thread::Builder::new()
        .name("traffic-count".into())
        .spawn(move || count(&traffic, &taken));
    if let Err(e) = spawned {
        tracing::error!("traffic: cannot start the counting thread: {e}; nothing is counted");
        return None;
    }
    Some(Arc::new(move |chunk: &[u8]| pending.push(now(), chunk)))
}

/// Counts what waits every [`BATCH_EVERY`] until the tap is gone.
fn count(traffic: &Traffic, pending: &Weak<Pending>) {
    let mut batch = Batch::default();
    loop {
        std::thread::sleep(BATCH_EVERY);
        let Some(p) = pending.upgrade() else {
            return;
        };
        std::mem::swap(&mut batch, &mut *p.lock());
        p.taken.notify_all();
        drop(p);
        for (at, lines) in batch.runs() {
            traffic.record_lines(at, lines);
        }
        batch.clear();
    }
}

impl Services {
    /// The report `query` asks for; `None` when traffic is not counted. Reads HAProxy's
    /// socket when `backends` is asked: call it off the async threads.
    pub fn traffic_report(&self, query: &TrafficQuery) -> Option<TrafficReport> {
        let traffic = self.traffic()?;
        let mut report = traffic.report(now(), query.sort, query.window, query.limit);
        if query.backends {
            let socket = self.settings().paths.admin_socket;
            match read_backends(&socket, STAT_TIMEOUT) {
                Ok(b) => report.backends = Some(b),
                Err(e) => report.backends_error = Some(e.to_string()),
            }
        }
        Some(report)
    }

    /// The hour of `domain` in five-minute points, or of the whole edge (`*`) minute by
    /// minute; `Some(None)`: no request for that domain since the daemon started.
    pub fn traffic_points(&self, domain: &str) -> Option<Option<Vec<Point>>> {
        let traffic = self.traffic()?;
        let now = now();
        Some(traffic.with(|b| match domain {
            "*" => Some(b.edge_points(now)),
            d => b.domain_points(d, now),
        }))
    }

    /// The per-domain series of `/metrics` (empty when traffic is not counted).
    pub fn traffic_metrics(&self) -> String {
        let Some(traffic) = self.traffic() else {
            return String::new();
        };
        let top = self.settings().traffic.top_domains.get();
        let now = now();
        let (domains, tracked) = traffic.with(|b| (b.domain_reports(now), b.domain_count()));
        render_metrics(domains, top, tracked)
    }
}
