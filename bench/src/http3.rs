//! http3: requests/s through the edge over HTTP/3 beside HTTP/2 over TLS (issue 36), on a
//! HAProxy that serves QUIC (`testkit::quic_haproxy_bin`: `HAPCTL_QUIC_HAPROXY_BIN`, else the
//! tests' cached build).
//!
//! One edge, one domain with a certificate of its own, one keep-alive backend. Rounds
//! alternate h2, h3, h2, h3…: the same clients count, path and Host, each client one kept
//! connection (TLS with ALPN h2, or QUIC) with requests one after another on it (`http3_round`).
//! Per round: req/s, latency, failed requests, and the CPU of HAProxy and of the bench per
//! request (QUIC costs more of both; the bench's share is the clients' and the in-process
//! backend's). The target is the ratio of the medians, h3 ÷ h2.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use hapctl::haproxy::Validator;
use hapctl::settings::HAPROXY_BIN_ENV;
use serde_json::json;
use testkit::pki::TestCa;
use testkit::{Backend, Edge};

use crate::harness::new_edge;
use crate::http3_round::{self, Dest, Proto, Round};
use crate::stats::{ms, Summary};
use crate::{Ctx, Report, Table, Target};

const HOST: &str = "h3.bench.example.com";
const PATH: &str = "/";
const BODY: &str = "hapctl-bench http3\n";
const CLIENTS: usize = 8;
/// Rounds per protocol.
const ROUNDS: usize = 4;
const MEASURE: Duration = Duration::from_secs(5);
const TARGET_RATIO: f64 = 0.5;

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let quic = std::panic::catch_unwind(testkit::quic_haproxy_bin).map_err(|_| {
        anyhow::anyhow!("no QUIC-capable HAProxy: set HAPCTL_QUIC_HAPROXY_BIN to one")
    })?;
    let haproxy = describe_haproxy(&quic)?;
    let backend = Backend::keep_alive(BODY)?;
    let edge = start_edge(&hapctl, &quic, &backend)?;
    let workers: Vec<i32> = edge
        .try_show_proc()?
        .workers
        .iter()
        .map(|w| w.pid)
        .collect();
    let dest = Dest {
        port: edge.https_port,
        host: HOST.into(),
        path: PATH.into(),
    };
    let mut rounds = Vec::new();
    for i in 0..ROUNDS * 2 {
        let proto = if i % 2 == 0 { Proto::H2 } else { Proto::H3 };
        eprintln!(
            "http3: round {} of {}, {}…",
            i + 1,
            ROUNDS * 2,
            proto.name()
        );
        rounds.push(http3_round::run(proto, &dest, CLIENTS, MEASURE, &workers)?);
    }
    let mut report = Report::default();
    report.notes.push(format!(
        "HAProxy {haproxy} ({}), {} worker process(es) watched",
        quic.display(),
        workers.len()
    ));
    report_rounds(&mut report, &rounds);
    report.json = json!({
        "haproxy": haproxy,
        "haproxy_bin": quic.display().to_string(),
        "clients": CLIENTS,
        "rounds": rounds.iter().map(Round::to_json).collect::<Vec<_>>(),
    });
    Ok(report)
}

/// `3.2.x, QUIC native` or `…, QUIC on OpenSSL's compatibility layer`; an error if it has no
/// QUIC at all.
fn describe_haproxy(bin: &Path) -> anyhow::Result<String> {
    let validator = Validator::new(bin, Duration::from_secs(10));
    let version = validator.version()?;
    let features = validator.features()?;
    if !features.quic {
        bail!(
            "{} ({version}) has no QUIC: set HAPCTL_QUIC_HAPROXY_BIN to a HAProxy built with it",
            bin.display()
        );
    }
    let kind = if features.quic_openssl_compat {
        "QUIC on OpenSSL's compatibility layer"
    } else {
        "QUIC native"
    };
    Ok(format!("{version}, {kind}"))
}

