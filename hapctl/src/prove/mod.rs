//! `hapctl prove`: measures a cutover from outside, while it happens, through HAProxy's public
//! bind — the validation of the delivery lesson, stricter (zero failed requests by default).
//!
//! Before the command: the master PID and worker set (master socket; `systemctl show -p
//! MainPID` in systemd mode), N long streams opened and their first line received, a probe of
//! short requests started (a new connection each, at a bounded rate). During: the command runs,
//! bounded, its exit code, duration and output kept. After: the probe goes on for the settle
//! period, then every check is judged with its numbers ([`checks`]).
//!
//! The measurement path is its own code ([`http`]: a plain HTTP/1.1 client with a timeout on
//! every connect and read). It shares nothing with the delivery code it judges; from hapctl it
//! only reads the settings (and the routed domains, for the default Host) and asks the master
//! socket (`show proc`) who runs.

mod checks;
mod command;
pub(crate) mod http;
pub mod journal;
mod options;
mod probe;
mod report;
mod stream;
mod summary;
mod watch;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::haproxy::{CliSocket, Master, ProcList, Supervisor};
use crate::model::{AppName, EdgeState};
use crate::settings::{Mode, Settings};

pub use http::Cause;
pub use options::{Options, ProveError, Subject};
pub use report::{
    After, Before, Check, CommandRun, Event, Latency, NotRun, ProbeFailure, ProbeSummary,
    Processes, Proof, Report, Status, Switch, VersionSeen,
};
pub use stream::StreamLog;

use report::event;
use summary::{probe_events, probe_failures, summarize_probe};

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
        .find(|(_, a)| app.is_none_or(|want| *a == want))
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

