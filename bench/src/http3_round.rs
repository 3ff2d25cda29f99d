//! One round of the http3 section: kept-alive clients of one protocol (HTTP/2 over TLS or
//! HTTP/3, the kit's clients) in a closed loop through the edge for a warm-up and a measured
//! window, every answer timed, with HAProxy's, the clients' and the whole machine's CPU in the
//! window. A request that fails is counted and its connection opened again.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::h2::H2Client;
use testkit::h3::H3Client;

use crate::stats::percentile_of;
use crate::sys::{cores_busy, machine_ticks};
use crate::traffic::cpu_secs;

pub const WARMUP: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/2 over TLS on TCP.
    H2,
    /// HTTP/3 over QUIC.
    H3,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::H2 => "h2",
            Proto::H3 => "h3",
        }
    }
}

/// Where a round's clients send: `GET https://host/path` on 127.0.0.1:`port`.
#[derive(Debug, Clone)]
pub struct Dest {
    pub port: u16,
    pub host: String,
    pub path: String,
}

/// One round's results.
pub struct Round {
    pub proto: Proto,
    pub secs: f64,
    /// Answers 200 in the window, other answers, requests with no answer.
    pub ok: u64,
    pub not_ok: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    pub latencies_ms: Vec<f64>,
    pub haproxy_cpu: f64,
    /// The bench process: the clients (and the backend, which runs in it too).
    pub bench_cpu: f64,
    /// Cores the whole machine was busy (everyone's work, the other sessions' too).
    pub machine_cores: f64,
}

impl Round {
    pub fn per_s(&self) -> f64 {
        self.ok as f64 / self.secs.max(1e-9)
    }

    pub fn p(&self, q: f64) -> f64 {
        percentile_of(&self.latencies_ms, q)
    }

    /// CPU per answered request in the window, µs.
    pub fn us_per_req(&self, cpu_secs: f64) -> f64 {
        cpu_secs * 1e6 / self.ok.max(1) as f64
    }

    pub fn to_json(&self) -> Value {
        json!({
            "proto": self.proto.name(), "secs": self.secs, "req_per_s": self.per_s(),
            "ok": self.ok, "not_ok": self.not_ok, "failed": self.failed,
            "first_error": self.first_error, "p50_ms": self.p(50.0), "p99_ms": self.p(99.0),
            "haproxy_cpu_s": self.haproxy_cpu, "bench_cpu_s": self.bench_cpu,
            "haproxy_us_per_req": self.us_per_req(self.haproxy_cpu),
            "bench_us_per_req": self.us_per_req(self.bench_cpu),
            "machine_cores": self.machine_cores,
        })
    }
}

/// `clients` connections of `proto` to `dest`, warm-up, then `measure`; `haproxy` are the
/// workers' pids.
pub fn run(
    proto: Proto,
    dest: &Dest,
    clients: usize,
    measure: Duration,
    haproxy: &[i32],
) -> anyhow::Result<Round> {
    // All connected before the window: handshakes are not what is measured.
    let kept = (0..clients)
        .map(|_| Kept::open(proto, dest))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let from = Instant::now() + WARMUP;
    let to = from + measure;
    let threads: Vec<_> = kept
        .into_iter()
        .map(|c| closed_loop(c, barrier.clone(), (from, to)))
        .collect();
    barrier.wait();
    thread::sleep(from.saturating_duration_since(Instant::now()));
    let cpu = || {
        let h: f64 = haproxy.iter().map(|p| cpu_secs(&p.to_string())).sum();
        (h, cpu_secs("self"), machine_ticks())
    };
    let (h0, b0, m0) = cpu();
    thread::sleep(to.saturating_duration_since(Instant::now()));
    let (h1, b1, m1) = cpu();
    let mut r = Round {
        proto,
        secs: measure.as_secs_f64(),
        ok: 0,
        not_ok: 0,
        failed: 0,
        first_error: None,
        latencies_ms: Vec::new(),
        haproxy_cpu: h1 - h0,
        bench_cpu: b1 - b0,
        machine_cores: cores_busy(m0, m1),
    };
    for t in threads {
        let c = t.join().map_err(|_| anyhow::anyhow!("a client panicked"))?;
        r.ok += c.ok;
        r.not_ok += c.not_ok;
        r.failed += c.failed;
        r.first_error = r.first_error.or(c.first_error);
        r.latencies_ms.extend(c.latencies_ms);
    }
    Ok(r)
}

/// What one client counted in the window.
#[derive(Default)]
struct Counts {
    ok: u64,
    not_ok: u64,
    failed: u64,
    first_error: Option<String>,
    latencies_ms: Vec<f64>,
}

/// One client's closed loop from the barrier to `to`; requests sent from `from` on count.
fn closed_loop(
    mut c: Kept,
    barrier: Arc<Barrier>,
    (from, to): (Instant, Instant),
) -> thread::JoinHandle<Counts> {
    thread::spawn(move || {
        barrier.wait();
        let mut n = Counts::default();
        loop {
            let t0 = Instant::now();
            let answer = c.get();
            let now = Instant::now();
            if now >= to {
                return n;
            }
            if t0 < from {
                continue;
            }
            n.latencies_ms.push((now - t0).as_secs_f64() * 1000.0);
            match answer {
                Ok(200) => n.ok += 1,
                Ok(_) => n.not_ok += 1,
                Err(e) => {
                    n.failed += 1;
                    n.first_error.get_or_insert(e);
                }
            }
        }
    })
}

/// A kept connection of either protocol, opened again after a failed request.
struct Kept {
    proto: Proto,
    dest: Dest,
    conn: Option<Conn>,
}

enum Conn {
    H2(H2Client),
    H3(H3Client),
}

impl Kept {
    fn open(proto: Proto, dest: &Dest) -> anyhow::Result<Kept> {
        let conn = Conn::open(proto, dest).map_err(anyhow::Error::msg)?;
        Ok(Kept {
            proto,
            dest: dest.clone(),
            conn: Some(conn),
        })
    }

    /// One request; its status.
    fn get(&mut self) -> Result<u16, String> {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => Conn::open(self.proto, &self.dest)?,
        };
        let path = &self.dest.path;
        let status = match &mut conn {
            Conn::H2(c) => c.get(path)?.status,
            Conn::H3(c) => c.get(path)?.status,
        };
        self.conn = Some(conn);
        Ok(status)
    }
}

impl Conn {
    fn open(proto: Proto, t: &Dest) -> Result<Conn, String> {
        Ok(match proto {
            Proto::H2 => Conn::H2(H2Client::connect(t.port, &t.host)?),
            Proto::H3 => Conn::H3(H3Client::connect(None, t.port, &t.host)?),
        })
    }
}
