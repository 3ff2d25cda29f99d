//! certs: the section's tables, targets, notes and JSON, from what `run` measured.

use serde_json::{json, Value};

use crate::fixture;
use crate::memory::mib;
use crate::stats::ms;
use crate::{Report, Table, Target};

use super::install::{bulk_row, modes, Bulk, Install, Pick};
use super::renewals::RenewStats;
use super::rss::RssRun;
use super::{
    pct, Measured, SizeSteps, DOMAINS, INSTALLS, MEDIAN_SHARE, MIN_BUCKET_SHARE, PROBE_EVERY,
    RENEWALS, RSS_BLOCKS, RSS_BRIEF_LAST_STEP, RSS_DOMAINS, RSS_TARGET_MIB, RUNNING_BULK_MAX,
    TARGET_P50_MS,
};

pub(super) fn report(m: &Measured) -> Report {
    let (latency, p50_by_size) = latency_table(&m.sized);
    let mut tables = vec![
        bulk_table(&m.sized, &m.rss_runs),
        latency,
        removals_table(&m.sized),
        checks_table(&m.sized),
        m.startup.table(m.largest),
    ];
    let r = &m.renewed;
    let mut stats = Vec::new();
    for renewals in [
        &r.by_cli,
        &r.runtime_api,
        &r.by_daemon,
        &r.by_daemon_open_loop,
    ] {
        let (renew_tables, renew_stats) = renewals.tables();
        tables.extend(renew_tables);
        stats.push(renew_stats);
    }
    tables.push(rss_table(&m.rss_runs));
    tables.push(put_table(&m.rss_runs));
    let mut targets = install_targets(m, &p50_by_size);
    targets.extend(renewal_targets(m, &stats));
    targets.push(rss_target(m));
    Report {
        tables,
        targets,
        notes: notes(&m.sized),
        json: to_json(m),
    }
}

