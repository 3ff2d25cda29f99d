//! blocks: single-entry throughput, `clients` threads posting for a few seconds (kept-alive
//! connections or a new one per request), with the block worker's batches read from the
//! answers.

use std::net::Ipv4Addr;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::api::Api;

/// How long each throughput run posts.
pub const THROUGHPUT_FOR: Duration = Duration::from_secs(5);

/// The `i`-th address of a series: 127.`set`.x.y, never 127.0.0.x (the bench's own traffic).
pub fn addr(set: u8, i: usize) -> Ipv4Addr {
    assert!(set >= 2 && i < 250 * 256);
    Ipv4Addr::new(127, set, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// The body of a single block of `ip`.
pub fn block_body(ip: Ipv4Addr) -> Value {
    json!({"ip": ip.to_string(), "reason": "hapctl-bench"})
}

/// What a throughput run measured.
pub struct Throughput {
    pub keep_alive: bool,
    /// Blocks in the database before and after the run.
    pub entries: (usize, usize),
    pub ok: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    pub seconds: f64,
    pub latencies: Vec<f64>,
    /// The block worker's duration of each distinct batch.
    pub batch_ms: Vec<f64>,
    /// A few blocked addresses, checked for 403 afterwards.
    pub sample: Vec<Ipv4Addr>,
}

impl Throughput {
    pub fn per_s(&self) -> f64 {
        self.ok as f64 / self.seconds.max(1e-9)
    }
}

/// What one client of [`throughput`] saw.
struct ClientResult {
    ok: usize,
    errors: usize,
    first_error: Option<String>,
    latencies: Vec<f64>,
    durations: Vec<f64>,
    last: Option<Ipv4Addr>,
    ended: Instant,
}

/// One client: from the barrier on, blocks addresses of `set` one request at a time (on a
/// kept-alive connection, reconnecting after an error, or a fresh one each) for
/// `THROUGHPUT_FOR`.
fn client_loop(api: &Api, barrier: &Barrier, set: u8, keep_alive: bool) -> ClientResult {
    let mut r = ClientResult {
        ok: 0,
        errors: 0,
        first_error: None,
        latencies: Vec::new(),
        durations: Vec::new(),
        last: None,
        ended: Instant::now(),
    };
    let mut conn = if keep_alive { api.connect().ok() } else { None };
    barrier.wait();
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed() < THROUGHPUT_FOR && i < 250 * 256 {
        let ip = addr(set, i);
        i += 1;
        let body = block_body(ip);
        let t0 = Instant::now();
        let answer = match conn.as_mut() {
            Some(c) => c.json("POST", "/v1/blocked-ips", &body),
            None => api.call("POST", "/v1/blocked-ips", Some(&body)),
        };
        let elapsed = t0.elapsed().as_secs_f64() * 1000.0;
        match answer {
            Ok(a) if a.status == 200 || a.status == 201 => {
                r.ok += 1;
                r.latencies.push(elapsed);
                r.last = Some(ip);
                if let Some(d) = a.json()["duration_ms"].as_f64() {
                    r.durations.push(d);
                }
            }
            other => {
                r.errors += 1;
                if r.first_error.is_none() {
                    r.first_error = Some(match other {
                        Ok(a) => a.describe(),
                        Err(e) => format!("{e:#}"),
                    });
                }
                if keep_alive {
                    conn = api.connect().ok();
                }
            }
        }
    }
    r.ended = Instant::now();
    r
}

/// `clients` threads posting single entries for [`THROUGHPUT_FOR`]; client `t` blocks
/// 127.(`first_set` + t).x.y.
pub fn throughput(
    api: &Api,
    clients: usize,
    keep_alive: bool,
    first_set: u8,
) -> anyhow::Result<Throughput> {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let handles: Vec<_> = (0..clients)
        .map(|t| {
            let (api, barrier) = (api.clone(), barrier.clone());
            let set = first_set + t as u8;
            thread::spawn(move || client_loop(&api, &barrier, set, keep_alive))
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut results = Vec::new();
    for h in handles {
        results.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))?,
        );
    }
    let end = results.iter().map(|r| r.ended).max().unwrap_or(start);
    let mut batch_ms: Vec<f64> = results.iter().flat_map(|r| r.durations.clone()).collect();
    batch_ms.sort_by(f64::total_cmp);
    // Answers of one batch carry the same duration_ms.
    batch_ms.dedup();
    Ok(Throughput {
        keep_alive,
        entries: (0, 0),
        ok: results.iter().map(|r| r.ok).sum(),
        errors: results.iter().map(|r| r.errors).sum(),
        first_error: results.iter().find_map(|r| r.first_error.clone()),
        seconds: (end - start).as_secs_f64(),
        latencies: results.iter().flat_map(|r| r.latencies.clone()).collect(),
        batch_ms,
        sample: results.iter().filter_map(|r| r.last).take(5).collect(),
    })
}
