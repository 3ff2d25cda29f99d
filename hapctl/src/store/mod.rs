//! Desired state and apply history in SQLite.
//!
//! Every change happens in a `Tx` (a `BEGIN IMMEDIATE` transaction): the apply path keeps it
//! open while it renders, validates and reloads, and commits only when the edge took the
//! change, so a refused change leaves no row behind. Rows are parsed back through the model
//! on read: a hand-edited database cannot smuggle a value the model would refuse.

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use state::load_state;

use crate::model::{
    AppName, Backend, BlockKey, Domain, EdgeState, Generation, Invalid, Port, ProxyNet, Version,
};

mod access;
mod blocks;
mod cache;
mod certs;
mod fleet;
mod history;
mod ids;
mod labels;
mod schema;
mod serial;
mod state;

pub use history::ApplyEntry;
use schema::{BLOCK_MIGRATIONS, MIGRATIONS};
mod limits;
mod placement;
mod policies;
mod profiles;
mod waf;

pub use access::{AccessStore, AuditAttempt, AuditFilter, AuditRecord, AuditResult, TokenRecord};
pub use blocks::{BlockPage, BlockTx};
pub use certs::CertRecord;
pub use fleet::{FleetApplied, FleetRecord, APPLYING};

/// How long a writer waits for another one (an apply can hold the database for a reload).
const BUSY_TIMEOUT: Duration = Duration::from_secs(120);

/// SQLite's page cache per connection, in KiB. The default (2,000) is filled by the first
/// full read and kept while the connection is open: the daemon has five (reads, the two
/// workers, supervision, renewals; each with both files), 10 MB of its heap at 10,000 domains
/// and 100,000 blocks (BENCHMARKS.md, daemon memory). The big reads scan every row once, so a
/// larger cache spares no I/O there (the pages come from the OS page cache; a full parse of the
/// state hands its pages back at once, `cache.rs`); the B-tree pages a lookup walks fit.
const PAGE_CACHE_KIB: i64 = 256;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database row {table}/{key} holds a value the model refuses ({0}); fix or delete the row", .source)]
    Corrupt {
        table: &'static str,
        key: String,
        source: Invalid,
    },
    #[error("cannot create the database {path}: {source}; check the state directory's owner and free space")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("database {path} was written by a newer hapctl (schema {found}, this one knows {known}); upgrade hapctl")]
    TooNew {
        path: String,
        found: i64,
        known: i64,
    },
}

/// Which generations of an app are in service and replaced (`None` before the first delivery).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AppState {
    pub current: Option<Version>,
    pub previous: Option<Version>,
}

/// One line of delivery history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeliveryRecord {
    pub id: i64,
    pub app: String,
    /// `deliver` or `rollback`.
    pub kind: String,
    pub from_version: Option<String>,
    pub to_version: String,
    pub outcome: String,
    pub message: String,
    pub started_at_ms: i64,
    pub duration_ms: i64,
    /// JSON array of `{name, ms}`.
    pub steps: String,
}

/// One line of apply history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApplyRecord {
    pub id: i64,
    pub started_at_ms: i64,
    pub duration_ms: i64,
    /// What asked for the apply, e.g. `domain add shop.example.com`.
    pub trigger: String,
    pub outcome: String,
    pub message: String,
    /// `haproxy -c` runs made by this apply.
    pub checks: i64,
    pub reloads: i64,
    pub changed_files: Vec<String>,
    /// One `kind: detail` per reload, in order.
    pub reload_reasons: Vec<String>,
}

/// The database: desired state and history, plus the blocks in their own file.
pub struct Store {
    conn: Connection,
    blocks: Connection,
    /// The state of the last committed transaction, while nobody else writes.
    cache: std::cell::RefCell<cache::Committed>,
}

/// Opens a database file with hapctl's settings and brings its schema up to date.
fn open_migrated(path: &Path, migrations: &[&str]) -> Result<Connection, StoreError> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
    let known = migrations.len() as i64;
    // Up to date (the common case): no write transaction, so opening never waits for an apply.
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current == known {
        return Ok(conn);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > known {
        return Err(StoreError::TooNew {
            path: path.display().to_string(),
            found: version,
            known,
        });
    }
    for sql in &migrations[version as usize..] {
        tx.execute_batch(sql)?;
    }
    tx.pragma_update(None, "user_version", known)?;
    tx.commit()?;
    Ok(conn)
}

