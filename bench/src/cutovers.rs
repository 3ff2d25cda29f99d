//! cutovers: N consecutive cutovers on the demo-app edge, deliver (a new version each time,
//! so every delivery starts a process and retires one) and rollback alternating. Each one is
//! measured in-process by hapctl's own prove library (`prove::run` with the cutover command as
//! its subject), so every cutover gets exactly the checks `hapctl prove` makes: master PID
//! unchanged, a new worker, a probe of short requests (each on a new connection), long streams
//! open across the command, the version served, the command's exit. A failed cutover's journal
//! and report are kept. With `--with-changes` a thread changes a domain's server weight
//! (runtime path, no reload) and adds and removes blocks the whole time ([`changes`]).

mod changes;
mod summary;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use hapctl::prove::{self, CheckStatus, Options, Report as ProveReport, Subject};
use serde_json::{json, Value};
use testkit::DemoEdge;

use crate::app_edge::{self, HOST};
use crate::stats::ms;
use crate::{Ctx, Report};
use summary::{summarize, Totals};

const FIRST: &str = "1.0.0";
/// Short requests per second, for the whole of each cutover.
const RATE: f64 = 200.0;
const STREAMS: usize = 2;
/// Held streams: the client closes them `STREAM_HOLD` after the command ended, so they span a
/// command of any duration (fixed 4 s streams ended before commands of 4–8.5 s under load).
/// Their announced length only bounds them: it must cover the command's timeout.
const STREAM_HOLD: Duration = Duration::from_secs(1);
const STREAM_LINES: u32 = 1_400;
const STREAM_INTERVAL_MS: u32 = 100;
const SETTLE: Duration = Duration::from_secs(1);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// Cutovers in a row that could not be measured (the edge does not serve) end the series.
const MAX_UNMEASURED_IN_A_ROW: usize = 3;
/// What the re-executed master logs when the old worker did not hand its listening sockets
/// over within HAProxy's 1 s (`_getsocks`): the new worker binds its own, and connections
/// waiting in the old worker's queue are reset when it stops.
const HANDOVER_FAILED: &str = "Failed to get the sockets from the old process";

/// One cutover as the series keeps it.
struct Cutover {
    n: usize,
    kind: &'static str,
    to: String,
    passed: bool,
    /// `name: measured` of each failed check, or why nothing could be measured.
    failed_checks: Vec<String>,
    requests: u64,
    /// The probe's achieved rate over its window (requests/s), and requests started late.
    rate: f64,
    late: u64,
    failed: u64,
    streams: usize,
    intact: usize,
    master_same: bool,
    new_worker: bool,
    /// The master logged [`HANDOVER_FAILED`] during this cutover.
    handover_failed: bool,
    exit_code: Option<i32>,
    command_ms: f64,
    /// Command start → the probe's first answer from the new version.
    switch_ms: Option<f64>,
    proof_ms: f64,
    /// The delivery's own steps (`--json`): name and ms.
    steps: Vec<(String, f64)>,
    /// Runtime changes that landed while this cutover was measured.
    changes: u64,
    journal: Option<PathBuf>,
    /// When it started (UTC) and the 1-min load average then: the machine is shared.
    started_at: String,
    load: Option<f64>,
}

impl Cutover {
    fn to_json(&self) -> Value {
        json!({
            "n": self.n,
            "kind": self.kind,
            "to": self.to,
            "passed": self.passed,
            "failed_checks": self.failed_checks,
            "requests": self.requests,
            "probe_rate": self.rate,
            "probe_late": self.late,
            "failed_requests": self.failed,
            "streams": self.streams,
            "streams_intact": self.intact,
            "master_pid_unchanged": self.master_same,
            "new_worker": self.new_worker,
            "listener_handover_failed": self.handover_failed,
            "exit_code": self.exit_code,
            "command_ms": self.command_ms,
            "switch_ms": self.switch_ms,
            "proof_ms": self.proof_ms,
            "steps": self.steps.iter().map(|(n, ms)| json!({"name": n, "ms": ms})).collect::<Vec<_>>(),
            "changes": self.changes,
            "journal": self.journal,
            "started_at": self.started_at,
            "load_average": self.load,
        })
    }
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let demo = ctx.demo_app_bin()?;
    let count = ctx.count;
    let out_dir = std::env::temp_dir().join(format!(
        "hapctl-bench-cutovers-{}",
        hapctl::clock::unix_now()
    ));
    std::fs::create_dir_all(&out_dir)?;
    let mut log = File::create(out_dir.join("cutovers.jsonl"))?;
    eprintln!(
        "  cutovers: one JSON line per cutover in {}, failed cutovers' journals next to it",
        out_dir.display()
    );

