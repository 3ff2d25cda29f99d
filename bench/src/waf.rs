//! waf: the web application firewall of issue 14 on one edge, `hapctl serve` running the
//! agent (`hapctl waf serve`, libmodsecurity and Debian's CRS) as in direct mode.
//!
//! Requests/s and latency (p50, p99) through the edge with the domain's WAF off, detect-only
//! and blocking, in alternating rounds (the order turns each round, so machine noise hits every
//! mode alike), the same clean requests in each; then one round of attacks (SQL injection in
//! the query) in block mode, answered 403 by HAProxy. Per round: HAProxy's and the agent's CPU,
//! and the time the agent took per request from its own histogram (receipt to answer, waiting
//! for a worker included: what a request waits for the agent, less the loopback hop). The
//! agent's memory idle after loading the rules and its peak after the rounds. Mode changes are
//! `hapctl waf policy` runs: runtime map changes, counted to make sure none reloads.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::waf::metrics::{CountersSnapshot, LATENCY_BUCKETS_US};
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::Backend;
use testkit::Edge;

use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge};
use crate::memory::{mib, DaemonProcess, Memory};
use crate::stats::{ms, percentile, Summary};
use crate::traffic::{cpu_secs, Client};
use crate::{Ctx, Report, Table};

const BODY: &str = "hapctl-bench backend\n";
const CLIENTS: usize = 8;
const ROUNDS: usize = 3;
const WARMUP: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_secs(5);
/// A clean request with a query, so the CRS has arguments to look at.
const CLEAN: &str = "/2026/12/01/hello-world/?page=2&sort=date";
const ATTACK: &str = "/?id=1%27%20OR%20%271%27%3D%271";
const MODES: [&str; 3] = ["off", "detect", "block"];

/// One round's results.
struct Round {
    mode: &'static str,
    traffic: &'static str,
    /// Answers with the expected status in the window, and the others.
    ok: u64,
    not_ok: u64,
    secs: f64,
    latencies_ms: Vec<f64>,
    haproxy_cpu: f64,
    agent_cpu: f64,
    /// The agent's counters over the round (warm-up included).
    inspected: u64,
    agent_sum_us: u64,
    agent_buckets: Vec<u64>,
}

impl Round {
    /// What the agent counted between two snapshots of its state file.
    fn count_agent(&mut self, before: &CountersSnapshot, after: &CountersSnapshot) {
        self.inspected = after.inspected - before.inspected;
        self.agent_sum_us = after.latency_sum_us - before.latency_sum_us;
        self.agent_buckets = after
            .latency_buckets
            .iter()
            .zip(&before.latency_buckets)
            .map(|(a, b)| a - b)
            .collect();
    }

    fn per_s(&self) -> f64 {
        self.ok as f64 / self.secs
    }

    fn p(&self, q: f64) -> f64 {
        if self.latencies_ms.is_empty() {
            return f64::NAN;
        }
        let mut v = self.latencies_ms.clone();
        v.sort_by(f64::total_cmp);
        percentile(&v, q)
    }

    /// The agent's mean time per request, ms.
    fn agent_mean_ms(&self) -> Option<f64> {
        (self.inspected > 0).then(|| self.agent_sum_us as f64 / self.inspected as f64 / 1000.0)
    }

    /// The bucket bound (ms) under which 99 % of the agent's answers fell.
    fn agent_p99_bound_ms(&self) -> Option<f64> {
        let want = (self.inspected as f64 * 0.99).ceil() as u64;
        let i = self.agent_buckets.iter().position(|n| *n >= want)?;
        (self.inspected > 0).then(|| LATENCY_BUCKETS_US[i] as f64 / 1000.0)
    }
}

struct Setup {
    daemon: Daemon,
    edge: Edge,
    _backend: Backend,
    state_file: PathBuf,
}

