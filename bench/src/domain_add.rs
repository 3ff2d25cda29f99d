//! domain-add: end-to-end `hapctl domain add`, from spawning the command to the first request
//! with the new Host answering 200 from the backend through HAProxy, on an edge that already
//! has N domains.

use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::fixture::{self, Servers};
use crate::harness::{Edge, HttpBackend};
use crate::stats::{bytes, ms, Summary};
use crate::sys;
use crate::{Ctx, Report, Table, Target};

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
/// The apply steps reported by `--json`, in order.
const STEPS: [&str; 5] = ["render", "snapshot", "write", "check", "reload"];

/// One measured `hapctl domain add`.
struct Op {
    host: String,
    /// Spawn → first 200 from the backend with the new Host.
    first_ok_ms: f64,
    /// Spawn → the command's exit.
    exit_ms: f64,
    /// The apply's own duration and steps, from `--json`.
    apply_ms: f64,
    /// Spawn → the apply's start (`started_at_ms` of the report; 1 ms resolution): process
    /// start, settings, templates, database open, lock, recovery sweep, the change itself.
    before_apply_ms: f64,
    steps: Vec<(String, f64)>,
    /// `haproxy -c` runs seen by the counting wrapper during the operation.
    checks: usize,
    /// Master reloads count after − before.
    reloads: i64,
    /// What the apply report itself says.
    report_checks: i64,
    report_reloads: i64,
    /// The apply's `kind: detail` for each reload it made.
    reload_reasons: Vec<String>,
    probes: u32,
}

impl Op {
    fn step(&self, name: &str) -> Option<f64> {
        self.steps.iter().find(|(n, _)| n == name).map(|(_, d)| *d)
    }
}

