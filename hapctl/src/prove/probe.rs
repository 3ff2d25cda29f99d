//! The short-request probe: a new connection for every request, at a bounded rate, each
//! outcome recorded with its time.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::http::{self, Cause, Timeouts};

/// Requests in flight at most; beyond, the probe waits (and counts the request as late).
const MAX_IN_FLIGHT: usize = 64;

#[derive(Debug, Clone)]
pub struct ProbeConfig {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
    /// Requests per second.
    pub rate: f64,
    pub timeouts: Timeouts,
    /// Bound on one whole request.
    pub request_timeout: Duration,
    /// The probe never runs longer than this, even if nobody stops it.
    pub max_duration: Duration,
}

/// One short request.
#[derive(Debug, Clone)]
pub struct RequestOutcome {
    /// When it started, in ms since the proof's clock started.
    pub t_ms: f64,
    pub duration_ms: f64,
    /// The version that served it, or why it failed.
    pub result: Result<String, http::HttpError>,
}

/// What the probe saw, in start order.
#[derive(Debug, Clone, Default)]
pub struct ProbeLog {
    pub outcomes: Vec<RequestOutcome>,
    /// Requests started later than their slot because too many were in flight.
    pub late: u64,
}

pub struct Probe {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<ProbeLog>,
}

impl Probe {
    /// Starts the probe; `clock` is the proof's time origin.
    pub fn start(config: ProbeConfig, clock: Instant) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = thread::spawn(move || run(config, clock, &flag));
        Probe { stop, handle }
    }

    /// Stops starting requests, waits for those in flight (each bounded by its timeout).
    pub fn stop(self) -> ProbeLog {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_default()
    }
}

fn run(config: ProbeConfig, clock: Instant, stop: &AtomicBool) -> ProbeLog {
    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / config.rate);
    let max_requests = (config.rate * config.max_duration.as_secs_f64()).ceil() as u64 + 1;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    let mut late = 0;
    for i in 0..max_requests {
        let due = started + interval.mul_f64(i as f64);
        while Instant::now() < due {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            thread::sleep((due - Instant::now()).min(Duration::from_millis(5)));
        }
        if stop.load(Ordering::SeqCst) || started.elapsed() > config.max_duration {
            break;
        }
        let mut waited = false;
        while in_flight.load(Ordering::SeqCst) >= MAX_IN_FLIGHT
            && !stop.load(Ordering::SeqCst)
            && started.elapsed() <= config.max_duration
        {
            waited = true;
            thread::sleep(Duration::from_millis(1));
        }
        if waited {
            late += 1;
        }
        in_flight.fetch_add(1, Ordering::SeqCst);
        let (config, outcomes, in_flight) = (config.clone(), outcomes.clone(), in_flight.clone());
        workers.push(thread::spawn(move || {
            let outcome = one_request(&config, clock);
            outcomes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(outcome);
            in_flight.fetch_sub(1, Ordering::SeqCst);
        }));
        // Join the finished ones now and then so handles do not pile up.
        if workers.len() >= 256 {
            let (done, running): (Vec<_>, Vec<_>) =
                workers.into_iter().partition(|w| w.is_finished());
            for w in done {
                let _ = w.join();
            }
            workers = running;
        }
    }
    for w in workers {
        let _ = w.join();
    }
    let mut outcomes = std::mem::take(&mut *outcomes.lock().unwrap_or_else(|e| e.into_inner()));
    outcomes.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    ProbeLog { outcomes, late }
}

fn one_request(config: &ProbeConfig, clock: Instant) -> RequestOutcome {
    let start = Instant::now();
    let result = http::get(
        config.addr,
        &config.host,
        &config.path,
        config.timeouts,
        config.request_timeout,
    )
    .and_then(|r| {
        if !(200..300).contains(&r.head.status) {
            return Err(http::HttpError::new(
                Cause::Non2xx,
                format!(
                    "status {}{}",
                    r.head.status,
                    r.head
                        .header("x-version")
                        .map(|v| format!(" (x-version {v})"))
                        .unwrap_or_default()
                ),
            ));
        }
        http::version_of(&r)
    });
    RequestOutcome {
        t_ms: start.saturating_duration_since(clock).as_secs_f64() * 1000.0,
        duration_ms: start.elapsed().as_secs_f64() * 1000.0,
        result,
    }
}
