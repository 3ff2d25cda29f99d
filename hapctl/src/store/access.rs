//! API tokens and the audit trail, in their own database file (`access.db`): a request is
//! authenticated and its audit record written while an apply may hold the main database's
//! write transaction across a reload, and must not wait for it.
//!
//! The audit tables are append-only: triggers refuse every update, and every delete but of
//! rows older than the retention horizon, which only moves forward.

use rusqlite::{params, Connection, Row};

use super::{corrupt, open_migrated, StoreError};
use crate::model::{Scopes, TokenName};

const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE tokens (
    name TEXT PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    who TEXT NOT NULL,
    via TEXT NOT NULL,
    peer TEXT NOT NULL,
    forwarded TEXT,
    action TEXT NOT NULL,
    objects TEXT NOT NULL,
    summary TEXT NOT NULL
);
CREATE INDEX audit_by_time ON audit (at_ms);
CREATE TABLE audit_results (
    attempt INTEGER PRIMARY KEY REFERENCES audit(id),
    at_ms INTEGER NOT NULL,
    status INTEGER NOT NULL,
    outcome TEXT
);
CREATE TABLE audit_horizon (horizon_ms INTEGER NOT NULL);
INSERT INTO audit_horizon VALUES (0);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER audit_results_no_update BEFORE UPDATE ON audit_results
    BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    WHEN old.at_ms >= (SELECT horizon_ms FROM audit_horizon)
    BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER audit_results_no_delete BEFORE DELETE ON audit_results
    WHEN old.at_ms >= (SELECT horizon_ms FROM audit_horizon)
    BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER audit_horizon_forward BEFORE UPDATE ON audit_horizon
    WHEN new.horizon_ms < old.horizon_ms
    BEGIN SELECT RAISE(ABORT, 'the retention horizon only moves forward'); END;
"#];

/// One stored token: its secret's hash, never the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub name: TokenName,
    pub hash: Vec<u8>,
    pub scopes: Scopes,
    pub created_at: i64,
    pub expires_at: Option<i64>,
}

/// What an audit record says before the change runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditAttempt {
    pub at_ms: i64,
    /// A token's name, or `uid:N` for the local command line.
    pub who: String,
    /// `api`, `old-api`, `dashboard session …`, `cli`.
    pub via: String,
    /// The peer address, or `local`.
    pub peer: String,
    /// The client a trusted proxy named, if any.
    pub forwarded: Option<String>,
    /// The route (`POST /v1/blocked-ips`) or command (`hapctl token add`).
    pub action: String,
    pub objects: Vec<String>,
    /// What was asked, secrets left out.
    pub summary: String,
}

/// The end of a change: its status and, when it applied, the apply's outcome.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditResult {
    pub at_ms: i64,
    pub status: u16,
    pub outcome: Option<String>,
}

/// One line of the audit trail: the attempt, and its result once there was one (none: the
/// process died during the change).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditRecord {
    pub id: i64,
    #[serde(flatten)]
    pub attempt: AuditAttempt,
    pub result: Option<AuditResult>,
}

/// Which records `hapctl audit` and `GET /v1/audit` answer, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub since_ms: Option<i64>,
    pub who: Option<String>,
    /// A substring of one of the objects.
    pub object: Option<String>,
    pub limit: usize,
}

/// The access database.
pub struct AccessStore {
    conn: Connection,
}

