//! The etcd leader killed during concurrent writes (block adds and domain puts from 12
//! client threads over the 3 edges' APIs): which writes were acknowledged, whether each is
//! in etcd and in effect on every edge afterwards, and whether the edges agree on the
//! fleet's revision. The killed member is started again once the writes are over.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::lab::{Fleet, BODY_A};
use super::probe::{wait_each, Probe};
use super::writes::{block, put_domain, Write};
use crate::api::Api;

const THREADS: usize = 12;
/// The loopback set of the blocks written here.
const BLOCK_SET: u8 = 48;
/// Bound on the edges agreeing after the writes.
const CONVERGE: Duration = Duration::from_secs(120);
/// Bound on an acknowledged write showing on an edge that did not show it at once.
const SHOW: Duration = Duration::from_secs(5);

/// One write's fate.
struct Outcome {
    k: usize,
    /// The HTTP status, or the transport error.
    answer: Result<u16, String>,
    sent: Instant,
    answered: Instant,
}

pub struct LeaderKill {
    pub writes: usize,
    pub acked: usize,
    /// Writes not acknowledged, by what they got.
    pub refused: BTreeMap<String, usize>,
    /// Acknowledged writes missing from etcd, or not in effect on some edge.
    pub lost: Vec<String>,
    pub acked_at_kill: usize,
    /// Kill → the first acknowledgement of a write sent after it.
    pub recovered: Option<Duration>,
    /// The longest time without any acknowledgement, around the kill.
    pub longest_gap: Duration,
    /// Last answer → every edge at the fleet's revision (with the member back).
    pub converged: Duration,
    pub revision: i64,
}

/// The `k`-th write: every 5th a domain put, the others blocks.
fn write_of(fleet: &Fleet, k: usize) -> Write {
    if k.is_multiple_of(5) {
        put_domain(format!("lk-{k}.fleet.test"), &fleet.a.addr(), BODY_A)
    } else {
        block(BLOCK_SET, k, fleet.host())
    }
}

pub fn run(fleet: &mut Fleet, writes: usize) -> anyhow::Result<LeaderKill> {
    let apis: Vec<Api> = fleet.lab.edges.iter().map(|(_, d)| Api::of(d)).collect();
    let list: Vec<Write> = (0..writes).map(|k| write_of(fleet, k)).collect();
    let acked = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::with_capacity(writes));
    let kill_when = writes * 3 / 10;
    let (killed, killed_at, acked_at_kill) = thread::scope(|s| {
        for t in 0..THREADS {
            let (apis, list, acked, outcomes) = (&apis, &list, &acked, &outcomes);
            s.spawn(move || {
                for k in (t..list.len()).step_by(THREADS) {
                    let o = send(&apis[k % apis.len()], &list[k], k);
                    if o.answer == Ok(200) || o.answer == Ok(201) {
                        acked.fetch_add(1, Ordering::SeqCst);
                    }
                    outcomes.lock().expect("not poisoned").push(o);
                }
            });
        }
        while acked.load(Ordering::SeqCst) < kill_when {
            thread::sleep(Duration::from_millis(1));
        }
        let leader = fleet.lab.etcd.leader();
        let at = acked.load(Ordering::SeqCst);
        fleet.lab.etcd.kill(leader);
        (leader, Instant::now(), at)
    });
    let outcomes = outcomes.into_inner().expect("not poisoned");
    let last_answer = outcomes
        .iter()
        .map(|o| o.answered)
        .max()
        .unwrap_or(killed_at);
    fleet.lab.etcd.restart(killed);
    fleet.lab.etcd.wait_healthy();
    let names = ["e0", "e1", "e2"];
    let revision = fleet.wait_at_revision(fleet.lab.edge(0), &names, last_answer + CONVERGE)?;
    let converged = last_answer.elapsed();
    let acked: Vec<&Outcome> = outcomes.iter().filter(|o| is_ack(o)).collect();
    let lost = lost_writes(fleet, &list, &acked)?;
    Ok(LeaderKill {
        writes,
        acked: acked.len(),
        refused: refused(&outcomes),
        lost,
        acked_at_kill,
        recovered: acked
            .iter()
            .filter(|o| o.sent > killed_at)
            .map(|o| o.answered - killed_at)
            .min(),
        longest_gap: longest_gap(&acked),
        converged,
        revision,
    })
}

fn send(api: &Api, w: &Write, k: usize) -> Outcome {
    let sent = Instant::now();
    let answer = api
        .call(w.method, &w.path, Some(&w.body))
        .map(|a| a.status)
        .map_err(|e| format!("{e:#}"));
    Outcome {
        k,
        answer,
        sent,
        answered: Instant::now(),
    }
}

fn is_ack(o: &Outcome) -> bool {
    matches!(o.answer, Ok(s) if (200..300).contains(&s))
}

fn refused(outcomes: &[Outcome]) -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    for o in outcomes.iter().filter(|o| !is_ack(o)) {
        let what = match &o.answer {
            Ok(status) => status.to_string(),
            Err(_) => "no answer".to_string(),
        };
        *by.entry(what).or_insert(0) += 1;
    }
    by
}

fn longest_gap(acked: &[&Outcome]) -> Duration {
    let mut times: Vec<Instant> = acked.iter().map(|o| o.answered).collect();
    times.sort();
    times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// The acknowledged writes whose key is not in etcd or that some edge does not show.
fn lost_writes(fleet: &Fleet, list: &[Write], acked: &[&Outcome]) -> anyhow::Result<Vec<String>> {
    let keys = etcd_keys(fleet)?;
    let edges = fleet.ports();
    let mut lost = Vec::new();
    for o in acked {
        let w = &list[o.k];
        let key = match &w.probe {
            Probe::Serves { host, .. } => format!("{}/state/domain/{host}", fleet.lab.prefix),
            Probe::Blocks { source, .. } => format!("{}/state/block/{source}", fleet.lab.prefix),
        };
        if !keys.contains(&key) && !keys.contains(&format!("{key}/32")) {
            lost.push(format!("{} {}: not in etcd", w.method, w.path));
        } else if wait_each(&edges, &w.probe, Instant::now(), SHOW)
            .iter()
            .any(Option::is_none)
        {
            lost.push(format!(
                "{} {}: not in effect on every edge",
                w.method, w.path
            ));
        }
    }
    Ok(lost)
}

/// Every key under the fleet's state prefix.
fn etcd_keys(fleet: &Fleet) -> anyhow::Result<BTreeSet<String>> {
    let prefix = format!("{}/state/", fleet.lab.prefix);
    let out = fleet
        .lab
        .etcd
        .etcdctl(&["get", &prefix, "--prefix", "--keys-only"]);
    if !out.status.success() {
        bail!("etcdctl get {prefix}: {}", crate::sys::describe(&out));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}
