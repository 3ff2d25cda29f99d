//! Which domain sits in which slot backend, and how many slots each kind has
//! (`model::Placement`). Rows of domains that are gone are ignored on read and dropped on the
//! next save: `put_domain` replaces a domain's row, which must not free its slot.

use std::collections::BTreeMap;

use rusqlite::{params, Connection};

use super::{corrupt, StoreError, Tx};
use crate::model::{BackendSlot, Domain, EdgeState, Invalid, Placement, SlotKind};

pub(super) const MIGRATION: &str = r#"
CREATE TABLE slot_capacity (
    kind TEXT PRIMARY KEY,
    count INTEGER NOT NULL
);
CREATE TABLE slots (
    domain TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    idx INTEGER NOT NULL,
    UNIQUE (kind, idx)
);
"#;

/// Reads the placement of `state`'s domains (loaded before).
pub(super) fn load(conn: &Connection, state: &mut EdgeState) -> Result<(), StoreError> {
    let mut capacity = BTreeMap::new();
    let mut stmt = conn.prepare("SELECT kind, count FROM slot_capacity")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (kind, count): (String, i64) = (r.get(0)?, r.get(1)?);
        let parsed: SlotKind = kind.parse().map_err(corrupt("slot_capacity", &kind))?;
        let count = u16::try_from(count)
            .ok()
            .filter(|n| *n <= crate::model::MAX_SPARES)
            .ok_or_else(|| Invalid::new("capacity", &count.to_string(), "0 to 512"))
            .map_err(corrupt("slot_capacity", &kind))?;
        capacity.insert(parsed, count);
    }
    let mut slots = BTreeMap::new();
    let mut stmt = conn.prepare("SELECT domain, kind, idx FROM slots")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (name, kind, index): (String, String, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let domain: Domain = name.parse().map_err(corrupt("slots", &name))?;
        if !state.domains.contains_key(&domain) {
            continue;
        }
        let slot = BackendSlot {
            kind: kind.parse().map_err(corrupt("slots", &name))?,
            index: u16::try_from(index)
                .map_err(|_| Invalid::new("slot index", &index.to_string(), "0 to 511"))
                .map_err(corrupt("slots", &name))?,
        };
        slots.insert(domain, slot);
    }
    state.placement = Placement::new(capacity, slots).map_err(corrupt("slots", "*"))?;
    Ok(())
}

impl Tx<'_> {
    /// Replaces the stored placement with `placement`.
    pub fn save_placement(&self, placement: &Placement) -> Result<(), StoreError> {
        self.mirror.follow(
            &self.tx,
            || self.write_placement(placement),
            |state| {
                state.placement = placement.clone();
            },
        )
    }

    fn write_placement(&self, placement: &Placement) -> Result<(), StoreError> {
        self.tx.execute("DELETE FROM slot_capacity", [])?;
        self.tx.execute("DELETE FROM slots", [])?;
        let mut insert = self
            .tx
            .prepare_cached("INSERT INTO slot_capacity (kind, count) VALUES (?1, ?2)")?;
        for (kind, count) in placement.capacities() {
            insert.execute(params![kind.as_str(), count])?;
        }
        let mut insert = self
            .tx
            .prepare_cached("INSERT INTO slots (domain, kind, idx) VALUES (?1, ?2, ?3)")?;
        for (domain, slot) in placement.slots() {
            insert.execute(params![domain.to_string(), slot.kind.as_str(), slot.index])?;
        }
        Ok(())
    }
}
