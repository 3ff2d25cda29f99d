//! What bench reads of a running daemon (the kit's `hapctl serve` child): its memory and
//! threads from `/proc`, and the end of its log for error messages.

use anyhow::Context;
use serde_json::{json, Value};
use testkit::daemon::Daemon;

/// Readings of the daemon's process.
pub trait DaemonProcess {
    /// Memory of the daemon process now (`/proc/PID/status`).
    fn memory(&self) -> anyhow::Result<Memory>;
    /// The names of the daemon's threads (`/proc/PID/task/*/comm`), sorted.
    fn thread_names(&self) -> anyhow::Result<Vec<String>>;
    /// The last lines of the daemon's output.
    fn log_tail(&self) -> String;
}

impl DaemonProcess for Daemon {
    fn memory(&self) -> anyhow::Result<Memory> {
        let pid = self.running_pid().context("the daemon is not running")?;
        Memory::of(pid)
    }

    fn thread_names(&self) -> anyhow::Result<Vec<String>> {
        let pid = self.running_pid().context("the daemon is not running")?;
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

    fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join(" | ")
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