    let app = app_edge::start(&hapctl, &demo, FIRST)?;
    let changes_setup = if ctx.with_changes {
        Some(changes::Setup::new(&app)?)
    } else {
        None
    };
    let procs = app.try_show_proc()?;
    let (master_start, reloads_start) = (procs.master.pid, procs.master.reloads);
    let checks_start = app.check_runs();
    let options = Options {
        streams: STREAMS,
        rate: RATE,
        stream_lines: STREAM_LINES,
        stream_interval_ms: STREAM_INTERVAL_MS,
        stream_hold: Some(STREAM_HOLD),
        settle: SETTLE,
        max_failures: 0,
        expect_version: None,
        host: HOST.to_string(),
        path: "/".into(),
        timeout: COMMAND_TIMEOUT,
        request_timeout: Duration::from_secs(2),
    };

    let stop = AtomicBool::new(false);
    let (cutovers, change_log) = std::thread::scope(|scope| {
        let changer = changes_setup
            .as_ref()
            .map(|setup| scope.spawn(|| setup.run(&app, &stop)));
        let series = series(
            &app,
            &options,
            count,
            &out_dir,
            &mut log,
            changes_setup.as_ref(),
        );
        stop.store(true, Ordering::SeqCst);
        let change_log = changer.map(|h| h.join().expect("the change thread panicked"));
        (series, change_log)
    });
    let cutovers = cutovers?;
    let master_end = app.try_show_proc()?.master.pid;
    let reloads = app
        .try_show_proc()?
        .master
        .reloads
        .saturating_sub(reloads_start);
    let checks = app.check_runs() - checks_start;
    drop(app);
    summarize(
        &cutovers,
        change_log,
        Totals {
            count,
            master_start,
            master_end,
            reloads,
            checks,
            out_dir,
        },
    )
}

/// The cutovers, one after the other. The version a rollback goes back to is the one served
/// before the delivery, as hapctl keeps it (previous generation).
fn series(
    app: &DemoEdge,
    options: &Options,
    count: usize,
    out_dir: &Path,
    log: &mut File,
    changes: Option<&changes::Setup>,
) -> anyhow::Result<Vec<Cutover>> {
    let (mut current, mut previous) = (FIRST.to_string(), None::<String>);
    let mut cutovers: Vec<Cutover> = Vec::new();
    let mut unmeasured = 0;
    // A rollback follows a delivery that exited 0; anything else is followed by a delivery.
    let mut rollback_next = false;
    let settings = app.settings()?;
    for n in 1..=count {
        let (kind, to) = match (&previous, rollback_next) {
            (Some(p), true) => ("rollback", p.clone()),
            _ => ("deliver", format!("2.0.{n}")),
        };
        let args: Vec<&str> = match kind {
            "deliver" => vec!["deliver", &to, "--json"],
            _ => vec!["rollback", "--json"],
        };
        let mut options = options.clone();
        options.expect_version = Some(to.clone());
        let changes_before = changes.map_or(0, changes::Setup::landed);
        let subject = Subject::Command(argv_of(&app.command(&args)));
        let started_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        let load = crate::sys::load_average();
        let master_log = &settings.paths.haproxy_log;
        let log_from = std::fs::metadata(master_log).map_or(0, |m| m.len());
        let mut c = match prove::run(&settings, &options, &subject, &mut |_| {}) {
            Ok(report) => {
                unmeasured = 0;
                let mut c = read_proof(n, kind, &to, &report)?;
                c.changes = changes.map_or(0, changes::Setup::landed) - changes_before;
                let logged = logged_since(master_log, log_from);
                c.handover_failed = logged.contains(HANDOVER_FAILED);
                if !c.passed {
                    c.journal = Some(keep_failure(out_dir, n, &report, &logged)?);
                }
                c
            }
            Err(e) => {
                unmeasured += 1;
                not_measured(n, kind, &to, e.to_string())
            }
        };
        (c.started_at, c.load) = (started_at, load);
        if c.exit_code == Some(0) {
            previous = Some(std::mem::replace(&mut current, to.clone()));
        }
        rollback_next = kind == "deliver" && c.exit_code == Some(0);
        print_cutover(n, kind, &to, &c);
        writeln!(log, "{}", c.to_json())?;
        cutovers.push(c);
        if unmeasured >= MAX_UNMEASURED_IN_A_ROW {
            bail!(
                "{unmeasured} cutovers in a row could not be measured; the last: {:?}",
                cutovers.last().map(|c| &c.failed_checks)
            );
        }
    }
    Ok(cutovers)
}

/// One line per cutover on stderr, the failed checks under it.
fn print_cutover(n: usize, kind: &str, to: &str, c: &Cutover) {
    eprintln!(
        "  {n:>5} {} {kind:<8} {to:<8} {} command {} ms, probe {}/{} failed, streams {}/{} intact, master {}{}, load {}{}",
        c.started_at,
        if c.passed { "pass" } else { "FAIL" },
        ms(c.command_ms),
        c.failed,
        c.requests,
        c.intact,
        c.streams,
        if c.master_same { "same" } else { "CHANGED" },
        if c.handover_failed {
            ", listener handover FAILED"
        } else {
            ""
        },
        c.load.map_or("?".into(), |l| l.to_string()),
        c.failed_checks
            .iter()
            .map(|f| format!("\n        {f}"))
            .collect::<String>(),
    );
}

