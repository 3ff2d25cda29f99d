//! fleet: the targets of a fleet of edges on etcd (issue 33), on the kit's fleet lab with the
//! release hapctl: 3 etcd members, 3 edges, N domains (the largest of `--sizes`) and 10 × N
//! blocks published from e0. In that order: a write on one edge → in effect on all 3 (domain
//! add, server change, block); a new edge joining; the etcd leader killed during concurrent
//! writes; etcd entirely down under traffic.

mod costs;
mod join;
mod lab;
mod leader;
mod outage;
mod probe;
mod report;
mod writes;

use std::time::Duration;

use crate::{Ctx, Report};
use lab::Fleet;

/// Writes per kind for the write → in effect series, unless `--runs`.
const RUNS: usize = 100;
/// New edges joined one after the other.
const JOINS: usize = 2;
/// Publications of one block timed on their own.
const PUBLISHES: usize = 50;

/// One series of writes and what it cost on the edges.
pub struct Series {
    pub kind: writes::Kind,
    pub samples: Vec<writes::Sample>,
    /// `haproxy -c` runs per write, per edge.
    pub checks_per_write: Vec<f64>,
    /// Each edge's apply durations (ms) of this series' changes (none for blocks).
    pub apply_ms: Vec<Vec<f64>>,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let hapctl = ctx.hapctl_bin()?;
    let domains = *ctx.sizes.iter().max().expect("--sizes is not empty");
    let mut fleet = Fleet::start(&hapctl, domains)?;
    let runs = ctx.runs.unwrap_or(RUNS);
    let mut series = Vec::new();
    for kind in writes::Kind::ALL {
        eprintln!("fleet: {runs} × {} → in effect on 3 edges…", kind.label());
        let before = costs::check_runs(&fleet);
        let samples = writes::series(&fleet, kind, runs)?;
        let checks_per_write = costs::check_runs(&fleet)
            .iter()
            .zip(&before)
            .map(|(after, before)| (after - before) as f64 / runs as f64)
            .collect();
        let apply_ms = costs::apply_ms(&fleet, kind)?;
        series.push(Series {
            kind,
            samples,
            checks_per_write,
            apply_ms,
        });
    }
    eprintln!("fleet: {PUBLISHES} publications of a block through hapctl's etcd client…");
    let publish_ms = costs::publish_ms(&fleet, PUBLISHES)?;
    let mut joins = Vec::new();
    for j in 0..JOINS {
        eprintln!("fleet: a new edge joins…");
        joins.push(join::join(&fleet, &format!("joiner{j}"))?);
    }
    eprintln!(
        "fleet: the etcd leader killed during {} writes…",
        ctx.fleet_writes
    );
    let killed = leader::run(&mut fleet, ctx.fleet_writes)?;
    eprintln!("fleet: etcd down for {} s under traffic…", ctx.outage_secs);
    let outage = outage::run(&mut fleet, Duration::from_secs(ctx.outage_secs))?;
    Ok(report::report(
        &fleet,
        &series,
        &publish_ms,
        &joins,
        &killed,
        &outage,
    ))
}
