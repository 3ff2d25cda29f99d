//! The agent's own counters, and the state file (`run/waf.json`) it keeps them in for
//! `hapctl status` and the daemon's `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds.
pub const LATENCY_BUCKETS_US: [u64; 8] = [250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000];

#[derive(Default)]
pub struct AgentMetrics {
    inspected: AtomicU64,
    detected: AtomicU64,
    blocked: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    by_rule: Mutex<BTreeMap<u32, u64>>,
    /// Why the last reload was refused; cleared by one that serves.
    reload_error: Mutex<Option<String>>,
}

/// The rules the agent serves: what the state file says of them.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// `ModSecurity v3.0.9 (Linux)`.
    pub engine: String,
    /// `OWASP_CRS/3.3.4`, when the loader's files say (`SecComponentSignature`).
    pub crs: Option<String>,
    /// What libmodsecurity counted when it loaded them.
    pub rules: usize,
    /// Unix time of the load.
    pub at: u64,
}

/// A copy of the counters, as written to the state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CountersSnapshot {
    pub pid: u32,
    pub engine: String,
    /// The CRS version and libmodsecurity's rule count (absent from an older agent's file).
    #[serde(default)]
    pub crs: Option<String>,
    #[serde(default)]
    pub rules: usize,
    pub rules_loaded_at: u64,
    pub updated_at: u64,
    pub inspected: u64,
    pub detected: u64,
    pub blocked: u64,
    pub errors: u64,
    pub timeouts: u64,
    /// Rule reloads done (SIGHUP), and refused (the old rules stayed).
    #[serde(default)]
    pub reloads: u64,
    #[serde(default)]
    pub reload_failures: u64,
    /// Why the last reload was refused (the loader and libmodsecurity's words), until one serves.
    #[serde(default)]
    pub reload_error: Option<String>,
    pub latency_sum_us: u64,
    /// Cumulative counts for [`LATENCY_BUCKETS_US`] (Prometheus `le` buckets).
    pub latency_buckets: Vec<u64>,
    /// Requests over the threshold (blocked or detected) per rule id that counted.
    pub by_rule: BTreeMap<u32, u64>,
}

pub enum InspectionOutcome<'a> {
    Pass,
    Detected(&'a [u32]),
    Blocked(&'a [u32]),
    Error,
    Timeout,
}

impl AgentMetrics {
    /// A rules reload: `Ok` when the new rules serve, else why the old ones stayed.
    pub fn reloaded(&self, outcome: Result<(), String>) {
        let n = if outcome.is_ok() {
            &self.reloads
        } else {
            &self.reload_failures
        };
        *self.reload_error.lock().unwrap_or_else(|e| e.into_inner()) = outcome.err();
        n.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record(&self, outcome: InspectionOutcome<'_>, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.inspected.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        for (bound, n) in LATENCY_BUCKETS_US.iter().zip(&self.latency_buckets) {
            if us <= *bound {
                n.fetch_add(1, Ordering::Relaxed);
            }
        }
        let rules = match outcome {
            InspectionOutcome::Pass => return,
            InspectionOutcome::Error => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
            InspectionOutcome::Timeout => {
                self.timeouts.fetch_add(1, Ordering::Relaxed);
                return;
            }
            InspectionOutcome::Detected(r) => {
                self.detected.fetch_add(1, Ordering::Relaxed);
                r
            }
            InspectionOutcome::Blocked(r) => {
                self.blocked.fetch_add(1, Ordering::Relaxed);
                r
            }
        };
        let mut by_rule = self.by_rule.lock().unwrap_or_else(|e| e.into_inner());
        for id in rules {
            *by_rule.entry(*id).or_default() += 1;
        }
    }

    pub fn snapshot(&self, loaded: &Loaded) -> CountersSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CountersSnapshot {
            pid: std::process::id(),
            engine: loaded.engine.clone(),
            crs: loaded.crs.clone(),
            rules: loaded.rules,
            rules_loaded_at: loaded.at,
            updated_at: crate::clock::unix_now().max(0) as u64,
            inspected: get(&self.inspected),
            detected: get(&self.detected),
            blocked: get(&self.blocked),
            errors: get(&self.errors),
            timeouts: get(&self.timeouts),
            reloads: get(&self.reloads),
            reload_failures: get(&self.reload_failures),
            reload_error: self
                .reload_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
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

impl CountersSnapshot {
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic(path, &text, 0o644)
    }

    /// The state file, if the agent wrote one.
    pub fn read(path: &Path) -> Option<CountersSnapshot> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }
}

/// The agent as its state file shows it: it rewrites the file every second, so a file older
/// than [`STALE_AFTER_SECS`] means an agent that is stuck; a fresh file whose PID is gone, one
/// that was killed (shown at once, not 5 s later).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Health {
    pub up: bool,
    /// Why it is not up, in words an operator can act on.
    pub down_reason: Option<String>,
    pub age_secs: Option<u64>,
    pub agent: Option<CountersSnapshot>,
}

pub const STALE_AFTER_SECS: u64 = 5;

