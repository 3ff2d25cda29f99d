//! server-change: a change of an existing domain's servers, from the request to the moment the
//! edge serves it, on an edge with N domains. Server A stays; server B is added and removed, or
//! re-weighted (0 ↔ 1), through the runtime path (no `haproxy -c`, no reload in the apply), and
//! the same add and removal are made reload-bound by toggling `nocheck` on A (another server
//! line: check + reload). Each through the CLI (`hapctl domain add HOST --server …`) and the
//! daemon (`PUT /v1/domains/{name}`).

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::clock::unix_millis;
use hapctl::render::{render, Templates};
use hapctl::settings::Settings;
use hapctl::store::Store;
use serde_json::{json, Value};

mod job;
mod report;

use testkit::daemon::{Daemon, Serve};
use testkit::Edge;

use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge, HttpBackend};
use crate::stats::{bytes, ms, Summary};
use crate::{Ctx, Report, Table};
use job::Job;

const BODY_A: &str = "hapctl-bench server A\n";
const BODY_B: &str = "hapctl-bench server B\n";
const TARGET_DOMAINS: usize = 10_000;
const TARGET_MS: f64 = 50.0;
/// The fixture domain whose servers change: exact name, default profile, one server.
const DOMAIN_INDEX: usize = 0;
const POLL_EVERY: Duration = Duration::from_millis(2);
const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// A change that ends B's traffic is over once this many answers without B came after the
/// command ended (or the API answered), over at least `TAIL_MIN`.
const TAIL_ANSWERS: u32 = 25;
const TAIL_MIN: Duration = Duration::from_millis(50);
/// Bound on waiting for old workers and for the check of a runtime-changed set.
const SETTLE: Duration = Duration::from_secs(15);
/// Runs of `haproxy -c` on the live set alone, per size.
const RAW_RUNS: usize = 3;
/// The apply's steps (`--json`), in order; a path has some of them.
const STEPS: [&str; 6] = ["render", "snapshot", "write", "runtime", "check", "reload"];

/// Server B of the domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum B {
    Absent,
    /// No weight option (HAProxy's 1).
    Default,
    Weight(u16),
}

/// The domain's servers: s1 = A (health-checked or `nocheck`), s2 = B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Set {
    a_check: bool,
    b: B,
}

impl Set {
    fn b_serves(self) -> bool {
        !matches!(self.b, B::Absent | B::Weight(0))
    }

    fn cli_args(self, a: &str, b: &str) -> Vec<String> {
        let mut args = vec!["--server".to_string()];
        args.push(if self.a_check {
            a.to_string()
        } else {
            format!("{a},nocheck")
        });
        match self.b {
            B::Absent => {}
            B::Default => args.extend(["--server".into(), b.to_string()]),
            B::Weight(w) => args.extend(["--server".into(), format!("{b},weight={w}")]),
        }
        args
    }

    fn api_body(self, a: &str, b: &str) -> Value {
        let mut servers = vec![json!({"address": a, "check": self.a_check})];
        match self.b {
            B::Absent => {}
            B::Default => servers.push(json!({"address": b})),
            B::Weight(w) => servers.push(json!({"address": b, "weight": w})),
        }
        json!({ "servers": servers })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Cli,
    Api,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Cli => "CLI",
            Via::Api => "API",
        }
    }
}

