//! protect: the edge protections of issue 10, measured from outside on one edge with
//! `hapctl serve` running (it also receives the access log, as in production).
//!
//! 1. Requests/s through the edge with the standard protections ON and OFF, alternated in
//!    rounds (ON first in even rounds, OFF first in odd ones) so machine noise hits both
//!    alike; medians and their ratio, with the HAProxy worker's CPU per request. ON: the
//!    `standard` preset as the default policy (thresholds of the three rate rules raised so
//!    nothing trips), the `wordpress` profile on the domain, and every client's real IP in
//!    CF-Connecting-IP / X-Forwarded-For from a trusted proxy (127.0.0.0/8). OFF: the `off`
//!    preset, no profile, no forwarding headers (so the client is 127.0.0.1, which the
//!    default local exemption lets skip every rule). Both switches are runtime map changes.
//! 2. Threshold change → enforced: `PUT /v1/limits` lowering `req_rate` under a tracked
//!    client's rate (and raising it again), timed to that client's next 429 (200).
//! 3. `hapctl security top --limit 20` and `GET /v1/security/stats` on a 200,000-entry
//!    client table filled through the runtime API.

mod enforce;
mod table;

use std::time::{Duration, Instant};

use anyhow::bail;
use hapctl::model::ProxyNet;
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};
use testkit::Backend;
use testkit::Edge;

use crate::api::Api;
use crate::fixture::{self, Servers};
use crate::harness::{new_edge, BenchEdge};
use crate::memory::{mib, DaemonProcess, Memory};
use crate::stats::{ms, Summary};
use crate::traffic::{self, Round, Watched};
use crate::{Ctx, Report, Table, Target};

const BODY: &str = "hapctl-bench backend\n";
const TARGET_RATIO: f64 = 0.9;
const TARGET_P50_MS: f64 = 5.0;
/// Load: kept-alive clients, rounds per mode, and each round's warm-up and window.
const CLIENTS: usize = 16;
const ROUNDS: usize = 5;
const WARMUP: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_secs(5);
/// A blog post's path: the wordpress rules look at every request's path.
const PATH: &str = "/2026/12/01/hello-world/";
const CHANGES: usize = 50;
const TABLE_ENTRIES: usize = 200_000;
/// `security top` / stats runs (each after a refill, so the rates have not decayed).
const TOP_RUNS: usize = 5;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    On,
    Off,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::On => "ON",
            Mode::Off => "OFF",
        }
    }
}

/// The edge and its daemon; the daemon is dropped first, then HAProxy, then the backend.
struct Setup {
    api: Api,
    daemon: Daemon,
    edge: Edge,
    _backend: Backend,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let backend = Backend::keep_alive(BODY)?;
    let edge = new_edge(&hapctl)?;
    let mut state = fixture::state(10, Servers::At(&backend.addr()));
    state
        .trusted_proxies
        .insert("127.0.0.0/8".parse::<ProxyNet>()?);
    edge.load(&state)?;
    edge.start()?;
    let daemon = Daemon::try_start(&edge, &Serve::within(Duration::from_secs(60)))?;
    let s = Setup {
        api: Api::of(&daemon),
        daemon,
        edge,
        _backend: backend,
    };
    let host = fixture::domain(0).to_string();
    let mut report = Report::default();

    eprintln!(
        "protect: {ROUNDS} x 2 rounds of {MEASURE:?}, {CLIENTS} clients, ON/OFF alternating…"
    );
    let (rounds, switches) = load_rounds(&s, &host)?;
    load_report(&mut report, &rounds, &switches);

    eprintln!("protect: {CHANGES} threshold changes timed to enforced…");
    let series = enforce::series(&s.edge, &s.api, &host, CHANGES)?;
    enforce_report(&mut report, &series);

    eprintln!("protect: filling the client table with {TABLE_ENTRIES} entries…");
    let top = top_runs(&s)?;
    top_report(&mut report, &top);

