//! blocks: blocks timed from the request to enforced (the first 403 through the edge from the
//! blocked address), one by one and in bulk lists, and the probes that check it.

use std::net::Ipv4Addr;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;
use testkit::Edge;

use crate::api::Api;
use crate::blocks_load::{addr, block_body};

/// Bound on a latency series.
const SERIES_BOUND: Duration = Duration::from_secs(120);
/// Bound on one block reaching enforcement.
const ENFORCE_BOUND: Duration = Duration::from_secs(10);
pub const BULK_SIZE: usize = 10_000;

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

/// GET / through the edge from `ip`: the status.
fn status_from(edge: &Edge, host: &str, ip: Ipv4Addr) -> anyhow::Result<u16> {
    let answer = testkit::try_http_get(Some(ip), edge.port, host, "/", &[])
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("GET / from {ip} through the edge"))?;
    Ok(answer.status)
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

pub fn check_enforced(edge: &Edge, host: &str, sample: &[Ipv4Addr]) -> anyhow::Result<()> {
    for &ip in sample {
        let status = status_from(edge, host, ip)?;
        if status != 403 {
            bail!("{ip} was blocked (the API said so) but gets {status}");
        }
    }
    Ok(())
}

/// One bulk list timed to enforced.
pub struct Bulk {
    pub created: usize,
    pub api_ms: f64,
    pub server_ms: f64,
    pub enforcement: String,
    /// Send → the list's last entry refused with 403.
    pub enforced_ms: f64,
}

impl Bulk {
    pub fn per_s(&self) -> f64 {
        BULK_SIZE as f64 / (self.api_ms / 1000.0)
    }
}

/// One list of [`BULK_SIZE`] entries, 127.`set`.x.y.
pub fn bulk_post(api: &Api, edge: &Edge, host: &str, set: u8) -> anyhow::Result<Bulk> {
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
