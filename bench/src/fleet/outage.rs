//! etcd entirely down under traffic: a load loop through the 3 edges' HAProxy the whole time
//! (the sample of the fleet's domains and blocks, each answer checked), a write every second
//! on e0, e1, e2 in turn while etcd is down (each must be refused with 503 and the message that
//! etcd is unreachable), then the time from etcd healthy again to a write made on one edge
//! being in effect on all 3.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::lab::{Fleet, BODY_A};
use super::probe::{last, wait_each, Probe};
use super::writes::{block, put_domain, Write};
use crate::api::Api;

/// The loopback set of the blocks written here.
const BLOCK_SET: u8 = 64;
/// What a refused write's message must say.
const UNREACHABLE: &str = "etcd is unreachable";
/// Bound on the write after etcd's return reaching every edge.
const CATCH_UP: Duration = Duration::from_secs(30);
/// Traffic before the outage and after the catch-up.
const MARGIN: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Outage {
    pub requests: usize,
    pub failed: usize,
    pub first_failure: Option<String>,
    pub writes: usize,
    /// Writes answered 503 with the message.
    pub refused_as_expected: usize,
    /// What the others got.
    pub unexpected: Vec<String>,
    /// The slowest refusal.
    pub slowest_refusal: Duration,
    /// etcd healthy → the catch-up write acknowledged, and in effect on all 3.
    pub accepted: Duration,
    pub caught_up: Option<Duration>,
    /// Tries of the catch-up write refused after etcd was healthy.
    pub retries: usize,
}

/// Traffic through every edge until `stop`: requests and failures counted.
struct Load {
    stop: AtomicBool,
    requests: AtomicUsize,
    failed: AtomicUsize,
    first_failure: Mutex<Option<String>>,
}

impl Load {
    /// Cycles through `probes` on the edge whose HAProxy listens on `port`.
    fn run(&self, probes: &[Probe], port: u16) {
        for probe in probes.iter().cycle() {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            self.requests.fetch_add(1, Ordering::SeqCst);
            if !probe.holds(port) {
                self.failed.fetch_add(1, Ordering::SeqCst);
                let mut first = self.first_failure.lock().expect("not poisoned");
                first.get_or_insert_with(|| format!("port {port}: {probe:?}"));
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

pub fn run(fleet: &mut Fleet, down_for: Duration) -> anyhow::Result<Outage> {
    let load = Load {
        stop: AtomicBool::new(false),
        requests: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
        first_failure: Mutex::new(None),
    };
    let probes = fleet.sample();
    let ports = fleet.ports();
    let mut outage = thread::scope(|s| {
        for port in ports {
            let (load, probes) = (&load, &probes);
            s.spawn(move || load.run(probes, port));
        }
        thread::sleep(MARGIN);
        let result = without_etcd(fleet, down_for);
        thread::sleep(MARGIN);
        load.stop.store(true, Ordering::SeqCst);
        result
    })?;
    outage.requests = load.requests.load(Ordering::SeqCst);
    outage.failed = load.failed.load(Ordering::SeqCst);
    outage.first_failure = load.first_failure.into_inner().expect("not poisoned");
    Ok(outage)
}

/// etcd stopped, writes refused meanwhile, etcd started again and a write caught up.
fn without_etcd(fleet: &mut Fleet, down_for: Duration) -> anyhow::Result<Outage> {
    let mut outage = Outage::default();
    fleet.lab.etcd.stop_all();
    let down = Instant::now();
    let mut k = 0;
    while down.elapsed() < down_for {
        let w = outage_write(fleet, k);
        let api = Api::of(fleet.lab.daemon(k % fleet.lab.edges.len()));
        let t = Instant::now();
        let answer = api.call(w.method, &w.path, Some(&w.body))?;
        outage.slowest_refusal = outage.slowest_refusal.max(t.elapsed());
        outage.writes += 1;
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if answer.status == 503 && message.contains(UNREACHABLE) {
            outage.refused_as_expected += 1;
        } else {
            outage
                .unexpected
                .push(format!("{} {}: {}", w.method, w.path, answer.describe()));
        }
        k += 1;
        thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
    }
    fleet.lab.etcd.start_all();
    let healthy = Instant::now();
    let w = block(BLOCK_SET, 10_000, fleet.host());
    let api = Api::of(fleet.lab.daemon(1));
    let (accepted, retries, seen) = thread::scope(|s| {
        let writer = s.spawn(|| write_until_accepted(&api, &w));
        let seen = wait_each(&fleet.ports(), &w.probe, healthy, CATCH_UP);
        let (accepted, retries) = writer.join().expect("the writer does not panic");
        (accepted, retries, seen)
    });
    outage.accepted = accepted?.duration_since(healthy);
    outage.retries = retries;
    outage.caught_up = last(&seen);
    Ok(outage)
}

/// The `k`-th write during the outage: blocks and domain puts alternating.
fn outage_write(fleet: &Fleet, k: usize) -> Write {
    if k.is_multiple_of(2) {
        block(BLOCK_SET, k, fleet.host())
    } else {
        put_domain(format!("down-{k}.fleet.test"), &fleet.a.addr(), BODY_A)
    }
}

/// Sends `w` until it is acknowledged (bounded); when it was, and how many tries were refused.
fn write_until_accepted(api: &Api, w: &Write) -> (anyhow::Result<Instant>, usize) {
    let started = Instant::now();
    let mut retries = 0;
    loop {
        match api.call(w.method, &w.path, Some(&w.body)) {
            Ok(a) if (200..300).contains(&a.status) => return (Ok(Instant::now()), retries),
            Ok(_) | Err(_) if started.elapsed() < CATCH_UP => retries += 1,
            Ok(a) => {
                return (
                    Err(anyhow::anyhow!("{}: {}", w.path, a.describe())),
                    retries,
                )
            }
            Err(e) => return (Err(e), retries),
        }
        thread::sleep(Duration::from_millis(10));
    }
}
