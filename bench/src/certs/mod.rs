//! certs: TLS certificates on an edge with its HTTPS bind, measured from outside.
//!
//! Certificates come from a test CA made here with rcgen (ECDSA P-256, like hapctl's own
//! keys): leaves `site-N.bench.test`, each bundle = leaf + CA certificate + key, installed with
//! `hapctl cert import NAME --pem FILE --json` as a user would.
//!
//! 1. **install → served**: with 10, 100 and 1,000 certificates installed (`--cert-sizes`),
//!    the spawn of `hapctl cert import` of one more certificate (then removed again, untimed)
//!    or of a replacement (a new serial for an installed name) until a TLS handshake with its
//!    SNI through the HTTPS bind presents the new serial; the bulk install that builds each
//!    size is timed too (HAProxy running for steps of up to 100 certificates; larger steps are
//!    imported with HAProxy stopped, then it is started, because each runtime import gets
//!    slower with the number installed). Master reloads (`show proc`) and `haproxy -c` runs (counting wrapper)
//!    are counted around every command: the runtime path must make none.
//! 2. **`haproxy -c`, a reload and `hapctl haproxy start` → serving** with 0 and with the
//!    largest number of certificates, interleaved, as ratios.
//! 3. **handshakes/s during 100 renewals**: one thread makes full handshakes (a new rustls
//!    config each time, so no resumption) for a fixed time, counted per 100 ms bucket, while
//!    the main thread re-imports certificates with new serials 100 times: by `hapctl cert
//!    import`, through the runtime API alone (control), and through `hapctl serve`
//!    (`PUT /v1/certificates`, the daemon's install path, which its renewals take); then the
//!    daemon's renewals again under an open-loop load at `--handshake-rate` (`load`: the
//!    closed loop measures a renewal's CPU share of a saturated machine, the open loop
//!    whether the edge keeps serving a load below its capacity).
//! 4. **daemon memory** like `rss` (10,000 domains, 100,000 blocks), with 0 and with the
//!    largest number of certificates.
//!
//! Everything started here is stopped by Drop guards (daemon, then HAProxy, then temp dirs),
//! also on errors; every command, handshake and wait is bounded; traffic goes to 127.0.0.1.
//!
//! Files: `pki` (the test CA), `edge` (an edge with its HTTPS bind), `install` (imports,
//! removals, bulk installs), `startup` (2.), `renewals` and `load` (3.), `rss` (4.), `report` (the
//! section's tables, targets and notes); the section's run is here.

mod edge;
mod install;
mod load;
mod pki;
mod renewals;
mod report;
mod rss;
mod startup;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::fixture::{self, Servers};
use crate::harness::BenchEdge;
use crate::harness::HttpBackend;
use crate::stats::ms;
use crate::{Ctx, Report};

use edge::TlsEdge;
use install::{Bulk, Install, Stretch};
use load::Load;
use pki::TestCa;
use renewals::{renewals_under_load, Renewals, Renewer};
use rss::{rss_run, RssRun};
use startup::{check_reload_start, dir_bytes, Startup};

const BODY: &str = "hapctl-bench backend\n";
/// Domains of the edge the certificates are measured on (routing is not what is measured).
const DOMAINS: usize = 10;
/// Measured installs per size: half new certificates, half replacements.
const INSTALLS: usize = 20;
const TARGET_P50_MS: f64 = 50.0;
/// Pause between two probe handshakes while a command runs.
const PROBE_EVERY: Duration = Duration::from_millis(2);
/// Larger steps are imported with HAProxy stopped (files only), then HAProxy is started.
const RUNNING_BULK_MAX: usize = 100;
/// Renewals under handshake load, over this many names.
const RENEWALS: usize = 100;
const RENEWED_NAMES: usize = 10;
/// "No dip", as this section reads it: the median bucket during renewals at least this share
/// of the median before, and the smallest bucket at least `MIN_BUCKET_SHARE` of it.
const MEDIAN_SHARE: f64 = 0.9;
const MIN_BUCKET_SHARE: f64 = 0.5;
/// The daemon-memory edge, as in `rss`.
const RSS_DOMAINS: usize = 10_000;
const RSS_BLOCKS: usize = 100_000;
const RSS_TARGET_MIB: f64 = 50.0;
const RSS_BRIEF_LAST_STEP: &str = "POST /v1/blocked-ips (one)";

/// The `i`-th certificate name (and the host it covers).
fn site(i: usize) -> String {
    format!("site-{i}.bench.test")
}

