//! blocks-scale: one block → enforced at 500, 10,000 and 100,000 entries, for the hapctl
//! under test ("after") and, when `HAPCTL_BENCH_BASELINE` names another hapctl binary, for
//! that one too ("before"), in the same run: one edge per binary, filled alternately, each
//! series right after the other's. Then, at 100,000 entries, `GET /v1/blocked-ips` (a page, a
//! page far in, filtered pages) timed with the daemon's memory.
//!
//! The edges are made through the CLI only (`init`, `haproxy start`, `domain add`) and filled
//! through the API (lists of 10,000), so a baseline with another database schema works too.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::Edge;

use crate::api::Api;
use crate::blocks_latency::{latency_series, map_size, Latency};
use crate::blocks_load::{addr, block_body};
use crate::harness::{new_edge, HttpBackend};
use crate::memory::{mib, DaemonProcess};
use crate::stats::{ms, Summary};
use crate::{Ctx, Report, Table, Target};

/// Names the hapctl binary to compare with ("before").
pub const BASELINE_ENV: &str = "HAPCTL_BENCH_BASELINE";
const SIZES: [usize; 3] = [500, 10_000, 100_000];
/// Single blocks timed per size and binary.
const OPS: usize = 150;
const LIST: usize = 10_000;
/// The fill addresses: 127.FILL_SET.x.y, 127.(FILL_SET+1).x.y, …
const FILL_SET: u8 = 210;
/// Per set: `addr` takes 250 × 256 indexes.
const PER_SET: usize = 250 * 256;
const TARGET_P50_MS: f64 = 2.0;
/// `GET /v1/blocked-ips` repetitions per case.
const GETS: usize = 10;
const HOST: &str = "blocks.bench.test";

/// One edge and its daemon for one binary; the daemon is dropped first.
struct Side {
    label: &'static str,
    api: Api,
    daemon: Daemon,
    edge: Edge,
    /// Fill addresses used so far.
    filled: usize,
}

impl Side {
    fn start(label: &'static str, hapctl: &Path, backend: &str) -> anyhow::Result<Side> {
        let edge = new_edge(hapctl)?;
        edge.start()?;
        edge.try_ok(&["domain", "add", HOST, "--server", backend])?;
        let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(120)))?;
        Ok(Side {
            label,
            api: Api::of(&daemon),
            daemon,
            edge,
            filled: 0,
        })
    }

    fn count(&self) -> anyhow::Result<usize> {
        map_size(&self.api)
    }

    /// Lists of [`LIST`] new addresses until the database holds `target` blocks.
    fn fill_to(&mut self, target: usize) -> anyhow::Result<()> {
        let mut count = self.count()?;
        let mut posts = 0;
        while count < target {
            let n = (target - count).min(LIST);
            let list: Vec<Value> = (self.filled..self.filled + n)
                .map(|i| block_body(addr(FILL_SET + (i / PER_SET) as u8, i % PER_SET)))
                .collect();
            let a = self
                .api
                .call("POST", "/v1/blocked-ips", Some(&json!(list)))?;
            if a.status != 201 {
                bail!("{}: a list of {n}: {}", self.label, a.describe());
            }
            self.filled += n;
            count = self.count()?;
            posts += 1;
            if posts > 20 {
                bail!("{}: {count} blocks after {posts} lists", self.label);
            }
        }
        Ok(())
    }
}

/// One series: which binary, at how many entries, the samples.
struct Series {
    label: &'static str,
    entries: usize,
    samples: Vec<Latency>,
}

