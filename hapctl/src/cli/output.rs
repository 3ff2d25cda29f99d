//! Everything the CLI prints: tables for people, JSON for machines.

use hapctl::apply::{ApplyOutcome, ApplyReport};
use hapctl::blocks::{BlockReport, Enforcement};
use hapctl::deliver::{DeliveryReport, DeliveryStep, GenerationStatus};
use hapctl::edge::{DryRun, EdgeStatus, Supervision};
use hapctl::haproxy::HaproxyStatus;
use hapctl::model::BlockKey;
use hapctl::model::{Block, EdgeState};
use hapctl::resolve::Resolution;

pub fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HAPCTL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.without_time().init();
    }
}

pub fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialising to a string cannot fail")
    );
}

/// Prints an apply report and returns the exit code of its outcome.
pub fn print_report(report: &ApplyReport, json: bool) -> u8 {
    let value = serde_json::to_value(report).expect("a report serialises");
    print_report_json(&value, json).unwrap_or(1)
}

/// What the text form of a report shows, read from its JSON (a local apply's, or the one
/// `hapctl serve` answered with: `forward.rs`).
#[derive(serde::Deserialize)]
struct ReportText {
    outcome: ApplyOutcome,
    message: String,
    haproxy_messages: Vec<String>,
    /// Milliseconds.
    duration: f64,
    steps: Vec<StepText>,
    checks: u32,
    reloads: u32,
}

#[derive(serde::Deserialize)]
struct StepText {
    name: String,
    duration: f64,
}

/// [`print_report`] of a report as JSON.
pub fn print_report_json(report: &serde_json::Value, json: bool) -> Result<u8, super::Failure> {
    let text: ReportText = serde_json::from_value(report.clone())
        .map_err(|e| anyhow::anyhow!("an apply report hapctl cannot read ({e}): {report}"))?;
    if json {
        print_json(report);
    } else {
        println!("{}: {}", text.outcome.as_str(), text.message);
        for line in &text.haproxy_messages {
            println!("  haproxy: {line}");
        }
        let steps: Vec<String> = text
            .steps
            .iter()
            .map(|s| format!("{} {:.1} ms", s.name, s.duration))
            .collect();
        println!(
            "  {:.1} ms ({}); haproxy -c runs: {}, reloads: {}",
            text.duration,
            steps.join(", "),
            text.checks,
            text.reloads
        );
    }
    Ok(text.outcome.exit_code() as u8)
}

/// [`print_report_json`] of a domain put, with which of its servers do not resolve now (in the
/// JSON, or as a warning after the report).
pub fn print_put_report(
    report: &serde_json::Value,
    resolution: Option<&Resolution>,
    json: bool,
) -> Result<u8, super::Failure> {
    match resolution {
        Some(r) if json => print_report_json(&r.merged_into(report.clone()), true),
        Some(r) => {
            let code = print_report_json(report, false)?;
            if let Some(warning) = r.warning() {
                println!("WARNING: {warning}");
            }
            Ok(code)
        }
        None => print_report_json(report, json),
    }
}

pub fn print_dry_run(dry: &DryRun, json: bool) {
    if json {
        print_json(dry);
        return;
    }
    if dry.changed_files.is_empty() {
        println!("no change: the live files match the desired state");
    } else {
        print!("{}", dry.diff);
    }
    println!("haproxy -c verdict: {}", dry.verdict);
    for line in &dry.haproxy_messages {
        println!("  haproxy: {line}");
    }
}

pub fn print_domains(state: &EdgeState, json: bool) {
    if json {
        let list: Vec<_> = state
            .domains
            .iter()
            .map(|(domain, backend)| {
                serde_json::json!({
                    "domain": domain,
                    "backend": domain.backend_name(),
                    "profile": backend.profile(),
                    "servers": backend.servers(),
                    "sse_routing": backend.sse_routing(),
                })
            })
            .collect();
        print_json(&list);
        return;
    }
    for (domain, backend) in &state.domains {
        let servers: Vec<String> = backend
            .servers()
            .iter()
            .map(|s| s.addr.to_string())
            .collect();
        println!("{domain}\t{}\t{}", backend.profile(), servers.join(" "));
    }
}

pub fn print_blocks(blocks: &[Block], json: bool) {
    if json {
        print_json(&blocks);
        return;
    }
    for b in blocks {
        let expiry = b
            .expires_at
            .map(|t| format!("until {}", rfc3339(t)))
            .unwrap_or_else(|| "permanent".into());
        println!("{}\t{expiry}\tby {}\t{}", b.key, b.author, b.reason);
    }
}

