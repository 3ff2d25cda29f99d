//! rss: the daemon's memory with 10,000 domains and 100,000 blocked entries, after a few
//! requests, read from `/proc/PID/status` (VmRSS now, VmHWM the peak, RssAnon / RssFile).
//! The same steps on a small edge (10 domains, 300 blocks) give the baseline. Then the daemon
//! of a 1,000-domain edge at rest (nothing asked after `/health`), and the same for the older
//! binary `HAPCTL_BENCH_BASELINE` names, alternately, when it is set.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::model::Block;
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::Edge;

use crate::api::Api;
use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge, HttpBackend};
use crate::memory::{mib, DaemonProcess, Memory};
use crate::{Ctx, Report, Table, Target};

const BODY: &str = "hapctl-bench backend\n";
const DOMAINS: usize = 10_000;
const BLOCKS: usize = 100_000;
const TARGET_MIB: f64 = 50.0;

/// At rest: the daemon of an edge of this many domains (and the fixture's blocks).
const REST_DOMAINS: usize = 1_000;
const REST_TARGET_MIB: f64 = 15.0;
/// The readings at rest, counted from `/health` 200: one once the startup work is over, one
/// past tokio's 10 s keep-alive, after which an idle blocking thread has ended.
const REST_AFTER: [Duration; 2] = [Duration::from_secs(3), Duration::from_secs(12)];
/// Daemons at rest per binary (alternating with the baseline's when there is one).
const REST_ROUNDS: usize = 2;
const REST_LABEL: &str = "at rest";
const REST_BASELINE_LABEL: &str = "at rest, HAPCTL_BENCH_BASELINE";

/// Fields drop in order: the daemon before the edge.
struct Served {
    daemon: Daemon,
    // Kept alive (HAProxy stopped on drop) until the daemon is gone.
    _edge: Edge,
}

/// The `i`-th extra blocked address: 10.0.0.0 + i.
fn block(i: usize) -> Block {
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + i as u32);
    fixture::address_block(ip, "hapctl-bench rss")
}

/// One reading after a step.
struct Reading {
    step: String,
    ms: f64,
    /// Size of the answer's body.
    bytes: usize,
    memory: Memory,
}

/// The step after which the brief's requests (GET /v1/domains, a PUT, a block) are done.
const BRIEF_LAST_STEP: &str = "POST /v1/blocked-ips (one)";

/// Extra environment variables of the daemon.
type Env = &'static [(&'static str, &'static str)];

/// One daemon measured.
struct Run {
    label: &'static str,
    env: Env,
    domains: usize,
    entries: usize,
    haproxy_start_ms: f64,
    startup: Duration,
    readings: Vec<Reading>,
    /// The daemon's threads after its last reading (at rest only).
    thread_names: Vec<String>,
}

/// A daemon measured through the steps: its name, domains, extra blocks, environment.
type Variant = (&'static str, usize, usize, Env);

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let backend = HttpBackend::start(BODY);
    let addr = backend.addr();

    let mut runs: Vec<Run> = Vec::new();
    let mut sizes = None;
    // The big edge twice: as shipped, and with glibc malloc limited to one arena, to tell the
    // memory the daemon holds from the memory the allocator keeps after it was freed.
    let variants: [Variant; 3] = [
        ("baseline", 10, 0, &[]),
        ("as shipped", DOMAINS, BLOCKS, &[]),
        (
            "MALLOC_ARENA_MAX=1",
            DOMAINS,
            BLOCKS,
            &[("MALLOC_ARENA_MAX", "1")],
        ),
    ];
    for variant in variants {
        let (run, in_use) = measure_variant(&hapctl, &addr, variant)?;
        sizes = sizes.or(in_use);
        runs.push(run);
    }
    let baseline = std::env::var_os(crate::blocks_scale::BASELINE_ENV).map(PathBuf::from);
    let rest = rest_rounds(&hapctl, baseline.as_deref(), &addr)?;
    let sizes = sizes.context("the big edge was not measured")?;
    Ok(report(&runs, &rest, &sizes, baseline.as_deref()))
}