    report.json = json!({
        "clients": CLIENTS,
        "rounds": rounds.iter().map(|(m, r)| json!({
            "mode": m.name(), "req_per_s": r.per_s(), "ok": r.ok, "not_ok": r.not_ok,
            "haproxy_cpu_s": r.haproxy_cpu, "daemon_cpu_s": r.daemon_cpu,
            "bench_cpu_s": r.bench_cpu,
        })).collect::<Vec<_>>(),
        "switch_reloads": switches.reloads,
        "threshold_changes": series.to_json(),
        "security_top": top.to_json(),
    });
    Ok(report)
}

/// What switching between ON and OFF cost in reloads (must be 0).
struct Switches {
    count: usize,
    reloads: i64,
}

fn headers(mode: Mode) -> Vec<String> {
    (0..CLIENTS)
        .map(|k| match mode {
            Mode::On => format!(
                "CF-Connecting-IP: 198.51.100.{ip}\r\nX-Forwarded-For: 198.51.100.{ip}\r\n",
                ip = k + 1
            ),
            Mode::Off => String::new(),
        })
        .collect()
}

/// Puts the edge in `mode` through the API and checks it took: the wp-admin gate answers
/// 302 only when the profile is on.
fn switch(s: &Setup, host: &str, mode: Mode) -> anyhow::Result<()> {
    let (limits, profiles) = match mode {
        Mode::On => (
            json!({"preset": "standard", "rules": {
                "req_rate": "1000000:deny", "req_rate_soft": "999999:tarpit",
                "conn_rate": "1000000:deny"}}),
            json!({"profiles": ["wordpress"]}),
        ),
        Mode::Off => (json!({"preset": "off"}), json!({"profiles": []})),
    };
    let api = &s.api;
    for (path, body) in [
        ("/v1/limits".to_string(), limits),
        (format!("/v1/domains/{host}/profiles"), profiles),
    ] {
        let a = api.call("PUT", &path, Some(&body))?;
        if a.status != 200 {
            bail!("PUT {path}: {}", a.describe());
        }
    }
    // From a client that is not local (local ones are exempt from the profile's rules too).
    let real_ip = "X-Forwarded-For: 198.51.100.200\r\n";
    let gate = traffic::Client::connect(s.edge.port, host, "/wp-admin/", real_ip)?.get()?;
    let want = if mode == Mode::On { 302 } else { 200 };
    if gate != want {
        bail!(
            "{}: GET /wp-admin/ answered {gate}, not {want}",
            mode.name()
        );
    }
    Ok(())
}

fn load_rounds(s: &Setup, host: &str) -> anyhow::Result<(Vec<(Mode, Round)>, Switches)> {
    let watched = Watched {
        haproxy: s
            .edge
            .try_show_proc()?
            .workers
            .iter()
            .map(|w| w.pid)
            .collect(),
        daemon: s.daemon.running_pid().unwrap_or(0),
    };
    let reloads0 = s.edge.try_show_proc()?.master.reloads;
    let mut rounds = Vec::new();
    for r in 0..ROUNDS {
        let order = if r.is_multiple_of(2) {
            [Mode::On, Mode::Off]
        } else {
            [Mode::Off, Mode::On]
        };
        for mode in order {
            switch(s, host, mode)?;
            let one = traffic::round(
                s.edge.port,
                host,
                PATH,
                &headers(mode),
                WARMUP,
                MEASURE,
                &watched,
            )?;
            eprintln!(
                "  round {} {}: {:.0} req/s, {} not 200, HAProxy {:.2} cores",
                r + 1,
                mode.name(),
                one.per_s(),
                one.not_ok,
                one.haproxy_cpu / one.secs
            );
            if mode == Mode::On {
                check_tracked(s)?;
            }
            rounds.push((mode, one));
        }
    }
    let switches = Switches {
        count: rounds.len(),
        reloads: s.edge.try_show_proc()?.master.reloads as i64 - reloads0 as i64,
    };
    Ok((rounds, switches))
}

