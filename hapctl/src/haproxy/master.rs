//! The master process, through its CLI socket: process list and reload with a verified outcome.
//!
//! How a reload's outcome shows, measured on 2.6.12 (and read in the 2.7+ sources):
//! - The master keeps its PID; it re-executes itself. While it does, its socket refuses
//!   connections (and may reset one). Outcome known after 45–65 ms with a small config,
//!   0.35–0.85 s with 10,000 backends, 25 ms (small) to 140 ms (10,000 backends) for a syntax
//!   error, and ~2.1–2.4 s when a listener cannot bind (HAProxy retries the bind first).
//! - On 2.6 `reload` answers nothing (0 bytes) whatever the outcome. On 2.7+ the connection
//!   is kept across the re-execution and answers `Success=1` or `Success=0`, then `--` and the
//!   startup logs; that answer is authoritative when present.
//! - Every reload request, failed or not, increments the master's `reloads` and that of every
//!   worker alive. A success forks a new worker (reloads 0), listed under `# workers`; the
//!   previous ones move to `# old workers` until their last connection ends. A failure forks
//!   nothing: the same workers stay current and keep serving.
//! - `[failed: N]` counts *consecutive* failed reloads: +1 on each failure (2.6: 0 → 1 → 2
//!   after two failures in a row) and back to 0 on the next success. So "it rose compared
//!   with before" means this reload failed, whatever the count was before.
//! - 2.6 does not say why a reload failed over the socket (`show startup-logs` does not exist
//!   in the master there); the ALERTs go to the master's stderr, hence the optional log file.

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::process::pid_alive;
use crate::settings::{Mode, Settings};

use super::messages::{self, LogMark};
use super::proc_list::{ParseError, ProcList};
use super::socket::{CliSocket, SocketError};

/// Pause between two `show proc` while waiting for a reload's outcome.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Bound on one `show proc`: it answers at once unless the master is stuck.
pub(crate) const SOCKET_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error(transparent)]
    Parse(#[from] ParseError),
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("HAProxy's master is not running (nothing answers on {socket}); start it with `hapctl haproxy start`")]
    NotRunning { socket: PathBuf },
    #[error("HAProxy rejected the reload; the previous workers keep serving the previous configuration. {}", describe(.messages))]
    Failed { messages: Vec<String> },
    #[error("HAProxy's master (PID {pid}) died during the reload; `hapctl serve` starts it again from the known-good files, else run `hapctl haproxy start`")]
    MasterDied { pid: i32 },
    #[error("the master PID changed during the reload ({before} -> {after}): HAProxy was restarted, not reloaded; check what else manages it")]
    MasterReplaced { before: i32, after: i32 },
    #[error("no outcome of the reload after {after:?} ({last_seen}); check HAProxy's log and `hapctl status`")]
    Timeout { after: Duration, last_seen: String },
    #[error(transparent)]
    Socket(SocketError),
    #[error(transparent)]
    Parse(ParseError),
}

/// The 3.1+ answer to a reload sent while the last one is still loading.
const STILL_LOADING: &str = "Another reload is still in progress";

fn describe(messages: &[String]) -> String {
    if messages.is_empty() {
        "HAProxy did not say why over its socket (2.6 never does); see its log".into()
    } else {
        format!("HAProxy said: {}", messages.join(" | "))
    }
}

/// A confirmed reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    pub master_pid: i32,
    /// Workers started by this reload (normally one).
    pub new_workers: Vec<i32>,
    /// Workers still draining connections of earlier configurations.
    pub old_workers: Vec<i32>,
    /// From sending `reload` to seeing the new worker.
    pub duration: Duration,
}

#[derive(Debug, Clone)]
pub struct Master {
    socket: CliSocket,
    log_file: Option<PathBuf>,
}

impl Master {
    pub fn new(socket: CliSocket) -> Master {
        Master {
            socket,
            log_file: None,
        }
    }

