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

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::render::FileId;
use serde_json::{json, Value};

use crate::api::Api;
use crate::blocks_load::throughput;
use crate::blocks_pieces as pieces;
use crate::daemon::Daemon;
use crate::fixture::{self, Servers};
use crate::harness::{http_get_from, Edge, HttpBackend};
use crate::stats::{ms, Summary};
use crate::{Ctx, Report, Table, Target};

const BODY: &str = "hapctl-bench backend\n";
const TARGET_P50_MS: f64 = 5.0;
const TARGET_SINGLE_PER_S: f64 = 2000.0;
const TARGET_BULK_PER_S: f64 = 50_000.0;

/// Sequential single blocks timed to enforced, on the small map and on the 100k map.
const LATENCY_OPS: usize = 200;
const LATENCY_OPS_BIG: usize = 100;
/// Bound on a latency series.
const SERIES_BOUND: Duration = Duration::from_secs(120);
/// Bound on one block reaching enforcement.
const ENFORCE_BOUND: Duration = Duration::from_secs(10);
const CLIENTS: usize = 32;
pub const THROUGHPUT_FOR: Duration = Duration::from_secs(5);
const BULK_SIZE: usize = 10_000;
const BULK_GOAL: usize = 100_000;
/// Bound on the number of bulk requests.
const BULK_MAX_POSTS: usize = 15;