impl Store {
    /// Opens (creating if needed) and migrates both database files.
    pub fn open(path: &Path, blocks_path: &Path) -> Result<Store, StoreError> {
        let blocks = open_migrated(blocks_path, BLOCK_MIGRATIONS)?;
        blocks::backfill_sort_keys(&blocks)?;
        Ok(Store {
            conn: open_migrated(path, MIGRATIONS)?,
            blocks,
            cache: Default::default(),
        })
    }

    /// Starts a write transaction; other writers wait until it ends.
    pub fn begin(&mut self) -> Result<Tx<'_>, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Checked inside the transaction: no other writer can commit from here on.
        let copy = self.cache.get_mut().take(&tx)?;
        Ok(Tx {
            tx,
            blocks: &self.blocks,
            mirror: cache::Mirror::new(copy),
            committed: &self.cache,
        })
    }

    /// The committed desired state.
    pub fn load_state(&self) -> Result<EdgeState, StoreError> {
        self.with_state(EdgeState::clone)
    }

    /// Whether the domain exists (one lookup: no state read, which after a change parses
    /// every row).
    pub fn has_domain(&self, domain: &Domain) -> Result<bool, StoreError> {
        domain_exists(&self.conn, domain)
    }

    /// Drops the copy of the state kept between reads (the next read parses the rows, or takes
    /// the copy this connection shares when it is current).
    pub fn forget_state(&self) {
        self.cache.borrow_mut().forget();
    }

    /// Shares parsed copies of the state with `other` (another connection of this process to
    /// the same database): a change one of them committed is not parsed again by the other.
    pub fn share_state_with(&mut self, other: &Store) {
        self.cache
            .get_mut()
            .share_with(&mut other.cache.borrow_mut());
    }

    /// Runs `f` on the committed desired state without copying it: the daemon's reads answer
    /// from the store's copy (megabytes at 10,000 domains) instead of cloning it per request.
    pub fn with_state<T>(&self, f: impl FnOnce(&EdgeState) -> T) -> Result<T, StoreError> {
        let (copy, version) = self.cache.borrow_mut().read(&self.conn)?;
        // The copy is out of the cell while `f` runs, so a `load_state` inside it reads rows.
        let out = f(copy.state());
        self.cache.borrow_mut().put(copy, version);
        Ok(out)
    }

    pub fn app_state(&self, app: &AppName) -> Result<AppState, StoreError> {
        app_state(&self.conn, app)
    }

    /// Every generation ever started for `app`, with its port, by version.
    pub fn generations(&self, app: &AppName) -> Result<Vec<Generation>, StoreError> {
        generations(&self.conn, app)
    }

    /// Newest first.
    pub fn deliveries(&self, limit: usize) -> Result<Vec<DeliveryRecord>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, app, kind, from_version, to_version, outcome, message, started_at_ms, duration_ms, steps
             FROM deliveries ORDER BY id DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([limit as i64], |r| {
            Ok(DeliveryRecord {
                id: r.get(0)?,
                app: r.get(1)?,
                kind: r.get(2)?,
                from_version: r.get(3)?,
                to_version: r.get(4)?,
                outcome: r.get(5)?,
                message: r.get(6)?,
                started_at_ms: r.get(7)?,
                duration_ms: r.get(8)?,
                steps: r.get(9)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn record_delivery(&mut self, rec: &DeliveryRecord) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO deliveries (app, kind, from_version, to_version, outcome, message, started_at_ms, duration_ms, steps)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                rec.app,
                rec.kind,
                rec.from_version,
                rec.to_version,
                rec.outcome,
                rec.message,
                rec.started_at_ms,
                rec.duration_ms,
                rec.steps
            ],
        )?;
        Ok(())
    }

    /// Records an apply in its own transaction (for applies whose change was rolled back).
    pub fn record_apply(&mut self, rec: &ApplyRecord) -> Result<(), StoreError> {
        self.record_apply_diff(rec, "")
    }
}

/// A write transaction on the desired state. Dropped without `commit`, it rolls back.
/// Blocks are read (not written) through it: they change through `BlockTx`.
pub struct Tx<'a> {
    tx: rusqlite::Transaction<'a>,
    blocks: &'a Connection,
    /// What `load_state` read, followed through this transaction's domain writes.
    mirror: cache::Mirror,
    committed: &'a std::cell::RefCell<cache::Committed>,
}

