//! cutovers: consecutive cutovers proven from outside by `hapctl prove --cycle V --json FILE`
//! (deliver V, then rollback, each under a short-request probe and long streams), on an edge
//! with demo-app. Each cycle delivers a new version, so every delivery starts a process and
//! retires the one before; every rollback goes back to the first version.

use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::app_edge::AppEdge;
use crate::stats::{ms, Summary};
use crate::sys;
use crate::{Ctx, Report, Table, Target};

const FIRST: &str = "1.0.0";
/// Bound on one `hapctl prove --cycle` (two proofs of ~6 s each with the defaults).
const CYCLE_TIMEOUT: Duration = Duration::from_secs(300);

/// One proven cutover, from the report.
struct Proof {
    label: String,
    passed: bool,
    command_ms: f64,
    proof_ms: f64,
    exit_code: Option<i64>,
    requests: u64,
    failed: u64,
    by_cause: String,
    streams: usize,
    intact: usize,
    master_before: Option<i64>,
    master_after: Option<i64>,
    new_workers: usize,
    /// Command start → the probe's first answer from the new version.
    switch_ms: Option<f64>,
    failed_checks: Vec<String>,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let demo = ctx.demo_app_bin()?;
    let cycles = ctx.cycles;
    let app = AppEdge::start(&hapctl, &demo, "cutovers", FIRST)?;
    let master_start = app.show_proc()?.master.pid;
    let reloads_start = app.show_proc()?.master.reloads;
    let checks_start = app.check_runs();

    let mut proofs = Vec::new();
    let mut not_run = Vec::new();
    let mut cycle_exit = Vec::new();
    for i in 1..=cycles {
        let version = format!("2.0.{i}");
        let file = app.work_dir().join(format!("proof-{i}.json"));
        let file_text = file.display().to_string();
        let args = ["prove", "--cycle", &version, "--json", &file_text];
        let out = sys::run_bounded(&mut app.command(&args), CYCLE_TIMEOUT)?;
        cycle_exit.push(out.status.code());
        let text = std::fs::read_to_string(&file).with_context(|| {
            format!(
                "`hapctl prove --cycle {version}` wrote no JSON report: {}",
                sys::describe(&out)
            )
        })?;
        let report: Value = serde_json::from_str(&text)
            .with_context(|| format!("the report of cycle {i} is not JSON"))?;
        for p in report["proofs"].as_array().into_iter().flatten() {
            let proof = read_proof(p);
            eprintln!(
                "  cycle {i:>2} {:<16} {} command {} ms, probe {}/{} failed, streams {}/{} intact, master {:?}→{:?}",
                proof.label,
                if proof.passed { "pass" } else { "FAIL" },
                ms(proof.command_ms),
                proof.failed,
                proof.requests,
                proof.intact,
                proof.streams,
                proof.master_before,
                proof.master_after
            );
            proofs.push(proof);
        }
        for n in report["not_run"].as_array().into_iter().flatten() {
            not_run.push(format!(
                "cycle {i}: {} not run: {}",
                n["label"].as_str().unwrap_or("?"),
                n["reason"].as_str().unwrap_or("?")
            ));
        }
    }
    let master_end = app.show_proc()?.master.pid;
    let reloads = app.show_proc()?.master.reloads as i64 - reloads_start as i64;
    let checks = app.check_runs() - checks_start;
    let generations_left = app.generation_pids().len();
    drop(app);

    if proofs.is_empty() {
        bail!("no proof was reported");
    }
    let total = proofs.len();
    let passed = proofs.iter().filter(|p| p.passed).count();
    let requests: u64 = proofs.iter().map(|p| p.requests).sum();
    let failed: u64 = proofs.iter().map(|p| p.failed).sum();
    let streams: usize = proofs.iter().map(|p| p.streams).sum();
    let intact: usize = proofs.iter().map(|p| p.intact).sum();
    let pid_changes = proofs
        .iter()
        .filter(|p| p.master_before.is_none() || p.master_before != p.master_after)
        .count()
        + usize::from(master_start != master_end);
    let command =
        Summary::of(&proofs.iter().map(|p| p.command_ms).collect::<Vec<_>>()).expect("> 0");
    let proof_ms =
        Summary::of(&proofs.iter().map(|p| p.proof_ms).collect::<Vec<_>>()).expect("> 0");
    let switches: Vec<f64> = proofs.iter().filter_map(|p| p.switch_ms).collect();
    let switch = Summary::of(&switches);
    let intact_pct = 100.0 * intact as f64 / streams.max(1) as f64;

    let mut totals = Table::new(
        format!("cutovers: {total} proven cutovers ({cycles} × `hapctl prove --cycle V`), totals"),
        &[
            "cutovers",
            "all checks passed",
            "probe requests",
            "failed",
            "streams intact",
            "master PID changes",
            "new worker each",
            "reloads",
            "haproxy -c",
        ],
    );
    totals.row(vec![
        total.to_string(),
        format!("{passed}/{total}"),
        requests.to_string(),
        failed.to_string(),
        format!("{intact}/{streams} ({intact_pct:.0} %)"),
        pid_changes.to_string(),
        format!(
            "{}/{total}",
            proofs.iter().filter(|p| p.new_workers > 0).count()
        ),
        reloads.to_string(),
        checks.to_string(),
    ]);
    let mut durations = Table::new(
        "cutovers: durations (ms)",
        &["measure", "median", "p95", "min", "max"],
    );
    let mut row = |name: &str, s: Summary| {
        durations.row(vec![
            name.to_string(),
            ms(s.median),
            ms(s.p95),
            ms(s.min),
            ms(s.max),
        ])
    };
    row("cutover command (deliver / rollback), all", command);
    for kind in ["deliver", "rollback"] {
        if let Some(s) = Summary::of(
            &proofs
                .iter()
                .filter(|p| p.label.starts_with(kind))
                .map(|p| p.command_ms)
                .collect::<Vec<_>>(),
        ) {
            row(&format!("cutover command, {kind}"), s);
        }
    }
    if let Some(s) = switch {
        row("command start → probe sees the new version", s);
    }
    row("whole proof (streams, probe, settle, checks)", proof_ms);

