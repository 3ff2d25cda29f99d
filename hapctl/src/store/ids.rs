//! Stable integer ids for domains and blocks (the edge manager's API names rows by integer).
//!
//! Ids live in their own tables, filled by triggers, so every path that writes a domain or a
//! block (CLI, `/v1`, the old routes, an import) gets one without knowing about them. They
//! come from `AUTOINCREMENT`, so an id is never handed to another name (and the triggers insert
//! only for a new name: an ignored insert would still use up a number). A domain keeps its id
//! for good (a replace deletes and re-inserts its row, so no delete trigger can tell a replace
//! from a removal); a block's id goes with the block (a replace is `INSERT OR REPLACE`, which
//! fires no delete trigger), so blocking an address again gives it a new id.

use std::collections::HashMap;

use rusqlite::OptionalExtension;

use super::{Store, StoreError};

pub(super) const MIGRATION: &str = r#"
CREATE TABLE domain_ids (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE
);
INSERT INTO domain_ids (name) SELECT name FROM domains ORDER BY created_at, name;
CREATE TRIGGER domain_ids_assign AFTER INSERT ON domains
WHEN NOT EXISTS (SELECT 1 FROM domain_ids WHERE name = NEW.name)
BEGIN
    INSERT INTO domain_ids (name) VALUES (NEW.name);
END;
"#;

pub(super) const BLOCK_MIGRATION: &str = r#"
CREATE TABLE block_ids (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE
);
INSERT INTO block_ids (key) SELECT key FROM blocks ORDER BY created_at, key;
CREATE TRIGGER block_ids_assign AFTER INSERT ON blocks
WHEN NOT EXISTS (SELECT 1 FROM block_ids WHERE key = NEW.key)
BEGIN
    INSERT INTO block_ids (key) VALUES (NEW.key);
END;
CREATE TRIGGER block_ids_release AFTER DELETE ON blocks
BEGIN
    DELETE FROM block_ids WHERE key = OLD.key;
END;
"#;

fn all(conn: &rusqlite::Connection, sql: &str) -> Result<HashMap<String, i64>, StoreError> {
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], |r| Ok((r.get(1)?, r.get(0)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn one(conn: &rusqlite::Connection, sql: &str, name: &str) -> Result<Option<i64>, StoreError> {
    Ok(conn.query_row(sql, [name], |r| r.get(0)).optional()?)
}

impl Store {
    /// Every domain's id, by stored name (`*.example.com` for a wildcard).
    pub fn domain_ids(&self) -> Result<HashMap<String, i64>, StoreError> {
        all(&self.conn, "SELECT id, name FROM domain_ids")
    }

    pub fn domain_id(&self, name: &str) -> Result<Option<i64>, StoreError> {
        one(
            &self.conn,
            "SELECT id FROM domain_ids WHERE name = ?1",
            name,
        )
    }

    /// Every block's id, by key.
    pub fn block_ids(&self) -> Result<HashMap<String, i64>, StoreError> {
        all(&self.blocks, "SELECT id, key FROM block_ids")
    }

    pub fn block_id(&self, key: &str) -> Result<Option<i64>, StoreError> {
        one(&self.blocks, "SELECT id FROM block_ids WHERE key = ?1", key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Backend, Block, Domain, Note, Server, ServerName};

    fn block(key: &str) -> Block {
        Block {
            key: key.parse().unwrap(),
            reason: Note::parse("reason", "r").unwrap(),
            author: Note::parse("author", "a").unwrap(),
            created_at: 1,
            expires_at: None,
        }
    }

    #[test]
    fn ids_are_stable_across_replace_and_reopen_and_never_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (db, bdb) = (dir.path().join("s.db"), dir.path().join("b.db"));
        let mut store = Store::open(&db, &bdb).unwrap();
        let backend = Backend::new(
            vec![Server::parse_spec("127.0.0.1:80", ServerName::nth(1)).unwrap()],
            Default::default(),
        )
        .unwrap();
        let (a, b): (Domain, Domain) =
            ("a.example".parse().unwrap(), "*.b.example".parse().unwrap());
        let tx = store.begin().unwrap();
        tx.put_domain(&a, &backend, 1).unwrap();
        tx.put_domain(&b, &backend, 1).unwrap();
        tx.put_domain(&a, &backend, 2).unwrap();
        tx.commit().unwrap();
        let ids = store.domain_ids().unwrap();
        assert_eq!((ids["a.example"], ids["*.b.example"]), (1, 2));

        let btx = store.begin_blocks().unwrap();
        btx.put_block(&block("192.0.2.1")).unwrap();
        btx.put_block(&block("192.0.2.2")).unwrap();
        btx.put_block(&block("192.0.2.1")).unwrap();
        btx.commit().unwrap();
        assert_eq!(
            store.block_id("192.0.2.1").unwrap(),
            Some(1),
            "a replace keeps the id"
        );
        let btx = store.begin_blocks().unwrap();
        btx.remove_block(&"192.0.2.2".parse().unwrap()).unwrap();
        btx.put_block(&block("192.0.2.3")).unwrap();
        btx.put_block(&block("192.0.2.2")).unwrap();
        btx.commit().unwrap();
        drop(store);

        let store = Store::open(&db, &bdb).unwrap();
        assert_eq!(store.domain_id("a.example").unwrap(), Some(1));
        assert_eq!(store.block_id("192.0.2.1").unwrap(), Some(1));
        // 2 was released with its block and is never given out again.
        assert_eq!(store.block_id("192.0.2.3").unwrap(), Some(3));
        assert_eq!(store.block_id("192.0.2.2").unwrap(), Some(4));
        assert_eq!(store.block_ids().unwrap().len(), 3);
    }
}
