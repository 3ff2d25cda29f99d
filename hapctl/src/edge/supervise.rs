//! Keeping HAProxy up: what the supervision loop of `hapctl serve` (`daemon/supervision.rs`) asks
//! of the edge. A look at the master; a restart after it died (under the apply lock, from the
//! known-good set, then what lives only in the running worker is rebuilt); the record of it in
//! the apply history. And the operator's side: the stop marker `hapctl haproxy stop` leaves, so
//! an intentional stop is never undone, and the state file the loop writes for `hapctl status`.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{io_err, Edge, EdgeError, STOP_TIMEOUT};
use crate::apply::{ApplyError, ApplyReport, KnownGood, Snapshot};
use crate::clock::{unix_millis, unix_now};
use crate::fsutil;
use crate::haproxy::{
    ReloadKind, ReloadReason, ReloadReport, StartReport, StopReport, SupervisorError,
};
use crate::locks::ApplyLock;
use crate::process::{pid_alive, start_time};
use crate::settings::Mode;
use crate::store::ApplyRecord;

/// How long a restart waits for an apply in progress to finish.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// A master seen running: its PID and kernel start time, so a reused PID is not taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched {
    pub pid: i32,
    start: Option<u64>,
}

impl Watched {
    fn of(pid: i32) -> Watched {
        Watched {
            pid,
            start: start_time(pid),
        }
    }

    fn alive(&self) -> bool {
        pid_alive(self.pid) && start_time(self.pid) == self.start
    }
}

/// One look at the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    Running(Watched),
    /// No master runs, as `hapctl haproxy stop` asked: it stays down.
    Stopped,
    /// No master runs and nobody asked for that; `what` says what became of the last one seen.
    Down {
        what: String,
    },
}

/// What a restart did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// A new master runs, started from the known-good set; the worker's state is rebuilt.
    Started { master: Watched },
    /// Someone else started a master meanwhile: it is left alone, never doubled.
    AlreadyRunning { pid: i32 },
    /// `hapctl haproxy stop` came first: nothing was started.
    StopRequested,
}

/// A reload asked for by someone: what the master did, and the reason recorded for it.
#[derive(Debug, Clone)]
pub struct Reloaded {
    pub report: ReloadReport,
    pub reason: ReloadReason,
}

/// The stop marker's content: the master `haproxy stop` stopped (none if none ran).
#[derive(Debug, Serialize, Deserialize)]
struct StopMark {
    pid: Option<i32>,
    at: i64,
}

/// What the loop of a running `hapctl serve` writes down for `hapctl status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorState {
    pub daemon_pid: i32,
    /// Against PID reuse: a file left by a killed daemon names a PID someone else may hold.
    daemon_start: Option<u64>,
    /// `direct` (hapctl restarts the master) or `systemd` (the unit does; hapctl reconciles).
    pub mode: String,
    /// Restarts since this daemon started: its own (direct) or the unit's it noticed (systemd).
    pub restarts: u64,
    pub failed_starts: u64,
    pub last_event: Option<String>,
    pub last_event_at: Option<i64>,
}

impl SupervisorState {
    /// The state of a loop starting now in this process.
    pub fn new(mode: Mode) -> SupervisorState {
        let pid = std::process::id() as i32;
        SupervisorState {
            daemon_pid: pid,
            daemon_start: start_time(pid),
            mode: match mode {
                Mode::Direct => "direct",
                Mode::Systemd => "systemd",
            }
            .into(),
            restarts: 0,
            failed_starts: 0,
            last_event: None,
            last_event_at: None,
        }
    }

    pub fn event(&mut self, what: String) {
        self.last_event = Some(what);
        self.last_event_at = Some(unix_now());
    }
}

/// Whether HAProxy is supervised, for `hapctl status` and `hapctl haproxy status`.
#[derive(Debug, Clone, Serialize)]
pub struct Supervision {
    /// A `hapctl serve` runs and watches the master.
    pub supervised: bool,
    /// `hapctl haproxy stop` asked for HAProxy to stay down: it is not restarted.
    pub stop_requested: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon: Option<SupervisorState>,
}

