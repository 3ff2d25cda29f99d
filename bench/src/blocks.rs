//! blocks: the daemon's block fast path, measured from outside.
//!
//! 1. Latency to enforced: sequential single-entry `POST /v1/blocked-ips {"ip": A}`, each timed
//!    from sending the request to its answer, and to the first request through the edge *from
//!    A* (the client bound to that 127.x.y.z source, polling while the request is in flight)
//!    answered 403.
//! 2. Single-entry throughput: 32 concurrent clients posting single entries for ~5 s, on
//!    kept-alive connections and with a new connection per request.
//! 3. Bulk: lists of 10,000 entries until the map holds at least 100,000, entries/s.
//! 4. 1 and 2 again with that 100,000-entry map.
//!
//! Reloads (master `show proc`) and `haproxy -c` runs (counting wrapper) are counted around
//! every phase: the fast path must make none.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use hapctl::render::FileId;
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::Edge;

use crate::api::Api;
use crate::blocks_latency::{
    bulk_post, check_enforced, latency_series, map_size, Bulk, Latency, BULK_SIZE,
};
use crate::blocks_load::{throughput, Throughput, THROUGHPUT_FOR};
use crate::blocks_pieces::{self as pieces, Pieces};
use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge, HttpBackend};
use crate::memory::{DaemonProcess, Memory};
use crate::stats::{ms, Summary};
use crate::{Ctx, Report, Table, Target};

const BODY: &str = "hapctl-bench backend\n";
const TARGET_P50_MS: f64 = 5.0;
const TARGET_SINGLE_PER_S: f64 = 2000.0;
const TARGET_BULK_PER_S: f64 = 50_000.0;

/// Sequential single blocks timed to enforced, on the small map and on the 100k map.
const LATENCY_OPS: usize = 200;
const LATENCY_OPS_BIG: usize = 100;
const CLIENTS: usize = 32;
const BULK_GOAL: usize = 100_000;
/// Bound on the number of bulk requests.
const BULK_MAX_POSTS: usize = 15;

/// What the edge and HAProxy did during a phase.
#[derive(Clone, Copy)]
struct Counts {
    reloads: u32,
    checks: usize,
}

fn counts(edge: &Edge) -> anyhow::Result<Counts> {
    Ok(Counts {
        reloads: edge.try_show_proc()?.master.reloads,
        checks: edge.check_runs(),
    })
}

fn delta(before: Counts, after: Counts) -> (i64, usize) {
    (
        after.reloads as i64 - before.reloads as i64,
        after.checks - before.checks,
    )
}

/// An edge with its daemon; the daemon is dropped first (fields drop in order).
struct Served {
    daemon: Daemon,
    edge: Edge,
}

impl Served {
    fn start(hapctl: &Path, backend: &str) -> anyhow::Result<Served> {
        let edge = new_edge(hapctl)?;
        edge.load(&fixture::state(10, Servers::At(backend)))?;
        edge.start()?;
        let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(60)))?;
        Ok(Served { daemon, edge })
    }
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let backend = HttpBackend::start(BODY);
    let addr_text = backend.addr();
    let host = fixture::domain(0).to_string();
    let mut phases = Vec::new();
    let small = small_map(&hapctl, &addr_text, &host, &mut phases)?;
    let big = big_map(&hapctl, &addr_text, &host, &mut phases)?;
    report(&host, &phases, &small, &big)
}

/// A phase's name and the reloads and `haproxy -c` runs seen during it.
type Phase = (String, i64, usize);

/// Runs `measure`, recording the reloads and checks `edge` made meanwhile as a phase.
fn phase<T>(
    phases: &mut Vec<Phase>,
    edge: &Edge,
    name: String,
    measure: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let c0 = counts(edge)?;
    let measured = measure()?;
    let (reloads, checks) = delta(c0, counts(edge)?);
    phases.push((name, reloads, checks));
    Ok(measured)
}

/// What edge A measured: latency and kept-alive throughput at the small map.
struct SmallMap {
    /// Blocks in the database before and after the latency series.
    entries: (usize, usize),
    latency: Vec<Latency>,
    pieces: Pieces,
    keep: Throughput,
}

