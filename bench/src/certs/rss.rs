//! certs: `hapctl serve` memory at 10,000 domains and 100,000 blocks, with 0 and with N
//! certificates (as the `rss` section).

use std::net::Ipv4Addr;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use hapctl::model::Block;
use serde_json::{json, Value};
use testkit::daemon::{Daemon, Serve};

use super::edge::TlsEdge;
use super::install::Bulk;
use super::pki::TestCa;
use super::{elapsed_ms, site, RSS_BLOCKS, RSS_BRIEF_LAST_STEP, RSS_DOMAINS};
use crate::api::Api;
use crate::fixture::{self, Servers};
use crate::harness::BenchEdge;
use crate::memory::{DaemonProcess, Memory};

pub(super) struct RssRun {
    pub(super) certs: usize,
    pub(super) bulk: Option<Bulk>,
    pub(super) haproxy_start_ms: f64,
    pub(super) daemon_startup_ms: f64,
    pub(super) readings: Vec<Reading>,
    /// The PUT's request time, its apply's duration and steps (from the answer), ms.
    pub(super) put: (f64, f64, Vec<(String, f64)>),
}

pub(super) struct Reading {
    pub(super) step: String,
    pub(super) ms: f64,
    pub(super) memory: Memory,
}

impl RssRun {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "certificates": self.certs,
            "bulk": self.bulk.as_ref().map(Bulk::to_json),
            "haproxy_start_ms": self.haproxy_start_ms,
            "daemon_startup_ms": self.daemon_startup_ms,
            "put": {"request_ms": self.put.0, "apply_ms": self.put.1, "steps_ms": self.put.2.iter().map(|(n, d)| json!([n, d])).collect::<Vec<_>>()},
            "readings": self.readings.iter().map(|r| json!({
                "step": r.step, "request_ms": r.ms, "memory": r.memory.to_json(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// The `i`-th extra blocked address: 10.0.0.0 + i (as `rss`).
pub(super) fn block(i: usize) -> Block {
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + i as u32);
    crate::fixture::address_block(ip, "hapctl-bench certs")
}

/// Fields drop in order: the daemon before the edge.
pub(super) struct Served {
    pub(super) daemon: Daemon,
    pub(super) _edge: TlsEdge,
}

/// The API calls made one after the other, the daemon's memory read after each: label,
/// method, path, body.
fn api_steps(backend: &str) -> Vec<(&'static str, &'static str, &'static str, Option<Value>)> {
    vec![
        ("GET /v1/domains", "GET", "/v1/domains", None),
        (
            "PUT /v1/domains/rss-new.example.com",
            "PUT",
            "/v1/domains/rss-new.example.com",
            Some(json!({"servers": [{"address": backend}]})),
        ),
        (
            RSS_BRIEF_LAST_STEP,
            "POST",
            "/v1/blocked-ips",
            Some(json!({"ip": "192.0.2.77", "reason": "hapctl-bench certs"})),
        ),
        ("GET /v1/status", "GET", "/v1/status", None),
        ("GET /metrics", "GET", "/metrics", None),
    ]
}

/// The PUT's request time, its apply's duration and the apply's steps (name, ms).
fn put_breakdown(answer: &Value, request_ms: f64) -> (f64, f64, Vec<(String, f64)>) {
    let steps = answer["apply"]["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .filter_map(|s| Some((s["name"].as_str()?.to_string(), s["duration"].as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    (
        request_ms,
        answer["apply"]["duration"].as_f64().unwrap_or(f64::NAN),
        steps,
    )
}

pub(super) fn rss_run(
    hapctl: &Path,
    ca: &TestCa,
    backend: &str,
    certs: usize,
) -> anyhow::Result<RssRun> {
    let mut edge = TlsEdge::init(hapctl)?;
    edge.edge
        .load(&fixture::state(RSS_DOMAINS, Servers::At(backend)))?;
    let extra: Vec<Block> = (0..RSS_BLOCKS).map(block).collect();
    edge.edge.add_blocks(&extra)?;
    drop(extra);
    let bulk = if certs > 0 {
        Some(edge.bulk(ca, 0, certs, false)?)
    } else {
        None
    };
    let t = Instant::now();
    edge.edge.start()?;
    let haproxy_start_ms = elapsed_ms(t);
    if certs > 0 {
        let serial = edge.serials.get(&site(0)).cloned();
        edge.wait_served(&site(0), serial.as_deref(), Duration::from_secs(10))?;
    }
    let daemon = Daemon::try_start(&edge.edge, &Serve::within(Duration::from_secs(300)))?;
    let daemon_startup_ms = daemon.startup.as_secs_f64() * 1000.0;
    let s = Served {
        daemon,
        _edge: edge,
    };
    let api = &Api::of(&s.daemon);
    let mut readings = vec![Reading {
        step: "started (/health 200)".into(),
        ms: 0.0,
        memory: s.daemon.memory()?,
    }];
    let mut put = (0.0, f64::NAN, Vec::new());
    for (label, method, path, body) in api_steps(backend) {
        let t = Instant::now();
        let answer = api.call(method, path, body.as_ref())?;
        let request_ms = elapsed_ms(t);
        if !(200..300).contains(&answer.status) {
            bail!("{method} {path}: {}", answer.describe());
        }
        if method == "PUT" {
            put = put_breakdown(&answer.json(), request_ms);
        }
        readings.push(Reading {
            step: label.into(),
            ms: request_ms,
            memory: s.daemon.memory()?,
        });
    }
    thread::sleep(Duration::from_secs(2));
    readings.push(Reading {
        step: "idle 2 s".into(),
        ms: 0.0,
        memory: s.daemon.memory()?,
    });
    drop(s);
    Ok(RssRun {
        certs,
        bulk,
        haproxy_start_ms,
        daemon_startup_ms,
        readings,
        put,
    })
}