/// One edge and its daemon through the steps; the heap sizes of what it loads too for the
/// big edge as shipped.
fn measure_variant(
    hapctl: &Path,
    addr: &str,
    (label, domains, blocks, env): Variant,
) -> anyhow::Result<(Run, Option<Sizes>)> {
    eprintln!(
        "rss: {domains} domains, {} blocked entries ({label})…",
        blocks + fixture::BLOCKS
    );
    let edge = new_edge(hapctl)?;
    let state = fixture::state(domains, Servers::At(addr));
    edge.load(&state)?;
    let extra: Vec<_> = (0..blocks).map(block).collect();
    edge.add_blocks(&extra)?;
    let entries = fixture::BLOCKS + blocks;
    drop(state);
    let sizes = if label == "as shipped" {
        Some(live_sizes(&edge)?)
    } else {
        None
    };
    let t = Instant::now();
    edge.start()?;
    let haproxy_start_ms = t.elapsed().as_secs_f64() * 1000.0;
    let serve = Serve {
        env,
        ..Serve::within(Duration::from_secs(300))
    };
    let daemon = Daemon::try_start(&edge, &serve)?;
    let s = Served {
        daemon,
        _edge: edge,
    };
    let readings = exercise(&s, addr)?;
    let run = Run {
        label,
        env,
        domains,
        entries,
        haproxy_start_ms,
        startup: s.daemon.startup,
        readings,
        thread_names: Vec::new(),
    };
    Ok((run, sizes))
}

fn report(runs: &[Run], rest: &[Run], sizes: &Sizes, baseline: Option<&Path>) -> Report {
    let (table, json_runs) = readings_table(runs.iter().chain(rest));
    let mut sizes_table = Table::new(
        format!("rss: heap bytes in use while the bench itself holds what the daemon loads, at {DOMAINS} domains and {} blocks (glibc mallinfo2, MiB)", BLOCKS + fixture::BLOCKS),
        &["Store::load_state (domains + blocks)", "Store::blocks (blocks only)", "GET /v1/domains answer as serde_json::Value"],
    );
    sizes_table.row(vec![
        mib(sizes.state / 1024),
        mib(sizes.blocks / 1024),
        mib(sizes.domains_json / 1024),
    ]);
    Report {
        tables: vec![table, sizes_table],
        targets: vec![big_edge_target(runs), rest_target(rest)],
        notes: notes(runs, rest, baseline),
        json: json!({
            "runs": json_runs,
            "target_mib": TARGET_MIB,
            "rest_target_mib": REST_TARGET_MIB,
            "in_use_bytes": {
                "load_state": sizes.state,
                "blocks": sizes.blocks,
                "domains_json_value": sizes.domains_json,
            },
        }),
    }
}

/// Every reading of every daemon, and each daemon as JSON.
fn readings_table<'r>(runs: impl Iterator<Item = &'r Run>) -> (Table, Vec<Value>) {
    let mut table = Table::new(
        "rss: `hapctl serve` memory after each step (MiB, from /proc/PID/status)",
        &[
            "daemon",
            "step",
            "request ms",
            "answer",
            "VmRSS",
            "VmHWM (peak)",
            "RssAnon",
            "RssFile",
            "threads",
        ],
    );
    let mut json_runs = Vec::new();
    for run in runs {
        for r in &run.readings {
            table.row(vec![
                format!(
                    "{} domains, {} blocks, {}",
                    run.domains, run.entries, run.label
                ),
                r.step.clone(),
                if r.ms > 0.0 {
                    crate::stats::ms(r.ms)
                } else {
                    "-".into()
                },
                if r.bytes > 0 {
                    crate::stats::bytes(r.bytes)
                } else {
                    "-".into()
                },
                mib(r.memory.rss_kb),
                mib(r.memory.hwm_kb),
                mib(r.memory.anon_kb),
                mib(r.memory.file_kb),
                r.memory.threads.to_string(),
            ]);
        }
        json_runs.push(run_json(run));
    }
    (table, json_runs)
}

fn run_json(run: &Run) -> Value {
    json!({
        "label": run.label,
        "env": run.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "domains": run.domains,
        "blocked_entries": run.entries,
        "haproxy_start_ms": run.haproxy_start_ms,
        "daemon_startup_ms": run.startup.as_secs_f64() * 1000.0,
        "thread_names": run.thread_names,
        "readings": run.readings.iter().map(|r| json!({
            "step": r.step,
            "request_ms": r.ms,
            "answer_bytes": r.bytes,
            "memory": r.memory.to_json(),
        })).collect::<Vec<_>>(),
    })
}

