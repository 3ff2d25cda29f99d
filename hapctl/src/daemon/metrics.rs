//! Prometheus metrics, in the text exposition format (no client library needed for a handful
//! of counters and one histogram).
//!
//! Certificates: `hapctl_certificate_expiry_seconds{name}` (not_after − now, from the
//! database at scrape time), `hapctl_certificate_renewals_total` (renewals that installed a
//! new certificate) and `hapctl_certificate_renewal_failures_total{name}` (failed attempts):
//! both counters count what this daemon ran (worker and renew routes), from 0 at its start,
//! so they only ever go up as counters must. The row's consecutive-failure count, which a
//! success resets and `hapctl cert renew` also moves, is the gauge
//! `hapctl_certificate_renewal_failing{name}`: alert on that.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::apply::ApplyReport;
use crate::edge::CertView;
use crate::haproxy::ReloadKind;
use crate::model::CertName;

/// Upper bounds (seconds) of the apply duration histogram.
const BUCKETS: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default)]
struct Counters {
    applies: BTreeMap<&'static str, u64>,
    /// Cumulative counts per bucket, plus the sum and count.
    apply_buckets: [u64; BUCKETS.len()],
    apply_sum: f64,
    apply_count: u64,
    checks: u64,
    /// Reloads by reason (`ReloadKind::as_str`).
    reloads: BTreeMap<&'static str, u64>,
    /// Changes per apply: how much coalescing happened.
    batched_changes: u64,
    blocks_changed: u64,
    requests: BTreeMap<(String, String, u16), u64>,
    renewals: u64,
    renewal_failures: BTreeMap<CertName, u64>,
    haproxy_restarts: u64,
    haproxy_failed_starts: u64,
    runtime_check_failures: u64,
    runtime_checks_gave_way: u64,
}