/// One proof: measure before, run the command, measure after, judge.
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
    let mut timeline = Vec::new();
    progress(&format!(
        "prove {label}: measuring {} (Host: {})",
        edge.addr, options.host
    ));
    let timeouts = http::Timeouts {
        connect: CONNECT_TIMEOUT,
        read: options.request_timeout,
    };

    // Before: the edge serves, the master answers, the streams are established.
    let baseline = baseline(edge, options, timeouts)?;
    timeline.push(event(
        ms(clock),
        "prove",
        format!("the edge serves {baseline} (GET {})", options.path),
    ));
    if let (p, None) = edge.processes(clock) {
        return Err(ProveError::Before(format!(
            "HAProxy's master socket does not answer `show proc` ({}); prove reads the master \
             PID and workers there",
            p.error.unwrap_or_default()
        )));
    }
    let stream_config = stream::StreamConfig {
        addr: edge.addr,
        host: options.host.clone(),
        lines: options.stream_lines,
        interval_ms: options.stream_interval_ms,
        connect_timeout: CONNECT_TIMEOUT,
        hold: options.stream_hold,
        command_end: stream::CommandEnd::default(),
    };
    let open = open_streams(&stream_config, options.streams, clock, &mut timeline)?;
    if !open.is_empty() {
        let versions: BTreeSet<&str> = open.iter().map(|s| s.version.as_str()).collect();
        progress(&format!(
            "  {} long stream(s) open on {}",
            open.len(),
            versions.into_iter().collect::<Vec<_>>().join(", ")
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
    thread::sleep(Duration::from_secs_f64(
        (5.0 / options.rate).clamp(0.1, 1.0),
    ));

    // The master and workers just before the command, and a watcher during it.
    let (before_procs, before_list) = edge.processes(clock);
    let Some(before_list) = before_list else {
        let _ = probe.stop();
        stream_config.command_end.set(ms(clock));
        return Err(ProveError::Before(format!(
            "HAProxy's master socket stopped answering `show proc` ({})",
            before_procs.error.unwrap_or_default()
        )));
    };
    let watcher = watch::watch(edge.master.clone(), &before_list, clock, max_duration);

    // During.
    progress(&format!("  running: {}", argv.join(" ")));
    let run = command::run_command(argv, &edge.state_dir, options.timeout, clock);
    stream_config.command_end.set(run.ended_ms);
    timeline.push(event(
        run.started_ms,
        "command",
        format!("started: {label}"),
    ));
    timeline.push(event(
        run.ended_ms,
        "command",
        describe_end(&run, options.timeout),
    ));
    progress(&format!(
        "  command ended after {:.0} ms (exit {}); settling {:?}",
        run.duration_ms,
        run.exit_code.map_or("-".into(), |c| c.to_string()),
        options.settle
    ));

    // After: settle, then the processes, the version served, the streams to their end.
    thread::sleep(options.settle);
    let probe_log = probe.stop();
    timeline.push(event(
        ms(clock),
        "probe",
        format!("probe stopped after the {:?} settle period", options.settle),
    ));
    timeline.extend(watcher.stop());
    let after_procs = edge.processes_settled(clock, Duration::from_secs(3));
    let version_answers = match &expect_version {
        Some(expected) => {
            let answers = ask_version(edge, options, timeouts);
            timeline.push(event(
                ms(clock),
                "prove",
                format!(
                    "GET /version x{VERSION_REQUESTS}: {} (expected {expected})",
                    checks::summarize_answers(&answers)
                ),
            ));
            answers
        }
        None => Vec::new(),
    };
    if !open.is_empty() {
        progress("  waiting for the long streams to end");
    }
    let streams = finish_streams(open, &stream_config, clock, &mut timeline);

    // Judge.
    let probe = summarize_probe(&probe_log, options.rate, &run);
    let failures = probe_failures(&probe_log, &run);
    probe_events(&probe_log, &probe, &mut timeline);
    timeline.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    let before_all: BTreeSet<i32> = before_list.all_worker_pids().into_iter().collect();
    let after = After {
        new_workers: after_procs
            .workers
            .iter()
            .copied()
            .filter(|p| !before_all.contains(p))
            .collect(),
        version_served: probe_log
            .outcomes
            .iter()
            .rev()
            .find_map(|o| o.result.as_ref().ok().cloned()),
        processes: after_procs,
        version_answers,
    };
    let before = Before {
        processes: before_procs,
        version_served: baseline,
    };
    let checks = vec![
        checks::check_master(&before.processes, &after.processes),
        checks::check_new_worker(&before.processes, &after),
        checks::check_probe(&probe, &failures, options.max_failures),
        checks::check_streams(&streams, &run, options),
        checks::check_version(expect_version.as_deref(), &after.version_answers),
        checks::check_command(&run, options.timeout),
    ];
    let passed = checks.iter().all(|c| c.status != Status::Fail);
    let way_back = checks::way_back(argv, &edge.state_dir, &before, &after, &checks);
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

/// The version the edge serves before anything runs: it must serve, or nothing is measured.
fn baseline(
    edge: &Edge,
    options: &Options,
    timeouts: http::Timeouts,
) -> Result<String, ProveError> {
    http::get(
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
        ProveError::Before(format!(
            "GET {} with Host {} on {} failed before the command ({e}); the edge must serve \
             the app before a cutover can be measured (--host, --path)",
            options.path, options.host, edge.addr
        ))
    })
}

/// Opens every stream at once, then waits for each first line.
fn open_streams(
    config: &stream::StreamConfig,
    count: usize,
    clock: Instant,
    timeline: &mut Vec<Event>,
) -> Result<Vec<stream::OpenStream>, ProveError> {
    let first_line_timeout =
        Duration::from_secs(5).max(Duration::from_millis(u64::from(config.interval_ms) * 3));
    let pending: Vec<_> = (1..=count)
        .map(|id| stream::start(id, config, clock))
        .collect();
    let mut open = Vec::new();
    for p in pending {
        let s = p
            .wait_first(first_line_timeout)
            .map_err(|e| ProveError::Before(format!("{e} (GET {})", config.target())))?;
        timeline.push(event(
            s.first_line_ms,
            "stream",
            format!(
                "stream {} established, first line from {} ({})",
                s.id,
                s.version,
                config.target()
            ),
        ));
        open.push(s);
    }
    Ok(open)
}

/// Waits for each stream to end (bounded by its announced length, or its close when held,
/// plus 10 s).
fn finish_streams(
    open: Vec<stream::OpenStream>,
    config: &stream::StreamConfig,
    clock: Instant,
    timeline: &mut Vec<Event>,
) -> Vec<StreamLog> {
    let mut streams = Vec::new();
    for s in open {
        let (id, version) = (s.id, s.version.clone());
        let end_ms = config
            .close_at()
            .unwrap_or(s.first_line_ms + config.expected_duration().as_secs_f64() * 1000.0);
        let left = Duration::from_secs_f64(((end_ms - ms(clock)) / 1000.0).max(0.0));
        let log = s
            .finish(left + Duration::from_secs(10))
            .unwrap_or_else(|why| {
                let mut l = StreamLog::new(id, config, 0.0);
                l.version = Some(version);
                l.error = Some(why);
                l
            });
        let what = if log.intact() {
            format!(
                "stream {id} ended: {}/{} lines, all from {}, {}",
                log.received,
                log.announced,
                log.version.as_deref().unwrap_or("?"),
                if log.closed_by_client {
                    "closed by the client after the command and the hold"
                } else {
                    "final chunk"
                }
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
        };
        timeline.push(event(log.ended_ms.unwrap_or(ms(clock)), "stream", what));
        streams.push(log);
    }
    streams
}

/// `GET /version` a few times, each on a new connection: the bodies, or what went wrong.
fn ask_version(edge: &Edge, options: &Options, timeouts: http::Timeouts) -> Vec<String> {
    let mut answers = Vec::new();
    for _ in 0..VERSION_REQUESTS {
        let answer = http::get(
            edge.addr,
            &options.host,
            "/version",
            timeouts,
            options.request_timeout,
        );
        answers.push(match answer {
            Ok(r) if r.head.status == 200 => String::from_utf8_lossy(&r.body).trim().to_string(),
            Ok(r) => format!("(status {})", r.head.status),
            Err(e) => format!("({e})"),
        });
        thread::sleep(Duration::from_millis(20));
    }
    answers
}

fn describe_end(run: &CommandRun, timeout: Duration) -> String {
    match (&run.spawn_error, run.timed_out, run.exit_code, run.signal) {
        (Some(e), ..) => format!("could not start: {e}"),
        (None, true, ..) => format!("killed after the {timeout:?} timeout"),
        (None, false, Some(code), _) => format!("exited {code} after {:.0} ms", run.duration_ms),
        (None, false, None, sig) => format!("ended by signal {}", sig.unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(t_ms: f64, result: Result<&str, Cause>) -> probe::Outcome {
        probe::Outcome {
            t_ms,
            duration_ms: 1.0,
            result: result
                .map(str::to_string)
                .map_err(|c| http::HttpError::new(c, "x")),
        }
    }

    #[test]
    fn the_probe_summary_counts_switches_phases_and_streaks() {
        let log = probe::ProbeLog {
            outcomes: vec![
                outcome(10.0, Ok("1.4.2")),
                outcome(30.0, Ok("1.4.2")),
                outcome(50.0, Err(Cause::Refused)),
                outcome(70.0, Err(Cause::Refused)),
                outcome(90.0, Err(Cause::Timeout)),
                outcome(110.0, Ok("1.5.0")),
                outcome(130.0, Ok("1.5.0")),
            ],
            late: 0,
        };
        let run = CommandRun {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            spawn_error: None,
            started_ms: 40.0,
            ended_ms: 100.0,
            duration_ms: 60.0,
            stdout: String::new(),
            stderr: String::new(),
        };
        let s = summarize_probe(&log, 50.0, &run);
        assert_eq!((s.requests, s.ok, s.failed, s.during_command), (7, 4, 3, 3));
        assert_eq!(s.by_cause.get("refused"), Some(&2));
        assert_eq!(s.switches.len(), 1);
        assert_eq!(
            (s.switches[0].from.as_str(), s.switches[0].to.as_str()),
            ("1.4.2", "1.5.0")
        );
        let failures = probe_failures(&log, &run);
        assert!(failures.iter().all(|f| f.phase == "during"));
        let mut timeline = Vec::new();
        probe_events(&log, &s, &mut timeline);
        let whats: Vec<&str> = timeline.iter().map(|e| e.what.as_str()).collect();
        assert_eq!(whats.len(), 3, "{whats:?}");
        assert!(
            whats[1].starts_with("2 requests in a row FAILED (refused)"),
            "{whats:?}"
        );
        assert!(
            whats[2].starts_with("request FAILED (timeout)"),
            "{whats:?}"
        );
    }
}