/// Nearest-rank p99 of a set of samples.
fn p99(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * 0.99).round() as usize]
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let baseline = std::env::var_os(BASELINE_ENV).map(PathBuf::from);
    let backend = HttpBackend::start("hapctl-bench backend\n");
    let mut sides = Vec::new();
    if let Some(b) = &baseline {
        sides.push(Side::start("before", b, &backend.addr())?);
    }
    sides.push(Side::start("after", &hapctl, &backend.addr())?);
    let series = measure_series(&mut sides)?;
    let mut pages = Vec::new();
    for side in &sides {
        pages.push(page_times(side)?);
    }
    let (lat, lat_json) = latency_table(&series)?;
    let (page_table, page_json) = pages_table(&pages);
    let notes = vec![
        format!(
            "edges: `hapctl init`, `hapctl haproxy start`, `hapctl domain add {HOST}`, `hapctl serve`; filled with lists of {LIST} \
             (127.{FILL_SET}.x.y…); before each series 1.5 s idle. A probe is GET / from the blocked 127.20S.x.y on a fresh \
             connection, polled every 0.1 ms from the moment the block is sent until 403; the API answer comes after the \
             map's folder sync, so it can trail the 403. Baseline: {}.",
            baseline.as_ref().map_or("none (set HAPCTL_BENCH_BASELINE)".into(), |b| b.display().to_string())
        ),
    ];
    Ok(Report {
        tables: vec![lat, page_table],
        targets: vec![target(&series)?],
        notes,
        json: json!({"latency": lat_json, "pages": page_json}),
    })
}

/// At each size, each side filled to it, then [`OPS`] single blocks timed to enforced.
fn measure_series(sides: &mut [Side]) -> anyhow::Result<Vec<Series>> {
    let mut series = Vec::new();
    for (s, size) in SIZES.iter().enumerate() {
        for side in sides.iter_mut() {
            eprintln!("blocks-scale: {}: filling to {size}…", side.label);
            side.fill_to(*size)?;
            // Idle first, as between two operators' blocks (the daemon folds when idle).
            thread::sleep(Duration::from_millis(1500));
            let entries = side.count()?;
            eprintln!(
                "blocks-scale: {}: {OPS} single blocks at {entries}…",
                side.label
            );
            let samples = latency_series(&side.api, &side.edge, HOST, 200 + s as u8, OPS)?;
            series.push(Series {
                label: side.label,
                entries,
                samples,
            });
        }
    }
    Ok(series)
}

fn latency_table(series: &[Series]) -> anyhow::Result<(Table, Vec<Value>)> {
    let mut lat = Table::new(
        format!("blocks-scale: single-entry POST /v1/blocked-ips, send → first 403 from that address, probed while the request is in flight (ms), {OPS} per row"),
        &["hapctl", "entries", "enforced p50", "p95", "p99", "max", "API answer p50", "worker p50", "403 before the answer"],
    );
    let mut lat_json = Vec::new();
    for s in series {
        let enforced: Vec<f64> = s.samples.iter().map(|l| l.enforced_ms).collect();
        let e = Summary::of(&enforced).context("no samples")?;
        let a = Summary::of(&s.samples.iter().map(|l| l.api_ms).collect::<Vec<_>>())
            .context("no samples")?;
        let w = Summary::of(&s.samples.iter().map(|l| l.server_ms).collect::<Vec<_>>())
            .context("no samples")?;
        let first = s.samples.iter().filter(|l| l.before_answer).count();
        lat.row(vec![
            s.label.to_string(),
            s.entries.to_string(),
            ms(e.median),
            ms(e.p95),
            ms(p99(&enforced)),
            ms(e.max),
            ms(a.median),
            ms(w.median),
            format!("{first}/{}", s.samples.len()),
        ]);
        lat_json.push(json!({
            "hapctl": s.label, "entries": s.entries, "enforced_ms": e.to_json(), "enforced_p99_ms": p99(&enforced),
            "api_ms": a.to_json(), "worker_ms": w.to_json(), "enforced_before_answer": first,
            "enforcement": s.samples.iter().map(|l| l.enforcement.as_str()).collect::<Vec<_>>(),
            "samples_enforced_ms": enforced,
        }));
    }
    Ok((lat, lat_json))
}