impl fmt::Display for Supervision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.daemon {
            Some(d) => {
                let who = if d.mode == "direct" {
                    "restarted by hapctl serve"
                } else {
                    "restarted by its systemd unit, reconciled by hapctl serve"
                };
                write!(
                    f,
                    "supervised ({who}, PID {}): {} restart(s), {} failed start(s)",
                    d.daemon_pid, d.restarts, d.failed_starts
                )?;
                if let (Some(what), Some(at)) = (&d.last_event, d.last_event_at) {
                    write!(f, "; last at {}: {what}", crate::tls::x509::rfc3339(at))?;
                }
            }
            None => write!(
                f,
                "not supervised: no `hapctl serve` runs, so a master that dies stays down"
            )?,
        }
        if self.stop_requested {
            write!(
                f,
                "\nstopped with `hapctl haproxy stop`: not restarted until `hapctl haproxy start`"
            )?;
        }
        Ok(())
    }
}

/// How a master that was this process's child ended.
enum Exit {
    Code(i32),
    Signal(i32),
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exited (status {code})"),
            Exit::Signal(signal) => write!(f, "exited (signal {signal})"),
        }
    }
}

/// What `waitpid` says of a PID.
enum Reap {
    /// This process's child, and it ended (it is reaped now).
    Exited(Exit),
    /// This process's child, not ended yet: still running, or still exiting (a zombie looks
    /// alive to kill(2); a killed master can take seconds to become one under I/O load).
    Child,
    /// Not this process's child: only kill(2) and /proc can tell.
    NotOurs,
}

fn reap(pid: i32) -> Reap {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on one PID; ECHILD (not our child) is harmless.
    match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
        0 => Reap::Child,
        p if p == pid && libc::WIFSIGNALED(status) => {
            Reap::Exited(Exit::Signal(libc::WTERMSIG(status)))
        }
        p if p == pid => Reap::Exited(Exit::Code(libc::WEXITSTATUS(status))),
        _ => Reap::NotOurs,
    }
}

impl Edge {
    fn stop_marker(&self) -> PathBuf {
        self.settings.paths.run_dir.join("haproxy.stopped")
    }

    fn supervisor_state_file(&self) -> PathBuf {
        self.settings.paths.run_dir.join("supervisor.json")
    }

    fn stop_mark(&self) -> Option<StopMark> {
        let bytes = fsutil::read_optional(&self.stop_marker()).ok()??;
        // An unreadable marker still says someone stopped HAProxy on purpose.
        Some(serde_json::from_slice(&bytes).unwrap_or(StopMark { pid: None, at: 0 }))
    }

    /// Whether `hapctl haproxy stop` asked for HAProxy to stay down.
    pub fn stop_requested(&self) -> bool {
        self.stop_mark().is_some()
    }

    /// Starts the master (never a second one) under the apply lock, so no apply rewrites the
    /// files it loads and no restart races it; an earlier `hapctl haproxy stop` no longer holds.
    pub fn start_haproxy(&self) -> Result<StartReport, EdgeError> {
        let _lock =
            ApplyLock::acquire(&self.settings.paths, LOCK_WAIT).map_err(ApplyError::from)?;
        let report = self
            .supervisor()
            .start(self.settings.haproxy.start_timeout)?;
        fsutil::remove_durable(&self.stop_marker())
            .map_err(io_err("cannot remove the stop marker"))?;
        Ok(report)
    }

    /// Stops the master and its workers, leaving the stop marker first, so a supervising
    /// `hapctl serve` does not start it again.
    pub fn stop_haproxy(&self) -> Result<StopReport, EdgeError> {
        let supervisor = self.supervisor();
        let mark = StopMark {
            pid: supervisor.master_pid(),
            at: unix_now(),
        };
        let text = serde_json::to_vec(&mark).expect("a stop mark serializes");
        fsutil::write_atomic(&self.stop_marker(), &text, 0o644)
            .map_err(io_err("cannot write the stop marker"))?;
        Ok(supervisor.stop(STOP_TIMEOUT)?)
    }

