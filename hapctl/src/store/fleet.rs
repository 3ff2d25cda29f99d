//! Where this edge stands in its fleet: the fleet revision its desired state is at (committed
//! with the state it describes), and the last revision it refused.

use rusqlite::{params, OptionalExtension};

use super::{Store, StoreError, Tx};
use crate::model::{EdgeName, FleetPeers};

pub(super) const MIGRATION: &str = r#"
CREATE TABLE fleet_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    revision INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    message TEXT NOT NULL,
    checks INTEGER NOT NULL,
    reloads INTEGER NOT NULL,
    refused_revision INTEGER,
    refused_message TEXT
);
"#;

/// The edges whose HAProxy shares its client tables with this one's (`peers`).
pub(super) const PEERS_MIGRATION: &str = r#"
CREATE TABLE fleet_peers (
    name TEXT PRIMARY KEY,
    addr TEXT NOT NULL,
    local INTEGER NOT NULL
);
"#;

/// The outcome of a record whose apply is committed but not yet accounted for.
pub const APPLYING: &str = "applying";

/// The last apply of the fleet's state on this edge.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FleetRecord {
    /// The fleet revision the desired state is at (0: never applied one).
    pub revision: i64,
    /// How the apply that reached it went (`applied`, `unchanged`, …) and what it said.
    pub outcome: String,
    pub message: String,
    pub checks: i64,
    pub reloads: i64,
    /// The last revision this edge could not apply, and HAProxy's (or the parser's) reason.
    pub refused: Option<(i64, String)>,
}

/// What an apply of fleet revision `revision` did.
pub struct FleetApplied {
    pub revision: i64,
    pub outcome: &'static str,
    pub message: String,
    pub checks: u32,
    pub reloads: u32,
}

const UPSERT: &str = "INSERT INTO fleet_state (id, revision, outcome, message, checks, reloads)
     VALUES (1, ?1, ?2, ?3, ?4, ?5)
     ON CONFLICT (id) DO UPDATE SET revision = ?1, outcome = ?2, message = ?3, checks = ?4,
     reloads = ?5, refused_revision = NULL, refused_message = NULL";

impl Store {
    pub fn fleet_record(&self) -> Result<FleetRecord, StoreError> {
        let row = self
            .conn
            .query_row(
                "SELECT revision, outcome, message, checks, reloads, refused_revision, refused_message
                 FROM fleet_state WHERE id = 1",
                [],
                |r| {
                    let refused = match (r.get(5)?, r.get(6)?) {
                        (Some(rev), Some(msg)) => Some((rev, msg)),
                        _ => None,
                    };
                    Ok(FleetRecord {
                        revision: r.get(0)?,
                        outcome: r.get(1)?,
                        message: r.get(2)?,
                        checks: r.get(3)?,
                        reloads: r.get(4)?,
                        refused,
                    })
                },
            )
            .optional()?;
        Ok(row.unwrap_or_default())
    }

    /// Records an apply that changed no desired-state row (blocks only, or nothing).
    pub fn set_fleet_applied(&self, applied: &FleetApplied) -> Result<(), StoreError> {
        self.cache
            .borrow_mut()
            .beside(&self.conn, || upsert(&self.conn, applied))
    }

    /// Records that `revision` could not be applied, and why; the revision applied stays.
    pub fn set_fleet_refused(&self, revision: i64, message: &str) -> Result<(), StoreError> {
        self.cache
            .borrow_mut()
            .beside(&self.conn, || self.refuse(revision, message))
    }

    fn refuse(&self, revision: i64, message: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO fleet_state (id, revision, outcome, message, checks, reloads, refused_revision, refused_message)
             VALUES (1, 0, 'none', '', 0, 0, ?1, ?2)
             ON CONFLICT (id) DO UPDATE SET refused_revision = ?1, refused_message = ?2",
            params![revision, message],
        )?;
        Ok(())
    }

    /// Forgets the fleet (`hapctl fleet leave`, or a fleet restored from an older snapshot).
    pub fn clear_fleet_record(&self) -> Result<(), StoreError> {
        self.conn.execute("DELETE FROM fleet_state", [])?;
        // The next apply renders no peers section.
        self.conn.execute("DELETE FROM fleet_peers", [])?;
        Ok(())
    }
}

