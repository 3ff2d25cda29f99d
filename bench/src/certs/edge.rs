//! certs: an edge with its HTTPS bind, and what a handshake through it is served.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use hapctl::tls::probe;
use hapctl::tls::x509::{serial_matches, CertInfo};
use testkit::Edge;

use crate::harness::new_edge;

/// Bound on one handshake (connect, each read and write).
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) struct TlsEdge {
    pub(super) edge: Edge,
    pub(super) https: SocketAddr,
    /// Certificate name → the serial installed now.
    pub(super) serials: BTreeMap<String, String>,
}

/// The serial a handshake with `sni` sees, if the handshake works.
pub(super) fn served_serial(addr: SocketAddr, sni: &str) -> Result<String, String> {
    let served = probe::handshake(addr, sni, HANDSHAKE_TIMEOUT).map_err(|e| e.to_string())?;
    let leaf = served.chain.first().ok_or("no certificate presented")?;
    CertInfo::from_der(leaf)
        .map(|i| i.serial)
        .map_err(|e| e.to_string())
}

impl TlsEdge {
    /// `hapctl init` in a temp dir, its `[edge] https_bind` on a free loopback port (never
    /// the built-in 8443; see `new_edge`). HAProxy not started.
    pub(super) fn init(hapctl: &Path) -> anyhow::Result<TlsEdge> {
        let edge = new_edge(hapctl)?;
        let https = edge.https_addr();
        Ok(TlsEdge {
            edge,
            https,
            serials: BTreeMap::new(),
        })
    }

    pub(super) fn reloads(&self) -> anyhow::Result<u32> {
        Ok(self.edge.try_show_proc()?.master.reloads)
    }

    /// The PIDs of the current workers.
    pub(super) fn worker_pids(&self) -> anyhow::Result<Vec<i32>> {
        Ok(self
            .edge
            .try_show_proc()?
            .workers
            .iter()
            .map(|w| w.pid)
            .collect())
    }

    /// Waits (bounded) until a handshake with `sni` presents `serial` (any serial if `None`).
    pub(super) fn wait_served(
        &self,
        sni: &str,
        serial: Option<&str>,
        bound: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + bound;
        loop {
            let last = match served_serial(self.https, sni) {
                Ok(s) if serial.is_none_or(|want| serial_matches(&s, want)) => return Ok(()),
                Ok(s) => format!("serial {s}"),
                Err(e) => e,
            };
            if Instant::now() > deadline {
                bail!("a handshake with SNI {sni} is not served as expected within {bound:?}; last: {last}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}