    /// Looks at the master, `last` being the one seen before: the process itself (reaped when
    /// it is this process's child), else whatever master the pidfile or the master socket
    /// shows (direct), or the socket alone (systemd: the master is the unit's, and is there for
    /// hapctl once it answers).
    pub fn look_at_master(&self, last: Option<Watched>) -> Look {
        let dead = match last {
            Some(w) => match reap(w.pid) {
                Reap::Exited(exit) => Some((w.pid, Some(exit))),
                // Ours and not reapable yet: whatever /proc says, it has not finished exiting.
                // The next look takes its status (a restart now would only wait for it).
                Reap::Child => return Look::Running(w),
                Reap::NotOurs if w.alive() => return Look::Running(w),
                Reap::NotOurs => Some((w.pid, None)),
            },
            // A master that died before this loop saw it: the pidfile still names it. Not
            // checked for life here: it may still be dying now and gone when the master is
            // looked for below, and the name is used only when none is found.
            None => std::fs::read_to_string(&self.settings.paths.pidfile)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .map(|pid| match reap(pid) {
                    Reap::Exited(exit) => (pid, Some(exit)),
                    Reap::Child | Reap::NotOurs => (pid, None),
                }),
        };
        let what = match dead {
            Some((pid, exit)) => {
                let how = exit.map_or_else(|| "exited".into(), |e| e.to_string());
                format!("master PID {pid} {how}")
            }
            None => "master is not running".to_string(),
        };
        let found = match self.settings.haproxy.mode {
            Mode::Direct => self.supervisor().master_pid(),
            Mode::Systemd => self
                .supervisor()
                .master()
                .show_proc()
                .ok()
                .map(|p| p.master.pid),
        };
        let mark = self.stop_mark();
        match found {
            Some(pid) => {
                // Started again since the stop (e.g. `GET /api/reload`): the stop no longer holds.
                if mark.is_some_and(|m| m.pid != Some(pid)) {
                    let _ = fsutil::remove_durable(&self.stop_marker());
                }
                Look::Running(Watched::of(pid))
            }
            None if mark.is_some() => Look::Stopped,
            None => Look::Down { what },
        }
    }

    /// After HAProxy (re)started: at `serve` startup, after a restart, after systemd restarted
    /// it. What lives only in the running worker is rebuilt: the blocked map through the
    /// runtime API, and the certificates (a change a killed process left half-done). The other
    /// maps are files the new worker read. A block failure is returned; certificate problems
    /// are logged, not fatal: the files HAProxy loaded are whole anyway.
    pub fn after_haproxy_started(&mut self) -> Result<(), EdgeError> {
        let blocks = self.sync_blocks();
        if blocks.is_err() && self.supervisor().master_gone() {
            // Died meanwhile: each socket call would wait out its timeout, and the restart
            // that follows rebuilds all of this again.
            tracing::warn!("HAProxy's master died while its runtime state was rebuilt; the certificates wait for the next start");
            return blocks;
        }
        match self.reconcile_certificates() {
            Ok(fixed) if fixed.is_empty() => {
                tracing::info!("certificates: files, worker and database agree")
            }
            Ok(fixed) => {
                for f in fixed {
                    tracing::warn!("certificates after HAProxy started: {f}");
                }
            }
            Err(e) => tracing::error!("certificates after HAProxy started: cannot reconcile: {e}"),
        }
        blocks
    }

    /// Starts HAProxy again after its master died (direct mode), and records the attempt in
    /// the apply history under `trigger` (e.g. `haproxy restarted: master PID 7 exited
    /// (signal 9)`). Under the apply lock: the live files are made the known-good set (an
    /// interrupted apply is recovered the way every apply recovers it) and the master is
    /// started; then the worker's runtime state is rebuilt.
    pub fn restart_haproxy(&mut self, trigger: &str) -> Result<Restart, EdgeError> {
        let started = Instant::now();
        let started_at_ms = unix_millis();
        let result = self.start_from_known_good(trigger);
        let (outcome, message) = match &result {
            Ok(Restart::Started { master }) => {
                let took = started.elapsed().as_millis();
                let rebuilt = self.rebuild_after_restart();
                let message = format!(
                    "started master PID {} from the known-good set in {took} ms; {rebuilt}",
                    master.pid
                );
                ("restarted", message)
            }
            Ok(_) => return result,
            Err(e) => ("restart-failed", e.to_string()),
        };
        self.record_restart(trigger, started_at_ms, outcome, message)?;
        result
    }

