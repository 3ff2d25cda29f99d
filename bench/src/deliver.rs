//! deliver: `hapctl deliver V` and `hapctl rollback`, alternating, on an edge with demo-app
//! (exec runner, ready delay 0). Each operation is timed from spawning the command to the first
//! request through HAProxy answered by the new version, and split by the command's own steps
//! (`--json`: start, ready, apply, retire, with the apply's render/snapshot/write/check/reload).
//!
//! Every delivery brings a new version (1.1.1, 1.1.2, …), so it starts a new process, waits
//! for it, and removes the one replaced by the delivery before; every rollback goes back to
//! 1.0.0, which still runs (the retention rule), so it starts nothing.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use testkit::DemoEdge;

use crate::app_edge::{self, Delivered, HOST};
use crate::harness::BenchEdge;
use crate::stats::{ms, Summary};
use crate::sys;
use crate::{Ctx, Report, Table, Target};

const FIRST: &str = "1.0.0";
const TARGET_TOTAL_MS: f64 = 1000.0;
const TARGET_OWN_MS: f64 = 50.0;
/// Pause between two probe requests.
const POLL_EVERY: Duration = Duration::from_millis(2);
/// Bound on one operation, from spawn to the new version served.
const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// HAProxy alone on the final live set, for the floor.
const RAW_RUNS: usize = 5;
/// The delivery steps and the apply steps, in the order they run.
const STEPS: [&str; 4] = ["start", "ready", "apply", "retire"];
const APPLY_STEPS: [&str; 5] = ["render", "snapshot", "write", "check", "reload"];

/// One measured command.
struct Op {
    kind: &'static str,
    to: String,
    /// Spawn → first `GET /` through the edge answered by the new version.
    served_ms: f64,
    /// Spawn → exit.
    exit_ms: f64,
    /// The report's own total (from after the delivery lock to the end of the last step).
    total_ms: f64,
    steps: Vec<(String, f64)>,
    apply_steps: Vec<(String, f64)>,
    /// The apply's `duration` (render → reload confirmed; commit and promotion come after).
    apply_ms: f64,
    checks: usize,
    reloads: i64,
    probes: u32,
}

impl Op {
    fn step(&self, name: &str) -> f64 {
        self.steps
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, d)| *d)
    }

    fn apply_step(&self, name: &str) -> f64 {
        self.apply_steps
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, d)| *d)
    }

    /// Everything but waiting: exit − readiness wait − `haproxy -c` − reload.
    fn own_ms(&self) -> f64 {
        self.exit_ms - self.step("ready") - self.apply_step("check") - self.apply_step("reload")
    }

    /// The command outside its report: process start, settings, database, lock, JSON, exit.
    fn outside_ms(&self) -> f64 {
        self.exit_ms - self.total_ms
    }

    /// Inside the apply step but outside the apply's own clock: lock, the change itself,
    /// database commit, history row, known-good promotion.
    fn apply_other_ms(&self) -> f64 {
        self.step("apply") - self.apply_ms
    }
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let demo = ctx.demo_app_bin()?;
    let pairs = ctx.deliveries;
    eprintln!("deliver: {pairs} deliver/rollback pairs…");
    let app = app_edge::start(&hapctl, &demo, FIRST)?;
    let ops = deliveries(&app, pairs)?;
    let alone = haproxy_alone(&app)?;
    let generations_left = app.generation_pids().len();
    drop(app);
    Ok(report(pairs, &ops, &alone, generations_left))
}

/// `pairs` deliveries of a new version, each followed by a rollback.
fn deliveries(app: &DemoEdge, pairs: usize) -> anyhow::Result<Vec<Op>> {
    let mut ops = Vec::with_capacity(pairs * 2);
    for i in 1..=pairs {
        for kind in ["deliver", "rollback"] {
            if !app.wait_old_workers_gone(Duration::from_secs(10))? {
                eprintln!("  (old workers still draining after 10 s; measuring anyway)");
            }
            let version = if kind == "deliver" {
                format!("1.1.{i}")
            } else {
                FIRST.to_string()
            };
            let op = once(app, kind, &version)?;
            eprintln!(
                "  {kind} {version}: served after {} ms, exit {} ms (ready {}, check {}, reload {}, own {})",
                ms(op.served_ms),
                ms(op.exit_ms),
                ms(op.step("ready")),
                ms(op.apply_step("check")),
                ms(op.apply_step("reload")),
                ms(op.own_ms()),
            );
            ops.push(op);
        }
    }
    Ok(ops)
}

