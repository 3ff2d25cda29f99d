//! `hapctl-bench`: benchmarks of hapctl, printed as tables and optionally written as JSON.
//!
//! ```text
//! cargo run -j2 --release -p bench -- [--sizes 10,1000,10000] [--only render,domain-add,...]
//!                                     [--runs K] [--json out.json] [--hapctl PATH]
//! ```
//!
//! Each section is one module with a `run(&Ctx) -> anyhow::Result<Report>` function, listed
//! once in `SECTIONS`; adding a section is adding a module and a line there. Sections marked
//! `long` run only when named with `--only` (or with `--all`).

mod api;
mod api_domains;
mod app_edge;
mod blocks;
mod blocks_latency;
mod blocks_load;
mod blocks_pieces;
mod blocks_scale;
mod certs;
mod cutovers;
mod deliver;
mod domain_add;
mod fixture;
mod fleet;
mod fleet_wide;
mod harness;
mod http3;
mod http3_round;
mod log_idle;
mod logs;
mod memory;
mod mixed_changes;
mod protect;
mod render;
mod rss;
mod server_change;
mod stats;
mod sys;
mod traffic;
mod traffic_collect;
mod traffic_memory;
mod waf;
mod waf_floor;
mod waf_report;
mod waf_round;

use std::cell::OnceCell;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use serde_json::{json, Value};

/// One benchmark section.
struct Section {
    name: &'static str,
    about: &'static str,
    run: fn(&Ctx) -> anyhow::Result<Report>,
    /// Minutes long: left out unless named with `--only` (or `--all` is given).
    long: bool,
}

const SECTIONS: &[Section] = &[
    Section {
        name: "render",
        about: "hapctl::render::render of the full file set (pure, in-process)",
        run: render::run,
        long: false,
    },
    Section {
        name: "domain-add",
        about: "a new domain end to end, `hapctl domain add` and then `PUT /v1/domains/{name}` to `hapctl serve`, until the new host answers 200 through HAProxy",
        run: domain_add::run,
        long: false,
    },
    Section {
        name: "deliver",
        about: "`hapctl deliver` / `rollback` with demo-app until the new version is served, by step",
        run: deliver::run,
        long: false,
    },
    Section {
        name: "blocks",
        about: "`hapctl serve`: block latency to enforced (403), single ops/s, bulk entries/s",
        run: blocks::run,
        long: false,
    },
    Section {
        name: "blocks-scale",
        about: "block → enforced at 500 / 10,000 / 100,000 entries (and for HAPCTL_BENCH_BASELINE's hapctl in the same run), GET /v1/blocked-ips pages and daemon memory at 100,000",
        run: blocks_scale::run,
        long: false,
    },
    Section {
        name: "api-domains",
        about: "`hapctl serve` at 1,000 domains: PUT /v1/domains/{name} to routed, reloads per 100 concurrent PUTs",
        run: api_domains::run,
        long: false,
    },
    Section {
        name: "server-change",
        about: "a server of an existing domain added / removed / re-weighted → in effect, runtime path vs reload path, CLI and API, at --sizes",
        run: server_change::run,
        long: false,
    },
    Section {
        name: "mixed-changes",
        about: "1,000 (--changes) sequential API changes in a fixed mix (servers, domains, blocks, HTTPS, suspension, a few reload-bound ones) at --sizes: reloads per change and whether each has a recorded reason",
        run: mixed_changes::run,
        long: false,
    },
    Section {
        name: "rss",
        about: "`hapctl serve` memory (VmRSS, VmHWM) at 10,000 domains and 100,000 blocked entries",
        run: rss::run,
        long: false,
    },
    Section {
        name: "protect",
        about: "protections: req/s with the standard protections ON vs OFF, threshold change to enforced, `security top` on a 200k-entry table",
        run: protect::run,
        long: false,
    },
    Section {
        name: "logs",
        about: "access-log lines lost at the highest rate the edge reaches (target 0 at 20,000 req/s), steady and with a reload every 2 s",
        run: logs::run,
        long: false,
    },
    Section {
        name: "traffic-collect",
        about: "traffic per domain: req/s with [traffic] collect on ÷ off (alternating rounds), /v1/traffic against a fixed number of requests per domain, the daemon's memory with the counts of 10,000 domains",
        run: traffic_collect::run,
        long: false,
    },
    Section {
        name: "log-idle",
        about: "HAProxy's CPU on an idle edge while nothing takes the access log, with `hapctl serve`, and with the unix socket of before (same run)",
        run: log_idle::run,
        long: false,
    },
    Section {
        name: "http3",
        about: "HTTP/3 beside HTTP/2 over TLS through the edge on a QUIC-capable HAProxy (HAPCTL_QUIC_HAPROXY_BIN): req/s, latency, failed requests and HAProxy's CPU per request with 8 kept connections each, alternating rounds, the ratio h3 ÷ h2",
        run: http3::run,
        // Needs a QUIC-capable HAProxy (scripts/ensure-haproxy-sid.sh caches one).
        long: true,
    },
    Section {
        name: "certs",
        about: "TLS: `hapctl cert import` to served at 10/100/1,000 certificates, haproxy -c and start with 1,000, handshakes/s during 100 renewals, daemon RSS",
        run: certs::run,
        long: true,
    },
    Section {
        name: "waf",
        about: "the WAF agent beside its floor (hapctl's evaluation in process): req/s, latency and CPU through the edge with a domain's WAF off, detect-only and blocking (alternating rounds), a 60 s round counting failed answers, one client alone, the agent without the CRS (the glue), RSS",
        run: waf::run,
        long: false,
    },
    Section {
        name: "fleet",
        about: "a fleet of 3 edges on a 3-member etcd at the largest of --sizes domains and 10× as many blocks: a write on one edge → in effect on all 3, a new edge joining, the etcd leader killed during --fleet-writes writes, etcd down for --outage-secs under traffic",
        run: fleet::run,
        long: true,
    },
    Section {
        name: "fleet-wide",
        about: "3 edges on a 3-member etcd sharing a fleet key, peers and the demo app: certificates ordered once for the fleet (Pebble), a client over a limit on one edge → over it on the others, a delivery and a rollback edge by edge under a probe spread over the edges",
        run: fleet_wide::run,
        long: true,
    },
    Section {
        name: "cutovers",
        about: "consecutive cutovers, each proven by hapctl's prove checks under 200 req/s and long streams (--count, --with-changes)",
        run: cutovers::run,
        long: true,
    },
];

