//! `hapctl prove`: measures a cutover from outside, while it happens, through HAProxy's public
//! bind — the validation of the delivery lesson, stricter (zero failed requests by default).
//!
//! Before the command: the master PID and worker set (master socket; `systemctl show -p
//! MainPID` in systemd mode), N long streams opened and their first line received, a probe of
//! short requests started (a new connection each, at a bounded rate). During: the command runs,
//! bounded, its exit code, duration and output kept. After: the probe goes on for the settle
//! period, then every check is judged with its numbers.
//!
//! The measurement path is its own code ([`http`]: a plain HTTP/1.1 client with a timeout on
//! every connect and read). It shares nothing with the delivery code it judges; from hapctl it
//! only reads the settings and asks the master socket (`show proc`) who runs.

mod http;
pub mod journal;
mod probe;
mod stream;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::haproxy::{CliSocket, Master, ProcList, Supervisor};
use crate::model::{AppName, EdgeState};
use crate::settings::{Mode, Settings};

pub use http::Cause;
pub use stream::StreamLog;

/// Exit code of `hapctl prove` when the measurement ran and a check failed.
pub const EXIT_CHECK_FAILED: u8 = 9;

/// Bound on one `show proc` while measuring.
const MASTER_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between two looks at the master during the command.
const WATCH_INTERVAL: Duration = Duration::from_millis(25);
/// Connect timeout of every request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Short requests asked for the version after the cutover.
const VERSION_REQUESTS: usize = 5;
/// Failures kept with their details (the counts are always complete).
const MAX_FAILURES_KEPT: usize = 1000;
/// Command output kept, per stream (the tail).
const MAX_OUTPUT: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ProveError {
    #[error("cannot measure, nothing was run: {0}")]
    Before(String),
    #[error("invalid prove options: {0}")]
    Options(String),
}

/// What `hapctl prove` was asked to measure, and how.
#[derive(Debug, Clone, Serialize)]
pub struct Options {
    /// Long streams opened before the command.
    pub streams: usize,
    /// Short requests per second.
    pub rate: f64,
    pub stream_lines: u32,
    pub stream_interval_ms: u32,
    #[serde(serialize_with = "ser_ms")]
    pub settle: Duration,
    /// Probe failures tolerated.
    pub max_failures: u64,
    pub expect_version: Option<String>,
    /// `Host` header of every request.
    pub host: String,
    /// Path of the short requests.
    pub path: String,
    /// Bound on the command.
    #[serde(serialize_with = "ser_ms")]
    pub timeout: Duration,
    /// Bound on one short request (connect, write, every read).
    #[serde(serialize_with = "ser_ms")]
    pub request_timeout: Duration,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

impl Options {
    pub fn check(&self) -> Result<(), ProveError> {
        let bad = |m: String| Err(ProveError::Options(m));
        if !(self.rate > 0.0 && self.rate <= 1000.0) {
            return bad(format!(
                "--rate {} must be above 0 and at most 1000 requests/s",
                self.rate
            ));
        }
        if self.streams > 64 {
            return bad(format!("--streams {} must be at most 64", self.streams));
        }
        if self.stream_lines == 0 || self.stream_lines > 100_000 {
            return bad(format!(
                "--stream-lines {} must be 1 to 100000",
                self.stream_lines
            ));
        }
        if self.stream_interval_ms > 60_000 {
            return bad(format!(
                "--stream-interval-ms {} must be at most 60000",
                self.stream_interval_ms
            ));
        }
        if !self.path.starts_with('/') || self.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return bad(format!(
                "--path {:?} must start with / and hold no space or control character",
                self.path
            ));
        }
        if self.host.is_empty() || self.host.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return bad(format!(
                "--host {:?} must be a host name without spaces",
                self.host
            ));
        }
        if let Some(v) = &self.expect_version {
            if !http::is_version(v) {
                return bad(format!(
                    "--expect-version {v:?} must be 1-64 characters of [A-Za-z0-9._-]"
                ));
            }
        }
        if self.request_timeout.is_zero() || self.timeout.is_zero() {
            return bad("--timeout and --request-timeout must be above 0".into());
        }
        Ok(())
    }
}

/// The cutovers to prove.
#[derive(Debug, Clone)]
pub enum Subject {
    /// Any command (`hapctl prove -- COMMAND ARGS…`).
    Command(Vec<String>),
    /// `deliver VERSION` then `rollback`, run by this hapctl binary on the same state dir.
    Cycle {
        version: String,
        app: Option<AppName>,
        hapctl: PathBuf,
    },
}