fn small_map(
    hapctl: &Path,
    backend: &str,
    host: &str,
    phases: &mut Vec<Phase>,
) -> anyhow::Result<SmallMap> {
    let a = Served::start(hapctl, backend)?;
    let (edge, api) = (&a.edge, Api::of(&a.daemon));
    eprintln!("blocks: {LATENCY_OPS} sequential blocks timed to 403…");
    let (before, latency) = phase(phases, edge, "latency, small map".into(), || {
        Ok((
            map_size(&api)?,
            latency_series(&api, edge, host, 10, LATENCY_OPS)?,
        ))
    })?;
    let entries = (before, map_size(&api)?);
    let pieces = pieces::time(edge)?;

    eprintln!("blocks: {CLIENTS} clients for {THROUGHPUT_FOR:?} on kept-alive connections…");
    let name = "throughput kept-alive, small map".to_string();
    let keep = phase(phases, edge, name, || {
        let mut keep = throughput(&api, CLIENTS, true, 20)?;
        keep.entries = (entries.1, map_size(&api)?);
        Ok(keep)
    })?;
    check_enforced(edge, host, &keep.sample)?;
    Ok(SmallMap {
        entries,
        latency,
        pieces,
        keep,
    })
}

/// What edge B measured: a fresh small map for new-connection throughput, then bulk lists to
/// 100k, then the single-entry measurements again at 100k.
struct BigMap {
    fresh: Throughput,
    /// Blocks in the database before the bulk lists.
    before_bulk: usize,
    bulk: Vec<Bulk>,
    /// Blocks in the database after the bulk lists, and in the map file at the end.
    entries: usize,
    file_entries: usize,
    latency: Vec<Latency>,
    keep: Throughput,
    pieces: Pieces,
    memory: Option<Memory>,
}

fn big_map(
    hapctl: &Path,
    backend: &str,
    host: &str,
    phases: &mut Vec<Phase>,
) -> anyhow::Result<BigMap> {
    let b = Served::start(hapctl, backend)?;
    let (edge, api) = (&b.edge, Api::of(&b.daemon));
    eprintln!("blocks: {CLIENTS} clients for {THROUGHPUT_FOR:?}, a new connection per request…");
    let name = "throughput new connections, small map".to_string();
    let fresh = phase(phases, edge, name, || {
        let before = map_size(&api)?;
        let mut fresh = throughput(&api, CLIENTS, false, 60)?;
        fresh.entries = (before, map_size(&api)?);
        Ok(fresh)
    })?;
    check_enforced(edge, host, &fresh.sample)?;

    let before_bulk = map_size(&api)?;
    eprintln!("blocks: bulk lists of {BULK_SIZE} from {before_bulk} entries to {BULK_GOAL}…");
    let bulk = phase(phases, edge, "bulk".into(), || {
        bulk_lists(&api, edge, host, before_bulk)
    })?;
    let entries = map_size(&api)?;
    if entries < BULK_GOAL {
        bail!("after the bulk lists the database holds {entries} blocks, not {BULK_GOAL}");
    }
    let file_entries = map_file_entries(edge);

    eprintln!("blocks: {LATENCY_OPS_BIG} sequential blocks at {entries} entries…");
    let name = format!("latency + throughput, {entries}-entry map");
    let (latency, keep) = phase(phases, edge, name, || {
        let latency = latency_series(&api, edge, host, 9, LATENCY_OPS_BIG)?;
        let before = map_size(&api)?;
        let mut keep = throughput(&api, CLIENTS, true, 140)?;
        keep.entries = (before, map_size(&api)?);
        Ok((latency, keep))
    })?;
    check_enforced(edge, host, &keep.sample)?;

    // Where a block's time goes at 100k: the pieces the block path runs, in-process.
    let pieces = pieces::time(edge)?;
    let memory = b.daemon.memory().ok();
    Ok(BigMap {
        fresh,
        before_bulk,
        bulk,
        entries,
        file_entries,
        latency,
        keep,
        pieces,
        memory,
    })
}