pub use hapctl::tls::x509::rfc3339;

pub fn print_haproxy_status(status: &HaproxyStatus, supervision: &Supervision, json: bool) {
    if json {
        #[derive(serde::Serialize)]
        struct View<'a> {
            #[serde(flatten)]
            status: &'a HaproxyStatus,
            supervision: &'a Supervision,
        }
        print_json(&View {
            status,
            supervision,
        });
        return;
    }
    print_master(status);
    println!("{supervision}");
}

fn print_master(status: &HaproxyStatus) {
    match (&status.master_pid, &status.procs) {
        (None, _) => println!("HAProxy: not running"),
        (Some(pid), None) => println!("HAProxy: master PID {pid}, master socket not answering"),
        (Some(pid), Some(procs)) => {
            println!(
                "HAProxy {}: master PID {pid}, {} reload(s)",
                procs.master.version, procs.master.reloads
            );
            for w in &procs.workers {
                println!(
                    "  worker     PID {:<8} reloads {:<4} up {}",
                    w.pid, w.reloads, w.uptime
                );
            }
            for w in &procs.old_workers {
                let draining = status.draining.iter().find(|d| d.pid == w.pid);
                let connections = match draining.and_then(|d| d.connections) {
                    Some(n) => format!("draining, {n} connection(s) left"),
                    None => "exiting".into(),
                };
                println!(
                    "  old worker PID {:<8} reloads {:<4} up {}, {connections}",
                    w.pid, w.reloads, w.uptime
                );
            }
        }
    }
}

pub fn print_status(status: &EdgeStatus, json: bool) {
    let now = hapctl::clock::unix_now();
    let soonest = status.soonest_expiry();
    if json {
        print_json(&serde_json::json!({
            "haproxy": status.haproxy,
            "supervision": status.supervision,
            "live_is_known_good": status.live_is_known_good,
            "runtime_check": status.runtime_check,
            "waf": status.waf,
            "tcp_migrate_req": status.tcp_migrate_req,
            "resolution": status.resolution,
            "applies": status.applies,
            "certificates": {
                "count": status.certificates.len(),
                "soonest_expiry": soonest.map(|r| serde_json::json!({"name": r.name, "not_after": r.not_after})),
                "failing": status.failing_certificates().map(|r| serde_json::json!({
                    "name": r.name, "failures": r.failures, "last_error": r.last_error,
                })).collect::<Vec<_>>(),
            },
        }));
        return;
    }
    print_haproxy_status(&status.haproxy, &status.supervision, false);
    println!(
        "live files are the known-good set: {}",
        if status.live_is_known_good {
            "yes"
        } else {
            "NO"
        }
    );
    print_warnings(status);
    if let Some(r) = soonest {
        println!(
            "certificates: {}, the first to expire is {} in {} days",
            status.certificates.len(),
            r.name,
            (r.not_after - now) / 86_400
        );
    }
    for r in status.failing_certificates() {
        println!(
            "certificate {}: RENEWAL FAILING ({} in a row, still serving the current one): {}",
            r.name,
            r.failures,
            r.last_error.as_deref().unwrap_or_default()
        );
    }
    for a in &status.applies {
        println!(
            "apply #{} at {}: {} ({} ms, {} check(s), {} reload(s)) [{}]",
            a.id,
            rfc3339(a.started_at_ms / 1000),
            a.outcome,
            a.duration_ms,
            a.checks,
            a.reloads,
            a.trigger
        );
        for reason in &a.reload_reasons {
            println!("    reload: {reason}");
        }
    }
}

/// The status's alarms and warnings: a refused runtime change, connections a reload may
/// reset, names that do not resolve, the WAF agent.
fn print_warnings(status: &EdgeStatus) {
    match &status.runtime_check {
        hapctl::apply::RuntimeCheck::None => {}
        hapctl::apply::RuntimeCheck::Pending => {
            println!("changed at runtime: its haproxy -c is pending (known-good once it passes)")
        }
        hapctl::apply::RuntimeCheck::Failed(lines) => println!(
            "DEFECT ALARM: haproxy -c refused the set hapctl changed at runtime (not promoted): {}",
            lines.join(" | ")
        ),
    }
    if let Some(warning) = status.tcp_migrate_req.warning() {
        println!("WARNING: {warning}");
    }
    if let Some(warning) = status.resolution.as_ref().and_then(|r| r.warning()) {
        println!("WARNING: {warning}");
    }
    if let Some(a) = &status.waf.agent {
        match (&a.down_reason, a.pid) {
            (None, Some(pid)) => println!(
                "waf agent: up (pid {pid}), inspected {}, blocked {}, detected {}, errors {}, timeouts {}",
                a.inspected, a.blocked, a.detected, a.errors, a.timeouts
            ),
            (reason, _) => println!(
                "waf agent: DOWN, {} (domains fail open or closed by their policy)",
                reason.as_deref().unwrap_or("")
            ),
        }
    }
}