/// Operations per size: `--runs`, else 15 (7 from 10,000 domains up).
fn runs_for(ctx: &Ctx, n: usize) -> usize {
    ctx.runs.unwrap_or(if n >= 10_000 { 7 } else { 15 }).max(1)
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let backend = HttpBackend::start(BODY)?;
    let addr = backend.addr();
    let backend_addr = addr.as_str();

    let mut latency = Table::new(
        "domain-add: spawn of `hapctl domain add` → first 200 through HAProxy, ms",
        &[
            "domains",
            "ops",
            "median",
            "p95",
            "min",
            "max",
            "cmd exit (median)",
            "haproxy -c/op",
            "reloads/op",
        ],
    );
    let mut split = Table::new(
        "domain-add: where the time goes (medians, ms; steps from `hapctl domain add --json`)",
        &[
            "domains",
            "before apply",
            "render",
            "snapshot",
            "write",
            "check",
            "reload",
            "apply total",
            "after apply",
            "cmd exit",
            "first 200",
        ],
    );
    let mut setup = Table::new(
        "domain-add: the edge under test",
        &[
            "domains",
            "servers",
            "haproxy.cfg",
            "bulk insert ms",
            "haproxy start ms",
            "load_state ms (median of 5)",
        ],
    );
    let mut raw = Table::new(
        format!("domain-add: HAProxy alone on the same live set, no hapctl command around it (median of {RAW_RUNS}, ms)"),
        &[
            "domains",
            "haproxy -c",
            "reload (master socket, confirmed)",
            "sum",
            "hapctl domain add, first 200",
        ],
    );
    let mut results = Vec::new();
    let mut target_ms = Target {
        goal: format!("domain add at {TARGET_DOMAINS} domains under {TARGET_MS} ms (median, spawn → first 200)"),
        met: None,
        detail: format!("{TARGET_DOMAINS} not among --sizes"),
    };
    let mut target_counts = Target {
        goal: "0 `haproxy -c` and 0 reloads in the apply of an add, unless the apply records why it reloaded (the first domain of a kind, a full kind)".into(),
        met: None,
        detail: String::new(),
    };
    let mut count_faults = Vec::new();

    for &n in &ctx.sizes {
        let k = runs_for(ctx, n);
        eprintln!("domain-add: {n} domains, {k} operations…");
        let m = measure(&hapctl, n, k, backend_addr)?;
        let first =
            Summary::of(&m.ops.iter().map(|o| o.first_ok_ms).collect::<Vec<_>>()).expect("k >= 1");
        let exit =
            Summary::of(&m.ops.iter().map(|o| o.exit_ms).collect::<Vec<_>>()).expect("k >= 1");
        let apply =
            Summary::of(&m.ops.iter().map(|o| o.apply_ms).collect::<Vec<_>>()).expect("k >= 1");
        let before = Summary::of(&m.ops.iter().map(|o| o.before_apply_ms).collect::<Vec<_>>())
            .expect("k >= 1");
        let after = Summary::of(
            &m.ops
                .iter()
                .map(|o| o.exit_ms - o.before_apply_ms - o.apply_ms)
                .collect::<Vec<_>>(),
        )
        .expect("k >= 1");
        let checks_per_op = m.ops.iter().map(|o| o.checks).sum::<usize>() as f64 / k as f64;
        let reloads_per_op = m.ops.iter().map(|o| o.reloads).sum::<i64>() as f64 / k as f64;
        for o in &m.ops {
            let explained = o.reload_reasons.len() as i64 == o.reloads;
            if !explained || (o.reloads == 0 && o.report_checks != 0) {
                count_faults.push(format!(
                    "{n} domains, {}: {} haproxy -c in the apply, {} reload(s), reasons {:?}",
                    o.host, o.report_checks, o.reloads, o.reload_reasons
                ));
            }
        }
        latency.row(vec![
            n.to_string(),
            k.to_string(),
            ms(first.median),
            ms(first.p95),
            ms(first.min),
            ms(first.max),
            ms(exit.median),
            format!("{checks_per_op:.2}"),
            format!("{reloads_per_op:.2}"),
        ]);
        let step_medians: Vec<Option<Summary>> = STEPS
            .iter()
            .map(|s| Summary::of(&m.ops.iter().filter_map(|o| o.step(s)).collect::<Vec<_>>()))
            .collect();
        let mut row = vec![n.to_string(), ms(before.median)];
        row.extend(
            step_medians
                .iter()
                .map(|s| s.map(|s| ms(s.median)).unwrap_or_else(|| "-".into())),
        );
        row.extend([
            ms(apply.median),
            ms(after.median),
            ms(exit.median),
            ms(first.median),
        ]);
        split.row(row);
        setup.row(vec![
            n.to_string(),
            m.servers.to_string(),
            bytes(m.config_bytes),
            format!("{:.0}", m.insert_ms),
            format!("{:.0}", m.start_ms),
            ms(m.load_state.median),
        ]);

        raw.row(vec![
            n.to_string(),
            ms(m.raw_check.median),
            ms(m.raw_reload.median),
            ms(m.raw_check.median + m.raw_reload.median),
            ms(first.median),
        ]);
        if n == TARGET_DOMAINS {
            target_ms.met = Some(first.median < TARGET_MS);
            let steps: Vec<String> = STEPS
                .iter()
                .zip(&step_medians)
                .filter_map(|(name, s)| s.map(|s| format!("{name} {}", ms(s.median))))
                .collect();
            target_ms.detail = format!(
                "median {} ms (min {}, max {}); medians: before the apply {} ms, apply steps {}, after the apply {} ms; command exit {} ms",
                ms(first.median),
                ms(first.min),
                ms(first.max),
                ms(before.median),
                steps.join(", "),
                ms(after.median),
                ms(exit.median)
            );
        }
        results.push(json!({
            "domains": n,
            "servers": m.servers,
            "haproxy_cfg_bytes": m.config_bytes,
            "bulk_insert_ms": m.insert_ms,
            "haproxy_start_ms": m.start_ms,
            "first_ok_ms": first.to_json(),
            "exit_ms": exit.to_json(),
            "apply_ms": apply.to_json(),
            "before_apply_ms": before.to_json(),
            "after_apply_ms": after.to_json(),
            "load_state_ms": m.load_state.to_json(),
            "haproxy_alone": {
                "check_ms": m.raw_check.to_json(),
                "reload_ms": m.raw_reload.to_json(),
            },
            "steps_ms": STEPS.iter().zip(&step_medians)
                .map(|(name, s)| (name.to_string(), s.map(Summary::to_json).unwrap_or(Value::Null)))
                .collect::<serde_json::Map<_, _>>(),
            "haproxy_c_per_op": checks_per_op,
            "reloads_per_op": reloads_per_op,
            "ops": m.ops.iter().map(|o| json!({
                "host": o.host,
                "first_ok_ms": o.first_ok_ms,
                "exit_ms": o.exit_ms,
                "apply_ms": o.apply_ms,
                "before_apply_ms": o.before_apply_ms,
                "steps_ms": o.steps.iter().map(|(n, d)| (n.clone(), json!(d))).collect::<serde_json::Map<_, _>>(),
                "haproxy_c": o.checks,
                "reloads": o.reloads,
                "report_checks": o.report_checks,
                "report_reloads": o.report_reloads,
                "reload_reasons": o.reload_reasons,
                "probes": o.probes,
            })).collect::<Vec<_>>(),
        }));
    }
    target_counts.met = Some(count_faults.is_empty());
    target_counts.detail = if count_faults.is_empty() {
        "every add: 0 haproxy -c in its apply and 0 reloads (master `show proc`), or as many reloads as recorded reasons".into()
    } else {
        count_faults.join("; ")
    };

    Ok(Report {
        tables: vec![setup, latency, split, raw],
        targets: vec![target_ms, target_counts],
        notes: vec![
            format!(
                "each size runs on a fresh state dir: `hapctl init`, N fixture domains (and {} blocks) written to the \
                 database in one transaction, `hapctl haproxy start`; every fixture server points at one in-process \
                 backend on {backend_addr} with health checks off (20,000 checked servers would flood that one backend). \
                 The added domain is a plain `hapctl domain add new-I.example.com --server {backend_addr} --json` \
                 (checks on, the CLI default).",
                fixture::BLOCKS
            ),
            "probe: a fresh connection with the new Host every ~2 ms from spawn until a 200 with the backend's body. \
             Before each operation the harness waits until the master has no old worker left."
                .into(),
            "HAProxy alone: after the measured adds, `haproxy -c` (the real binary) on the live files, and a reload \
             through the master socket with hapctl's library (`Master::reload`: `reload`, then `show proc` every 10 ms \
             until the new worker shows) -- the floor any apply with one check and one reload pays."
                .into(),
            "before apply = spawn → the apply's start (the report's started_at_ms, 1 ms resolution): process start, \
             settings, templates, database open, lock, recovery sweep, the change. render = load the state from SQLite \
             + render + compare with the live files (load_state alone, in-process on the same database: see the first \
             table). reload = `reload` on the master socket until `show proc` shows the new worker (polled every 10 ms). \
             after apply = command exit − before − apply: commit, history row, known-good promotion, exit."
                .into(),
        ],
        json: json!({ "backend": backend_addr, "sizes": results }),
    })
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
    ops: Vec<Op>,
}