    /// Systemd restarted the master (its PID changed): rebuild the worker's runtime state and
    /// record it under `trigger`.
    pub fn note_restart(&mut self, trigger: &str, master: Watched) -> Result<(), EdgeError> {
        let started_at_ms = unix_millis();
        let rebuilt = self.rebuild_after_restart();
        let message = format!("new master PID {}; {rebuilt}", master.pid);
        self.record_restart(trigger, started_at_ms, "restarted", message)
    }

    /// [`Edge::after_haproxy_started`], said in a few words for the history.
    fn rebuild_after_restart(&mut self) -> String {
        match self.after_haproxy_started() {
            Ok(()) => "blocks and certificates reconciled".to_string(),
            Err(e) => format!("rebuilding the blocked map failed: {e}"),
        }
    }

    /// A restart's row in the apply history (no check, no reload, no file changed).
    fn record_restart(
        &mut self,
        trigger: &str,
        started_at_ms: i64,
        outcome: &str,
        message: String,
    ) -> Result<(), EdgeError> {
        self.record_master_event(trigger, started_at_ms, outcome, message, &[])
    }

    /// A row in the apply history for something done to the master itself (a restart, a
    /// requested reload): no check, no file changed; one reload per reason.
    fn record_master_event(
        &mut self,
        trigger: &str,
        started_at_ms: i64,
        outcome: &str,
        message: String,
        reasons: &[ReloadReason],
    ) -> Result<(), EdgeError> {
        Ok(self.store.record_apply(&ApplyRecord {
            id: 0,
            started_at_ms,
            duration_ms: unix_millis() - started_at_ms,
            trigger: trigger.to_string(),
            outcome: outcome.into(),
            message,
            checks: 0,
            reloads: reasons.len() as i64,
            changed_files: vec![],
            reload_reasons: reasons.iter().map(ToString::to_string).collect(),
        })?)
    }

    /// `hapctl haproxy start` and `POST /v1/haproxy/start`: the committed state applied, then
    /// the master started (never a second one; an earlier stop no longer holds). The start
    /// report is `None` when the apply did not succeed: nothing was started.
    pub fn apply_and_start(
        &mut self,
        trigger: &str,
    ) -> Result<(ApplyReport, Option<StartReport>), EdgeError> {
        let report = self.apply(trigger)?;
        if !report.outcome.is_success() {
            return Ok((report, None));
        }
        let started = self.start_haproxy()?;
        Ok((report, Some(started)))
    }

    /// `hapctl haproxy reload` and `POST /v1/haproxy/reload`: a reload through the master
    /// (never a restart), confirmed by its new worker, asked for by `who`. Under the apply
    /// lock, so it never loads files an apply is still writing; recorded in the apply history
    /// with its reason, failed or not.
    pub fn reload_haproxy(&mut self, who: &str) -> Result<Reloaded, EdgeError> {
        let started_at_ms = unix_millis();
        let reason = ReloadReason::new(ReloadKind::Requested, format!("asked for by {who}"));
        let result = {
            let _lock =
                ApplyLock::acquire(&self.settings.paths, LOCK_WAIT).map_err(ApplyError::from)?;
            self.supervisor()
                .master()
                .reload(self.settings.haproxy.reload_timeout)
        };
        let trigger = "haproxy reload";
        match result {
            Ok(report) => {
                let message = format!(
                    "master PID {} reloaded in {} ms: new worker(s) {:?}, old worker(s) {:?}",
                    report.master_pid,
                    report.duration.as_millis(),
                    report.new_workers,
                    report.old_workers
                );
                self.record_master_event(
                    trigger,
                    started_at_ms,
                    "reloaded",
                    message,
                    std::slice::from_ref(&reason),
                )?;
                Ok(Reloaded { report, reason })
            }
            Err(e) => {
                self.record_master_event(
                    trigger,
                    started_at_ms,
                    "reload-failed",
                    e.to_string(),
                    &[],
                )?;
                Err(e.into())
            }
        }
    }