/// Changes alternating between two sets, starting from `start`.
struct Series {
    path: &'static str,
    start: (&'static str, Set),
    other: (&'static str, Set),
}

const fn set(a_check: bool, b: B) -> Set {
    Set { a_check, b }
}

const SERIES: [Series; 3] = [
    Series {
        path: "runtime",
        start: ("remove B", set(true, B::Absent)),
        other: ("add B", set(true, B::Default)),
    },
    Series {
        path: "runtime",
        start: ("B weight=1", set(true, B::Weight(1))),
        other: ("B weight=0", set(true, B::Weight(0))),
    },
    Series {
        path: "reload",
        start: ("remove B, A check", set(true, B::Absent)),
        other: ("add B, A nocheck", set(false, B::Default)),
    },
];

/// One measured change.
struct Op {
    change: &'static str,
    /// Request → in effect: B's first answer (added, weight 1), or its last one (removed,
    /// weight 0: no request reached B after it, as the tail of answers confirms).
    effect_ms: f64,
    /// The longest probe request of the op: how long the edge took to answer while the change
    /// ran (a removal's drain polls `show stat`, which holds up the worker).
    slowest_probe_ms: f64,
    /// `Store::load_state` and `render` alone, in-process, right after the change settled.
    load_state_ms: f64,
    render_ms: f64,
    /// Request → the command's exit / the API's answer.
    ended_ms: f64,
    apply_ms: f64,
    /// Request → the apply's start (`started_at_ms`, 1 ms resolution).
    before_apply_ms: f64,
    /// The report's `steps`: `[{"name", "duration"}]`.
    steps: Value,
    /// `haproxy -c` runs (counting wrapper) from the request until settled: the apply's, plus
    /// the CLI's own check at its end or the daemon's coalesced one.
    checks_total: usize,
    /// … of them, up to the moment the change was seen in effect (the observation may lag, so
    /// the apply's own count is the report's).
    checks_at_effect: usize,
    /// Master reloads, request → settled.
    reloads: i64,
    report_checks: i64,
    report_reloads: i64,
    probes: u32,
    failed_probes: u32,
}

impl Op {
    /// The checks after the apply: the CLI's own, or the daemon's background one.
    fn after_checks(&self) -> i64 {
        self.checks_total as i64 - self.report_checks
    }

    fn step(&self, name: &str) -> Option<f64> {
        let step = self.steps.as_array()?.iter().find(|s| s["name"] == name)?;
        step["duration"].as_f64()
    }
}

/// The ops of one change at one size, one path, one interface.
struct Group {
    domains: usize,
    path: &'static str,
    via: Via,
    change: &'static str,
    ops: Vec<Op>,
}

impl Group {
    fn summary(&self, f: impl Fn(&Op) -> f64) -> Summary {
        Summary::of(&self.ops.iter().map(f).collect::<Vec<_>>()).expect("a group has ops")
    }

    fn per_op(&self, f: impl Fn(&Op) -> f64) -> f64 {
        self.ops.iter().map(f).sum::<f64>() / self.ops.len() as f64
    }

    fn step_median(&self, name: &str) -> Option<f64> {
        Summary::of(
            &self
                .ops
                .iter()
                .filter_map(|o| o.step(name))
                .collect::<Vec<_>>(),
        )
        .map(|s| s.median)
    }
}

/// Fields drop in order: the database handle and the daemon before the edge.
struct Served {
    alone: Alone,
    daemon: Daemon,
    edge: Edge,
    host: String,
    a: String,
    b: String,
}

/// Changes per series: `--runs`, else 20 (reload path: 10, and 6 from 10,000 domains up).
fn runs_for(ctx: &Ctx, path: &str, n: usize) -> usize {
    let default = match (path, n >= 10_000) {
        ("reload", true) => 6,
        ("reload", false) => 10,
        _ => 20,
    };
    ctx.runs.unwrap_or(default).max(2)
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let (backend_a, backend_b) = (HttpBackend::start(BODY_A), HttpBackend::start(BODY_B));
    let mut setup = Table::new(
        "server-change: the edge under test",
        &[
            "domains",
            "servers",
            "haproxy.cfg",
            "haproxy start ms",
            "daemon start ms",
            "haproxy -c alone ms",
        ],
    );
    let mut groups = Vec::new();
    let mut sizes_json = Vec::new();
    for &n in &ctx.sizes {
        eprintln!("server-change: {n} domains…");
        let (row, found, extra) = measure(ctx, &hapctl, n, &backend_a.addr(), &backend_b.addr())?;
        setup.row(row);
        sizes_json.push(extra);
        groups.extend(found);
    }
    Ok(Report {
        tables: vec![
            setup,
            report::latency_table(&groups),
            report::split_table(&groups),
            report::ratio_table(ctx, &groups),
        ],
        targets: report::targets(&groups),
        notes: report::notes(&backend_a.addr()),
        json: json!({
            "sizes": sizes_json,
            "groups": groups.iter().map(report::group_json).collect::<Vec<_>>(),
        }),
    })
}

fn measure(
    ctx: &Ctx,
    hapctl: &std::path::Path,
    n: usize,
    a: &str,
    b: &str,
) -> anyhow::Result<(Vec<String>, Vec<Group>, Value)> {
    let (s, size) = serve(hapctl, n, a, b)?;
    // The fixture's servers carry `nocheck`.
    let mut current = set(false, B::Absent);
    let mut groups = Vec::new();
    for series in &SERIES {
        for via in [Via::Cli, Via::Api] {
            current = run_series(ctx, &s, n, series, via, current, &mut groups)?;
        }
    }
    let checks: Vec<f64> = (0..RAW_RUNS)
        .map(|_| s.edge.time_haproxy_check())
        .collect::<anyhow::Result<_>>()?;
    let raw_check = Summary::of(&checks).expect("RAW_RUNS > 0");
    Ok((size.row(n, &raw_check), groups, size.json(n, &raw_check)))
    // `s` drops here: the daemon stopped, then HAProxy, the temp dir removed.
}

/// What one size's edge took to come up.
struct SizeSetup {
    servers: usize,
    config_bytes: u64,
    start_ms: f64,
    daemon_ms: f64,
}

impl SizeSetup {
    fn row(&self, n: usize, raw_check: &Summary) -> Vec<String> {
        vec![
            n.to_string(),
            self.servers.to_string(),
            bytes(self.config_bytes as usize),
            format!("{:.0}", self.start_ms),
            format!("{:.0}", self.daemon_ms),
            ms(raw_check.median),
        ]
    }

    fn json(&self, n: usize, raw_check: &Summary) -> Value {
        json!({
            "domains": n,
            "servers": self.servers,
            "haproxy_cfg_bytes": self.config_bytes,
            "haproxy_start_ms": self.start_ms,
            "daemon_start_ms": self.daemon_ms,
            "haproxy_check_alone_ms": raw_check.to_json(),
        })
    }
}

/// An edge with `n` fixture domains on server A, HAProxy and the daemon started.
fn serve(
    hapctl: &std::path::Path,
    n: usize,
    a: &str,
    b: &str,
) -> anyhow::Result<(Served, SizeSetup)> {
    let edge = new_edge(hapctl)?;
    let state = fixture::state(n, Servers::At(a));
    let servers: usize = state.domains.values().map(|b| b.servers().len()).sum();
    edge.load(&state)?;
    let t = Instant::now();
    edge.start()?;
    let start_ms = t.elapsed().as_secs_f64() * 1000.0;
    let config_bytes = std::fs::metadata(&edge.settings()?.paths.config).map_or(0, |m| m.len());
    let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(300)))?;
    let daemon_ms = daemon.startup.as_secs_f64() * 1000.0;
    let s = Served {
        alone: Alone::open(&edge)?,
        daemon,
        edge,
        host: fixture::domain(DOMAIN_INDEX).to_string(),
        a: a.into(),
        b: b.into(),
    };
    if fixture::backend(DOMAIN_INDEX, Servers::At(a))
        .servers()
        .len()
        != 1
    {
        bail!("fixture domain {DOMAIN_INDEX} must have exactly one server (A)");
    }
    let size = SizeSetup {
        servers,
        config_bytes,
        start_ms,
        daemon_ms,
    };
    Ok((s, size))
}

