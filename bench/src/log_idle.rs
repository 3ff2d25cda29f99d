//! log-idle: the CPU an idle edge's HAProxy uses while nothing takes its access log
//! (`hapctl serve` down: CLI-only use, a restart, a crash), with it running, and with the ring
//! sent to a unix socket nobody listens on, the design before loopback TCP, in the same run.
//! HAProxy 2.6 retries such a unix connect at once, in a loop (docs/haproxy-versions.md).
//!
//! Each case runs the edge's own configuration and command line; the CPU is the master's and
//! its workers' user + system ticks (`/proc/PID/stat`) over the window, as a share of a core.

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;
use testkit::daemon::{Daemon, Serve};

use crate::harness::new_edge;
use crate::{Ctx, Report, Table, Target};

const WINDOW: Duration = Duration::from_secs(5);
/// Linux's USER_HZ, the unit of `/proc/PID/stat` times.
const TICKS_PER_SECOND: f64 = 100.0;
/// An idle edge: well under a tenth of a core.
const TARGET_SHARE: f64 = 0.1;

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let edge = new_edge(&hapctl)?;
    edge.start()?;
    let master = edge.try_show_proc()?.master.pid;
    eprintln!("log-idle: nobody takes the log ({WINDOW:?})…");
    let nobody = core_share(master)?;
    eprintln!("log-idle: hapctl serve takes it…");
    let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(60)))?;
    let served = core_share(master)?;
    drop(daemon);

    let args = cmdline(master)?;
    let config = edge.settings()?.paths.config.clone();
    let unix = unix_ring_config(&std::fs::read_to_string(&config)?, edge.state_dir())?;
    edge.stop_haproxy();
    let unix_config = edge.path("unix-ring.cfg");
    std::fs::write(&unix_config, unix)?;
    eprintln!("log-idle: the ring sent to a unix socket nobody listens on…");
    let unix_share = with_master(
        &args,
        &config,
        &unix_config,
        edge.settings()?.edge.http_bind.port(),
    )?;

    let mut table = Table::new(
        format!("log-idle: HAProxy's CPU (master + workers) over {WINDOW:?} on an idle edge, share of one core"),
        &["access log goes to", "reader", "CPU"],
    );
    let pct = |s: f64| format!("{:.1} %", s * 100.0);
    table.row(vec![
        "loopback TCP ([logs] listen)".into(),
        "none".into(),
        pct(nobody),
    ]);
    table.row(vec![
        "loopback TCP ([logs] listen)".into(),
        "hapctl serve".into(),
        pct(served),
    ]);
    table.row(vec![
        "unix socket (before)".into(),
        "none".into(),
        pct(unix_share),
    ]);
    let version = Command::new(testkit::haproxy_bin()).arg("-v").output()?;
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    Ok(Report {
        tables: vec![table],
        targets: vec![Target {
            goal: format!(
                "an idle edge's HAProxy under {} % of a core while nothing takes the access log",
                TARGET_SHARE * 100.0
            ),
            met: Some(nobody < TARGET_SHARE),
            detail: format!(
                "{} with nobody listening, {} with hapctl serve; the unix socket of before: {} ({version})",
                pct(nobody),
                pct(served),
                pct(unix_share)
            ),
        }],
        notes: vec![format!(
            "one edge (`hapctl init`, no domains, `hapctl haproxy start`); the unix case runs the same \
             command line with the ring's `server` line changed to `unix@` a path that does not exist. {version}"
        )],
        json: json!({
            "window_s": WINDOW.as_secs_f64(),
            "haproxy": version,
            "tcp_no_reader": nobody,
            "tcp_with_serve": served,
            "unix_no_reader": unix_share,
        }),
    })
}

/// The rendered configuration with the log ring's server a unix socket nobody listens on.
fn unix_ring_config(text: &str, dir: &Path) -> anyhow::Result<String> {
    let socket = dir.join("nobody-listens.sock");
    let mut found = false;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("server hapctl ") {
                found = true;
                format!("    server hapctl unix@{}", socket.display())
            } else {
                l.to_string()
            }
        })
        .collect();
    if !found {
        bail!("the rendered configuration has no `server hapctl` line in its log ring");
    }
    Ok(lines.join("\n") + "\n")
}

/// Runs HAProxy with the edge's command line, `config` replaced by `instead`, and measures it
/// once it answers on `port`; stops it after, whatever happened.
fn with_master(args: &[String], config: &Path, instead: &Path, port: u16) -> anyhow::Result<f64> {
    let config = config.display().to_string();
    let args: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| {
            if *a == config {
                instead.display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let mut child = Command::new(testkit::haproxy_bin())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start haproxy with the unix-ring configuration")?;
    let pid = child.id() as i32;
    let measured = (|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("haproxy with the unix-ring configuration did not listen on {port}");
            }
            thread::sleep(Duration::from_millis(20));
        }
        core_share(pid)
    })();
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let _ = child.wait();
    measured
}

/// The share of one core `master` and its children used over [`WINDOW`].
fn core_share(master: i32) -> anyhow::Result<f64> {
    let before = tree_ticks(master)?;
    thread::sleep(WINDOW);
    let after = tree_ticks(master)?;
    Ok(after.saturating_sub(before) as f64 / TICKS_PER_SECOND / WINDOW.as_secs_f64())
}

/// User + system ticks of `pid` and its direct children (HAProxy's workers).
fn tree_ticks(pid: i32) -> anyhow::Result<u64> {
    let mut total = stat(pid)?.1;
    for entry in std::fs::read_dir("/proc")? {
        let Some(child) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // A process may end between the listing and the read.
        if let Ok((parent, ticks)) = stat(child) {
            if parent == pid {
                total += ticks;
            }
        }
    }
    Ok(total)
}

/// `(parent pid, utime + stime)` from `/proc/PID/stat`.
fn stat(pid: i32) -> anyhow::Result<(i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command, whose parentheses may hold anything.
    let rest = text
        .rfind(')')
        .and_then(|i| text.get(i + 2..))
        .context("a /proc stat line without its command")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).context("a short /proc stat line");
    Ok((
        field(1)?.parse()?,
        field(11)?.parse::<u64>()? + field(12)?.parse::<u64>()?,
    ))
}

fn cmdline(pid: i32) -> anyhow::Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect())
}