impl Tx<'_> {
    /// Records, with the desired state it describes, the revision this apply brings it to;
    /// the apply's account follows with [`Store::set_fleet_applied`] (until then the outcome
    /// reads [`APPLYING`]).
    pub fn set_fleet_revision(&self, revision: i64) -> Result<(), StoreError> {
        let applying = FleetApplied {
            revision,
            outcome: APPLYING,
            message: String::new(),
            checks: 0,
            reloads: 0,
        };
        // No desired-state row: the transaction's copy of the state stays exact.
        self.mirror
            .follow(&self.tx, || upsert(&self.tx, &applying), |_| {})
    }

    /// The revision the committed desired state is at, read in this transaction (the basis
    /// of a change computed in it).
    pub fn fleet_revision(&self) -> Result<i64, StoreError> {
        Ok(self
            .tx
            .query_row("SELECT revision FROM fleet_state WHERE id = 1", [], |r| {
                r.get(0)
            })
            .optional()?
            .unwrap_or(0))
    }

    /// Trusted proxies with the preset each came from, as this transaction sees them.
    pub fn trusted_proxies(
        &self,
    ) -> Result<Vec<(crate::model::ProxyNet, Option<String>)>, StoreError> {
        super::policies::trusted_proxies(&self.tx)
    }
}

impl Tx<'_> {
    /// Replaces the edges this one shares its client tables with (`None`: none).
    pub fn set_fleet_peers(&self, peers: Option<&FleetPeers>) -> Result<(), StoreError> {
        let write = || {
            self.tx.execute("DELETE FROM fleet_peers", [])?;
            for (name, addr) in peers.iter().flat_map(|p| &p.peers) {
                let local = peers.is_some_and(|p| p.local == *name);
                self.tx.execute(
                    "INSERT INTO fleet_peers (name, addr, local) VALUES (?1, ?2, ?3)",
                    params![name.as_str(), addr.to_string(), local],
                )?;
            }
            Ok(())
        };
        self.mirror
            .follow(&self.tx, write, |state| state.peers = peers.cloned())
    }
}

/// The peers as stored, parsed again.
pub(super) fn load_peers(
    conn: &rusqlite::Connection,
    state: &mut crate::model::EdgeState,
) -> Result<(), StoreError> {
    let mut stmt = conn.prepare("SELECT name, addr, local FROM fleet_peers ORDER BY name")?;
    let rows: Vec<(String, String, bool)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut local = None;
    let mut peers = Vec::new();
    for (name, addr, is_local) in rows {
        let bad = |rule: &str| StoreError::Corrupt {
            table: "fleet_peers",
            key: name.clone(),
            source: crate::model::Invalid::new("peer", &name, rule),
        };
        let edge = EdgeName::parse(&name).map_err(|e| bad(&e))?;
        let addr = addr
            .parse()
            .map_err(|_| bad("its address is not IP:PORT"))?;
        if is_local {
            local = Some(edge.clone());
        }
        peers.push((edge, addr));
    }
    state.peers = local.and_then(|l| FleetPeers::new(l, peers));
    Ok(())
}

fn upsert(conn: &rusqlite::Connection, a: &FleetApplied) -> Result<(), StoreError> {
    conn.execute(
        UPSERT,
        params![a.revision, a.outcome, a.message, a.checks, a.reloads],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The follower records each revision's account after its commit: that write (and a
    /// refusal's) leaves the state copy exact, so the next apply does not parse every row.
    #[test]
    fn a_fleet_record_keeps_the_state_copy_exact() {
        let dir = tempfile::tempdir().unwrap();
        let (path, blocks) = (dir.path().join("state.db"), dir.path().join("blocks.db"));
        let mut store = Store::open(&path, &blocks).unwrap();
        let tx = store.begin().unwrap();
        tx.load_state().unwrap();
        tx.set_fleet_revision(7).unwrap();
        tx.commit().unwrap();
        let applied = FleetApplied {
            revision: 7,
            outcome: "applied",
            message: String::new(),
            checks: 0,
            reloads: 0,
        };
        store.set_fleet_applied(&applied).unwrap();
        store.set_fleet_refused(8, "refused").unwrap();
        let kept = store.cache.borrow_mut().take(&store.conn).unwrap();
        assert!(kept.is_some(), "the copy is still exact");
        assert_eq!(store.fleet_record().unwrap().revision, 7);
    }
}
