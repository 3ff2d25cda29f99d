//! `hapctl serve` as a child of the bench, on a free loopback port, with its memory readings.
//! Stopped on drop (SIGTERM, then SIGKILL), also on errors and panics. Declare it after the
//! [`Edge`] it serves, so it is dropped first; stopping the daemon leaves HAProxy running,
//! and the `Edge` stops that.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::api::Api;
use crate::harness::Edge;

pub struct Daemon {
    child: Option<Child>,
    pub api: Api,
    pub log: PathBuf,
    /// Spawn → first `GET /health` answering 200.
    pub startup: Duration,
}

impl Daemon {
    /// `hapctl serve --listen 127.0.0.1:<free>`; waits (bounded) until `/health` answers 200.
    /// HAProxy should already run (`Edge::start`), so the edge stops it on drop.
    pub fn start(edge: &Edge, bound: Duration) -> anyhow::Result<Daemon> {
        Daemon::start_with_env(edge, bound, &[])
    }

    /// [`Daemon::start`] with extra environment variables for the daemon.
    pub fn start_with_env(
        edge: &Edge,
        bound: Duration,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Daemon> {
        let port = testkit::free_port();
        let listen = format!("127.0.0.1:{port}");
        let log = edge.work_dir().join(format!("serve-{port}.log"));
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let token = std::fs::read_to_string(&edge.settings.api.token_file)
            .with_context(|| {
                format!(
                    "the API token file {}",
                    edge.settings.api.token_file.display()
                )
            })?
            .trim()
            .to_string();
        let t0 = Instant::now();
        let mut cmd = edge.command(&["serve", "--listen", &listen]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .context("spawn hapctl serve")?;
        let mut daemon = Daemon {
            child: Some(child),
            api: Api { port, token },
            log,
            startup: Duration::ZERO,
        };
        let deadline = t0 + bound;
        loop {
            if let Some(status) = daemon.child.as_mut().and_then(|c| c.try_wait().ok()?) {
                daemon.child = None;
                bail!(
                    "hapctl serve exited ({status}) before answering /health: {}",
                    daemon.log_tail()
                );
            }
            let last = match daemon.api.call("GET", "/health", None) {
                Ok(a) if a.status == 200 => break,
                Ok(a) => a.describe(),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() > deadline {
                bail!(
                    "hapctl serve did not answer /health with 200 within {bound:?}; last: {last}; log: {}",
                    daemon.log_tail()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        daemon.startup = t0.elapsed();
        Ok(daemon)
    }

    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// The last lines of the daemon's output.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join(" | ")
    }

    /// Memory of the daemon process now (`/proc/PID/status`).
    pub fn memory(&self) -> anyhow::Result<Memory> {
        let pid = self.pid().context("the daemon is not running")?;
        Memory::of(pid)
    }

    /// The names of the daemon's threads (`/proc/PID/task/*/comm`), sorted.
    pub fn thread_names(&self) -> anyhow::Result<Vec<String>> {
        let pid = self.pid().context("the daemon is not running")?;
        let mut names = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let comm = task?.path().join("comm");
            // A thread that ended since the listing has no comm left to read.
            if let Ok(name) = std::fs::read_to_string(comm) {
                names.push(name.trim().to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn signal(&self, signal: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on our own child's PID (not reaped yet, so not reused).
            unsafe { libc::kill(pid, signal) };
        }
    }

    fn wait_exit(&mut self, bound: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let deadline = Instant::now() + bound;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_none() {
            return;
        }
        self.signal(libc::SIGTERM);
        if !self.wait_exit(Duration::from_secs(10)) {
            self.signal(libc::SIGKILL);
            self.wait_exit(Duration::from_secs(10));
        }
    }
}

/// A process's memory, in kB, from `/proc/PID/status`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// Resident now.
    pub rss_kb: u64,
    /// Peak resident ("high water mark").
    pub hwm_kb: u64,
    pub anon_kb: u64,
    pub file_kb: u64,
    pub threads: u64,
}

impl Memory {
    pub fn of(pid: i32) -> anyhow::Result<Memory> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("read /proc/{pid}/status"))?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(Memory {
            rss_kb: field("VmRSS:"),
            hwm_kb: field("VmHWM:"),
            anon_kb: field("RssAnon:"),
            file_kb: field("RssFile:"),
            threads: field("Threads:"),
        })
    }

    pub fn to_json(self) -> Value {
        json!({
            "vm_rss_kb": self.rss_kb,
            "vm_hwm_kb": self.hwm_kb,
            "rss_anon_kb": self.anon_kb,
            "rss_file_kb": self.file_kb,
            "threads": self.threads,
        })
    }
}

/// kB as MiB with one decimal.
pub fn mib(kb: u64) -> String {
    format!("{:.1}", kb as f64 / 1024.0)
}