    let failed_checks: Vec<String> = proofs
        .iter()
        .filter(|p| !p.passed)
        .map(|p| format!("{}: {}", p.label, p.failed_checks.join(", ")))
        .collect();
    let targets = vec![
        Target {
            goal: "0 failed probe requests".into(),
            met: Some(failed == 0),
            detail: format!(
                "{failed} of {requests} failed{}",
                if failed > 0 {
                    format!(
                        " ({})",
                        proofs
                            .iter()
                            .filter(|p| p.failed > 0)
                            .map(|p| format!("{}: {}", p.label, p.by_cause))
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                } else {
                    String::new()
                }
            ),
        },
        Target {
            goal: "100 % of long streams intact".into(),
            met: Some(intact == streams && streams > 0),
            detail: format!("{intact}/{streams}"),
        },
        Target {
            goal: "0 master PID changes".into(),
            met: Some(pid_changes == 0),
            detail: format!("master {master_start} at the start, {master_end} at the end"),
        },
        Target {
            goal: format!("{} cutovers proven, every check passed", cycles * 2),
            met: Some(passed == total && total == cycles * 2 && not_run.is_empty()),
            detail: if failed_checks.is_empty() && not_run.is_empty() {
                format!("{passed}/{total}")
            } else {
                format!(
                    "{passed}/{total}; {}",
                    [failed_checks.clone(), not_run.clone()].concat().join("; ")
                )
            },
        },
    ];
    let notes = vec![
        format!(
            "edge: as in the deliver section (demo-app, exec runner, ready delay 0), first version {FIRST}. Then {cycles} times \
             `hapctl prove --cycle 2.0.I --json FILE` with prove's defaults: 2 long streams of 50 lines every 100 ms \
             opened before each command, 50 short requests/s (a new connection each), 1 s settle after the command."
        ),
        "cutover command = the `run.duration_ms` of each proof (the deliver or rollback command prove ran); \
         probe sees the new version = the first probe switch after the command started."
            .into(),
        format!("prove exit codes per cycle: {cycle_exit:?}; generation processes left at the end (killed by the bench): {generations_left}"),
    ];
    Ok(Report {
        tables: vec![totals, durations],
        targets,
        notes,
        json: json!({
            "cycles": cycles,
            "cutovers": total,
            "passed": passed,
            "probe_requests": requests,
            "probe_failed": failed,
            "streams": streams,
            "streams_intact": intact,
            "master_pid_changes": pid_changes,
            "reloads": reloads,
            "haproxy_c": checks,
            "command_ms": command.to_json(),
            "switch_ms": switch.map(Summary::to_json),
            "proof_ms": proof_ms.to_json(),
            "proofs": proofs.iter().map(|p| json!({
                "label": p.label,
                "passed": p.passed,
                "command_ms": p.command_ms,
                "proof_ms": p.proof_ms,
                "exit_code": p.exit_code,
                "requests": p.requests,
                "failed": p.failed,
                "streams": p.streams,
                "intact": p.intact,
                "master_before": p.master_before,
                "master_after": p.master_after,
                "new_workers": p.new_workers,
                "switch_ms": p.switch_ms,
                "failed_checks": p.failed_checks,
            })).collect::<Vec<_>>(),
            "not_run": not_run,
        }),
    })
}

fn read_proof(p: &Value) -> Proof {
    let streams = p["streams"].as_array().cloned().unwrap_or_default();
    let intact = streams
        .iter()
        .filter(|s| {
            s["error"].is_null()
                && s["final_chunk"] == true
                && s["received"] == s["announced"]
                && s["foreign_lines"] == 0
                && s["out_of_sequence"] == 0
        })
        .count();
    let started = p["run"]["started_ms"].as_f64().unwrap_or(0.0);
    let switch_ms = p["probe"]["switches"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["t_ms"].as_f64())
        .find(|t| *t >= started)
        .map(|t| t - started);
    Proof {
        label: p["label"].as_str().unwrap_or("?").to_string(),
        passed: p["passed"] == true,
        command_ms: p["run"]["duration_ms"].as_f64().unwrap_or(f64::NAN),
        proof_ms: p["duration_ms"].as_f64().unwrap_or(f64::NAN),
        exit_code: p["run"]["exit_code"].as_i64(),
        requests: p["probe"]["requests"].as_u64().unwrap_or(0),
        failed: p["probe"]["failed"].as_u64().unwrap_or(0),
        by_cause: p["probe"]["by_cause"].to_string(),
        streams: streams.len(),
        intact,
        master_before: p["before"]["processes"]["master_pid"].as_i64(),
        master_after: p["after"]["processes"]["master_pid"].as_i64(),
        new_workers: p["after"]["new_workers"].as_array().map_or(0, Vec::len),
        switch_ms,
        failed_checks: p["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["status"] != "pass")
            .map(|c| {
                format!(
                    "{} {} (expected {}, measured {})",
                    c["name"].as_str().unwrap_or("?"),
                    c["status"].as_str().unwrap_or("?"),
                    c["expected"].as_str().unwrap_or("?"),
                    c["measured"].as_str().unwrap_or("?")
                )
            })
            .collect(),
    }
}