/// One series through one interface: its start set first (if not there), then changes
/// alternating between its two sets, each op added to its change's group. Returns the set
/// the domain is left in.
fn run_series(
    ctx: &Ctx,
    s: &Served,
    n: usize,
    series: &Series,
    via: Via,
    mut current: Set,
    groups: &mut Vec<Group>,
) -> anyhow::Result<Set> {
    if current != series.start.1 {
        s.edge.settle(SETTLE)?;
        let t0 = Instant::now();
        Job::start(s, via, series.start.1, t0)?.finish(t0)?;
        current = series.start.1;
    }
    let k = runs_for(ctx, series.path, n);
    let mut ops: Vec<Op> = Vec::with_capacity(k);
    for i in 0..k {
        let (change, to) = if i % 2 == 0 {
            series.other
        } else {
            series.start
        };
        let op = change_once(s, via, current, to, change)?;
        current = to;
        eprintln!(
            "  {} {} {change}: in effect after {} ms, done {} ms (apply {} ms), haproxy -c {} (+{} after), reloads {}",
            series.path,
            via.name(),
            ms(op.effect_ms),
            ms(op.ended_ms),
            ms(op.apply_ms),
            op.report_checks,
            op.after_checks(),
            op.reloads
        );
        ops.push(op);
    }
    for name in [series.other.0, series.start.0] {
        groups.push(Group {
            domains: n,
            path: series.path,
            via,
            change: name,
            ops: Vec::new(),
        });
    }
    let len = groups.len();
    for op in ops {
        let g = if op.change == series.other.0 {
            len - 2
        } else {
            len - 1
        };
        groups[g].ops.push(op);
    }
    Ok(current)
}

/// hapctl's two big in-process steps, timed alone on the edge's database after each change
/// (so they meet the same load from other processes as the changes).
struct Alone {
    store: Store,
    templates: Templates,
    settings: Settings,
}

impl Alone {
    fn open(edge: &Edge) -> anyhow::Result<Alone> {
        let settings = edge.settings()?;
        let paths = &settings.paths;
        Ok(Alone {
            store: Store::open(&paths.database, &paths.blocks_database)?,
            templates: Templates::load(settings.render.templates_dir.as_deref())?,
            settings,
        })
    }

    /// One `Store::load_state` and one `render` of what it loaded, in ms.
    fn time(&self) -> anyhow::Result<(f64, f64)> {
        let t = Instant::now();
        let state = self.store.load_state()?;
        let load_ms = t.elapsed().as_secs_f64() * 1000.0;
        let t = Instant::now();
        std::hint::black_box(render(&state, &self.settings, &self.templates)?);
        Ok((load_ms, t.elapsed().as_secs_f64() * 1000.0))
    }
}