/// The `i`-th address of a series: 127.`set`.x.y, never 127.0.0.x (the bench's own traffic).
pub fn addr(set: u8, i: usize) -> Ipv4Addr {
    assert!(set >= 2 && i < 250 * 256);
    Ipv4Addr::new(127, set, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// One block timed to enforced.
pub struct Latency {
    /// Send → the API's answer (the block committed, on disk, enforced and read back).
    pub api_ms: f64,
    /// Send → first 403 through the edge from the blocked address, probed from the moment
    /// the request is sent.
    pub enforced_ms: f64,
    /// The block worker's own duration for the batch (`duration_ms` of the answer).
    pub server_ms: f64,
    /// The 403 came before the answer did.
    pub before_answer: bool,
    pub enforcement: String,
}

/// What the edge and HAProxy did during a phase.
#[derive(Clone, Copy)]
struct Counts {
    reloads: u32,
    checks: usize,
}

fn counts(edge: &Edge) -> anyhow::Result<Counts> {
    Ok(Counts {
        reloads: edge.show_proc()?.master.reloads,
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
    fn start(hapctl: &std::path::Path, backend: &str, label: &str) -> anyhow::Result<Served> {
        let mut edge = Edge::init(hapctl, label)?;
        edge.load(&fixture::state(10, Servers::At(backend)))?;
        edge.start()?;
        let daemon = Daemon::start(&edge, Duration::from_secs(60))?;
        Ok(Served { daemon, edge })
    }
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let backend = HttpBackend::start(BODY);
    let addr_text = backend.addr();
    let host = fixture::domain(0).to_string();
    let mut phases = Vec::new();
    let mut notes = Vec::new();

    // Edge A: latency and kept-alive throughput at the small map.
    let a = Served::start(&hapctl, &addr_text, "blocks-a")?;
    let (edge, api) = (&a.edge, a.daemon.api.clone());
    eprintln!("blocks: {LATENCY_OPS} sequential blocks timed to 403…");
    let c0 = counts(edge)?;
    let small_before = map_size(&api)?;
    let small = latency_series(&api, edge, &host, 10, LATENCY_OPS)?;
    let (reloads, checks) = delta(c0, counts(edge)?);
    phases.push(("latency, small map".to_string(), reloads, checks));
    let small_entries = map_size(&api)?;
    let small_pieces = pieces::time(edge)?;

    eprintln!("blocks: {CLIENTS} clients for {THROUGHPUT_FOR:?} on kept-alive connections…");
    let c0 = counts(edge)?;
    let mut keep = throughput(&api, CLIENTS, true, 20)?;
    keep.entries = (small_entries, map_size(&api)?);
    let (reloads, checks) = delta(c0, counts(edge)?);
    phases.push((
        "throughput kept-alive, small map".to_string(),
        reloads,
        checks,
    ));
    check_enforced(edge, &host, &keep.sample)?;
    drop(a);

    // Edge B: a fresh small map for new-connection throughput, then bulk to 100k, then the
    // single-entry measurements again at 100k.
    let b = Served::start(&hapctl, &addr_text, "blocks-b")?;
    let (edge, api) = (&b.edge, b.daemon.api.clone());
    eprintln!("blocks: {CLIENTS} clients for {THROUGHPUT_FOR:?}, a new connection per request…");
    let c0 = counts(edge)?;
    let before = map_size(&api)?;
    let mut fresh = throughput(&api, CLIENTS, false, 60)?;
    fresh.entries = (before, map_size(&api)?);
    let (reloads, checks) = delta(c0, counts(edge)?);
    phases.push((
        "throughput new connections, small map".to_string(),
        reloads,
        checks,
    ));
    check_enforced(edge, &host, &fresh.sample)?;

    let before_bulk = map_size(&api)?;
    eprintln!("blocks: bulk lists of {BULK_SIZE} from {before_bulk} entries to {BULK_GOAL}…");
    let c0 = counts(edge)?;
    let mut bulk = Vec::new();
    let mut size = before_bulk;
    for k in 0..BULK_MAX_POSTS {
        if size >= BULK_GOAL {
            break;
        }
        let one = bulk_post(&api, edge, &host, 100 + k as u8)?;
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
    let (reloads, checks) = delta(c0, counts(edge)?);
    phases.push(("bulk".to_string(), reloads, checks));
    let big_entries = map_size(&api)?;
    if big_entries < BULK_GOAL {
        bail!("after the bulk lists the database holds {big_entries} blocks, not {BULK_GOAL}");
    }
    let file_entries = std::fs::read_to_string(FileId::BlockedMap.path(&edge.settings.paths))
        .map(|t| {
            t.lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .count()
        })
        .unwrap_or(0);

    eprintln!("blocks: {LATENCY_OPS_BIG} sequential blocks at {big_entries} entries…");
    let c0 = counts(edge)?;
    let big = latency_series(&api, edge, &host, 9, LATENCY_OPS_BIG)?;
    let before = map_size(&api)?;
    let mut big_keep = throughput(&api, CLIENTS, true, 140)?;
    big_keep.entries = (before, map_size(&api)?);
    let (reloads, checks) = delta(c0, counts(edge)?);
    phases.push((
        format!("latency + throughput, {big_entries}-entry map"),
        reloads,
        checks,
    ));
    check_enforced(edge, &host, &big_keep.sample)?;

    // Where a block's time goes at 100k: the pieces the block path runs, in-process.
    let pieces = pieces::time(edge)?;
    let memory = b.daemon.memory().ok();
    drop(b);

    // Tables.
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
        ((small_before, small_entries), &small),
        ((big_entries, big_entries + big.len()), &big),
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
    for t in [&keep, &fresh, &big_keep] {
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
    let mut at = before_bulk;
    for (i, b) in bulk.iter().enumerate() {
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
    let bulk_rate = Summary::of(&bulk.iter().map(Bulk::per_s).collect::<Vec<_>>())
        .context("no bulk list was sent")?;
    let bulk_total_s: f64 = bulk.iter().map(|b| b.api_ms).sum::<f64>() / 1000.0;
    let bulk_entries: usize = bulk.iter().map(|b| b.created).sum();

    let mut counts_table = Table::new(
        "blocks: reloads and haproxy -c runs during each phase (expected 0)",
        &["phase", "reloads", "haproxy -c"],
    );
    for (phase, r, c) in &phases {
        counts_table.row(vec![phase.clone(), r.to_string(), c.to_string()]);
    }
    let pieces_table = pieces::table(&[&small_pieces, &pieces]);

    let small_p50 = Summary::of(&small.iter().map(|l| l.enforced_ms).collect::<Vec<_>>())
        .expect("ops > 0")
        .median;
    let big_p50 = Summary::of(&big.iter().map(|l| l.enforced_ms).collect::<Vec<_>>())
        .expect("ops > 0")
        .median;
    let no_reloads = phases.iter().all(|(_, r, c)| *r == 0 && *c == 0);
    let targets = vec![
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
            met: Some(keep.per_s().max(fresh.per_s()) >= TARGET_SINGLE_PER_S),
            detail: format!(
                "{CLIENTS} clients, small map: {:.0}/s kept-alive, {:.0}/s new connection each; at {big_entries} entries {:.0}/s kept-alive",
                keep.per_s(),
                fresh.per_s(),
                big_keep.per_s()
            ),
        },
        Target {
            goal: format!("at least {TARGET_BULK_PER_S} bulk entries/s"),
            met: Some(bulk_entries as f64 / bulk_total_s >= TARGET_BULK_PER_S),
            detail: format!(
                "{bulk_entries} entries in {:.2} s of requests = {:.0} entries/s overall; per list of {BULK_SIZE}: \
                 first {:.0}/s (at {before_bulk} entries), last {:.0}/s (at {} entries), median {:.0}/s",
                bulk_total_s,
                bulk_entries as f64 / bulk_total_s,
                bulk.first().map_or(0.0, Bulk::per_s),
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
    ];
    notes.push(format!(
        "edge: `hapctl init`, 10 fixture domains ({} blocks) written to the database, `hapctl haproxy start`, \
         `hapctl serve --listen 127.0.0.1:<free>`. Blocked addresses are 127.S.x.y (never 127.0.0.x); a probe is \
         GET / with Host {host} on a fresh connection bound to that source address; before its block it gets 200.",
        fixture::BLOCKS
    ));
    notes.push(
        "latency: one request per connection; the clock starts before connect() and stops at the first 403, \
         polled every 0.1 ms from the moment the block is sent. The API answers once the runtime change is read back \
         and the map's folder synced, so the 403 can come first ('403 before the answer')."
            .into(),
    );
    notes.push(format!(
        "throughput: each client posts {{\"ip\": A, \"reason\": \"hapctl-bench\"}} with a new A each time; a batch \
         is one run of the daemon's block worker (answers sharing one duration_ms); after each run 5 addresses \
         are checked to get 403. The map file holds {file_entries} entries at the end."
    ));
    if let Some(m) = memory {
        notes.push(format!(
            "daemon memory at the end: VmRSS {} MiB, VmHWM {} MiB",
            crate::daemon::mib(m.rss_kb),
            crate::daemon::mib(m.hwm_kb)
        ));
    }
    Ok(Report {
        tables: vec![lat, tput, bulk_table, pieces_table, counts_table],
        targets,
        notes,
        json: json!({
            "latency": lat_json,
            "throughput": tput_json,
            "bulk": bulk.iter().map(|b| json!({
                "entries": BULK_SIZE,
                "created": b.created,
                "api_ms": b.api_ms,
                "entries_per_s": b.per_s(),
                "server_ms": b.server_ms,
                "enforcement": b.enforcement,
                "last_entry_enforced_ms": b.enforced_ms,
            })).collect::<Vec<_>>(),
            "bulk_entries_per_s": bulk_rate.to_json(),
            "map_entries": {"small": small_entries, "big": big_entries, "file": file_entries},
            "pieces_ms": [pieces::json(&small_pieces), pieces::json(&pieces)],
            "phases": phases.iter().map(|(p, r, c)| json!({"phase": p, "reloads": r, "haproxy_c": c})).collect::<Vec<_>>(),
        }),
    })
}

/// Blocks in the database (`counts.blocked` of `GET /v1/status`, which every version has).
pub fn map_size(api: &Api) -> anyhow::Result<usize> {
    let a = api.call("GET", "/v1/status", None)?;
    if a.status != 200 {
        bail!("GET /v1/status: {}", a.describe());
    }
    a.json()["counts"]["blocked"]
        .as_u64()
        .map(|n| n as usize)
        .context("GET /v1/status has no counts.blocked")
}

pub fn block_body(ip: Ipv4Addr) -> Value {
    json!({"ip": ip.to_string(), "reason": "hapctl-bench"})
}

/// GET / through the edge from `ip`: the status.
fn status_from(edge: &Edge, host: &str, ip: Ipv4Addr) -> anyhow::Result<u16> {
    Ok(http_get_from(ip, edge.port, host)
        .with_context(|| format!("GET / from {ip} through the edge"))?
        .0)
}

/// Polls from `ip` until 403 (bounded), from `t0` on; returns when the 403 came, from `t0`.
fn wait_403(edge: &Edge, host: &str, ip: Ipv4Addr, t0: Instant) -> anyhow::Result<Duration> {
    let deadline = t0 + ENFORCE_BOUND;
    loop {
        let status = status_from(edge, host, ip)?;
        if status == 403 {
            return Ok(t0.elapsed());
        }
        if Instant::now() > deadline {
            bail!("{ip} still got {status}, not 403, {ENFORCE_BOUND:?} after its block was sent");
        }
        // A probe costs ~0.2 ms; the pause leaves the CPUs to the block path.
        thread::sleep(Duration::from_micros(100));
    }
}

/// `n` sequential single blocks, each timed from sending it to its answer and to the first
/// 403 from its address, probed while the request is in flight (the path enforces before it
/// answers: the answer also waits for the map's folder sync).
pub fn latency_series(
    api: &Api,
    edge: &Edge,
    host: &str,
    set: u8,
    n: usize,
) -> anyhow::Result<Vec<Latency>> {
    let started = Instant::now();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if started.elapsed() > SERIES_BOUND {
            eprintln!("  (stopped after {i} blocks: {SERIES_BOUND:?} bound)");
            break;
        }
        let ip = addr(set, i);
        let before = status_from(edge, host, ip)?;
        if before == 403 {
            bail!("{ip} got 403 before it was blocked");
        }
        let body = serde_json::to_vec(&block_body(ip))?;
        let t0 = Instant::now();
        let (answer, answered, enforced) = thread::scope(|s| {
            let post = s.spawn(|| {
                let answer = api.call_raw("POST", "/v1/blocked-ips", Some(&body));
                (answer, t0.elapsed())
            });
            let enforced = wait_403(edge, host, ip, t0);
            let (answer, answered) = post.join().expect("the POST thread does not panic");
            anyhow::Ok((answer?, answered, enforced?))
        })?;
        if answer.status != 201 && answer.status != 200 {
            bail!("POST /v1/blocked-ips {ip}: {}", answer.describe());
        }
        let j = answer.json();
        out.push(Latency {
            api_ms: answered.as_secs_f64() * 1000.0,
            enforced_ms: enforced.as_secs_f64() * 1000.0,
            server_ms: j["duration_ms"].as_f64().unwrap_or(f64::NAN),
            before_answer: enforced < answered,
            enforcement: j["enforcement"].as_str().unwrap_or("?").to_string(),
        });
    }
    Ok(out)
}

fn check_enforced(edge: &Edge, host: &str, sample: &[Ipv4Addr]) -> anyhow::Result<()> {
    for &ip in sample {
        let status = status_from(edge, host, ip)?;
        if status != 403 {
            bail!("{ip} was blocked (the API said so) but gets {status}");
        }
    }
    Ok(())
}

struct Bulk {
    created: usize,
    api_ms: f64,
    server_ms: f64,
    enforcement: String,
    /// Send → the list's last entry refused with 403.
    enforced_ms: f64,
}

impl Bulk {
    fn per_s(&self) -> f64 {
        BULK_SIZE as f64 / (self.api_ms / 1000.0)
    }
}

/// One list of [`BULK_SIZE`] entries, 127.`set`.x.y.
fn bulk_post(api: &Api, edge: &Edge, host: &str, set: u8) -> anyhow::Result<Bulk> {
    let list: Vec<Value> = (0..BULK_SIZE).map(|i| block_body(addr(set, i))).collect();
    let body = serde_json::to_vec(&list)?;
    let last = addr(set, BULK_SIZE - 1);
    let t0 = Instant::now();
    let answer = api.call_raw("POST", "/v1/blocked-ips", Some(&body))?;
    let api_ms = t0.elapsed().as_secs_f64() * 1000.0;
    if answer.status != 201 && answer.status != 200 {
        bail!("bulk POST of {BULK_SIZE}: {}", answer.describe());
    }
    let enforced_ms = wait_403(edge, host, last, t0)?.as_secs_f64() * 1000.0;
    check_enforced(edge, host, &[addr(set, 0), addr(set, BULK_SIZE / 2)])?;
    let j = answer.json();
    let created = j["results"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|x| *x == "created").count());
    Ok(Bulk {
        created,
        api_ms,
        server_ms: j["duration_ms"].as_f64().unwrap_or(f64::NAN),
        enforcement: j["enforcement"].as_str().unwrap_or("?").to_string(),
        enforced_ms,
    })
}
