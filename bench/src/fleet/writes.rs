//! A write on one edge → in effect on all 3: a domain add, a server change, a block, each
//! written on e0, e1, e2 in turn, timed from sending it to the first answer through each
//! edge's HAProxy that shows it (probed while the request is in flight).

use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{json, Value};

use super::lab::{Fleet, BODY_A, BODY_B};
use super::probe::{last, wait_each, Probe};
use crate::api::Api;
use crate::blocks_load::{addr, block_body};
use crate::fixture;

/// Bound on one write reaching every edge.
const BOUND: Duration = Duration::from_secs(15);
/// The loopback set of the blocks written here.
const BLOCK_SET: u8 = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    DomainAdd,
    ServerChange,
    Block,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::DomainAdd, Kind::ServerChange, Kind::Block];

    pub fn label(self) -> &'static str {
        match self {
            Kind::DomainAdd => "domain add",
            Kind::ServerChange => "server change",
            Kind::Block => "block",
        }
    }
}

/// One write timed: the writer's answer, and when each edge first showed it.
pub struct Sample {
    pub answer: Duration,
    pub seen: Vec<Option<Duration>>,
}

impl Sample {
    pub fn last(&self) -> Option<Duration> {
        last(&self.seen)
    }
}

/// A write: method, path, body, and the probe that shows it.
pub struct Write {
    pub method: &'static str,
    pub path: String,
    pub body: Value,
    pub probe: Probe,
}

/// The `k`-th write of `kind`.
pub fn write(fleet: &Fleet, kind: Kind, k: usize) -> Write {
    match kind {
        Kind::DomainAdd => put_domain(format!("new-{k}.fleet.test"), &fleet.a.addr(), BODY_A),
        Kind::ServerChange => {
            // Every 20th fixture domain from 1 (exact, the default profile, never in the
            // sample) switches to B, and back to A on the next pass.
            let pool = (fleet.domains / 20).max(1);
            let host = fixture::domain(20 * (k % pool) + 1).to_string();
            if (k / pool).is_multiple_of(2) {
                put_domain(host, &fleet.b.addr(), BODY_B)
            } else {
                put_domain(host, &fleet.a.addr(), BODY_A)
            }
        }
        Kind::Block => block(BLOCK_SET, k, fleet.host()),
    }
}

/// `PUT /v1/domains/{host}` with one server at `addr`, unchecked like the fixture's (a change
/// of a server's options other than its address and weight is one only a reload loads).
pub fn put_domain(host: String, addr: &str, body: &'static str) -> Write {
    Write {
        method: "PUT",
        path: format!("/v1/domains/{host}"),
        body: json!({ "servers": [{ "address": addr, "check": false }] }),
        probe: Probe::Serves { host, body },
    }
}

/// `POST /v1/blocked-ips` of the `k`-th source of loopback set `set`.
pub fn block(set: u8, k: usize, host: String) -> Write {
    let source = addr(set, k);
    Write {
        method: "POST",
        path: "/v1/blocked-ips".into(),
        body: block_body(source),
        probe: Probe::Blocks { source, host },
    }
}

/// `runs` writes of `kind`, on e0, e1, e2 in turn.
pub fn series(fleet: &Fleet, kind: Kind, runs: usize) -> anyhow::Result<Vec<Sample>> {
    let edges = fleet.ports();
    let mut out = Vec::with_capacity(runs);
    for k in 0..runs {
        let w = write(fleet, kind, k);
        let api = Api::of(fleet.lab.daemon(k % edges.len()));
        let t0 = Instant::now();
        let (answer, answered, seen) = thread::scope(|s| {
            let call = s.spawn(|| {
                let answer = api.call(w.method, &w.path, Some(&w.body));
                (answer, t0.elapsed())
            });
            let seen = wait_each(&edges, &w.probe, t0, BOUND);
            let (answer, answered) = call.join().expect("the write's thread does not panic");
            (answer, answered, seen)
        });
        let answer = answer?;
        if !(200..300).contains(&answer.status) {
            bail!(
                "{} {} on e{}: {}",
                w.method,
                w.path,
                k % edges.len(),
                answer.describe()
            );
        }
        out.push(Sample {
            answer: answered,
            seen,
        });
    }
    Ok(out)
}