/// The big edge as shipped under the target, with the one-arena peak beside it.
fn big_edge_target(runs: &[Run]) -> Target {
    let big = &runs[1].readings;
    let peak_hwm = big.iter().map(|r| r.memory.hwm_kb).max().unwrap_or(0);
    let last = big.last().map(|r| r.memory).unwrap_or_default();
    let brief = big
        .iter()
        .find(|r| r.step == BRIEF_LAST_STEP)
        .map_or(0, |r| r.memory.hwm_kb);
    let one_arena = runs[2]
        .readings
        .iter()
        .map(|r| r.memory.hwm_kb)
        .max()
        .unwrap_or(0);
    let limit_kb = (TARGET_MIB * 1024.0) as u64;
    Target {
        goal: format!("daemon RSS under {TARGET_MIB} MiB at {DOMAINS} domains and {BLOCKS} blocked entries"),
        met: Some(brief < limit_kb && last.rss_kb < limit_kb),
        detail: format!(
            "peak (VmHWM) {} MiB after the brief's steps (start, GET /v1/domains, a PUT, a block), {} MiB over \
             every step; VmRSS at the end {} MiB (anon {}, file {}); with MALLOC_ARENA_MAX=1 the peak is {} MiB",
            mib(brief),
            mib(peak_hwm),
            mib(last.rss_kb),
            mib(last.anon_kb),
            mib(last.file_kb),
            mib(one_arena)
        ),
    }
}

fn notes(runs: &[Run], rest: &[Run], baseline: Option<&Path>) -> Vec<String> {
    let mut notes = vec![
        format!(
            "edges: `hapctl init`; N fixture domains (servers at one in-process backend, checks off) and the \
             blocks written to the database directly (the fixture's {} plus 10.0.0.0 + i for the big edge); \
             `hapctl haproxy start`; `hapctl serve`. Readings come from /proc/<daemon pid>/status after each \
             request has been answered; VmHWM never goes down.",
            fixture::BLOCKS
        ),
        format!(
            "startup: HAProxy start {} ms (big edge), daemon spawn → /health 200 {} ms",
            crate::stats::ms(runs[1].haproxy_start_ms),
            crate::stats::ms(runs[1].startup.as_secs_f64() * 1000.0)
        ),
        format!(
            "at rest: {REST_DOMAINS} fixture domains and {} blocks, HAProxy started, `hapctl serve`, then nothing \
             asked after its first /health 200; {REST_ROUNDS} daemons per binary. Baseline: {}",
            fixture::BLOCKS,
            baseline.map_or("none (set HAPCTL_BENCH_BASELINE)".into(), |b| b.display().to_string())
        ),
    ];
    for run in rest {
        notes.push(format!(
            "threads of a daemon {}: {}",
            run.label,
            run.thread_names.join(", ")
        ));
    }
    notes
}

/// The daemons at rest: `REST_ROUNDS` of `hapctl`, each after one of `baseline` when given.
fn rest_rounds(hapctl: &Path, baseline: Option<&Path>, addr: &str) -> anyhow::Result<Vec<Run>> {
    let mut sides = Vec::new();
    if let Some(b) = baseline {
        sides.push((REST_BASELINE_LABEL, b));
    }
    sides.push((REST_LABEL, hapctl));
    let mut runs = Vec::new();
    for round in 1..=REST_ROUNDS {
        for &(label, bin) in &sides {
            eprintln!("rss: {REST_DOMAINS} domains at rest ({label}, round {round})…");
            runs.push(at_rest(bin, label, addr)?);
        }
    }
    Ok(runs)
}

/// The daemon of a `REST_DOMAINS`-domain edge, read at each of `REST_AFTER` with nothing asked.
fn at_rest(hapctl: &Path, label: &'static str, addr: &str) -> anyhow::Result<Run> {
    let edge = new_edge(hapctl)?;
    edge.load(&fixture::state(REST_DOMAINS, Servers::At(addr)))?;
    let t = Instant::now();
    edge.start()?;
    let haproxy_start_ms = t.elapsed().as_secs_f64() * 1000.0;
    let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(300)))?;
    let answered = Instant::now();
    let s = Served {
        daemon,
        _edge: edge,
    };
    let mut readings = Vec::new();
    for after in REST_AFTER {
        thread::sleep(after.saturating_sub(answered.elapsed()));
        readings.push(Reading {
            step: format!("{label}, {} s after /health 200", after.as_secs()),
            ms: 0.0,
            bytes: 0,
            memory: s.daemon.memory()?,
        });
    }
    Ok(Run {
        label,
        env: &[],
        domains: REST_DOMAINS,
        entries: fixture::BLOCKS,
        haproxy_start_ms,
        startup: s.daemon.startup,
        readings,
        thread_names: s.daemon.thread_names()?,
    })
}

/// The highest VmRSS at rest of the daemons labelled `label`, with that reading.
fn rest_peak<'a>(rest: &'a [Run], label: &str) -> Option<&'a Memory> {
    rest.iter()
        .filter(|r| r.label == label)
        .flat_map(|r| r.readings.iter().map(|x| &x.memory))
        .max_by_key(|m| m.rss_kb)
}

