//! A new edge joining the fleet: `hapctl serve` on a fresh edge with `[fleet]`, timed from its
//! start until its HAProxy serves the sample of the fleet's domains and blocks, and until
//! `hapctl fleet status` shows it at the fleet's revision (status keys are rewritten every
//! few seconds, so that second time is coarser), and until its database holds as many blocks
//! as e0's (the revision is recorded before the blocks of the same batch are written).

use std::time::{Duration, Instant};

use super::lab::Fleet;
use crate::api::Api;
use crate::blocks_latency::map_size;

/// Bound on a join.
const BOUND: Duration = Duration::from_secs(300);

/// One join, each time counted from `hapctl serve`'s start.
pub struct Join {
    pub health: Duration,
    pub serving: Duration,
    pub at_revision: Duration,
    /// Until its database holds as many blocks as e0's (`None`: not within the bound).
    pub all_blocks: Option<Duration>,
    pub revision: i64,
    /// Blocks in its database at the end, and e0's.
    pub blocked: (usize, usize),
}

impl Join {
    /// Until it served the sample, was at the fleet's revision and held every block.
    pub fn whole(&self) -> Option<Duration> {
        Some(self.serving.max(self.at_revision).max(self.all_blocks?))
    }
}

pub fn join(fleet: &Fleet, name: &str) -> anyhow::Result<Join> {
    let edge = fleet.lab.try_new_edge(name)?;
    let t0 = Instant::now();
    let daemon = fleet.lab.try_serve(&edge)?;
    let health = t0.elapsed();
    fleet.wait_serving(&edge, t0 + BOUND)?;
    let serving = t0.elapsed();
    let revision = fleet.wait_at_revision(&edge, &[name], t0 + BOUND)?;
    let at_revision = t0.elapsed();
    let fleet_blocks = map_size(&Api::of(fleet.lab.daemon(0)))?;
    let mut held = map_size(&Api::of(&daemon))?;
    while held != fleet_blocks && t0.elapsed() < BOUND {
        std::thread::sleep(Duration::from_millis(20));
        held = map_size(&Api::of(&daemon))?;
    }
    let all_blocks = (held == fleet_blocks).then(|| t0.elapsed());
    drop(daemon);
    Ok(Join {
        health,
        serving,
        at_revision,
        all_blocks,
        revision,
        blocked: (held, fleet_blocks),
    })
}