/// Percentile of unsorted samples, linear between closest ranks (as `stats`).
fn pct(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (p / 100.0) * (s.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (rank - lo as f64)
}

fn elapsed_ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// The section

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let mut sizes = ctx.cert_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let largest = *sizes.last().context("--cert-sizes is empty")?;
    let hapctl = ctx.hapctl_bin()?;
    let backend = HttpBackend::start(BODY);
    let addr = backend.addr();
    let ca = TestCa::new()?;

    // Edge A: the certificate sizes, then the renewals under load, then check/reload/start.
    let mut a = served_edge(&hapctl, &addr)?;
    let (mut sized, open) = install_sizes(&mut a, &ca, &sizes)?;
    let renewed = renew(&mut a, &ca, largest, ctx.handshake_rate)?;
    sized.stretches.push(open.end(&a)?);

    // 2. `haproxy -c`, reload, start: 0 vs `largest` certificates (edge Z: 0).
    eprintln!("certs: haproxy -c, reload and start with 0 and {largest} certificates…");
    let z = served_edge(&hapctl, &addr)?;
    let startup = check_reload_start(&z, &a, "site-0.bench.test")?;
    drop(z);

    // 4. daemon memory at 10,000 domains + 100,000 blocks, 0 vs `largest` certificates.
    drop(a);
    let mut rss_runs = Vec::new();
    for certs in [0, largest] {
        eprintln!(
            "certs: daemon memory at {RSS_DOMAINS} domains, {RSS_BLOCKS} blocks, {certs} certificates…"
        );
        rss_runs.push(rss_run(&hapctl, &ca, &addr, certs)?);
    }
    Ok(report::report(&Measured {
        largest,
        handshake_rate: ctx.handshake_rate,
        sized,
        renewed,
        startup,
        rss_runs,
    }))
}

/// Everything the section measured, for its report.
struct Measured {
    largest: usize,
    handshake_rate: u32,
    sized: SizeSteps,
    renewed: Renewed,
    startup: Startup,
    rss_runs: Vec<RssRun>,
}

/// An edge with its HTTPS bind and the fixture domains, started and serving.
fn served_edge(hapctl: &Path, backend: &str) -> anyhow::Result<TlsEdge> {
    let e = TlsEdge::init(hapctl)?;
    e.edge
        .load(&fixture::state(DOMAINS, Servers::At(backend)))?;
    e.edge.start()?;
    e.wait_served("unknown.bench.test", None, Duration::from_secs(10))?;
    Ok(e)
}

/// Step 1 on edge A: each size reached, and what was measured there.
struct SizeSteps {
    steps: Vec<SizeRun>,
    /// `haproxy -c` of the live files at 0 and at each size.
    checks: Vec<CheckRun>,
    /// Edge A's masters so far (a big bulk step restarts it), to count reloads.
    stretches: Vec<Stretch>,
}

struct SizeRun {
    size: usize,
    /// How the size was reached, and the bulk table's label for it.
    bulk: Bulk,
    bulk_label: String,
    ops: Vec<Install>,
    removals: Vec<Removal>,
}

/// One `cert rm`: its duration_ms and its exit, ms.
type Removal = (f64, f64);

struct CheckRun {
    certificates: usize,
    runs: Vec<f64>,
    certs_dir_bytes: u64,
    crt_list_bytes: u64,
}

/// Step 1: bulk installs to each size, then [`INSTALLS`] installs timed to served there.
/// Returns what it measured and edge A's master still running.
fn install_sizes(
    a: &mut TlsEdge,
    ca: &TestCa,
    sizes: &[usize],
) -> anyhow::Result<(SizeSteps, Stretch)> {
    let mut stretches = Vec::new();
    let mut open = Stretch::begin(a, "first start")?;
    let mut checks = vec![time_checks(a, 0)?];
    let mut runs = Vec::new();
    let mut installed = 0;
    for &size in sizes {
        eprintln!("certs: bulk install {installed} → {size} certificates…");
        let (bulk, bulk_label) = if size - installed <= RUNNING_BULK_MAX {
            let bulk = a.bulk(ca, installed, size, true)?;
            (bulk, "10 domains, HAProxy running".to_string())
        } else {
            stretches.push(open.end(a)?);
            let stopped = bulk_stopped(a, ca, installed, size)?;
            open = Stretch::begin(a, &format!("start with {size} certificates"))?;
            stopped
        };
        installed = size;
        checks.push(time_checks(a, size)?);
        eprintln!("certs: {INSTALLS} installs timed to served at {size} certificates…");
        let (ops, removals) = timed_installs(a, ca, size)?;
        runs.push(SizeRun {
            size,
            bulk,
            bulk_label,
            ops,
            removals,
        });
    }
    let sized = SizeSteps {
        steps: runs,
        checks,
        stretches,
    };
    Ok((sized, open))
}

