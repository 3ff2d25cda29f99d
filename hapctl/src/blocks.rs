//! The block fast path: a block or unblock is committed to the database, written to the map
//! file atomically and applied to the running worker through the runtime API, read back to
//! confirm. No `haproxy -c` (the map is rendered from validated keys, so it cannot be
//! invalid) and no reload — unless the runtime change cannot be confirmed, in which case the
//! worker is reloaded to read the file, and the report says so.
//!
//! The blocked map belongs to this path: the apply never restores an older copy of it, it only
//! asks this module to reconcile the file (and, if it changed, the runtime map) with the
//! database. Every write of the map, file or runtime, happens under one lock file.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::unix_now;
use crate::fsutil::{self, LockError, LockFile, DEFAULT_MODE};
use crate::haproxy::{Lookup, Master, RuntimeError, RuntimeMap, Supervisor};
use crate::model::{Block, BlockKey};
use crate::render::{self, FileId, BLOCKED_VALUE};
use crate::settings::Settings;
use crate::store::{Store, StoreError};

/// Above this many keys changed at once, the runtime map is replaced whole (atomically) rather
/// than changed key by key.
const BULK_THRESHOLD: usize = 20_000;
/// Above this many new keys, they go in bulk payloads, and the read-back checks a sample and
/// the worker's entry count instead of every key (pipelined commands cost ~0.2 ms a key).
const PAYLOAD_THRESHOLD: usize = 200;
const SAMPLE: usize = 100;
const LOCK_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("the block is committed and written to {path}, but HAProxy could not be made to enforce it: the runtime change failed ({runtime}) and so did the reload ({reload}); check HAProxy")]
    NotEnforced {
        path: String,
        runtime: String,
        reload: String,
    },
    #[error("the blocks are committed and written to {path}, but the running HAProxy does not load that map: it was not started from hapctl's configuration; run `hapctl apply` (or `hapctl haproxy adopt` when a unit runs HAProxy)")]
    NotLoaded { path: String },
}

/// One requested change.
#[derive(Debug, Clone)]
pub enum BlockChange {
    /// Block, or refresh the reason and expiry of an existing block.
    Put(Block),
    /// Block only if not blocked yet (`Exists` otherwise, nothing changed).
    Add(Block),
    Remove(BlockKey),
}

/// What a change did to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeResult {
    Created,
    Updated,
    Removed,
    NotFound,
    Exists,
}

/// How the running HAProxy was made to enforce the new map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// Runtime API change, read back and confirmed: no reload.
    Runtime,
    /// The runtime change could not be confirmed; a reload made the worker read the file.
    Reload,
    /// HAProxy is not running: the file is written, it is read at start.
    NotRunning,
    /// The running HAProxy was not started from hapctl's configuration, so it has no blocked
    /// map: the file is written; the block applies once HAProxy loads hapctl's files (the
    /// next apply's reload, or `hapctl haproxy adopt`).
    NotLoaded,
    /// Nothing changed in the map.
    Unchanged,
}

#[derive(Debug, Clone, Serialize)]
pub struct BlockReport {
    /// One per requested change, in order.
    pub results: Vec<ChangeResult>,
    /// Keys whose expiry passed, removed on the way.
    pub expired: Vec<String>,
    pub enforcement: Enforcement,
    /// Why the runtime path was not enough, when `enforcement` is `reload`.
    pub runtime_error: Option<String>,
    pub duration_ms: f64,
}

/// Where the running worker stands after [`Blocks::reconcile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerMap {
    /// Its blocked map matches the file (or needed no change).
    InLine,
    /// No HAProxy runs: it reads the file when it starts.
    NotRunning,
    /// Its configuration has no blocked map: it was not started from hapctl's files.
    NotLoaded,
}

/// The block fast path of one edge.
pub struct Blocks<'a> {
    settings: &'a Settings,
}