    fn start_from_known_good(&mut self, trigger: &str) -> Result<Restart, EdgeError> {
        let paths = self.settings.paths.clone();
        let lock = || ApplyLock::acquire(&paths, LOCK_WAIT).map_err(ApplyError::from);
        let mut held = lock()?;
        // Under the lock the marker means an apply was killed half-way (not one in progress).
        if self.settings.paths.apply_marker().exists() {
            drop(held);
            self.apply(&format!(
                "{trigger}: recovery of an interrupted apply first"
            ))?;
            held = lock()?;
            if self.settings.paths.apply_marker().exists() {
                return Err(EdgeError::Io {
                    context: "an interrupted apply could not be recovered".into(),
                    source: std::io::Error::other(
                        "its marker run/apply.pending is still there; see `hapctl status`",
                    ),
                });
            }
        }
        if self.stop_requested() {
            return Ok(Restart::StopRequested);
        }
        let paths = &self.settings.paths;
        let known = KnownGood::new(paths)
            .load()
            .map_err(io_err("cannot read the known-good snapshot"))?;
        let live = Snapshot::read_live(paths).map_err(io_err("cannot read the live files"))?;
        if let Some(known) = known.filter(|k| *k != live) {
            tracing::warn!(
                "the live files differ from the known-good set; restoring it before the restart"
            );
            known
                .write_live(paths, &live, |_| {})
                .map_err(io_err("cannot restore the known-good set"))?;
        }
        let started = self.supervisor().start(self.settings.haproxy.start_timeout);
        drop(held);
        match started {
            Ok(report) => Ok(Restart::Started {
                master: Watched::of(report.master_pid),
            }),
            Err(SupervisorError::AlreadyRunning { pid }) => Ok(Restart::AlreadyRunning { pid }),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the loop's state for `hapctl status`.
    pub fn publish_supervision(&self, state: &SupervisorState) -> Result<(), EdgeError> {
        let text = serde_json::to_vec_pretty(state).expect("the state serializes");
        fsutil::write_atomic(&self.supervisor_state_file(), &text, 0o644)
            .map_err(io_err("cannot write the supervisor state"))
    }

    /// Removes the loop's state file when this process wrote it (the daemon stops).
    pub fn withdraw_supervision(&self) {
        let ours = self
            .read_supervision()
            .is_some_and(|s| s.daemon_pid == std::process::id() as i32);
        if ours {
            let _ = fsutil::remove_durable(&self.supervisor_state_file());
        }
    }

    fn read_supervision(&self) -> Option<SupervisorState> {
        let bytes = fsutil::read_optional(&self.supervisor_state_file()).ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    /// Whether a running `hapctl serve` supervises HAProxy, and what it did.
    pub fn supervision(&self) -> Supervision {
        let daemon = self
            .read_supervision()
            .filter(|s| pid_alive(s.daemon_pid) && start_time(s.daemon_pid) == s.daemon_start);
        Supervision {
            supervised: daemon.is_some(),
            stop_requested: self.stop_requested(),
            daemon,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // The child is reaped by `reap`, the function under test, not by `Child::wait`.
    #[allow(clippy::zombie_processes)]
    fn reap_tells_a_running_child_its_signal_and_a_process_not_ours() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(matches!(reap(pid), Reap::Child));
        crate::process::send_signal(pid, libc::SIGKILL).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let exit = loop {
            match reap(pid) {
                Reap::Exited(exit) => break exit,
                Reap::Child if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = child.kill();
                    panic!("the killed child was not reaped with its status");
                }
            }
        };
        assert_eq!(exit.to_string(), "exited (signal 9)");
        // Reaped once: a second look finds no child of ours.
        assert!(matches!(reap(pid), Reap::NotOurs));
        assert!(matches!(reap(1), Reap::NotOurs));
    }
}