#[derive(Parser)]
#[command(
    name = "hapctl-bench",
    about = "Benchmarks of hapctl against a real HAProxy: render, domain add, deliveries, the API daemon, proven cutovers",
    after_help = "Sections: render, domain-add, deliver, blocks, api-domains, server-change, mixed-changes, rss, protect, logs, traffic-collect, log-idle, waf, and (long, only with --only or --all) http3 (a QUIC-capable HAProxy), certs, fleet, fleet-wide, cutovers. \
Results go to stdout as tables; --json writes them as JSON too."
)]
struct Args {
    /// Numbers of domains to measure at, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,1000,10000")]
    sizes: Vec<usize>,
    /// Sections to run, comma-separated (default: all but the long ones).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Run every section, the long ones (cutovers) included.
    #[arg(long, conflicts_with = "only")]
    all: bool,
    /// Write every result (with raw samples) to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// domain-add: operations per size and interface, CLI and API (default 15, and 7 from
    /// 10,000 domains up);
    /// server-change: changes per series (default 20; reload series 10, 6 from 10,000 up);
    /// fleet: writes per kind (default 100).
    #[arg(long)]
    runs: Option<usize>,
    /// render: time budget per size in milliseconds (at least 15 iterations are always run).
    #[arg(long, default_value_t = 3000)]
    render_budget_ms: u64,
    /// deliver: deliver/rollback pairs (each delivery starts a new version).
    #[arg(long, default_value_t = 10)]
    deliveries: usize,
    /// certs: numbers of installed certificates to measure `cert import` at, comma-separated
    /// (the largest is also used for haproxy -c / start, the renewals and the daemon's memory).
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    cert_sizes: Vec<usize>,
    /// certs: handshakes/s offered by the open-loop load during the daemon's renewals (below
    /// what the closed loop reaches on the machine: about 1,000/s on 2 cores).
    #[arg(long, default_value_t = 300)]
    handshake_rate: u32,
    /// cutovers: consecutive proven cutovers (deliver / rollback alternating).
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// mixed-changes: changes sent per size (fewer for a quick test).
    #[arg(long, default_value_t = 1000)]
    changes: usize,
    /// fleet: concurrent writes during which the etcd leader is killed.
    #[arg(long, default_value_t = 1000)]
    fleet_writes: usize,
    /// fleet: seconds etcd stays entirely down under traffic.
    #[arg(long, default_value_t = 60)]
    outage_secs: u64,
    /// cutovers: change a domain's server weight (runtime path) and add / remove blocks the
    /// whole time.
    #[arg(long)]
    with_changes: bool,
    /// The hapctl binary to drive; by default `cargo build --release -p hapctl` is run first
    /// and its binary used, so the numbers are never those of a stale build.
    #[arg(long)]
    hapctl: Option<PathBuf>,
    /// The demo-app binary (deliver, cutovers); by default built like hapctl.
    #[arg(long)]
    demo_app: Option<PathBuf>,
    /// Parallel jobs for that build.
    #[arg(long, default_value_t = 2)]
    jobs: u32,
}

