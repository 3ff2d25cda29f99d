//! traffic-collect: what counting traffic per domain costs (issue 37), on an edge with
//! `hapctl serve` receiving the access log as in production.
//!
//! 1. Requests/s through the edge with `[traffic] collect` on and off, in alternating rounds
//!    (the daemon restarted between them with the setting changed; off, it still receives and
//!    writes the log, so the difference is the counting alone): the ratio of the medians.
//! 2. The figures equal the traffic: a fixed number of requests per domain (some of them
//!    turned away by a block), then `GET /v1/traffic` compared with what the clients got.
//! 3. Memory at 10,000 domains, in the daemon and in this process (`traffic_memory.rs`).

use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::{Backend, Edge};

use crate::api::Api;
use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge};
use crate::memory::mib;
use crate::stats::Summary;
use crate::traffic::{self, Round, Watched};
use crate::traffic_memory::{self, DaemonRound, DOMAINS as DOMAINS_10K};
use crate::{Ctx, Report, Table, Target};

const CLIENTS: usize = 8;
const ROUNDS: usize = 4;
const WARMUP: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_secs(5);
const TARGET_RATIO: f64 = 0.98;
/// Requests per domain of the fixed-count phase, over this many domains.
const PER_DOMAIN: u64 = 5_000;
const DOMAINS: usize = 4;
const TARGET_MIB: f64 = 30.0;

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    // First, while this process runs no other thread: glibc's counts cover every arena.
    eprintln!("traffic-collect: a minute and an hour of series at {DOMAINS_10K} domains, in this process…");
    let hour = traffic_memory::in_process();
    let hapctl = ctx.hapctl_bin()?;
    let backend = Backend::keep_alive("hapctl-bench traffic\n")?;
    let edge = new_edge(&hapctl)?;
    edge.load(&fixture::state(10, Servers::At(&backend.addr())))?;
    edge.start()?;
    let mut report = Report::default();

    eprintln!("traffic-collect: {ROUNDS} x 2 rounds of {MEASURE:?}, {CLIENTS} clients…");
    let rounds = load_rounds(&edge)?;
    load_report(&mut report, &rounds);

    eprintln!("traffic-collect: {PER_DOMAIN} requests on each of {DOMAINS} domains…");
    let accuracy = accuracy(&edge)?;
    accuracy_report(&mut report, &accuracy);

    let daemons = traffic_memory::in_daemon(&hapctl, &backend.addr())?;
    memory_report(&mut report, &daemons);
    report.notes.push(format!(
        "the counts' code in this process at {DOMAINS_10K} domains holds {:.1} MiB of heap after a minute of lines and {:.1} MiB after an hour (a domain's rings are whole from its first request); a report (top 50) holds their lock {:.1} ms, the /metrics series {:.1} ms (medians of 5)",
        hour.minute_mib, hour.hour_mib, hour.report_ms, hour.metrics_ms
    ));
    report.json = json!({
        "rounds": rounds.iter().map(|(on, r)| json!({
            "collect": on, "req_per_s": r.per_s(), "ok": r.ok, "not_ok": r.not_ok,
            "haproxy_cpu_s": r.haproxy_cpu, "daemon_cpu_s": r.daemon_cpu,
        })).collect::<Vec<_>>(),
        "accuracy": accuracy,
        "daemons": traffic_memory::rounds_json(&daemons),
        "in_process_mib": {"minute": hour.minute_mib, "hour": hour.hour_mib},
        "report_ms": hour.report_ms,
        "metrics_ms": hour.metrics_ms,
    });
    Ok(report)
}

/// Starts `hapctl serve` with `[traffic] collect` set as asked.
pub(crate) fn daemon(edge: &Edge, collect: bool) -> anyhow::Result<Daemon> {
    let toml = edge.path("hapctl.toml");
    let text = std::fs::read_to_string(&toml)?;
    let (from, to) = if collect {
        ("collect = false", "collect = true")
    } else {
        ("collect = true", "collect = false")
    };
    std::fs::write(&toml, text.replacen(from, to, 1))?;
    Daemon::try_start(edge, &Serve::within(Duration::from_secs(60)))
}

fn load_rounds(edge: &Edge) -> anyhow::Result<Vec<(bool, Round)>> {
    let host = fixture::domain(0).to_string();
    let headers = vec![String::new(); CLIENTS];
    let mut rounds = Vec::new();
    for r in 0..ROUNDS {
        let order = if r.is_multiple_of(2) {
            [true, false]
        } else {
            [false, true]
        };
        for on in order {
            let d = daemon(edge, on)?;
            let watched = Watched {
                haproxy: edge
                    .try_show_proc()?
                    .workers
                    .iter()
                    .map(|w| w.pid)
                    .collect(),
                daemon: d.running_pid().unwrap_or(0),
            };
            let one = traffic::round(edge.port, &host, "/", &headers, WARMUP, MEASURE, &watched)?;
            rounds.push((on, one));
        }
    }
    Ok(rounds)
}

fn median(rounds: &[(bool, Round)], on: bool) -> f64 {
    let rates: Vec<f64> = rounds
        .iter()
        .filter(|(o, _)| *o == on)
        .map(|(_, r)| r.per_s())
        .collect();
    Summary::of(&rates).map_or(0.0, |s| s.median)
}