/// What the probes saw of one change.
struct Watch {
    /// When the job ended, as the probe loop saw it.
    ended: Option<Duration>,
    /// B's latest answer (its first ends an add), with the wrapper's count then.
    b_seen: Option<(Duration, usize)>,
    probes: u32,
    failed_probes: u32,
    slowest: Duration,
}

/// Probes the domain every `POLL_EVERY` from `t0` until the change is in effect: B answers
/// (`want_b`), or A has answered `TAIL_ANSWERS` times and `TAIL_MIN` since the job ended.
fn watch(
    s: &Served,
    job: &mut Job,
    t0: Instant,
    want_b: bool,
    (via, change): (Via, &str),
) -> anyhow::Result<Watch> {
    let (mut ended, mut b_seen, mut since_b) = (None, None, 0u32);
    let (mut probes, mut failed_probes, mut slowest) = (0u32, 0u32, Duration::ZERO);
    let mut next = t0;
    loop {
        if ended.is_none() && job.ended() {
            ended = Some(t0.elapsed());
        }
        let sent = t0.elapsed();
        let answer = s.edge.try_get(&s.host, "/");
        let at = t0.elapsed();
        slowest = slowest.max(at - sent);
        probes += 1;
        match answer {
            Ok(r) if r.status == 200 && r.body == BODY_B => {
                since_b = 0;
                b_seen = Some((at, s.edge.check_runs()));
            }
            Ok(r) if r.status == 200 && r.body == BODY_A => since_b += 1,
            _ => failed_probes += 1,
        }
        let done = match (want_b, ended) {
            (true, _) => b_seen.is_some(),
            (false, Some(end)) => since_b >= TAIL_ANSWERS && at >= end + TAIL_MIN,
            (false, None) => false,
        };
        if done {
            break;
        }
        if at > OP_TIMEOUT {
            bail!(
                "{change} through the {}: not in effect within {OP_TIMEOUT:?}",
                via.name()
            );
        }
        next += POLL_EVERY;
        let now = Instant::now();
        next = next.max(now);
        thread::sleep(next - now);
    }
    Ok(Watch {
        ended,
        b_seen,
        probes,
        failed_probes,
        slowest,
    })
}

/// Makes one change and watches the domain from the request on: a fresh connection every
/// ~2 ms until the change shows (and, when B's traffic ends, until the tail shows no B).
fn change_once(
    s: &Served,
    via: Via,
    from: Set,
    to: Set,
    change: &'static str,
) -> anyhow::Result<Op> {
    let want_b = to.b_serves();
    if want_b == from.b_serves() {
        bail!("{change}: B serves before and after; nothing to observe");
    }
    s.edge.settle(SETTLE)?;
    let checks_before = s.edge.check_runs();
    let reloads_before = s.edge.try_show_proc()?.master.reloads;
    let sent_unix_ms = unix_millis() as f64;
    let t0 = Instant::now();
    let mut job = Job::start(s, via, to, t0)?;
    let Watch {
        ended,
        b_seen,
        probes,
        failed_probes,
        slowest,
    } = watch(s, &mut job, t0, want_b, (via, change))?;
    let (effect, checks_then) = b_seen.context("B never answered during the change")?;
    let (report, end) = job.finish(t0)?;
    // The CLI's exit as the probe loop saw it is closer than the wait after the loop.
    let end = match (via, ended) {
        (Via::Cli, Some(e)) => e,
        _ => end,
    };
    s.edge.settle(SETTLE)?;
    let (load_state_ms, render_ms) = s.alone.time()?;
    Ok(Op {
        change,
        effect_ms: effect.as_secs_f64() * 1000.0,
        slowest_probe_ms: slowest.as_secs_f64() * 1000.0,
        load_state_ms,
        render_ms,
        ended_ms: end.as_secs_f64() * 1000.0,
        apply_ms: report["duration"].as_f64().unwrap_or(f64::NAN),
        before_apply_ms: report["started_at_ms"]
            .as_f64()
            .map_or(f64::NAN, |t| t - sent_unix_ms),
        steps: report["steps"].clone(),
        checks_total: s.edge.check_runs() - checks_before,
        checks_at_effect: checks_then - checks_before,
        reloads: s.edge.try_show_proc()?.master.reloads as i64 - reloads_before as i64,
        report_checks: report["checks"].as_i64().unwrap_or(-1),
        report_reloads: report["reloads"].as_i64().unwrap_or(-1),
        probes,
        failed_probes,
    })
}
