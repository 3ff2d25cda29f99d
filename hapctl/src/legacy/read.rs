//! Reading the old edge: its SQLite database (read-only, one read transaction, a busy
//! timeout in case the old manager still runs), its certificate folder and its lists. Only
//! reads; every value stays raw until the planner parses it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};

use super::values::Naive;
use super::LegacyError;

/// A writer holding the old database longer than this makes the read fail, clearly.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Bundles are a few kilobytes; lists a few hundred lines.
const MAX_BUNDLE_BYTES: u64 = 1 << 20;
const MAX_LIST_BYTES: u64 = 4 << 20;

/// The list files of the old edge (`/etc/haproxy`), by name.
pub const LIST_FILES: [&str; 6] = [
    "cloudflare_ips.list",
    "trusted_proxies.list",
    "trusted_ips.list",
    "trusted_ips.map",
    "wpadmin_gate_exempt.list",
    "suspended_domains.list",
];

/// One table row: its rowid and the requested columns (NULL for an optional one absent).
#[derive(Debug, Clone)]
pub struct Row {
    pub id: i64,
    pub cells: Vec<Value>,
}

/// The four tables, columns in the order of the `*_COLUMNS` constants.
#[derive(Debug, Clone, Default)]
pub struct OldDb {
    pub domains: Vec<Row>,
    pub backends: Vec<Row>,
    pub servers: Vec<Row>,
    pub blocks: Vec<Row>,
}

pub const DOMAIN_COLUMNS: [&str; 3] = ["domain", "template_override", "is_wildcard"];
pub const BACKEND_COLUMNS: [&str; 2] = ["name", "domain_id"];
pub const SERVER_COLUMNS: [&str; 5] = [
    "backend_id",
    "server_name",
    "server_address",
    "server_port",
    "server_options",
];
pub const BLOCK_COLUMNS: [&str; 5] = [
    "ip_address",
    "reason",
    "blocked_at",
    "blocked_by",
    "expiry_time",
];

/// A file of the certificate folder: its name and bytes, or why it could not be read.
#[derive(Debug, Clone)]
pub struct OldFile {
    pub name: String,
    pub bytes: Result<Vec<u8>, String>,
}

/// A list file that exists.
#[derive(Debug, Clone)]
pub struct OldList {
    pub file: &'static str,
    pub text: String,
}

/// Everything read from the old edge.
#[derive(Debug, Clone, Default)]
pub struct Legacy {
    pub db: OldDb,
    pub certs: Vec<OldFile>,
    pub lists: Vec<OldList>,
}

