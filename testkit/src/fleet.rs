//! A fleet under test: a real etcd cluster and edges (each its own state dir, HAProxy and
//! `hapctl serve`) sharing one desired state; the first edge published it.

use std::time::{Duration, Instant};

use anyhow::Context;

use crate::daemon::{Daemon, Serve};
use crate::etcd::EtcdCluster;
use crate::{Edge, EdgeSetup};

pub struct FleetLab {
    pub etcd: EtcdCluster,
    /// Each edge and its daemon, in the order they joined (`e0` published the state).
    pub edges: Vec<(Edge, Daemon)>,
    pub prefix: String,
    /// How every edge of the lab is made (the tests' binary, or a benchmark's).
    setup: EdgeSetup,
}

/// Every daemon stops before any edge's folder goes: a daemon that outlived its edge restarted
/// the HAProxy the edge had stopped, which then outlived the test.
impl Drop for FleetLab {
    fn drop(&mut self) {
        for (_, daemon) in &mut self.edges {
            daemon.stop();
        }
    }
}

impl FleetLab {
    /// `members` etcd members and `edges` edges; `e0` publishes its (fresh) state first.
    pub fn start(members: usize, edges: usize) -> FleetLab {
        FleetLab::start_with(members, edges, |_, _| {})
    }

    /// [`FleetLab::start`], with `setup` run on each edge (its index given) before its daemon
    /// starts.
    pub fn start_with(members: usize, edges: usize, setup: impl Fn(usize, &mut Edge)) -> FleetLab {
        let prepare = |i: usize, edge: &mut Edge| {
            setup(i, edge);
            Ok(())
        };
        FleetLab::try_start(&EdgeSetup::for_tests(), members, edges, prepare)
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// [`FleetLab::start_with`] for a benchmark: every edge made with `setup` (its daemon
    /// given `setup.command_timeout` to answer `/health`), `prepare` may fail.
    pub fn try_start(
        setup: &EdgeSetup,
        members: usize,
        edges: usize,
        prepare: impl Fn(usize, &mut Edge) -> anyhow::Result<()>,
    ) -> anyhow::Result<FleetLab> {
        let etcd = EtcdCluster::start(members);
        let mut lab = FleetLab {
            etcd,
            edges: Vec::new(),
            prefix: "/hapctl".to_string(),
            setup: setup.clone(),
        };
        for i in 0..edges {
            let mut edge = lab.try_new_edge(&format!("e{i}"))?;
            prepare(i, &mut edge)?;
            if i == 0 {
                edge.try_ok(&["fleet", "publish"])?;
            }
            let daemon = lab.try_serve(&edge)?;
            lab.edges.push((edge, daemon));
        }
        Ok(lab)
    }

    /// Waits until every edge has applied the fleet's last change (its record committed, not
    /// only its HAProxy serving it: a daemon killed before the commit loses the change, which
    /// its follower reads again at the next start).
    pub fn wait_current(&self, within: Duration) {
        self.wait_all(within, |_, _| {
            let view = self.status(0);
            let edges = view["edges"].as_array().cloned().unwrap_or_default();
            let current =
                edges.len() == self.edges.len() && edges.iter().all(|e| e["lagging"] == false);
            current.then_some(()).ok_or_else(|| view.to_string())
        });
    }

    /// A port for `[fleet] peer`, from a range no other listener of the kit probes.
    pub fn peer_port() -> u16 {
        crate::free_port_in(32_000, 700)
    }

    /// A fresh edge with this fleet's `[fleet]` section, its daemon not started.
    pub fn new_edge(&self, name: &str) -> Edge {
        self.try_new_edge(name).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// [`FleetLab::new_edge`], an error when `hapctl init` fails.
    pub fn try_new_edge(&self, name: &str) -> anyhow::Result<Edge> {
        let edge = Edge::try_new(&self.setup)?;
        edge.write_settings(&format!(
            "{}\n[fleet]\nendpoints = {}\nname = \"{name}\"\ntimeout = \"1s\"\n",
            edge.settings_text(),
            self.etcd.endpoints_toml()
        ));
        Ok(edge)
    }

    /// `hapctl serve` on `edge`, answering `/health` within the lab's command bound.
    pub fn try_serve(&self, edge: &Edge) -> anyhow::Result<Daemon> {
        Daemon::try_start(edge, &Serve::within(self.setup.command_timeout))
            .context("hapctl serve on an edge of the fleet")
    }

    /// A new edge joins: its `[fleet]` section, then its daemon, which takes the fleet's
    /// state. Its index.
    pub fn join(&mut self, name: &str) -> usize {
        let edge = self.new_edge(name);
        let daemon = Daemon::start(&edge);
        self.edges.push((edge, daemon));
        self.edges.len() - 1
    }

    /// Starts edge `i`'s daemon again (after its `kill`).
    pub fn restart_daemon(&mut self, i: usize) {
        let daemon = Daemon::start(&self.edges[i].0);
        self.edges[i].1 = daemon;
    }

    pub fn edge(&self, i: usize) -> &Edge {
        &self.edges[i].0
    }

    pub fn daemon(&self, i: usize) -> &Daemon {
        &self.edges[i].1
    }

    /// `hapctl fleet status --json` on edge `i`.
    pub fn status(&self, i: usize) -> serde_json::Value {
        let out = self.edge(i).ok(&["fleet", "status", "--json"]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("fleet status: {e}: {out}"))
    }

    /// Waits until `check` holds on every edge (each edge's index given), or panics after
    /// `within` with what the last check said.
    pub fn wait_all(&self, within: Duration, check: impl Fn(usize, &Edge) -> Result<(), String>) {
        let deadline = Instant::now() + within;
        for i in 0..self.edges.len() {
            loop {
                match check(i, self.edge(i)) {
                    Ok(()) => break,
                    Err(why) if Instant::now() > deadline => {
                        panic!(
                            "edge e{i} after {within:?}: {why}\n{}",
                            self.daemon(i).log_text()
                        )
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
    }
}

/// Short requests spread over several edges (round robin, a new connection each, at a steady
/// rate) from a thread, counting those that fail, until [`SpreadProbe::stop`].
pub struct SpreadProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<ProbeCount>,
}

/// What a [`SpreadProbe`] saw.
#[derive(Debug, Default)]
pub struct ProbeCount {
    pub sent: usize,
    /// Each failed request: the edge's port and what went wrong (an error or the status).
    pub failed: Vec<(u16, String)>,
    /// The bodies answered, and how often.
    pub bodies: std::collections::BTreeMap<String, usize>,
}

impl SpreadProbe {
    /// Starts `rate` requests per second for `host` over the edges at `ports`.
    pub fn start(ports: Vec<u16>, host: &str, rate: u32) -> SpreadProbe {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let host = host.to_string();
        let every = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
        let handle = std::thread::spawn(move || {
            let mut count = ProbeCount::default();
            let started = Instant::now();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let port = ports[count.sent % ports.len()];
                match crate::try_http_get(None, port, &host, "/", &[]) {
                    Ok(r) if r.status == 200 => *count.bodies.entry(r.body).or_default() += 1,
                    Ok(r) => count.failed.push((port, format!("status {}", r.status))),
                    Err(e) => count.failed.push((port, e)),
                }
                count.sent += 1;
                let next = started + every * count.sent as u32;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            count
        });
        SpreadProbe { stop, handle }
    }

    pub fn stop(self) -> ProbeCount {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().expect("the probe thread")
    }
}

/// The fleet key of a lab, prepared in [`FleetLab`]'s setup (e0 first): e0 makes it
/// (`hapctl fleet key`), the others get a copy, as an operator does.
#[derive(Default)]
pub struct SharedKey(std::sync::Mutex<Option<String>>);

impl SharedKey {
    /// Prepares edge `i`.
    pub fn prepare(&self, i: usize, edge: &Edge) -> anyhow::Result<()> {
        let mut key = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match key.as_deref() {
            None if i == 0 => {
                edge.try_ok(&["fleet", "key"])?;
                *key = Some(std::fs::read_to_string(edge.path("fleet.key"))?);
            }
            None => anyhow::bail!("e0 is prepared first: it makes the fleet key"),
            Some(text) => write_fleet_key(edge, text)?,
        }
        Ok(())
    }
}

/// What each edge of a lab that orders certificates needs, prepared in [`FleetLab`]'s setup
/// (e0 first): `[acme]` pointing at one Pebble that validates HTTP-01 on e0's HTTP bind, and
/// the [`SharedKey`].
#[derive(Default)]
pub struct AcmeFleet {
    pebble: std::sync::Mutex<Option<crate::pebble::Pebble>>,
    key: SharedKey,
}

impl AcmeFleet {
    /// Prepares edge `i`.
    pub fn prepare(&self, i: usize, edge: &Edge) -> anyhow::Result<()> {
        let mut pebble = self.pebble.lock().unwrap_or_else(|e| e.into_inner());
        let p = pebble.get_or_insert_with(|| crate::pebble::Pebble::start(edge.port));
        // A copy: Pebble's folder goes with it.
        let ca_root = edge.path("pebble-tls-ca.pem");
        std::fs::copy(p.ca_root_path(), &ca_root)?;
        edge.set_acme(&p.directory_url(), &ca_root, None);
        self.key.prepare(i, edge)
    }

    /// The Pebble the edges order from (its log counts what it issued).
    pub fn into_pebble(self) -> crate::pebble::Pebble {
        let pebble = self.pebble.into_inner().unwrap_or_else(|e| e.into_inner());
        pebble.expect("no edge was prepared")
    }
}

/// Copies the fleet key file `from` made to `to` (mode 0600), as an operator does.
pub fn copy_fleet_key(from: &Edge, to: &Edge) -> anyhow::Result<()> {
    write_fleet_key(to, &std::fs::read_to_string(from.path("fleet.key"))?)
}

fn write_fleet_key(edge: &Edge, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = edge.path("fleet.key");
    std::fs::write(&path, text)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}
