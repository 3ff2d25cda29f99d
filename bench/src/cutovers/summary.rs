//! The report of the cutover series: totals, the p50 / p99 / max of the cutover commands and
//! of each delivery step, the slowest cutovers with their steps, and every failure with its
//! journal.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::changes;
use super::{Cutover, FIRST, RATE, SETTLE, STREAMS, STREAM_HOLD, STREAM_INTERVAL_MS};
use crate::stats::{ms, percentile};
use crate::{Report, Table, Target};

pub(super) struct Totals {
    pub(super) count: usize,
    pub(super) master_start: i32,
    pub(super) master_end: i32,
    pub(super) reloads: u32,
    pub(super) checks: usize,
    pub(super) out_dir: PathBuf,
}

/// p50 / p99 / max of some cutovers' command durations.
fn spread(cutovers: &[&Cutover], of: impl Fn(&Cutover) -> Option<f64>) -> Option<[f64; 3]> {
    let mut v: Vec<f64> = cutovers
        .iter()
        .filter_map(|c| of(c))
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some([percentile(&v, 50.0), percentile(&v, 99.0), v[v.len() - 1]])
}

/// What the whole series added up to.
struct Overall {
    total: usize,
    passed: usize,
    requests: u64,
    failed: u64,
    streams: usize,
    intact: usize,
    pid_changes: usize,
}

impl Overall {
    fn of(cutovers: &[Cutover], t: &Totals) -> Overall {
        Overall {
            total: cutovers.len(),
            passed: cutovers.iter().filter(|c| c.passed).count(),
            requests: cutovers.iter().map(|c| c.requests).sum(),
            failed: cutovers.iter().map(|c| c.failed).sum(),
            streams: cutovers.iter().map(|c| c.streams).sum(),
            intact: cutovers.iter().map(|c| c.intact).sum(),
            pid_changes: cutovers.iter().filter(|c| !c.master_same).count()
                + usize::from(t.master_start != t.master_end),
        }
    }
}

pub(super) fn summarize(
    cutovers: &[Cutover],
    change_log: Option<changes::Log>,
    t: Totals,
) -> anyhow::Result<Report> {
    let o = Overall::of(cutovers, &t);
    let failures = failures(cutovers);
    let mut tables = vec![
        totals_table(cutovers, &o, &t, change_log.is_some()),
        durations_table(cutovers),
        slowest_table(cutovers),
    ];
    let mut targets = targets(cutovers, &o, &t);
    let mut json_changes = Value::Null;
    if let Some(log) = &change_log {
        tables.push(log.table());
        targets.push(log.target());
        json_changes = log.to_json();
    }
    let mut notes = vec![
        format!(
            "edge: demo-app through an [[app]] with the exec runner (ready delay 0), first version {FIRST}; \
             deliver 2.0.N (a new process each time; the generation replaced by the delivery before is removed) \
             and rollback (to the previous generation, still running) alternating. Each cutover measured by \
             hapctl::prove::run (the checks of `hapctl prove`): {STREAMS} streams (a line every \
             {STREAM_INTERVAL_MS} ms) opened before the command and closed by the client {STREAM_HOLD:?} after it \
             ended (whatever the command's duration), {RATE} short requests/s (a new connection each) \
             from just before the command to {SETTLE:?} after it, 0 failures tolerated."
        ),
        format!("per-cutover records (JSON lines) and failed cutovers' journals: {}", t.out_dir.display()),
    ];
    notes.extend(failures.iter().take(20).cloned());
    let all: Vec<&Cutover> = cutovers.iter().collect();
    Ok(Report {
        tables,
        targets,
        notes,
        json: json!({
            "count": t.count,
            "cutovers": o.total,
            "passed": o.passed,
            "probe_requests": o.requests,
            "failed_requests": o.failed,
            "streams": o.streams,
            "streams_intact": o.intact,
            "master_pid_changes": o.pid_changes,
            "listener_handovers_failed": cutovers.iter().filter(|c| c.handover_failed).count(),
            "reloads": t.reloads,
            "haproxy_c": t.checks,
            "command_ms": spread(&all, |c| Some(c.command_ms)),
            "failures": failures,
            "changes": json_changes,
            "records": t.out_dir.join("cutovers.jsonl"),
        }),
    })
}

fn totals_table(cutovers: &[Cutover], o: &Overall, t: &Totals, with_changes: bool) -> Table {
    let Overall {
        total,
        passed,
        requests,
        failed,
        streams,
        intact,
        pid_changes,
    } = *o;
    let intact_pct = 100.0 * intact as f64 / streams.max(1) as f64;
    let title = format!(
        "cutovers: {total} consecutive proven cutovers (deliver / rollback), {RATE} req/s, {STREAMS} streams held to {:?} after each command{}",
        STREAM_HOLD,
        if with_changes { ", with runtime changes" } else { "" }
    );
    let mut totals = Table::new(
        title,
        &[
            "cutovers",
            "all checks passed",
            "failed cutovers",
            "probe requests",
            "probe req/s, lowest",
            "failed requests",
            "streams intact",
            "master PID changes",
            "a new worker each",
            "listener handovers failed",
            "reloads",
            "haproxy -c",
        ],
    );
    totals.row(vec![
        total.to_string(),
        format!("{passed}/{total}"),
        (total - passed).to_string(),
        requests.to_string(),
        ms(cutovers
            .iter()
            .map(|c| c.rate)
            .filter(|r| r.is_finite())
            .fold(f64::INFINITY, f64::min)),
        failed.to_string(),
        format!("{intact}/{streams} ({intact_pct:.2} %)"),
        pid_changes.to_string(),
        format!(
            "{}/{total}",
            cutovers.iter().filter(|c| c.new_worker).count()
        ),
        cutovers
            .iter()
            .filter(|c| c.handover_failed)
            .count()
            .to_string(),
        t.reloads.to_string(),
        t.checks.to_string(),
    ]);
    totals
}

