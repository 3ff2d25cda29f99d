//! fleet-wide: the targets of the fleet-wide work (issue 34) on the kit's fleet lab with the
//! release hapctl: 3 etcd members, 3 edges sharing a fleet key, their client tables shared
//! through `peers`, each running the demo app. In that order:
//! - certificates ordered once for the fleet: orders on e1, the CA (Pebble) validating on e0;
//!   orders at the CA, time from the order's answer until all 3 serve it, reloads;
//! - a client over a limit on e0 → over it on e1 and e2: until their tables (runtime API)
//!   hold its rate above the limit, then one request there confirms the 429;
//! - a delivery and a rollback edge by edge (`--fleet`) under a probe spread over the 3 edges
//!   and a stream held on each.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::haproxy::CliSocket;
use hapctl::protect::table;
use serde_json::json;
use testkit::fleet::{AcmeFleet, FleetLab, SpreadProbe};
use testkit::pebble::Pebble;
use testkit::{try_http_get, DemoApp, Edge, GenerationsGuard, Stream};

use crate::harness::edge_setup;
use crate::stats::{ms, percentile};
use crate::{Ctx, Report, Table, Target};

const HOST: &str = "shop.test";
const CERTS: usize = 5;
const CLIENTS: usize = 50;
/// The limit the denial series drives clients over (requests per window).
const LIMIT: u64 = 5;
const PROBE_RATE: u32 = 200;
/// Lines of each held stream, one every 50 ms.
const STREAM_LINES: u32 = 600;
/// Bound on one wait (a certificate served everywhere, a rate seen everywhere).
const BOUND: Duration = Duration::from_secs(10);
const SERVED_TARGET_MS: f64 = 2000.0;
const DENIED_TARGET_MS: f64 = 1000.0;

/// Fields drop in order: the generations are stopped while the edges' folders (their
/// pidfiles) still exist.
struct Lab {
    _generations: GenerationsGuard,
    lab: FleetLab,
    pebble: Pebble,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let lab = start(ctx)?;
    eprintln!("fleet-wide: {CERTS} certificates ordered on e1…");
    let certs = certificates(&lab)?;
    eprintln!("fleet-wide: {CLIENTS} clients over the limit on e0…");
    let denied = denials(&lab.lab)?;
    // The probe and the streams come from loopback: exempt from here on.
    set_limits(&lab.lab, true)?;
    eprintln!("fleet-wide: a delivery and a rollback edge by edge under {PROBE_RATE} req/s…");
    let rolls = [
        rolling(&lab.lab, &["deliver", "2.0", "--fleet"])?,
        rolling(&lab.lab, &["rollback", "--fleet"])?,
    ];
    Ok(report(&certs, &denied, &rolls))
}

fn start(ctx: &Ctx) -> anyhow::Result<Lab> {
    let hapctl = ctx.hapctl_bin()?;
    let demo = ctx.demo_app_bin()?;
    let acme = AcmeFleet::default();
    let lab = FleetLab::try_start(&edge_setup(&hapctl), 3, 3, |i, edge| {
        let peer = format!("127.0.0.1:{}", FleetLab::peer_port());
        edge.write_settings(&format!("{}peer = \"{peer}\"\n", edge.settings_text()));
        acme.prepare(i, edge)?;
        let app = DemoApp {
            bin: demo.clone(),
            host: HOST,
            first: "1.0",
            readiness_timeout: "10s",
            ports: 30,
            never_ready: "*never*",
        };
        app.install(edge)
    })?;
    let dirs = lab.edges.iter().map(|(e, _)| e.state_dir().to_path_buf());
    let generations = GenerationsGuard(dirs.collect());
    lab.edge(0)
        .try_ok(&["domain", "add", HOST, "--app", "shop"])?;
    set_limits(&lab, false)?;
    for i in 0..3 {
        lab.edge(i).try_ok(&["deliver", "1.0"])?;
        lab.edge(i).try_wait_for_body(HOST, "1.0\n")?;
    }
    Ok(Lab {
        _generations: generations,
        lab,
        pebble: acme.into_pebble(),
    })
}

/// The limit the denial series drives clients over; loopback clients exempt or not.
fn set_limits(lab: &FleetLab, local_exempt: bool) -> anyhow::Result<()> {
    let rules = json!({ "req_rate": format!("{LIMIT}:deny") });
    let limits = json!({"preset": "custom", "rules": rules, "local_exempt": local_exempt});
    let r = lab.daemon(0).call("PUT", "/v1/limits", Some(&limits));
    if r.status != 200 {
        bail!("PUT /v1/limits: {r:?}");
    }
    Ok(())
}

/// One certificate order: how long it took, until all 3 served it after, orders at the CA,
/// reloads on the 3 edges.
struct Order {
    answer: Duration,
    served_after: Option<Duration>,
    issued: usize,
    reloads: u32,
}

