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
pub mod http;
pub mod journal;
mod options;
mod probe;
mod proof;
mod report;
mod stream;
mod summary;
mod watch;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::haproxy::{CliSocket, Master, ProcList, Supervisor};
use crate::model::{AppName, EdgeState};
use crate::settings::{Mode, Settings};

pub use http::Cause;
pub use options::{Options, ProveError, Subject};
pub use report::{
    After, Before, Check, CheckStatus, CommandRun, Event, Latency, NotRun, ProbeFailure,
    ProbeSummary, Processes, Proof, Report, Switch, VersionSeen,
};
pub use stream::StreamLog;

use proof::prove_one;

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
    let edge = Edge::from_settings(settings);
    let started_at = now_rfc3339();
    let mut proofs = Vec::new();
    let mut not_run = Vec::new();
    let kind = match subject {
        Subject::Command(argv) => {
            let label = argv.join(" ");
            let expect = options.expect_version.clone();
            proofs.push(prove_one(&edge, options, &label, argv, expect, progress)?);
            "command"
        }
        Subject::Cycle {
            version,
            app,
            hapctl,
        } => {
            let cycle = Cycle {
                edge: &edge,
                options,
                argv: CycleArgv {
                    settings,
                    hapctl,
                    app: app.as_ref(),
                },
            };
            cycle.prove(version, &mut proofs, &mut not_run, progress)?;
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

/// The command lines of a cycle: hapctl on this state folder, for the app if one is named.
struct CycleArgv<'a> {
    settings: &'a Settings,
    hapctl: &'a Path,
    app: Option<&'a AppName>,
}

impl CycleArgv<'_> {
    fn of(&self, verb: &str, extra: &[&str]) -> Vec<String> {
        let mut argv = vec![
            self.hapctl.display().to_string(),
            "--state-dir".to_string(),
            self.settings.state_dir.display().to_string(),
            verb.to_string(),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        if let Some(app) = self.app {
            argv.extend(["--app".to_string(), app.to_string()]);
        }
        argv
    }
}

/// A delivery then the rollback to what served before, each proved.
struct Cycle<'a> {
    edge: &'a Edge,
    options: &'a Options,
    argv: CycleArgv<'a>,
}

impl Cycle<'_> {
    /// Proves the delivery of `version`, then the rollback unless it would not go back to
    /// what served before (then `not_run` says why).
    fn prove(
        &self,
        version: &str,
        proofs: &mut Vec<Proof>,
        not_run: &mut Vec<NotRun>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(), ProveError> {
        let deliver = self.argv.of("deliver", &[version]);
        let rollback = self.argv.of("rollback", &[]);
        let label = format!("deliver {version}");
        let expect = Some(version.to_string());
        let first = prove_one(self.edge, self.options, &label, &deliver, expect, progress)?;
        let back_to = first.before.version_served.clone();
        let delivered = first.run.exit_code == Some(0);
        let same = back_to == *version;
        proofs.push(first);
        let skipped = |reason: String| NotRun {
            label: "rollback".into(),
            command: rollback.clone(),
            reason,
        };
        if !delivered {
            not_run.push(skipped(
                "the delivery did not exit 0: rolling back now could cut over to a \
                 generation older than the one that served before"
                    .into(),
            ));
        } else if same {
            not_run.push(skipped(format!(
                "{version} was already served before the delivery: there is nothing \
                 to roll back to that this cycle started from"
            )));
        } else {
            let label = format!("rollback to {back_to}");
            let expect = Some(back_to.clone());
            match prove_one(self.edge, self.options, &label, &rollback, expect, progress) {
                Ok(p) => proofs.push(p),
                Err(e) => not_run.push(skipped(e.to_string())),
            }
        }
        Ok(())
    }
}

impl Edge {
    fn from_settings(settings: &Settings) -> Edge {
        Edge {
            addr: edge_addr(settings),
            master: Master::new(CliSocket::new(
                &settings.paths.master_socket,
                MASTER_TIMEOUT,
            )),
            supervisor: Supervisor::from_settings(settings),
            supervisor_source: match settings.haproxy.mode {
                Mode::Direct => "pidfile",
                Mode::Systemd => "systemctl show -p MainPID",
            },
            state_dir: settings.state_dir.clone(),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::summary::{probe_events, probe_failures, summarize_probe};
    use super::*;

    fn outcome(t_ms: f64, result: Result<&str, Cause>) -> probe::RequestOutcome {
        probe::RequestOutcome {
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