/// Bulk lists until the database holds [`BULK_GOAL`] blocks (at most [`BULK_MAX_POSTS`]).
fn bulk_lists(api: &Api, edge: &Edge, host: &str, before: usize) -> anyhow::Result<Vec<Bulk>> {
    let mut bulk = Vec::new();
    let mut size = before;
    for k in 0..BULK_MAX_POSTS {
        if size >= BULK_GOAL {
            break;
        }
        let one = bulk_post(api, edge, host, 100 + k as u8)?;
        eprintln!(
            "  list {}: {} ms ({:.0} entries/s), server {} ms, last entry enforced at {} ms",
            k + 1,
            ms(one.api_ms),
            one.per_s(),
            ms(one.server_ms),
            ms(one.enforced_ms)
        );
        size += one.created;
        bulk.push(one);
    }
    Ok(bulk)
}

/// Entries in the blocked map file (0 when it cannot be read).
fn map_file_entries(edge: &Edge) -> usize {
    let Ok(settings) = edge.settings() else {
        return 0;
    };
    std::fs::read_to_string(FileId::BlockedMap.path(&settings.paths))
        .map(|t| {
            t.lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .count()
        })
        .unwrap_or(0)
}

fn report(host: &str, phases: &[Phase], small: &SmallMap, big: &BigMap) -> anyhow::Result<Report> {
    let (lat, lat_json) = latency_table(small, big);
    let throughputs = [&small.keep, &big.fresh, &big.keep];
    let (tput, tput_json) = throughput_table(&throughputs);
    let bulk_rate = Summary::of(&big.bulk.iter().map(Bulk::per_s).collect::<Vec<_>>())
        .context("no bulk list was sent")?;
    let mut counts_table = Table::new(
        "blocks: reloads and haproxy -c runs during each phase (expected 0)",
        &["phase", "reloads", "haproxy -c"],
    );
    for (phase, r, c) in phases {
        counts_table.row(vec![phase.clone(), r.to_string(), c.to_string()]);
    }
    let pieces_table = pieces::table(&[&small.pieces, &big.pieces]);
    Ok(Report {
        tables: vec![lat, tput, bulk_table(big), pieces_table, counts_table],
        targets: targets(phases, small, big, &bulk_rate),
        notes: notes(host, big),
        json: json!({
            "latency": lat_json,
            "throughput": tput_json,
            "bulk": big.bulk.iter().map(|b| json!({
                "entries": BULK_SIZE,
                "created": b.created,
                "api_ms": b.api_ms,
                "entries_per_s": b.per_s(),
                "server_ms": b.server_ms,
                "enforcement": b.enforcement,
                "last_entry_enforced_ms": b.enforced_ms,
            })).collect::<Vec<_>>(),
            "bulk_entries_per_s": bulk_rate.to_json(),
            "map_entries": {"small": small.entries.1, "big": big.entries, "file": big.file_entries},
            "pieces_ms": [pieces::json(&small.pieces), pieces::json(&big.pieces)],
            "phases": phases.iter().map(|(p, r, c)| json!({"phase": p, "reloads": r, "haproxy_c": c})).collect::<Vec<_>>(),
        }),
    })
}