    /// The master at `paths.master_socket`; in direct mode it reads failure reasons from
    /// `paths.haproxy_log` (under systemd the master's stderr goes to the journal instead).
    pub fn from_settings(settings: &Settings) -> Master {
        let master = Master::new(CliSocket::new(
            &settings.paths.master_socket,
            SOCKET_TIMEOUT,
        ));
        match settings.haproxy.mode {
            Mode::Direct => master.with_log_file(&settings.paths.haproxy_log),
            Mode::Systemd => master,
        }
    }

    /// The master socket (e.g. to reach the current worker with `@1`).
    pub fn socket(&self) -> &CliSocket {
        &self.socket
    }

    /// Where the master's stderr goes: a failed reload's ALERTs are read back from it.
    pub fn with_log_file(mut self, path: impl Into<PathBuf>) -> Master {
        self.log_file = Some(path.into());
        self
    }

    pub fn show_proc(&self) -> Result<ProcList, MasterError> {
        Ok(ProcList::parse(&self.socket.command("show proc")?)?)
    }

    /// Connections a worker still serves (`@!PID show info`: `CurrConns`): how far an old
    /// worker is from the end of its soft stop. `None` when it does not answer (exiting).
    pub fn worker_connections(&self, pid: i32) -> Option<u64> {
        let info = self.socket.command(&format!("@!{pid} show info")).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("CurrConns:"))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Whether worker `pid` takes commands through the master (`@!PID`). From 3.1 a new
    /// worker is listed as soon as it is forked and loads its configuration after: until it is
    /// ready the master cannot reach it, `@1` still reaches the worker before it, and it
    /// serves nothing yet.
    pub(crate) fn worker_ready(&self, pid: i32, bound: Duration) -> bool {
        let socket = self.socket.with_timeout(bound);
        let own = format!("Pid: {pid}");
        socket
            .command(&format!("@!{pid} show info"))
            .is_ok_and(|answer| answer.lines().any(|l| l.trim() == own))
    }

    /// `show_proc` bounded by `bound` instead of the socket's own timeout.
    pub(crate) fn show_proc_within(&self, bound: Duration) -> Result<ProcList, MasterError> {
        let socket = self.socket.with_timeout(bound);
        Ok(ProcList::parse(&socket.command("show proc")?)?)
    }

    /// Reloads through the master (never a restart) and waits, at most `timeout`, until the
    /// outcome is known from the process list.
    pub fn reload(&self, timeout: Duration) -> Result<ReloadReport, ReloadError> {
        let before = self.show_proc().map_err(|e| match e {
            MasterError::Socket(e) if e.is_not_listening() => ReloadError::NotRunning {
                socket: self.socket.path().to_path_buf(),
            },
            MasterError::Socket(e) => ReloadError::Socket(e),
            MasterError::Parse(e) => ReloadError::Parse(e),
        })?;
        let log = self.log_file.as_deref().map(LogMark::at_end);
        let started = Instant::now();
        // Its death can be watched only if its PID is ours to see (not in another PID
        // namespace behind a shared socket).
        let watch_death = pid_alive(before.master.pid);
        self.send_reload(timeout)?;
        let reloading = Reloading {
            before: &before,
            started,
            timeout,
            log: log.as_ref(),
            watch_death,
        };
        self.wait_reloaded(&reloading)
    }

