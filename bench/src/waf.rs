//! waf: the web application firewall of issue 14 on one edge, `hapctl serve` running the
//! agent (`hapctl waf serve`, libmodsecurity and Debian's CRS) as in direct mode, beside the
//! floor it cannot go below (issue 38), all in one run:
//!
//! - the floor (`waf_floor.rs`): hapctl's own evaluation of the edge's clean request in
//!   process, no socket, on one and two threads, with the CRS and with hapctl's base alone;
//! - through the edge (`waf_round.rs`): requests/s and latency with the domain's WAF off,
//!   detect-only and blocking, in alternating rounds (the order turns each round, so machine
//!   noise hits every mode alike), the same clean requests in each; one round of attacks (SQL
//!   injection in the query) in block mode, answered 403 by HAProxy; a long detect round that
//!   counts every failed answer; one client alone (latency without queueing);
//! - the glue: the agent with hapctl's base alone (no CRS), so its cost is the agent's own;
//! - with `HAPCTL_BENCH_BASELINE` naming another hapctl binary, its agent on an edge of its
//!   own, its turns of rounds between this one's and its glue after (before / after in one run).
//!
//! Per round: HAProxy's, the agent's and the whole machine's CPU, and the time the agent took
//! per request from its own histogram (receipt to answer, waiting for a worker included). The
//! agent's memory idle after loading the rules and its peak after the rounds. Mode changes are
//! `hapctl waf policy` runs: runtime map changes, counted to make sure none reloads.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use hapctl::settings::waf::DEBIAN_CRS;
use hapctl::waf::message::Inspect;
use hapctl::waf::metrics::CountersSnapshot;
use hapctl::waf::Engine;
use serde_json::json;
use testkit::daemon::{Daemon, Serve};
use testkit::Backend;
use testkit::Edge;

use crate::blocks_scale::BASELINE_ENV;
use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge};
use crate::memory::{mib, DaemonProcess, Memory};
use crate::sys::TempDir;
use crate::traffic::Client;
use crate::waf_floor::{self, Floor};
use crate::waf_round::{self, Pids, Plan, Round};
use crate::{Ctx, Report, Table};

const BODY: &str = "hapctl-bench backend\n";
pub const CLIENTS: usize = 8;
const ROUNDS: usize = 3;
pub const MEASURE: Duration = Duration::from_secs(5);
/// The round that counts failed answers (issue 38: none over 60 s).
const SOAK: Duration = Duration::from_secs(60);
const FLOOR: Duration = Duration::from_secs(2);
/// A clean request with a query, so the CRS has arguments to look at.
pub const CLEAN: &str = "/2026/12/01/hello-world/?page=2&sort=date";
pub const ATTACK: &str = "/?id=1%27%20OR%20%271%27%3D%271";
const MODES: [&str; 3] = ["off", "detect", "block"];

struct Setup {
    daemon: Daemon,
    edge: Edge,
    _backend: Backend,
    state_file: PathBuf,
}

