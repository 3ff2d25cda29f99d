//! domain-add: a new domain end to end, on an edge that already has N domains, through the CLI
//! (`hapctl domain add`, from spawning the command) and then through the daemon
//! (`PUT /v1/domains/{name}` to `hapctl serve` on the same edge, from sending the request), to
//! the first request with the new Host answering 200 from the backend through HAProxy.

use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde_json::{json, Value};

mod api;
mod report;

use testkit::Edge;

use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge, HttpBackend};
use crate::stats::{ms, Summary};
use crate::sys;
use crate::{Ctx, Report};
use report::{Stats, Tables};

const TARGET_DOMAINS: usize = 10_000;
const TARGET_MS: f64 = 50.0;

/// What the backend answers; a 200 with another body is not ours.
const BODY: &str = "hapctl-bench backend\n";
/// Pause between two probe requests.
const POLL_EVERY: Duration = Duration::from_millis(2);
/// Bound on one operation, from spawn to the first 200.
const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// Runs of `haproxy -c` and of a bare master reload, per size, for the HAProxy-alone table.
const RAW_RUNS: usize = 3;
/// The apply steps a report may have (`--json`, the PUT's `apply`), in the apply's order.
const STEPS: [&str; 9] = [
    "render",
    "diff",
    "snapshot",
    "prepare",
    "write",
    "runtime",
    "placement",
    "check",
    "reload",
];

/// One measured add, through the CLI or the API.
struct Op {
    host: String,
    /// Request (spawn / send) → first 200 from the backend with the new Host.
    first_ok_ms: f64,
    /// Request → the command's exit / the API's answer.
    ended_ms: f64,
    /// `haproxy -c` runs seen by the counting wrapper: CLI, spawn → exit (the apply's and the
    /// command's own check at its end); API, send → settled (the daemon's coalesced check).
    checks: usize,
    /// Master reloads count after − before.
    reloads: i64,
    probes: u32,
    applied: Applied,
}

/// What the apply report of an add says.
struct Applied {
    /// The apply's own duration.
    apply_ms: f64,
    /// Request → the apply's start (`started_at_ms` of the report; 1 ms resolution).
    before_apply_ms: f64,
    steps: Vec<(String, f64)>,
    checks: i64,
    reloads: i64,
    /// The apply's `kind: detail` for each reload it made.
    reload_reasons: Vec<String>,
}

impl Applied {
    /// `report`: the apply report (`--json`, or the PUT answer's `apply`); `sent_unix_ms`: when
    /// the request was made, in the report's clock.
    fn parse(report: &Value, sent_unix_ms: f64) -> Applied {
        let list = |key: &str| report[key].as_array().map_or(&[][..], Vec::as_slice);
        Applied {
            apply_ms: report["duration"].as_f64().unwrap_or(f64::NAN),
            before_apply_ms: report["started_at_ms"]
                .as_f64()
                .map_or(f64::NAN, |t| t - sent_unix_ms),
            steps: list("steps")
                .iter()
                .filter_map(|s| Some((s["name"].as_str()?.to_string(), s["duration"].as_f64()?)))
                .collect(),
            checks: report["checks"].as_i64().unwrap_or(-1),
            reloads: report["reloads"].as_i64().unwrap_or(-1),
            reload_reasons: list("reload_reasons")
                .iter()
                .map(|r| {
                    format!(
                        "{}: {}",
                        r["kind"].as_str().unwrap_or("?"),
                        r["detail"].as_str().unwrap_or("")
                    )
                })
                .collect(),
        }
    }
}

impl Applied {
    /// An apply as its history row tells it (`GET /v1/applies`): no steps.
    fn from_history(entry: &Value, sent_unix_ms: f64) -> Applied {
        let reasons = entry["reload_reasons"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        Applied {
            apply_ms: entry["duration_ms"].as_f64().unwrap_or(f64::NAN),
            before_apply_ms: entry["started_at_ms"]
                .as_f64()
                .map_or(f64::NAN, |t| t - sent_unix_ms),
            steps: Vec::new(),
            checks: entry["checks"].as_i64().unwrap_or(-1),
            reloads: entry["reloads"].as_i64().unwrap_or(-1),
            reload_reasons: reasons
                .iter()
                .filter_map(|r| Some(r.as_str()?.to_string()))
                .collect(),
        }
    }
}

impl Op {
    fn step(&self, name: &str) -> Option<f64> {
        let steps = &self.applied.steps;
        steps.iter().find(|(n, _)| n == name).map(|(_, d)| *d)
    }

