//! mixed-changes: 1,000 changes (`--changes`) through the daemon's API, one after the other, in a fixed
//! pseudo-random mix (seeded: every run sends the same sequence) on an edge with N fixture
//! domains. Most kinds have a runtime path (servers added / removed / re-weighted, new
//! domains in slot backends, blocks, HTTPS policy, suspension); a small share truly needs a
//! reload (a domain's profile, a server's health check). For every change: the API's answer
//! time, the apply report's `haproxy -c` runs, reloads and their reasons, and, independently,
//! the master's reload counter (`show proc`) and the counting wrapper's `haproxy -c` runs. The
//! target: every reload the master made has a recorded, non-empty reason.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::clock::unix_millis;
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::Edge;

use crate::api::Api;
use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge, HttpBackend};
use crate::stats::ms;
use crate::{Ctx, Report};
use mix::{Kind, Mix, Request};

mod mix;
mod report;

const SETTLE: Duration = Duration::from_secs(30);

/// A reload as recorded: its reason's kind (the metric's label) and detail.
#[derive(Clone)]
struct Reason {
    kind: String,
    detail: String,
}

impl Reason {
    fn to_json(&self) -> Value {
        json!({"kind": self.kind, "detail": self.detail})
    }

    /// A runtime-capable change may reload only when it is a new domain of a kind with no
    /// slot backend yet, or every slot of its kind is taken.
    fn expected_for(&self, kind: Kind) -> bool {
        !kind.runtime()
            || (kind == Kind::DomainAdd
                && (self.kind == "capacity" || self.detail.contains("is the first")))
    }
}

/// One change as measured.
struct Change {
    kind: Kind,
    answer_ms: f64,
    /// The master's reload counter, before → after.
    master_reloads: i64,
    /// Reloads the answer's apply report (or, for a change without one, the history) names.
    reasons: Vec<Reason>,
    /// `haproxy -c` runs the report names (`None`: the answer carries no apply report).
    report_checks: Option<i64>,
    /// `haproxy -c` runs the wrapper saw during the change (the daemon's coalesced check of
    /// earlier runtime changes included).
    wrapper_checks: usize,
    /// Reasons found only in `GET /v1/applies` (the answer did not name them).
    from_history: bool,
}

impl Change {
    fn recorded(&self) -> i64 {
        self.reasons.len() as i64
    }

    fn unexpected(&self) -> i64 {
        let named = self
            .reasons
            .iter()
            .filter(|r| !r.expected_for(self.kind))
            .count() as i64;
        named + (self.master_reloads - self.recorded()).max(0) * i64::from(self.kind.runtime())
    }
}

/// Fields drop in order: the daemon before the edge.
struct Served {
    daemon: Daemon,
    edge: Edge,
}

/// What one size gave.
struct Run {
    domains: usize,
    changes: Vec<Change>,
    /// `hapctl_reloads_total{reason}`, after − before.
    metrics: BTreeMap<String, i64>,
    master_total: i64,
    wall_s: f64,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let a = HttpBackend::start("hapctl-bench mixed A\n");
    let b = HttpBackend::start("hapctl-bench mixed B\n");
    let mut runs = Vec::new();
    for &n in &ctx.sizes {
        eprintln!("mixed-changes: {} changes at {n} domains…", ctx.changes);
        runs.push(measure(&hapctl, n, ctx.changes, &a.addr(), &b.addr())?);
    }
    Ok(report::report(&runs, ctx.changes))
}

