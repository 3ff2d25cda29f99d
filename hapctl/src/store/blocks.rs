//! The blocks, in their own database file (`blocks.db`): reads, the write transaction of the
//! block path, and pages of the list.
//!
//! Each row carries a `sort_key` (family, address bytes, prefix length): BLOBs compare like
//! `memcmp`, so the index on it orders keys numerically and a network is one index range,
//! which is what a page (`after`) and the `prefix` filter read without a scan.

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use super::{corrupt, Store, StoreError};
use crate::model::{Block, BlockKey, BlockQuery, Note};

/// The sort key column and the indexes a page and the expiry use.
pub(super) const MIGRATION: &str = r#"
ALTER TABLE blocks ADD COLUMN sort_key BLOB;
CREATE INDEX blocks_by_sort_key ON blocks (sort_key);
CREATE INDEX blocks_by_expiry ON blocks (expires_at) WHERE expires_at IS NOT NULL;
"#;

/// A page: keys after ?1 up to ?2 in sort-key order, in force at ?3, expiring by ?4, whose
/// reason holds ?5.
const PAGE: &str = "SELECT key, reason, author, created_at, expires_at FROM blocks
     WHERE sort_key > ?1 AND sort_key <= ?2
       AND (expires_at IS NULL OR expires_at > ?3)
       AND (?4 IS NULL OR (expires_at IS NOT NULL AND expires_at <= ?4))
       AND (?5 IS NULL OR instr(lower(reason), ?5) > 0)
     ORDER BY sort_key";

/// One page of the list, and the cursor of the next one (`None` on the last page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockPage {
    pub blocks: Vec<Block>,
    pub next: Option<BlockKey>,
}

/// `[family, address bytes…, prefix length]`.
fn sort_key(key: &BlockKey) -> Vec<u8> {
    with_family(key.net().network(), key.net().prefix_len())
}

/// The sort keys of the keys inside `net` lie between these two.
fn range(net: &BlockKey) -> (Vec<u8>, Vec<u8>) {
    (
        with_family(net.net().network(), 0),
        with_family(net.net().broadcast(), u8::MAX),
    )
}

fn with_family(addr: std::net::IpAddr, last: u8) -> Vec<u8> {
    let mut bytes = match addr {
        std::net::IpAddr::V4(a) => [&[4u8][..], &a.octets()].concat(),
        std::net::IpAddr::V6(a) => [&[6u8][..], &a.octets()].concat(),
    };
    bytes.push(last);
    bytes
}