impl AccessStore {
    /// Opens (creating it 0600: the trail names tokens, clients and objects; SQLite gives
    /// its journal files the same mode) and migrates the file.
    pub fn open(path: &std::path::Path) -> Result<AccessStore, StoreError> {
        use std::os::unix::fs::OpenOptionsExt;
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        match created {
            Err(source) if source.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(StoreError::Create {
                    path: path.display().to_string(),
                    source,
                })
            }
            _ => {}
        }
        Ok(AccessStore {
            conn: open_migrated(path, MIGRATIONS)?,
        })
    }

    pub fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT name, hash, scopes, created_at, expires_at FROM tokens ORDER BY name",
        )?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(token_row(r)?);
        }
        Ok(out)
    }

    pub fn token(&self, name: &TokenName) -> Result<Option<TokenRecord>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT name, hash, scopes, created_at, expires_at FROM tokens WHERE name = ?1",
        )?;
        let mut rows = stmt.query([name.as_str()])?;
        rows.next()?.map(token_row).transpose()
    }

    /// Adds a token; false when the name is taken (nothing written).
    pub fn add_token(&self, t: &TokenRecord) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "INSERT OR IGNORE INTO tokens (name, hash, scopes, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                t.name.as_str(),
                t.hash,
                t.scopes.to_string(),
                t.created_at,
                t.expires_at
            ],
        )?;
        Ok(n == 1)
    }

    /// Replaces the secret's hash of a token; false when there is none of that name.
    pub fn set_hash(&self, name: &TokenName, hash: &[u8]) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "UPDATE tokens SET hash = ?2 WHERE name = ?1",
            params![name.as_str(), hash],
        )?;
        Ok(n == 1)
    }

    pub fn remove_token(&self, name: &TokenName) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute("DELETE FROM tokens WHERE name = ?1", [name.as_str()])?;
        Ok(n == 1)
    }

    /// Appends an attempt; its id is what [`AccessStore::finish`] names.
    pub fn begin_audit(&self, a: &AuditAttempt) -> Result<i64, StoreError> {
        self.conn.execute(
            "INSERT INTO audit (at_ms, who, via, peer, forwarded, action, objects, summary)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                a.at_ms,
                a.who,
                a.via,
                a.peer,
                a.forwarded,
                a.action,
                a.objects.join("\n"),
                a.summary
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn finish_audit(&self, attempt: i64, r: &AuditResult) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO audit_results (attempt, at_ms, status, outcome) VALUES (?1, ?2, ?3, ?4)",
            params![attempt, r.at_ms, r.status, r.outcome],
        )?;
        Ok(())
    }

    /// An attempt and its result at once (a refused request, a sign-in).
    pub fn audit_event(&self, a: &AuditAttempt, r: &AuditResult) -> Result<(), StoreError> {
        let tx = self.conn.unchecked_transaction()?;
        let id = self.begin_audit(a)?;
        self.finish_audit(id, r)?;
        Ok(tx.commit()?)
    }

    pub fn audit(&self, f: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT a.id, a.at_ms, a.who, a.via, a.peer, a.forwarded, a.action, a.objects,
                    a.summary, r.at_ms, r.status, r.outcome
             FROM audit a LEFT JOIN audit_results r ON r.attempt = a.id
             WHERE (?1 IS NULL OR a.at_ms >= ?1) AND (?2 IS NULL OR a.who = ?2)
               AND (?3 IS NULL OR instr(a.objects, ?3) > 0)
             ORDER BY a.id DESC LIMIT ?4",
        )?;
        let rows = stmt.query_map(
            params![f.since_ms, f.who, f.object, f.limit as i64],
            audit_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes the records older than `horizon_ms` (the retention setting).
    pub fn prune_audit(&self, horizon_ms: i64) -> Result<usize, StoreError> {
        let tx = self.conn.unchecked_transaction()?;
        let current: i64 =
            tx.query_row("SELECT horizon_ms FROM audit_horizon", [], |r| r.get(0))?;
        if horizon_ms <= current {
            return Ok(0);
        }
        tx.execute("UPDATE audit_horizon SET horizon_ms = ?1", [horizon_ms])?;
        tx.execute(
            "DELETE FROM audit_results WHERE attempt IN (SELECT id FROM audit WHERE at_ms < ?1)",
            [horizon_ms],
        )?;
        let n = tx.execute("DELETE FROM audit WHERE at_ms < ?1", [horizon_ms])?;
        tx.commit()?;
        Ok(n)
    }
}

fn token_row(r: &Row<'_>) -> Result<TokenRecord, StoreError> {
    let name: String = r.get(0)?;
    let scopes: String = r.get(2)?;
    Ok(TokenRecord {
        name: name.parse().map_err(corrupt("tokens", &name))?,
        hash: r.get(1)?,
        scopes: scopes.parse().map_err(corrupt("tokens", &name))?,
        created_at: r.get(3)?,
        expires_at: r.get(4)?,
    })
}

fn audit_row(r: &Row<'_>) -> rusqlite::Result<AuditRecord> {
    let objects: String = r.get(7)?;
    let result = match r.get::<_, Option<i64>>(9)? {
        Some(at_ms) => Some(AuditResult {
            at_ms,
            status: r.get(10)?,
            outcome: r.get(11)?,
        }),
        None => None,
    };
    Ok(AuditRecord {
        id: r.get(0)?,
        attempt: AuditAttempt {
            at_ms: r.get(1)?,
            who: r.get(2)?,
            via: r.get(3)?,
            peer: r.get(4)?,
            forwarded: r.get(5)?,
            action: r.get(6)?,
            objects: objects.lines().map(String::from).collect(),
            summary: r.get(8)?,
        },
        result,
    })
}
