//! The edges of a fleet as HAProxy's `peers` section sees them: who shares the client tables
//! with whom. Local to each edge (its own address is its bind), never part of the fleet's
//! shared state.

use std::net::SocketAddr;

use super::bounded;

/// An edge's name in the fleet: 1–63 of `a-z 0-9 - _ .`, so it is safe in a key and a log.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EdgeName(String);

impl EdgeName {
    pub fn parse(text: &str) -> Result<EdgeName, String> {
        let ok = (1..=63).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
        if ok {
            Ok(EdgeName(text.to_string()))
        } else {
            Err(format!(
                "{:?} is not an edge name: 1 to 63 of a-z, 0-9, '-', '_', '.'",
                bounded(text)
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EdgeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The `peers` section of an edge of a fleet: this edge, and every edge (this one included)
/// with the address its HAProxy listens on for peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetPeers {
    pub local: EdgeName,
    /// In name order, each name once; contains `local`.
    pub peers: Vec<(EdgeName, SocketAddr)>,
}

impl FleetPeers {
    /// The peers of `local`, which must be among them (with the address it binds).
    pub fn new(local: EdgeName, mut peers: Vec<(EdgeName, SocketAddr)>) -> Option<FleetPeers> {
        peers.sort();
        peers.dedup_by(|a, b| a.0 == b.0);
        peers
            .iter()
            .any(|(n, _)| *n == local)
            .then_some(FleetPeers { local, peers })
    }

    /// The address this edge's HAProxy binds for its peers.
    pub fn bind(&self) -> SocketAddr {
        self.peers
            .iter()
            .find(|(n, _)| *n == self.local)
            .map(|(_, a)| *a)
            .expect("the local peer is among the peers")
    }
}
