//! A real edge to measure: the kit's [`Edge`] made for the release hapctl binary, with a
//! counting wrapper in front of haproxy and the workers' user `hapctl init` picks, plus what
//! only benchmarks do on it: fill its database directly and time its pieces.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;
use hapctl::model::{Block, EdgeState};
use hapctl::process::run_with_timeout;
use hapctl::store::Store;
use testkit::{Edge, EdgeSetup};

use crate::stats::Summary;
use crate::sys;

pub use testkit::Backend as HttpBackend;

/// Bound on every hapctl command the harness runs (a 10,000-domain start included).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// `hapctl init` with the `hapctl` binary in a fresh temp dir, every listener on a free
/// loopback port; HAProxy not started.
pub fn new_edge(hapctl: &Path) -> anyhow::Result<Edge> {
    Edge::try_new(&edge_setup(hapctl))
}

/// How the bench's edges are made: the `hapctl` binary, the counting wrapper, the workers'
/// user `hapctl init` picks, [`COMMAND_TIMEOUT`] per command.
pub fn edge_setup(hapctl: &Path) -> EdgeSetup {
    EdgeSetup {
        hapctl: hapctl.to_path_buf(),
        counting: true,
        root_workers: false,
        command_timeout: COMMAND_TIMEOUT,
    }
}

/// What benchmarks do to an edge besides driving hapctl.
pub trait BenchEdge {
    /// Writes `state` into the database directly (no apply runs): the domains and proxies in
    /// one transaction, the blocks (their own database file) in another.
    fn load(&self, state: &EdgeState) -> anyhow::Result<()>;
    /// Inserts blocks straight into the blocks database, in one transaction.
    fn add_blocks(&self, blocks: &[Block]) -> anyhow::Result<()>;
    /// Times `Store::load_state` (what every apply does first) on this edge's database.
    fn time_load_state(&self, times: usize) -> anyhow::Result<Summary>;
    /// One `haproxy -c` of the live set with the real binary (not counted), in ms.
    fn time_haproxy_check(&self) -> anyhow::Result<f64>;
}

impl BenchEdge for Edge {
    fn load(&self, state: &EdgeState) -> anyhow::Result<()> {
        let mut store = open_store(self)?;
        let tx = store.begin()?;
        for (domain, backend) in &state.domains {
            tx.put_domain(domain, backend, 1_700_000_000)?;
        }
        for net in &state.trusted_proxies {
            tx.add_trusted_proxy(net)?;
        }
        tx.commit()?;
        drop(store);
        self.add_blocks(&crate::fixture::blocks())
    }

    fn add_blocks(&self, blocks: &[Block]) -> anyhow::Result<()> {
        let mut store = open_store(self)?;
        let tx = store.begin_blocks()?;
        for block in blocks {
            tx.put_block(block)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn time_load_state(&self, times: usize) -> anyhow::Result<Summary> {
        let store = open_store(self)?;
        let mut samples = Vec::new();
        for _ in 0..times.max(1) {
            let t = Instant::now();
            std::hint::black_box(store.load_state()?);
            samples.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(Summary::of(&samples).expect("at least one sample"))
    }

    fn time_haproxy_check(&self) -> anyhow::Result<f64> {
        let paths = self.settings()?.paths;
        let mut cmd = Command::new(testkit::haproxy_bin());
        cmd.args(["-c", "-q", "-f"])
            .arg(&paths.config)
            .arg("-f")
            .arg(&paths.generation);
        let t = Instant::now();
        let out = run_with_timeout(&mut cmd, COMMAND_TIMEOUT)?;
        let elapsed = t.elapsed().as_secs_f64() * 1000.0;
        if !out.status.success() {
            bail!("haproxy -c on the live set failed: {}", sys::describe(&out));
        }
        Ok(elapsed)
    }
}

pub fn open_store(edge: &Edge) -> anyhow::Result<Store> {
    let paths = edge.settings()?.paths;
    Ok(Store::open(&paths.database, &paths.blocks_database)?)
}
