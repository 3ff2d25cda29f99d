//! A new edge joining the fleet: `hapctl serve` on a fresh edge with `[fleet]`, timed from its
//! start until its HAProxy serves the sample of the fleet's domains and blocks, and until
//! `hapctl fleet status` shows it at the fleet's revision (status keys are rewritten every
//! few seconds, so that second time is coarser).

use std::time::{Duration, Instant};

use anyhow::bail;

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
    pub revision: i64,
    /// Blocks in its database once it serves, and e0's.
    pub blocked: (usize, usize),
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
    let blocked = (
        map_size(&Api::of(&daemon))?,
        map_size(&Api::of(fleet.lab.daemon(0)))?,
    );
    if blocked.0 != blocked.1 {
        bail!("{name} holds {} blocks, e0 {}", blocked.0, blocked.1);
    }
    drop(daemon);
    Ok(Join {
        health,
        serving,
        at_revision,
        revision,
        blocked,
    })
}
