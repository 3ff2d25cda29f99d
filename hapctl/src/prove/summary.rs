//! What the probe of short requests saw, condensed: its summary (counts, versions served and
//! their switches, latency), the failures kept with their details, and its timeline events.

use std::collections::BTreeMap;

use super::http::Cause;
use super::probe;
use super::report::{
    event, CommandRun, Event, Latency, ProbeFailure, ProbeSummary, Switch, VersionSeen,
};

/// Failures kept with their details (the counts are always complete).
const MAX_FAILURES_KEPT: usize = 1000;

pub(super) fn probe_failures(log: &probe::ProbeLog, run: &CommandRun) -> Vec<ProbeFailure> {
    log.outcomes
        .iter()
        .filter_map(|o| {
            o.result.as_ref().err().map(|e| ProbeFailure {
                t_ms: o.t_ms,
                duration_ms: o.duration_ms,
                cause: e.cause,
                detail: e.detail.clone(),
                phase: phase(o.t_ms, run),
            })
        })
        .take(MAX_FAILURES_KEPT)
        .collect()
}

/// The probe's part of the timeline: each switch of version, and the failures — those in a
/// row (no success between them) with the same cause make one event.
pub(super) fn probe_events(
    log: &probe::ProbeLog,
    summary: &ProbeSummary,
    timeline: &mut Vec<Event>,
) {
    for s in &summary.switches {
        timeline.push(event(
            s.t_ms,
            "probe",
            format!("first request served by {} (before: {})", s.to, s.from),
        ));
    }
    struct Streak {
        first: f64,
        last: f64,
        cause: Cause,
        detail: String,
        n: u64,
    }
    let flush = |streak: Option<Streak>, timeline: &mut Vec<Event>| {
        if let Some(s) = streak {
            let what = if s.n == 1 {
                format!("request FAILED ({}): {}", s.cause.as_str(), s.detail)
            } else {
                format!(
                    "{} requests in a row FAILED ({}) from {:.0} to {:.0} ms; first: {}",
                    s.n,
                    s.cause.as_str(),
                    s.first,
                    s.last,
                    s.detail
                )
            };
            timeline.push(event(s.first, "probe", what));
        }
    };
    let mut streak: Option<Streak> = None;
    for o in &log.outcomes {
        match (&o.result, &mut streak) {
            (Err(e), Some(s)) if s.cause == e.cause => {
                s.last = o.t_ms;
                s.n += 1;
            }
            (Err(e), _) => {
                flush(streak.take(), timeline);
                streak = Some(Streak {
                    first: o.t_ms,
                    last: o.t_ms,
                    cause: e.cause,
                    detail: e.detail.clone(),
                    n: 1,
                });
            }
            (Ok(_), _) => flush(streak.take(), timeline),
        }
    }
    flush(streak, timeline);
}

fn phase(t_ms: f64, run: &CommandRun) -> &'static str {
    if t_ms < run.started_ms {
        "before"
    } else if t_ms <= run.ended_ms {
        "during"
    } else {
        "after"
    }
}

pub(super) fn summarize_probe(log: &probe::ProbeLog, rate: f64, run: &CommandRun) -> ProbeSummary {
    let mut by_cause = BTreeMap::new();
    let mut versions: Vec<VersionSeen> = Vec::new();
    let mut switches = Vec::new();
    let mut last_version: Option<&str> = None;
    let mut latencies = Vec::new();
    let mut ok = 0;
    for o in &log.outcomes {
        latencies.push(o.duration_ms);
        match &o.result {
            Ok(v) => {
                ok += 1;
                match versions.iter_mut().find(|s| &s.version == v) {
                    Some(s) => {
                        s.requests += 1;
                        s.last_ms = o.t_ms;
                    }
                    None => versions.push(VersionSeen {
                        version: v.clone(),
                        requests: 1,
                        first_ms: o.t_ms,
                        last_ms: o.t_ms,
                    }),
                }
                if let Some(prev) = last_version {
                    if prev != v {
                        switches.push(Switch {
                            t_ms: o.t_ms,
                            from: prev.to_string(),
                            to: v.clone(),
                        });
                    }
                }
                last_version = Some(v);
            }
            Err(e) => *by_cause.entry(e.cause.as_str()).or_insert(0) += 1,
        }
    }
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        if latencies.is_empty() {
            0.0
        } else {
            latencies[((latencies.len() - 1) as f64 * q).round() as usize]
        }
    };
    let requests = log.outcomes.len() as u64;
    ProbeSummary {
        rate,
        requests,
        ok,
        failed: requests - ok,
        during_command: log
            .outcomes
            .iter()
            .filter(|o| phase(o.t_ms, run) == "during")
            .count() as u64,
        late: log.late,
        by_cause,
        versions,
        switches,
        latency_ms: Latency {
            median: pick(0.5),
            p99: pick(0.99),
            max: latencies.last().copied().unwrap_or(0.0),
        },
        first_ms: log.outcomes.first().map(|o| o.t_ms),
        last_ms: log.outcomes.last().map(|o| o.t_ms),
    }
}