/// What sections get to see.
pub struct Ctx {
    pub sizes: Vec<usize>,
    pub runs: Option<usize>,
    pub render_budget_ms: u64,
    pub deliveries: usize,
    pub count: usize,
    pub changes: usize,
    pub fleet_writes: usize,
    pub outage_secs: u64,
    pub with_changes: bool,
    pub cert_sizes: Vec<usize>,
    pub handshake_rate: u32,
    hapctl: Option<PathBuf>,
    demo_app: Option<PathBuf>,
    jobs: u32,
    built: OnceCell<PathBuf>,
    built_demo: OnceCell<PathBuf>,
}

impl Ctx {
    /// The release `hapctl` binary: `--hapctl`, or freshly built (once per run).
    pub fn hapctl_bin(&self) -> anyhow::Result<PathBuf> {
        given_or_built(&self.hapctl, "--hapctl", &self.built, || {
            build_binary("hapctl", self.jobs)
        })
    }

    /// The release `demo-app` binary: `--demo-app`, or freshly built (once per run).
    pub fn demo_app_bin(&self) -> anyhow::Result<PathBuf> {
        given_or_built(&self.demo_app, "--demo-app", &self.built_demo, || {
            build_binary("demo-app", self.jobs)
        })
    }
}

fn given_or_built(
    given: &Option<PathBuf>,
    flag: &str,
    cell: &OnceCell<PathBuf>,
    build: impl FnOnce() -> anyhow::Result<PathBuf>,
) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        if !p.is_file() {
            bail!("{flag} {}: no such file", p.display());
        }
        return Ok(p.clone());
    }
    if let Some(p) = cell.get() {
        return Ok(p.clone());
    }
    let p = build()?;
    Ok(cell.get_or_init(|| p).clone())
}

/// Runs `cargo build --release -p NAME --bin NAME` and returns the binary's path, as cargo
/// reports it (so a custom target dir works too).
fn build_binary(name: &str, jobs: u32) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("bench/ has no parent folder")?;
    eprintln!("building the release {name} binary (cargo build -j{jobs} --release -p {name})…");
    let mut child = Command::new(&cargo)
        .current_dir(root)
        .args(["build", "--release", "-p", name, "--bin", name])
        .arg(format!("-j{jobs}"))
        .arg("--message-format=json-render-diagnostics")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run {}", Path::new(&cargo).display()))?;
    let mut exe = None;
    let stdout = child.stdout.take().context("cargo stdout")?;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact" && msg["target"]["name"] == name {
            if let Some(p) = msg["executable"].as_str() {
                exe = Some(PathBuf::from(p));
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("building {name} failed ({status}); fix the build or pass --{name} PATH");
    }
    exe.with_context(|| {
        format!("cargo built {name} but did not name its executable; pass --{name} PATH")
    })
}

/// What a section hands back.
#[derive(Default)]
pub struct Report {
    pub tables: Vec<Table>,
    pub targets: Vec<Target>,
    pub notes: Vec<String>,
    pub json: Value,
}

pub struct Table {
    pub title: String,
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, header: &[&'static str]) -> Table {
        Table {
            title: title.into(),
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; a programming error if it does not have one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.header.len(),
            "table {:?}: a row of {} cells for {} columns",
            self.title,
            cells.len(),
            self.header.len()
        );
        self.rows.push(cells);
    }

    /// Plain-text table: first column left-aligned, the others right-aligned.
    fn print(&self) {
        let cols = self.header.len();
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        println!("\n{}", self.title);
        let line = |cells: Vec<&str>| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i == 0 {
                        format!("{c:<w$}", w = width[i])
                    } else {
                        format!("{c:>w$}", w = width[i])
                    }
                })
                .collect();
            println!("  {}", parts.join("  "));
        };
        line(self.header.clone());
        line(
            width
                .iter()
                .map(|w| "-".repeat(*w))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str)
                .collect(),
        );
        for r in &self.rows {
            line(r.iter().map(String::as_str).collect());
        }
    }

    fn to_json(&self) -> Value {
        json!({ "title": self.title, "header": self.header, "rows": self.rows })
    }
}

/// A stated goal and whether the measurement met it (`None`: not measured in this run).
pub struct Target {
    pub goal: String,
    pub met: Option<bool>,
    pub detail: String,
}