/// The whole answer of `hapctl prove`: one proof per cutover.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub hapctl_version: &'static str,
    pub started_at: String,
    pub state_dir: PathBuf,
    /// The public bind measured (`settings.edge.http_bind`; 0.0.0.0 / :: mean loopback).
    pub edge: String,
    /// `command` or `cycle`.
    pub kind: &'static str,
    pub options: Options,
    /// Every proof passed and none was skipped.
    pub passed: bool,
    pub exit_code: u8,
    pub proofs: Vec<Proof>,
    /// Cutovers of a cycle that were not attempted, and why.
    pub not_run: Vec<NotRun>,
    /// The markdown journal written for this report.
    pub journal: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NotRun {
    pub label: String,
    pub command: Vec<String>,
    pub reason: String,
}

/// One measured cutover.
#[derive(Debug, Clone, Serialize)]
pub struct Proof {
    pub label: String,
    pub command: Vec<String>,
    pub passed: bool,
    pub started_at: String,
    /// From the first measurement to the last check.
    pub duration_ms: f64,
    pub expect_version: Option<String>,
    pub before: Before,
    pub run: CommandRun,
    pub after: After,
    pub probe: ProbeSummary,
    pub streams: Vec<StreamLog>,
    pub checks: Vec<Check>,
    /// Probe failures, in time order (at most 1000 kept; `probe.failed` counts them all).
    pub failures: Vec<ProbeFailure>,
    pub timeline: Vec<Event>,
    /// How to go back (markdown).
    pub way_back: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Processes {
    /// The master's PID as `show proc` names it.
    pub master_pid: Option<i32>,
    /// The PID from the pidfile (direct) or `systemctl show -p MainPID` (systemd).
    pub supervisor_pid: Option<i32>,
    pub supervisor_source: &'static str,
    pub reloads: Option<u32>,
    pub workers: Vec<i32>,
    pub old_workers: Vec<i32>,
    /// Why the master socket did not answer.
    pub error: Option<String>,
    pub t_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Before {
    pub processes: Processes,
    /// The version a short request got before anything ran.
    pub version_served: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct After {
    pub processes: Processes,
    /// Current workers that were not there before.
    pub new_workers: Vec<i32>,
    /// The version of the last successful probe request.
    pub version_served: Option<String>,
    /// `/version` answers (when `--expect-version` was given).
    pub version_answers: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CommandRun {
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub spawn_error: Option<String>,
    pub started_ms: f64,
    pub ended_ms: f64,
    pub duration_ms: f64,
    /// The tail of its output (64 KiB at most each).
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeSummary {
    pub rate: f64,
    pub requests: u64,
    pub ok: u64,
    pub failed: u64,
    /// Requests started while the command ran.
    pub during_command: u64,
    /// Requests started late because too many were in flight.
    pub late: u64,
    pub by_cause: BTreeMap<&'static str, u64>,
    pub versions: Vec<VersionSeen>,
    /// Every change of the serving version between consecutive successful requests.
    pub switches: Vec<Switch>,
    pub latency_ms: Latency,
    pub first_ms: Option<f64>,
    pub last_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VersionSeen {
    pub version: String,
    pub requests: u64,
    pub first_ms: f64,
    pub last_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Switch {
    pub t_ms: f64,
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub median: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeFailure {
    pub t_ms: f64,
    pub duration_ms: f64,
    pub cause: Cause,
    pub detail: String,
    /// `before`, `during` or `after` the command.
    pub phase: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Skipped => "skipped",
        }
    }
}

/// One judged check: what was required, what was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `master`, `new-worker`, `probe`, `streams`, `version` or `command`.
    pub name: &'static str,
    pub status: Status,
    pub expected: String,
    pub measured: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub t_ms: f64,
    /// `prove`, `command`, `master`, `probe` or `stream`.
    pub source: &'static str,
    pub what: String,
}

/// Where the edge is and what drives its master.
struct Edge {
    addr: SocketAddr,
    master: Master,
    supervisor: Supervisor,
    supervisor_source: &'static str,
    state_dir: PathBuf,
}

/// The address to measure: the public bind, with a wildcard address read as loopback.
pub fn edge_addr(settings: &Settings) -> SocketAddr {
    let bind = settings.edge.http_bind;
    let ip = match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, bind.port())
}

/// The `Host` to measure when none is given: a domain routed to `app` (or to any app), else
/// any domain, else the bind's address (an edge with `default_app` serves any host).
pub fn default_host(settings: &Settings, state: &EdgeState, app: Option<&AppName>) -> String {
    let routed = state
        .app_domains
        .iter()
        .find(|(_, a)| app.map_or(true, |want| *a == want))
        .or_else(|| state.app_domains.iter().next())
        .map(|(d, _)| d.to_string());
    routed
        .or_else(|| {
            state
                .domains
                .keys()
                .find(|d| !d.to_string().starts_with('*'))
                .map(|d| d.to_string())
        })
        .unwrap_or_else(|| edge_addr(settings).ip().to_string())
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn ms(clock: Instant) -> f64 {
    clock.elapsed().as_secs_f64() * 1000.0
}

/// Runs the whole measurement: one proof, or two for a cycle. `progress` hears what happens.
pub fn run(
    settings: &Settings,
    options: &Options,
    subject: &Subject,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, ProveError> {
    options.check()?;
    let supervisor = Supervisor::from_settings(settings);
    let edge = Edge {
        addr: edge_addr(settings),
        master: Master::new(CliSocket::new(
            &settings.paths.master_socket,
            MASTER_TIMEOUT,
        )),
        supervisor,
        supervisor_source: match settings.haproxy.mode {
            Mode::Direct => "pidfile",
            Mode::Systemd => "systemctl show -p MainPID",
        },
        state_dir: settings.state_dir.clone(),
    };
    let started_at = now_rfc3339();
    let mut proofs = Vec::new();
    let mut not_run = Vec::new();
    let kind = match subject {
        Subject::Command(argv) => {
            let label = argv.join(" ");
            proofs.push(prove_one(
                &edge,
                options,
                &label,
                argv,
                options.expect_version.clone(),
                progress,
            )?);
            "command"
        }
        Subject::Cycle {
            version,
            app,
            hapctl,
        } => {
            let base = |verb: &str, extra: &[&str]| {
                let mut argv = vec![
                    hapctl.display().to_string(),
                    "--state-dir".to_string(),
                    settings.state_dir.display().to_string(),
                    verb.to_string(),
                ];
                argv.extend(extra.iter().map(|s| s.to_string()));
                if let Some(app) = app {
                    argv.extend(["--app".to_string(), app.to_string()]);
                }
                argv
            };
            let deliver = base("deliver", &[version]);
            let rollback = base("rollback", &[]);
            let first = prove_one(
                &edge,
                options,
                &format!("deliver {version}"),
                &deliver,
                Some(version.clone()),
                progress,
            )?;
            let back_to = first.before.version_served.clone();
            let delivered = first.run.exit_code == Some(0);
            let same = back_to == *version;
            proofs.push(first);
            if !delivered {
                not_run.push(NotRun {
                    label: "rollback".into(),
                    command: rollback,
                    reason: "the delivery did not exit 0: rolling back now could cut over to a \
                             generation older than the one that served before"
                        .into(),
                });
            } else if same {
                not_run.push(NotRun {
                    label: "rollback".into(),
                    command: rollback,
                    reason: format!(
                        "{version} was already served before the delivery: there is nothing \
                         to roll back to that this cycle started from"
                    ),
                });
            } else {
                match prove_one(
                    &edge,
                    options,
                    &format!("rollback to {back_to}"),
                    &rollback,
                    Some(back_to.clone()),
                    progress,
                ) {
                    Ok(p) => proofs.push(p),
                    Err(e) => not_run.push(NotRun {
                        label: "rollback".into(),
                        command: rollback,
                        reason: e.to_string(),
                    }),
                }
            }
            "cycle"
        }
    };
    let passed = !proofs.is_empty() && proofs.iter().all(|p| p.passed) && not_run.is_empty();
    Ok(Report {
        tool: "hapctl prove",
        hapctl_version: env!("CARGO_PKG_VERSION"),
        started_at,
        state_dir: settings.state_dir.clone(),
        edge: edge.addr.to_string(),
        kind,
        options: options.clone(),
        passed,
        exit_code: if passed { 0 } else { EXIT_CHECK_FAILED },
        proofs,
        not_run,
        journal: None,
    })
}

impl Edge {
    fn processes(&self, clock: Instant) -> (Processes, Option<ProcList>) {
        let (procs, error) = match self.master.show_proc() {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let supervisor_pid = self.supervisor.master_pid();
        (
            Processes {
                master_pid: procs.as_ref().map(|p| p.master.pid),
                supervisor_pid,
                supervisor_source: self.supervisor_source,
                reloads: procs.as_ref().map(|p| p.master.reloads),
                workers: procs
                    .as_ref()
                    .map(|p| p.workers.iter().map(|w| w.pid).collect())
                    .unwrap_or_default(),
                old_workers: procs
                    .as_ref()
                    .map(|p| p.old_workers.iter().map(|w| w.pid).collect())
                    .unwrap_or_default(),
                error,
                t_ms: ms(clock),
            },
            procs,
        )
    }

    /// Reads the processes, retrying for `within` while the master socket does not answer
    /// (a master re-executing refuses connections for a moment).
    fn processes_settled(&self, clock: Instant, within: Duration) -> Processes {
        let deadline = Instant::now() + within;
        loop {
            let (p, procs) = self.processes(clock);
            if procs.is_some() || Instant::now() >= deadline {
                return p;
            }
            thread::sleep(WATCH_INTERVAL);
        }
    }
}

fn prove_one(
    edge: &Edge,
    options: &Options,
    label: &str,
    argv: &[String],
    expect_version: Option<String>,
    progress: &mut dyn FnMut(&str),
) -> Result<Proof, ProveError> {
    let clock = Instant::now();
    let started_at = now_rfc3339();
    let before_err = |m: String| ProveError::Before(m);
    let mut timeline = Vec::new();
    progress(&format!(
        "prove {label}: measuring {} (Host: {})",
        edge.addr, options.host
    ));

    // Before: the edge must serve, the master must answer.
    let timeouts = http::Timeouts {
        connect: CONNECT_TIMEOUT,
        read: options.request_timeout,
    };
    let baseline = http::get(
        edge.addr,
        &options.host,
        &options.path,
        timeouts,
        options.request_timeout,
    )
    .and_then(|r| {
        if (200..300).contains(&r.head.status) {
            http::version_of(&r)
        } else {
            Err(http::HttpError::new(
                Cause::Non2xx,
                format!("status {}", r.head.status),
            ))
        }
    })
    .map_err(|e| {
        before_err(format!(
            "GET {} with Host {} on {} failed before the command ({e}); the edge must serve \
             the app before a cutover can be measured (--host, --path)",
            options.path, options.host, edge.addr
        ))
    })?;
    timeline.push(event(
        ms(clock),
        "prove",
        format!("the edge serves {baseline} (GET {})", options.path),
    ));
    let (first_look, procs) = edge.processes(clock);
    if procs.is_none() {
        return Err(before_err(format!(
            "HAProxy's master socket does not answer `show proc` ({}); prove reads the master \
             PID and workers there",
            first_look.error.unwrap_or_default()
        )));
    }

    // The long streams, each with its first line received.
    let stream_config = stream::StreamConfig {
        addr: edge.addr,
        host: options.host.clone(),
        lines: options.stream_lines,
        interval_ms: options.stream_interval_ms,
        connect_timeout: CONNECT_TIMEOUT,
    };
    let first_line_timeout = Duration::from_secs(5).max(Duration::from_millis(
        u64::from(options.stream_interval_ms) * 3,
    ));
    let pending: Vec<_> = (1..=options.streams)
        .map(|id| stream::start(id, &stream_config, clock))
        .collect();
    let mut open = Vec::new();
    for p in pending {
        let s = p
            .wait_first(first_line_timeout)
            .map_err(|e| before_err(format!("{e} (GET {})", stream_config.target())))?;
        timeline.push(event(
            s.first_line_ms,
            "stream",
            format!(
                "stream {} established, first line from {} ({})",
                s.id,
                s.version,
                stream_config.target()
            ),
        ));
        open.push(s);
    }
    if options.streams > 0 {
        progress(&format!(
            "  {} long stream(s) open on {}",
            open.len(),
            open.iter()
                .map(|s| s.version.as_str())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    // The probe, warmed up so that "before" has requests too.
    let max_duration = options.timeout + options.settle + Duration::from_secs(30);
    let probe = probe::Probe::start(
        probe::ProbeConfig {
            addr: edge.addr,
            host: options.host.clone(),
            path: options.path.clone(),
            rate: options.rate,
            timeouts,
            request_timeout: options.request_timeout,
            max_duration,
        },
        clock,
    );
    timeline.push(event(
        ms(clock),
        "probe",
        format!(
            "short-request probe started: {}/s, a new connection each",
            options.rate
        ),
    ));
    let warmup = Duration::from_secs_f64((5.0 / options.rate).clamp(0.1, 1.0));
    thread::sleep(warmup);

    // The master and workers just before the command, and a watcher during it.
    let (before_procs, before_list) = edge.processes(clock);
    let Some(before_list) = before_list else {
        let _ = probe.stop();
        return Err(before_err(format!(
            "HAProxy's master socket stopped answering `show proc` ({})",
            before_procs.error.unwrap_or_default()
        )));
    };
    let watcher = watch(edge.master.clone(), &before_list, clock, max_duration);

    progress(&format!("  running: {}", argv.join(" ")));
    let run = run_command(argv, &edge.state_dir, options.timeout, clock);
    timeline.push(event(
        run.started_ms,
        "command",
        format!("started: {label}"),
    ));
    timeline.push(event(
        run.ended_ms,
        "command",
        match (&run.spawn_error, run.timed_out, run.exit_code, run.signal) {
            (Some(e), ..) => format!("could not start: {e}"),
            (None, true, ..) => format!("killed after the {:?} timeout", options.timeout),
            (None, false, Some(code), _) => {
                format!("exited {code} after {:.0} ms", run.duration_ms)
            }
            (None, false, None, sig) => format!("ended by signal {}", sig.unwrap_or(0)),
        },
    ));
    progress(&format!(
        "  command ended after {:.0} ms (exit {}); settling {:?}",
        run.duration_ms,
        run.exit_code.map_or("-".into(), |c| c.to_string()),
        options.settle
    ));

    thread::sleep(options.settle);
    let probe_log = probe.stop();
    let probe_stopped = ms(clock);
    timeline.push(event(
        probe_stopped,
        "probe",
        format!("probe stopped after the {:?} settle period", options.settle),
    ));
    let watched = watcher.stop();
    let after_procs = edge.processes_settled(clock, Duration::from_secs(3));

    // The version served now.
    let mut version_answers = Vec::new();
    if let Some(expected) = &expect_version {
        for _ in 0..VERSION_REQUESTS {
            let answer = http::get(
                edge.addr,
                &options.host,
                "/version",
                timeouts,
                options.request_timeout,
            );
            version_answers.push(match answer {
                Ok(r) if r.head.status == 200 => {
                    String::from_utf8_lossy(&r.body).trim().to_string()
                }
                Ok(r) => format!("(status {})", r.head.status),
                Err(e) => format!("({e})"),
            });
            thread::sleep(Duration::from_millis(20));
        }
        timeline.push(event(
            ms(clock),
            "prove",
            format!(
                "GET /version x{VERSION_REQUESTS}: {} (expected {expected})",
                summarize_answers(&version_answers)
            ),
        ));
    }

    // The streams, to their end.
    if !open.is_empty() {
        progress("  waiting for the long streams to end");
    }
    let mut streams = Vec::new();
    for s in open {
        let id = s.id;
        let version = s.version.clone();
        let opened = s.first_line_ms;
        let left = Duration::from_secs_f64(
            ((opened + stream_config.expected_duration().as_secs_f64() * 1000.0 - ms(clock))
                / 1000.0)
                .max(0.0),
        );
        let log = s
            .finish(left + Duration::from_secs(10))
            .unwrap_or_else(|why| {
                let mut l = empty_stream(id, &stream_config);
                l.version = Some(version);
                l.error = Some(why);
                l
            });
        let ended = log.ended_ms.unwrap_or(ms(clock));
        timeline.push(event(
            ended,
            "stream",
            if log.intact() {
                format!(
                    "stream {id} ended: {}/{} lines, all from {}, final chunk",
                    log.received,
                    log.announced,
                    log.version.as_deref().unwrap_or("?")
                )
            } else {
                format!(
                    "stream {id} BROKEN: {}/{} lines{}{}",
                    log.received,
                    log.announced,
                    log.error
                        .as_deref()
                        .map(|e| format!("; {e}"))
                        .unwrap_or_default(),
                    if log.foreign_lines > 0 {
                        format!("; {} line(s) from another generation", log.foreign_lines)
                    } else {
                        String::new()
                    }
                )
            },
        ));
        streams.push(log);
    }

    // Judge.
    let probe = summarize_probe(&probe_log, options.rate, &run);
    let failures: Vec<ProbeFailure> = probe_log
        .outcomes
        .iter()
        .filter_map(|o| {
            o.result.as_ref().err().map(|e| ProbeFailure {
                t_ms: o.t_ms,
                duration_ms: o.duration_ms,
                cause: e.cause,
                detail: e.detail.clone(),
                phase: phase(o.t_ms, &run),
            })
        })
        .take(MAX_FAILURES_KEPT)
        .collect();
    for s in &probe.switches {
        timeline.push(event(
            s.t_ms,
            "probe",
            format!("first request served by {} (before: {})", s.to, s.from),
        ));
    }
    for (i, f) in failures.iter().enumerate() {
        if i == 50 {
            timeline.push(event(
                f.t_ms,
                "probe",
                format!("… {} more failure(s), see Failures", failures.len() - 50),
            ));
            break;
        }
        timeline.push(event(
            f.t_ms,
            "probe",
            format!("request FAILED ({}): {}", f.cause.as_str(), f.detail),
        ));
    }
    timeline.extend(watched);

    let before_all: BTreeSet<i32> = before_list.all_worker_pids().into_iter().collect();
    let new_workers: Vec<i32> = after_procs
        .workers
        .iter()
        .copied()
        .filter(|p| !before_all.contains(p))
        .collect();
    let after = After {
        version_served: probe_log
            .outcomes
            .iter()
            .rev()
            .find_map(|o| o.result.as_ref().ok().cloned()),
        processes: after_procs,
        new_workers,
        version_answers,
    };
    let before = Before {
        processes: before_procs,
        version_served: baseline,
    };
    let checks = vec![
        check_master(&before.processes, &after.processes),
        check_new_worker(&before.processes, &after),
        check_probe(&probe, &failures, options.max_failures),
        check_streams(&streams, &run, options),
        check_version(expect_version.as_deref(), &after.version_answers),
        check_command(&run, options.timeout),
    ];
    let passed = checks.iter().all(|c| c.status != Status::Fail);
    timeline.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    let way_back = way_back(argv, &edge.state_dir, &before, &after, &checks);
    progress(&format!("  {}", if passed { "passed" } else { "FAILED" }));
    Ok(Proof {
        label: label.to_string(),
        command: argv.to_vec(),
        passed,
        started_at,
        duration_ms: ms(clock),
        expect_version,
        before,
        run,
        after,
        probe,
        streams,
        checks,
        failures,
        timeline,
        way_back,
    })
}

fn event(t_ms: f64, source: &'static str, what: String) -> Event {
    Event { t_ms, source, what }
}

fn empty_stream(id: usize, config: &stream::StreamConfig) -> StreamLog {
    StreamLog {
        id,
        target: config.target(),
        version: None,
        header_version: None,
        announced: config.lines,
        received: 0,
        final_chunk: false,
        error: None,
        foreign_lines: 0,
        out_of_sequence: 0,
        problems: Vec::new(),
        opened_ms: 0.0,
        first_line_ms: None,
        last_line_ms: None,
        ended_ms: None,
        max_gap_ms: 0.0,
    }
}

fn summarize_answers(answers: &[String]) -> String {
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

fn phase(t_ms: f64, run: &CommandRun) -> &'static str {
    if t_ms < run.started_ms {
        "before"
    } else if t_ms <= run.ended_ms {
        "during"
    } else {
        "after"
    }
}

fn summarize_probe(log: &probe::ProbeLog, rate: f64, run: &CommandRun) -> ProbeSummary {
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

fn pass_if(ok: bool) -> Status {
    if ok {
        Status::Pass
    } else {
        Status::Fail
    }
}

fn check_master(before: &Processes, after: &Processes) -> Check {
    let expected = "the master PID is the same before and after (a reload, not a restart)".into();
    let (status, measured) = match (before.master_pid, after.master_pid) {
        (Some(b), Some(a)) if a == b => {
            let sup_changed = matches!(
                (before.supervisor_pid, after.supervisor_pid),
                (Some(x), Some(y)) if x != y
            );
            if sup_changed {
                (
                    Status::Fail,
                    format!(
                        "show proc names PID {b} before and after, but the {} changed: {:?} -> {:?}",
                        before.supervisor_source, before.supervisor_pid, after.supervisor_pid
                    ),
                )
            } else {
                (
                    Status::Pass,
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
            Status::Fail,
            format!("PID {b} before, {a} after: HAProxy was restarted, not reloaded; every connection of the old master was cut"),
        ),
        (Some(b), None) => (
            Status::Fail,
            format!(
                "PID {b} before; after the command the master socket does not answer ({}) — {} says {:?}",
                after.error.as_deref().unwrap_or("?"),
                after.supervisor_source,
                after.supervisor_pid
            ),
        ),
        (None, _) => (
            Status::Fail,
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

fn check_new_worker(before: &Processes, after: &After) -> Check {
    let ok = !after.new_workers.is_empty();
    Check {
        name: "new-worker",
        status: pass_if(ok),
        expected: "at least one current worker that was not there before (the reload happened)"
            .into(),
        measured: if ok {
            format!(
                "new worker(s) {:?}; before: workers {:?}, old {:?}; after: old {:?} draining",
                after.new_workers, before.workers, before.old_workers, after.processes.old_workers
            )
        } else {
            format!(
                "no new worker: workers {:?} before, {:?} after — nothing was reloaded",
                before.workers, after.processes.workers
            )
        },
    }
}

fn check_probe(probe: &ProbeSummary, failures: &[ProbeFailure], max: u64) -> Check {
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

fn check_streams(streams: &[StreamLog], run: &CommandRun, options: &Options) -> Check {
    let expected = "every long stream runs to its announced end (final chunk, every line, in \
                    order) without error, every line from the generation it started on, and \
                    stays open until the command has ended"
        .to_string();
    if streams.is_empty() {
        return Check {
            name: "streams",
            status: Status::Skipped,
            expected,
            measured: "no stream asked (--streams 0)".into(),
        };
    }
    let mut broken = Vec::new();
    for s in streams {
        let v = s.version.as_deref().unwrap_or("?");
        if !s.intact() {
            let mut why = Vec::new();
            if let Some(e) = &s.error {
                why.push(e.clone());
            } else if !s.final_chunk {
                why.push("no final chunk".into());
            }
            if s.received != s.announced {
                why.push(format!("{}/{} lines", s.received, s.announced));
            }
            if s.foreign_lines > 0 {
                why.push(format!("{} line(s) not from {v}", s.foreign_lines));
            }
            if s.out_of_sequence > 0 {
                why.push(format!("{} line(s) out of sequence", s.out_of_sequence));
            }
            broken.push(format!("stream {} ({v}): {}", s.id, why.join("; ")));
        } else if s.ended_ms.unwrap_or(0.0) <= run.ended_ms {
            broken.push(format!(
                "stream {} ({v}) ended at {:.0} ms, before the command ended at {:.0} ms: it did \
                 not span the cutover (raise --stream-lines or --stream-interval-ms)",
                s.id,
                s.ended_ms.unwrap_or(0.0),
                run.ended_ms
            ));
        }
    }
    let lines: u32 = streams.iter().map(|s| s.received).sum();
    let max_gap = streams.iter().map(|s| s.max_gap_ms).fold(0.0, f64::max);
    Check {
        name: "streams",
        status: pass_if(broken.is_empty()),
        expected,
        measured: if broken.is_empty() {
            format!(
                "{}/{} streams intact: {} lines of {} each, every one from the generation it \
                 started on ({}); longest pause between lines {:.0} ms",
                streams.len(),
                streams.len(),
                options.stream_lines,
                options.stream_lines,
                streams
                    .iter()
                    .filter_map(|s| s.version.clone())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect::<Vec<_>>()
                    .join(", "),
                max_gap
            )
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

fn check_version(expected: Option<&str>, answers: &[String]) -> Check {
    let Some(expected) = expected else {
        return Check {
            name: "version",
            status: Status::Skipped,
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

fn check_command(run: &CommandRun, timeout: Duration) -> Check {
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

fn way_back(
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
            .any(|c| c.name == name && c.status == Status::Fail)
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

/// Watches the master during the command: new workers, a replaced master, a silent socket.
struct Watcher {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<Vec<Event>>,
}

impl Watcher {
    fn stop(self) -> Vec<Event> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_default()
    }
}

fn watch(master: Master, before: &ProcList, clock: Instant, max: Duration) -> Watcher {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let mut known: BTreeSet<i32> = before.all_worker_pids().into_iter().collect();
    let mut master_pid = before.master.pid;
    let handle = thread::spawn(move || {
        let started = Instant::now();
        let mut events = Vec::new();
        let mut silent_since: Option<(f64, String)> = None;
        while !flag.load(Ordering::SeqCst) && started.elapsed() < max {
            match master.show_proc() {
                Ok(p) => {
                    let t = ms(clock);
                    if let Some((since, why)) = silent_since.take() {
                        events.push(Event {
                            t_ms: since,
                            source: "master",
                            what: format!("master socket silent for {:.0} ms ({why})", t - since),
                        });
                    }
                    if p.master.pid != master_pid {
                        events.push(Event {
                            t_ms: t,
                            source: "master",
                            what: format!(
                                "MASTER REPLACED: PID {master_pid} -> {} (a restart)",
                                p.master.pid
                            ),
                        });
                        master_pid = p.master.pid;
                    }
                    let new: Vec<i32> = p
                        .workers
                        .iter()
                        .map(|w| w.pid)
                        .filter(|pid| !known.contains(pid))
                        .collect();
                    if !new.is_empty() {
                        events.push(Event {
                            t_ms: t,
                            source: "master",
                            what: format!(
                                "reload seen: new worker(s) {new:?}, old worker(s) {:?} keep \
                                 their established connections",
                                p.old_workers.iter().map(|w| w.pid).collect::<Vec<_>>()
                            ),
                        });
                        known.extend(new);
                    }
                }
                Err(e) => {
                    if silent_since.is_none() {
                        silent_since = Some((ms(clock), e.to_string()));
                    }
                }
            }
            thread::sleep(WATCH_INTERVAL);
        }
        if let Some((since, why)) = silent_since {
            events.push(Event {
                t_ms: since,
                source: "master",
                what: format!("master socket silent until the end of the watch ({why})"),
            });
        }
        events
    });
    Watcher { stop, handle }
}

/// Runs the command in its own process group (killed as a whole at the timeout), stdin
/// closed, output kept. `HAPCTL_STATE_DIR` is set to the state dir measured, so a plain
/// `hapctl deliver` in the command acts on the same edge.
fn run_command(argv: &[String], state_dir: &Path, timeout: Duration, clock: Instant) -> CommandRun {
    let started_ms = ms(clock);
    let start = Instant::now();
    let mut run = CommandRun {
        exit_code: None,
        signal: None,
        timed_out: false,
        spawn_error: None,
        started_ms,
        ended_ms: started_ms,
        duration_ms: 0.0,
        stdout: String::new(),
        stderr: String::new(),
    };
    let Some((program, args)) = argv.split_first() else {
        run.spawn_error = Some("no command given".into());
        return run;
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("HAPCTL_STATE_DIR", state_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            run.spawn_error = Some(format!("{program}: {e}"));
            run.ended_ms = ms(clock);
            return run;
        }
    };
    let out = keep_tail(child.stdout.take());
    let err = keep_tail(child.stderr.take());
    let deadline = start + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                run.timed_out = true;
                // Its own group: the command and whatever it started in the foreground.
                // SAFETY: kill(2) has no memory-safety preconditions; the PID is our child's.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    run.ended_ms = ms(clock);
    run.duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    if let Some(status) = status {
        use std::os::unix::process::ExitStatusExt;
        run.exit_code = status.code();
        run.signal = status.signal();
    }
    // A background process can hold the pipes open: wait for them a little, not forever.
    run.stdout = out.take(Duration::from_secs(1));
    run.stderr = err.take(Duration::from_secs(1));
    run
}

struct Tail {
    buf: Arc<Mutex<Vec<u8>>>,
    done: Arc<AtomicBool>,
}

impl Tail {
    fn take(self, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        while !self.done.load(Ordering::SeqCst) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buf).into_owned()
    }
}

fn keep_tail<R: Read + Send + 'static>(pipe: Option<R>) -> Tail {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    if let Some(mut pipe) = pipe {
        let (buf, done) = (buf.clone(), done.clone());
        thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
                        b.extend_from_slice(&chunk[..n]);
                        if b.len() > MAX_OUTPUT {
                            let cut = b.len() - MAX_OUTPUT;
                            b.drain(..cut);
                        }
                    }
                }
            }
            done.store(true, Ordering::SeqCst);
        });
    } else {
        done.store(true, Ordering::SeqCst);
    }
    Tail { buf, done }
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
            Status::Pass
        );
        assert_eq!(
            check_master(&b, &procs(Some(20), Some(20), &[21])).status,
            Status::Fail
        );
        assert_eq!(
            check_master(&b, &procs(None, None, &[])).status,
            Status::Fail
        );
        assert_eq!(
            check_master(&b, &procs(Some(10), Some(30), &[12])).status,
            Status::Fail
        );
    }

    #[test]
    fn the_version_and_command_checks() {
        assert_eq!(check_version(None, &[]).status, Status::Skipped);
        let all = vec!["1.5.0".to_string(); 5];
        assert_eq!(check_version(Some("1.5.0"), &all).status, Status::Pass);
        let mut mixed = all.clone();
        mixed[3] = "1.4.2".into();
        assert_eq!(check_version(Some("1.5.0"), &mixed).status, Status::Fail);
        assert_eq!(check_version(Some("1.5.0"), &[]).status, Status::Fail);
    }

    #[test]
    fn runs_a_command_with_a_bound_and_keeps_its_output() {
        let clock = Instant::now();
        let dir = Path::new("/tmp");
        let argv = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let r = run_command(
            &argv(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
            dir,
            Duration::from_secs(10),
            clock,
        );
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.stdout, "out\n");
        assert_eq!(r.stderr, "err\n");
        let r = run_command(
            &argv(&["sh", "-c", "sleep 5"]),
            dir,
            Duration::from_millis(200),
            clock,
        );
        assert!(r.timed_out);
        assert!(r.duration_ms < 3000.0, "{}", r.duration_ms);
        let r = run_command(
            &argv(&["/nonexistent/x"]),
            dir,
            Duration::from_secs(1),
            clock,
        );
        assert!(r.spawn_error.is_some());
        assert_eq!(
            check_command(&r, Duration::from_secs(1)).status,
            Status::Fail
        );
    }
}