fn latency_table(small: &SmallMap, big: &BigMap) -> (Table, Vec<Value>) {
    let mut lat = Table::new(
        "blocks: single-entry POST /v1/blocked-ips, send → first 403 through the edge from that address (ms)",
        &[
            "map entries",
            "ops",
            "enforced p50",
            "p95",
            "min",
            "max",
            "API answer p50",
            "server p50",
            "403 before the answer",
        ],
    );
    let mut lat_json = Vec::new();
    for (entries, series) in [
        (small.entries, &small.latency),
        ((big.entries, big.entries + big.latency.len()), &big.latency),
    ] {
        let e = Summary::of(&series.iter().map(|l| l.enforced_ms).collect::<Vec<_>>())
            .expect("ops > 0");
        let a = Summary::of(&series.iter().map(|l| l.api_ms).collect::<Vec<_>>()).expect("ops > 0");
        let s =
            Summary::of(&series.iter().map(|l| l.server_ms).collect::<Vec<_>>()).expect("ops > 0");
        let first = series.iter().filter(|l| l.before_answer).count();
        let enforcement: Vec<&str> = series.iter().map(|l| l.enforcement.as_str()).collect();
        lat.row(vec![
            format!("{} → {}", entries.0, entries.1),
            series.len().to_string(),
            ms(e.median),
            ms(e.p95),
            ms(e.min),
            ms(e.max),
            ms(a.median),
            ms(s.median),
            format!("{first}/{}", series.len()),
        ]);
        lat_json.push(json!({
            "map_entries_before": entries.0,
            "map_entries_after": entries.1,
            "enforced_ms": e.to_json(),
            "api_ms": a.to_json(),
            "server_ms": s.to_json(),
            "enforced_before_answer": first,
            "enforcement_runtime": enforcement.iter().filter(|x| **x == "runtime").count(),
            "samples_enforced_ms": series.iter().map(|l| l.enforced_ms).collect::<Vec<_>>(),
        }));
    }
    (lat, lat_json)
}

fn throughput_table(runs: &[&Throughput]) -> (Table, Vec<Value>) {
    let mut tput = Table::new(
        format!(
            "blocks: single-entry POSTs from {CLIENTS} concurrent clients for {THROUGHPUT_FOR:?}"
        ),
        &[
            "map entries",
            "connections",
            "ok",
            "errors",
            "ops/s",
            "latency p50",
            "p95",
            "max",
            "batches",
            "entries/batch",
            "server ms/batch (median)",
        ],
    );
    let mut tput_json = Vec::new();
    for t in runs {
        let label = format!("{} → {}", t.entries.0, t.entries.1);
        let l = Summary::of(&t.latencies).unwrap_or(Summary::of(&[0.0]).expect("one"));
        let sb = Summary::of(&t.batch_ms).unwrap_or(Summary::of(&[0.0]).expect("one"));
        tput.row(vec![
            label,
            if t.keep_alive {
                "kept alive"
            } else {
                "new each"
            }
            .to_string(),
            t.ok.to_string(),
            t.errors.to_string(),
            format!("{:.0}", t.per_s()),
            ms(l.median),
            ms(l.p95),
            ms(l.max),
            t.batch_ms.len().to_string(),
            format!("{:.1}", t.ok as f64 / t.batch_ms.len().max(1) as f64),
            ms(sb.median),
        ]);
        tput_json.push(json!({
            "map_entries_before": t.entries.0,
            "map_entries_after": t.entries.1,
            "keep_alive": t.keep_alive,
            "ok": t.ok,
            "errors": t.errors,
            "first_error": t.first_error,
            "seconds": t.seconds,
            "ops_per_s": t.per_s(),
            "latency_ms": l.to_json(),
            "batches": t.batch_ms.len(),
            "server_ms_per_batch": sb.to_json(),
        }));
    }
    (tput, tput_json)
}

fn bulk_table(big: &BigMap) -> Table {
    let mut bulk_table = Table::new(
        format!("blocks: bulk POST /v1/blocked-ips of {BULK_SIZE} entries each"),
        &[
            "list",
            "entries before",
            "API answer ms",
            "entries/s",
            "server ms",
            "enforcement",
            "last entry 403 at ms",
        ],
    );
    let mut at = big.before_bulk;
    for (i, b) in big.bulk.iter().enumerate() {
        bulk_table.row(vec![
            (i + 1).to_string(),
            at.to_string(),
            ms(b.api_ms),
            format!("{:.0}", b.per_s()),
            ms(b.server_ms),
            b.enforcement.clone(),
            ms(b.enforced_ms),
        ]);
        at += b.created;
    }
    bulk_table
}