fn measure(
    hapctl: &std::path::Path,
    n: usize,
    k: usize,
    backend: &str,
) -> anyhow::Result<Measured> {
    let mut edge = Edge::init(hapctl, &format!("domain-add-{n}"))?;
    let state = fixture::state(n, Servers::At(backend));
    let servers = state.domains.values().map(|b| b.servers().len()).sum();
    let t = Instant::now();
    edge.load(&state)?;
    let insert_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    edge.start()?;
    let start_ms = t.elapsed().as_secs_f64() * 1000.0;
    let load_state = edge.time_load_state(5)?;
    let config_bytes = std::fs::metadata(&edge.settings.paths.config)
        .map(|m| m.len() as usize)
        .unwrap_or(0);

    // The fixture must route before anything is measured.
    let probe_host = fixture::domain(0).to_string();
    wait_for_backend(&edge, &probe_host, Duration::from_secs(10))
        .context("the fixture's first domain never answered 200 through HAProxy")?;

    let mut ops = Vec::with_capacity(k);
    for i in 0..k {
        if !edge.wait_old_workers_gone(Duration::from_secs(10))? {
            eprintln!("  (old workers still draining after 10 s; measuring anyway)");
        }
        let op = add_once(&edge, &format!("new-{i}.example.com"), backend)?;
        eprintln!(
            "  {}: first 200 after {} ms, exit {} ms (apply {} ms), haproxy -c {}, reloads {}",
            op.host,
            ms(op.first_ok_ms),
            ms(op.exit_ms),
            ms(op.apply_ms),
            op.checks,
            op.reloads
        );
        ops.push(op);
    }

    // The same two HAProxy operations without hapctl around them, on the final live set.
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
    Ok(Measured {
        servers,
        raw_check: Summary::of(&raw_check).expect("RAW_RUNS > 0"),
        raw_reload: Summary::of(&raw_reload).expect("RAW_RUNS > 0"),
        load_state,
        config_bytes,
        insert_ms,
        start_ms,
        ops,
    })
    // `edge` drops here: HAProxy stopped, temp dir removed.
}

fn wait_for_backend(edge: &Edge, host: &str, bound: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + bound;
    loop {
        let last = edge.get(host);
        if matches!(&last, Ok((200, body)) if body == BODY) {
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
    let reloads_before = edge.show_proc()?.master.reloads;

    let cmd = edge.command(&["domain", "add", host, "--server", backend, "--json"]);
    let spawned_unix_ms = unix_ms();
    let what = format!("`hapctl domain add {host}` answering 200");
    let run = sys::spawn_and_observe(
        cmd,
        POLL_EVERY,
        OP_TIMEOUT,
        &what,
        || matches!(edge.get(host), Ok((200, body)) if body == BODY),
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
    let steps = report["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .filter_map(|s| Some((s["name"].as_str()?.to_string(), s["duration"].as_f64()?)))
                .collect()
        })
        .unwrap_or_default();

    let reloads_after = edge.show_proc()?.master.reloads;
    Ok(Op {
        host: host.to_string(),
        first_ok_ms: first_ok.as_secs_f64() * 1000.0,
        exit_ms: exit.as_secs_f64() * 1000.0,
        apply_ms: report["duration"].as_f64().unwrap_or(f64::NAN),
        before_apply_ms: report["started_at_ms"]
            .as_f64()
            .map(|t| t - spawned_unix_ms)
            .unwrap_or(f64::NAN),
        steps,
        checks: edge.check_runs() - checks_before,
        reloads: reloads_after as i64 - reloads_before as i64,
        report_checks: report["checks"].as_i64().unwrap_or(-1),
        report_reloads: report["reloads"].as_i64().unwrap_or(-1),
        reload_reasons: report["reload_reasons"]
            .as_array()
            .map(|reasons| {
                reasons
                    .iter()
                    .map(|r| {
                        format!(
                            "{}: {}",
                            r["kind"].as_str().unwrap_or("?"),
                            r["detail"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        probes: run.probes,
    })
}

fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}
