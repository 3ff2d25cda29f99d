//! Which master runs, if any: from the pidfile, the master socket or the systemd unit, and
//! whether a silent one is re-executing (a reload) or gone.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::haproxy::proc_list::ProcList;
use crate::haproxy::systemctl::systemd_main_pid;
use crate::process::pid_alive;

use super::{Draining, HaproxyStatus, Supervisor, POLL_INTERVAL};

/// How long an empty pidfile with a silent master socket is taken for a master re-executing
/// (a reload) rather than for none: on a loaded machine a re-execution was seen to take 1.75 s.
const REEXEC_GRACE: Duration = Duration::from_millis(2500);

/// Bound on one look at whether a worker is ready (a master busy forking answers late).
const POLL_BOUND: Duration = Duration::from_secs(1);

impl Supervisor {
    /// The running master's PID. Direct: from the pidfile (verified alive and HAProxy), else
    /// from the master socket. Systemd: the unit's MainPID.
    pub fn master_pid(&self) -> Option<i32> {
        match self {
            Supervisor::Direct { .. } => self
                .pidfile_pid()
                .or_else(|| self.master().show_proc().ok().map(|p| p.master.pid)),
            Supervisor::Systemd { unit, .. } => systemd_main_pid(unit).ok().flatten(),
        }
    }

    /// The process list once the master answers and its current worker is ready, waiting up
    /// to `timeout` while it re-executes (a reload: its socket refuses connections and its
    /// pidfile is rewritten for a moment) and, from 3.1, while the new worker loads (until
    /// then `@1` reaches the worker before it). `None` when no master runs, or it never
    /// answered.
    pub fn procs_when_answering(&self, timeout: Duration) -> Option<ProcList> {
        let started = Instant::now();
        let mut procs = self.procs_of_answering_master(timeout)?;
        let master = self.master();
        loop {
            let Some(current) = procs.workers.first().map(|w| w.pid) else {
                return Some(procs);
            };
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() || master.worker_ready(current, left.min(POLL_BOUND)) {
                return Some(procs);
            }
            thread::sleep(POLL_INTERVAL);
            procs = master.show_proc().unwrap_or(procs);
        }
    }

    fn procs_of_answering_master(&self, timeout: Duration) -> Option<ProcList> {
        let master = self.master();
        let started = Instant::now();
        let pid = loop {
            if let Ok(procs) = master.show_proc() {
                return Some(procs);
            }
            match self.master_pid() {
                Some(pid) => break pid,
                None if self.master_gone() => return None,
                None if started.elapsed() < REEXEC_GRACE.min(timeout) => {
                    thread::sleep(POLL_INTERVAL)
                }
                None => return None,
            }
        };
        loop {
            match master.show_proc() {
                Ok(procs) => return Some(procs),
                Err(_) if !pid_alive(pid) || started.elapsed() >= timeout => return None,
                Err(_) => thread::sleep(POLL_INTERVAL),
            }
        }
    }

    pub fn status(&self) -> HaproxyStatus {
        let master = self.master();
        let procs = master.show_proc().ok();
        let draining = procs
            .iter()
            .flat_map(|p| &p.old_workers)
            .map(|w| Draining {
                pid: w.pid,
                connections: master.worker_connections(w.pid),
            })
            .collect();
        let master_pid = match self {
            Supervisor::Direct { .. } => self.pidfile_pid(),
            Supervisor::Systemd { unit, .. } => systemd_main_pid(unit).ok().flatten(),
        }
        .or(procs.as_ref().map(|p| p.master.pid));
        HaproxyStatus {
            running: master_pid.is_some(),
            master_pid,
            procs,
            draining,
        }
    }

    pub(super) fn pidfile_pid(&self) -> Option<i32> {
        let Supervisor::Direct { binary, .. } = self else {
            return None;
        };
        let pid = self.pidfile_number()?;
        // A stale pidfile may name a PID reused by an unrelated process.
        (pid_alive(pid) && runs_haproxy(pid, binary)).then_some(pid)
    }

    /// Whether no master runs and none is re-executing (direct mode): no pidfile (stopped),
    /// or one naming a PID that no process has (killed, crashed). A re-executing master
    /// keeps its PID and only empties its pidfile for a moment. Whether a live PID runs
    /// HAProxy is not asked: in the middle of its `execve` a master's command line reads
    /// empty. Under systemd this is not known here: false.
    pub fn master_gone(&self) -> bool {
        let Supervisor::Direct { pidfile, .. } = self else {
            return false;
        };
        !pidfile.exists() || self.pidfile_number().is_some_and(|pid| !pid_alive(pid))
    }

    /// The PID the pidfile names, alive or not (direct mode).
    fn pidfile_number(&self) -> Option<i32> {
        let Supervisor::Direct { pidfile, .. } = self else {
            return None;
        };
        fs::read_to_string(pidfile).ok()?.trim().parse().ok()
    }
}

/// Whether PID runs the configured binary (or anything named haproxy). Unverifiable (no
/// /proc access) counts as yes: the pidfile is then the only evidence there is.
fn runs_haproxy(pid: i32, binary: &Path) -> bool {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return true;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let argv0 = Path::new(std::ffi::OsStr::from_bytes(argv0));
    argv0.file_name() == binary.file_name() || argv0.to_string_lossy().contains("haproxy")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A direct-mode supervisor whose files are in `dir` (no master is started).
    fn direct_in(dir: &Path) -> Supervisor {
        Supervisor::Direct {
            binary: PathBuf::from("/usr/sbin/haproxy"),
            files: vec![],
            master_socket: dir.join("master.sock"),
            pidfile: dir.join("haproxy.pid"),
            log_file: dir.join("haproxy.log"),
        }
    }

    #[test]
    fn a_stale_pidfile_is_not_a_running_master() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("haproxy.pid");
        // Our own PID: alive, but not HAProxy.
        fs::write(&pidfile, std::process::id().to_string()).unwrap();
        let supervisor = direct_in(dir.path());
        assert_eq!(supervisor.master_pid(), None);
        assert!(!supervisor.status().running);
    }

    #[test]
    fn only_a_pidfile_naming_no_process_or_none_at_all_means_the_master_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("haproxy.pid");
        let supervisor = direct_in(dir.path());
        assert!(supervisor.master_gone(), "no pidfile: stopped");
        fs::write(&pidfile, "").unwrap();
        assert!(!supervisor.master_gone(), "emptied while it re-executes");
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        dead.wait().unwrap();
        fs::write(&pidfile, dead.id().to_string()).unwrap();
        assert!(supervisor.master_gone(), "names a PID that exited");
        fs::write(&pidfile, std::process::id().to_string()).unwrap();
        assert!(
            !supervisor.master_gone(),
            "a live PID that does not look like HAProxy may be a master inside its execve"
        );
    }
}