impl Target {
    fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "MET",
            Some(false) => "NOT MET",
            None => "not measured",
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Returns false when a section failed.
fn run(args: Args) -> anyhow::Result<bool> {
    check_args(&args)?;
    let ctx = Ctx {
        sizes: args.sizes.clone(),
        runs: args.runs,
        render_budget_ms: args.render_budget_ms,
        deliveries: args.deliveries,
        count: args.count,
        changes: args.changes,
        fleet_writes: args.fleet_writes,
        outage_secs: args.outage_secs,
        with_changes: args.with_changes,
        cert_sizes: args.cert_sizes.clone(),
        handshake_rate: args.handshake_rate,
        hapctl: args.hapctl.clone(),
        demo_app: args.demo_app.clone(),
        jobs: args.jobs,
        built: OnceCell::new(),
        built_demo: OnceCell::new(),
    };
    let machine = sys::machine();
    println!("hapctl-bench — {}", machine["date"].as_str().unwrap_or(""));
    println!(
        "machine: {} CPU(s), {}, {} RAM, {}, {}",
        machine["nproc"],
        machine["cpu"].as_str().unwrap_or("?"),
        machine["ram"].as_str().unwrap_or("?"),
        machine["os"].as_str().unwrap_or("?"),
        machine["haproxy"].as_str().unwrap_or("?"),
    );

    let mut ok = true;
    let mut sections = serde_json::Map::new();
    let mut all_targets = Vec::new();
    let chosen = |s: &&Section| {
        if args.only.is_empty() {
            args.all || !s.long
        } else {
            args.only.iter().any(|o| o == s.name)
        }
    };
    for section in SECTIONS.iter().filter(chosen) {
        let (section_ok, results) = run_section(section, &ctx, &machine, &mut all_targets);
        ok &= section_ok;
        sections.insert(section.name.to_string(), results);
    }

    if let Some(path) = &args.json {
        let doc = json!({
            "tool": "hapctl-bench",
            "command": std::env::args().collect::<Vec<_>>(),
            "machine": machine,
            "sizes": args.sizes,
            "sections": sections,
            "targets": all_targets,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("\nJSON written to {}", path.display());
    }
    Ok(ok)
}

fn check_args(args: &Args) -> anyhow::Result<()> {
    if args.sizes.is_empty() || args.sizes.contains(&0) {
        bail!("--sizes needs one or more positive numbers of domains, e.g. 10,1000,10000");
    }
    for name in &args.only {
        if !SECTIONS.iter().any(|s| s.name == name) {
            let known: Vec<_> = SECTIONS.iter().map(|s| s.name).collect();
            bail!(
                "--only: unknown section {name:?}; known: {}",
                known.join(", ")
            );
        }
    }
    if args.cert_sizes.is_empty() || args.cert_sizes.contains(&0) {
        bail!("--cert-sizes needs one or more positive numbers of certificates, e.g. 10,100,1000");
    }
    if [args.deliveries, args.count, args.changes, args.fleet_writes].contains(&0)
        || args.handshake_rate == 0
        || args.outage_secs == 0
    {
        bail!("--deliveries, --count, --changes, --fleet-writes, --handshake-rate and --outage-secs need a positive number");
    }
    Ok(())
}

/// Runs one section and prints its report; returns whether it ran and its JSON, and adds its
/// targets to `all_targets`.
fn run_section(
    section: &Section,
    ctx: &Ctx,
    machine: &Value,
    all_targets: &mut Vec<Value>,
) -> (bool, Value) {
    let load_before = sys::load_average();
    println!(
        "\n=== {} — {} (load average {})",
        section.name,
        section.about,
        load_before.map(|l| l.to_string()).unwrap_or("?".into())
    );
    let started = Instant::now();
    let report = match (section.run)(ctx) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("section {} failed: {e:#}", section.name);
            return (false, json!({ "error": format!("{e:#}") }));
        }
    };
    let load_after = sys::load_average();
    for t in &report.tables {
        t.print();
    }
    for n in &report.notes {
        println!("\n  note: {n}");
    }
    println!(
        "\n  1-min load average: {} before, {} after ({} CPUs)",
        load_before.map(|l| l.to_string()).unwrap_or("?".into()),
        load_after.map(|l| l.to_string()).unwrap_or("?".into()),
        machine["nproc"]
    );
    if !report.targets.is_empty() {
        println!("\n  targets:");
    }
    for t in &report.targets {
        println!("  [{}] {} — {}", t.verdict(), t.goal, t.detail);
        all_targets.push(json!({
            "section": section.name,
            "goal": t.goal,
            "met": t.met,
            "detail": t.detail,
        }));
    }
    let results = json!({
        "seconds": started.elapsed().as_secs_f64(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "tables": report.tables.iter().map(Table::to_json).collect::<Vec<_>>(),
        "notes": report.notes,
        "results": report.json,
    });
    (true, results)
}
