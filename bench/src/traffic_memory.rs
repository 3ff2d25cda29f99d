//! traffic-collect, memory: what the traffic counts hold at 10,000 domains.
//!
//! 1. In the daemon: an edge of 10,000 domains, `hapctl serve` with `[traffic] collect` off
//!    and on in alternating rounds, a request to every domain (every tenth from a blocked
//!    address, so a reason is kept too), then the daemon's resident memory once the access log
//!    has every line. On − off is what the counts cost.
//! 2. Why a minute of traffic is an hour's memory: the rings of a domain are made whole at its
//!    first request. The counts' own code in this process, fed a minute and then the rest of
//!    an hour of lines at 10,000 domains (a simulated clock), holds the same heap after both
//!    (glibc's `mallinfo2`); and how long reading them holds their lock.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use testkit::Edge;

use crate::api::Api;
use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge};
use crate::memory::{DaemonProcess, Memory};
use crate::stats::Summary;

pub const DOMAINS: usize = 10_000;
/// Daemons per setting, alternating off and on.
const ROUNDS: usize = 2;
/// Clients sending the requests at once.
const SENDERS: usize = 4;
/// Every tenth request comes from here, blocked.
const BLOCKED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// One daemon's memory before and after the requests.
pub struct DaemonRound {
    pub collect: bool,
    pub before: Memory,
    pub after: Memory,
    /// Domains `/v1/traffic` says it tracks (on only).
    pub tracked: Option<u64>,
}

/// Rounds of `hapctl serve` on a 10,000-domain edge, off and on alternately.
pub fn in_daemon(hapctl: &Path, backend: &str) -> anyhow::Result<Vec<DaemonRound>> {
    let edge = new_edge(hapctl)?;
    edge.load(&fixture::state(DOMAINS, Servers::At(backend)))?;
    edge.add_blocks(&[fixture::address_block(
        BLOCKED,
        "hapctl-bench traffic memory",
    )])?;
    edge.start()?;
    let mut rounds = Vec::new();
    for r in 0..ROUNDS * 2 {
        let collect = r % 4 == 1 || r % 4 == 2;
        eprintln!(
            "traffic-collect: daemon memory at {DOMAINS} domains, collect {}…",
            if collect { "on" } else { "off" }
        );
        rounds.push(round(&edge, collect, r)?);
    }
    Ok(rounds)
}

fn round(edge: &Edge, collect: bool, r: usize) -> anyhow::Result<DaemonRound> {
    let daemon = crate::traffic_collect::daemon(edge, collect)?;
    // Past the daemon's startup work.
    std::thread::sleep(Duration::from_secs(3));
    let before = daemon.memory()?;
    let prefix = format!("/traffic-memory-{r}/");
    send(edge.port, &prefix)?;
    let logged =
        crate::logs::settled_count(&edge.path("logs/access.log"), &prefix, DOMAINS as u64)?;
    anyhow::ensure!(
        logged == DOMAINS as u64,
        "{logged} of {DOMAINS} requests reached the access log"
    );
    // The counting thread takes the lines a few times a second.
    std::thread::sleep(Duration::from_secs(1));
    let tracked = if collect {
        let a = Api::of(&daemon).call("GET", "/v1/traffic?limit=1", None)?;
        Some(a.json()["tracked_domains"].as_u64().unwrap_or(0))
    } else {
        None
    };
    let after = daemon.memory()?;
    Ok(DaemonRound {
        collect,
        before,
        after,
        tracked,
    })
}

/// A request to every domain of the fixture, every tenth from [`BLOCKED`].
fn send(port: u16, prefix: &str) -> anyhow::Result<()> {
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let prefix = prefix.to_string();
            std::thread::spawn(move || -> anyhow::Result<()> {
                for i in (s..DOMAINS).step_by(SENDERS) {
                    let host = fixture::domain(i).to_string().replace('*', "www");
                    let source = if i % 10 == 0 {
                        BLOCKED
                    } else {
                        Ipv4Addr::LOCALHOST
                    };
                    testkit::try_http_get(Some(source), port, &host, &prefix, &[])
                        .map_err(anyhow::Error::msg)
                        .with_context(|| format!("GET {host}{prefix}"))?;
                }
                Ok(())
            })
        })
        .collect();
    for s in senders {
        s.join()
            .map_err(|_| anyhow::anyhow!("a sender panicked"))??;
    }
    Ok(())
}

/// The median resident memory (kB) after the requests, with collect on and off.
pub fn medians(rounds: &[DaemonRound]) -> (f64, f64) {
    let of = |on: bool| {
        let kb: Vec<f64> = rounds
            .iter()
            .filter(|r| r.collect == on)
            .map(|r| r.after.rss_kb as f64)
            .collect();
        Summary::of(&kb).map_or(0.0, |s| s.median)
    };
    (of(true), of(false))
}

pub fn rounds_json(rounds: &[DaemonRound]) -> Value {
    json!(rounds
        .iter()
        .map(|r| json!({
            "collect": r.collect, "before": r.before.to_json(), "after": r.after.to_json(),
            "tracked_domains": r.tracked,
        }))
        .collect::<Vec<_>>())
}

/// The heap the counts hold after a minute and after an hour of lines at [`DOMAINS`]
/// domains, and how long the lock is held to read them (ms: the top 50 of a report, the
/// `/metrics` series), medians of 5; the counting thread waits that long.
pub struct Hour {
    pub minute_mib: f64,
    pub hour_mib: f64,
    pub report_ms: f64,
    pub metrics_ms: f64,
}

pub fn in_process() -> Hour {
    let in_use = || {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        unsafe { libc::mallinfo2() }.uordblks
    };
    let mib = |bytes: usize| bytes as f64 / f64::from(1u32 << 20);
    let t0 = 1_800_000_000;
    // The lines first: only what the counts hold is measured.
    let lines: Vec<Vec<u8>> = (0..DOMAINS)
        .map(|i| {
            let denied = if i % 10 == 0 { "blocked" } else { "-" };
            format!(
                r#"{{"host":"site-{i}.example.com","status":200,"bytes":1200,"bytes_in":300,"ta":12,"denied_by":"{denied}"}}"#
            )
            .into_bytes()
        })
        .collect();
    let before = in_use();
    let traffic = hapctl::traffic::Traffic::new(t0, 20_000);
    let mut minute = 0;
    for m in 0..60 {
        for line in &lines {
            traffic.record_line(t0 + m * 60, line);
        }
        if m == 0 {
            minute = in_use().saturating_sub(before);
        }
    }
    let hour = in_use().saturating_sub(before);
    let now = t0 + 59 * 60 + 30;
    let timed = |f: &dyn Fn()| {
        let samples: Vec<f64> = (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        Summary::of(&samples).map_or(0.0, |s| s.median)
    };
    use hapctl::traffic::{SortKey, Window};
    let report_ms = timed(&|| drop(traffic.report(now, SortKey::Requests, Window::OneMinute, 50)));
    let metrics_ms = timed(&|| {
        let domains = traffic.with(|b| b.domain_reports(now));
        drop(hapctl::traffic::render_metrics(domains, 20, DOMAINS));
    });
    drop(traffic);
    Hour {
        minute_mib: mib(minute),
        hour_mib: mib(hour),
        report_ms,
        metrics_ms,
    }
}
