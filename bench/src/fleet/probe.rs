//! What "in effect on an edge" means for the fleet's writes: a request through the edge's
//! HAProxy whose answer shows the change.

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use testkit::try_http_get;

/// A request through an edge's HAProxy and the answer that shows a change took effect.
#[derive(Debug, Clone)]
pub enum Probe {
    /// `host` answers 200 with `body`.
    Serves { host: String, body: &'static str },
    /// A request from `source` for `host` is refused with 403.
    Blocks { source: Ipv4Addr, host: String },
}

impl Probe {
    /// Whether the edge whose HAProxy listens on `port` shows it now.
    pub fn holds(&self, port: u16) -> bool {
        match self {
            Probe::Serves { host, body } => try_http_get(None, port, host, "/", &[])
                .is_ok_and(|r| r.status == 200 && r.body == *body),
            Probe::Blocks { source, host } => {
                try_http_get(Some(*source), port, host, "/", &[]).is_ok_and(|r| r.status == 403)
            }
        }
    }
}

/// Polls every edge (its HAProxy's port) until `probe` holds on each or `bound` passed since `since`; when it
/// first held on each edge, counted from `since` (`None`: not within the bound).
pub fn wait_each(
    edges: &[u16],
    probe: &Probe,
    since: Instant,
    bound: Duration,
) -> Vec<Option<Duration>> {
    let mut seen = vec![None; edges.len()];
    while seen.iter().any(Option::is_none) && since.elapsed() < bound {
        for (i, port) in edges.iter().enumerate() {
            if seen[i].is_none() && probe.holds(*port) {
                seen[i] = Some(since.elapsed());
            }
        }
        // A probe costs well under a millisecond; the pause leaves the CPUs to the edges.
        thread::sleep(Duration::from_millis(1));
    }
    seen
}

/// The time the last edge took, if every edge saw it.
pub fn last(seen: &[Option<Duration>]) -> Option<Duration> {
    seen.iter()
        .copied()
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .max()
}
