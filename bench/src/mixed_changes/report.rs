//! The tables and targets of mixed-changes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::mix::{Kind, SEED};
use super::{Change, Reason, Run};
use crate::stats::{ms, Summary};
use crate::{Report, Table, Target};

pub(super) fn report(runs: &[Run], changes: usize) -> Report {
    let mut kinds = Table::new(
        format!("mixed-changes: {changes} sequential API changes, by kind (answer = request → API answer)"),
        &[
            "domains",
            "kind",
            "count",
            "answer p50 ms",
            "answer p95 ms",
            "master reloads",
            "recorded reloads",
            "haproxy -c in applies",
            "haproxy -c (wrapper)",
        ],
    );
    let mut reasons = Table::new(
        "mixed-changes: reloads by reason (recorded in the answers / history vs hapctl_reloads_total)",
        &["domains", "reason", "recorded", "metric Δ", "first detail"],
    );
    let (mut targets, mut notes, mut json_runs) = (Vec::new(), Vec::new(), Vec::new());
    for run in runs {
        kind_rows(&mut kinds, run);
        let recorded = recorded_reasons(run);
        reason_rows(&mut reasons, run, &recorded);
        targets.extend(run_targets(run, &recorded, changes));
        notes.extend(run_notes(run, changes));
        json_runs.push(run_json(run));
    }
    notes.extend(mix_notes());
    Report {
        tables: vec![kinds, reasons],
        targets,
        notes,
        json: json!({ "seed": SEED, "changes": changes, "runs": json_runs }),
    }
}

/// One row per kind of change in `run`.
fn kind_rows(kinds: &mut Table, run: &Run) {
    let mut by_kind: BTreeMap<Kind, Vec<&Change>> = BTreeMap::new();
    for c in &run.changes {
        by_kind.entry(c.kind).or_default().push(c);
    }
    for (kind, list) in &by_kind {
        let answer = Summary::of(&list.iter().map(|c| c.answer_ms).collect::<Vec<_>>())
            .expect("a kind listed has changes");
        let in_applies: Option<i64> = list.iter().map(|c| c.report_checks).sum();
        kinds.row(vec![
            run.domains.to_string(),
            kind.name().into(),
            list.len().to_string(),
            ms(answer.median),
            ms(answer.p95),
            list.iter()
                .map(|c| c.master_reloads)
                .sum::<i64>()
                .to_string(),
            list.iter().map(|c| c.recorded()).sum::<i64>().to_string(),
            in_applies.map_or("-".into(), |n| n.to_string()),
            list.iter()
                .map(|c| c.wrapper_checks)
                .sum::<usize>()
                .to_string(),
        ]);
    }
}

/// Recorded reloads by reason: how many, and the first one's detail.
fn recorded_reasons(run: &Run) -> BTreeMap<String, (i64, String)> {
    let mut recorded: BTreeMap<String, (i64, String)> = BTreeMap::new();
    for r in run.changes.iter().flat_map(|c| &c.reasons) {
        let e = recorded
            .entry(r.kind.clone())
            .or_insert((0, r.detail.clone()));
        e.0 += 1;
    }
    recorded
}

/// One row per reason recorded or counted by the metric in `run`.
fn reason_rows(reasons: &mut Table, run: &Run, recorded: &BTreeMap<String, (i64, String)>) {
    let labels: BTreeSet<&String> = recorded.keys().chain(run.metrics.keys()).collect();
    for label in labels {
        let (count, detail) = recorded.get(label).cloned().unwrap_or((0, String::new()));
        reasons.row(vec![
            run.domains.to_string(),
            if label.is_empty() {
                "(empty)".into()
            } else {
                label.clone()
            },
            count.to_string(),
            run.metrics.get(label).copied().unwrap_or(0).to_string(),
            detail.chars().take(90).collect(),
        ]);
    }
}

