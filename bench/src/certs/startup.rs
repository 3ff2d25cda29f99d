//! certs: `haproxy -c`, a reload and `hapctl haproxy start` → serving, with 0 and with N
//! certificates, interleaved.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use hapctl::tls::x509::serial_matches;
use serde_json::{json, Value};

use super::edge::{served_serial, TlsEdge};
use super::{pct, DOMAINS, PROBE_EVERY};
use crate::harness::BenchEdge;
use crate::memory::{mib, Memory};
use crate::stats::{ms, Summary};
use crate::sys;
use crate::Table;

/// Interleaved runs of `haproxy -c`, of a reload and of a stop/start, per edge.
const CHECK_RUNS: usize = 5;
const RELOAD_RUNS: usize = 3;
const START_RUNS: usize = 3;
/// Bound on `hapctl haproxy start` until a handshake is served.
const START_BOUND: Duration = Duration::from_secs(60);

#[derive(Default)]
pub(super) struct Startup {
    /// Per edge (0 = no certificates, 1 = N): samples, ms.
    pub(super) check: [Vec<f64>; 2],
    pub(super) reload: [Vec<f64>; 2],
    pub(super) start_served: [Vec<f64>; 2],
    pub(super) start_exit: [Vec<f64>; 2],
    pub(super) worker_rss_kb: [u64; 2],
    pub(super) crt_list_bytes: [u64; 2],
    pub(super) certs_dir_bytes: [u64; 2],
}

pub(super) fn worker_rss(edge: &TlsEdge) -> anyhow::Result<u64> {
    let pid = edge
        .edge
        .try_show_proc()?
        .workers
        .first()
        .map(|w| w.pid)
        .context("no worker")?;
    Ok(Memory::of(pid)?.rss_kb)
}

pub(super) fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// `hapctl haproxy stop`, then `hapctl haproxy start` timed from spawn to a handshake with
/// `sni` that presents `serial` (any certificate if `None`). The edge's guard keeps its
/// `started` mark, so a failure half-way still stops whatever runs.
pub(super) fn restart(
    edge: &TlsEdge,
    sni: &str,
    serial: Option<&str>,
) -> anyhow::Result<(f64, f64)> {
    edge.edge.try_ok(&["haproxy", "stop"])?;
    let addr = edge.https;
    let obs = sys::spawn_and_observe(
        edge.edge.command(&["haproxy", "start"]),
        PROBE_EVERY,
        START_BOUND,
        "haproxy start → a handshake served",
        || match served_serial(addr, sni) {
            Ok(s) => serial.is_none_or(|want| serial_matches(&s, want)),
            Err(_) => false,
        },
    )?;
    if !obs.status.success() {
        bail!(
            "hapctl haproxy start failed ({}): {} {}",
            obs.status,
            obs.stdout.trim(),
            obs.stderr.trim()
        );
    }
    Ok((
        obs.seen
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(f64::NAN),
        obs.exit.as_secs_f64() * 1000.0,
    ))
}

pub(super) fn check_reload_start(z: &TlsEdge, a: &TlsEdge, sni: &str) -> anyhow::Result<Startup> {
    let mut s = Startup::default();
    let serial = a.serials.get(sni).cloned();
    let edges = [z, a];
    for _ in 0..CHECK_RUNS {
        for (k, e) in edges.iter().enumerate() {
            s.check[k].push(e.edge.time_haproxy_check()?);
        }
    }
    for _ in 0..RELOAD_RUNS {
        for (k, e) in edges.iter().enumerate() {
            e.edge.wait_old_workers_gone(Duration::from_secs(30))?;
            let r = e
                .edge
                .master()
                .reload(Duration::from_secs(60))
                .context("reload through the master")?;
            s.reload[k].push(r.duration.as_secs_f64() * 1000.0);
        }
    }
    for _ in 0..START_RUNS {
        for (k, e) in edges.iter().enumerate() {
            let (served, exit) = if k == 0 {
                restart(e, "unknown.bench.test", None)?
            } else {
                restart(e, sni, serial.as_deref())?
            };
            s.start_served[k].push(served);
            s.start_exit[k].push(exit);
        }
    }
    for (k, e) in edges.iter().enumerate() {
        s.worker_rss_kb[k] = worker_rss(e)?;
        let paths = &e.edge.settings()?.paths;
        s.certs_dir_bytes[k] = dir_bytes(&paths.certs_dir);
        s.crt_list_bytes[k] = std::fs::metadata(hapctl::render::FileId::CrtList.path(paths))
            .map(|m| m.len())
            .unwrap_or(0);
    }
    Ok(s)
}

impl Startup {
    pub(super) fn table(&self, n: usize) -> Table {
        let mut t = Table::new(
            format!("certs: HAProxy with 0 and with {n} certificates ({DOMAINS} domains each; medians, runs interleaved), ms"),
            &["what", "runs", "0 certificates", "N certificates", "ratio N ÷ 0", "N: min", "N: max"],
        );
        let med = |v: &[f64]| Summary::of(v).map_or(f64::NAN, |s| s.median);
        let rows: [(&str, &[Vec<f64>; 2]); 4] = [
            (
                "`haproxy -c -f live/haproxy.cfg -f live/generation.cfg`",
                &self.check,
            ),
            (
                "reload through the master (library), until the new worker is listed",
                &self.reload,
            ),
            (
                "`hapctl haproxy start` spawn → first handshake served",
                &self.start_served,
            ),
            ("`hapctl haproxy start` spawn → exit", &self.start_exit),
        ];
        for (label, v) in rows {
            t.row(vec![
                label.to_string(),
                v[1].len().to_string(),
                ms(med(&v[0])),
                ms(med(&v[1])),
                format!("{:.2}", med(&v[1]) / med(&v[0])),
                ms(pct(&v[1], 0.0)),
                ms(pct(&v[1], 100.0)),
            ]);
        }
        t.row(vec![
            "HAProxy worker VmRSS after the last start (MiB)".into(),
            "1".into(),
            mib(self.worker_rss_kb[0]),
            mib(self.worker_rss_kb[1]),
            format!(
                "{:.2}",
                self.worker_rss_kb[1] as f64 / self.worker_rss_kb[0] as f64
            ),
            "-".into(),
            "-".into(),
        ]);
        t.row(vec![
            "certs dir / crt-list (KiB)".into(),
            "1".into(),
            format!(
                "{:.1} / {:.1}",
                self.certs_dir_bytes[0] as f64 / 1024.0,
                self.crt_list_bytes[0] as f64 / 1024.0
            ),
            format!(
                "{:.1} / {:.1}",
                self.certs_dir_bytes[1] as f64 / 1024.0,
                self.crt_list_bytes[1] as f64 / 1024.0
            ),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
        t
    }

    pub(super) fn to_json(&self) -> Value {
        json!({
            "check_ms": self.check,
            "reload_ms": self.reload,
            "start_served_ms": self.start_served,
            "start_exit_ms": self.start_exit,
            "worker_rss_kb": self.worker_rss_kb,
            "certs_dir_bytes": self.certs_dir_bytes,
            "crt_list_bytes": self.crt_list_bytes,
        })
    }
}
