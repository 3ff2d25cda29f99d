//! Starting and stopping HAProxy's master, run either by hapctl itself (`direct`) or by a
//! systemd unit; finding it is in `find.rs`. Reloads are not here: both modes reload through
//! the same master socket ([`Supervisor::master`]), never by restarting.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::process::{pid_alive, send_signal, ProcessError};
use crate::settings::{Mode, Settings};

use super::master::{Master, MasterError, SOCKET_TIMEOUT};
use super::messages::{self, LogMark};
use super::proc_list::ProcList;
use super::socket::{CliSocket, SocketError};
use super::systemctl::{systemctl, systemd_main_pid, SystemctlError};

mod find;

/// Pause between two looks at a starting or stopping process.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How long a master gets to die after SIGKILL before we give up on it.
const KILL_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("HAProxy is already running (master PID {pid}); reload it, or stop it first")]
    AlreadyRunning { pid: i32 },
    #[error("something that is not an HAProxy master answers on {path}; stop it or set another paths.master_socket")]
    SocketBusy { path: PathBuf },
    /// HAProxy or systemctl could not be run (missing binary, timeout, ...).
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Socket(SocketError),
    #[error("HAProxy exited during startup ({status}). {}", describe_log(.log))]
    StartFailed { status: String, log: Vec<String> },
    #[error("no running HAProxy worker was reported on {} within {after:?} (a master hapctl started is stopped again; a systemd unit must run HAProxy with `-S` on that socket). {}", .socket.display(), describe_log(.log))]
    StartTimeout {
        after: Duration,
        socket: PathBuf,
        log: Vec<String>,
    },
    #[error("HAProxy's master (PID {pid}) still runs {after:?} after SIGTERM and SIGKILL; check it with `ps`")]
    StopTimeout { pid: i32, after: Duration },
    #[error(transparent)]
    Systemctl(#[from] SystemctlError),
}