impl Setup {
    /// An edge with the WAF agent on a free port (its rules from the loader `crs`) and 10
    /// fixture domains, HAProxy and the daemon (which starts the agent) running.
    fn start(hapctl: &Path, crs: &Path) -> anyhow::Result<Setup> {
        let backend = Backend::keep_alive(BODY)?;
        let edge = new_edge(hapctl)?;
        let settings = edge.path("hapctl.toml");
        let agent_port = testkit::free_port();
        let mut text = std::fs::read_to_string(&settings)?;
        text += &format!(
            "\n[waf]\nlisten = \"127.0.0.1:{agent_port}\"\ncrs = \"{}\"\n",
            crs.display()
        );
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

    /// `mode` on `host`, then waits (bounded) until the agent answers for the edge: `path`
    /// answered `want` and counted by the agent.
    fn wait_agent(&self, host: &str, mode: &str, path: &str, want: u16) -> anyhow::Result<()> {
        self.set_mode(host, mode)?;
        let before = self.fresh_snapshot()?.inspected;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = Client::connect(self.edge.port, host, path, "")?.get()?;
            if status == want && self.fresh_snapshot()?.inspected > before {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the edge does not answer {path} with {want} through the agent in {mode} mode: {}",
                    self.daemon.log_tail()
                );
            }
            thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs `plans` in order, each in its own mode, the agent's counters read around each.
    fn rounds(&self, host: &str, plans: &[Plan], pids: &Pids) -> anyhow::Result<Vec<Round>> {
        let mut out = Vec::new();
        for plan in plans {
            self.set_mode(host, plan.mode)?;
            let before = self.fresh_snapshot()?;
            let mut r = waf_round::run(self.edge.port, host, *plan, pids)?;
            r.count_agent(&before, &self.fresh_snapshot()?);
            if plan.mode == "off" && r.inspected > 0 {
                bail!("WAF off, yet the agent inspected {} requests", r.inspected);
            }
            eprintln!(
                "  {} {} {} {} x{}: {:.0} req/s, p50 {:.2} p99 {:.2} ms, agent {:.0} µs CPU/request, {} failed",
                plan.agent,
                plan.rules,
                plan.mode,
                plan.traffic,
                plan.clients,
                r.per_s(),
                r.p(50.0),
                r.p(99.0),
                r.agent_cpu_us(),
                r.not_ok + r.agent_failed
            );
            out.push(r);
        }
        Ok(out)
    }

    /// The agent's and HAProxy's processes.
    fn pids(&self) -> anyhow::Result<(i32, Vec<i32>)> {
        let agent = self.fresh_snapshot()?.pid as i32;
        let proc = self.edge.try_show_proc()?;
        Ok((agent, proc.workers.iter().map(|w| w.pid).collect()))
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
    let host = fixture::domain(0).to_string();
    let (path, query) = CLEAN.split_once('?').expect("a query");
    let empty = TempDir::new("waf-empty")?;
    let empty_rules = empty.path().join("empty.load");
    std::fs::write(&empty_rules, "# no CRS: hapctl's base alone\n")?;
    let req = waf_floor::request(path, query, &host);
    let crs = Engine::load(Path::new(DEBIAN_CRS))?;
    let mut floors = Vec::new();

    let hapctl = ctx.hapctl_bin()?;
    let baseline = std::env::var_os(BASELINE_ENV).map(PathBuf::from);
    let s = Setup::start(&hapctl, Path::new(DEBIAN_CRS))?;
    s.wait_agent(&host, "block", ATTACK, 403)?;
    let (agent, haproxy) = s.pids()?;
    let pids = Pids {
        agent,
        haproxy: &haproxy,
    };
    // The baseline's edge beside it, its turns between this one's.
    let b = match &baseline {
        Some(bin) => {
            let b = Setup::start(bin, Path::new(DEBIAN_CRS))?;
            b.wait_agent(&host, "block", ATTACK, 403)?;
            let pids = b.pids()?;
            Some((b, pids))
        }
        None => None,
    };
    let idle = Memory::of(agent)?;
    let reloads0 = s.edge.try_show_proc()?.master.reloads;
    eprintln!("waf: {ROUNDS} x 3 rounds of {MEASURE:?}, {CLIENTS} clients, off/detect/block, then attacks, {SOAK:?} of detect, one client…");
    // The floor before each turn: other work on the machine changes it as much as the rounds.
    let mut rounds = Vec::new();
    for r in 0..ROUNDS {
        floors.extend(floor("crs", &crs, &req)?);
        rounds.extend(s.rounds(&host, &turn(r), &pids)?);
        if let Some((b, (agent, haproxy))) = &b {
            let pids = Pids {
                agent: *agent,
                haproxy,
            };
            rounds.extend(b.rounds(&host, &turn(r).map(Plan::baseline), &pids)?);
        }
    }
    drop(b);
    rounds.extend(s.rounds(&host, &tail(), &pids)?);
    let reloads = s.edge.try_show_proc()?.master.reloads as i64 - reloads0 as i64;
    let last = s.fresh_snapshot()?;
    if last.pid as i32 != agent {
        bail!(
            "the agent was restarted during the rounds (pid {agent} then {})",
            last.pid
        );
    }
    let peak = Memory::of(agent)?;
    drop(s);

    eprintln!("waf: the glue, the agent with hapctl's base alone…");
    floors.extend(floor("empty", &Engine::load(&empty_rules)?, &req)?);
    let glue = [
        plan("empty", "off", "clean", CLIENTS, MEASURE),
        plan("empty", "detect", "clean", CLIENTS, MEASURE),
    ];
    rounds.extend(glue_rounds(&hapctl, &empty_rules, &host, glue)?);
    if let Some(bin) = &baseline {
        let glue = glue.map(Plan::baseline);
        rounds.extend(glue_rounds(bin, &empty_rules, &host, glue)?);
    }

    let mut report = Report::default();
    crate::waf_report::report(&mut report, &floors, &rounds);
    report.tables.push(memory_table(idle, peak));
    report.notes.push(format!(
        "{} mode changes (hapctl waf policy, runtime map changes): {reloads} reloads of HAProxy; agent {}, {} requests inspected with the CRS",
        rounds.len() + 1,
        last.engine,
        last.inspected
    ));
    report.json = json!({
        "clients": CLIENTS,
        "floor": floors.iter().map(|(rules, f)| json!({
            "rules": rules, "threads": f.threads, "transactions": f.transactions, "secs": f.secs,
            "cpu_secs": f.cpu_secs, "cpu_us": f.cpu_us(), "wall_us": f.wall_us(),
        })).collect::<Vec<_>>(),
        "rounds": rounds.iter().map(Round::to_json).collect::<Vec<_>>(),
        "agent_rss_kb": {"idle": idle.rss_kb, "after": peak.rss_kb, "peak": peak.hwm_kb},
        "reloads": reloads,
    });
    Ok(report)
}

fn plan(
    rules: &'static str,
    mode: &'static str,
    traffic: &'static str,
    clients: usize,
    measure: Duration,
) -> Plan {
    Plan {
        agent: "this",
        rules,
        mode,
        traffic,
        clients,
        measure,
    }
}

/// `plans` on an edge whose agent (`hapctl`) loads `rules`.
fn glue_rounds(
    hapctl: &Path,
    rules: &Path,
    host: &str,
    plans: [Plan; 2],
) -> anyhow::Result<Vec<Round>> {
    let g = Setup::start(hapctl, rules)?;
    g.wait_agent(host, "detect", CLEAN, 200)?;
    let (agent, haproxy) = g.pids()?;
    let pids = Pids {
        agent,
        haproxy: &haproxy,
    };
    g.rounds(host, &plans, &pids)
}

/// One turn of the alternating rounds with the CRS: each mode once, the order turned by `r`.
fn turn(r: usize) -> [Plan; 3] {
    let mut order = MODES;
    order.rotate_left(r % MODES.len());
    order.map(|mode| plan("crs", mode, "clean", CLIENTS, MEASURE))
}

/// After the turns: attacks, the long round, one client alone.
fn tail() -> [Plan; 4] {
    [
        plan("crs", "block", "attack", CLIENTS, MEASURE),
        plan("crs", "detect", "clean", CLIENTS, SOAK),
        plan("crs", "off", "clean", 1, MEASURE),
        plan("crs", "detect", "clean", 1, MEASURE),
    ]
}

/// The floor of `engine` on one thread and on two.
fn floor(
    rules: &'static str,
    engine: &Engine,
    req: &Inspect,
) -> anyhow::Result<[(&'static str, Floor); 2]> {
    eprintln!("  the floor, {rules}…");
    Ok([
        (rules, waf_floor::measure(engine, req, 1, FLOOR)?),
        (rules, waf_floor::measure(engine, req, 2, FLOOR)?),
    ])
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