/// An edge on the QUIC HAProxy (`[edge] http3` "auto" turns HTTP/3 on), running, with
/// [`HOST`] served by `backend` under a certificate of its own, as a real domain is.
fn start_edge(hapctl: &Path, quic: &Path, backend: &Backend) -> anyhow::Result<Edge> {
    let mut edge = new_edge(hapctl)?;
    edge.set_env(HAPROXY_BIN_ENV, &quic.display().to_string());
    edge.start()?;
    edge.try_ok(&["domain", "add", HOST, "--server", &backend.addr()])?;
    let ca = TestCa::new("hapctl-bench http3");
    let bundle = edge.path("h3-bench.pem");
    std::fs::write(&bundle, ca.bundle(&ca.leaf(&[HOST])))?;
    edge.try_ok(&[
        "cert",
        "import",
        HOST,
        "--pem",
        &bundle.display().to_string(),
    ])?;
    let config = std::fs::read_to_string(edge.path("live/haproxy.cfg"))
        .context("the edge's live haproxy.cfg")?;
    if !config.contains("bind quic4@") {
        bail!("the edge has no QUIC bind: HTTP/3 did not turn on with this HAProxy");
    }
    Ok(edge)
}

fn report_rounds(report: &mut Report, rounds: &[Round]) {
    let mut t = Table::new(
        format!(
            "HTTP/2 over TLS and HTTP/3 through the edge, {CLIENTS} kept connections, {} s rounds",
            MEASURE.as_secs()
        ),
        &[
            "round",
            "proto",
            "req/s",
            "p50 ms",
            "p99 ms",
            "non-200",
            "failed",
            "HAProxy µs/req",
            "bench µs/req",
            "machine cores busy",
        ],
    );
    for (i, r) in rounds.iter().enumerate() {
        t.row(vec![
            (i / 2 + 1).to_string(),
            r.proto.name().into(),
            format!("{:.0}", r.per_s()),
            ms(r.p(50.0)),
            ms(r.p(99.0)),
            r.not_ok.to_string(),
            r.failed.to_string(),
            format!("{:.0}", r.us_per_req(r.haproxy_cpu)),
            format!("{:.0}", r.us_per_req(r.bench_cpu)),
            format!("{:.2}", r.machine_cores),
        ]);
    }
    report.tables.push(t);
    let mut s = Table::new(
        "Per protocol: medians of the rounds",
        &[
            "proto",
            "req/s",
            "p50 ms",
            "p99 ms",
            "failed (all rounds)",
            "HAProxy µs/req",
        ],
    );
    let h2 = medians(rounds, Proto::H2);
    let h3 = medians(rounds, Proto::H3);
    for m in [&h2, &h3] {
        s.row(vec![
            m.proto.name().into(),
            format!("{:.0}", m.per_s),
            ms(m.p50),
            ms(m.p99),
            m.failed.to_string(),
            format!("{:.0}", m.haproxy_us),
        ]);
        if let Some(e) = &m.first_error {
            report
                .notes
                .push(format!("{}: first failed request: {e}", m.proto.name()));
        }
    }
    report.tables.push(s);
    let ratio = h3.per_s / h2.per_s.max(1e-9);
    report.targets.push(Target {
        goal: format!("HTTP/3 req/s ≥ {TARGET_RATIO} × HTTP/2's (same edge, same run)"),
        met: Some(ratio >= TARGET_RATIO),
        detail: format!(
            "medians {:.0} ÷ {:.0} = {ratio:.2}; failed requests h2 {}, h3 {}",
            h3.per_s, h2.per_s, h2.failed, h3.failed
        ),
    });
}

/// One protocol's rounds summed up: medians of req/s, p50, p99 and HAProxy CPU per request.
struct Medians {
    proto: Proto,
    per_s: f64,
    p50: f64,
    p99: f64,
    haproxy_us: f64,
    failed: u64,
    first_error: Option<String>,
}

fn medians(rounds: &[Round], proto: Proto) -> Medians {
    let of = |f: &dyn Fn(&Round) -> f64| {
        let v: Vec<f64> = rounds.iter().filter(|r| r.proto == proto).map(f).collect();
        Summary::of(&v).map_or(f64::NAN, |s| s.median)
    };
    let mine = || rounds.iter().filter(|r| r.proto == proto);
    Medians {
        proto,
        per_s: of(&Round::per_s),
        p50: of(&|r| r.p(50.0)),
        p99: of(&|r| r.p(99.0)),
        haproxy_us: of(&|r| r.us_per_req(r.haproxy_cpu)),
        failed: mine().map(|r| r.failed + r.not_ok).sum(),
        first_error: mine().find_map(|r| r.first_error.clone()),
    }
}