/// The ON clients are tracked by their real IPs (the header), not by 127.0.0.1.
fn check_tracked(s: &Setup) -> anyhow::Result<()> {
    let a = s.api.call("GET", "/v1/security/stats?limit=100", None)?;
    let text = a.text();
    if a.status != 200 || !text.contains("\"198.51.100.1\"") {
        bail!(
            "after an ON round the table does not list 198.51.100.1: {}",
            a.describe()
        );
    }
    Ok(())
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    Summary::of(&v.collect::<Vec<_>>()).map_or(f64::NAN, |s| s.median)
}

fn load_report(report: &mut Report, rounds: &[(Mode, Round)], switches: &Switches) {
    let mut t = Table::new(
        format!(
            "Requests/s through the edge, {CLIENTS} kept-alive clients, {ROUNDS} rounds of {} s per mode, alternating (medians)",
            MEASURE.as_secs()
        ),
        &[
            "protections",
            "rounds",
            "req/s",
            "min",
            "max",
            "not 200",
            "HAProxy cores",
            "HAProxy µs/req",
            "daemon cores",
            "bench cores",
        ],
    );
    let mut medians = Vec::new();
    for mode in [Mode::On, Mode::Off] {
        let of = || {
            rounds
                .iter()
                .filter(move |(m, _)| *m == mode)
                .map(|(_, r)| r)
        };
        let rate = Summary::of(&of().map(Round::per_s).collect::<Vec<_>>());
        let Some(rate) = rate else { continue };
        let us = median(of().map(Round::haproxy_us_per_req));
        medians.push((rate.median, us));
        t.row(vec![
            mode.name().into(),
            rate.n.to_string(),
            format!("{:.0}", rate.median),
            format!("{:.0}", rate.min),
            format!("{:.0}", rate.max),
            of().map(|r| r.not_ok).sum::<u64>().to_string(),
            format!("{:.2}", median(of().map(|r| r.haproxy_cpu / r.secs))),
            format!("{us:.1}"),
            format!("{:.2}", median(of().map(|r| r.daemon_cpu / r.secs))),
            format!("{:.2}", median(of().map(|r| r.bench_cpu / r.secs))),
        ]);
    }
    let pairs = pair_ratios(rounds);
    if let [(on, on_us), (off, off_us)] = medians[..] {
        let ratio = on / off;
        let not_ok: u64 = rounds.iter().map(|(_, r)| r.not_ok).sum();
        report.targets.push(Target {
            goal: format!("req/s with the standard protections ON ≥ {TARGET_RATIO} × OFF"),
            met: Some(ratio >= TARGET_RATIO && not_ok == 0),
            detail: format!(
                "ratio of medians {ratio:.3} ({on:.0} / {off:.0} req/s); per round pair {}; HAProxy CPU per request {on_us:.1} vs {off_us:.1} µs ({:.2}×); {not_ok} answers not 200; {} switches, {} reloads",
                pairs.iter().map(|p| format!("{p:.3}")).collect::<Vec<_>>().join(", "),
                on_us / off_us,
                switches.count,
                switches.reloads
            ),
        });
    }
    report.tables.push(t);
    report.tables.push(per_round_table(rounds));
}

/// Each round in the order run.
fn per_round_table(rounds: &[(Mode, Round)]) -> Table {
    let mut per = Table::new(
        "Each round (in the order run)",
        &[
            "round",
            "protections",
            "req/s",
            "HAProxy cores",
            "HAProxy µs/req",
        ],
    );
    for (i, (mode, r)) in rounds.iter().enumerate() {
        per.row(vec![
            (i / 2 + 1).to_string(),
            mode.name().into(),
            format!("{:.0}", r.per_s()),
            format!("{:.2}", r.haproxy_cpu / r.secs),
            format!("{:.1}", r.haproxy_us_per_req()),
        ]);
    }
    per
}