fn certificates(lab: &Lab) -> anyhow::Result<Vec<Order>> {
    let mut out = Vec::new();
    for n in 0..CERTS {
        let name = format!("c{n}.test");
        let reloads_before = reloads(&lab.lab)?;
        let issued_before = lab.pebble.issued_count();
        let started = Instant::now();
        let answer = lab
            .lab
            .edge(1)
            .try_ok(&["cert", "request", &name, "--json"])?;
        let answer_at = Instant::now();
        let report: serde_json::Value = serde_json::from_slice(&answer.stdout)?;
        let serial = report["serial"].as_str().context("no serial")?.to_string();
        let served_after = served_everywhere(&lab.lab, &name, &serial, answer_at);
        out.push(Order {
            answer: answer_at - started,
            served_after,
            issued: lab.pebble.issued_count() - issued_before,
            reloads: reloads(&lab.lab)? - reloads_before,
        });
    }
    Ok(out)
}

fn served_everywhere(lab: &FleetLab, sni: &str, serial: &str, since: Instant) -> Option<Duration> {
    let serves = |edge: &Edge| {
        hapctl::tls::probe::handshake(edge.https_addr(), sni, Duration::from_secs(2))
            .ok()
            .and_then(|s| s.chain.first().cloned())
            .and_then(|leaf| hapctl::tls::x509::CertInfo::from_der(&leaf).ok())
            .is_some_and(|info| hapctl::tls::x509::serial_matches(&info.serial, serial))
    };
    let mut pending: Vec<usize> = (0..3).collect();
    while !pending.is_empty() && since.elapsed() < BOUND {
        pending.retain(|i| !serves(lab.edge(*i)));
        std::thread::sleep(Duration::from_millis(2));
    }
    pending.is_empty().then(|| since.elapsed())
}

fn reloads(lab: &FleetLab) -> anyhow::Result<u32> {
    let mut sum = 0;
    for (edge, _) in &lab.edges {
        sum += edge.try_show_proc()?.master.reloads;
    }
    Ok(sum)
}

/// Per client: from e0's 429 until e1's and e2's tables hold its rate over the limit.
fn denials(lab: &FleetLab) -> anyhow::Result<Vec<Option<Duration>>> {
    let mut out = Vec::new();
    for n in 0..CLIENTS {
        let client = Ipv4Addr::new(127, 42, (n / 250) as u8, (n % 250 + 1) as u8);
        let mut last = 0;
        for _ in 0..=LIMIT + 2 {
            last = try_http_get(Some(client), lab.edge(0).port, HOST, "/", &[])
                .map_err(anyhow::Error::msg)?
                .status;
        }
        if last != 429 {
            bail!("{client} over the limit on e0 got {last}, not 429");
        }
        let denied_at = Instant::now();
        let mut pending = vec![1, 2];
        while !pending.is_empty() && denied_at.elapsed() < BOUND {
            pending.retain(|i| !over_limit(lab.edge(*i), client).unwrap_or(false));
            std::thread::sleep(Duration::from_millis(2));
        }
        out.push(pending.is_empty().then(|| denied_at.elapsed()));
        for i in 1..3 {
            let status = try_http_get(Some(client), lab.edge(i).port, HOST, "/", &[])
                .map_err(anyhow::Error::msg)?
                .status;
            if status != 429 {
                bail!("{client}, over the limit through e0's table, got {status} on e{i}");
            }
        }
    }
    Ok(out)
}

/// Whether `edge`'s client table holds `client` over the limit (read through its runtime API).
fn over_limit(edge: &Edge, client: Ipv4Addr) -> anyhow::Result<bool> {
    let socket = CliSocket::new(edge.path("run/admin.sock"), Duration::from_secs(2));
    let key = table::table_key(client.into());
    let answer = socket.command(&format!(
        "show table {} key {key}",
        hapctl::protect::maps::TABLE
    ))?;
    let dump = table::parse(&answer)?;
    Ok(dump.rows.iter().any(|r| r.http_req_rate > LIMIT))
}

/// One fleet delivery (or rollback) under the spread probe and a stream per edge.
struct Roll {
    what: String,
    took: Duration,
    exit: Option<i32>,
    sent: usize,
    failed: usize,
    streams_intact: usize,
}

