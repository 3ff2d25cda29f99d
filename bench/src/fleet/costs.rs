//! Where a write's time goes, measured on the fleet: the `haproxy -c` runs each edge made per
//! write (the counting wrapper), each edge's own apply of the fleet's change (its apply
//! records), and the etcd publication of one block by hapctl's own client.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use hapctl::fleet::object::{Object, ObjectKey};
use hapctl::fleet::FleetLink;

use super::lab::{block_of, Fleet};
use super::writes::Kind;
use crate::blocks_load::addr;
use crate::harness::open_store;

/// The loopback set of the blocks published here (never probed).
const BLOCK_SET: u8 = 80;
/// Apply records read back per edge: more than one series makes.
const RECORDS: usize = 5_000;
/// Between two publications, so the edges' applies of one do not slow the next.
const PAUSE: Duration = Duration::from_millis(200);

/// `haproxy -c` runs so far, per edge.
pub fn check_runs(fleet: &Fleet) -> Vec<usize> {
    fleet
        .lab
        .edges
        .iter()
        .map(|(e, _)| e.check_runs())
        .collect()
}

/// The durations (ms) of each edge's applies of fleet changes of `kind` (domain add and
/// server change: the block path keeps no apply record).
pub fn apply_ms(fleet: &Fleet, kind: Kind) -> anyhow::Result<Vec<Vec<f64>>> {
    let marker = match kind {
        Kind::DomainAdd => "domain/new-",
        Kind::ServerChange => "domain/app-",
        Kind::Block => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for (edge, _) in &fleet.lab.edges {
        let records = open_store(edge)?.applies(RECORDS)?;
        out.push(
            records
                .iter()
                .filter(|r| r.trigger.starts_with("fleet revision") && r.trigger.contains(marker))
                .map(|r| r.duration_ms as f64)
                .collect(),
        );
    }
    Ok(out)
}

/// `n` publications of one block through hapctl's `FleetLink` (what a writer does after it
/// judged the change), each timed, in ms.
pub fn publish_ms(fleet: &Fleet, n: usize) -> anyhow::Result<Vec<f64>> {
    let settings = fleet
        .lab
        .edge(0)
        .settings()?
        .fleet
        .context("e0 has no [fleet]")?;
    let link = FleetLink::connect(&settings)?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let block = block_of(addr(BLOCK_SET, i));
        let change = (ObjectKey::Block(block.key), Some(Object::Block(block)));
        let t = Instant::now();
        // Blocks are not compared with a basis: 0 will do.
        link.publish(0, &[change], 1_700_000_000)?;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
        thread::sleep(PAUSE);
    }
    Ok(out)
}
