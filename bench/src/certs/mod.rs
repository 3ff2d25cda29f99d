//! certs: TLS certificates on an edge with its HTTPS bind, measured from outside.
//!
//! Certificates come from the kit's test CA (ECDSA P-256, like hapctl's own keys): leaves
//! `site-N.bench.test`, each bundle = leaf + intermediate CA certificate + key, installed with
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
//! removals, bulk installs), `startup` (2.), `renewals` and `load` (3.), `rss` (4.); the section's run
//! and its tables, targets and notes are here.

mod edge;
mod install;
mod load;
mod pki;
mod renewals;
mod rss;
mod startup;

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::daemon::mib;
use crate::fixture::{self, Servers};
use crate::harness::HttpBackend;
use crate::stats::ms;
use crate::{Ctx, Report, Table, Target};

use edge::TlsEdge;
use install::{bulk_row, modes, Bulk, Install, Pick, Stretch};
use load::Load;
use pki::TestCa;
use renewals::{renewals_under_load, Renewer};
use rss::{rss_run, RssRun};
use startup::{check_reload_start, dir_bytes};

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
    let mut report = Report::default();
    let mut json_out = serde_json::Map::new();

    // Edge A: the certificate sizes, then the renewals under load, then check/reload/start.
    let mut a = TlsEdge::init(&hapctl, "certs-a")?;
    a.edge.load(&fixture::state(DOMAINS, Servers::At(&addr)))?;
    a.edge.start()?;
    a.wait_served("unknown.bench.test", None, Duration::from_secs(10))?;
    // Stretches of edge A with one master each (a big bulk step restarts it), to count reloads.
    let mut stretches: Vec<Stretch> = Vec::new();
    let mut open = Stretch::begin(&a, "first start")?;

    // 1. install → served.
    let mut bulk_table = Table::new(
        "certs: bulk install, one `hapctl cert import --json` after the other (ms unless said)",
        &[
            "edge",
            "certificates",
            "imports",
            "wall s",
            "imports/s",
            "cmd exit p50",
            "duration_ms p50",
            "duration_ms p50, first 10 %",
            "duration_ms p50, last 10 %",
            "installed",
            "haproxy -c",
            "reloads",
        ],
    );
    let mut latency = Table::new(
        format!(
            "certs: spawn of `hapctl cert import` → a handshake with its SNI presents the new serial, ms ({INSTALLS} per size: half new names, half replacements)"
        ),
        &[
            "certificates installed",
            "installs",
            "n",
            "p50",
            "p90",
            "max",
            "cmd exit p50",
            "duration_ms p50",
            "duration_ms p90",
            "probes / failed",
            "installed",
            "checks",
            "reloads (report / master)",
        ],
    );
    let mut rm_table = Table::new(
        "certs: `hapctl cert rm` of the certificate just added (untimed for the latency above), ms",
        &[
            "certificates installed",
            "n",
            "cmd exit p50",
            "duration_ms p50",
            "max",
        ],
    );
    let mut scale = Table::new(
        "certs: `haproxy -c` of edge A's live files as certificates are added (3 runs each), ms",
        &[
            "certificates",
            "median",
            "min",
            "max",
            "certs dir KiB",
            "crt-list KiB",
        ],
    );
    let mut scale_json = Vec::new();
    let mut scale_row = |a: &TlsEdge, n: usize| -> anyhow::Result<()> {
        let runs: Vec<f64> = (0..3)
            .map(|_| a.edge.time_haproxy_check())
            .collect::<anyhow::Result<_>>()?;
        let paths = &a.edge.settings.paths;
        let crt_list =
            std::fs::metadata(hapctl::render::FileId::CrtList.path(paths)).map_or(0, |m| m.len());
        scale.row(vec![
            n.to_string(),
            ms(pct(&runs, 50.0)),
            ms(pct(&runs, 0.0)),
            ms(pct(&runs, 100.0)),
            format!("{:.1}", dir_bytes(&paths.certs_dir) as f64 / 1024.0),
            format!("{:.1}", crt_list as f64 / 1024.0),
        ]);
        scale_json.push(json!({"certificates": n, "check_ms": runs}));
        Ok(())
    };
    scale_row(&a, 0)?;
    let mut installed = 0;
    let mut bulks: Vec<Bulk> = Vec::new();
    let mut json_sizes = Vec::new();
    let mut p50_by_size = Vec::new();
    let mut all_measured: Vec<Install> = Vec::new();
    for &size in &sizes {
        eprintln!("certs: bulk install {installed} → {size} certificates…");
        if size - installed <= RUNNING_BULK_MAX {
            let bulk = a.bulk(&ca, installed, size, true)?;
            bulk_row(&mut bulk_table, "10 domains, HAProxy running", &bulk);
            bulks.push(bulk);
        } else {
            // One `cert import` after the other into a running HAProxy slows down with every
            // certificate (see BENCHMARKS.md); files only, then a start, is what a user
            // migrating that many would do.
            stretches.push(open.end(&a)?);
            a.edge.ok(&["haproxy", "stop"])?;
            let bulk = a.bulk(&ca, installed, size, false)?;
            let t = Instant::now();
            a.edge.ok(&["haproxy", "start"])?;
            let start_ms = elapsed_ms(t);
            let serial = a.serials.get(&site(0)).cloned();
            a.wait_served(&site(0), serial.as_deref(), Duration::from_secs(10))?;
            bulk_row(
                &mut bulk_table,
                &format!(
                    "10 domains, HAProxy stopped (files only), then `hapctl haproxy start` {} ms",
                    ms(start_ms)
                ),
                &bulk,
            );
            bulks.push(bulk);
            open = Stretch::begin(&a, &format!("start with {size} certificates"))?;
        }
        installed = size;
        scale_row(&a, size)?;
        eprintln!("certs: {INSTALLS} installs timed to served at {size} certificates…");
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
        let kinds: [(&str, Pick); 3] = [
            ("new name", |o| o.new),
            ("replacement", |o| !o.new),
            ("all", |_| true),
        ];
        for (label, pick) in &kinds {
            let chosen: Vec<&Install> = ops.iter().filter(|o| pick(o)).collect();
            let served: Vec<f64> = chosen.iter().filter_map(|o| o.served_ms).collect();
            let exit: Vec<f64> = chosen.iter().map(|o| o.exit_ms).collect();
            let own: Vec<f64> = chosen.iter().map(|o| o.duration_ms).collect();
            latency.row(vec![
                size.to_string(),
                label.to_string(),
                served.len().to_string(),
                ms(pct(&served, 50.0)),
                ms(pct(&served, 90.0)),
                ms(pct(&served, 100.0)),
                ms(pct(&exit, 50.0)),
                ms(pct(&own, 50.0)),
                ms(pct(&own, 90.0)),
                format!(
                    "{} / {}",
                    chosen.iter().map(|o| o.probes).sum::<u32>(),
                    chosen.iter().map(|o| o.probe_failures).sum::<u32>()
                ),
                modes(chosen.iter().copied()),
                format!(
                    "{} / {}",
                    chosen.iter().map(|o| o.report_checks).sum::<i64>(),
                    chosen.iter().map(|o| o.checks).sum::<usize>()
                ),
                format!(
                    "{} / {}",
                    chosen.iter().map(|o| o.report_reloads).sum::<i64>(),
                    chosen.iter().map(|o| o.reloads).sum::<i64>()
                ),
            ]);
            if *label == "all" {
                p50_by_size.push((size, pct(&served, 50.0), served.len()));
            }
        }
        let rm_exit: Vec<f64> = removals.iter().map(|r| r.1).collect();
        let rm_own: Vec<f64> = removals.iter().map(|r| r.0).collect();
        rm_table.row(vec![
            size.to_string(),
            removals.len().to_string(),
            ms(pct(&rm_exit, 50.0)),
            ms(pct(&rm_own, 50.0)),
            ms(pct(&rm_exit, 100.0)),
        ]);
        json_sizes.push(json!({
            "certificates": size,
            "bulk": bulks.last().map(Bulk::to_json),
            "installs": ops.iter().map(Install::to_json).collect::<Vec<_>>(),
            "removals": removals.iter().map(|(d, e)| json!({"duration_ms": d, "exit_ms": e})).collect::<Vec<_>>(),
        }));
        all_measured.extend(ops);
    }

    // 3. handshakes during renewals (on edge A, at the largest size).
    eprintln!("certs: {RENEWALS} renewals under handshake load at {largest} certificates…");
    let renewed_names = largest.min(RENEWED_NAMES);
    let mut under = |how, load| renewals_under_load(&mut a, &ca, renewed_names, how, load);
    let renew = under(Renewer::Cli, Load::Closed)?;
    eprintln!("certs: the same through the runtime API only (control)…");
    let control = under(Renewer::RuntimeApi, Load::Closed)?;
    eprintln!("certs: the same through `hapctl serve` (the daemon's install path)…");
    let by_daemon = under(Renewer::Daemon, Load::Closed)?;
    let offered = Load::Open {
        per_second: ctx.handshake_rate,
    };
    eprintln!("certs: the daemon's renewals under an open-loop load ({offered:?})…");
    let open_loop = under(Renewer::Daemon, offered)?;
    stretches.push(open.end(&a)?);
    let reload_delta: i64 = stretches
        .iter()
        .map(|s| s.reloads_to as i64 - s.reloads_from as i64)
        .sum();
    let masters_kept = stretches.iter().all(|s| s.same_pid);
    let op_reloads: i64 = bulks
        .iter()
        .flat_map(|b| b.ops.iter())
        .chain(all_measured.iter())
        .chain(renew.ops.iter())
        .chain(control.ops.iter())
        .chain(by_daemon.ops.iter())
        .chain(open_loop.ops.iter())
        .map(|o| o.reloads)
        .sum();

    // 2. `haproxy -c`, reload, start: 0 vs `largest` certificates (edge Z: 0).
    eprintln!("certs: haproxy -c, reload and start with 0 and {largest} certificates…");
    let mut z = TlsEdge::init(&hapctl, "certs-z")?;
    z.edge.load(&fixture::state(DOMAINS, Servers::At(&addr)))?;
    z.edge.start()?;
    z.wait_served("unknown.bench.test", None, Duration::from_secs(10))?;
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
    for r in &rss_runs {
        if let Some(b) = &r.bulk {
            bulk_row(
                &mut bulk_table,
                "10,000 domains, HAProxy stopped (files only)",
                b,
            );
        }
    }

    // Tables.
    let startup_table = startup.table(largest);
    let (renew_tables, renew_stats) = renew.tables();
    let (control_tables, control_stats) = control.tables();
    let (daemon_tables, daemon_stats) = by_daemon.tables();
    let (open_tables, open_stats) = open_loop.tables();
    let mut rss_table = Table::new(
        format!("certs: `hapctl serve` memory at {RSS_DOMAINS} domains and {} blocked entries (MiB, /proc/PID/status)", RSS_BLOCKS + fixture::BLOCKS),
        &["certificates", "step", "request ms", "VmRSS", "VmHWM (peak)", "RssAnon", "threads"],
    );
    for r in &rss_runs {
        for s in &r.readings {
            rss_table.row(vec![
                r.certs.to_string(),
                s.step.clone(),
                if s.ms > 0.0 { ms(s.ms) } else { "-".into() },
                mib(s.memory.rss_kb),
                mib(s.memory.hwm_kb),
                mib(s.memory.anon_kb),
                s.memory.threads.to_string(),
            ]);
        }
    }
    report.tables = vec![bulk_table, latency, rm_table, scale, startup_table];
    report.tables.extend(renew_tables);
    report.tables.extend(control_tables);
    report.tables.extend(daemon_tables);
    report.tables.extend(open_tables);
    report.tables.push(rss_table);
    let mut put_table = Table::new(
        format!("certs: the daemon's `PUT /v1/domains/rss-new.example.com` at {RSS_DOMAINS} domains (the apply's steps from the answer), ms"),
        &["certificates", "request", "apply", "render", "snapshot", "write", "check", "reload"],
    );
    for r in &rss_runs {
        let step = |name: &str| {
            r.put
                .2
                .iter()
                .find(|(n, _)| n == name)
                .map_or("-".to_string(), |(_, d)| ms(*d))
        };
        put_table.row(vec![
            r.certs.to_string(),
            ms(r.put.0),
            ms(r.put.1),
            step("render"),
            step("snapshot"),
            step("write"),
            step("check"),
            step("reload"),
        ]);
    }
    report.tables.push(put_table);

    // Targets.
    for (size, p50, n) in &p50_by_size {
        report.targets.push(Target {
            goal: format!("install → served p50 under {TARGET_P50_MS} ms with {size} certificates"),
            met: Some(*p50 < TARGET_P50_MS && *n == INSTALLS),
            detail: format!(
                "p50 {} ms over {n} installs (CLI process start included)",
                ms(*p50)
            ),
        });
    }
    let renewed = || renew.ops.iter().chain(by_daemon.ops.iter());
    let runtime_all = all_measured.iter().all(|o| o.installed == "runtime")
        && renewed().all(|o| o.installed == "runtime");
    let checks_seen: usize = all_measured.iter().map(|o| o.checks).sum::<usize>()
        + renewed().map(|o| o.checks).sum::<usize>();
    report.targets.push(Target {
        goal: "0 reloads (master `show proc`) over every install, bulk, replacement, removal and renewal on the running edge".into(),
        met: Some(reload_delta == 0 && op_reloads == 0 && masters_kept),
        detail: format!(
            "master reload count {} (each master from its start to the next stop: {}); per command {op_reloads:+} in total; master PID {} within each; `haproxy -c` runs seen in the measured installs and renewals: {checks_seen}; every one installed through the runtime API: {runtime_all}",
            format_args!("{reload_delta:+}"),
            stretches.iter().map(|s| format!("{} {} → {}", s.what, s.reloads_from, s.reloads_to)).collect::<Vec<_>>().join(", "),
            if masters_kept { "unchanged" } else { "CHANGED" }
        ),
    });
    report.targets.push(Target {
        goal: format!("0 failed handshakes during {RENEWALS} renewals"),
        met: Some(renew_stats.failures == 0),
        detail: format!(
            "{} failed of {} handshakes{}",
            renew_stats.failures,
            renew_stats.total,
            renew_stats
                .first_error
                .as_ref()
                .map(|e| format!("; first: {e}"))
                .unwrap_or_default()
        ),
    });
    report.targets.push(renew_stats.no_dip(format!(
        "no dip in handshakes/s during renewals by `cert import`, closed-loop load (read here as: median 100 ms bucket ≥ {:.0} % and smallest ≥ {:.0} % of the median before)",
        MEDIAN_SHARE * 100.0,
        MIN_BUCKET_SHARE * 100.0
    )));
    report.targets.push(daemon_stats.no_dip(
        "the same no-dip reading, renewals made by the daemon (`PUT /v1/certificates` to `hapctl serve`, its renewer's install path)".into(),
    ));
    report.targets.push(open_stats.no_dip(format!(
        "no dip with the daemon's renewals under an open-loop load of {} handshakes/s (the edge keeps serving its load)",
        ctx.handshake_rate
    )));
    report.targets.push(Target {
        goal: "control, no target: the same 100 replacements through the runtime API only (HAProxy's share)".into(),
        met: None,
        detail: format!(
            "median during / before {:.2}, smallest {:.2}; against the pauses {:.2} and {:.2}; {} failed of {} handshakes",
            control_stats.median_ratio,
            control_stats.min_ratio,
            control_stats.median_ratio_pauses,
            control_stats.min_ratio_pauses,
            control_stats.failures,
            control_stats.total
        ),
    });
    let with = rss_runs.last().expect("two runs");
    let brief_kb = with
        .readings
        .iter()
        .find(|r| r.step == RSS_BRIEF_LAST_STEP)
        .map_or(0, |r| r.memory.hwm_kb);
    let last = with.readings.last().map(|r| r.memory).unwrap_or_default();
    let peak = with
        .readings
        .iter()
        .map(|r| r.memory.hwm_kb)
        .max()
        .unwrap_or(0);
    let base_peak = rss_runs[0]
        .readings
        .iter()
        .map(|r| r.memory.hwm_kb)
        .max()
        .unwrap_or(0);
    let limit = (RSS_TARGET_MIB * 1024.0) as u64;
    report.targets.push(Target {
        goal: format!("daemon RSS under {RSS_TARGET_MIB} MiB at {RSS_DOMAINS} domains, {RSS_BLOCKS} blocks and {largest} certificates"),
        met: Some(brief_kb < limit && last.rss_kb < limit),
        detail: format!(
            "peak (VmHWM) {} MiB after start, GET /v1/domains, a PUT, a block; {} MiB over every step (0 certificates: {} MiB); VmRSS at the end {} MiB",
            mib(brief_kb),
            mib(peak),
            mib(base_peak),
            mib(last.rss_kb)
        ),
    });

    report.notes = vec![
        format!(
            "edge A: `hapctl init`, `[edge] https_bind` on a free 127.0.0.1 port, {DOMAINS} fixture domains, `hapctl haproxy start`; \
             certificates from the kit's test CA (rcgen, ECDSA P-256), bundle = leaf + intermediate + key, names site-N.bench.test. \
             Each size is reached by importing one certificate after the other through the CLI: HAProxy running for steps of up to {RUNNING_BULK_MAX}, \
             else stopped (files only) and started afterwards."
        ),
        format!(
            "install → served: {INSTALLS} per size, alternately a new name (site-SIZE+k, removed again with `cert rm` after the measurement, so the size holds) \
             and a new serial for an installed name. Clock from spawn; a TLS handshake with the name as SNI every {} ms on a new connection \
             (hapctl::tls::probe::handshake, rustls, nothing resumed) until the leaf's serial is the new one. duration_ms is hapctl's own \
             time from the JSON report; cmd exit − duration_ms is process start, settings, database open and exit.",
            PROBE_EVERY.as_millis()
        ),
        "reloads: the master's reload count from `show proc` on run/master.sock before and after each command; checks: `haproxy -c` runs \
         seen by the counting wrapper (and `checks` of the report)."
            .into(),
        format!(
            "HAProxy masters of edge A (PID: reload count at its start → at its end): {}.",
            stretches
                .iter()
                .map(|s| format!("{} ({}): {} → {}", s.pid, s.what, s.reloads_from, s.reloads_to))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    ];
    json_out.insert("sizes".into(), Value::Array(json_sizes));
    json_out.insert("check_by_size".into(), Value::Array(scale_json));
    json_out.insert("renewals".into(), renew.to_json());
    json_out.insert("renewals_runtime_api_only".into(), control.to_json());
    json_out.insert("renewals_by_daemon".into(), by_daemon.to_json());
    json_out.insert("renewals_by_daemon_open_loop".into(), open_loop.to_json());
    json_out.insert("startup".into(), startup.to_json());
    json_out.insert(
        "rss".into(),
        Value::Array(rss_runs.iter().map(RssRun::to_json).collect()),
    );
    json_out.insert(
        "master".into(),
        Value::Array(
            stretches
                .iter()
                .map(|s| json!({"pid": s.pid, "what": s.what, "reloads_from": s.reloads_from, "reloads_to": s.reloads_to, "same_pid": s.same_pid}))
                .collect(),
        ),
    );
    report.json = Value::Object(json_out);
    Ok(report)
}