fn source(path: &Path, message: impl Into<String>) -> LegacyError {
    LegacyError::Source {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// Reads the database, and the folders when given.
pub fn read(db: &Path, certs: Option<&Path>, lists: Option<&Path>) -> Result<Legacy, LegacyError> {
    Ok(Legacy {
        db: read_db(db)?,
        certs: certs.map(read_certs).transpose()?.unwrap_or_default(),
        lists: lists.map(read_lists).transpose()?.unwrap_or_default(),
    })
}

fn read_db(path: &Path) -> Result<OldDb, LegacyError> {
    let meta = std::fs::metadata(path).map_err(|e| source(path, e.to_string()))?;
    if !meta.is_file() {
        return Err(source(path, "is not a file"));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn =
        Connection::open_with_flags(path, flags).map_err(|e| source(path, e.to_string()))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| source(path, e.to_string()))?;
    let sqlite = |e: rusqlite::Error| {
        source(
            path,
            format!("cannot read it as the old manager's SQLite database: {e}"),
        )
    };
    // One snapshot of all four tables, even if the old manager writes meanwhile.
    let tx = conn.transaction().map_err(sqlite)?;
    let tables: Vec<String> = tx
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(sqlite)?;
    let missing: Vec<&str> = ["domains", "backends", "backend_servers", "blocked_ips"]
        .into_iter()
        .filter(|t| !tables.iter().any(|have| have == t))
        .collect();
    if !missing.is_empty() {
        return Err(source(
            path,
            format!(
                "is not the old manager's database: table(s) {} missing",
                missing.join(", ")
            ),
        ));
    }
    let table = |name: &str, columns: &[&str], optional: &[&str]| {
        select(&tx, name, columns, optional).map_err(|e| match e {
            Select::Sqlite(e) => sqlite(e),
            Select::Missing(column) => source(
                path,
                format!("is not the old manager's database: table {name} has no column {column}"),
            ),
        })
    };
    Ok(OldDb {
        domains: table(
            "domains",
            &DOMAIN_COLUMNS,
            &["template_override", "is_wildcard"],
        )?,
        backends: table("backends", &BACKEND_COLUMNS, &[])?,
        servers: table("backend_servers", &SERVER_COLUMNS, &["server_options"])?,
        // `expiry_time` exists only once a temporary block was made.
        blocks: table("blocked_ips", &BLOCK_COLUMNS, &["expiry_time"])?,
    })
}

enum Select {
    Sqlite(rusqlite::Error),
    Missing(String),
}

fn select(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    columns: &[&str],
    optional: &[&str],
) -> Result<Vec<Row>, Select> {
    let present: Vec<String> = tx
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(Select::Sqlite)?;
    let mut exprs = Vec::new();
    for c in columns {
        if present.iter().any(|p| p == c) {
            exprs.push(format!("\"{c}\""));
        } else if optional.contains(c) {
            exprs.push("NULL".into());
        } else {
            return Err(Select::Missing((*c).into()));
        }
    }
    let sql = format!(
        "SELECT rowid, {} FROM \"{table}\" ORDER BY rowid",
        exprs.join(", ")
    );
    let mut stmt = tx.prepare(&sql).map_err(Select::Sqlite)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(Row {
                id: r.get(0)?,
                cells: (1..=columns.len())
                    .map(|i| r.get::<_, Value>(i))
                    .collect::<Result<_, _>>()?,
            })
        })
        .map_err(Select::Sqlite)?;
    rows.collect::<Result<_, _>>().map_err(Select::Sqlite)
}

fn dir_entries(dir: &Path) -> Result<Vec<PathBuf>, LegacyError> {
    let entries = std::fs::read_dir(dir).map_err(|e| source(dir, e.to_string()))?;
    let mut paths = Vec::new();
    for e in entries {
        paths.push(e.map_err(|e| source(dir, e.to_string()))?.path());
    }
    paths.sort();
    Ok(paths)
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("is larger than {max} bytes"));
    }
    Ok(bytes)
}

/// Every regular file of the folder (sub-folders such as the old `live/` are not bundles).
fn read_certs(dir: &Path) -> Result<Vec<OldFile>, LegacyError> {
    let mut out = Vec::new();
    for path in dir_entries(dir)? {
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        out.push(OldFile {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            bytes: read_bounded(&path, MAX_BUNDLE_BYTES),
        });
    }
    Ok(out)
}

/// The known list files present in the folder; a missing one is simply not imported.
fn read_lists(dir: &Path) -> Result<Vec<OldList>, LegacyError> {
    if !std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Err(source(dir, "is not a folder"));
    }
    let mut out = Vec::new();
    for file in LIST_FILES {
        let path = dir.join(file);
        if !path.exists() {
            continue;
        }
        let bytes = read_bounded(&path, MAX_LIST_BYTES).map_err(|m| source(&path, m))?;
        let text = String::from_utf8(bytes).map_err(|_| source(&path, "is not UTF-8 text"))?;
        out.push(OldList { file, text });
    }
    Ok(out)
}

/// Unix seconds of a naive local time, as the old manager wrote `expiry_time` (its
/// `datetime.now()`): the host's time zone (`TZ`), daylight saving time decided by the date.
pub fn local_to_unix(t: &Naive) -> Option<i64> {
    // SAFETY: a zeroed `tm` is a valid value; mktime only reads and normalises it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = t.year - 1900;
    tm.tm_mon = i32::from(t.month) - 1;
    tm.tm_mday = i32::from(t.day);
    tm.tm_hour = i32::from(t.hour);
    tm.tm_min = i32::from(t.minute);
    tm.tm_sec = i32::from(t.second);
    tm.tm_isdst = -1;
    let secs = unsafe { libc::mktime(&mut tm) };
    (secs != -1).then_some(secs)
}