fn targets(phases: &[Phase], small: &SmallMap, big: &BigMap, bulk_rate: &Summary) -> Vec<Target> {
    let p50 = |series: &[Latency]| {
        Summary::of(&series.iter().map(|l| l.enforced_ms).collect::<Vec<_>>())
            .expect("ops > 0")
            .median
    };
    let (small_p50, big_p50) = (p50(&small.latency), p50(&big.latency));
    let (small_entries, big_entries) = (small.entries.1, big.entries);
    let bulk = &big.bulk;
    let bulk_total_s: f64 = bulk.iter().map(|b| b.api_ms).sum::<f64>() / 1000.0;
    let bulk_entries: usize = bulk.iter().map(|b| b.created).sum();
    let no_reloads = phases.iter().all(|(_, r, c)| *r == 0 && *c == 0);
    vec![
        Target {
            goal: format!(
                "block p50 under {TARGET_P50_MS} ms, request → enforced (403), on a small map"
            ),
            met: Some(small_p50 < TARGET_P50_MS),
            detail: format!("p50 {} ms at {small_entries} entries", ms(small_p50)),
        },
        Target {
            goal: format!(
                "block p50 under {TARGET_P50_MS} ms, request → enforced (403), at {BULK_GOAL}+ entries"
            ),
            met: Some(big_p50 < TARGET_P50_MS),
            detail: format!("p50 {} ms at {big_entries} entries", ms(big_p50)),
        },
        Target {
            goal: format!("at least {TARGET_SINGLE_PER_S} single blocks/s over HTTP"),
            met: Some(small.keep.per_s().max(big.fresh.per_s()) >= TARGET_SINGLE_PER_S),
            detail: format!(
                "{CLIENTS} clients, small map: {:.0}/s kept-alive, {:.0}/s new connection each; at {big_entries} entries {:.0}/s kept-alive",
                small.keep.per_s(),
                big.fresh.per_s(),
                big.keep.per_s()
            ),
        },
        Target {
            goal: format!("at least {TARGET_BULK_PER_S} bulk entries/s"),
            met: Some(bulk_entries as f64 / bulk_total_s >= TARGET_BULK_PER_S),
            detail: format!(
                "{bulk_entries} entries in {:.2} s of requests = {:.0} entries/s overall; per list of {BULK_SIZE}: \
                 first {:.0}/s (at {} entries), last {:.0}/s (at {} entries), median {:.0}/s",
                bulk_total_s,
                bulk_entries as f64 / bulk_total_s,
                bulk.first().map_or(0.0, Bulk::per_s),
                big.before_bulk,
                bulk.last().map_or(0.0, Bulk::per_s),
                big_entries - bulk.last().map_or(0, |b| b.created),
                bulk_rate.median,
            ),
        },
        Target {
            goal: "no reload and no haproxy -c for any block".into(),
            met: Some(no_reloads),
            detail: phases
                .iter()
                .map(|(p, r, c)| format!("{p}: {r} reloads, {c} checks"))
                .collect::<Vec<_>>()
                .join("; "),
        },
    ]
}

fn notes(host: &str, big: &BigMap) -> Vec<String> {
    let mut notes = vec![
        format!(
            "edge: `hapctl init`, 10 fixture domains ({} blocks) written to the database, `hapctl haproxy start`, \
             `hapctl serve --listen 127.0.0.1:<free>`. Blocked addresses are 127.S.x.y (never 127.0.0.x); a probe is \
             GET / with Host {host} on a fresh connection bound to that source address; before its block it gets 200.",
            fixture::BLOCKS
        ),
        "latency: one request per connection; the clock starts before connect() and stops at the first 403, \
         polled every 0.1 ms from the moment the block is sent. The API answers once the runtime change is read back \
         and the map's folder synced, so the 403 can come first ('403 before the answer')."
            .into(),
        format!(
            "throughput: each client posts {{\"ip\": A, \"reason\": \"hapctl-bench\"}} with a new A each time; a batch \
             is one run of the daemon's block worker (answers sharing one duration_ms); after each run 5 addresses \
             are checked to get 403. The map file holds {} entries at the end.",
            big.file_entries
        ),
    ];
    if let Some(m) = &big.memory {
        notes.push(format!(
            "daemon memory at the end: VmRSS {} MiB, VmHWM {} MiB",
            crate::memory::mib(m.rss_kb),
            crate::memory::mib(m.hwm_kb)
        ));
    }
    notes
}
