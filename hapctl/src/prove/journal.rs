//! The journal of a proof: a markdown file a person reads — what was measured, the timeline,
//! the failures and the way back — written in the state dir's journal folder and named with
//! the UTC time the measurement started.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use super::{CheckStatus, Proof, Report};

/// Writes the journal of `report` in `dir` (created if needed) and returns its path.
pub fn write(dir: &Path, report: &Report) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let stamp: String = report
        .started_at
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    let mut path = dir.join(format!("prove-{stamp}.md"));
    let mut n = 2;
    while path.exists() && n < 1000 {
        path = dir.join(format!("prove-{stamp}-{n}.md"));
        n += 1;
    }
    crate::fsutil::write_atomic(&path, render(report).as_bytes(), 0o644)?;
    Ok(path)
}

/// A markdown cell: no pipe or newline may break the table.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

pub fn render(report: &Report) -> String {
    let mut md = String::new();
    let o = &report.options;
    let title = match report.kind {
        "cycle" => "a delivery and its rollback",
        _ => "a cutover",
    };
    let _ = writeln!(md, "# Proof of {title}: {}\n", verdict(report.passed));
    let _ = writeln!(
        md,
        "Measured by `hapctl prove` {} from {} (UTC), on the edge's public bind {} with \
         `Host: {}`; state directory `{}`.\n",
        report.hapctl_version,
        report.started_at,
        report.edge,
        o.host,
        report.state_dir.display()
    );
    for p in &report.proofs {
        let _ = writeln!(
            md,
            "- **{}** (`{}`): {}",
            p.label,
            p.command.join(" "),
            verdict(p.passed)
        );
    }
    for n in &report.not_run {
        let _ = writeln!(md, "- **{}**: NOT RUN — {}", n.label, n.reason);
    }

    measured_section(&mut md, report);

    for p in &report.proofs {
        proof_section(&mut md, p);
    }
    for n in &report.not_run {
        let _ = writeln!(
            md,
            "\n## {}: not run\n\n`{}` was not run: {}.",
            n.label,
            n.command.join(" "),
            n.reason
        );
    }
    if report.proofs.len() > 1 || !report.not_run.is_empty() {
        let _ = writeln!(
            md,
            "\n## Overall\n\n{}: a cycle passes only when the delivery and its rollback both pass.",
            verdict(report.passed)
        );
    }
    md
}

/// What a proof measures and how, from the options.
fn measured_section(md: &mut String, report: &Report) {
    let o = &report.options;
    let _ = writeln!(md, "\n## What was measured\n");
    let _ = writeln!(
        md,
        "- **Long streams** (established connections that must survive the cutover): {} \
         stream(s) of `GET /stream?lines={}&interval_ms={}`, opened before the command and \
         their first line received, each noting the generation that served it. Each must run \
         {} — without error, every line from the generation it started on (`V i/N`), and \
         still be open when the command ends.",
        o.streams,
        o.stream_lines,
        o.stream_interval_ms,
        match o.stream_hold {
            Some(hold) => format!(
                "until the client closes it {} ms after the command ended, its lines in order",
                hold.as_millis()
            ),
            None => format!(
                "to its announced end — the final chunk, {} lines in order",
                o.stream_lines
            ),
        }
    );
    let _ = writeln!(
        md,
        "- **Short-request probe**: `GET {}` at {}/s, a new connection for each, from before \
         the command until {} ms after it; each failure recorded with its time and cause \
         (refused, reset, timeout, non-2xx, wrong body: empty or not a version line). At most \
         {} failure(s) allowed. Request timeout {} ms.",
        o.path,
        o.rate,
        o.settle.as_millis(),
        o.max_failures,
        o.request_timeout.as_millis()
    );
    let _ = writeln!(
        md,
        "- **HAProxy's master and workers**: `show proc` on the master socket just before the \
         command, every 25 ms during it, and after the settle period; the master's PID also \
         from the pidfile (direct mode) or `systemctl show -p MainPID` (systemd). A reload keeps \
         the master and adds a worker; a restart replaces the master and cuts everything."
    );
    let _ = writeln!(
        md,
        "- **Version served** afterwards: {}.",
        match &o.expect_version {
            Some(v) => format!("`GET /version` five times, each must answer `{v}`"),
            None if report.kind == "cycle" =>
                "`GET /version` five times: the delivered version after the delivery, the \
                 version served before it after the rollback"
                    .to_string(),
            None => "not checked (no --expect-version)".to_string(),
        }
    );
    let _ = writeln!(
        md,
        "- **The command** itself: exit code, duration (bound {} ms) and output.",
        o.timeout.as_millis()
    );
    let _ = writeln!(
        md,
        "\nWhat this does not see: a cut on a machine failure (a reboot cuts every stream, old \
         workers included), and whether generations older than the replaced one were removed."
    );
}

fn verdict(passed: bool) -> &'static str {
    if passed {
        "PASSED"
    } else {
        "FAILED"
    }
}

fn proof_section(md: &mut String, p: &Proof) {
    proof_header(md, p);
    checks_table(md, p);
    timeline_table(md, p);
    streams_table(md, p);
    failures_section(md, p);
    command_output(md, p);
    let _ = writeln!(md, "\n### The way back\n\n{}", p.way_back);
}