fn durations_table(cutovers: &[Cutover]) -> Table {
    let mut durations = Table::new(
        "cutovers: durations (ms)",
        &["measure", "n", "p50", "p99", "max"],
    );
    let all: Vec<&Cutover> = cutovers.iter().collect();
    let mut row = |name: &str, list: &[&Cutover], of: &dyn Fn(&Cutover) -> Option<f64>| {
        if let Some([p50, p99, max]) = spread(list, of) {
            durations.row(vec![
                name.to_string(),
                list.iter()
                    .filter(|c| of(c).is_some_and(f64::is_finite))
                    .count()
                    .to_string(),
                ms(p50),
                ms(p99),
                ms(max),
            ]);
        }
    };
    row("cutover command, all", &all, &|c| Some(c.command_ms));
    for kind in ["deliver", "rollback"] {
        let list: Vec<&Cutover> = cutovers.iter().filter(|c| c.kind == kind).collect();
        row(&format!("cutover command, {kind}"), &list, &|c| {
            Some(c.command_ms)
        });
        for step in step_names(&list) {
            row(&format!("  {kind}: {step}"), &list, &|c| step_ms(c, step));
        }
    }
    row("command start → probe sees the new version", &all, &|c| {
        c.switch_ms
    });
    row("whole proof (streams, probe, settle, checks)", &all, &|c| {
        Some(c.proof_ms)
    });
    durations
}

/// Every step name seen, in the order first seen.
fn step_names<'c>(list: &[&'c Cutover]) -> Vec<&'c str> {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in list.iter().flat_map(|c| &c.steps) {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names
}

/// A step's duration in a cutover (a step may occur twice: summed), if it ran.
fn step_ms(c: &Cutover, step: &str) -> Option<f64> {
    let of: Vec<f64> = c
        .steps
        .iter()
        .filter(|(n, _)| n == step)
        .map(|(_, ms)| *ms)
        .collect();
    (!of.is_empty()).then(|| of.iter().sum())
}

fn slowest_table(cutovers: &[Cutover]) -> Table {
    let mut slowest: Vec<&Cutover> = cutovers
        .iter()
        .filter(|c| c.command_ms.is_finite())
        .collect();
    slowest.sort_by(|a, b| b.command_ms.total_cmp(&a.command_ms));
    let mut slow = Table::new(
        "cutovers: the 5 slowest commands",
        &["cutover", "command ms", "steps (ms)", "changes meanwhile"],
    );
    for c in slowest.iter().take(5) {
        slow.row(vec![
            format!("{} {} {}", c.n, c.kind, c.to),
            ms(c.command_ms),
            c.steps
                .iter()
                .map(|(n, v)| format!("{n} {}", ms(*v)))
                .collect::<Vec<_>>()
                .join(", "),
            c.changes.to_string(),
        ]);
    }
    slow
}

/// One line per failed cutover: its failed checks and its journal.
fn failures(cutovers: &[Cutover]) -> Vec<String> {
    cutovers
        .iter()
        .filter(|c| !c.passed)
        .map(|c| {
            format!(
                "cutover {} ({} {}): {}{}",
                c.n,
                c.kind,
                c.to,
                c.failed_checks.join("; "),
                c.journal
                    .as_ref()
                    .map(|j| format!(" — journal {}", j.display()))
                    .unwrap_or_default()
            )
        })
        .collect()
}

fn targets(cutovers: &[Cutover], o: &Overall, t: &Totals) -> Vec<Target> {
    let (total, passed) = (o.total, o.passed);
    let (failed, requests, intact, streams) = (o.failed, o.requests, o.intact, o.streams);
    vec![
        Target {
            goal: format!("{} cutovers, 0 failures", t.count),
            met: Some(total == t.count && passed == total),
            detail: format!("{} failed of {total}{}", total - passed, by_check(cutovers)),
        },
        Target {
            goal: "0 failed short requests".into(),
            met: Some(failed == 0 && requests > 0),
            detail: format!("{failed} of {requests}"),
        },
        Target {
            goal: "100 % of long streams intact".into(),
            met: Some(intact == streams && streams > 0),
            detail: format!("{intact}/{streams}"),
        },
        Target {
            goal: "0 master PID changes".into(),
            met: Some(o.pid_changes == 0),
            detail: format!(
                "master {} at the start, {} at the end",
                t.master_start, t.master_end
            ),
        },
    ]
}

/// Failed cutovers per failed check (`streams`, `probe`, …), e.g. ` (streams: 6, probe: 1)`.
fn by_check(cutovers: &[Cutover]) -> String {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for c in cutovers {
        for f in &c.failed_checks {
            *counts
                .entry(f.split(':').next().unwrap_or("?"))
                .or_default() += 1;
        }
    }
    if counts.is_empty() {
        return String::new();
    }
    let list: Vec<String> = counts.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    format!(" ({})", list.join(", "))
}