/// HAProxy alone on the same live set: `haproxy -c` and a reload through the master socket.
struct HaproxyAlone {
    check: Summary,
    reload: Summary,
}

/// The floor of any cutover through the safe apply, [`RAW_RUNS`] times each.
fn haproxy_alone(app: &DemoEdge) -> anyhow::Result<HaproxyAlone> {
    let mut check = Vec::new();
    let mut reload = Vec::new();
    for _ in 0..RAW_RUNS {
        check.push(app.time_haproxy_check()?);
        app.wait_old_workers_gone(Duration::from_secs(10))?;
        let t = Instant::now();
        app.master()
            .reload(Duration::from_secs(60))
            .context("reload through the master socket")?;
        reload.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(HaproxyAlone {
        check: Summary::of(&check).expect("RAW_RUNS > 0"),
        reload: Summary::of(&reload).expect("RAW_RUNS > 0"),
    })
}

fn summary(set: &[&Op], f: &dyn Fn(&Op) -> f64) -> Summary {
    Summary::of(&set.iter().map(|o| f(o)).collect::<Vec<_>>()).expect("non-empty")
}

fn report(pairs: usize, ops: &[Op], alone: &HaproxyAlone, generations_left: usize) -> Report {
    let groups: [(&str, Vec<&Op>); 3] = [
        (
            "deliver",
            ops.iter().filter(|o| o.kind == "deliver").collect(),
        ),
        (
            "rollback",
            ops.iter().filter(|o| o.kind == "rollback").collect(),
        ),
        ("all", ops.iter().collect()),
    ];
    let mut latency = Table::new(
        "deliver: spawn of the command → first request through HAProxy answered by the new version, ms",
        &[
            "command",
            "ops",
            "median",
            "min",
            "max",
            "p95",
            "cmd exit (median)",
            "own work (median)",
            "own work (max)",
            "haproxy -c/op",
            "reloads/op",
        ],
    );
    let mut split = Table::new(
        "deliver: where the time goes (medians, ms; steps from `--json`; own = exit − ready − check − reload)",
        &[
            "command",
            "outside report",
            "start",
            "ready",
            "render",
            "snapshot",
            "write",
            "check",
            "reload",
            "apply other",
            "retire",
            "cmd exit",
            "own work",
        ],
    );
    let mut groups_json = serde_json::Map::new();
    for (name, set) in &groups {
        latency.row(latency_row(name, set));
        split.row(split_row(name, set));
        groups_json.insert(name.to_string(), group_json(set));
    }
    let mut raw = Table::new(
        format!("deliver: HAProxy alone on the same live set, no hapctl around it (median of {RAW_RUNS}, ms)"),
        &["haproxy -c", "reload (master socket, confirmed)", "sum"],
    );
    raw.row(vec![
        ms(alone.check.median),
        ms(alone.reload.median),
        ms(alone.check.median + alone.reload.median),
    ]);
    Report {
        tables: vec![latency, split, raw],
        targets: targets(&groups[0].1, &groups[2].1),
        notes: notes(pairs, ops, generations_left),
        json: json!({
            "pairs": pairs,
            "groups": groups_json,
            "haproxy_alone": {"check_ms": alone.check.to_json(), "reload_ms": alone.reload.to_json()},
            "ops": ops.iter().map(op_json).collect::<Vec<_>>(),
        }),
    }
}

/// haproxy -c runs and reloads per operation of `set`.
fn per_op(set: &[&Op]) -> (f64, f64) {
    let checks = set.iter().map(|o| o.checks).sum::<usize>() as f64 / set.len() as f64;
    let reloads = set.iter().map(|o| o.reloads).sum::<i64>() as f64 / set.len() as f64;
    (checks, reloads)
}

fn latency_row(name: &str, set: &[&Op]) -> Vec<String> {
    let served = summary(set, &|o| o.served_ms);
    let exit = summary(set, &|o| o.exit_ms);
    let own = summary(set, &|o| o.own_ms());
    let (checks, reloads) = per_op(set);
    vec![
        name.to_string(),
        set.len().to_string(),
        ms(served.median),
        ms(served.min),
        ms(served.max),
        ms(served.p95),
        ms(exit.median),
        ms(own.median),
        ms(own.max),
        format!("{checks:.2}"),
        format!("{reloads:.2}"),
    ]
}

fn split_row(name: &str, set: &[&Op]) -> Vec<String> {
    let med = |f: &dyn Fn(&Op) -> f64| summary(set, f).median;
    vec![
        name.to_string(),
        ms(med(&|o| o.outside_ms())),
        ms(med(&|o| o.step("start"))),
        ms(med(&|o| o.step("ready"))),
        ms(med(&|o| o.apply_step("render"))),
        ms(med(&|o| o.apply_step("snapshot"))),
        ms(med(&|o| o.apply_step("write"))),
        ms(med(&|o| o.apply_step("check"))),
        ms(med(&|o| o.apply_step("reload"))),
        ms(med(&|o| o.apply_other_ms())),
        ms(med(&|o| o.step("retire"))),
        ms(med(&|o| o.exit_ms)),
        ms(med(&|o| o.own_ms())),
    ]
}

fn group_json(set: &[&Op]) -> Value {
    let mut steps_json = serde_json::Map::new();
    for s in STEPS {
        steps_json.insert(s.into(), summary(set, &|o| o.step(s)).to_json());
    }
    for s in APPLY_STEPS {
        steps_json.insert(
            format!("apply.{s}"),
            summary(set, &|o| o.apply_step(s)).to_json(),
        );
    }
    steps_json.insert(
        "outside_report".into(),
        summary(set, &|o| o.outside_ms()).to_json(),
    );
    steps_json.insert(
        "apply_other".into(),
        summary(set, &|o| o.apply_other_ms()).to_json(),
    );
    let (checks, reloads) = per_op(set);
    json!({
        "ops": set.len(),
        "served_ms": summary(set, &|o| o.served_ms).to_json(),
        "exit_ms": summary(set, &|o| o.exit_ms).to_json(),
        "own_work_ms": summary(set, &|o| o.own_ms()).to_json(),
        "steps_ms": steps_json,
        "haproxy_c_per_op": checks,
        "reloads_per_op": reloads,
    })
}

fn op_json(o: &Op) -> Value {
    json!({
        "kind": o.kind,
        "to": o.to,
        "served_ms": o.served_ms,
        "exit_ms": o.exit_ms,
        "total_ms": o.total_ms,
        "own_work_ms": o.own_ms(),
        "steps_ms": o.steps.iter().map(|(n, d)| (n.clone(), json!(d))).collect::<serde_json::Map<_, _>>(),
        "apply_steps_ms": o.apply_steps.iter().map(|(n, d)| (n.clone(), json!(d))).collect::<serde_json::Map<_, _>>(),
        "apply_ms": o.apply_ms,
        "haproxy_c": o.checks,
        "reloads": o.reloads,
        "probes": o.probes,
    })
}

fn targets(deliveries: &[&Op], all: &[&Op]) -> Vec<Target> {
    let served = summary(all, &|o| o.served_ms);
    let own = summary(all, &|o| o.own_ms());
    let deliver_served = summary(deliveries, &|o| o.served_ms);
    vec![
        Target {
            goal: format!("deliver/rollback under {TARGET_TOTAL_MS} ms, spawn → new version served (median)"),
            met: Some(served.median < TARGET_TOTAL_MS),
            detail: format!(
                "all {} ops: median {} ms, min {}, max {}; deliveries alone (new process) median {} ms, max {}",
                all.len(),
                ms(served.median),
                ms(served.min),
                ms(served.max),
                ms(deliver_served.median),
                ms(deliver_served.max)
            ),
        },
        Target {
            goal: format!("hapctl's own work under {TARGET_OWN_MS} ms (median; exit − ready − haproxy -c − reload)"),
            met: Some(own.median < TARGET_OWN_MS),
            detail: format!(
                "median {} ms, min {}, max {}",
                ms(own.median),
                ms(own.min),
                ms(own.max)
            ),
        },
    ]
}

fn notes(pairs: usize, ops: &[Op], generations_left: usize) -> Vec<String> {
    let mut notes = vec![
        format!(
            "edge: `hapctl init`, an [[app]] `shop` (exec runner `run-app.sh {{version}} {{port}}` → the release demo-app \
             with --ready-delay-ms 0; readiness /ready, 3 consecutive answers (the default), version check /version), \
             `hapctl haproxy start`, `domain add {HOST} --app shop`, `deliver {FIRST}`. Then {pairs} times: \
             `hapctl deliver 1.1.I --json` (a new process), `hapctl rollback --json` (back to {FIRST}, still running)."
        ),
        "probe: GET / with Host shop.example.com on a fresh connection every ~2 ms from spawn until the body is the \
         new version. Before each command the bench waits until the master has no old worker left."
            .into(),
        "outside report = cmd exit − the report's total_ms (process start, settings, database open, the delivery \
         lock, the delivery's history row — written after total_ms is taken —, printing, exit); apply other = the \
         apply step − the apply's own duration (apply lock, the change, commit, apply history row, known-good \
         promotion)."
            .into(),
        format!("generation processes running at the end (before the bench killed them): {generations_left}"),
    ];
    let counts_ok = ops.iter().all(|o| o.checks == 1 && o.reloads == 1);
    if !counts_ok {
        notes.push(format!(
            "haproxy -c / reload counts per op (expected 1 / 1): {:?}",
            ops.iter()
                .map(|o| (o.kind, o.to.clone(), o.checks, o.reloads))
                .collect::<Vec<_>>()
        ));
    }
    notes
}

/// Runs `hapctl deliver VERSION --json` or `hapctl rollback --json` and probes the edge until
/// it serves `version`.
fn once(app: &DemoEdge, kind: &'static str, version: &str) -> anyhow::Result<Op> {
    let checks_before = app.check_runs();
    let reloads_before = app.try_show_proc()?.master.reloads;
    let args: Vec<&str> = if kind == "deliver" {
        vec!["deliver", version, "--json"]
    } else {
        vec!["rollback", "--json"]
    };
    let what = format!("`hapctl {kind}` serving {version}");
    let run = sys::spawn_and_observe(app.command(&args), POLL_EVERY, OP_TIMEOUT, &what, || {
        app.served().as_deref() == Some(version)
    })?;
    let (exit, stdout) = (run.exit, run.stdout);
    if !run.status.success() {
        bail!(
            "`hapctl {}` failed ({}): {} {}; generation log: {}",
            args.join(" "),
            run.status,
            stdout.trim(),
            run.stderr.trim(),
            app.generation_log(version)
        );
    }
    let served = run
        .seen
        .context("no new version and no failure: unreachable")?;
    let report: Value = serde_json::from_str(&stdout)
        .with_context(|| format!("`hapctl {kind} --json` printed no JSON report: {stdout}"))?;
    if report["outcome"] != "delivered" {
        bail!("`hapctl {kind}`: outcome {}: {stdout}", report["outcome"]);
    }
    let pairs = |list: &Value, value: &str| -> Vec<(String, f64)> {
        list.as_array()
            .map(|steps| {
                steps
                    .iter()
                    .filter_map(|s| Some((s["name"].as_str()?.to_string(), s[value].as_f64()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let reloads_after = app.try_show_proc()?.master.reloads;
    Ok(Op {
        kind,
        to: version.to_string(),
        served_ms: served.as_secs_f64() * 1000.0,
        exit_ms: exit.as_secs_f64() * 1000.0,
        total_ms: report["total_ms"].as_f64().unwrap_or(f64::NAN),
        steps: pairs(&report["steps"], "ms"),
        apply_steps: pairs(&report["apply"]["steps"], "duration"),
        apply_ms: report["apply"]["duration"].as_f64().unwrap_or(f64::NAN),
        checks: app.check_runs() - checks_before,
        reloads: reloads_after as i64 - reloads_before as i64,
        probes: run.probes,
    })
}