fn rest_target(rest: &[Run]) -> Target {
    let goal =
        format!("daemon RSS at rest at most {REST_TARGET_MIB} MiB with {REST_DOMAINS} domains");
    let Some(after) = rest_peak(rest, REST_LABEL) else {
        return Target {
            goal,
            met: None,
            detail: "no daemon at rest was measured".into(),
        };
    };
    let before = rest_peak(rest, REST_BASELINE_LABEL).map_or(String::new(), |b| {
        format!(
            "; HAPCTL_BENCH_BASELINE: {} MiB (anon {}, file {}), {} threads; after ÷ before {:.2}",
            mib(b.rss_kb),
            mib(b.anon_kb),
            mib(b.file_kb),
            b.threads,
            after.rss_kb as f64 / b.rss_kb.max(1) as f64
        )
    });
    Target {
        goal,
        met: Some(after.rss_kb as f64 <= REST_TARGET_MIB * 1024.0),
        detail: format!(
            "highest VmRSS at rest {} MiB (anon {}, file {}), {} threads{before}",
            mib(after.rss_kb),
            mib(after.anon_kb),
            mib(after.file_kb),
            after.threads
        ),
    }
}

/// The brief's requests (GET /v1/domains, a PUT, a block), then a few more, reading the memory
/// after each.
fn exercise(s: &Served, addr: &str) -> anyhow::Result<Vec<Reading>> {
    let api = &Api::of(&s.daemon);
    let mut out = vec![Reading {
        step: "started (/health 200)".into(),
        ms: 0.0,
        bytes: 0,
        memory: s.daemon.memory()?,
    }];
    let steps: Vec<(&str, &str, String, Option<Value>)> = vec![
        ("GET /v1/domains", "GET", "/v1/domains".into(), None),
        (
            "PUT /v1/domains/rss-new.example.com",
            "PUT",
            "/v1/domains/rss-new.example.com".into(),
            Some(json!({"servers": [{"address": addr}]})),
        ),
        (
            BRIEF_LAST_STEP,
            "POST",
            "/v1/blocked-ips".into(),
            Some(json!({"ip": "192.0.2.77", "reason": "hapctl-bench rss"})),
        ),
        (
            "GET /v1/domains/app-0.example.com (one)",
            "GET",
            "/v1/domains/app-0.example.com".into(),
            None,
        ),
        ("GET /v1/status", "GET", "/v1/status".into(), None),
        ("GET /metrics", "GET", "/metrics".into(), None),
        ("GET /v1/domains (again)", "GET", "/v1/domains".into(), None),
        (
            "GET /v1/blocked-ips (blocked-ips list)",
            "GET",
            "/v1/blocked-ips".into(),
            None,
        ),
    ];
    for (label, method, path, body) in steps {
        let t = Instant::now();
        let answer = api.call(method, &path, body.as_ref())?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if !(200..300).contains(&answer.status) {
            bail!("{method} {path}: {}", answer.describe());
        }
        out.push(Reading {
            step: label.into(),
            ms,
            bytes: answer.body.len(),
            memory: s.daemon.memory()?,
        });
    }
    thread::sleep(Duration::from_secs(2));
    out.push(Reading {
        step: "idle 2 s".into(),
        ms: 0.0,
        bytes: 0,
        memory: s.daemon.memory()?,
    });
    Ok(out)
}

/// Heap bytes in use (every glibc arena).
fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    unsafe { libc::mallinfo2() }.uordblks as u64
}

/// Heap bytes held by what the daemon loads, measured on the bench's own heap.
struct Sizes {
    state: u64,
    blocks: u64,
    domains_json: u64,
}

fn live_sizes(edge: &Edge) -> anyhow::Result<Sizes> {
    let paths = &edge.settings()?.paths;
    let store = hapctl::store::Store::open(&paths.database, &paths.blocks_database)?;
    let base = heap_in_use();
    let state = store.load_state()?;
    let state_bytes = heap_in_use().saturating_sub(base);
    // What GET /v1/domains builds before serialising: one JSON object per domain.
    let base = heap_in_use();
    let list: Vec<Value> = state
        .domains
        .iter()
        .map(|(d, b)| {
            json!({
                "domain": d,
                "backend": d.backend_name(),
                "profile": b.profile(),
                "servers": b.servers(),
            })
        })
        .collect();
    let json_bytes = heap_in_use().saturating_sub(base);
    drop(list);
    drop(state);
    let base = heap_in_use();
    let blocks = store.blocks()?;
    let blocks_bytes = heap_in_use().saturating_sub(base);
    drop(blocks);
    Ok(Sizes {
        state: state_bytes,
        blocks: blocks_bytes,
        domains_json: json_bytes,
    })
}