fn pages_table(pages: &[Pages]) -> (Table, Vec<Value>) {
    let mut page_table = Table::new(
        format!("blocks-scale: GET /v1/blocked-ips at 100,000+ entries, median of {GETS} (ms), daemon memory"),
        &["hapctl", "request", "median ms", "max ms", "answer", "blocks", "VmRSS after MiB", "VmHWM after MiB"],
    );
    let mut page_json = Vec::new();
    for p in pages {
        for c in &p.cases {
            page_table.row(vec![
                p.label.to_string(),
                c.what.clone(),
                ms(c.time.median),
                ms(c.time.max),
                crate::stats::bytes(c.bytes),
                c.blocks.to_string(),
                mib(c.rss_kb),
                mib(c.hwm_kb),
            ]);
            page_json.push(json!({"hapctl": p.label, "request": c.what, "ms": c.time.to_json(), "bytes": c.bytes,
                "blocks": c.blocks, "vm_rss_kb": c.rss_kb, "vm_hwm_kb": c.hwm_kb, "vm_rss_before_kb": p.rss_before_kb}));
        }
    }
    (page_table, page_json)
}

/// The p50 of this hapctl's last series, the one at the most entries.
fn target(series: &[Series]) -> anyhow::Result<Target> {
    let after_big = series
        .iter()
        .rfind(|s| s.label == "after")
        .context("no series")?;
    let big_p50 = Summary::of(
        &after_big
            .samples
            .iter()
            .map(|l| l.enforced_ms)
            .collect::<Vec<_>>(),
    )
    .context("no samples")?
    .median;
    Ok(Target {
        goal: format!("block → enforced p50 under {TARGET_P50_MS} ms at 100,000 entries"),
        met: Some(big_p50 < TARGET_P50_MS),
        detail: format!("p50 {} ms at {} entries", ms(big_p50), after_big.entries),
    })
}

struct PageCase {
    what: String,
    time: Summary,
    bytes: usize,
    blocks: usize,
    rss_kb: u64,
    hwm_kb: u64,
}

struct Pages {
    label: &'static str,
    rss_before_kb: u64,
    cases: Vec<PageCase>,
}

/// `GET /v1/blocked-ips` at the edge's size: the first page (a baseline answers everything),
/// a page far in, and filtered pages, each [`GETS`] times, with the daemon's memory after.
fn page_times(side: &Side) -> anyhow::Result<Pages> {
    let rss_before_kb = side.daemon.memory()?.rss_kb;
    let far = format!("127.{}.100.1", FILL_SET + 1);
    let cases = [
        ("first page (default limit)", "/v1/blocked-ips".to_string()),
        ("limit=10000", "/v1/blocked-ips?limit=10000".to_string()),
        (
            "after a key 64,000 in",
            format!("/v1/blocked-ips?after={far}"),
        ),
        (
            "prefix=127.211.0.0/16",
            format!("/v1/blocked-ips?prefix=127.{}.0.0%2F16", FILL_SET + 1),
        ),
        (
            "reason=no-such-text (every row read)",
            "/v1/blocked-ips?reason=no-such-text".to_string(),
        ),
    ];
    let mut out = Vec::new();
    for (what, path) in cases {
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..GETS {
            let t0 = Instant::now();
            let a = side.api.call("GET", &path, None)?;
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
            if a.status != 200 {
                // A baseline without the parameters refuses nothing but ignores them, or fails.
                bail!("{}: GET {path}: {}", side.label, a.describe());
            }
            last = Some(a);
        }
        let a = last.context("no answer")?;
        let j = a.json();
        let blocks = j["blocks"].as_array().or(j.as_array()).map_or(0, Vec::len);
        let m = side.daemon.memory()?;
        out.push(PageCase {
            what: what.to_string(),
            time: Summary::of(&times).context("no samples")?,
            bytes: a.body.len(),
            blocks,
            rss_kb: m.rss_kb,
            hwm_kb: m.hwm_kb,
        });
    }
    Ok(Pages {
        label: side.label,
        rss_before_kb,
        cases: out,
    })
}