/// Fills `sort_key` where it is missing (rows written before the column existed). Nothing to
/// do, the usual case, is one index lookup.
pub(super) fn backfill_sort_keys(conn: &Connection) -> Result<(), StoreError> {
    let missing: Vec<String> = conn
        .prepare("SELECT key FROM blocks WHERE sort_key IS NULL")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if missing.is_empty() {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    for key in &missing {
        // A row the model refuses keeps no sort key; reading it reports it (`Corrupt`).
        if let Ok(parsed) = key.parse::<BlockKey>() {
            tx.execute(
                "UPDATE blocks SET sort_key = ?1 WHERE key = ?2",
                params![sort_key(&parsed), key],
            )?;
        }
    }
    Ok(tx.commit()?)
}

impl Store {
    /// Starts a write transaction on the blocks only.
    pub fn begin_blocks(&mut self) -> Result<BlockTx<'_>, StoreError> {
        Ok(BlockTx(self.blocks.transaction_with_behavior(
            TransactionBehavior::Immediate,
        )?))
    }

    /// Every block, expired ones included.
    pub fn blocks(&self) -> Result<Vec<Block>, StoreError> {
        let mut stmt = self.blocks.prepare(
            "SELECT key, reason, author, created_at, expires_at FROM blocks ORDER BY key",
        )?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(block_row(r)?);
        }
        Ok(out)
    }

    /// The keys of the blocks in force at `now`: what the map holds (cheaper than `blocks`).
    pub fn block_keys(&self, now: i64) -> Result<Vec<BlockKey>, StoreError> {
        load_block_keys(&self.blocks, now)
    }

    /// How many blocks there are, expired ones included.
    pub fn block_count(&self) -> Result<usize, StoreError> {
        Ok(self
            .blocks
            .query_row("SELECT COUNT(*) FROM blocks", [], |r| r.get::<_, i64>(0))?
            as usize)
    }

    /// Whether some block's expiry has passed at `now` (cheap: the daemon asks every second).
    pub fn has_expired_blocks(&self, now: i64) -> Result<bool, StoreError> {
        Ok(self
            .blocks
            .query_row(
                "SELECT 1 FROM blocks WHERE expires_at IS NOT NULL AND expires_at <= ?1 LIMIT 1",
                [now],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Changes when another connection (another process: the CLI) committed to the blocks
    /// since this connection last asked; the block path's key set in memory is then stale.
    pub fn blocks_data_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .blocks
            .query_row("PRAGMA data_version", [], |r| r.get(0))?)
    }

    /// One page of the blocks in force at `now`, in key order. Rows are read one by one and
    /// stop at the page's end: a page never loads the whole list.
    pub fn blocks_page(&self, query: &BlockQuery, now: i64) -> Result<BlockPage, StoreError> {
        let (low, high) = match &query.prefix {
            Some(net) => range(net),
            None => (Vec::new(), vec![u8::MAX]),
        };
        // One lower bound, so the index seeks to it: SQLite uses only one of two. `low` ends in
        // a 0 that no key's prefix length is, so "after it" is "from it".
        let after = query
            .after
            .as_ref()
            .map(sort_key)
            .unwrap_or_default()
            .max(low);
        let until = query
            .expiring
            .map(|t| now.saturating_add(t.duration().as_secs() as i64));
        let reason = query
            .reason
            .as_ref()
            .map(|r| r.as_str().to_ascii_lowercase());
        let mut stmt = self.blocks.prepare_cached(PAGE)?;
        let mut rows = stmt.query(params![after, high, now, until, reason])?;
        let mut blocks = Vec::with_capacity(query.limit.min(1024));
        let mut more = false;
        while let Some(r) = rows.next()? {
            let block = block_row(r)?;
            if !query.within_prefix(&block.key) {
                continue;
            }
            if blocks.len() == query.limit {
                more = true;
                break;
            }
            blocks.push(block);
        }
        let next = if more {
            blocks.last().map(|b| b.key)
        } else {
            None
        };
        Ok(BlockPage { blocks, next })
    }
}

fn block_row(r: &Row) -> Result<Block, StoreError> {
    let key: String = r.get(0)?;
    let reason: String = r.get(1)?;
    let author: String = r.get(2)?;
    Ok(Block {
        key: key.parse().map_err(corrupt("blocks", &key))?,
        reason: Note::parse("reason", &reason).map_err(corrupt("blocks", &key))?,
        author: Note::parse("author", &author).map_err(corrupt("blocks", &key))?,
        created_at: r.get(3)?,
        expires_at: r.get(4)?,
    })
}

pub(super) fn load_block_keys(conn: &Connection, now: i64) -> Result<Vec<BlockKey>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT key FROM blocks WHERE expires_at IS NULL OR expires_at > ?1 ORDER BY key",
    )?;
    let mut rows = stmt.query([now])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let key: String = r.get(0)?;
        out.push(key.parse().map_err(corrupt("blocks", &key))?);
    }
    Ok(out)
}

/// A write transaction on the blocks.
pub struct BlockTx<'a>(rusqlite::Transaction<'a>);

