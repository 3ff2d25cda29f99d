//! The traffic counts this daemon keeps (`crate::traffic`), as the API reads them: the
//! report, chart points, the metrics, and HAProxy's counters per backend when asked.

use std::sync::Arc;
use std::time::Duration;

use super::Services;
use crate::clock::unix_now;
use crate::contract::TrafficQuery;
use crate::logs::LineTap;
use crate::traffic::{read_backends, render_metrics, Point, Traffic, TrafficReport};

/// Bound on one `show stat` (megabytes at 10,000 backends).
const STAT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why there are no traffic counts to read.
pub const NOT_COLLECTED: &str = "this daemon does not count traffic: [traffic] collect = false, or [logs] target is not \"file\" (the counts come from the access log hapctl serve receives); change hapctl.toml and restart hapctl serve";

/// Chunks of log lines waiting for the counting thread: a burst is absorbed here, so the
/// access log's writer (and HAProxy's ring behind it) never waits for the counting.
const QUEUE: usize = 1024;

fn now() -> u64 {
    unix_now().max(0) as u64
}

/// The access log's tap: each chunk is copied to a thread that counts it, off the writer's
/// thread. `None` when the thread cannot start (the log is still written; nothing counted).
pub(super) fn tap(traffic: Arc<Traffic>) -> Option<LineTap> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(QUEUE);
    let spawned = std::thread::Builder::new()
        .name("traffic-count".into())
        .spawn(move || {
            for chunk in rx {
                traffic.record_lines(now(), &chunk);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("traffic: cannot start the counting thread: {e}; nothing is counted");
        return None;
    }
    Some(Arc::new(move |chunk: &[u8]| {
        let _ = tx.send(chunk.to_vec());
    }))
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
