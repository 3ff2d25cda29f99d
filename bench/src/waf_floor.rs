//! The floor of the waf section: hapctl's own evaluation (`hapctl::waf::agent::evaluate`, the
//! engine wrapper and the scoring a worker runs) called in process on the request the edge
//! sends the agent, no socket and no HAProxy. What the agent cannot go below: its CPU per
//! request is compared with this one's.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use hapctl::model::{WafMode, WafPolicy};
use hapctl::waf::message::Inspect;
use hapctl::waf::{agent, Answer, Engine};

/// What `threads` threads evaluating the same request for a while did.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    pub threads: usize,
    pub transactions: u64,
    pub secs: f64,
    /// CPU seconds of the evaluating threads.
    pub cpu_secs: f64,
}

impl Floor {
    pub fn per_s(&self) -> f64 {
        self.transactions as f64 / self.secs
    }

    pub fn cpu_us(&self) -> f64 {
        self.cpu_secs * 1e6 / self.transactions.max(1) as f64
    }

    /// Wall time per transaction on one thread.
    pub fn wall_us(&self) -> f64 {
        self.secs * 1e6 * self.threads as f64 / self.transactions.max(1) as f64
    }
}

/// The request the edge hands the agent for the bench's clean GET: the client's three headers
/// and the three HAProxy sets before the WAF (templates/haproxy.cfg.j2), detect mode.
pub fn request(path: &str, query: &str, host: &str) -> Inspect {
    let headers = [
        ("host", host),
        ("user-agent", "hapctl-bench"),
        ("accept", "*/*"),
        ("x-real-ip", "127.0.0.1"),
        ("x-forwarded-proto", "http"),
        ("x-forwarded-port", "80"),
    ];
    Inspect {
        policy: WafPolicy {
            mode: WafMode::Detect,
            ..WafPolicy::default()
        },
        id: "7f000001:c3a4_7f000001:0050_6752C0DE_0001:1A2B".into(),
        client_ip: "127.0.0.1".into(),
        client_port: 50_000,
        method: "GET".into(),
        path: path.into(),
        query: query.into(),
        version: "1.1".into(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
        body: Vec::new(),
        body_cut: false,
    }
}

/// `threads` threads evaluating `req` through `engine` for `measure` (after a short
/// warm-up); every answer must be a pass.
pub fn measure(
    engine: &Engine,
    req: &Inspect,
    threads: usize,
    measure: Duration,
) -> anyhow::Result<Floor> {
    let warm_until = Instant::now() + Duration::from_millis(300);
    let to = warm_until + measure;
    let counted = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| evaluate_until(engine, req, warm_until, to)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("an evaluating thread panicked"))
            .collect::<Vec<_>>()
    });
    let mut floor = Floor {
        threads,
        transactions: 0,
        secs: measure.as_secs_f64(),
        cpu_secs: 0.0,
    };
    for c in counted {
        let (n, cpu) = c?;
        floor.transactions += n;
        floor.cpu_secs += cpu;
    }
    Ok(floor)
}

/// Evaluations on this thread until `to`, those from `from` on counted with their CPU time.
fn evaluate_until(
    engine: &Engine,
    req: &Inspect,
    from: Instant,
    to: Instant,
) -> anyhow::Result<(u64, f64)> {
    while Instant::now() < from {
        evaluate(engine, req)?;
    }
    let cpu0 = thread_cpu_secs();
    let mut n = 0;
    while Instant::now() < to {
        evaluate(engine, req)?;
        n += 1;
    }
    Ok((n, thread_cpu_secs() - cpu0))
}

fn evaluate(engine: &Engine, req: &Inspect) -> anyhow::Result<()> {
    match agent::evaluate(engine, req) {
        Answer::Pass(_) => Ok(()),
        other => bail!("the floor's clean request was not passed: {other:?}"),
    }
}

/// This thread's CPU time.
fn thread_cpu_secs() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer and a clock every Linux has.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}