fn bulk_table(sized: &SizeSteps, rss_runs: &[RssRun]) -> Table {
    let mut table = Table::new(
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
    for s in &sized.steps {
        bulk_row(&mut table, &s.bulk_label, &s.bulk);
    }
    for r in rss_runs {
        if let Some(b) = &r.bulk {
            bulk_row(
                &mut table,
                "10,000 domains, HAProxy stopped (files only)",
                b,
            );
        }
    }
    table
}

/// The install → served table, and per size the p50 over all installs and their number.
fn latency_table(sized: &SizeSteps) -> (Table, Vec<(usize, f64, usize)>) {
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
    let mut p50_by_size = Vec::new();
    let kinds: [(&str, Pick); 3] = [
        ("new name", |o| o.new),
        ("replacement", |o| !o.new),
        ("all", |_| true),
    ];
    for s in &sized.steps {
        for (label, pick) in &kinds {
            let chosen: Vec<&Install> = s.ops.iter().filter(|o| pick(o)).collect();
            let served: Vec<f64> = chosen.iter().filter_map(|o| o.served_ms).collect();
            latency.row(latency_row(s.size, label, &chosen, &served));
            if *label == "all" {
                p50_by_size.push((s.size, pct(&served, 50.0), served.len()));
            }
        }
    }
    (latency, p50_by_size)
}

fn latency_row(size: usize, label: &str, chosen: &[&Install], served: &[f64]) -> Vec<String> {
    let exit: Vec<f64> = chosen.iter().map(|o| o.exit_ms).collect();
    let own: Vec<f64> = chosen.iter().map(|o| o.duration_ms).collect();
    vec![
        size.to_string(),
        label.to_string(),
        served.len().to_string(),
        ms(pct(served, 50.0)),
        ms(pct(served, 90.0)),
        ms(pct(served, 100.0)),
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
    ]
}

fn removals_table(sized: &SizeSteps) -> Table {
    let mut table = Table::new(
        "certs: `hapctl cert rm` of the certificate just added (untimed for the latency above), ms",
        &[
            "certificates installed",
            "n",
            "cmd exit p50",
            "duration_ms p50",
            "max",
        ],
    );
    for s in &sized.steps {
        let rm_exit: Vec<f64> = s.removals.iter().map(|r| r.1).collect();
        let rm_own: Vec<f64> = s.removals.iter().map(|r| r.0).collect();
        table.row(vec![
            s.size.to_string(),
            s.removals.len().to_string(),
            ms(pct(&rm_exit, 50.0)),
            ms(pct(&rm_own, 50.0)),
            ms(pct(&rm_exit, 100.0)),
        ]);
    }
    table
}

fn checks_table(sized: &SizeSteps) -> Table {
    let mut table = Table::new(
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
    for c in &sized.checks {
        table.row(vec![
            c.certificates.to_string(),
            ms(pct(&c.runs, 50.0)),
            ms(pct(&c.runs, 0.0)),
            ms(pct(&c.runs, 100.0)),
            format!("{:.1}", c.certs_dir_bytes as f64 / 1024.0),
            format!("{:.1}", c.crt_list_bytes as f64 / 1024.0),
        ]);
    }
    table
}

fn rss_table(rss_runs: &[RssRun]) -> Table {
    let mut table = Table::new(
        format!("certs: `hapctl serve` memory at {RSS_DOMAINS} domains and {} blocked entries (MiB, /proc/PID/status)", RSS_BLOCKS + fixture::BLOCKS),
        &["certificates", "step", "request ms", "VmRSS", "VmHWM (peak)", "RssAnon", "threads"],
    );
    for r in rss_runs {
        for s in &r.readings {
            table.row(vec![
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
    table
}

fn put_table(rss_runs: &[RssRun]) -> Table {
    let mut table = Table::new(
        format!("certs: the daemon's `PUT /v1/domains/rss-new.example.com` at {RSS_DOMAINS} domains (the apply's steps from the answer), ms"),
        &["certificates", "request", "apply", "render", "snapshot", "write", "check", "reload"],
    );
    for r in rss_runs {
        let step = |name: &str| {
            r.put
                .2
                .iter()
                .find(|(n, _)| n == name)
                .map_or("-".to_string(), |(_, d)| ms(*d))
        };
        table.row(vec![
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
    table
}

/// Every install measured in step 1.
fn measured_installs(sized: &SizeSteps) -> impl Iterator<Item = &Install> {
    sized.steps.iter().flat_map(|s| s.ops.iter())
}

/// The install → served p50 per size, and no reload over everything done on edge A.
fn install_targets(m: &Measured, p50_by_size: &[(usize, f64, usize)]) -> Vec<Target> {
    let mut targets: Vec<Target> = p50_by_size
        .iter()
        .map(|(size, p50, n)| Target {
            goal: format!("install → served p50 under {TARGET_P50_MS} ms with {size} certificates"),
            met: Some(*p50 < TARGET_P50_MS && *n == INSTALLS),
            detail: format!(
                "p50 {} ms over {n} installs (CLI process start included)",
                ms(*p50)
            ),
        })
        .collect();
    let (sized, r) = (&m.sized, &m.renewed);
    let stretches = &sized.stretches;
    let reload_delta: i64 = stretches
        .iter()
        .map(|s| s.reloads_to as i64 - s.reloads_from as i64)
        .sum();
    let masters_kept = stretches.iter().all(|s| s.same_pid);
    let op_reloads: i64 = sized
        .steps
        .iter()
        .flat_map(|s| s.bulk.ops.iter())
        .chain(measured_installs(sized))
        .chain(r.by_cli.ops.iter())
        .chain(r.runtime_api.ops.iter())
        .chain(r.by_daemon.ops.iter())
        .chain(r.by_daemon_open_loop.ops.iter())
        .map(|o| o.reloads)
        .sum();
    let renewed = || r.by_cli.ops.iter().chain(r.by_daemon.ops.iter());
    let runtime_all = measured_installs(sized).all(|o| o.installed == "runtime")
        && renewed().all(|o| o.installed == "runtime");
    let checks_seen: usize = measured_installs(sized).map(|o| o.checks).sum::<usize>()
        + renewed().map(|o| o.checks).sum::<usize>();
    targets.push(Target {
        goal: "0 reloads (master `show proc`) over every install, bulk, replacement, removal and renewal on the running edge".into(),
        met: Some(reload_delta == 0 && op_reloads == 0 && masters_kept),
        detail: format!(
            "master reload count {} (each master from its start to the next stop: {}); per command {op_reloads:+} in total; master PID {} within each; `haproxy -c` runs seen in the measured installs and renewals: {checks_seen}; every one installed through the runtime API: {runtime_all}",
            format_args!("{reload_delta:+}"),
            stretches.iter().map(|s| format!("{} {} → {}", s.what, s.reloads_from, s.reloads_to)).collect::<Vec<_>>().join(", "),
            if masters_kept { "unchanged" } else { "CHANGED" }
        ),
    });
    targets
}

/// `stats`: of the renewals by the CLI, the runtime API, the daemon, the daemon under an open
/// loop, in that order.
fn renewal_targets(m: &Measured, stats: &[RenewStats]) -> Vec<Target> {
    let [renew_stats, control_stats, daemon_stats, open_stats] = stats else {
        unreachable!("four renewal runs");
    };
    vec![
        Target {
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
        },
        renew_stats.no_dip(format!(
            "no dip in handshakes/s during renewals by `cert import`, closed-loop load (read here as: median 100 ms bucket ≥ {:.0} % and smallest ≥ {:.0} % of the median before)",
            MEDIAN_SHARE * 100.0,
            MIN_BUCKET_SHARE * 100.0
        )),
        daemon_stats.no_dip(
            "the same no-dip reading, renewals made by the daemon (`PUT /v1/certificates` to `hapctl serve`, its renewer's install path)".into(),
        ),
        open_stats.no_dip(format!(
            "no dip with the daemon's renewals under an open-loop load of {} handshakes/s (the edge keeps serving its load)",
            m.handshake_rate
        )),
        Target {
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
        },
    ]
}

fn rss_target(m: &Measured) -> Target {
    let peak_of = |r: &RssRun| {
        r.readings
            .iter()
            .map(|r| r.memory.hwm_kb)
            .max()
            .unwrap_or(0)
    };
    let with = m.rss_runs.last().expect("two runs");
    let brief_kb = with
        .readings
        .iter()
        .find(|r| r.step == RSS_BRIEF_LAST_STEP)
        .map_or(0, |r| r.memory.hwm_kb);
    let last = with.readings.last().map(|r| r.memory).unwrap_or_default();
    let limit = (RSS_TARGET_MIB * 1024.0) as u64;
    Target {
        goal: format!("daemon RSS under {RSS_TARGET_MIB} MiB at {RSS_DOMAINS} domains, {RSS_BLOCKS} blocks and {} certificates", m.largest),
        met: Some(brief_kb < limit && last.rss_kb < limit),
        detail: format!(
            "peak (VmHWM) {} MiB after start, GET /v1/domains, a PUT, a block; {} MiB over every step (0 certificates: {} MiB); VmRSS at the end {} MiB",
            mib(brief_kb),
            mib(peak_of(with)),
            mib(peak_of(&m.rss_runs[0])),
            mib(last.rss_kb)
        ),
    }
}

fn notes(sized: &SizeSteps) -> Vec<String> {
    vec![
        format!(
            "edge A: `hapctl init`, `[edge] https_bind` on a free 127.0.0.1 port, {DOMAINS} fixture domains, `hapctl haproxy start`; \
             certificates from a test CA made by the bench (rcgen, ECDSA P-256), bundle = leaf + CA + key, names site-N.bench.test. \
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
            sized
                .stretches
                .iter()
                .map(|s| format!("{} ({}): {} → {}", s.pid, s.what, s.reloads_from, s.reloads_to))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    ]
}

fn to_json(m: &Measured) -> Value {
    let (sized, r) = (&m.sized, &m.renewed);
    json!({
        "sizes": sized.steps.iter().map(|s| json!({
            "certificates": s.size,
            "bulk": Bulk::to_json(&s.bulk),
            "installs": s.ops.iter().map(Install::to_json).collect::<Vec<_>>(),
            "removals": s.removals.iter().map(|(d, e)| json!({"duration_ms": d, "exit_ms": e})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "check_by_size": sized.checks.iter().map(|c| json!({"certificates": c.certificates, "check_ms": c.runs})).collect::<Vec<_>>(),
        "renewals": r.by_cli.to_json(),
        "renewals_runtime_api_only": r.runtime_api.to_json(),
        "renewals_by_daemon": r.by_daemon.to_json(),
        "renewals_by_daemon_open_loop": r.by_daemon_open_loop.to_json(),
        "startup": m.startup.to_json(),
        "rss": m.rss_runs.iter().map(RssRun::to_json).collect::<Vec<_>>(),
        "master": sized.stretches.iter().map(|s| json!({"pid": s.pid, "what": s.what, "reloads_from": s.reloads_from, "reloads_to": s.reloads_to, "same_pid": s.same_pid})).collect::<Vec<_>>(),
    })
}