/// req/s ON / OFF of each pair of rounds (NaN where a pair lacks one).
fn pair_ratios(rounds: &[(Mode, Round)]) -> Vec<f64> {
    rounds
        .chunks(2)
        .map(|p| {
            let on = p
                .iter()
                .find(|(m, _)| *m == Mode::On)
                .map(|(_, r)| r.per_s());
            let off = p
                .iter()
                .find(|(m, _)| *m == Mode::Off)
                .map(|(_, r)| r.per_s());
            on.zip(off).map_or(f64::NAN, |(a, b)| a / b)
        })
        .collect()
}

fn enforce_report(report: &mut Report, series: &enforce::Series) {
    let mut t = Table::new(
        "PUT /v1/limits (default req_rate) sent → first answer with the new verdict to a client probing back to back (ms)",
        &[
            "change",
            "n",
            "p50",
            "p95",
            "max",
            "API answer p50",
            "apply p50",
            "probes p50",
            "reloads (answers)",
        ],
    );
    for (lower, label) in [
        (true, "lower under the client (→ 429)"),
        (false, "raise again (→ 200)"),
    ] {
        let Some((enf, api, apply)) = series.of(lower) else {
            continue;
        };
        let of: Vec<_> = series.changes.iter().filter(|c| c.lower == lower).collect();
        t.row(vec![
            label.into(),
            enf.n.to_string(),
            ms(enf.median),
            ms(enf.p95),
            ms(enf.max),
            ms(api.median),
            ms(apply.median),
            format!("{:.0}", median(of.iter().map(|c| f64::from(c.probes)))),
            of.iter().map(|c| c.reloads).sum::<u64>().to_string(),
        ]);
    }
    if let Some((enf, _, _)) = series.of(true) {
        let answer_reloads: u64 = series.changes.iter().map(|c| c.reloads + c.checks).sum();
        report.targets.push(Target {
            goal: format!("threshold change → enforced p50 < {TARGET_P50_MS} ms with 0 reloads"),
            met: Some(
                enf.median < TARGET_P50_MS
                    && series.master_reloads == 0
                    && series.checks == 0
                    && answer_reloads == 0,
            ),
            detail: format!(
                "p50 {} ms, p95 {}, max {} (n {}); master reloads {}, haproxy -c runs {}, reloads + checks in the answers {answer_reloads}",
                ms(enf.median),
                ms(enf.p95),
                ms(enf.max),
                enf.n,
                series.master_reloads,
                series.checks
            ),
        });
    }
    report.tables.push(t);
}

