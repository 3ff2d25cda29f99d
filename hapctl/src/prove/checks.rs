//! The checks of a proof, each judged from what was measured, and the way back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use super::report::{
    After, Before, Check, CheckStatus, CommandRun, ProbeFailure, ProbeSummary, Processes,
};
use super::stream::StreamLog;
use super::Options;

pub(super) fn summarize_answers(answers: &[String]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for a in answers {
        *counts.entry(a.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(a, n)| format!("{n}x {a:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pass_if(ok: bool) -> CheckStatus {
    if ok {
        CheckStatus::Pass
    } else {
        CheckStatus::Fail
    }
}

pub(super) fn check_master(before: &Processes, after: &Processes) -> Check {
    let expected = "the master PID is the same before and after (a reload, not a restart)".into();
    let (status, measured) = match (before.master_pid, after.master_pid) {
        (Some(b), Some(a)) if a == b => {
            let sup_changed = matches!(
                (before.supervisor_pid, after.supervisor_pid),
                (Some(x), Some(y)) if x != y
            );
            if sup_changed {
                (
                    CheckStatus::Fail,
                    format!(
                        "show proc names PID {b} before and after, but the {} changed: {:?} -> {:?}",
                        before.supervisor_source, before.supervisor_pid, after.supervisor_pid
                    ),
                )
            } else {
                (
                    CheckStatus::Pass,
                    format!(
                        "PID {b} before and after ({}: {})",
                        after.supervisor_source,
                        after
                            .supervisor_pid
                            .map_or("not read".into(), |p| p.to_string())
                    ),
                )
            }
        }
        (Some(b), Some(a)) => (
            CheckStatus::Fail,
            format!("PID {b} before, {a} after: HAProxy was restarted, not reloaded; every connection of the old master was cut"),
        ),
        (Some(b), None) => (
            CheckStatus::Fail,
            format!(
                "PID {b} before; after the command the master socket does not answer ({}) — {} says {:?}",
                after.error.as_deref().unwrap_or("?"),
                after.supervisor_source,
                after.supervisor_pid
            ),
        ),
        (None, _) => (
            CheckStatus::Fail,
            "the master was not readable before the command".into(),
        ),
    };
    Check {
        name: "master",
        status,
        expected,
        measured,
    }
}

pub(super) fn check_new_worker(before: &Processes, after: &After) -> Check {
    let ok = !after.new_workers.is_empty();
    Check {
        name: "new-worker",
        status: pass_if(ok),
        expected: "at least one current worker that was not there before (the reload happened)"
            .into(),
        measured: if ok {
            format!(
                "new worker(s) {:?}{}; before: workers {:?}, old {:?}; after: old {:?} draining",
                after.new_workers,
                if before.master_pid != after.processes.master_pid {
                    " (under another master)"
                } else {
                    ""
                },
                before.workers,
                before.old_workers,
                after.processes.old_workers
            )
        } else {
            format!(
                "no new worker: workers {:?} before, {:?} after — nothing was reloaded",
                before.workers, after.processes.workers
            )
        },
    }
}

pub(super) fn check_probe(probe: &ProbeSummary, failures: &[ProbeFailure], max: u64) -> Check {
    let ok = probe.failed <= max && probe.requests > 0;
    let causes = if probe.by_cause.is_empty() {
        String::new()
    } else {
        format!(
            " ({})",
            probe
                .by_cause
                .iter()
                .map(|(c, n)| format!("{c}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let first = failures
        .first()
        .map(|f| format!("; first at {:.0} ms: {}", f.t_ms, f.detail))
        .unwrap_or_default();
    Check {
        name: "probe",
        status: pass_if(ok),
        expected: format!("at most {max} failed short request(s)"),
        measured: format!(
            "{} requests ({} while the command ran), {} failed{causes}{first}",
            probe.requests, probe.during_command, probe.failed
        ),
    }
}

pub(super) fn check_streams(streams: &[StreamLog], run: &CommandRun, options: &Options) -> Check {
    let end = match options.stream_hold {
        Some(hold) => format!(
            "runs until the client closes it {} ms after the command (every line in order)",
            hold.as_millis()
        ),
        None => "runs to its announced end (final chunk, every line, in order)".into(),
    };
    let expected = format!(
        "every long stream {end} without error, every line from the generation it started on, \
         and stays open until the command has ended"
    );
    if streams.is_empty() {
        return Check {
            name: "streams",
            status: CheckStatus::Skipped,
            expected,
            measured: "no stream asked (--streams 0)".into(),
        };
    }
    let broken: Vec<String> = streams.iter().filter_map(|s| why_broken(s, run)).collect();
    let lines: u32 = streams.iter().map(|s| s.received).sum();
    Check {
        name: "streams",
        status: pass_if(broken.is_empty()),
        expected,
        measured: if broken.is_empty() {
            streams_intact(streams, options)
        } else {
            format!(
                "{} of {} stream(s) broken ({lines} lines received in all): {}",
                broken.len(),
                streams.len(),
                broken.join(" | ")
            )
        },
    }
}

/// What broke a stream, or that it did not span the cutover; `None` when it did its job.
fn why_broken(s: &StreamLog, run: &CommandRun) -> Option<String> {
    let v = s.version.as_deref().unwrap_or("?");
    if !s.intact() {
        let mut why = Vec::new();
        if let Some(e) = &s.error {
            why.push(e.clone());
        } else if !s.final_chunk && !s.closed_by_client {
            why.push("no final chunk".into());
        }
        if s.received != s.announced && !s.closed_by_client {
            why.push(format!("{}/{} lines", s.received, s.announced));
        }
        if s.foreign_lines > 0 {
            why.push(format!("{} line(s) not from {v}", s.foreign_lines));
        }
        if s.out_of_sequence > 0 {
            why.push(format!("{} line(s) out of sequence", s.out_of_sequence));
        }
        Some(format!("stream {} ({v}): {}", s.id, why.join("; ")))
    } else if s.ended_ms.unwrap_or(0.0) <= run.ended_ms {
        Some(format!(
            "stream {} ({v}) ended at {:.0} ms, before the command ended at {:.0} ms: it did \
             not span the cutover (raise --stream-lines or --stream-interval-ms)",
            s.id,
            s.ended_ms.unwrap_or(0.0),
            run.ended_ms
        ))
    } else {
        None
    }
}

/// The measure of streams that all did their job.
fn streams_intact(streams: &[StreamLog], options: &Options) -> String {
    let max_gap = streams.iter().map(|s| s.max_gap_ms).fold(0.0, f64::max);
    let received = |f: fn(u32, u32) -> u32| streams.iter().map(|s| s.received).reduce(f);
    let each = if options.stream_hold.is_some() {
        format!(
            "{}-{} lines each until the client closed it",
            received(u32::min).unwrap_or(0),
            received(u32::max).unwrap_or(0)
        )
    } else {
        format!(
            "{} lines of {} each",
            options.stream_lines, options.stream_lines
        )
    };
    format!(
        "{}/{} streams intact: {each}, every one from the generation it started on ({}); \
         longest pause between lines {:.0} ms",
        streams.len(),
        streams.len(),
        streams
            .iter()
            .filter_map(|s| s.version.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", "),
        max_gap
    )
}

pub(super) fn check_version(expected: Option<&str>, answers: &[String]) -> Check {
    let Some(expected) = expected else {
        return Check {
            name: "version",
            status: CheckStatus::Skipped,
            expected: "no --expect-version given".into(),
            measured: "not measured".into(),
        };
    };
    let ok = !answers.is_empty() && answers.iter().all(|a| a == expected);
    Check {
        name: "version",
        status: pass_if(ok),
        expected: format!("GET /version answers {expected} every time"),
        measured: format!(
            "{} of {} answered {expected}: {}",
            answers.iter().filter(|a| *a == expected).count(),
            answers.len(),
            summarize_answers(answers)
        ),
    }
}

pub(super) fn check_command(run: &CommandRun, timeout: Duration) -> Check {
    let ok = run.exit_code == Some(0) && !run.timed_out;
    Check {
        name: "command",
        status: pass_if(ok),
        expected: format!("exits 0 within {timeout:?}"),
        measured: match (&run.spawn_error, run.timed_out, run.exit_code) {
            (Some(e), ..) => format!("could not be started: {e}"),
            (None, true, _) => format!("killed after {:.0} ms (timeout)", run.duration_ms),
            (None, false, Some(c)) => format!("exited {c} after {:.0} ms", run.duration_ms),
            (None, false, None) => format!(
                "ended by signal {} after {:.0} ms",
                run.signal.unwrap_or(0),
                run.duration_ms
            ),
        },
    }
}

pub(super) fn way_back(
    argv: &[String],
    state_dir: &Path,
    before: &Before,
    after: &After,
    checks: &[Check],
) -> String {
    let dir = state_dir.display();
    let from = &before.version_served;
    let now = after.version_served.as_deref().unwrap_or("?");
    let program = argv
        .first()
        .and_then(|p| Path::new(p).file_name())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let verb = argv
        .iter()
        .skip(1)
        .find(|a| matches!(a.as_str(), "deliver" | "rollback"));
    let mut text = match (program.as_str(), verb.map(String::as_str)) {
        ("revenir", _) | (_, Some("rollback")) => format!(
            "This was a rollback, from {from} to {now}. The way forward again is a delivery of \
             the version it replaced: `hapctl --state-dir {dir} deliver {from}` (or the lab's \
             `livrer {from}`). {from} was not stopped by the rollback, so it needs no start; \
             prove it the same way: `hapctl prove -- hapctl deliver {from}`."
        ),
        ("livrer", _) | (_, Some("deliver")) => format!(
            "Before this delivery the edge served {from}; now it serves {now}. The way back is \
             `hapctl --state-dir {dir} rollback` (the lab's `revenir`): the same cutover, \
             towards {from}, which a correct delivery keeps running for the old workers' \
             established connections and as this instant rollback. Prove the rollback too: \
             `hapctl prove --expect-version {from} -- hapctl rollback`, or both at once with \
             `hapctl prove --cycle VERSION`."
        ),
        _ => format!(
            "Before this command the edge served {from}; now it serves {now}. The way back is \
             this command's own reverse (for the lab's `livrer V`, `revenir`); for a hapctl \
             delivery, `hapctl --state-dir {dir} rollback` cuts back to the previous \
             generation. Prove the way back like the way there: `hapctl prove -- <reverse>`."
        ),
    };
    let failed = |name| {
        checks
            .iter()
            .any(|c| c.name == name && c.status == CheckStatus::Fail)
    };
    if failed("master") {
        text += " The master was replaced: the connections it held were cut, and no rollback \
                 brings them back; find what restarts HAProxy instead of reloading it.";
    }
    if failed("streams") {
        text += " A long stream broke: if the generation it started on was stopped, a \
                 rollback must start it again first (`hapctl rollback` does).";
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn procs(master: Option<i32>, sup: Option<i32>, workers: &[i32]) -> Processes {
        Processes {
            master_pid: master,
            supervisor_pid: sup,
            supervisor_source: "pidfile",
            reloads: Some(0),
            workers: workers.to_vec(),
            old_workers: vec![],
            error: None,
            t_ms: 0.0,
        }
    }

    #[test]
    fn the_master_check_fails_on_a_restart_or_a_silent_master() {
        let b = procs(Some(10), Some(10), &[11]);
        assert_eq!(
            check_master(&b, &procs(Some(10), Some(10), &[12])).status,
            CheckStatus::Pass
        );
        assert_eq!(
            check_master(&b, &procs(Some(20), Some(20), &[21])).status,
            CheckStatus::Fail
        );
        assert_eq!(
            check_master(&b, &procs(None, None, &[])).status,
            CheckStatus::Fail
        );
        assert_eq!(
            check_master(&b, &procs(Some(10), Some(30), &[12])).status,
            CheckStatus::Fail
        );
    }

    #[test]
    fn the_version_and_command_checks() {
        assert_eq!(check_version(None, &[]).status, CheckStatus::Skipped);
        let all = vec!["1.5.0".to_string(); 5];
        assert_eq!(check_version(Some("1.5.0"), &all).status, CheckStatus::Pass);
        let mut mixed = all.clone();
        mixed[3] = "1.4.2".into();
        assert_eq!(
            check_version(Some("1.5.0"), &mixed).status,
            CheckStatus::Fail
        );
        assert_eq!(check_version(Some("1.5.0"), &[]).status, CheckStatus::Fail);
    }

    #[test]
    fn a_command_that_could_not_start_fails() {
        let run = CommandRun {
            exit_code: None,
            signal: None,
            timed_out: false,
            spawn_error: Some("/x: No such file or directory".into()),
            started_ms: 0.0,
            ended_ms: 0.0,
            duration_ms: 0.0,
            stdout: String::new(),
            stderr: String::new(),
        };
        assert_eq!(
            check_command(&run, Duration::from_secs(1)).status,
            CheckStatus::Fail
        );
        let ok = CommandRun {
            exit_code: Some(0),
            spawn_error: None,
            ..run
        };
        assert_eq!(
            check_command(&ok, Duration::from_secs(1)).status,
            CheckStatus::Pass
        );
    }
}