impl Tx<'_> {
    /// Creates or replaces a domain; returns true when it is new. A domain in a slot keeps it.
    pub fn put_domain(
        &self,
        domain: &Domain,
        backend: &Backend,
        now: i64,
    ) -> Result<bool, StoreError> {
        let write = || {
            let name = domain.to_string();
            let existed = self.delete_domain_row(domain)?;
            self.tx.execute(
                "INSERT INTO domains (name, profile, created_at, updated_at, sse_routing) VALUES (?1, ?2, ?3, ?3, ?4)",
                params![name, backend.profile().to_string(), now, backend.sse_routing()],
            )?;
            let mut insert = self.tx.prepare_cached(
                "INSERT INTO servers (domain, position, name, addr, weight, maxconn, check_enabled, extra_options)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for (i, s) in backend.servers().iter().enumerate() {
                insert.execute(params![
                    name,
                    i as i64,
                    s.name.to_string(),
                    s.addr.to_string(),
                    s.options.weight,
                    s.options.maxconn,
                    s.options.check,
                    s.options.extra_text()
                ])?;
            }
            Ok(!existed)
        };
        self.mirror.follow(&self.tx, write, |state| {
            state.app_domains.remove(domain);
            state.domains.insert(domain.clone(), backend.clone());
        })
    }

    /// Routes a domain to a delivered application (replacing any earlier route); returns true
    /// when the domain is new.
    pub fn put_app_domain(
        &self,
        domain: &Domain,
        app: &AppName,
        now: i64,
    ) -> Result<bool, StoreError> {
        let existed = self.remove_domain(domain)?;
        self.tx.execute(
            "INSERT INTO domains (name, profile, created_at, updated_at, app) VALUES (?1, 'default', ?2, ?2, ?3)",
            params![domain.to_string(), now, app.to_string()],
        )?;
        Ok(!existed)
    }

    pub fn app_state(&self, app: &AppName) -> Result<AppState, StoreError> {
        app_state(&self.tx, app)
    }

    pub fn set_app_state(
        &self,
        app: &AppName,
        state: &AppState,
        now: i64,
    ) -> Result<(), StoreError> {
        self.tx.execute(
            "INSERT OR REPLACE INTO app_state (app, current, previous, updated_at) VALUES (?1, ?2, ?3, ?4)",
            params![
                app.to_string(),
                state.current.as_ref().map(Version::to_string),
                state.previous.as_ref().map(Version::to_string),
                now
            ],
        )?;
        Ok(())
    }

    pub fn generations(&self, app: &AppName) -> Result<Vec<Generation>, StoreError> {
        generations(&self.tx, app)
    }

    /// Remembers the port a version runs on (kept across deliveries and reboots).
    pub fn remember_generation(
        &self,
        app: &AppName,
        generation: &Generation,
        now: i64,
    ) -> Result<(), StoreError> {
        self.tx.execute(
            "INSERT OR REPLACE INTO generations (app, version, port, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![app.to_string(), generation.version.to_string(), generation.port.get(), now],
        )?;
        Ok(())
    }

    /// Returns false when the domain did not exist. Its slot, if any, is free again.
    pub fn remove_domain(&self, domain: &Domain) -> Result<bool, StoreError> {
        let write = || {
            let existed = self.delete_domain_row(domain)?;
            self.tx
                .execute("DELETE FROM slots WHERE domain = ?1", [domain.to_string()])?;
            Ok(existed)
        };
        self.mirror.follow(&self.tx, write, |state| {
            state.domains.remove(domain);
            state.app_domains.remove(domain);
            state.placement.release(domain);
        })
    }

    /// Whether the domain exists, routed to servers or to an app (one lookup, no state read).
    pub fn has_domain(&self, domain: &Domain) -> Result<bool, StoreError> {
        domain_exists(&self.tx, domain)
    }

    /// The domain's row and (cascading) its servers.
    fn delete_domain_row(&self, domain: &Domain) -> Result<bool, StoreError> {
        Ok(self
            .tx
            .execute("DELETE FROM domains WHERE name = ?1", [domain.to_string()])?
            > 0)
    }

    /// Trusts a proxy network; returns false when it was already trusted.
    pub fn add_trusted_proxy(&self, net: &ProxyNet) -> Result<bool, StoreError> {
        Ok(self.tx.execute(
            "INSERT OR IGNORE INTO trusted_proxies (net) VALUES (?1)",
            [net.to_string()],
        )? > 0)
    }

    /// Returns false when the network was not trusted.
    pub fn remove_trusted_proxy(&self, net: &ProxyNet) -> Result<bool, StoreError> {
        Ok(self.tx.execute(
            "DELETE FROM trusted_proxies WHERE net = ?1",
            [net.to_string()],
        )? > 0)
    }

    pub fn load_state(&self) -> Result<EdgeState, StoreError> {
        self.mirror.load(&self.tx)
    }

    /// The keys of the blocks in force at `now` (committed ones: blocks change outside this tx).
    pub fn block_keys(&self, now: i64) -> Result<Vec<BlockKey>, StoreError> {
        blocks::load_block_keys(self.blocks, now)
    }

    pub fn record_apply(&self, rec: &ApplyRecord) -> Result<(), StoreError> {
        self.record_apply_diff(rec, "")
    }

    pub fn commit(self) -> Result<(), StoreError> {
        // A connection's own commits leave its data_version as it is: read it now.
        let mut committed = self.committed.borrow_mut();
        let serial = committed.keep(self.mirror.into_copy(), &self.tx)?;
        if let Err(e) = self.tx.commit() {
            committed.forget();
            return Err(e.into());
        }
        committed.share(serial);
        Ok(())
    }
}