fn rolling(lab: &FleetLab, args: &[&str]) -> anyhow::Result<Roll> {
    let ports: Vec<u16> = lab.edges.iter().map(|(e, _)| e.port).collect();
    let probe = SpreadProbe::start(ports.clone(), HOST, PROBE_RATE);
    // Held through the whole delivery: 30 s of lines.
    let streams: Vec<Stream> = ports
        .iter()
        .map(|p| Stream::open(*p, HOST, STREAM_LINES, 50))
        .collect();
    let started = Instant::now();
    let out = lab.edge(0).try_run(args)?;
    let took = started.elapsed();
    let count = probe.stop();
    let streams_intact = streams
        .into_iter()
        .filter_map(|s| s.finish().ok())
        .filter(|lines| lines.len() == STREAM_LINES as usize)
        .count();
    Ok(Roll {
        what: args.join(" "),
        took,
        exit: out.status.code(),
        sent: count.sent,
        failed: count.failed.len(),
        streams_intact,
    })
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(certs: &[Order], denied: &[Option<Duration>], rolls: &[Roll]) -> Report {
    let mut r = Report::default();
    let mut t = Table::new(
        "a certificate ordered on e1 (the CA validating on e0) → served by all 3 edges (ms)",
        &[
            "order",
            "answer",
            "served by all 3 after",
            "issued at the CA",
            "reloads",
        ],
    );
    for (n, o) in certs.iter().enumerate() {
        t.rows.push(vec![
            format!("c{n}.test"),
            ms(millis(o.answer)),
            o.served_after
                .map_or("not within 10 s".into(), |d| ms(millis(d))),
            o.issued.to_string(),
            o.reloads.to_string(),
        ]);
    }
    r.tables.push(t);
    let worst = certs
        .iter()
        .map(|o| o.served_after.map(millis))
        .collect::<Option<Vec<_>>>();
    let once = certs.iter().all(|o| o.issued == 1 && o.reloads == 0);
    r.targets.push(Target {
        goal: "a certificate issued once for 3 edges, served by all 3 within 2 s, 0 reloads".into(),
        met: Some(once && worst.as_ref().is_some_and(|w| w.iter().all(|&v| v < SERVED_TARGET_MS))),
        detail: format!(
            "slowest {} ms after the order's answer (the order, issuance to this edge's install, took at most {} ms); {} issuance(s) and {} reload(s) over {CERTS} orders",
            worst.as_ref().and_then(|w| w.iter().copied().reduce(f64::max)).map_or("-".into(), ms),
            ms(certs.iter().map(|o| millis(o.answer)).fold(0.0, f64::max)),
            certs.iter().map(|o| o.issued).sum::<usize>(),
            certs.iter().map(|o| o.reloads).sum::<u32>()
        ),
    });
    let seen: Vec<f64> = denied.iter().flatten().map(|d| millis(*d)).collect();
    let mut sorted = seen.clone();
    sorted.sort_by(f64::total_cmp);
    let (p50, p99) = if sorted.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        (percentile(&sorted, 50.0), percentile(&sorted, 99.0))
    };
    r.targets.push(Target {
        goal: "denied on one edge → denied on the others: p99 < 1 s".into(),
        met: Some(seen.len() == denied.len() && p99 < DENIED_TARGET_MS),
        detail: format!(
            "{} clients: p50 {} ms, p99 {} ms, {} not within 10 s",
            denied.len(),
            ms(p50),
            ms(p99),
            denied.len() - seen.len()
        ),
    });
    let mut t = Table::new(
        format!(
            "edge by edge under {PROBE_RATE} req/s spread over the 3 edges and a stream on each"
        ),
        &[
            "command",
            "took",
            "exit",
            "requests",
            "failed",
            "streams intact",
        ],
    );
    for roll in rolls {
        t.rows.push(vec![
            roll.what.clone(),
            ms(millis(roll.took)),
            roll.exit.map_or("signal".into(), |c| c.to_string()),
            roll.sent.to_string(),
            roll.failed.to_string(),
            format!("{}/3", roll.streams_intact),
        ]);
    }
    r.tables.push(t);
    r.targets.push(Target {
        goal: format!("3-edge rolling delivery at {PROBE_RATE} req/s: 0 failed requests, streams intact on every edge"),
        met: Some(rolls.iter().all(|x| x.exit == Some(0) && x.failed == 0 && x.streams_intact == 3)),
        detail: rolls
            .iter()
            .map(|x| format!("{}: {} failed of {}, {}/3 streams", x.what, x.failed, x.sent, x.streams_intact))
            .collect::<Vec<_>>()
            .join("; "),
    });
    r.json = json!({
        "certificates": certs.iter().map(|o| json!({
            "answer_ms": millis(o.answer),
            "served_after_ms": o.served_after.map(millis),
            "issued": o.issued,
            "reloads": o.reloads,
        })).collect::<Vec<_>>(),
        "denied_elsewhere_ms": denied.iter().map(|d| d.map(millis)).collect::<Vec<_>>(),
        "rolls": rolls.iter().map(|x| json!({
            "command": x.what, "took_ms": millis(x.took), "exit": x.exit,
            "sent": x.sent, "failed": x.failed, "streams_intact": x.streams_intact,
        })).collect::<Vec<_>>(),
    });
    r
}
