//! The fleet measured: the kit's [`FleetLab`] on the release hapctl (3 etcd members, 3 edges),
//! `e0` filled before it publishes with N domains (the fixture's, all served by one backend)
//! and 10 × N blocks of loopback sources, so a request from one of them shows the block.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hapctl::model::Block;
use testkit::fleet::FleetLab;
use testkit::Edge;

use super::probe::Probe;
use crate::blocks_load::addr;
use crate::fixture::{self, Servers};
use crate::harness::{edge_setup, BenchEdge, HttpBackend};

/// What the fixture's domains serve, and what a server change switches them to.
pub const BODY_A: &str = "fleet backend a\n";
pub const BODY_B: &str = "fleet backend b\n";
/// Blocks in the fleet per domain.
pub const BLOCKS_PER_DOMAIN: usize = 10;
/// Loopback sources per `127.SET.0.0/16` set ([`addr`]).
const PER_SET: usize = 250 * 256;
/// The first set of the fill's blocked sources.
const FILL_SET: u8 = 16;
/// Domains and blocks sampled to tell that an edge serves the whole state.
const SAMPLE: usize = 20;
/// Bound on the edges serving the whole state after the lab started.
const SETTLE: Duration = Duration::from_secs(300);
const EDGES: usize = 3;
const MEMBERS: usize = 3;

pub struct Fleet {
    pub lab: FleetLab,
    pub a: HttpBackend,
    pub b: HttpBackend,
    pub domains: usize,
    pub blocks: usize,
    /// Fill, publish, 3 daemons started, until every edge serves the sample.
    pub ready_in: Duration,
}

impl Fleet {
    /// The lab with `domains` domains and 10 × as many blocks, every edge serving them.
    pub fn start(hapctl: &Path, domains: usize) -> anyhow::Result<Fleet> {
        let a = HttpBackend::keep_alive(BODY_A)?;
        let b = HttpBackend::keep_alive(BODY_B)?;
        let blocks = domains * BLOCKS_PER_DOMAIN;
        eprintln!("fleet: {domains} domains and {blocks} blocks on e0, published, 3 edges…");
        let started = Instant::now();
        let addr_a = a.addr();
        let lab = FleetLab::try_start(&edge_setup(hapctl), MEMBERS, EDGES, |i, edge| {
            if i == 0 {
                fill(edge, domains, blocks, &addr_a)?;
            }
            Ok(())
        })?;
        let mut fleet = Fleet {
            lab,
            a,
            b,
            domains,
            blocks,
            ready_in: Duration::ZERO,
        };
        for i in 0..EDGES {
            fleet.wait_serving(fleet.lab.edge(i), started + SETTLE)?;
        }
        fleet.ready_in = started.elapsed();
        Ok(fleet)
    }

    /// Each edge's HAProxy port, e0 first.
    pub fn ports(&self) -> Vec<u16> {
        self.lab.edges.iter().map(|(e, _)| e.port).collect()
    }

    /// A request a served domain answers (the first fixture domain).
    pub fn host(&self) -> String {
        fixture::domain(0).to_string()
    }

    /// The probes of a sample of the fill: exact domains served by backend A, blocked
    /// sources refused.
    pub fn sample(&self) -> Vec<Probe> {
        let host = self.host();
        let domains = (0..SAMPLE).map(|j| {
            let i = j * self.domains / SAMPLE;
            Probe::Serves {
                host: fixture::domain(i - i % 5).to_string(),
                body: BODY_A,
            }
        });
        let blocks = (0..SAMPLE).map(|j| Probe::Blocks {
            source: fill_addr(j * self.blocks / SAMPLE + self.blocks / SAMPLE - 1),
            host: host.clone(),
        });
        domains.chain(blocks).collect()
    }

    /// Waits until `edge` serves every probe of the sample, or fails at `deadline`.
    pub fn wait_serving(&self, edge: &Edge, deadline: Instant) -> anyhow::Result<()> {
        for probe in self.sample() {
            while !probe.holds(edge.port) {
                if Instant::now() > deadline {
                    bail!("an edge on port {} never served {probe:?}", edge.port);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}

/// The fill's `i`-th blocked source, from 127.16.0.1 on.
fn fill_addr(i: usize) -> Ipv4Addr {
    addr(FILL_SET + (i / PER_SET) as u8, i % PER_SET)
}

/// Writes the domains and blocks into `edge`'s database directly (what it publishes next).
fn fill(edge: &Edge, domains: usize, blocks: usize, backend: &str) -> anyhow::Result<()> {
    edge.load(&fixture::state(domains, Servers::At(backend)))?;
    let blocked: Vec<Block> = (0..blocks).map(|i| block_of(fill_addr(i))).collect();
    edge.add_blocks(&blocked).context("the fleet's blocks")
}

/// A block of `source` as the bench writes it (no expiry).
pub fn block_of(source: Ipv4Addr) -> Block {
    crate::fixture::address_block(source, "hapctl-bench fleet")
}

impl Fleet {
    /// `hapctl fleet status --json` on `edge`.
    pub fn view(&self, edge: &Edge) -> anyhow::Result<serde_json::Value> {
        let out = edge.try_ok(&["fleet", "status", "--json"])?;
        serde_json::from_slice(&out.stdout).context("fleet status --json")
    }

    /// Polls `fleet status` on `via` until each of `names` has applied the fleet's last change
    /// (not lagging, as hapctl judges it: its applied revision is the etcd revision it read
    /// at, at or past that change); the fleet's revision, or an error at `deadline`.
    pub fn wait_at_revision(
        &self,
        via: &Edge,
        names: &[&str],
        deadline: Instant,
    ) -> anyhow::Result<i64> {
        loop {
            let view = self.view(via)?;
            let revision = view["revision"].as_i64().unwrap_or(-1);
            let at = |name: &&str| {
                view["edges"].as_array().into_iter().flatten().any(|e| {
                    e["name"] == *name
                        && e["applied_revision"]
                            .as_i64()
                            .is_some_and(|r| r >= revision)
                })
            };
            if names.iter().all(at) {
                return Ok(revision);
            }
            if Instant::now() > deadline {
                bail!("the edges {names:?} are not all at the fleet's revision {revision}: {view}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
