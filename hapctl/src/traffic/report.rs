//! What `GET /v1/traffic` answers and `hapctl top` prints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Requests turned away, by reason (`blocked`, `limit:req_rate`, `profile:…`, `waf`, …).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasons(pub BTreeMap<String, u64>);

/// Answers by status class; `none`: no answer (the client left) or an odd status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusClasses {
    pub none: u64,
    #[serde(rename = "1xx")]
    pub s1xx: u64,
    #[serde(rename = "2xx")]
    pub s2xx: u64,
    #[serde(rename = "3xx")]
    pub s3xx: u64,
    #[serde(rename = "4xx")]
    pub s4xx: u64,
    #[serde(rename = "5xx")]
    pub s5xx: u64,
}

impl From<[u64; 6]> for StatusClasses {
    fn from(c: [u64; 6]) -> StatusClasses {
        StatusClasses {
            none: c[0],
            s1xx: c[1],
            s2xx: c[2],
            s3xx: c[3],
            s4xx: c[4],
            s5xx: c[5],
        }
    }
}

/// Time of the requests a backend answered (`%Ta`, ms), from a histogram; `null` without one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeQuantiles {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

/// One window: `seconds` is the time it covers (whole slots, never before the daemon started),
/// which the rate divides by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowReport {
    pub window: String,
    pub seconds: u64,
    pub requests: u64,
    pub requests_per_second: f64,
    pub status: StatusClasses,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub time_ms: TimeQuantiles,
    pub turned_away: u64,
    pub by_reason: Reasons,
}

/// Since the daemon started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub requests: u64,
    pub status: StatusClasses,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub turned_away: Reasons,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainReport {
    pub domain: String,
    /// 1m, 15m, 1h.
    pub windows: Vec<WindowReport>,
    pub totals: Totals,
}

impl DomainReport {
    pub fn window(&self, name: &str) -> Option<&WindowReport> {
        self.windows.iter().find(|w| w.window == name)
    }
}

/// One point of a chart: the slot that began at `at` (Unix seconds) and lasts `seconds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub at: u64,
    pub seconds: u64,
    pub requests: u64,
    /// 5xx answers.
    pub errors: u64,
    pub turned_away: u64,
    pub by_reason: Reasons,
    pub p95_ms: Option<f64>,
}

/// A backend as HAProxy counts it (`show stat`), since the worker started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendStat {
    pub backend: String,
    /// `UP`, `DOWN`, …
    pub status: String,
    pub sessions_now: u64,
    pub requests_total: u64,
    pub status_total: StatusClasses,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Servers up / all.
    pub servers_up: u32,
    pub servers: u32,
}

/// `GET /v1/traffic`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficReport {
    /// When the daemon's memory of traffic begins (Unix seconds): a restart empties it.
    pub since: u64,
    pub now: u64,
    /// Names kept apart (at most `[traffic] max_domains`; the rest count as `(other)`).
    pub tracked_domains: usize,
    pub edge: DomainReport,
    /// Sorted as asked, at most `limit`.
    pub domains: Vec<DomainReport>,
    /// HAProxy's own counters per backend; `null` with `backends_error` when it cannot be read.
    pub backends: Option<Vec<BackendStat>>,
    pub backends_error: Option<String>,
}