fn describe_log(log: &[String]) -> String {
    if log.is_empty() {
        "No message from HAProxy was captured; see its log (or the unit's journal)".into()
    } else {
        format!("HAProxy's log: {}", log.join(" | "))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartReport {
    pub master_pid: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReport {
    NotRunning,
    /// The master exited after SIGTERM (or `systemctl stop`).
    Stopped {
        pid: i32,
    },
    /// It did not exit in time and was killed with its workers.
    Killed {
        pid: i32,
    },
}

/// Serializable for `status --json` and the API.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HaproxyStatus {
    pub running: bool,
    pub master_pid: Option<i32>,
    /// The master's process list, when its socket answers.
    pub procs: Option<ProcList>,
    /// Old workers still finishing their connections after a reload.
    pub draining: Vec<Draining>,
}

/// An old worker in its soft stop.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Draining {
    pub pid: i32,
    /// Connections it still serves (`None`: it did not answer, it is exiting).
    pub connections: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Supervisor {
    /// hapctl runs the master itself: detached, with a pidfile, stderr in `log_file`.
    Direct {
        binary: PathBuf,
        /// `-f` files, in load order.
        files: Vec<PathBuf>,
        master_socket: PathBuf,
        pidfile: PathBuf,
        log_file: PathBuf,
    },
    /// A systemd unit runs the master, which must listen on `master_socket` (`-S`).
    Systemd {
        unit: String,
        master_socket: PathBuf,
    },
}

impl Supervisor {
    pub fn from_settings(settings: &Settings) -> Supervisor {
        let paths = &settings.paths;
        match settings.haproxy.mode {
            Mode::Direct => Supervisor::Direct {
                binary: settings.haproxy.binary.clone(),
                files: paths.config_files().map(Path::to_path_buf).to_vec(),
                master_socket: paths.master_socket.clone(),
                pidfile: paths.pidfile.clone(),
                log_file: paths.haproxy_log.clone(),
            },
            Mode::Systemd => Supervisor::Systemd {
                unit: settings.haproxy.systemd_unit.clone(),
                master_socket: paths.master_socket.clone(),
            },
        }
    }

    /// The master, to reload or query it. In direct mode it reads failure reasons from the log.
    pub fn master(&self) -> Master {
        let master = Master::new(CliSocket::new(self.master_socket(), SOCKET_TIMEOUT));
        match self {
            Supervisor::Direct { log_file, .. } => master.with_log_file(log_file),
            Supervisor::Systemd { .. } => master,
        }
    }

    fn master_socket(&self) -> &Path {
        match self {
            Supervisor::Direct { master_socket, .. }
            | Supervisor::Systemd { master_socket, .. } => master_socket,
        }
    }

    /// Starts the master and waits, at most `timeout`, until it lists a running worker.
    pub fn start(&self, timeout: Duration) -> Result<StartReport, SupervisorError> {
        let deadline = Instant::now() + timeout;
        match self {
            Supervisor::Direct {
                binary,
                files,
                master_socket,
                pidfile,
                log_file,
            } => {
                // A reloading master re-executes: for a moment its pidfile is empty, its
                // command line may read empty and its socket refuses. That is waited for, so
                // a start never makes a second master; a pidfile naming a dead PID (a killed
                // master) is not, so a restart is not delayed.
                let reexecuting = fs::read_to_string(pidfile)
                    .is_ok_and(|t| t.trim().parse().map_or(true, pid_alive));
                let running = self.pidfile_pid().or_else(|| {
                    reexecuting
                        .then(|| self.procs_when_answering(timeout))
                        .flatten()
                        .map(|p| p.master.pid)
                });
                if let Some(pid) = running {
                    return Err(SupervisorError::AlreadyRunning { pid });
                }
                self.clear_stale_socket()?;
                for path in [master_socket, pidfile, log_file] {
                    if let Some(dir) = path.parent() {
                        fs::create_dir_all(dir).map_err(|source| SupervisorError::Io {
                            what: format!("cannot create {}", dir.display()),
                            source,
                        })?;
                    }
                }
                let log = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log_file)
                    .and_then(|f| Ok((f.try_clone()?, f)))
                    .map_err(|source| SupervisorError::Io {
                        what: format!("cannot open HAProxy's log file {}", log_file.display()),
                        source,
                    })?;
                let mark = LogMark::at_end(log_file);
                let mut cmd = Command::new(binary);
                cmd.args(direct_args(files, master_socket, pidfile))
                    .stdin(Stdio::null())
                    .stdout(log.0)
                    .stderr(log.1);
                // Its own session: the master must outlive hapctl and not get the terminal's
                // SIGHUP/SIGINT; it is also then the leader of a process group holding its
                // workers, which `stop` can kill as a whole if it must.
                // SAFETY: setsid is async-signal-safe, as required between fork and exec.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::setsid() == -1 {
                            return Err(io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                let program = binary.display().to_string();
                let child = cmd
                    .spawn()
                    .map_err(|e| ProcessError::from_spawn(&program, e))?;
                tracing::info!(pid = child.id(), "started HAProxy's master");
                // Not waited for on success: dropping a std Child neither kills nor reaps it.
                self.wait_for_worker(Some(child), deadline, timeout, Some(&mark))
            }
            Supervisor::Systemd { unit, .. } => {
                if let Some(pid) = systemd_main_pid(unit)? {
                    return Err(SupervisorError::AlreadyRunning { pid });
                }
                systemctl("start", &[], unit, timeout)?;
                self.wait_for_worker(None, deadline, timeout, None)
            }
        }
    }

    /// Polls the master socket until the master lists a current worker that answers. With `child`, stops
    /// early when it exits (HAProxy's ALERTs are then in the log) and kills it on timeout.
    fn wait_for_worker(
        &self,
        mut child: Option<Child>,
        deadline: Instant,
        timeout: Duration,
        log: Option<&LogMark>,
    ) -> Result<StartReport, SupervisorError> {
        let master = self.master();
        let mut expected_pid = child.as_ref().map(|c| c.id() as i32);
        loop {
            if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                if !status.success() {
                    return Err(SupervisorError::StartFailed {
                        status: status.to_string(),
                        log: log_excerpt(log),
                    });
                }
                // Exit 0 before any worker: `daemon` in the configuration made HAProxy fork
                // itself away. Its master is then another PID; keep waiting for its socket.
                child = None;
                expected_pid = None;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let bound = remaining.min(SOCKET_TIMEOUT);
            if let Ok(procs) = master.show_proc_within(bound) {
                let ours = expected_pid.is_none_or(|pid| pid == procs.master.pid);
                let ready = |w: &super::WorkerProc| master.worker_ready(w.pid, bound);
                if ours && procs.workers.first().is_some_and(ready) {
                    return Ok(StartReport {
                        master_pid: procs.master.pid,
                    });
                }
            }
            if Instant::now() >= deadline {
                if let Some(mut child) = child {
                    // Session leader (setsid), so this also kills any worker it forked.
                    let _ =
                        send_signal(-(child.id() as i32), libc::SIGKILL).or_else(|_| child.kill());
                    let _ = child.wait();
                }
                return Err(SupervisorError::StartTimeout {
                    after: timeout,
                    socket: self.master_socket().to_path_buf(),
                    log: log_excerpt(log),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// A leftover socket file of a master that exited makes HAProxy fail to bind it.
    fn clear_stale_socket(&self) -> Result<(), SupervisorError> {
        let path = self.master_socket();
        match self.master().show_proc() {
            Ok(procs) => Err(SupervisorError::AlreadyRunning {
                pid: procs.master.pid,
            }),
            Err(MasterError::Parse(_)) | Err(MasterError::Socket(SocketError::Timeout { .. })) => {
                Err(SupervisorError::SocketBusy {
                    path: path.to_path_buf(),
                })
            }
            Err(MasterError::Socket(SocketError::Absent { .. })) => Ok(()),
            Err(MasterError::Socket(SocketError::Refused { .. })) => {
                fs::remove_file(path).map_err(|source| SupervisorError::Io {
                    what: format!("cannot remove the stale master socket {}", path.display()),
                    source,
                })
            }
            Err(MasterError::Socket(e)) => Err(SupervisorError::Socket(e)),
        }
    }

    /// Stops the master and its workers, waiting at most `timeout` before killing them.
    pub fn stop(&self, timeout: Duration) -> Result<StopReport, SupervisorError> {
        match self {
            Supervisor::Direct { pidfile, .. } => {
                let Some(pid) = self.master_pid() else {
                    remove_pidfile(pidfile)?;
                    return Ok(StopReport::NotRunning);
                };
                // SIGTERM: workers stop at once, then the master exits.
                if let Err(e) = send_signal(pid, libc::SIGTERM) {
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        return Err(SupervisorError::Io {
                            what: format!("cannot signal HAProxy's master (PID {pid})"),
                            source: e,
                        });
                    }
                }
                let report = if wait_for_exit(pid, timeout) {
                    StopReport::Stopped { pid }
                } else {
                    tracing::warn!(pid, ?timeout, "HAProxy ignored SIGTERM; killing it");
                    kill_master_and_workers(pid);
                    if !wait_for_exit(pid, KILL_GRACE) {
                        return Err(SupervisorError::StopTimeout {
                            pid,
                            after: timeout + KILL_GRACE,
                        });
                    }
                    StopReport::Killed { pid }
                };
                remove_pidfile(pidfile)?;
                Ok(report)
            }
            Supervisor::Systemd { unit, .. } => {
                let pid = systemd_main_pid(unit)?;
                systemctl("stop", &[], unit, timeout)?;
                Ok(pid.map_or(StopReport::NotRunning, |pid| StopReport::Stopped { pid }))
            }
        }
    }
}

fn direct_args(files: &[PathBuf], master_socket: &Path, pidfile: &Path) -> Vec<std::ffi::OsString> {
    // -W without -D: the spawned process is the master, so its exit status and stderr (the
    // reason a start failed) stay ours; detaching is done by setsid instead.
    let mut socket_arg = master_socket.as_os_str().to_owned();
    socket_arg.push(",level,admin");
    let mut args = vec!["-W".into(), "-S".into(), socket_arg];
    for file in files {
        args.push("-f".into());
        args.push(file.into());
    }
    args.push("-p".into());
    args.push(pidfile.into());
    args
}

/// Waits until PID is gone, reaping it if it is our child (a master started by this very
/// process would otherwise linger as a zombie).
fn wait_for_exit(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        // SAFETY: waitpid with WNOHANG on a specific PID; it fails harmlessly (ECHILD) when
        // the PID is not our child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        if !pid_alive(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// SIGKILL to the master's process group when it leads one (started by `start`), so workers
/// die with it; otherwise to the master alone (its workers exit when it is gone).
fn kill_master_and_workers(pid: i32) {
    // SAFETY: getpgid has no memory-safety preconditions.
    let leads_group = unsafe { libc::getpgid(pid) } == pid;
    if leads_group {
        let _ = send_signal(-pid, libc::SIGKILL);
    }
    let _ = send_signal(pid, libc::SIGKILL);
}

fn remove_pidfile(pidfile: &Path) -> Result<(), SupervisorError> {
    match fs::remove_file(pidfile) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(SupervisorError::Io {
            what: format!("cannot remove the pidfile {}", pidfile.display()),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// The ALERTs HAProxy logged since the mark, else its last lines.
fn log_excerpt(mark: Option<&LogMark>) -> Vec<String> {
    let Some(mark) = mark else {
        return Vec::new();
    };
    let text = mark.appended();
    let alerts = messages::alerts(&text);
    if alerts.is_empty() {
        messages::last_lines(&text, 20)
    } else {
        alerts
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{http_get, TestEdge};
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn starts_reports_refuses_a_second_master_and_stops() {
        let edge = TestEdge::new();
        let started = edge.start();
        assert!(pid_alive(started.master_pid));
        assert_eq!(
            fs::read_to_string(&edge.pidfile).unwrap().trim(),
            started.master_pid.to_string()
        );
        assert_eq!(http_get(edge.port), 200);

        let status = edge.supervisor.status();
        assert!(status.running);
        assert_eq!(status.master_pid, Some(started.master_pid));
        let procs = status.procs.expect("the master socket answers");
        assert_eq!(procs.workers.len(), 1);
        assert_eq!(edge.supervisor.master_pid(), Some(started.master_pid));
        // Worker commands through the master socket need the `@1` prefix.
        let version = CliSocket::new(edge.supervisor.master_socket(), Duration::from_secs(5))
            .command("@1 show version")
            .unwrap();
        assert_eq!(version.trim(), procs.master.version);

        let err = edge.try_start().unwrap_err();
        assert!(
            matches!(err, SupervisorError::AlreadyRunning { pid } if pid == started.master_pid),
            "{err}"
        );
        // Without the pidfile the master socket still gives it away.
        fs::remove_file(&edge.pidfile).unwrap();
        let err = edge.try_start().unwrap_err();
        assert!(
            matches!(err, SupervisorError::AlreadyRunning { .. }),
            "{err}"
        );

        let stopped = edge.supervisor.stop(Duration::from_secs(10)).unwrap();
        assert_eq!(
            stopped,
            StopReport::Stopped {
                pid: started.master_pid
            }
        );
        assert!(!pid_alive(started.master_pid));
        assert!(!edge.pidfile.exists());
        let status = edge.supervisor.status();
        assert!(!status.running && status.procs.is_none(), "{status:?}");
        assert_eq!(
            edge.supervisor.stop(Duration::from_secs(1)).unwrap(),
            StopReport::NotRunning
        );

        // HAProxy leaves its socket file behind; the next start clears it.
        assert!(edge.supervisor.master_socket().exists());
        let again = edge.start();
        assert_ne!(again.master_pid, started.master_pid);
        assert_eq!(http_get(edge.port), 200);
    }

    #[test]
    fn a_start_during_a_reload_finds_the_master_instead_of_making_a_second() {
        let edge = TestEdge::new();
        let started = edge.start();
        for _ in 0..5 {
            // What a re-executing master shows for a moment: an empty pidfile, a socket that
            // refuses (the CLI's `reload` answers before the master re-executes).
            fs::write(&edge.pidfile, "").unwrap();
            let _ = CliSocket::new(edge.supervisor.master_socket(), Duration::from_secs(5))
                .command("reload");
            let err = edge.try_start().unwrap_err();
            assert!(
                matches!(err, SupervisorError::AlreadyRunning { pid } if pid == started.master_pid),
                "{err}"
            );
        }
        let procs = edge.supervisor.procs_when_answering(Duration::from_secs(5));
        assert_eq!(procs.map(|p| p.master.pid), Some(started.master_pid));
    }

    #[test]
    fn a_bad_config_fails_the_start_with_haproxys_alert() {
        let edge = TestEdge::new();
        fs::write(&edge.generation, "backend app\n    bogus_keyword 1\n").unwrap();
        let err = edge.try_start().unwrap_err();
        let SupervisorError::StartFailed { status, log } = &err else {
            panic!("expected StartFailed, got {err}");
        };
        assert!(status.contains('1'), "{status}");
        assert!(
            log.iter()
                .any(|l| l.contains("generation.cfg:2]") && l.contains("bogus_keyword")),
            "{log:?}"
        );
        assert!(err.to_string().contains("bogus_keyword"));
    }

    #[test]
    fn a_busy_port_fails_the_start() {
        let edge = TestEdge::new();
        let _busy = TcpListener::bind(("127.0.0.1", edge.port)).unwrap();
        let err = edge.try_start().unwrap_err();
        let SupervisorError::StartFailed { log, .. } = &err else {
            panic!("expected StartFailed, got {err}");
        };
        assert!(
            log.iter().any(|l| l.contains("cannot bind socket")),
            "{log:?}"
        );
        assert!(edge.supervisor.master_pid().is_none());
    }

    #[test]
    fn a_missing_binary_is_a_spawn_error() {
        let mut edge = TestEdge::new();
        if let Supervisor::Direct { binary, .. } = &mut edge.supervisor {
            *binary = PathBuf::from("/nonexistent/haproxy");
        }
        let err = edge.try_start().unwrap_err();
        assert!(
            matches!(err, SupervisorError::Process(ProcessError::NotFound { .. })),
            "{err}"
        );
    }

    #[test]
    fn a_master_ignoring_sigterm_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("haproxy.pid");
        // Stands in for a stuck master: `binary` is `sh`, so the pidfile check accepts it.
        let ready = dir.path().join("ready");
        let script = format!(
            // Bounded (~10 s) so a failing test cannot leave it behind for good.
            "trap '' TERM; touch {}; for i in $(seq 100); do sleep 0.1; done",
            ready.display()
        );
        let mut stuck = Command::new("sh")
            .args(["-c", &script])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = stuck.id() as i32;
        // SIGTERM must not arrive before the trap is set.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !ready.exists() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        fs::write(&pidfile, format!("{pid}\n")).unwrap();
        let supervisor = Supervisor::Direct {
            binary: PathBuf::from("sh"),
            files: vec![],
            master_socket: dir.path().join("master.sock"),
            pidfile: pidfile.clone(),
            log_file: dir.path().join("haproxy.log"),
        };
        assert_eq!(supervisor.master_pid(), Some(pid));
        let report = supervisor.stop(Duration::from_millis(300)).unwrap();
        assert_eq!(report, StopReport::Killed { pid });
        assert!(!pid_alive(pid));
        assert!(!pidfile.exists());
        // `stop` already reaped it (ECHILD here); waiting keeps the zombie lint honest.
        let _ = stuck.wait();
    }

    #[test]
    fn built_from_settings() {
        let direct = Settings::parse(Path::new("/srv/h"), Path::new("hapctl.toml"), "").unwrap();
        let Supervisor::Direct {
            files,
            master_socket,
            pidfile,
            log_file,
            ..
        } = Supervisor::from_settings(&direct)
        else {
            panic!("expected direct mode");
        };
        assert_eq!(
            files,
            [
                PathBuf::from("/srv/h/live/haproxy.cfg"),
                PathBuf::from("/srv/h/live/generation.cfg")
            ]
        );
        assert_eq!(master_socket, Path::new("/srv/h/run/master.sock"));
        assert_eq!(pidfile, Path::new("/srv/h/run/haproxy.pid"));
        assert_eq!(log_file, Path::new("/srv/h/haproxy.log"));
        assert_eq!(
            direct_args(&files, &master_socket, &pidfile),
            [
                "-W",
                "-S",
                "/srv/h/run/master.sock,level,admin",
                "-f",
                "/srv/h/live/haproxy.cfg",
                "-f",
                "/srv/h/live/generation.cfg",
                "-p",
                "/srv/h/run/haproxy.pid"
            ]
        );

        let text = "[haproxy]\nmode = \"systemd\"\nsystemd_unit = \"edge.service\"\n";
        let systemd = Settings::parse(Path::new("/srv/h"), Path::new("hapctl.toml"), text).unwrap();
        assert_eq!(
            Supervisor::from_settings(&systemd),
            Supervisor::Systemd {
                unit: "edge.service".into(),
                master_socket: PathBuf::from("/srv/h/run/master.sock"),
            }
        );
    }
}