fn corrupt<'k>(table: &'static str, key: &'k str) -> impl FnOnce(Invalid) -> StoreError + 'k {
    move |source| StoreError::Corrupt {
        table,
        key: key.to_string(),
        source,
    }
}

fn generation_row(app: &str, version: String, port: u16) -> Result<Generation, StoreError> {
    Ok(Generation {
        version: version.parse().map_err(corrupt("generations", app))?,
        port: Port::try_from(port).map_err(corrupt("generations", app))?,
    })
}

fn generations(conn: &Connection, app: &AppName) -> Result<Vec<Generation>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT version, port FROM generations WHERE app = ?1 ORDER BY created_at, version",
    )?;
    let mut rows = stmt.query([app.to_string()])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(generation_row(app.as_str(), r.get(0)?, r.get(1)?)?);
    }
    Ok(out)
}

fn app_state(conn: &Connection, app: &AppName) -> Result<AppState, StoreError> {
    let row: Option<(Option<String>, Option<String>)> = conn
        .query_row(
            "SELECT current, previous FROM app_state WHERE app = ?1",
            [app.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let (current, previous) = row.unwrap_or_default();
    let parse = |v: Option<String>| -> Result<Option<Version>, StoreError> {
        v.map(|v| v.parse().map_err(corrupt("app_state", app.as_str())))
            .transpose()
    };
    Ok(AppState {
        current: parse(current)?,
        previous: parse(previous)?,
    })
}

fn domain_exists(conn: &Connection, domain: &Domain) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM domains WHERE name = ?1")?
        .exists([domain.to_string()])?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AppName, Block, Note, Server, ServerName};

    fn backend(addr: &str) -> Backend {
        Backend::new(
            vec![Server::parse_spec(addr, ServerName::nth(1)).unwrap()],
            "websocket".parse().unwrap(),
        )
        .unwrap()
    }

    fn block(key: &str, expires_at: Option<i64>) -> Block {
        Block {
            key: key.parse().unwrap(),
            reason: Note::parse("reason", "test").unwrap(),
            author: Note::parse("author", "me").unwrap(),
            created_at: 10,
            expires_at,
        }
    }

    #[test]
    fn a_kept_copy_follows_other_connections_and_is_lent_without_a_clone() {
        let dir = tempfile::tempdir().unwrap();
        let (path, blocks) = (dir.path().join("state.db"), dir.path().join("blocks.db"));
        let mut writer = Store::open(&path, &blocks).unwrap();
        let reader = Store::open(&path, &blocks).unwrap();
        let a: Domain = "a.example.com".parse().unwrap();
        let b: Domain = "b.example.com".parse().unwrap();
        let tx = writer.begin().unwrap();
        tx.put_domain(&a, &backend("10.0.0.1:80"), 1).unwrap();
        tx.commit().unwrap();
        assert_eq!(reader.with_state(|s| s.domains.len()).unwrap(), 1);
        // Another connection's commit: the reader's copy is no longer exact.
        let tx = writer.begin().unwrap();
        tx.put_domain(&b, &backend("10.0.0.2:80"), 2).unwrap();
        tx.commit().unwrap();
        let names = |s: &EdgeState| s.domains.keys().cloned().collect::<Vec<_>>();
        assert_eq!(reader.with_state(names).unwrap(), [a.clone(), b.clone()]);
        // A read inside a lent state parses the rows instead of borrowing the cell twice.
        let nested = reader
            .with_state(|outer| {
                (
                    outer.domains.len(),
                    reader.load_state().unwrap().domains.len(),
                )
            })
            .unwrap();
        assert_eq!(nested, (2, 2));
        reader.forget_state();
        assert_eq!(reader.load_state().unwrap(), writer.load_state().unwrap());
    }

    /// The read joins servers to domains in name order: names that sort next to each other
    /// (a prefix, a wildcard, an application's domain between two with servers), written in
    /// another order, each read back with exactly its own servers in their order.
    #[test]
    fn each_domain_reads_back_its_own_servers_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (path, blocks) = (dir.path().join("state.db"), dir.path().join("blocks.db"));
        let mut store = Store::open(&path, &blocks).unwrap();
        let servers = |addrs: &[&str]| {
            let list = addrs
                .iter()
                .enumerate()
                .map(|(i, a)| Server::parse_spec(a, ServerName::nth(i + 1)).unwrap())
                .collect();
            Backend::new(list, "default".parse().unwrap()).unwrap()
        };
        let want: Vec<(&str, Backend)> = vec![
            (
                "b.example.com",
                servers(&["10.0.0.9:80", "10.0.0.3:80,weight=5"]),
            ),
            ("a.example.com.au", servers(&["10.0.1.1:81"])),
            (
                "*.example.com",
                servers(&["10.0.2.1:82", "10.0.2.2:82", "10.0.2.3:82"]),
            ),
            ("a.example.com", servers(&["10.0.3.1:83"])),
        ];
        let app: AppName = "shop".parse().unwrap();
        let tx = store.begin().unwrap();
        for (i, (name, backend)) in want.iter().enumerate() {
            tx.put_domain(&name.parse().unwrap(), backend, i as i64)
                .unwrap();
        }
        tx.put_app_domain(&"a.example.com.b".parse().unwrap(), &app, 9)
            .unwrap();
        tx.commit().unwrap();

        let state = Store::open(&path, &blocks).unwrap().load_state().unwrap();
        assert_eq!(state.domains.len(), want.len());
        for (name, backend) in &want {
            let domain: Domain = name.parse().unwrap();
            assert_eq!(&state.domains[&domain], backend, "{name}");
        }
        let routed: Vec<_> = state.app_domains.iter().collect();
        assert_eq!(routed, [(&"a.example.com.b".parse().unwrap(), &app)]);
    }

    #[test]
    fn state_round_trips_and_uncommitted_changes_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let blocks = dir.path().join("blocks.db");
        let mut store = Store::open(&path, &blocks).unwrap();
        let d: Domain = "*.example.com".parse().unwrap();
        let tx = store.begin().unwrap();
        assert!(tx
            .put_domain(&d, &backend("10.0.0.1:80,weight=3"), 1)
            .unwrap());
        assert!(!tx.put_domain(&d, &backend("10.0.0.2:80"), 2).unwrap());
        tx.commit().unwrap();
        let btx = store.begin_blocks().unwrap();
        assert!(btx.put_block(&block("10.0.0.0/8", None)).unwrap());
        assert!(btx.put_block(&block("192.0.2.1", Some(50))).unwrap());
        btx.commit().unwrap();

        let tx = store.begin().unwrap();
        tx.remove_domain(&d).unwrap();
        drop(tx); // rolled back

        let store = Store::open(&path, &blocks).unwrap();
        let state = store.load_state().unwrap();
        assert_eq!(state.domains[&d], backend("10.0.0.2:80"));
        assert_eq!(
            store.block_keys(100).unwrap().len(),
            1,
            "expired block left out"
        );
        assert_eq!(store.blocks().unwrap().len(), 2);
    }
}