#[derive(Default)]
pub struct Metrics {
    counters: Mutex<Counters>,
}

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Counters)) {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut c);
    }

    pub fn apply(&self, report: &ApplyReport) {
        self.with(|c| {
            *c.applies.entry(report.outcome.as_str()).or_default() += 1;
            let secs = report.duration.as_secs_f64();
            for (i, le) in BUCKETS.iter().enumerate() {
                if secs <= *le {
                    c.apply_buckets[i] += 1;
                }
            }
            c.apply_sum += secs;
            c.apply_count += 1;
            c.checks += report.checks as u64;
            for reason in &report.reload_reasons {
                *c.reloads.entry(reason.kind.as_str()).or_default() += 1;
            }
        });
    }

    /// The background `haproxy -c` of a runtime-changed set ran; `refused`: a defect.
    pub fn runtime_checked(&self, refused: bool) {
        self.with(|c| {
            c.checks += 1;
            c.runtime_check_failures += u64::from(refused);
        });
    }

    /// A background check stopped for a change that arrived (no verdict; the next one covers it).
    pub fn runtime_check_gave_way(&self) {
        self.with(|c| c.runtime_checks_gave_way += 1);
    }

    /// A reload made outside an apply (certificate fallback, a client's request...).
    pub fn reload(&self, kind: ReloadKind) {
        self.with(|c| *c.reloads.entry(kind.as_str()).or_default() += 1);
    }

    /// A reload a client asked for (`POST /v1/haproxy/reload`, the old manager's reloads).
    pub fn reload_requested(&self) {
        self.reload(ReloadKind::Requested);
    }

    pub fn batch(&self, changes: usize) {
        self.with(|c| c.batched_changes += changes as u64);
    }

    pub fn block_batch(&self, changes: usize) {
        self.with(|c| c.blocks_changed += changes as u64);
    }

    pub fn renewal(&self, name: &CertName, renewed: bool) {
        self.with(|c| {
            if renewed {
                c.renewals += 1;
            } else {
                *c.renewal_failures.entry(name.clone()).or_default() += 1;
            }
        });
    }

    /// A restart of HAProxy's master: `started` when it runs again, else a failed attempt.
    pub fn haproxy_restart(&self, started: bool) {
        self.with(|c| {
            if started {
                c.haproxy_restarts += 1;
            } else {
                c.haproxy_failed_starts += 1;
            }
        });
    }

    /// Restarts of a dead master so far (the alert loop's events).
    pub fn haproxy_restarts(&self) -> u64 {
        self.counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .haproxy_restarts
    }

    /// Applies that ended with `outcome` so far.
    pub fn applies_with(&self, outcome: &str) -> u64 {
        let c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        c.applies.get(outcome).copied().unwrap_or(0)
    }

    pub fn request(&self, method: &str, route: &str, status: u16) {
        self.with(|c| {
            *c.requests
                .entry((method.to_string(), route.to_string(), status))
                .or_default() += 1
        });
    }

    /// The exposition text; `blocked` is the current number of blocked entries, `certs` the
    /// certificates now.
    pub fn render(&self, blocked: usize, certs: &[CertView], now: i64) -> String {
        let c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        render_applies(&mut out, &c);
        for (name, help, value) in [
            ("hapctl_haproxy_checks_total", "haproxy -c runs.", c.checks),
            (
                "hapctl_domain_changes_total",
                "Domain changes applied (several may share one apply).",
                c.batched_changes,
            ),
            (
                "hapctl_block_changes_total",
                "Block changes through the fast path.",
                c.blocks_changed,
            ),
            (
                "hapctl_certificate_renewals_total",
                "Certificate renewals this daemon installed.",
                c.renewals,
            ),
            (
                "hapctl_runtime_check_failures_total",
                "Background haproxy -c runs that refused a set changed at runtime (a defect: not promoted to known-good).",
                c.runtime_check_failures,
            ),
            (
                "hapctl_runtime_checks_gave_way_total",
                "Background haproxy -c runs stopped for a change that arrived (it went first; the next check covers it).",
                c.runtime_checks_gave_way,
            ),
            (
                "hapctl_haproxy_restarts_total",
                "Restarts of a dead HAProxy master (by this daemon; under systemd, the unit's it noticed).",
                c.haproxy_restarts,
            ),
            (
                "hapctl_haproxy_restart_failures_total",
                "Attempts to start a dead HAProxy master again that failed.",
                c.haproxy_failed_starts,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        let _ = writeln!(out, "# HELP hapctl_blocked_entries Entries in the blocked map.\n# TYPE hapctl_blocked_entries gauge\nhapctl_blocked_entries {blocked}");
        let _ = writeln!(out, "# HELP hapctl_api_requests_total API requests by route and status.\n# TYPE hapctl_api_requests_total counter");
        for ((method, route, status), n) in &c.requests {
            let _ = writeln!(out, "hapctl_api_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}");
        }
        render_certificates(&mut out, &c, certs, now);
        out
    }
}

/// Applies by outcome, their durations, and reloads by reason.
fn render_applies(out: &mut String, c: &Counters) {
    let _ = writeln!(
        out,
        "# HELP hapctl_applies_total Applies by outcome.\n# TYPE hapctl_applies_total counter"
    );
    for (outcome, n) in &c.applies {
        let _ = writeln!(out, "hapctl_applies_total{{outcome=\"{outcome}\"}} {n}");
    }
    let _ = writeln!(out, "# HELP hapctl_apply_duration_seconds Duration of applies.\n# TYPE hapctl_apply_duration_seconds histogram");
    for (le, n) in BUCKETS.iter().zip(c.apply_buckets) {
        let _ = writeln!(
            out,
            "hapctl_apply_duration_seconds_bucket{{le=\"{le}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "hapctl_apply_duration_seconds_bucket{{le=\"+Inf\"}} {}",
        c.apply_count
    );
    let _ = writeln!(out, "hapctl_apply_duration_seconds_sum {}", c.apply_sum);
    let _ = writeln!(out, "hapctl_apply_duration_seconds_count {}", c.apply_count);
    // Every reason, 0 included: a series that appears late breaks rate() and alerts.
    let _ = writeln!(out, "# HELP hapctl_reloads_total HAProxy reloads hapctl made, by reason.\n# TYPE hapctl_reloads_total counter");
    for kind in ReloadKind::ALL {
        let n = c.reloads.get(kind.as_str()).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "hapctl_reloads_total{{reason=\"{}\"}} {n}",
            kind.as_str()
        );
    }
}

fn render_certificates(out: &mut String, c: &Counters, certs: &[CertView], now: i64) {
    let _ = writeln!(out, "# HELP hapctl_certificate_expiry_seconds Seconds until the certificate expires (negative: expired).\n# TYPE hapctl_certificate_expiry_seconds gauge");
    for v in certs {
        let r = &v.record;
        let _ = writeln!(
            out,
            "hapctl_certificate_expiry_seconds{{name=\"{}\"}} {}",
            r.name,
            r.not_after - now
        );
    }
    let _ = writeln!(out, "# HELP hapctl_certificate_renewal_failing Renewal failures in a row (0 once one succeeds).\n# TYPE hapctl_certificate_renewal_failing gauge");
    for v in certs.iter().filter(|v| v.record.source.is_acme()) {
        let _ = writeln!(
            out,
            "hapctl_certificate_renewal_failing{{name=\"{}\"}} {}",
            v.record.name, v.record.failures
        );
    }
    // Every ACME certificate has its series from the start (0), plus any that failed and
    // was removed since: a counter must not vanish while the daemon runs.
    let mut failures: BTreeMap<&CertName, u64> = certs
        .iter()
        .filter(|v| v.record.source.is_acme())
        .map(|v| (&v.record.name, 0))
        .collect();
    for (name, n) in &c.renewal_failures {
        failures.insert(name, *n);
    }
    let _ = writeln!(out, "# HELP hapctl_certificate_renewal_failures_total Failed renewal attempts this daemon ran.\n# TYPE hapctl_certificate_renewal_failures_total counter");
    for (name, n) in failures {
        let _ = writeln!(
            out,
            "hapctl_certificate_renewal_failures_total{{name=\"{name}\"}} {n}"
        );
    }
}