fn load_report(report: &mut Report, rounds: &[(bool, Round)]) {
    let mut t = Table::new(
        format!("Requests/s with the traffic counts on and off, {CLIENTS} kept-alive clients, {} s rounds", MEASURE.as_secs()),
        &["round", "collect", "req/s", "haproxy CPU s", "daemon CPU s"],
    );
    for (i, (on, r)) in rounds.iter().enumerate() {
        t.row(vec![
            (i / 2 + 1).to_string(),
            if *on { "on" } else { "off" }.into(),
            format!("{:.0}", r.per_s()),
            format!("{:.2}", r.haproxy_cpu),
            format!("{:.2}", r.daemon_cpu),
        ]);
    }
    let (on, off) = (median(rounds, true), median(rounds, false));
    let ratio = on / off.max(1e-9);
    report.targets.push(Target {
        goal: format!("req/s with the counts on ÷ off ≥ {TARGET_RATIO}"),
        met: Some(ratio >= TARGET_RATIO),
        detail: format!("medians {on:.0} ÷ {off:.0} = {ratio:.3}"),
    });
    report.tables.push(t);
}

/// For each domain: requests sent, and what `/v1/traffic` counted (15 min window and totals).
fn accuracy(edge: &Edge) -> anyhow::Result<Value> {
    let d = daemon(edge, true)?;
    let api = Api::of(&d);
    let hosts: Vec<String> = (0..DOMAINS)
        .map(|i| fixture::domain(i).to_string())
        .collect();
    let threads: Vec<_> = hosts
        .iter()
        .map(|host| {
            let (port, host) = (edge.port, host.clone());
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let mut c = traffic::Client::connect(port, &host, "/", "")?;
                let mut ok = 0;
                for _ in 0..PER_DOMAIN {
                    ok += u64::from(c.get()? == 200);
                }
                Ok(ok)
            })
        })
        .collect();
    let mut sent = Vec::new();
    for t in threads {
        sent.push(
            t.join()
                .map_err(|_| anyhow::anyhow!("a client panicked"))??,
        );
    }
    let want = PER_DOMAIN * DOMAINS as u64;
    let report = settled(&api, want)?;
    let mut rows = Vec::new();
    for (host, ok) in hosts.iter().zip(sent) {
        let d = report["domains"]
            .as_array()
            .and_then(|a| a.iter().find(|d| d["domain"] == host.as_str()))
            .with_context(|| format!("{host} in /v1/traffic"))?;
        let w15 = d["windows"][1]["requests"].as_u64().unwrap_or(0);
        rows.push(
            json!({"domain": host, "answered_200": ok, "sent": PER_DOMAIN,
            "counted_15m": w15, "counted_total": d["totals"]["requests"]}),
        );
    }
    Ok(json!(rows))
}

/// `/v1/traffic?window=15m` once the edge's count reached `want` or stopped growing for 3 s.
fn settled(api: &Api, want: u64) -> anyhow::Result<Value> {
    let mut last = (u64::MAX, std::time::Instant::now());
    loop {
        let a = api.call("GET", "/v1/traffic?window=15m", None)?;
        if a.status != 200 {
            bail!("GET /v1/traffic: {}", a.describe());
        }
        let v = a.json();
        let n = v["edge"]["totals"]["requests"].as_u64().unwrap_or(0);
        if n >= want || (n == last.0 && last.1.elapsed() > Duration::from_secs(3)) {
            return Ok(v);
        }
        if n != last.0 {
            last = (n, std::time::Instant::now());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn accuracy_report(report: &mut Report, rows: &Value) {
    let mut t = Table::new(
        "Requests sent and counted per domain (GET /v1/traffic, 15 min window)",
        &["domain", "sent", "answered 200", "counted", "error"],
    );
    let mut worst: f64 = 0.0;
    for r in rows.as_array().into_iter().flatten() {
        let (sent, counted) = (
            r["sent"].as_u64().unwrap_or(0) as f64,
            r["counted_15m"].as_u64().unwrap_or(0) as f64,
        );
        let error = (counted - sent).abs() / sent.max(1.0);
        worst = worst.max(error);
        t.row(vec![
            r["domain"].as_str().unwrap_or("").into(),
            r["sent"].to_string(),
            r["answered_200"].to_string(),
            r["counted_15m"].to_string(),
            format!("{:.3} %", error * 100.0),
        ]);
    }
    report.targets.push(Target {
        goal: "figures equal the generated traffic within 1 %".into(),
        met: Some(worst <= 0.01),
        detail: format!("largest difference {:.3} %", worst * 100.0),
    });
    report.tables.push(t);
}

/// The daemon's resident memory after a request to each of 10,000 domains, counts on and off.
fn memory_report(report: &mut Report, rounds: &[DaemonRound]) {
    let mut t = Table::new(
        format!("`hapctl serve` at {DOMAINS_10K} domains, before and after a request to each (MiB, /proc/PID/status)"),
        &["collect", "VmRSS before", "VmRSS after", "RssAnon after", "domains tracked"],
    );
    for r in rounds {
        t.row(vec![
            if r.collect { "on" } else { "off" }.into(),
            mib(r.before.rss_kb),
            mib(r.after.rss_kb),
            mib(r.after.anon_kb),
            r.tracked.map_or("-".into(), |n| n.to_string()),
        ]);
    }
    let (on, off) = traffic_memory::medians(rounds);
    let more = (on - off) / 1024.0;
    report.targets.push(Target {
        goal: format!(
            "the daemon at {DOMAINS_10K} domains, counts on, < {TARGET_MIB} MiB more than off"
        ),
        met: Some(more < TARGET_MIB),
        detail: format!(
            "VmRSS medians {:.1} − {:.1} = {more:.1} MiB",
            on / 1024.0,
            off / 1024.0
        ),
    });
    report.tables.push(t);
}
