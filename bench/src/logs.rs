//! logs: access-log lines lost under load (issue 10 target: 0 at 20,000 requests/s), on an
//! edge with `hapctl serve` receiving the log as in production (HAProxy's ring → loopback TCP
//! → rotating file).
//!
//! Each phase runs kept-alive clients in a closed loop, every client on its own path
//! (`/logs/PHASE/CLIENT`), and counts the answers it got; then it counts the lines of the
//! access log with that path prefix. Lost = answered − logged. Phases: a routed domain (a
//! real backend), HAProxy's own 404 page for an unknown host (the highest rate HAProxy can
//! log on this machine), and both again with a master reload every 2 s, the case HAProxy's
//! ring forwarder handles worst (it stops forwarding at the old worker's soft-stop).

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use testkit::daemon::{Daemon, Serve};
use testkit::Backend;
use testkit::Edge;

use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge};
use crate::traffic::Client;
use crate::{Ctx, Report, Table, Target};

const CLIENTS: usize = 16;
const RUN: Duration = Duration::from_secs(10);
const RELOAD_EVERY: Duration = Duration::from_secs(2);
const TARGET_RATE: f64 = 20_000.0;
/// A host no domain has: HAProxy answers its 404 page itself.
const UNKNOWN_HOST: &str = "nobody-here.example.net";

struct Phase {
    name: &'static str,
    host: String,
    reloads: bool,
}

/// What one phase did.
struct Outcome {
    name: &'static str,
    secs: f64,
    answered: u64,
    logged: u64,
    reconnects: u64,
    reloads: usize,
}

impl Outcome {
    fn lost(&self) -> i64 {
        self.answered as i64 - self.logged as i64
    }
    fn per_s(&self) -> f64 {
        self.answered as f64 / self.secs
    }
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let backend = Backend::keep_alive("hapctl-bench logs\n")?;
    let edge = new_edge(&hapctl)?;
    // One file for the whole run (counting across rotations works too, this is simpler).
    let toml = edge.path("hapctl.toml");
    let text = std::fs::read_to_string(&toml)?;
    std::fs::write(
        &toml,
        text.replacen("max_size = \"100MiB\"", "max_size = \"8GiB\"", 1),
    )?;
    edge.load(&fixture::state(10, Servers::At(&backend.addr())))?;
    edge.start()?;
    let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(60)))?;
    let routed = fixture::domain(0).to_string();
    let phases = [
        Phase {
            name: "routed",
            host: routed.clone(),
            reloads: false,
        },
        Phase {
            name: "page",
            host: UNKNOWN_HOST.into(),
            reloads: false,
        },
        Phase {
            name: "routed-reloads",
            host: routed,
            reloads: true,
        },
        Phase {
            name: "page-reloads",
            host: UNKNOWN_HOST.into(),
            reloads: true,
        },
    ];
    let mut outcomes = Vec::new();
    for phase in &phases {
        eprintln!("logs: {} for {RUN:?}, {CLIENTS} clients…", phase.name);
        outcomes.push(run_phase(&edge, phase)?);
    }
    drop(daemon);
    Ok(report(&outcomes))
}

fn run_phase(edge: &Edge, phase: &Phase) -> anyhow::Result<Outcome> {
    let port = edge.port;
    let started = Instant::now();
    let until = started + RUN;
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let host = phase.host.clone();
            let path = format!("/logs/{}/{i}", phase.name);
            thread::spawn(move || closed_loop(port, &host, &path, until))
        })
        .collect();
    let mut reloads = 0;
    if phase.reloads {
        while Instant::now() + RELOAD_EVERY < until {
            thread::sleep(RELOAD_EVERY);
            edge.master()
                .reload(Duration::from_secs(30))
                .context("reload the master")?;
            reloads += 1;
        }
    }
    let (mut answered, mut reconnects) = (0, 0);
    for t in threads {
        let (a, r) = t
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        answered += a;
        reconnects += r;
    }
    let secs = started.elapsed().as_secs_f64();
    let logged = settled_count(
        &edge.settings()?.logs.file,
        &format!("/logs/{}/", phase.name),
        answered,
    )?;
    Ok(Outcome {
        name: phase.name,
        secs,
        answered,
        logged,
        reconnects,
        reloads,
    })
}