    /// After the apply: request → exit/answer, less the time before the apply and the apply.
    fn after_apply_ms(&self) -> f64 {
        self.ended_ms - self.applied.before_apply_ms - self.applied.apply_ms
    }

    /// Reloads only as many as the apply recorded reasons for, and no check without a reload.
    fn count_fault(&self) -> bool {
        let a = &self.applied;
        a.reload_reasons.len() as i64 != self.reloads || (self.reloads == 0 && a.checks != 0)
    }

    fn log(&self, via: &str) {
        eprintln!(
            "  {via} {}: first 200 after {} ms, exit/answer {} ms (apply {} ms), haproxy -c {}, reloads {}",
            self.host,
            ms(self.first_ok_ms),
            ms(self.ended_ms),
            ms(self.applied.apply_ms),
            self.checks,
            self.reloads
        );
    }
}

/// Operations per size and interface: `--runs`, else 15 (7 from 10,000 domains up).
fn runs_for(ctx: &Ctx, n: usize) -> usize {
    ctx.runs.unwrap_or(if n >= 10_000 { 7 } else { 15 }).max(1)
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let backend = HttpBackend::start(BODY);
    let addr = backend.addr();
    let backend_addr = addr.as_str();
    let mut tables = Tables::new();
    let mut results = Vec::new();
    let mut counted = Vec::new();
    let mut cli_at_target = None;
    let mut forwarded_at_target = None;
    let mut api_largest = None;
    let mut old_route = Vec::new();

    for &n in &ctx.sizes {
        let k = runs_for(ctx, n);
        eprintln!(
            "domain-add: {n} domains, {k} operations through the CLI, then {k} through each API route…"
        );
        let m = measure(&hapctl, n, k, backend_addr)?;
        let stats = SizeStats::of(&m);
        tables.add(n, &m, &stats);
        if n == TARGET_DOMAINS {
            cli_at_target = Some(stats.cli.clone());
            forwarded_at_target = Some(stats.forwarded.clone());
        }
        if n >= api_largest.as_ref().map_or(0, |(size, _)| *size) {
            api_largest = Some((n, stats.api.clone()));
        }
        old_route.push((n, stats.api.clone(), stats.compat.clone()));
        results.push(report::size_json(n, &m, &stats));
        counted.push((n, vec![m.cli, m.api, m.compat, m.forwarded]));
    }

    Ok(Report {
        tables: tables.into_vec(),
        targets: vec![
            report::cli_target(cli_at_target.as_ref(), false),
            report::cli_target(forwarded_at_target.as_ref(), true),
            report::api_target(api_largest.as_ref()),
            report::old_route_target(&old_route),
            report::count_target(&counted),
        ],
        notes: report::notes(backend_addr),
        json: json!({ "backend": backend_addr, "sizes": results }),
    })
}

/// Every series of one size, summed up.
struct SizeStats {
    cli: Stats,
    api: Stats,
    compat: Stats,
    forwarded: Stats,
}

impl SizeStats {
    fn of(m: &Measured) -> SizeStats {
        SizeStats {
            cli: Stats::of(&m.cli),
            api: Stats::of(&m.api),
            compat: Stats::of(&m.compat),
            forwarded: Stats::of(&m.forwarded),
        }
    }

    /// Each series with its adds, in the tables' order (`report::VIA`).
    fn with_ops<'a>(&'a self, m: &'a Measured) -> [(&'a Stats, &'a [Op]); 4] {
        [
            (&self.cli, &m.cli),
            (&self.api, &m.api),
            (&self.compat, &m.compat),
            (&self.forwarded, &m.forwarded),
        ]
    }
}

struct Measured {
    servers: usize,
    /// `haproxy -c` run directly on the live set.
    raw_check: Summary,
    /// `Master::reload` from the library: reload + confirmation, no CLI, no apply.
    raw_reload: Summary,
    /// `Store::load_state` on the edge's database, in-process.
    load_state: Summary,
    config_bytes: usize,
    insert_ms: f64,
    start_ms: f64,
    /// `hapctl serve` spawn → `/health` answering 200, after the CLI series.
    daemon_start_ms: f64,
    cli: Vec<Op>,
    api: Vec<Op>,
    /// The old manager's route, `POST /api/domain`.
    compat: Vec<Op>,
    /// The CLI's adds with the daemon running (handed to it over its socket).
    forwarded: Vec<Op>,
}