impl BlockTx<'_> {
    pub fn contains(&self, key: &BlockKey) -> Result<bool, StoreError> {
        Ok(self
            .0
            .query_row(
                "SELECT 1 FROM blocks WHERE key = ?1",
                [key.to_string()],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Adds or replaces a block; returns true when the key was not blocked before.
    pub fn put_block(&self, block: &Block) -> Result<bool, StoreError> {
        let key = block.key.to_string();
        let existed = self.contains(&block.key)?;
        self.0.execute(
            "INSERT OR REPLACE INTO blocks (key, reason, author, created_at, expires_at, sort_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                key,
                block.reason.as_str(),
                block.author.as_str(),
                block.created_at,
                block.expires_at,
                sort_key(&block.key)
            ],
        )?;
        Ok(!existed)
    }

    /// Returns false when the key was not blocked.
    pub fn remove_block(&self, key: &BlockKey) -> Result<bool, StoreError> {
        Ok(self
            .0
            .execute("DELETE FROM blocks WHERE key = ?1", [key.to_string()])?
            > 0)
    }

    /// Deletes blocks expired at `now`; returns their keys.
    pub fn remove_expired_blocks(&self, now: i64) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.0.prepare(
            "DELETE FROM blocks WHERE expires_at IS NOT NULL AND expires_at <= ?1 RETURNING key",
        )?;
        let keys = stmt.query_map([now], |r| r.get(0))?;
        Ok(keys.collect::<Result<_, _>>()?)
    }

    /// Commits; with `HAPCTL_FAULT=fail:block-commit`, fails as a disk error would (rolled
    /// back), for the tests of what a failed commit leaves.
    pub fn commit(self) -> Result<(), StoreError> {
        if crate::fault::fails("block-commit") {
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some(format!(
                    "disk I/O error ({}=fail:block-commit)",
                    crate::fault::FAULT_ENV
                )),
            )));
        }
        Ok(self.0.commit()?)
    }
}

#[cfg(test)]
impl Store {
    /// Commits `blocks` as another process's block change would (no map file written).
    pub fn put_blocks(&mut self, blocks: &[Block]) {
        let tx = self.begin_blocks().unwrap();
        for b in blocks {
            tx.put_block(b).unwrap();
        }
        tx.commit().unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &tempfile::TempDir) -> Store {
        Store::open(&dir.path().join("state.db"), &dir.path().join("blocks.db")).unwrap()
    }

    fn block(key: &str, reason: &str, expires_at: Option<i64>) -> Block {
        Block {
            key: key.parse().unwrap(),
            reason: Note::parse("reason", reason).unwrap(),
            author: Note::parse("author", "me").unwrap(),
            created_at: 10,
            expires_at,
        }
    }

    fn put(store: &mut Store, blocks: &[Block]) {
        let tx = store.begin_blocks().unwrap();
        for b in blocks {
            tx.put_block(b).unwrap();
        }
        tx.commit().unwrap();
    }

    fn keys(page: &BlockPage) -> Vec<String> {
        page.blocks.iter().map(|b| b.key.to_string()).collect()
    }

    fn query(pairs: &[(&str, &str)]) -> BlockQuery {
        BlockQuery::from_pairs(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn a_tampered_row_is_reported_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        store
            .blocks
            .execute(
                "INSERT INTO blocks (key, reason, author, created_at) VALUES ('10.0.0.1\nfoo', 'r', 'a', 0)",
                [],
            )
            .unwrap();
        let e = store.block_keys(0).unwrap_err().to_string();
        assert!(e.contains("blocks/10.0.0.1"), "{e}");
    }

    #[test]
    fn pages_follow_numeric_key_order_and_survive_inserts() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store(&dir);
        let all = [
            "10.0.0.10",
            "10.0.0.2",
            "2001:db8::1",
            "10.0.0.0/8",
            "9.9.9.9",
            "10.0.1.0/24",
        ];
        put(&mut store, &all.map(|k| block(k, "r", None)));
        let first = store.blocks_page(&query(&[("limit", "3")]), 0).unwrap();
        assert_eq!(keys(&first), ["9.9.9.9", "10.0.0.0/8", "10.0.0.2"]);
        assert_eq!(first.next, Some("10.0.0.2".parse().unwrap()));
        // A key before the cursor and one after it arrive between the pages.
        put(
            &mut store,
            &[block("1.1.1.1", "r", None), block("10.0.0.3", "r", None)],
        );
        let q = BlockQuery {
            after: first.next,
            ..query(&[("limit", "3")])
        };
        let second = store.blocks_page(&q, 0).unwrap();
        assert_eq!(keys(&second), ["10.0.0.3", "10.0.0.10", "10.0.1.0/24"]);
        let q = BlockQuery {
            after: second.next,
            ..query(&[("limit", "3")])
        };
        let last = store.blocks_page(&q, 0).unwrap();
        assert_eq!(keys(&last), ["2001:db8::1"]);
        assert_eq!(last.next, None, "the last page says so");
        // A full last page has no next either, and a cursor past the end gives an empty page.
        let exact = store.blocks_page(&query(&[("after", "10.0.1.0/24"), ("limit", "1")]), 0);
        assert_eq!(exact.unwrap().next, None);
        let past = store
            .blocks_page(&query(&[("after", "ffff::1")]), 0)
            .unwrap();
        assert!(past.blocks.is_empty() && past.next.is_none());
        // A cursor whose key was removed still works: it is a position, not a row.
        let gone = store.blocks_page(&query(&[("after", "10.0.0.4"), ("limit", "1")]), 0);
        assert_eq!(keys(&gone.unwrap()), ["10.0.0.10"]);
    }

