//! `hapctl serve` keeps the agent running in direct mode: `hapctl waf serve` as a child,
//! started again when it exits (at once, then after 1, 2, 4 … s, at most 30 s; forgotten
//! after 30 s up), stopped with SIGTERM (SIGKILL after 5 s) when the daemon stops.

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(200);
const STABLE_AFTER: Duration = Duration::from_secs(30);
const MAX_PAUSE: Duration = Duration::from_secs(30);
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The running loop; dropping it stops the agent.
pub struct AgentSupervision {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the loop; `log` gets the agent's stderr (appended).
pub fn start(state_dir: &Path, log: PathBuf) -> std::io::Result<AgentSupervision> {
    let exe = std::env::current_exe()?;
    let dir = state_dir.to_path_buf();
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("waf-agent".into())
        .spawn(move || run(&exe, &dir, &log, &rx))?;
    Ok(AgentSupervision {
        stop: Some(tx),
        thread: Some(thread),
    })
}

fn spawn(exe: &Path, dir: &Path, log: &Path) -> std::io::Result<Child> {
    let err = OpenOptions::new().create(true).append(true).open(log)?;
    let mut cmd = Command::new(exe);
    // SAFETY: prctl is async-signal-safe. The agent gets SIGTERM if this thread's process
    // dies without stopping it (SIGKILL of `hapctl serve`): never an orphan agent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.arg("--state-dir")
        .arg(dir)
        .args(["waf", "serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
}

fn run(exe: &Path, dir: &Path, log: &Path, stop: &mpsc::Receiver<()>) {
    let mut child: Option<Child> = None;
    let (mut failures, mut up_since, mut next_start) = (0u32, Instant::now(), Instant::now());
    // Any message, or the daemon's end (sender dropped), stops the loop.
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(POLL) {
        if let Some(c) = child.as_mut() {
            match c.try_wait() {
                Ok(None) => {
                    if up_since.elapsed() >= STABLE_AFTER {
                        failures = 0;
                    }
                    continue;
                }
                Ok(Some(status)) => {
                    tracing::warn!(%status, "waf agent exited; it is started again")
                }
                Err(e) => tracing::warn!(error = %e, "waf agent: cannot wait for it"),
            }
            child = None;
            let pause = match failures {
                0 => Duration::ZERO,
                n => Duration::from_secs(1 << (n - 1).min(5)).min(MAX_PAUSE),
            };
            failures += 1;
            next_start = Instant::now() + pause;
        }
        if Instant::now() >= next_start {
            match spawn(exe, dir, log) {
                Ok(c) => {
                    tracing::info!(pid = c.id(), "waf agent started");
                    child = Some(c);
                    up_since = Instant::now();
                }
                Err(e) => {
                    tracing::error!(error = %e, "waf agent could not be started");
                    next_start = Instant::now() + MAX_PAUSE;
                }
            }
        }
    }
    if let Some(c) = child {
        stop_child(c);
    }
}

fn stop_child(mut c: Child) {
    let _ = crate::process::send_signal(c.id() as i32, libc::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
}

impl Drop for AgentSupervision {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