/// The 200k-table measurements.
struct Top {
    fill_s: f64,
    refill_s: Vec<f64>,
    cli_ms: Vec<f64>,
    api_ms: Vec<f64>,
    api_bytes: usize,
    used: u64,
    returned: u64,
    pieces: table::Pieces,
    rss: Vec<(&'static str, Memory)>,
}

impl Top {
    fn to_json(&self) -> Value {
        json!({
            "entries": TABLE_ENTRIES, "fill_s": self.fill_s, "refill_s": self.refill_s,
            "cli_ms": self.cli_ms, "api_ms": self.api_ms, "api_bytes": self.api_bytes,
            "table_used": self.used, "returned": self.returned,
            "show_table_ms": self.pieces.dump_ms, "show_table_bytes": self.pieces.dump_bytes,
            "parse_ms": self.pieces.parse_ms, "in_process_top_ms": self.pieces.top_ms,
            "daemon_memory": self.rss.iter().map(|(k, m)| json!({"step": k, "memory": m.to_json()})).collect::<Vec<_>>(),
        })
    }
}

fn top_runs(s: &Setup) -> anyhow::Result<Top> {
    let admin = &s.edge.settings()?.paths.admin_socket.clone();
    let mut rss = vec![("before the fill", s.daemon.memory()?)];
    let fill_s = table::fill(admin, TABLE_ENTRIES)?;
    rss.push(("after the fill", s.daemon.memory()?));
    let mut refill_s = Vec::new();
    let (mut cli_ms, mut api_ms) = (Vec::new(), Vec::new());
    let (mut used, mut returned, mut api_bytes) = (0, 0, 0);
    for k in 0..TOP_RUNS {
        if k > 0 {
            refill_s.push(table::fill(admin, TABLE_ENTRIES)?);
        }
        let t = Instant::now();
        s.edge.try_ok(&["security", "top", "--limit", "20"])?;
        cli_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        let a = s.api.call("GET", "/v1/security/stats?limit=20", None)?;
        api_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if a.status != 200 {
            bail!("GET /v1/security/stats: {}", a.describe());
        }
        let j = a.json();
        used = j["total_tracked_ips"].as_u64().unwrap_or(0);
        returned = j["returned"].as_u64().unwrap_or(0);
        api_bytes = a.body.len();
        if used < TABLE_ENTRIES as u64 || returned != 20 {
            bail!("GET /v1/security/stats: {used} tracked and {returned} returned, not ≥ {TABLE_ENTRIES} and 20");
        }
    }
    rss.push(("after the stats calls", s.daemon.memory()?));
    let out = s
        .edge
        .try_ok(&["security", "top", "--limit", "20", "--json"])?;
    let j: Value = serde_json::from_slice(&out.stdout)?;
    if j["returned"].as_u64() != Some(20) {
        bail!(
            "hapctl security top --json: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(Top {
        fill_s,
        refill_s,
        cli_ms,
        api_ms,
        api_bytes,
        used,
        returned,
        pieces: table::pieces(&s.edge.settings()?)?,
        rss,
    })
}

fn top_report(report: &mut Report, top: &Top) {
    let cli = Summary::of(&top.cli_ms);
    let api = Summary::of(&top.api_ms);
    let mut t = Table::new(
        format!(
            "Client table with {} entries (ms; {TOP_RUNS} runs, each after a refill)",
            top.used
        ),
        &["what", "p50", "min", "max"],
    );
    let mut row = |what: String, s: Option<Summary>| {
        if let Some(s) = s {
            t.row(vec![what, ms(s.median), ms(s.min), ms(s.max)]);
        }
    };
    row(
        "`hapctl security top --limit 20` (spawn → exit)".into(),
        cli,
    );
    row(
        format!(
            "GET /v1/security/stats?limit=20 ({} B answer)",
            top.api_bytes
        ),
        api,
    );
    row(
        format!("fill through the runtime API, {TABLE_ENTRIES} new entries"),
        Summary::of(&[top.fill_s * 1000.0]),
    );
    row(
        "refill (the same keys again)".into(),
        Summary::of(&top.refill_s.iter().map(|s| s * 1000.0).collect::<Vec<_>>()),
    );
    let p = &top.pieces;
    row(
        format!(
            "in-process: `show table` over the admin socket ({} MiB)",
            mib(p.dump_bytes as u64 / 1024)
        ),
        Summary::of(&[p.dump_ms]),
    );
    row(
        format!("in-process: parse of that dump ({} rows)", p.rows),
        Summary::of(&[p.parse_ms]),
    );
    row(
        "in-process: `Stats::top(20, 1)` (dump + parse + sort)".into(),
        Summary::of(&[p.top_ms]),
    );
    let mut mem = Table::new(
        "Daemon memory (MiB, /proc/PID/status)",
        &["step", "VmRSS", "VmHWM"],
    );
    for (step, m) in &top.rss {
        mem.row(vec![step.to_string(), mib(m.rss_kb), mib(m.hwm_kb)]);
    }
    report.notes.push(format!(
        "security top: {} tracked, {} returned; the fill is one admin-socket connection in prompt mode, {} `set table` commands pipelined",
        top.used, top.returned, TABLE_ENTRIES
    ));
    report.tables.push(t);
    report.tables.push(mem);
}