impl Setup {
    /// An edge with the WAF agent on a free port and 10 fixture domains, HAProxy and the
    /// daemon (which starts the agent) running.
    fn start(hapctl: &Path) -> anyhow::Result<Setup> {
        let backend = Backend::keep_alive(BODY)?;
        let edge = new_edge(hapctl)?;
        let settings = edge.path("hapctl.toml");
        let agent_port = testkit::free_port();
        let mut text = std::fs::read_to_string(&settings)?;
        text += &format!("\n[waf]\nlisten = \"127.0.0.1:{agent_port}\"\n");
        std::fs::write(&settings, text)?;
        edge.load(&fixture::state(10, Servers::At(&backend.addr())))?;
        edge.start()?;
        let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(60)))?;
        let state_file = hapctl::waf::state_file(&edge.settings()?.paths.run_dir);
        Ok(Setup {
            daemon,
            edge,
            _backend: backend,
            state_file,
        })
    }

    /// Block mode on `host`, then waits (bounded) until the edge blocks an SQL injection.
    fn wait_blocking(&self, host: &str) -> anyhow::Result<()> {
        self.set_mode(host, "block")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Client::connect(self.edge.port, host, ATTACK, "")?.get()? != 403 {
            if Instant::now() > deadline {
                bail!(
                    "the edge does not block an SQL injection with the WAF on: {}",
                    self.daemon.log_tail()
                );
            }
            thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// The agent's state file once it was rewritten after `since` (it is, every second).
    fn snapshot_after(&self, since: u64) -> anyhow::Result<CountersSnapshot> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) =
                CountersSnapshot::read(&self.state_file).filter(|s| s.updated_at > since)
            {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("the WAF agent's state file was not rewritten within 10 s");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn fresh_snapshot(&self) -> anyhow::Result<CountersSnapshot> {
        self.snapshot_after(hapctl::clock::unix_now().max(0) as u64)
    }

    fn set_mode(&self, host: &str, mode: &str) -> anyhow::Result<()> {
        self.edge.try_ok(&["waf", "policy", host, "--mode", mode])?;
        Ok(())
    }
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let s = Setup::start(&ctx.hapctl_bin()?)?;
    let host = fixture::domain(0).to_string();

    // The agent up, and HAProxy using it (its health check takes it in within a second).
    let first = s
        .fresh_snapshot()
        .context("the agent (started by hapctl serve)")?;
    let idle = Memory::of(first.pid as i32)?;
    s.wait_blocking(&host)?;
    let haproxy: Vec<i32> = s
        .edge
        .try_show_proc()?
        .workers
        .iter()
        .map(|w| w.pid)
        .collect();
    let reloads0 = s.edge.try_show_proc()?.master.reloads;

    eprintln!("waf: {ROUNDS} x 3 rounds of {MEASURE:?}, {CLIENTS} clients, off/detect/block…");
    let mut rounds = Vec::new();
    for r in 0..ROUNDS {
        let mut order = MODES;
        order.rotate_left(r % MODES.len());
        for mode in order {
            s.set_mode(&host, mode)?;
            rounds.push(round(&s, &host, mode, "clean", first.pid as i32, &haproxy)?);
        }
    }
    s.set_mode(&host, "block")?;
    rounds.push(round(
        &s,
        &host,
        "block",
        "attack",
        first.pid as i32,
        &haproxy,
    )?);
    let reloads = s.edge.try_show_proc()?.master.reloads as i64 - reloads0 as i64;
    let last = s.fresh_snapshot()?;
    if last.pid != first.pid {
        bail!(
            "the agent was restarted during the rounds (pid {} then {})",
            first.pid,
            last.pid
        );
    }
    let peak = Memory::of(last.pid as i32)?;

    let mut report = Report::default();
    report_rounds(&mut report, &rounds);
    report.tables.push(memory_table(idle, peak));
    report.notes.push(format!(
        "{} mode changes (hapctl waf policy, runtime map changes): {reloads} reloads of HAProxy; agent {}, {} requests inspected in all",
        rounds.len() + 1,
        last.engine,
        last.inspected
    ));
    report.json = json!({
        "clients": CLIENTS,
        "rounds": rounds.iter().map(round_json).collect::<Vec<_>>(),
        "agent_rss_kb": {"idle": idle.rss_kb, "after": peak.rss_kb, "peak": peak.hwm_kb},
        "reloads": reloads,
    });
    Ok(report)
}

/// One client's closed loop from the barrier to `to`: answers as wanted, not, and the
/// latencies of those sent from `from` on.
fn closed_loop(
    mut c: Client,
    barrier: Arc<Barrier>,
    (from, to): (Instant, Instant),
    want: u16,
) -> thread::JoinHandle<anyhow::Result<(u64, u64, Vec<f64>)>> {
    thread::spawn(move || {
        barrier.wait();
        let (mut ok, mut not_ok, mut lat) = (0, 0, Vec::new());
        loop {
            let t0 = Instant::now();
            let status = c.get()?;
            let now = Instant::now();
            if now >= to {
                return Ok((ok, not_ok, lat));
            }
            if t0 >= from {
                lat.push((now - t0).as_secs_f64() * 1000.0);
                if status == want {
                    ok += 1;
                } else {
                    not_ok += 1;
                }
            }
        }
    })
}

fn memory_table(idle: Memory, peak: Memory) -> Table {
    let mut t = Table::new(
        "The agent's memory (/proc/PID/status)",
        &["when", "RSS", "peak (VmHWM)", "threads"],
    );
    for (when, m) in [("idle, rules loaded", idle), ("after the rounds", peak)] {
        t.row(vec![
            when.into(),
            mib(m.rss_kb),
            mib(m.hwm_kb),
            m.threads.to_string(),
        ]);
    }
    t
}

/// `CLIENTS` kept-alive clients in a closed loop for `WARMUP` and then `MEASURE`, every
/// answer timed; the agent's counters before and after.
fn round(
    s: &Setup,
    host: &str,
    mode: &'static str,
    traffic: &'static str,
    agent: i32,
    haproxy: &[i32],
) -> anyhow::Result<Round> {
    let (path, want) = match (traffic, mode) {
        ("attack", "block") => (ATTACK, 403),
        ("attack", _) => (ATTACK, 200),
        _ => (CLEAN, 200),
    };
    let before = s.fresh_snapshot()?;
    let clients = (0..CLIENTS)
        .map(|_| Client::connect(s.edge.port, host, path, ""))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let barrier = Arc::new(Barrier::new(CLIENTS + 1));
    let from = Instant::now() + WARMUP;
    let to = from + MEASURE;
    let threads: Vec<_> = clients
        .into_iter()
        .map(|c| closed_loop(c, barrier.clone(), (from, to), want))
        .collect();
    barrier.wait();
    thread::sleep(from.saturating_duration_since(Instant::now()));
    let cpu = || {
        (
            haproxy
                .iter()
                .map(|p| cpu_secs(&p.to_string()))
                .sum::<f64>(),
            cpu_secs(&agent.to_string()),
        )
    };
    let (h0, a0) = cpu();
    thread::sleep(to.saturating_duration_since(Instant::now()));
    let (h1, a1) = cpu();
    let mut r = Round {
        mode,
        traffic,
        ok: 0,
        not_ok: 0,
        secs: MEASURE.as_secs_f64(),
        latencies_ms: Vec::new(),
        haproxy_cpu: h1 - h0,
        agent_cpu: a1 - a0,
        inspected: 0,
        agent_sum_us: 0,
        agent_buckets: Vec::new(),
    };
    for t in threads {
        let (ok, not_ok, lat) = t
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        r.ok += ok;
        r.not_ok += not_ok;
        r.latencies_ms.extend(lat);
    }
    let after = s.snapshot_after(hapctl::clock::unix_now().max(0) as u64)?;
    r.count_agent(&before, &after);
    if mode == "off" && r.inspected > 0 {
        bail!("WAF off, yet the agent inspected {} requests", r.inspected);
    }
    if r.not_ok > 0 {
        bail!("{mode} {traffic}: {} answers were not {want}", r.not_ok);
    }
    eprintln!(
        "  {mode} {traffic}: {:.0} req/s, p50 {} p99 {}, agent {} per request",
        r.per_s(),
        ms(r.p(50.0)),
        ms(r.p(99.0)),
        r.agent_mean_ms().map_or("-".into(), ms)
    );
    Ok(r)
}

fn report_rounds(report: &mut Report, rounds: &[Round]) {
    let mut t = Table::new(
        format!(
            "Through the edge, {CLIENTS} kept-alive clients, {ROUNDS} rounds of {} s per mode, alternating (medians of the rounds)",
            MEASURE.as_secs()
        ),
        &["WAF", "requests", "req/s", "vs off", "p50", "p99", "p99 vs off", "HAProxy cores", "agent cores", "agent mean", "agent p99 ≤"],
    );
    let med = |v: Vec<f64>| Summary::of(&v).map_or(f64::NAN, |s| s.median);
    let of = |mode: &'static str, traffic: &'static str| {
        rounds
            .iter()
            .filter(move |r| r.mode == mode && r.traffic == traffic)
    };
    let base_rate = med(of("off", "clean").map(Round::per_s).collect());
    let base_p99 = med(of("off", "clean").map(|r| r.p(99.0)).collect());
    for (mode, traffic) in [
        ("off", "clean"),
        ("detect", "clean"),
        ("block", "clean"),
        ("block", "attack"),
    ] {
        let rate = med(of(mode, traffic).map(Round::per_s).collect());
        let p99 = med(of(mode, traffic).map(|r| r.p(99.0)).collect());
        let agent_mean = med(of(mode, traffic).filter_map(Round::agent_mean_ms).collect());
        let agent_p99 = med(of(mode, traffic)
            .filter_map(Round::agent_p99_bound_ms)
            .collect());
        let show = |v: f64| if v.is_nan() { "-".to_string() } else { ms(v) };
        t.row(vec![
            mode.to_string(),
            if traffic == "attack" {
                "SQL injection (403)".into()
            } else {
                "clean (200)".into()
            },
            format!("{rate:.0}"),
            format!("{:.2}", rate / base_rate),
            ms(med(of(mode, traffic).map(|r| r.p(50.0)).collect())),
            ms(p99),
            format!("{:.2}", p99 / base_p99),
            format!(
                "{:.2}",
                med(of(mode, traffic).map(|r| r.haproxy_cpu / r.secs).collect())
            ),
            format!(
                "{:.2}",
                med(of(mode, traffic).map(|r| r.agent_cpu / r.secs).collect())
            ),
            show(agent_mean),
            show(agent_p99),
        ]);
    }
    report.tables.push(t);
}

fn round_json(r: &Round) -> Value {
    json!({
        "mode": r.mode, "traffic": r.traffic, "req_per_s": r.per_s(), "ok": r.ok, "not_ok": r.not_ok,
        "p50_ms": r.p(50.0), "p99_ms": r.p(99.0), "haproxy_cpu_s": r.haproxy_cpu, "agent_cpu_s": r.agent_cpu,
        "inspected": r.inspected, "agent_mean_ms": r.agent_mean_ms(), "agent_p99_bound_ms": r.agent_p99_bound_ms(),
        "agent_buckets": r.agent_buckets,
    })
}