impl Health {
    pub fn read(path: &Path) -> Health {
        let agent = CountersSnapshot::read(path);
        let now = crate::clock::unix_now().max(0) as u64;
        let age_secs = agent.as_ref().map(|s| now.saturating_sub(s.updated_at));
        let down_reason = match (&agent, age_secs) {
            (None, _) => Some(format!(
                "no state file at {}: the agent is not running (`hapctl serve` runs it in direct mode, hapctl-waf.service in systemd mode)",
                path.display()
            )),
            (Some(s), _) if !is_agent(s.pid) => Some(format!(
                "its process (pid {}) is gone; `hapctl serve` starts it again, its log says why it ended",
                s.pid
            )),
            (Some(_), Some(age)) if age > STALE_AFTER_SECS => Some(format!(
                "its state file is more than {STALE_AFTER_SECS} s old (rewritten every second while it runs): the agent is stuck"
            )),
            _ => None,
        };
        Health {
            up: down_reason.is_none(),
            down_reason,
            age_secs,
            agent,
        }
    }
}

/// Whether `pid` runs and is an agent (`hapctl … waf serve`), not a process that took the
/// number since; a command line that cannot be read (another user's, hidepid) counts as one.
fn is_agent(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if !crate::process::pid_alive(pid) {
        return false;
    }
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map_or(true, |c| c.split(|b| *b == 0).any(|a| a == b"waf"))
}

impl Health {
    /// The Prometheus exposition of the agent: `hapctl_waf_agent_up`, and from its state file
    /// (even a stale one: counters must not vanish while the agent is down) its counters, the
    /// requests over the threshold per counted rule id and the inspection latency histogram.
    /// The agent's counters start from 0 when it starts again, a counter reset to Prometheus.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# HELP hapctl_waf_agent_up Whether the WAF agent rewrote its state file within {STALE_AFTER_SECS} s.\n# TYPE hapctl_waf_agent_up gauge\nhapctl_waf_agent_up {}", u8::from(self.up));
        let Some(s) = &self.agent else { return out };
        for (name, help, value) in [
            (
                "inspected",
                "Requests the agent evaluated (errors and timeouts included).",
                s.inspected,
            ),
            (
                "blocked",
                "Requests over the threshold of a domain in block mode.",
                s.blocked,
            ),
            (
                "detected",
                "Requests over the threshold of a domain in detect mode (passed).",
                s.detected,
            ),
            (
                "errors",
                "Requests the agent could not evaluate (message, engine).",
                s.errors,
            ),
            (
                "timeouts",
                "Requests not evaluated within the agent's deadline.",
                s.timeouts,
            ),
        ] {
            let _ = writeln!(out, "# HELP hapctl_waf_{name}_total {help}\n# TYPE hapctl_waf_{name}_total counter\nhapctl_waf_{name}_total {value}");
        }
        let _ = writeln!(out, "# HELP hapctl_waf_rule_hits_total Requests over the threshold (blocked or detected) per rule id that counted.\n# TYPE hapctl_waf_rule_hits_total counter");
        for (rule, n) in &s.by_rule {
            let _ = writeln!(out, "hapctl_waf_rule_hits_total{{rule=\"{rule}\"}} {n}");
        }
        let name = "hapctl_waf_inspection_duration_seconds";
        let _ = writeln!(out, "# HELP {name} Time from the agent's receipt of a request to its answer (waiting for a worker included).\n# TYPE {name} histogram");
        for (le, n) in LATENCY_BUCKETS_US.iter().zip(&s.latency_buckets) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {n}", *le as f64 / 1e6);
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", s.inspected);
        let _ = writeln!(out, "{name}_sum {}", s.latency_sum_us as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {}", s.inspected);
        let _ = writeln!(out, "# HELP hapctl_waf_rules_loaded_timestamp_seconds When the agent last loaded its rules.\n# TYPE hapctl_waf_rules_loaded_timestamp_seconds gauge\nhapctl_waf_rules_loaded_timestamp_seconds {}", s.rules_loaded_at);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_every_counter_rule_and_bucket() {
        let m = AgentMetrics::default();
        m.record(
            InspectionOutcome::Blocked(&[942100, 942190]),
            Duration::from_micros(700),
        );
        m.record(InspectionOutcome::Pass, Duration::from_micros(100));
        m.record(InspectionOutcome::Timeout, Duration::from_millis(200));
        let loaded = Loaded {
            engine: "ModSecurity v3".into(),
            crs: None,
            rules: 1,
            at: 7,
        };
        let health = Health {
            up: true,
            down_reason: None,
            age_secs: Some(0),
            agent: Some(m.snapshot(&loaded)),
        };
        let text = health.prometheus();
        for line in [
            "hapctl_waf_agent_up 1",
            "hapctl_waf_inspected_total 3",
            "hapctl_waf_blocked_total 1",
            "hapctl_waf_timeouts_total 1",
            "hapctl_waf_rule_hits_total{rule=\"942190\"} 1",
            "hapctl_waf_inspection_duration_seconds_bucket{le=\"0.00025\"} 1",
            "hapctl_waf_inspection_duration_seconds_bucket{le=\"0.001\"} 2",
            "hapctl_waf_inspection_duration_seconds_bucket{le=\"+Inf\"} 3",
            "hapctl_waf_inspection_duration_seconds_count 3",
            "hapctl_waf_rules_loaded_timestamp_seconds 7",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        let down = Health {
            up: false,
            down_reason: Some("stopped".into()),
            age_secs: None,
            agent: None,
        }
        .prometheus();
        assert_eq!(down.lines().last(), Some("hapctl_waf_agent_up 0"));
    }
}