    #[test]
    fn filters_combine_and_expired_blocks_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = store(&dir);
        let now = 1_000;
        put(
            &mut store,
            &[
                block("10.1.0.0/16", "Scanner farm", None),
                block("10.1.2.3", "scanner", Some(now + 600)),
                block("10.1.2.4", "spam", Some(now + 7200)),
                block("10.0.0.0/8", "scanner", None),
                block("10.1.9.9", "scanner", Some(now - 1)),
                block("2001:db8::5", "SCANNER", Some(now + 30)),
            ],
        );
        let page = |pairs: &[(&str, &str)]| keys(&store.blocks_page(&query(pairs), now).unwrap());
        assert_eq!(
            page(&[("prefix", "10.1.0.0/16")]),
            ["10.1.0.0/16", "10.1.2.3", "10.1.2.4"]
        );
        assert_eq!(page(&[("prefix", "10.1.2.3")]), ["10.1.2.3"]);
        assert_eq!(page(&[("prefix", "2001:db8::/32")]), ["2001:db8::5"]);
        assert_eq!(
            page(&[("reason", "SCAN")]),
            ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.3", "2001:db8::5"]
        );
        assert_eq!(page(&[("expiring", "1h")]), ["10.1.2.3", "2001:db8::5"]);
        assert_eq!(
            page(&[
                ("expiring", "1h"),
                ("prefix", "10.0.0.0/8"),
                ("reason", "scan")
            ]),
            ["10.1.2.3"]
        );
        assert!(page(&[("prefix", "192.0.2.0/24")]).is_empty());
        // A filtered page still ends where the matching keys end.
        let two = store
            .blocks_page(&query(&[("reason", "scan"), ("limit", "2")]), now)
            .unwrap();
        assert_eq!(keys(&two), ["10.0.0.0/8", "10.1.0.0/16"]);
        assert_eq!(two.next, Some("10.1.0.0/16".parse().unwrap()));
    }

    #[test]
    fn a_page_seeks_through_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let plan: Vec<String> = store
            .blocks
            .prepare(&format!("EXPLAIN QUERY PLAN {PAGE}"))
            .unwrap()
            .query_map(
                params![vec![4u8], vec![255u8], 0, None::<i64>, None::<String>],
                |r| r.get(3),
            )
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|p| p.contains("blocks_by_sort_key (sort_key>? AND sort_key<?)")),
            "{plan:?}"
        );
    }

    #[test]
    fn rows_without_a_sort_key_get_one_when_the_store_opens() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = store(&dir);
            store
                .blocks
                .execute(
                    "INSERT INTO blocks (key, reason, author, created_at) VALUES ('192.0.2.0/24', 'old', 'a', 0)",
                    [],
                )
                .unwrap();
        }
        let store = store(&dir);
        assert_eq!(
            keys(&store.blocks_page(&BlockQuery::default(), 0).unwrap()),
            ["192.0.2.0/24"]
        );
    }
}