fn run_targets(
    run: &Run,
    recorded: &BTreeMap<String, (i64, String)>,
    changes: usize,
) -> [Target; 3] {
    let master: i64 = run.changes.iter().map(|c| c.master_reloads).sum();
    let total_recorded: i64 = run.changes.iter().map(Change::recorded).sum();
    let empty = run
        .changes
        .iter()
        .flat_map(|c| &c.reasons)
        .filter(|r| r.kind.is_empty() || r.detail.trim().is_empty())
        .count();
    let metric_total: i64 = run.metrics.values().sum();
    let unrecorded = run
        .changes
        .iter()
        .filter(|c| c.master_reloads != c.recorded())
        .count();
    let by_reason: Vec<String> = recorded
        .iter()
        .map(|(k, (n, _))| format!("{k} {n}"))
        .collect();
    let runtime: Vec<&Change> = run.changes.iter().filter(|c| c.kind.runtime()).collect();
    let runtime_reloads: i64 = runtime.iter().map(|c| c.master_reloads).sum();
    let unexpected: i64 = runtime.iter().map(|c| c.unexpected()).sum();
    [
        Target {
            goal: format!(
                "reloads in {changes} mixed changes at {} domains: every reload has a recorded reason",
                run.domains
            ),
            met: Some(
                master == total_recorded
                    && run.master_total == master
                    && empty == 0
                    && metric_total == master,
            ),
            detail: format!(
                "master reloads {master} (counter over the whole run {}), recorded {total_recorded}, \
                 empty reasons {empty}, hapctl_reloads_total Δ {metric_total}; changes whose count \
                 differs: {unrecorded}",
                run.master_total
            ),
        },
        Target {
            goal: format!(
                "reloads per {changes} changes at {} domains (reported, no target)",
                run.domains
            ),
            met: None,
            detail: format!(
                "{total_recorded} ({}); {} of the changes need one by design",
                if by_reason.is_empty() {
                    "none".into()
                } else {
                    by_reason.join(", ")
                },
                run.changes.iter().filter(|c| !c.kind.runtime()).count()
            ),
        },
        Target {
            goal: format!(
                "runtime-only kinds at {} domains: no reload but a new domain's first-of-its-kind or capacity one",
                run.domains
            ),
            met: Some(unexpected == 0),
            detail: format!(
                "{} runtime-capable changes, {runtime_reloads} reloads, {unexpected} without such a reason",
                runtime.len()
            ),
        },
    ]
}

/// Each reload of a runtime-capable change with its reasons, then the run's pace.
fn run_notes(run: &Run, changes: usize) -> Vec<String> {
    let mut notes = Vec::new();
    let reloaded = run
        .changes
        .iter()
        .filter(|c| c.kind.runtime() && c.master_reloads > 0);
    for c in reloaded {
        let why: Vec<String> = c
            .reasons
            .iter()
            .map(|r| format!("{}: {}", r.kind, r.detail))
            .collect();
        notes.push(format!(
            "{} domains, {}: {} reload(s){} — {}",
            run.domains,
            c.kind.name(),
            c.master_reloads,
            if c.from_history {
                " (reason from GET /v1/applies)"
            } else {
                ""
            },
            if why.is_empty() {
                "NO RECORDED REASON".into()
            } else {
                why.join("; ")
            }
        ));
    }
    notes.push(format!(
        "{} domains: {changes} changes in {:.1} s ({:.1} changes/s), sent one after the other, each on a fresh connection",
        run.domains,
        run.wall_s,
        changes as f64 / run.wall_s
    ));
    notes
}

fn mix_notes() -> [String; 2] {
    let mix: Vec<String> = Kind::MIX
        .iter()
        .map(|(k, w)| format!("{} {w}%", k.name()))
        .collect();
    [
        format!(
            "mix (seed {SEED:#x}, the same every run): {}; a removal with nothing to remove is an add instead. \
             Server changes act on exact fixture domains with a slot profile and on the new domains; \
             HTTPS, suspension, profile (own ↔ long-lived) and check toggles on fixture domains; \
             every PUT sends the domain's whole server list with check set",
            mix.join(", ")
        ),
        "master reloads: the master's counter (`show proc`) before and after each change; recorded: \
         the answer's apply report (`reload_reasons`), or the applies of GET /v1/applies since the \
         request when the answer names fewer; haproxy -c (wrapper) includes the daemon's coalesced \
         check of earlier runtime-changed sets"
            .into(),
    ]
}

fn run_json(run: &Run) -> Value {
    json!({
        "domains": run.domains,
        "seconds": run.wall_s,
        "master_reloads_total": run.master_total,
        "reloads_metric_delta": run.metrics,
        "changes": run.changes.iter().map(|c| json!({
            "kind": c.kind.name(),
            "answer_ms": c.answer_ms,
            "master_reloads": c.master_reloads,
            "reasons": c.reasons.iter().map(Reason::to_json).collect::<Vec<_>>(),
            "report_checks": c.report_checks,
            "wrapper_checks": c.wrapper_checks,
            "reasons_from_history": c.from_history,
        })).collect::<Vec<_>>(),
    })
}
