//! One round of the waf section: kept-alive clients in a closed loop through the edge for a
//! warm-up and a measured window, every answer timed, with the CPU of HAProxy, of the agent and
//! of the whole machine in the window and what the agent counted.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use hapctl::waf::metrics::{CountersSnapshot, LATENCY_BUCKETS_US};
use serde_json::{json, Value};

use crate::stats::percentile_of;
use crate::sys::{cores_busy, machine_ticks};
use crate::traffic::{cpu_secs, Client};

pub const WARMUP: Duration = Duration::from_millis(500);

/// What one round is: the domain's mode, the traffic, the clients and the window.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// `this` (the hapctl under test) or `baseline` (`HAPCTL_BENCH_BASELINE`'s).
    pub agent: &'static str,
    /// The agent's rules: `crs` or `empty` (hapctl's base only: the glue).
    pub rules: &'static str,
    pub mode: &'static str,
    pub traffic: &'static str,
    pub clients: usize,
    pub measure: Duration,
}

impl Plan {
    /// The same round for the baseline's edge.
    pub fn baseline(self) -> Plan {
        Plan {
            agent: "baseline",
            ..self
        }
    }

    /// The request path and the status every answer must have.
    pub fn request(&self) -> (&'static str, u16) {
        match (self.traffic, self.mode) {
            ("attack", "block") => (super::waf::ATTACK, 403),
            ("attack", _) => (super::waf::ATTACK, 200),
            _ => (super::waf::CLEAN, 200),
        }
    }
}

/// The processes whose CPU a round reads.
pub struct Pids<'a> {
    pub agent: i32,
    pub haproxy: &'a [i32],
}

/// One round's results.
pub struct Round {
    pub plan: Plan,
    /// Answers with the expected status in the window, and the others.
    pub ok: u64,
    pub not_ok: u64,
    pub latencies_ms: Vec<f64>,
    pub haproxy_cpu: f64,
    pub agent_cpu: f64,
    /// Cores the whole machine was busy (everyone's work, the other sessions' too).
    pub machine_cores: f64,
    /// The agent's counters over the round (warm-up included).
    pub inspected: u64,
    pub agent_failed: u64,
    pub agent_sum_us: u64,
    pub agent_buckets: Vec<u64>,
}

impl Round {
    /// What the agent counted between two snapshots of its state file.
    pub fn count_agent(&mut self, before: &CountersSnapshot, after: &CountersSnapshot) {
        self.inspected = after.inspected - before.inspected;
        self.agent_failed = (after.errors + after.timeouts) - (before.errors + before.timeouts);
        self.agent_sum_us = after.latency_sum_us - before.latency_sum_us;
        self.agent_buckets = after
            .latency_buckets
            .iter()
            .zip(&before.latency_buckets)
            .map(|(a, b)| a - b)
            .collect();
    }

    pub fn secs(&self) -> f64 {
        self.plan.measure.as_secs_f64()
    }

    pub fn per_s(&self) -> f64 {
        self.ok as f64 / self.secs()
    }

    pub fn p(&self, q: f64) -> f64 {
        percentile_of(&self.latencies_ms, q)
    }

    /// The agent's CPU per answered request in the window, µs.
    pub fn agent_cpu_us(&self) -> f64 {
        self.agent_cpu * 1e6 / self.ok.max(1) as f64
    }

    /// The agent's mean time per request, ms.
    pub fn agent_mean_ms(&self) -> Option<f64> {
        (self.inspected > 0).then(|| self.agent_sum_us as f64 / self.inspected as f64 / 1000.0)
    }

    /// The bucket bound (ms) under which 99 % of the agent's answers fell.
    pub fn agent_p99_bound_ms(&self) -> Option<f64> {
        let want = (self.inspected as f64 * 0.99).ceil() as u64;
        let i = self.agent_buckets.iter().position(|n| *n >= want)?;
        (self.inspected > 0).then(|| LATENCY_BUCKETS_US[i] as f64 / 1000.0)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "agent": self.plan.agent, "rules": self.plan.rules, "mode": self.plan.mode, "traffic": self.plan.traffic,
            "clients": self.plan.clients, "secs": self.secs(),
            "req_per_s": self.per_s(), "ok": self.ok, "not_ok": self.not_ok,
            "p50_ms": self.p(50.0), "p99_ms": self.p(99.0), "haproxy_cpu_s": self.haproxy_cpu,
            "agent_cpu_s": self.agent_cpu, "machine_cores": self.machine_cores,
            "inspected": self.inspected, "agent_failed": self.agent_failed,
            "agent_mean_ms": self.agent_mean_ms(), "agent_p99_bound_ms": self.agent_p99_bound_ms(),
            "agent_buckets": self.agent_buckets,
        })
    }
}

/// Runs `plan` against the edge on `port` for `host`: clients connected, warm-up, window.
pub fn run(port: u16, host: &str, plan: Plan, pids: &Pids) -> anyhow::Result<Round> {
    let (path, want) = plan.request();
    let clients = (0..plan.clients)
        .map(|_| Client::connect(port, host, path, ""))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let barrier = Arc::new(Barrier::new(plan.clients + 1));
    let from = Instant::now() + WARMUP;
    let to = from + plan.measure;
    let threads: Vec<_> = clients
        .into_iter()
        .map(|c| closed_loop(c, barrier.clone(), (from, to), want))
        .collect();
    barrier.wait();
    thread::sleep(from.saturating_duration_since(Instant::now()));
    let cpu = || {
        let haproxy: f64 = pids.haproxy.iter().map(|p| cpu_secs(&p.to_string())).sum();
        (haproxy, cpu_secs(&pids.agent.to_string()), machine_ticks())
    };
    let (h0, a0, m0) = cpu();
    thread::sleep(to.saturating_duration_since(Instant::now()));
    let (h1, a1, m1) = cpu();
    let mut r = Round {
        plan,
        ok: 0,
        not_ok: 0,
        latencies_ms: Vec::new(),
        haproxy_cpu: h1 - h0,
        agent_cpu: a1 - a0,
        machine_cores: cores_busy(m0, m1),
        inspected: 0,
        agent_failed: 0,
        agent_sum_us: 0,
        agent_buckets: Vec::new(),
    };
    for t in threads {
        let (ok, not_ok, lat) = t
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        r.ok += ok;
        r.not_ok += not_ok;
        r.latencies_ms.extend(lat);
    }
    Ok(r)
}

/// One client's closed loop from the barrier to `to`: answers as wanted, not, and the
/// latencies of those sent from `from` on.
fn closed_loop(
    mut c: Client,
    barrier: Arc<Barrier>,
    (from, to): (Instant, Instant),
    want: u16,
) -> thread::JoinHandle<anyhow::Result<(u64, u64, Vec<f64>)>> {
    thread::spawn(move || {
        barrier.wait();
        let (mut ok, mut not_ok, mut lat) = (0, 0, Vec::new());
        loop {
            let t0 = Instant::now();
            let status = c.get()?;
            let now = Instant::now();
            if now >= to {
                return Ok((ok, not_ok, lat));
            }
            if t0 >= from {
                lat.push((now - t0).as_secs_f64() * 1000.0);
                if status == want {
                    ok += 1;
                } else {
                    not_ok += 1;
                }
            }
        }
    })
}
