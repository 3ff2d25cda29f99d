//! Small OS helpers: the machine description, temp dirs, bounded child processes, ports.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use serde_json::{json, Value};

/// What the numbers were measured on.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let ram = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    let os = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown OS".into());
    let debian = std::fs::read_to_string("/etc/debian_version")
        .map(|v| v.trim().to_string())
        .unwrap_or_default();
    let haproxy = Command::new(testkit::haproxy_bin())
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "haproxy not found".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|v| v.trim().to_string())
        .unwrap_or_default();
    json!({
        "date": humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        "nproc": thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "ram": ram,
        "os": if debian.is_empty() { os } else { format!("{os} ({debian})") },
        "kernel": kernel,
        "haproxy": haproxy,
    })
}

/// The 1-minute load average (other work on the machine skews the numbers).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The whole machine's CPU time from /proc/stat, in clock ticks: busy (all but idle and
/// iowait) and total.
pub fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Cores the whole machine was busy on average between two [`machine_ticks`] readings.
pub fn cores_busy(before: (u64, u64), after: (u64, u64)) -> f64 {
    let ncpu = thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    (after.0 - before.0) as f64 / (after.1 - before.1).max(1) as f64 * ncpu
}

/// A folder removed (with everything in it) on drop, also when a panic unwinds.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> anyhow::Result<TempDir> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "hapctl-bench.{}.{}.{label}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(TempDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Reads a child's pipe to its end on a thread (so a full pipe never blocks the child).
pub fn read_in_background<R: Read + Send + 'static>(
    pipe: Option<R>,
) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// Exit status and both outputs, for error messages.
pub fn describe(out: &Output) -> String {
    format!(
        "{}; stdout: {}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

/// A command timed against an observation made from outside while it runs.
pub struct Observed {
    /// From spawn to the first time `observe` held (`None` when the command failed first).
    pub seen: Option<Duration>,
    /// From spawn to exit.
    pub exit: Duration,
    pub status: std::process::ExitStatus,
    /// How many times `observe` ran.
    pub probes: u32,
    pub stdout: String,
    pub stderr: String,
}

/// Spawns `cmd` and calls `observe` every `every` until it holds (or the command fails, or
/// `timeout` passes: an error naming `what`), then waits for the exit (bounded by `timeout`
/// again).
pub fn spawn_and_observe(
    mut cmd: Command,
    every: Duration,
    timeout: Duration,
    what: &str,
    mut observe: impl FnMut() -> bool,
) -> anyhow::Result<Observed> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn().context("cannot spawn hapctl")?;
    let stdout = read_in_background(child.stdout.take());
    let stderr = read_in_background(child.stderr.take());
    let mut exited = None;
    let mut seen = None;
    let mut probes = 0;
    let mut next = t0;
    while seen.is_none() {
        if exited.is_none() {
            if let Some(status) = child.try_wait()? {
                exited = Some((t0.elapsed(), status));
                if !status.success() {
                    break;
                }
            }
        }
        probes += 1;
        if observe() {
            seen = Some(t0.elapsed());
            break;
        }
        if t0.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what}: not observed within {timeout:?}");
        }
        next += every;
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    let (exit, status) = match exited {
        Some(e) => e,
        None => loop {
            if let Some(status) = child.try_wait()? {
                break (t0.elapsed(), status);
            }
            if t0.elapsed() > timeout * 2 {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{what}: observed, but the command did not exit");
            }
            thread::sleep(Duration::from_micros(500));
        },
    };
    Ok(Observed {
        seen,
        exit,
        status,
        probes,
        stdout: String::from_utf8_lossy(&stdout.join().unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned(),
    })
}