fn measure(
    hapctl: &std::path::Path,
    n: usize,
    k: usize,
    backend: &str,
) -> anyhow::Result<Measured> {
    let edge = new_edge(hapctl)?;
    let state = fixture::state(n, Servers::At(backend));
    let servers = state.domains.values().map(|b| b.servers().len()).sum();
    let t = Instant::now();
    edge.load(&state)?;
    let insert_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    edge.start()?;
    let start_ms = t.elapsed().as_secs_f64() * 1000.0;
    let load_state = edge.time_load_state(5)?;
    let config_bytes = std::fs::metadata(&edge.settings()?.paths.config)
        .map(|m| m.len() as usize)
        .unwrap_or(0);

    // The fixture must route before anything is measured.
    let probe_host = fixture::domain(0).to_string();
    wait_for_backend(&edge, &probe_host, Duration::from_secs(10))
        .context("the fixture's first domain never answered 200 through HAProxy")?;

    let mut cli = Vec::with_capacity(k);
    for i in 0..k {
        if !edge.wait_old_workers_gone(Duration::from_secs(10))? {
            eprintln!("  (old workers still draining after 10 s; measuring anyway)");
        }
        let op = add_once(&edge, &format!("new-{i}.example.com"), backend)?;
        op.log("CLI");
        cli.push(op);
    }

    // The same two HAProxy operations without hapctl around them, on the CLI's final live set.
    let mut raw_check = Vec::new();
    let mut raw_reload = Vec::new();
    for _ in 0..RAW_RUNS {
        raw_check.push(edge.time_haproxy_check()?);
        edge.wait_old_workers_gone(Duration::from_secs(10))?;
        let t = Instant::now();
        edge.master()
            .reload(Duration::from_secs(60))
            .context("reload through the master socket")?;
        raw_reload.push(t.elapsed().as_secs_f64() * 1000.0);
    }

    let api::Series {
        daemon_ms: daemon_start_ms,
        api,
        compat,
        forwarded,
    } = api::series(&edge, k, backend)?;
    Ok(Measured {
        servers,
        raw_check: Summary::of(&raw_check).expect("RAW_RUNS > 0"),
        raw_reload: Summary::of(&raw_reload).expect("RAW_RUNS > 0"),
        load_state,
        config_bytes,
        insert_ms,
        start_ms,
        daemon_start_ms,
        cli,
        api,
        compat,
        forwarded,
    })
    // `edge` drops here: HAProxy stopped, temp dir removed.
}

fn wait_for_backend(edge: &Edge, host: &str, bound: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + bound;
    loop {
        let last = edge.try_get(host, "/");
        if matches!(&last, Ok(r) if r.status == 200 && r.body == BODY) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("last answer: {last:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn add_once(edge: &Edge, host: &str, backend: &str) -> anyhow::Result<Op> {
    let checks_before = edge.check_runs();
    let reloads_before = edge.try_show_proc()?.master.reloads;

    let cmd = edge.command(&["domain", "add", host, "--server", backend, "--json"]);
    let spawned_unix_ms = unix_ms();
    let what = format!("`hapctl domain add {host}` answering 200");
    let run = sys::spawn_and_observe(
        cmd,
        POLL_EVERY,
        OP_TIMEOUT,
        &what,
        || matches!(edge.try_get(host, "/"), Ok(r) if r.status == 200 && r.body == BODY),
    )?;
    let (exit, stdout) = (run.exit, run.stdout);
    if !run.status.success() {
        bail!(
            "`hapctl domain add {host}` failed ({}): {} {}",
            run.status,
            stdout.trim(),
            run.stderr.trim()
        );
    }
    let first_ok = run.seen.context("no 200 and no failure: unreachable")?;
    let report: Value = serde_json::from_str(&stdout)
        .with_context(|| format!("`hapctl domain add --json` printed no JSON report: {stdout}"))?;
    if report["outcome"] != "applied" {
        bail!(
            "`hapctl domain add {host}`: outcome {}, not applied: {stdout}",
            report["outcome"]
        );
    }
    let reloads_after = edge.try_show_proc()?.master.reloads;
    Ok(Op {
        host: host.to_string(),
        first_ok_ms: first_ok.as_secs_f64() * 1000.0,
        ended_ms: exit.as_secs_f64() * 1000.0,
        checks: edge.check_runs() - checks_before,
        reloads: reloads_after as i64 - reloads_before as i64,
        probes: run.probes,
        applied: Applied::parse(&report, spawned_unix_ms),
    })
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}