/// Prints each delivery step as it ends (on stderr with `--json`, so stdout stays JSON).
pub fn step_printer(json: bool) -> impl FnMut(&DeliveryStep) {
    move |step: &DeliveryStep| {
        let line = format!("{:>8.1} ms  {:<7} {}", step.ms, step.name, step.detail);
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

/// Prints a delivery's outcome and returns its exit code.
pub fn print_delivery(report: &DeliveryReport, json: bool) -> u8 {
    if json {
        print_json(report);
    } else {
        println!(
            "{}: {} ({:.0} ms)",
            report.outcome.as_str(),
            report.message,
            report.total_ms
        );
        if let Some(apply) = &report.apply {
            for line in &apply.haproxy_messages {
                println!("  haproxy: {line}");
            }
        }
    }
    report.exit_code() as u8
}

pub fn print_generations(generations: &[GenerationStatus], json: bool) {
    if json {
        print_json(&generations);
        return;
    }
    println!(
        "{:<16} {:<16} {:<9} {:<6} {:<8} {:<8} ready",
        "app", "version", "role", "port", "running", "pid"
    );
    for g in generations {
        println!(
            "{:<16} {:<16} {:<9} {:<6} {:<8} {:<8} {}",
            g.app.as_str(),
            g.version.as_str(),
            g.role,
            g.port.get(),
            if g.running { "yes" } else { "no" },
            g.pid.map_or("-".into(), |p| p.to_string()),
            if g.ready { "yes" } else { "no" }
        );
    }
}

pub fn print_block_report(keys: &[BlockKey], report: &BlockReport, json: bool) {
    if json {
        print_json(report);
        return;
    }
    for (key, result) in keys.iter().zip(&report.results) {
        let what = serde_json::to_value(result).unwrap_or_default();
        println!("{key}: {}", what.as_str().unwrap_or("?"));
    }
    if !report.expired.is_empty() {
        println!("expired and removed: {}", report.expired.join(" "));
    }
    if report.enforcement == Enforcement::NotLoaded {
        println!(
            "NOT enforced yet: committed and written to the map file, but the running HAProxy was not started from hapctl's configuration ({}); it takes effect when HAProxy loads hapctl's files: `hapctl apply`, or `hapctl haproxy adopt` when a unit runs HAProxy",
            report.runtime_error.as_deref().unwrap_or("no blocked map")
        );
        return;
    }
    let how = serde_json::to_value(report.enforcement).unwrap_or_default();
    println!(
        "enforced: {} ({:.1} ms; no haproxy -c{})",
        how.as_str().unwrap_or("?"),
        report.duration_ms,
        match &report.runtime_error {
            Some(e) => format!("; runtime API failed: {e}"),
            None => ", no reload".into(),
        }
    );
}

/// Prints a prove report: a short table per proof (on stderr when the JSON goes to stdout).
pub fn print_proof(report: &hapctl::prove::Report, json_to_stdout: bool) {
    let mut out = String::new();
    for p in &report.proofs {
        out += &format!(
            "prove {}: {} (command {:.0} ms, exit {}; {} probe requests, {} failed)\n",
            p.label,
            if p.passed { "PASSED" } else { "FAILED" },
            p.run.duration_ms,
            p.run.exit_code.map_or("-".into(), |c| c.to_string()),
            p.probe.requests,
            p.probe.failed
        );
        out += &format!("  {:<11} {:<7} measured\n", "check", "result");
        for c in &p.checks {
            out += &format!("  {:<11} {:<7} {}\n", c.name, c.status.as_str(), c.measured);
        }
    }
    for n in &report.not_run {
        out += &format!("prove {}: NOT RUN: {}\n", n.label, n.reason);
    }
    out += &format!(
        "{}{}\n",
        if report.passed {
            "every check passed"
        } else {
            "FAILED: at least one check failed (exit 9)"
        },
        report
            .journal
            .as_ref()
            .map(|j| format!("; journal {}", j.display()))
            .unwrap_or_default()
    );
    if json_to_stdout {
        eprint!("{out}");
        print_json(report);
    } else {
        print!("{out}");
    }
}