impl<'a> Blocks<'a> {
    pub fn new(settings: &'a Settings) -> Blocks<'a> {
        Blocks { settings }
    }

    fn map_path(&self) -> std::path::PathBuf {
        FileId::BlockedMap.path(&self.settings.paths)
    }

    fn runtime(&self) -> RuntimeMap {
        let master = Master::from_settings(self.settings);
        RuntimeMap::new(
            master.socket().clone(),
            self.map_path().display().to_string(),
        )
    }

    fn lock(&self) -> Result<LockFile, BlockError> {
        Ok(LockFile::acquire(
            &self.settings.paths.blocks_lock(),
            LOCK_TIMEOUT,
        )?)
    }

    /// Applies `changes` (and removes expired blocks) through the fast path.
    pub fn change(
        &self,
        store: &mut Store,
        changes: &[BlockChange],
    ) -> Result<BlockReport, BlockError> {
        let started = Instant::now();
        let _lock = self.lock()?;
        // A change killed between its file write and its runtime update left this marker: the
        // runtime map may lack what the database and the file say, so it is rebuilt whole.
        let interrupted = self.pending_marker().exists();
        self.set_pending()?;
        let tx = store.begin_blocks()?;
        let expired = tx.remove_expired_blocks(unix_now())?;
        let mut results = Vec::with_capacity(changes.len());
        for change in changes {
            results.push(match change {
                BlockChange::Put(block) if tx.put_block(block)? => ChangeResult::Created,
                BlockChange::Put(_) => ChangeResult::Updated,
                BlockChange::Add(block) if tx.contains(&block.key)? => ChangeResult::Exists,
                BlockChange::Add(block) => {
                    tx.put_block(block)?;
                    ChangeResult::Created
                }
                BlockChange::Remove(key) if tx.remove_block(key)? => ChangeResult::Removed,
                BlockChange::Remove(_) => ChangeResult::NotFound,
            });
        }
        tx.commit()?;

        let all = store.block_keys(unix_now())?;
        // Seen before the file is written: a reload that starts later reads the new file.
        let reloads_before = self.master_reloads();
        let changed_file = self.write_file(&all)?;
        let touched: Vec<(BlockKey, Want)> = changes
            .iter()
            .zip(&results)
            .filter_map(|(c, r)| match (c, r) {
                (BlockChange::Put(b) | BlockChange::Add(b), ChangeResult::Created) => {
                    Some((b.key, Want::Added))
                }
                (BlockChange::Put(b), ChangeResult::Updated) => Some((b.key, Want::Present)),
                (BlockChange::Remove(k), ChangeResult::Removed) => Some((*k, Want::Removed)),
                _ => None,
            })
            .chain(
                expired
                    .iter()
                    .filter_map(|k| k.parse().ok().map(|k| (k, Want::Removed))),
            )
            .collect();
        let (enforcement, runtime_error) = if touched.is_empty() && !changed_file && !interrupted {
            (Enforcement::Unchanged, None)
        } else {
            self.enforce(&all, &touched, interrupted, reloads_before)?
        };
        self.clear_pending()?;
        Ok(BlockReport {
            results,
            expired,
            enforcement,
            runtime_error,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Makes the running worker match the file: entry by entry for a few keys, whole otherwise;
    /// a reload when the runtime change cannot be confirmed.
    ///
    /// A reload may run at the same time (an apply): the master's socket then refuses
    /// connections while it re-executes, and `@1` may name the old worker while the new one
    /// was reading an older file. So socket hiccups are retried, and when the master's reload
    /// count moved during the change, the change is made again on the new worker.
    fn enforce(
        &self,
        all: &[BlockKey],
        touched: &[(BlockKey, Want)],
        whole: bool,
        reloads_before: Option<u32>,
    ) -> Result<(Enforcement, Option<String>), BlockError> {
        let Some(mut seen) = reloads_before else {
            return Ok((Enforcement::NotRunning, None));
        };
        let runtime = self.runtime();
        let deadline = Instant::now() + self.settings.haproxy.reload_timeout;
        loop {
            let result = retry_transient(deadline, || {
                if touched.len() <= BULK_THRESHOLD && !whole {
                    apply_each(&runtime, touched, all.len())
                } else {
                    replace_whole(&runtime, all)
                }
            });
            match result {
                Ok(()) => {}
                // Reloading would not help: the files it would read do not declare the map.
                Err(RuntimeFailure::NotLoaded(why)) => {
                    return Ok((Enforcement::NotLoaded, Some(why)));
                }
                Err(RuntimeFailure::Transient(e) | RuntimeFailure::Final(e)) => {
                    return self.reload_instead(e);
                }
            }
            match self.master_reloads() {
                Some(now) if now != seen && Instant::now() < deadline => seen = now,
                _ => return Ok((Enforcement::Runtime, None)),
            }
        }
    }

    /// The runtime change failed: reload, so the worker reads the (already written) file.
    fn reload_instead(
        &self,
        runtime_error: String,
    ) -> Result<(Enforcement, Option<String>), BlockError> {
        tracing::warn!("runtime map change not confirmed ({runtime_error}); reloading");
        let master = Master::from_settings(self.settings);
        match master.reload(self.settings.haproxy.reload_timeout) {
            Ok(_) => Ok((Enforcement::Reload, Some(runtime_error))),
            Err(e) => Err(BlockError::NotEnforced {
                path: self.map_path().display().to_string(),
                runtime: runtime_error,
                reload: e.to_string(),
            }),
        }
    }

    /// The master's reload count, waiting (bounded) while it re-executes; `None` when no
    /// master runs.
    fn master_reloads(&self) -> Option<u32> {
        Supervisor::from_settings(self.settings)
            .procs_when_answering(self.settings.haproxy.reload_timeout)
            .map(|p| p.master.reloads)
    }

    /// Rewrites the map file from the database if it differs; returns whether it did.
    fn write_file(&self, all: &[BlockKey]) -> Result<bool, BlockError> {
        let path = self.map_path();

        let want = render::blocked_map(all);
        let write_err = |source| BlockError::Write {
            path: path.display().to_string(),
            source,
        };
        if fsutil::read_optional(&path).map_err(write_err)?.as_deref() == Some(&want[..]) {
            return Ok(false);
        }
        fsutil::write_atomic(&path, &want, DEFAULT_MODE).map_err(write_err)?;
        Ok(true)
    }

    /// Makes the file (and, when it changed and HAProxy runs, the runtime map) match `all`,
    /// the blocks in the database. Run by every apply before it validates, and by the daemon
    /// at start (`force_runtime`, since runtime entries may have been lost).
    ///
    /// `load` reads the blocks from the database; it runs under the lock, so a block committed
    /// meanwhile is either seen here or written after this by its own change.
    pub fn reconcile(
        &self,
        load: impl FnOnce() -> Result<Vec<BlockKey>, StoreError>,
        force_runtime: bool,
    ) -> Result<WorkerMap, BlockError> {
        let _lock = self.lock()?;
        let all = &load()?;
        let changed = self.write_file(all)?;
        let needed = changed || force_runtime || self.pending_marker().exists();
        let worker = if self.master_reloads().is_none() {
            WorkerMap::NotRunning
        } else if !needed {
            WorkerMap::InLine
        } else {
            let deadline = Instant::now() + self.settings.haproxy.reload_timeout;
            let runtime = self.runtime();
            match retry_transient(deadline, || replace_whole(&runtime, all)) {
                Ok(()) => WorkerMap::InLine,
                Err(RuntimeFailure::NotLoaded(why)) => {
                    tracing::info!(
                        "{why}: the blocks reach HAProxy with the reload that loads hapctl's files"
                    );
                    WorkerMap::NotLoaded
                }
                Err(RuntimeFailure::Transient(runtime) | RuntimeFailure::Final(runtime)) => {
                    return Err(BlockError::NotEnforced {
                        path: self.map_path().display().to_string(),
                        runtime,
                        reload: "not attempted".into(),
                    })
                }
            }
        };
        self.clear_pending()?;
        Ok(worker)
    }

    fn pending_marker(&self) -> std::path::PathBuf {
        self.settings.paths.run_dir.join("blocks.pending")
    }

    // The marker guards against a killed process, not a lost machine (a reboot empties the
    // runtime map anyway): no fsync, so a block costs no extra disk flush.
    fn set_pending(&self) -> Result<(), BlockError> {
        let path = self.pending_marker();
        std::fs::write(&path, b"").map_err(|source| BlockError::Write {
            path: path.display().to_string(),
            source,
        })
    }

    fn clear_pending(&self) -> Result<(), BlockError> {
        let path = self.pending_marker();
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BlockError::Write {
                path: path.display().to_string(),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// The map file's bytes now (to tell, after a reload, whether a block raced with it).
    pub fn file_now(&self) -> Vec<u8> {
        fsutil::read_optional(&self.map_path())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// After a reload: if the file changed since `before` (a block landed while the new worker
    /// was reading its files), the new worker may lack it: replace its map whole.
    pub fn after_reload(
        &self,
        load: impl FnOnce() -> Result<Vec<BlockKey>, StoreError>,
        before: &[u8],
    ) -> Result<(), BlockError> {
        if self.file_now() != before {
            self.sync(load)?;
        }
        Ok(())
    }

    /// [`Blocks::reconcile`] of the runtime map too, where a worker without the map is an
    /// error: it runs after HAProxy loaded hapctl's files.
    pub fn sync(
        &self,
        load: impl FnOnce() -> Result<Vec<BlockKey>, StoreError>,
    ) -> Result<(), BlockError> {
        match self.reconcile(load, true)? {
            WorkerMap::NotLoaded => Err(BlockError::NotLoaded {
                path: self.map_path().display().to_string(),
            }),
            WorkerMap::InLine | WorkerMap::NotRunning => Ok(()),
        }
    }
}

/// Runs `op` again while it fails on a socket hiccup of a re-executing master, until
/// `deadline`. Every runtime operation here is idempotent.
fn retry_transient<T>(
    deadline: Instant,
    mut op: impl FnMut() -> Result<T, RuntimeFailure>,
) -> Result<T, RuntimeFailure> {
    loop {
        match op() {
            Err(RuntimeFailure::Transient(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => return other,
        }
    }
}

/// A runtime operation's failure: a socket hiccup worth retrying, a worker whose configuration
/// has no blocked map, or a real answer.
enum RuntimeFailure {
    Transient(String),
    NotLoaded(String),
    Final(String),
}

impl From<RuntimeError> for RuntimeFailure {
    fn from(e: RuntimeError) -> RuntimeFailure {
        match &e {
            RuntimeError::Socket(s) if s.is_transient() => RuntimeFailure::Transient(e.to_string()),
            RuntimeError::NoAnswer { .. } => RuntimeFailure::Transient(e.to_string()),
            RuntimeError::UnknownMap { .. } => RuntimeFailure::NotLoaded(e.to_string()),
            _ => RuntimeFailure::Final(e.to_string()),
        }
    }
}

/// What the running worker must hold for a key after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Newly blocked: add it (one round trip, then the read-back).
    Added,
    /// Already blocked (reason or expiry refreshed): present, added only if missing.
    Present,
    Removed,
}

/// Makes each key's entry right in the running worker, and reads it back: an address of the
/// key must then match (blocked) or not match this key (removed; a wider block may still
/// cover it, which is right). Commands are pipelined, so a batch costs a few round trips,
/// not two per key.
fn apply_each(
    runtime: &RuntimeMap,
    touched: &[(BlockKey, Want)],
    total: usize,
) -> Result<(), RuntimeFailure> {
    let err = RuntimeFailure::from;
    let probe = |k: &BlockKey| k.net().network().to_string();
    let is_key = |found: &Lookup, key: &BlockKey| matches!(found, Lookup::Found(f) if f.parse::<BlockKey>().ok() == Some(*key));
    let of = |want: Want| -> Vec<BlockKey> {
        touched
            .iter()
            .filter(|(_, w)| *w == want)
            .map(|(k, _)| *k)
            .collect()
    };
    let (added, present, removed) = (of(Want::Added), of(Want::Present), of(Want::Removed));

    // Keys are added only where the worker lacks them (no duplicates): a new key too, since a
    // reload between the file write and this push starts a worker that loaded it from the file.
    let wanted: Vec<BlockKey> = added.iter().chain(&present).copied().collect();
    let found = runtime
        .lookup_many(&wanted.iter().map(probe).collect::<Vec<_>>())
        .map_err(err)?;
    let to_add: Vec<String> = wanted
        .iter()
        .zip(&found)
        .filter(|(k, f)| !is_key(f, k))
        .map(|(k, _)| k.to_string())
        .collect();
    let bulk = to_add.len() > PAYLOAD_THRESHOLD;
    if bulk {
        runtime
            .add_bulk(to_add.iter().map(|k| (k.as_str(), BLOCKED_VALUE)))
            .map_err(err)?;
    } else {
        runtime.add_many(&to_add, BLOCKED_VALUE).map_err(err)?;
    }
    runtime
        .remove_many(&removed.iter().map(BlockKey::to_string).collect::<Vec<_>>())
        .map_err(err)?;

    // A bulk change is read back on a spread sample, plus the worker's entry count.
    let all: Vec<(BlockKey, Want)> = if bulk {
        let held = runtime.keys().map_err(err)?.len();
        if held != total {
            return Err(RuntimeFailure::Final(format!(
                "the worker holds {held} entries after the change, expected {total}"
            )));
        }
        touched
            .iter()
            .step_by(touched.len().div_ceil(SAMPLE))
            .copied()
            .collect()
    } else {
        touched.to_vec()
    };
    let seen = runtime
        .lookup_many(&all.iter().map(|(k, _)| probe(k)).collect::<Vec<_>>())
        .map_err(err)?;
    for ((key, want), found) in all.iter().zip(&seen) {
        let right = match want {
            Want::Added | Want::Present => matches!(found, Lookup::Found(_)),
            Want::Removed => !is_key(found, key),
        };
        if !right {
            return Err(RuntimeFailure::Final(format!(
                "read back of {key} gave {found:?}"
            )));
        }
    }
    Ok(())
}

fn replace_whole(runtime: &RuntimeMap, all: &[BlockKey]) -> Result<(), RuntimeFailure> {
    let keys: Vec<String> = all.iter().map(BlockKey::to_string).collect();
    runtime
        .replace_all(keys.iter().map(|k| (k.as_str(), BLOCKED_VALUE)))
        .map_err(RuntimeFailure::from)?;
    let held = runtime.keys().map_err(RuntimeFailure::from)?;
    if held.len() == keys.len() {
        Ok(())
    } else {
        Err(RuntimeFailure::Final(format!(
            "the worker holds {} entries after the replacement, expected {}",
            held.len(),
            keys.len()
        )))
    }
}