/// A bulk step with HAProxy stopped, then started: one `cert import` after the other into a
/// running HAProxy slows down with every certificate (see BENCHMARKS.md); files only, then a
/// start, is what a user migrating that many would do.
fn bulk_stopped(
    a: &mut TlsEdge,
    ca: &TestCa,
    from: usize,
    to: usize,
) -> anyhow::Result<(Bulk, String)> {
    a.edge.try_ok(&["haproxy", "stop"])?;
    let bulk = a.bulk(ca, from, to, false)?;
    let t = Instant::now();
    a.edge.try_ok(&["haproxy", "start"])?;
    let start_ms = elapsed_ms(t);
    let serial = a.serials.get(&site(0)).cloned();
    a.wait_served(&site(0), serial.as_deref(), Duration::from_secs(10))?;
    let label = format!(
        "10 domains, HAProxy stopped (files only), then `hapctl haproxy start` {} ms",
        ms(start_ms)
    );
    Ok((bulk, label))
}

/// `haproxy -c` of edge A's live files, 3 runs, with the size of what it reads.
fn time_checks(a: &TlsEdge, certificates: usize) -> anyhow::Result<CheckRun> {
    let runs: Vec<f64> = (0..3)
        .map(|_| a.edge.time_haproxy_check())
        .collect::<anyhow::Result<_>>()?;
    let paths = &a.edge.settings()?.paths;
    let crt_list =
        std::fs::metadata(hapctl::render::FileId::CrtList.path(paths)).map_or(0, |m| m.len());
    Ok(CheckRun {
        certificates,
        runs,
        certs_dir_bytes: dir_bytes(&paths.certs_dir),
        crt_list_bytes: crt_list,
    })
}

/// [`INSTALLS`] installs at `size`: alternately a new name (removed again, so the size holds)
/// and a new serial for an installed name.
fn timed_installs(
    a: &mut TlsEdge,
    ca: &TestCa,
    size: usize,
) -> anyhow::Result<(Vec<Install>, Vec<Removal>)> {
    let mut ops = Vec::new();
    let mut removals = Vec::new();
    for j in 0..INSTALLS {
        if j.is_multiple_of(2) {
            let leaf = ca.leaf(&site(size + j / 2))?;
            ops.push(a.import_observed(&leaf)?);
            removals.push(a.remove(&leaf.name)?);
        } else {
            let i = (j * 7919 + 13) % size;
            let leaf = ca.leaf(&site(i))?;
            ops.push(a.import_observed(&leaf)?);
        }
    }
    Ok((ops, removals))
}

/// Step 3: the renewals under handshake load, each way.
struct Renewed {
    by_cli: Renewals,
    /// Control: through the runtime API alone.
    runtime_api: Renewals,
    by_daemon: Renewals,
    by_daemon_open_loop: Renewals,
}

/// Step 3 on edge A, at the largest size.
fn renew(
    a: &mut TlsEdge,
    ca: &TestCa,
    largest: usize,
    handshake_rate: u32,
) -> anyhow::Result<Renewed> {
    eprintln!("certs: {RENEWALS} renewals under handshake load at {largest} certificates…");
    let renewed_names = largest.min(RENEWED_NAMES);
    let mut under = |how, load| renewals_under_load(a, ca, renewed_names, how, load);
    let by_cli = under(Renewer::Cli, Load::Closed)?;
    eprintln!("certs: the same through the runtime API only (control)…");
    let runtime_api = under(Renewer::RuntimeApi, Load::Closed)?;
    eprintln!("certs: the same through `hapctl serve` (the daemon's install path)…");
    let by_daemon = under(Renewer::Daemon, Load::Closed)?;
    let offered = Load::Open {
        per_second: handshake_rate,
    };
    eprintln!("certs: the daemon's renewals under an open-loop load ({offered:?})…");
    let by_daemon_open_loop = under(Renewer::Daemon, offered)?;
    Ok(Renewed {
        by_cli,
        runtime_api,
        by_daemon,
        by_daemon_open_loop,
    })
}