/// A `Command` built by the harness (binary, state dir, the counting haproxy wrapper in the
/// environment) as the argv prove runs: `env -u … K=V… PROGRAM ARGS…`.
fn argv_of(cmd: &Command) -> Vec<String> {
    let mut argv = vec!["env".to_string()];
    let (set, unset): (Vec<_>, Vec<_>) = cmd.get_envs().partition(|(_, v)| v.is_some());
    // env takes its options (-u) before the assignments.
    for (k, _) in unset {
        argv.extend(["-u".to_string(), k.to_string_lossy().into_owned()]);
    }
    for (k, v) in set {
        let v = v.unwrap_or_default().to_string_lossy();
        argv.push(format!("{}={v}", k.to_string_lossy()));
    }
    argv.push(cmd.get_program().to_string_lossy().into_owned());
    argv.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    argv
}

/// What HAProxy's master and workers logged (their stderr, direct mode) from byte `from` on.
fn logged_since(master_log: &Path, from: u64) -> String {
    let logged = std::fs::read(master_log).unwrap_or_default();
    let from = usize::try_from(from).unwrap_or(0).min(logged.len());
    String::from_utf8_lossy(&logged[from..]).into_owned()
}

/// The journal (prove's own markdown), the whole JSON report of a failed cutover and what
/// HAProxy logged meanwhile.
fn keep_failure(
    out_dir: &Path,
    n: usize,
    report: &ProveReport,
    logged: &str,
) -> anyhow::Result<PathBuf> {
    let journal = prove::journal::write(out_dir, report)
        .with_context(|| format!("cannot write a journal in {}", out_dir.display()))?;
    std::fs::write(
        out_dir.join(format!("proof-{n}.json")),
        serde_json::to_string_pretty(report)?,
    )?;
    std::fs::write(out_dir.join(format!("haproxy-{n}.log")), logged)?;
    Ok(journal)
}

fn not_measured(n: usize, kind: &'static str, to: &str, why: String) -> Cutover {
    Cutover {
        n,
        kind,
        to: to.to_string(),
        passed: false,
        failed_checks: vec![format!("not measured: {why}")],
        requests: 0,
        rate: f64::NAN,
        late: 0,
        failed: 0,
        streams: 0,
        intact: 0,
        master_same: false,
        new_worker: false,
        handover_failed: false,
        exit_code: None,
        command_ms: f64::NAN,
        switch_ms: None,
        proof_ms: f64::NAN,
        steps: Vec::new(),
        changes: 0,
        journal: None,
        started_at: String::new(),
        load: None,
    }
}

fn read_proof(
    n: usize,
    kind: &'static str,
    to: &str,
    report: &ProveReport,
) -> anyhow::Result<Cutover> {
    let [p] = report.proofs.as_slice() else {
        bail!(
            "prove measured {} cutovers for one command",
            report.proofs.len()
        );
    };
    let delivery: Value = serde_json::from_str(&p.run.stdout).unwrap_or(Value::Null);
    let named = |list: &Value, prefix: &str, field: &str| -> Vec<(String, f64)> {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    format!("{prefix}{}", s["name"].as_str().unwrap_or("?")),
                    s[field].as_f64().unwrap_or(f64::NAN),
                )
            })
            .collect()
    };
    // The delivery's steps, then the apply's own (`apply:check`, `apply:reload`, …).
    let mut steps = named(&delivery["steps"], "", "ms");
    steps.extend(named(&delivery["apply"]["steps"], "apply:", "duration"));
    Ok(Cutover {
        n,
        kind,
        to: to.to_string(),
        passed: p.passed,
        failed_checks: p
            .checks
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .map(|c| format!("{}: {}", c.name, c.measured))
            .collect(),
        requests: p.probe.requests,
        rate: match (p.probe.first_ms, p.probe.last_ms) {
            (Some(first), Some(last)) if last > first => {
                (p.probe.requests - 1) as f64 * 1000.0 / (last - first)
            }
            _ => f64::NAN,
        },
        late: p.probe.late,
        failed: p.probe.failed,
        streams: p.streams.len(),
        // Intact and still open when the command ended (prove's streams check).
        intact: p
            .streams
            .iter()
            .filter(|s| s.intact() && s.ended_ms.is_some_and(|e| e > p.run.ended_ms))
            .count(),
        master_same: p.before.processes.master_pid.is_some()
            && p.before.processes.master_pid == p.after.processes.master_pid,
        new_worker: !p.after.new_workers.is_empty(),
        handover_failed: false,
        exit_code: p.run.exit_code,
        command_ms: p.run.duration_ms,
        switch_ms: p
            .probe
            .switches
            .iter()
            .find(|s| s.t_ms >= p.run.started_ms)
            .map(|s| s.t_ms - p.run.started_ms),
        proof_ms: p.duration_ms,
        steps,
        changes: 0,
        journal: None,
        started_at: String::new(),
        load: None,
    })
}