    /// The `reload` command, and its answer where HAProxy gives one (2.7+). From 3.1 the
    /// master refuses a reload while the last one (or the start) is still loading: that one
    /// is waited for, within the bound.
    fn send_reload(&self, timeout: Duration) -> Result<(), ReloadError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.send_reload_once(left) {
                Err(ReloadError::Failed { messages })
                    if messages.iter().any(|m| m.contains(STILL_LOADING))
                        && Instant::now() + POLL_INTERVAL < deadline =>
                {
                    thread::sleep(POLL_INTERVAL)
                }
                other => return other,
            }
        }
    }

    fn send_reload_once(&self, timeout: Duration) -> Result<(), ReloadError> {
        // 2.7+ answers once the new worker is up or has failed, hence the whole bound.
        let reply = match self.socket.with_timeout(timeout).command("reload") {
            Ok(reply) => reply,
            // The master closes every connection when it re-executes: an answer cut that way
            // is the 2.6 empty answer.
            Err(e) if e.is_transient() && !e.is_not_listening() => String::new(),
            Err(SocketError::Timeout { .. }) => {
                return Err(ReloadError::Timeout {
                    after: timeout,
                    last_seen: "the `reload` command got no answer".into(),
                })
            }
            Err(e) => return Err(ReloadError::Socket(e)),
        };
        if let Some(LoadStatus::Failed(logs)) = LoadStatus::parse(&reply) {
            let alerts = messages::alerts(&logs);
            return Err(ReloadError::Failed {
                messages: if alerts.is_empty() {
                    messages::last_lines(&logs, 20)
                } else {
                    alerts
                },
            });
        }
        Ok(())
    }

    /// Polls the process list until the reload is judged, at most until its bound.
    fn wait_reloaded(&self, r: &Reloading) -> Result<ReloadReport, ReloadError> {
        let Reloading {
            before,
            started,
            timeout,
            log,
            watch_death,
        } = *r;
        let deadline = started + timeout;
        // What the last poll saw, for the timeout message.
        let mut last_seen: String;
        loop {
            // Each poll is bounded by what is left of the reload's bound, not the socket's.
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.show_proc_within(remaining) {
                Ok(now) => match judge(before, &now) {
                    Outcome::Pending(why) => last_seen = why,
                    Outcome::Reloaded { new_workers } => {
                        return Ok(ReloadReport {
                            master_pid: now.master.pid,
                            new_workers,
                            old_workers: now.old_workers.iter().map(|w| w.pid).collect(),
                            duration: started.elapsed(),
                        })
                    }
                    Outcome::Failed => {
                        return Err(ReloadError::Failed {
                            messages: log
                                .map(|l| messages::alerts(&l.appended()))
                                .unwrap_or_default(),
                        })
                    }
                    Outcome::Replaced => {
                        return Err(ReloadError::MasterReplaced {
                            before: before.master.pid,
                            after: now.master.pid,
                        })
                    }
                },
                Err(MasterError::Socket(e))
                    if e.is_transient() || matches!(e, SocketError::Timeout { .. }) =>
                {
                    // A dead master refuses connections like a re-executing one, which keeps
                    // its PID: waiting out the bound would only delay its restart.
                    if watch_death && !pid_alive(before.master.pid) {
                        return Err(ReloadError::MasterDied {
                            pid: before.master.pid,
                        });
                    }
                    last_seen = format!("master not answering: {e}");
                }
                Err(MasterError::Socket(e)) => return Err(ReloadError::Socket(e)),
                Err(MasterError::Parse(e)) => return Err(ReloadError::Parse(e)),
            }
            if Instant::now() + POLL_INTERVAL > deadline {
                return Err(ReloadError::Timeout {
                    after: timeout,
                    last_seen,
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

/// A reload sent, as [`Master::wait_reloaded`] judges it.
#[derive(Clone, Copy)]
struct Reloading<'a> {
    /// The processes before the reload.
    before: &'a ProcList,
    started: Instant,
    timeout: Duration,
    /// The master's log from before the reload.
    log: Option<&'a LogMark>,
    /// Whether the master's death can be seen (its PID is ours to see).
    watch_death: bool,
}

/// The 2.7+ answer to `reload`: `Success=0|1`, then optionally `--` and the startup logs.
enum LoadStatus {
    Succeeded,
    Failed(String),
}

impl LoadStatus {
    fn parse(reply: &str) -> Option<LoadStatus> {
        let mut lines = reply.lines().skip_while(|l| l.trim().is_empty());
        let status = lines.next()?.trim().strip_prefix("Success=")?;
        if status == "1" {
            return Some(LoadStatus::Succeeded);
        }
        let logs: Vec<&str> = lines.skip_while(|l| l.trim() == "--").collect();
        Some(LoadStatus::Failed(logs.join("\n")))
    }
}

enum Outcome {
    Pending(String),
    Reloaded { new_workers: Vec<i32> },
    Failed,
    Replaced,
}

/// Compares the process list after `reload` with the one before it.
fn judge(before: &ProcList, now: &ProcList) -> Outcome {
    if now.master.pid != before.master.pid {
        return Outcome::Replaced;
    }
    if now.master.reloads <= before.master.reloads {
        return Outcome::Pending(format!(
            "the master's reload count is still {}",
            now.master.reloads
        ));
    }
    let known = before.all_worker_pids();
    let new_workers: Vec<i32> = now
        .workers
        .iter()
        .map(|w| w.pid)
        .filter(|pid| !known.contains(pid))
        .collect();
    let failed_rose = match (before.master.failed, now.master.failed) {
        (Some(b), Some(n)) => n > b,
        (None, Some(n)) => n > 0,
        _ => false,
    };
    match (new_workers.is_empty(), failed_rose) {
        (false, false) => Outcome::Reloaded { new_workers },
        (true, true) => Outcome::Failed,
        (false, true) => Outcome::Pending(format!(
            "new worker(s) {new_workers:?} but the failure count rose to {:?}",
            now.master.failed
        )),
        (true, false) => Outcome::Pending(format!(
            "reload count rose to {} but no new worker and no failure yet",
            now.master.reloads
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{http_get, TestEdge};
    use super::*;
    use std::net::TcpListener;

    fn list(master: &str, workers: &[i32], old: &[i32]) -> ProcList {
        let mut text = format!("{master}\n# workers\n");
        for pid in workers {
            text += &format!("{pid} worker 0 0d00h00m01s 2.6.12\n");
        }
        text += "# old workers\n";
        for pid in old {
            text += &format!("{pid} worker 1 0d00h00m01s 2.6.12\n");
        }
        ProcList::parse(&text).unwrap()
    }

    #[test]
    fn judges_reload_outcomes() {
        let before = list("10 master 3 [failed: 2] 0d 2.6", &[20], &[]);
        let ok = list("10 master 4 [failed: 0] 0d 2.6", &[30], &[20]);
        assert!(
            matches!(judge(&before, &ok), Outcome::Reloaded { new_workers } if new_workers == [30])
        );
        let failed = list("10 master 4 [failed: 3] 0d 2.6", &[20], &[]);
        assert!(matches!(judge(&before, &failed), Outcome::Failed));
        let not_yet = list("10 master 3 [failed: 2] 0d 2.6", &[20], &[]);
        assert!(matches!(judge(&before, &not_yet), Outcome::Pending(_)));
        let replaced = list("11 master 0 [failed: 0] 0d 2.6", &[40], &[]);
        assert!(matches!(judge(&before, &replaced), Outcome::Replaced));
        // An old worker that is still listed is not a new one.
        let reshuffled = list("10 master 4 [failed: 2] 0d 2.6", &[20], &[]);
        assert!(matches!(judge(&before, &reshuffled), Outcome::Pending(_)));
    }

    #[test]
    fn reads_the_2_7_reload_answer() {
        assert!(LoadStatus::parse("").is_none());
        assert!(matches!(
            LoadStatus::parse("Success=1\n--\n[NOTICE]   (1) : Loading success.\n"),
            Some(LoadStatus::Succeeded)
        ));
        let Some(LoadStatus::Failed(logs)) = LoadStatus::parse(
            "Success=0\n--\n[NOTICE]   (1) : haproxy version is 3.0.5\n[ALERT]    (1) : config : parsing [a.cfg:3] : unknown keyword 'x'\n",
        ) else {
            panic!("expected a failure");
        };
        assert_eq!(
            messages::alerts(&logs),
            ["[ALERT] config : parsing [a.cfg:3] : unknown keyword 'x'"]
        );
    }

    /// A fake 2.7+ master for `connections` connections: answers `show proc` with `before`
    /// until it got `reload`, which it answers with `reply`, then with `after`.
    fn fake_master(
        connections: usize,
        reply: &'static str,
        before: &'static str,
        after: &'static str,
    ) -> (tempfile::TempDir, Master) {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        thread::spawn(move || {
            let mut reloaded = false;
            for _ in 0..connections {
                let (mut conn, _) = listener.accept().unwrap();
                let mut cmd = String::new();
                conn.read_to_string(&mut cmd).unwrap();
                let answer = match (cmd.trim(), reloaded) {
                    ("reload", _) => {
                        reloaded = true;
                        reply
                    }
                    ("show proc", false) => before,
                    ("show proc", true) => after,
                    _ => "Unknown command.\n",
                };
                conn.write_all(answer.as_bytes()).unwrap();
            }
        });
        let master = Master::new(CliSocket::new(path, Duration::from_secs(2)));
        (dir, master)
    }

    const FAKE_BEFORE: &str = "#<PID> <type> <reloads> <uptime> <version>\n\
        100 master 0 [failed: 0] 0d00h00m10s 3.0.5\n# workers\n101 worker 0 0d00h00m10s 3.0.5\n";
    const FAKE_AFTER: &str = "#<PID> <type> <reloads> <uptime> <version>\n\
        100 master 1 [failed: 0] 0d00h00m11s 3.0.5\n# workers\n102 worker 0 0d00h00m00s 3.0.5\n\
        # old workers\n101 worker 1 0d00h00m11s 3.0.5\n";

    #[test]
    fn a_2_7_success_answer_is_confirmed_by_the_process_list() {
        let (_dir, master) = fake_master(
            3,
            "Success=1\n--\n[NOTICE]   (100) : Loading success.\n",
            FAKE_BEFORE,
            FAKE_AFTER,
        );
        let report = master.reload(Duration::from_secs(5)).unwrap();
        assert_eq!(report.master_pid, 100);
        assert_eq!(report.new_workers, [102]);
        assert_eq!(report.old_workers, [101]);
    }

    #[test]
    fn a_master_that_dies_during_the_reload_ends_the_wait() {
        // The "master": a process alive when the reload starts, dead (a zombie) 2 s later.
        let mut dies = std::process::Command::new("sleep")
            .arg("2")
            .spawn()
            .unwrap();
        let pid = dies.id() as i32;
        let before: &'static str = format!(
            "#<PID> <type> <reloads> <uptime> <version>\n\
             {pid} master 0 [failed: 0] 0d00h00m10s 2.6.12\n# workers\n101 worker 0 0d00h00m10s 2.6.12\n"
        )
        .leak();
        // The 2.6 answer (the connection cut), then nothing listens any more: the socket
        // refuses as during a re-exec.
        let (_dir, master) = fake_master(2, "", before, before);
        let err = master.reload(Duration::from_secs(600)).unwrap_err();
        dies.wait().unwrap();
        assert!(
            matches!(err, ReloadError::MasterDied { pid: p } if p == pid),
            "{err}"
        );
    }

    #[test]
    fn a_master_whose_pid_is_not_ours_to_see_is_waited_for() {
        // Above Linux's PID_MAX_LIMIT: no process here has it, as for a master in another
        // PID namespace. Its socket refusing is then a re-exec to wait out, up to the bound.
        const UNSEEN: &str = "#<PID> <type> <reloads> <uptime> <version>\n\
            4194305 master 0 [failed: 0] 0d00h00m10s 2.6.12\n# workers\n101 worker 0 0d00h00m10s 2.6.12\n";
        let (_dir, master) = fake_master(2, "", UNSEEN, UNSEEN);
        let err = master.reload(Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, ReloadError::Timeout { .. }), "{err}");
    }

    #[test]
    fn a_2_7_failure_answer_is_final_and_carries_the_alerts() {
        let (_dir, master) = fake_master(
            2,
            "Success=0\n--\n[NOTICE]   (100) : haproxy version is 3.0.5\n\
             [ALERT]    (100) : config : parsing [/etc/haproxy/haproxy.cfg:7] : unknown keyword 'bogus'\n",
            FAKE_BEFORE,
            FAKE_BEFORE,
        );
        let err = master.reload(Duration::from_secs(5)).unwrap_err();
        let ReloadError::Failed { messages } = err else {
            panic!("expected Failed, got {err}");
        };
        assert_eq!(
            messages,
            ["[ALERT] config : parsing [/etc/haproxy/haproxy.cfg:7] : unknown keyword 'bogus'"]
        );
    }

    #[test]
    fn a_good_reload_keeps_the_master_and_starts_a_new_worker() {
        let edge = TestEdge::new();
        let started = edge.start();
        let master = edge.master();
        let before = master.show_proc().unwrap();
        assert_eq!(before.master.pid, started.master_pid);
        assert_eq!(before.workers.len(), 1);

        let report = master.reload(Duration::from_secs(20)).unwrap();
        eprintln!("good reload confirmed in {:?}", report.duration);
        assert_eq!(report.master_pid, before.master.pid);
        assert_eq!(report.new_workers.len(), 1);
        assert!(!before.all_worker_pids().contains(&report.new_workers[0]));
        let after = master.show_proc().unwrap();
        assert_eq!(after.master.reloads, before.master.reloads + 1);
        assert_eq!(after.master.failed, Some(0));
        assert_eq!(http_get(edge.port), 200);
    }

    #[test]
    fn a_reload_onto_a_busy_port_fails_and_the_old_worker_keeps_serving() {
        let edge = TestEdge::new();
        edge.start();
        let master = edge.master();
        let before = master.show_proc().unwrap();

        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let busy_port = busy.local_addr().unwrap().port();
        let extra = format!("frontend other\n    bind 127.0.0.1:{busy_port}\n");
        std::fs::write(&edge.generation, extra).unwrap();

        let started = Instant::now();
        let err = master.reload(Duration::from_secs(20)).unwrap_err();
        eprintln!("failed reload detected in {:?}", started.elapsed());
        let ReloadError::Failed { messages } = &err else {
            panic!("expected Failed, got {err}");
        };
        assert!(
            messages.iter().any(|m| m.contains("cannot bind socket")),
            "{messages:?}"
        );
        let after = master.show_proc().unwrap();
        assert_eq!(after.master.pid, before.master.pid);
        assert_eq!(after.master.failed, Some(1));
        assert_eq!(after.all_worker_pids(), before.all_worker_pids());
        assert_eq!(http_get(edge.port), 200, "the old worker must keep serving");

        // A second failure in a row counts 2 up to 3.0; from 3.1 the field says whether the
        // last reload failed. The next success resets it to 0.
        assert!(matches!(
            master.reload(Duration::from_secs(20)),
            Err(ReloadError::Failed { .. })
        ));
        let version = &before.master.version;
        let counts = version.starts_with("2.") || version.starts_with("3.0");
        let second = if counts { 2 } else { 1 };
        assert_eq!(master.show_proc().unwrap().master.failed, Some(second));
        std::fs::write(&edge.generation, "").unwrap();
        master.reload(Duration::from_secs(20)).unwrap();
        assert_eq!(master.show_proc().unwrap().master.failed, Some(0));
        drop(busy);
    }

    #[test]
    fn a_reload_of_a_broken_config_fails_with_the_alert() {
        let edge = TestEdge::new();
        edge.start();
        std::fs::write(&edge.generation, "backend app\n    bogus_keyword 1\n").unwrap();
        let err = edge.master().reload(Duration::from_secs(20)).unwrap_err();
        let ReloadError::Failed { messages } = &err else {
            panic!("expected Failed, got {err}");
        };
        assert!(
            messages.iter().any(|m| m.contains("generation.cfg:2]")),
            "{messages:?}"
        );
        assert!(err.to_string().contains("bogus_keyword"), "{err}");
    }

    #[test]
    fn reload_without_a_master_is_not_running() {
        let dir = tempfile::tempdir().unwrap();
        let master = Master::new(CliSocket::new(
            dir.path().join("master.sock"),
            Duration::from_secs(1),
        ));
        let err = master.reload(Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, ReloadError::NotRunning { .. }), "{err}");
    }
}
