//! The agent's own counters, and the state file (`run/waf.json`) it keeps them in for
//! `hapctl status` and the daemon's `/metrics`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds.
pub const LATENCY_BUCKETS_US: [u64; 8] = [250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000];

#[derive(Default)]
pub struct Metrics {
    inspected: AtomicU64,
    detected: AtomicU64,
    blocked: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    by_rule: Mutex<BTreeMap<u32, u64>>,
}

/// A copy of the counters, as written to the state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    pub engine: String,
    pub rules_loaded_at: u64,
    pub updated_at: u64,
    pub inspected: u64,
    pub detected: u64,
    pub blocked: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub latency_sum_us: u64,
    /// Cumulative counts for [`LATENCY_BUCKETS_US`] (Prometheus `le` buckets).
    pub latency_buckets: Vec<u64>,
    /// Requests over the threshold (blocked or detected) per rule id that counted.
    pub by_rule: BTreeMap<u32, u64>,
}

pub enum Outcome<'a> {
    Pass,
    Detected(&'a [u32]),
    Blocked(&'a [u32]),
    Error,
    Timeout,
}

impl Metrics {
    pub fn record(&self, outcome: Outcome<'_>, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.inspected.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        for (bound, n) in LATENCY_BUCKETS_US.iter().zip(&self.latency_buckets) {
            if us <= *bound {
                n.fetch_add(1, Ordering::Relaxed);
            }
        }
        let rules = match outcome {
            Outcome::Pass => return,
            Outcome::Error => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Outcome::Timeout => {
                self.timeouts.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Outcome::Detected(r) => {
                self.detected.fetch_add(1, Ordering::Relaxed);
                r
            }
            Outcome::Blocked(r) => {
                self.blocked.fetch_add(1, Ordering::Relaxed);
                r
            }
        };
        let mut by_rule = self.by_rule.lock().unwrap_or_else(|e| e.into_inner());
        for id in rules {
            *by_rule.entry(*id).or_default() += 1;
        }
    }

    pub fn snapshot(&self, engine: &str, rules_loaded_at: u64) -> Snapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Snapshot {
            pid: std::process::id(),
            engine: engine.to_string(),
            rules_loaded_at,
            updated_at: crate::clock::unix_now().max(0) as u64,
            inspected: get(&self.inspected),
            detected: get(&self.detected),
            blocked: get(&self.blocked),
            errors: get(&self.errors),
            timeouts: get(&self.timeouts),
            latency_sum_us: get(&self.latency_sum_us),
            latency_buckets: self.latency_buckets.iter().map(get).collect(),
            by_rule: self
                .by_rule
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

impl Snapshot {
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic(path, &text, 0o644)
    }

    /// The state file, if the agent wrote one.
    pub fn read(path: &Path) -> Option<Snapshot> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }
}

/// The agent as its state file shows it: it rewrites the file every second, so a file older
/// than [`STALE_AFTER_SECS`] means an agent that is gone or stuck.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Health {
    pub up: bool,
    pub age_secs: Option<u64>,
    pub agent: Option<Snapshot>,
}

pub const STALE_AFTER_SECS: u64 = 5;

impl Health {
    pub fn read(path: &Path) -> Health {
        let agent = Snapshot::read(path);
        let now = crate::clock::unix_now().max(0) as u64;
        let age_secs = agent.as_ref().map(|s| now.saturating_sub(s.updated_at));
        Health {
            up: age_secs.is_some_and(|a| a <= STALE_AFTER_SECS),
            age_secs,
            agent,
        }
    }
}