/// The verdict, and who served and ran before and after.
fn proof_header(md: &mut String, p: &Proof) {
    let _ = writeln!(md, "\n## {} — {}\n", p.label, verdict(p.passed));
    let _ = writeln!(
        md,
        "Command `{}`, started {} (t = 0 ms is the start of this measurement). Served before: \
         **{}**; after: **{}**. Master PID before {} / after {}; workers before {:?}, after {:?} \
         (old, draining their established connections: {:?}).\n",
        p.command.join(" "),
        p.started_at,
        p.before.version_served,
        p.after.version_served.as_deref().unwrap_or("?"),
        p.before
            .processes
            .master_pid
            .map_or("?".into(), |x| x.to_string()),
        p.after
            .processes
            .master_pid
            .map_or("?".into(), |x| x.to_string()),
        p.before.processes.workers,
        p.after.processes.workers,
        p.after.processes.old_workers
    );
}

/// Every check with what it required and what was measured.
fn checks_table(md: &mut String, p: &Proof) {
    let _ = writeln!(md, "### Checks\n");
    let _ = writeln!(md, "| check | result | required | measured |");
    let _ = writeln!(md, "|---|---|---|---|");
    for c in &p.checks {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            c.name,
            match c.status {
                CheckStatus::Pass => "pass",
                CheckStatus::Fail => "**FAIL**",
                CheckStatus::Skipped => "skipped",
            },
            cell(&c.expected),
            cell(&c.measured)
        );
    }
}

/// The timeline, and the cutover as the probe saw it.
fn timeline_table(md: &mut String, p: &Proof) {
    let _ = writeln!(md, "\n### Timeline\n");
    let _ = writeln!(md, "| t (ms) | source | event |");
    let _ = writeln!(md, "|---:|---|---|");
    for e in &p.timeline {
        let _ = writeln!(md, "| {:.0} | {} | {} |", e.t_ms, e.source, cell(&e.what));
    }
    let pr = &p.probe;
    let _ = writeln!(
        md,
        "\nCutover as the probe saw it: {} request(s), {} during the command ({:.0} ms); \
         versions served: {}. Latency median {:.1} ms, p99 {:.1} ms, max {:.1} ms.",
        pr.requests,
        pr.during_command,
        p.run.duration_ms,
        pr.versions
            .iter()
            .map(|v| format!(
                "{} ({} requests, {:.0}–{:.0} ms)",
                v.version, v.requests, v.first_ms, v.last_ms
            ))
            .collect::<Vec<_>>()
            .join(", "),
        pr.latency_ms.median,
        pr.latency_ms.p99,
        pr.latency_ms.max
    );
}

/// Each long stream from its opening to its end.
fn streams_table(md: &mut String, p: &Proof) {
    let _ = writeln!(md, "\n### Long streams\n");
    if p.streams.is_empty() {
        let _ = writeln!(md, "No stream was opened (--streams 0).");
    } else {
        let _ = writeln!(
            md,
            "| stream | generation | lines | final chunk | opened (ms) | ended (ms) | longest pause (ms) | problem |"
        );
        let _ = writeln!(md, "|---|---|---|---|---:|---:|---:|---|");
        for s in &p.streams {
            let mut problem: Vec<String> = s.error.iter().cloned().collect();
            problem.extend(s.problems.iter().take(3).cloned());
            let _ = writeln!(
                md,
                "| {} | {} | {}/{} | {} | {:.0} | {} | {:.0} | {} |",
                s.id,
                s.version.as_deref().unwrap_or("?"),
                s.received,
                s.announced,
                if s.final_chunk { "yes" } else { "no" },
                s.opened_ms,
                s.ended_ms.map_or("-".into(), |t| format!("{t:.0}")),
                s.max_gap_ms,
                cell(&if problem.is_empty() {
                    "none".to_string()
                } else {
                    problem.join("; ")
                })
            );
        }
    }
}

/// The failed checks and the failed short requests.
fn failures_section(md: &mut String, p: &Proof) {
    let _ = writeln!(md, "\n### Failures\n");
    let failed_checks: Vec<_> = p
        .checks
        .iter()
        .filter(|c| c.status == CheckStatus::Fail)
        .collect();
    if failed_checks.is_empty() && p.failures.is_empty() {
        let _ = writeln!(
            md,
            "None: no short request failed, no stream broke, every check passed."
        );
    } else {
        for c in &failed_checks {
            let _ = writeln!(md, "- check **{}** failed: {}", c.name, c.measured);
        }
        if !p.failures.is_empty() {
            let _ = writeln!(
                md,
                "\n{} failed short request(s) (first {} listed):\n",
                p.probe.failed,
                p.failures.len().min(100)
            );
            let _ = writeln!(md, "| t (ms) | phase | cause | took (ms) | detail |");
            let _ = writeln!(md, "|---:|---|---|---:|---|");
            for f in p.failures.iter().take(100) {
                let _ = writeln!(
                    md,
                    "| {:.0} | {} | {} | {:.0} | {} |",
                    f.t_ms,
                    f.phase,
                    f.cause.as_str(),
                    f.duration_ms,
                    cell(&f.detail)
                );
            }
        }
    }
}

/// The tail of what the command printed.
fn command_output(md: &mut String, p: &Proof) {
    if !p.run.stdout.trim().is_empty() || !p.run.stderr.trim().is_empty() {
        let _ = writeln!(md, "\n### Command output\n");
        for (name, text) in [("stdout", &p.run.stdout), ("stderr", &p.run.stderr)] {
            if text.trim().is_empty() {
                continue;
            }
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            let _ = writeln!(md, "{name} (last {} lines):\n", tail.len());
            let _ = writeln!(
                md,
                "```text\n{}\n```",
                tail.join("\n").replace("```", "'''")
            );
        }
    }
}