/// Requests until `until`: (answers, reconnections). A connection the edge closed (an old
/// worker's at a reload) is opened again; its unanswered request was never processed.
fn closed_loop(port: u16, host: &str, path: &str, until: Instant) -> anyhow::Result<(u64, u64)> {
    let (mut answered, mut reconnects) = (0, 0);
    let mut client = Client::connect(port, host, path, "")?;
    while Instant::now() < until {
        match client.get() {
            Ok(_) => answered += 1,
            Err(_) => {
                reconnects += 1;
                client = Client::connect(port, host, path, "")?;
            }
        }
    }
    Ok((answered, reconnects))
}

/// Lines of the access log whose path starts with `prefix`, once the count reached `expected`
/// or stopped growing for 2 s (the receiver flushes every 0.2 s; HAProxy's ring may lag).
pub(crate) fn settled_count(file: &Path, prefix: &str, expected: u64) -> anyhow::Result<u64> {
    let mut last = (u64::MAX, Instant::now());
    loop {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("read the access log {}", file.display()))?;
        // Parsed: HAProxy's `json` converter escapes the path's slashes.
        let n = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["path"].as_str().is_some_and(|p| p.starts_with(prefix)))
            .count() as u64;
        if n >= expected || (n == last.0 && last.1.elapsed() > Duration::from_secs(2)) {
            return Ok(n);
        }
        if n != last.0 {
            last = (n, Instant::now());
        }
        thread::sleep(Duration::from_millis(200));
    }
}

fn report(outcomes: &[Outcome]) -> Report {
    let mut t = Table::new(
        format!(
            "Access-log lines lost, {CLIENTS} kept-alive clients, {} s per phase",
            RUN.as_secs()
        ),
        &[
            "phase",
            "req/s",
            "answered",
            "logged",
            "lost",
            "reloads",
            "reconnects",
        ],
    );
    for o in outcomes {
        t.row(vec![
            o.name.into(),
            format!("{:.0}", o.per_s()),
            o.answered.to_string(),
            o.logged.to_string(),
            o.lost().to_string(),
            o.reloads.to_string(),
            o.reconnects.to_string(),
        ]);
    }
    let mut report = Report::default();
    let steady: Vec<&Outcome> = outcomes.iter().filter(|o| o.reloads == 0).collect();
    let fastest = steady.iter().map(|o| o.per_s()).fold(0.0, f64::max);
    report.targets.push(Target {
        goal: format!("0 access-log lines lost at {TARGET_RATE:.0} req/s"),
        met: Some(steady.iter().all(|o| o.lost() == 0) && fastest >= TARGET_RATE),
        detail: steady
            .iter()
            .map(|o| {
                format!(
                    "{}: {} lost of {} at {:.0} req/s",
                    o.name,
                    o.lost(),
                    o.answered,
                    o.per_s()
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    });
    for o in outcomes.iter().filter(|o| o.reloads > 0) {
        report.notes.push(format!(
            "{}: {} lines lost over {} reloads ({:.1} per reload) of {} answered",
            o.name,
            o.lost(),
            o.reloads,
            o.lost() as f64 / o.reloads as f64,
            o.answered
        ));
    }
    report.json = json!(outcomes
        .iter()
        .map(|o| json!({
            "phase": o.name, "secs": o.secs, "answered": o.answered, "logged": o.logged,
            "lost": o.lost(), "reloads": o.reloads, "reconnects": o.reconnects,
        }))
        .collect::<Vec<_>>());
    report.tables.push(t);
    report
}