fn measure(
    hapctl: &std::path::Path,
    n: usize,
    count: usize,
    a: &str,
    b: &str,
) -> anyhow::Result<Run> {
    let edge = new_edge(hapctl)?;
    edge.load(&fixture::state(n, Servers::At(a)))?;
    edge.start()?;
    let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(300)))?;
    let s = Served { daemon, edge };
    let api = &Api::of(&s.daemon);
    let mut mix = Mix::new(n, a, b);
    if mix.domains() == 0 {
        bail!("no exact fixture domain with a slot profile at {n} domains");
    }
    if !s.edge.wait_old_workers_gone(SETTLE)? {
        eprintln!("  (old workers still draining after {SETTLE:?}; measuring anyway)");
    }
    let metrics_before = reload_metrics(api)?;
    let master_before = s.edge.try_show_proc()?.master.reloads;
    let t0 = Instant::now();
    let mut changes = Vec::with_capacity(count);
    for i in 0..count {
        let req = mix.next();
        let c = send(&s, &req)
            .with_context(|| format!("change {} of {count} ({})", i + 1, req.kind.name()))?;
        if c.master_reloads > 0 || c.recorded() > 0 {
            let why: Vec<String> = c
                .reasons
                .iter()
                .map(|r| format!("{}: {}", r.kind, r.detail))
                .collect();
            eprintln!(
                "  #{} {}: {} ms, master reloads {}, recorded {} [{}]",
                i + 1,
                req.kind.name(),
                ms(c.answer_ms),
                c.master_reloads,
                c.recorded(),
                why.join("; ")
            );
        }
        changes.push(c);
    }
    let wall_s = t0.elapsed().as_secs_f64();
    s.edge.wait_old_workers_gone(SETTLE)?;
    let master_total = s.edge.try_show_proc()?.master.reloads as i64 - master_before as i64;
    let after = reload_metrics(api)?;
    let metrics = after
        .iter()
        .map(|(k, v)| (k.clone(), v - metrics_before.get(k).copied().unwrap_or(0)))
        .filter(|(_, d)| *d != 0)
        .collect();
    Ok(Run {
        domains: n,
        changes,
        metrics,
        master_total,
        wall_s,
    })
}

/// Sends one change and counts what it made HAProxy do.
fn send(s: &Served, req: &Request) -> anyhow::Result<Change> {
    let api = &Api::of(&s.daemon);
    let reloads_before = s.edge.try_show_proc()?.master.reloads;
    let checks_before = s.edge.check_runs();
    let sent_ms = unix_millis();
    let t = Instant::now();
    let answer = api.call(req.method, &req.path, req.body.as_ref())?;
    let answer_ms = t.elapsed().as_secs_f64() * 1000.0;
    if !(200..300).contains(&answer.status) {
        bail!("{} {}: {}", req.method, req.path, answer.describe());
    }
    let master_reloads = s.edge.try_show_proc()?.master.reloads as i64 - reloads_before as i64;
    let apply = &answer.json()["apply"];
    let has_report = apply.is_object();
    if has_report && apply["outcome"] != "applied" {
        bail!("{} {}: {}", req.method, req.path, answer.describe());
    }
    let mut reasons: Vec<Reason> = apply["reload_reasons"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|r| Reason {
                    kind: r["kind"].as_str().unwrap_or("").into(),
                    detail: r["detail"].as_str().unwrap_or("").into(),
                })
                .collect()
        })
        .unwrap_or_default();
    // A reload the answer does not account for (a block's fallback, say) is looked for in
    // the history: every apply since the request.
    let mut from_history = false;
    if master_reloads > reasons.len() as i64 {
        let found = history_reasons(api, sent_ms)?;
        if found.len() > reasons.len() {
            reasons = found;
            from_history = true;
        }
    }
    Ok(Change {
        kind: req.kind,
        answer_ms,
        master_reloads,
        reasons,
        report_checks: has_report.then(|| apply["checks"].as_i64().unwrap_or(-1)),
        wrapper_checks: s.edge.check_runs() - checks_before,
        from_history,
    })
}

/// The reload reasons of every apply in the history that started at or after `since_ms`.
fn history_reasons(api: &Api, since_ms: i64) -> anyhow::Result<Vec<Reason>> {
    let answer = api.call("GET", "/v1/applies", None)?;
    let list = answer.json();
    let entries = list
        .as_array()
        .with_context(|| format!("GET /v1/applies: {}", answer.describe()))?;
    Ok(entries
        .iter()
        .filter(|e| e["started_at_ms"].as_i64().is_some_and(|t| t >= since_ms))
        .flat_map(|e| e["reload_reasons"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            let text = r.as_str().unwrap_or("");
            let (kind, detail) = text.split_once(": ").unwrap_or((text, ""));
            Reason {
                kind: kind.into(),
                detail: detail.into(),
            }
        })
        .collect())
}

/// `hapctl_reloads_total{reason="…"} N` from `GET /metrics`.
fn reload_metrics(api: &Api) -> anyhow::Result<BTreeMap<String, i64>> {
    let answer = api.call("GET", "/metrics", None)?;
    if answer.status != 200 {
        bail!("GET /metrics: {}", answer.describe());
    }
    Ok(answer
        .text()
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("hapctl_reloads_total{reason=\"")?;
            let (reason, value) = rest.split_once("\"}")?;
            Some((reason.to_string(), value.trim().parse().ok()?))
        })
        .collect())
}
