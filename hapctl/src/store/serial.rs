//! The state serial: a counter the database moves on every write to a desired-state table
//! (triggers), so connections of one process can share one parsed copy of the state. A
//! connection's own `data_version` only says whether *another* connection committed; the
//! serial says which state the rows hold, whoever wrote them.

use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::StoreError;
use crate::model::EdgeState;

/// Declares the desired-state tables: their list, and the migration that puts the serial's
/// three triggers on each.
macro_rules! state_tables {
    ($($table:literal),* $(,)?) => {
        /// Every table `load_state` reads.
        #[cfg(test)]
        pub(super) const STATE_TABLES: &[&str] = &[$($table),*];

        pub(super) const MIGRATION: &str = concat!(
            "CREATE TABLE state_serial (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);\n",
            "INSERT INTO state_serial (id, n) VALUES (1, 0);\n",
            $(
                "CREATE TRIGGER ", $table, "_serial_insert AFTER INSERT ON ", $table,
                " BEGIN UPDATE state_serial SET n = n + 1 WHERE id = 1; END;\n",
                "CREATE TRIGGER ", $table, "_serial_update AFTER UPDATE ON ", $table,
                " BEGIN UPDATE state_serial SET n = n + 1 WHERE id = 1; END;\n",
                "CREATE TRIGGER ", $table, "_serial_delete AFTER DELETE ON ", $table,
                " BEGIN UPDATE state_serial SET n = n + 1 WHERE id = 1; END;\n",
            )*
        );
    };
}

state_tables!(
    "domains",
    "servers",
    "app_state",
    "generations",
    "https_policies",
    "suspended_domains",
    "limit_settings",
    "limit_policies",
    "limit_exempt",
    "domain_protections",
    "domain_waf",
    "slots",
    "slot_capacity",
    "trusted_proxies",
    "fleet_peers",
);

/// The serial now (in the caller's transaction, if any).
pub(super) fn read(conn: &Connection) -> Result<i64, StoreError> {
    Ok(conn.query_row("SELECT n FROM state_serial WHERE id = 1", [], |r| r.get(0))?)
}

/// The newest committed copy any connection of this process made, with its serial.
#[derive(Debug, Default, Clone)]
pub struct SharedCopy(Arc<Mutex<Option<(i64, EdgeState)>>>);

impl SharedCopy {
    /// A clone of the copy, if it is the state at `serial`.
    pub(super) fn get(&self, serial: i64) -> Option<EdgeState> {
        match &*self.lock() {
            Some((s, state)) if *s == serial => Some(state.clone()),
            _ => None,
        }
    }

    /// Keeps `state` as the state at `serial`, unless a newer one is kept already.
    pub(super) fn put(&self, serial: i64, state: &EdgeState) {
        let mut slot = self.lock();
        if slot.as_ref().is_none_or(|(s, _)| *s < serial) {
            *slot = Some((serial, state.clone()));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(i64, EdgeState)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Backend, Domain, Server, ServerName};
    use crate::store::Store;

    /// The tables that hold no desired state: history, bookkeeping, ids for the old API.
    const OTHER_TABLES: &[&str] = &[
        "applies",
        "deliveries",
        "certificates",
        "domain_ids",
        "backend_labels",
        "fleet_state",
        "state_serial",
        "sqlite_sequence",
    ];

    fn open(dir: &tempfile::TempDir) -> Store {
        Store::open(&dir.path().join("state.db"), &dir.path().join("blocks.db")).unwrap()
    }

    /// A table added later must say which it is: a desired-state table without the triggers
    /// would let a connection take a copy that lacks its rows.
    #[test]
    fn every_table_is_state_with_its_triggers_or_named_as_other() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(&dir));
        let conn = Connection::open(dir.path().join("state.db")).unwrap();
        let names = |kind: &str| -> Vec<String> {
            let mut stmt = conn
                .prepare("SELECT name FROM sqlite_master WHERE type = ?1")
                .unwrap();
            let rows = stmt.query_map([kind], |r| r.get(0)).unwrap();
            rows.collect::<Result<_, _>>().unwrap()
        };
        let triggers = names("trigger");
        for table in names("table") {
            if OTHER_TABLES.contains(&table.as_str()) {
                continue;
            }
            assert!(
                STATE_TABLES.contains(&table.as_str()),
                "table {table} is neither a state table nor named as another"
            );
            for op in ["insert", "update", "delete"] {
                let trigger = format!("{table}_serial_{op}");
                assert!(triggers.contains(&trigger), "{trigger} is missing");
            }
        }
    }

    #[test]
    fn connections_that_share_take_each_others_commits_unless_the_rows_moved_since() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, mut follower) = (open(&dir), open(&dir));
        follower.share_state_with(&writer);
        let backend = |addr: &str| {
            let server = Server::parse_spec(addr, ServerName::nth(1)).unwrap();
            Backend::new(vec![server], "default".parse().unwrap()).unwrap()
        };
        let a: Domain = "a.example.com".parse().unwrap();
        let tx = follower.begin().unwrap();
        tx.load_state().unwrap();
        tx.put_domain(&a, &backend("10.0.0.1:80"), 1).unwrap();
        tx.commit().unwrap();
        // The writer's connection takes the follower's copy (debug builds check it).
        let taken = writer.cache.borrow_mut().take(&writer.conn).unwrap();
        assert!(taken.is_some(), "the shared copy is the state of the rows");

        // A write by a connection that does not share (another process) moves the serial.
        let other = Connection::open(dir.path().join("state.db")).unwrap();
        other
            .execute("UPDATE domains SET profile = 'websocket'", [])
            .unwrap();
        let taken = writer.cache.borrow_mut().take(&writer.conn).unwrap();
        assert!(taken.is_none(), "the rows moved: no copy is current");
        let state = writer.load_state().unwrap();
        assert_eq!(state.domains[&a].profile().to_string(), "websocket");
        let tx = writer.begin().unwrap();
        assert_eq!(tx.load_state().unwrap(), state);
    }
}
