//! The block fast path: a block or unblock is written to the map files atomically and durably,
//! applied to the running worker through the runtime API and read back to confirm, then
//! committed to the database (as an apply commits after its reload); a change killed or failed
//! before its commit is undone from the database. No `haproxy -c` (the maps are rendered from
//! validated keys, so they cannot be invalid) and no reload — unless the runtime change cannot
//! be confirmed, in which case the worker is reloaded to read the files, and the report says
//! so.
//!
//! The blocks live in two maps (`files.rs`): a base map written in full now and then, and a
//! small delta map rewritten per change, so a block at 100,000 entries writes a few hundred
//! bytes, not megabytes. The daemon keeps the key set in memory (`cache.rs`) and folds the
//! delta into the base when idle; `enforce.rs` changes the running worker.
//!
//! The blocked maps belong to this path: the apply never restores an older copy, it only asks
//! this module to reconcile the files (and, if they changed, the runtime maps) with the
//! database. Every write of the maps, files or runtime, happens under one lock file.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::clock::unix_now;
use crate::fault;
use crate::fsutil::{self, LockError, LockFile};
use crate::haproxy::ProcList;
use crate::model::{Block, BlockKey};
use crate::render;
use crate::settings::Settings;
use crate::store::{BlockTx, Store, StoreError};

mod cache;
mod enforce;
mod files;
mod plan;

pub use cache::BlockCache;
use enforce::{EnforceOutcome, Runtime, Step};
pub use files::MapsDigest;
use files::{delta_keys, BlockFiles};
use plan::{delta_steps, fold_steps, touched, whole_steps, Plan, Touched};

/// The delta map's bound: past it, the change folds the delta into the base map.
const DELTA_MAX: usize = 2_000;
/// An idle daemon folds a delta map of at least this many keys; a smaller one costs a change
/// nothing worth a rewrite of the base map.
const FOLD_WHEN_IDLE: usize = 256;
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
    #[error("{error}; and putting the maps back as the database has them failed too ({undo}): the next block change or `hapctl apply` rebuilds them")]
    NotUndone { error: String, undo: String },
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeResult {
    Created,
    Updated,
    Removed,
    NotFound,
    Exists,
}

/// How the running HAProxy was made to enforce the new maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// Runtime API change, read back and confirmed: no reload.
    Runtime,
    /// The runtime change could not be confirmed; a reload made the worker read the files.
    Reload,
    /// HAProxy is not running: the files are written, they are read at start.
    NotRunning,
    /// The running HAProxy was not started from hapctl's configuration, so it has no blocked
    /// map: the files are written; the block applies once HAProxy loads hapctl's files (the
    /// next apply's reload, or `hapctl haproxy adopt`).
    NotLoaded,
    /// Nothing changed in the maps.
    Unchanged,
}

/// What a block change did; also the daemon's answer to one (`POST /v1/blocked-ips`), which
/// the CLI reads back when it hands the change over.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

impl BlockReport {
    /// The report of an unblock of a key that was not blocked: nothing changed.
    pub fn not_found() -> BlockReport {
        report(
            vec![ChangeResult::NotFound],
            vec![],
            (Enforcement::Unchanged, None),
        )
    }
}

/// Where the running worker stands after [`Blocks::reconcile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerMap {
    /// Its blocked maps match the files (or needed no change).
    InLine,
    /// No HAProxy runs: it reads the files when it starts.
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

    fn files(&self) -> BlockFiles {
        BlockFiles::new(&self.settings.paths)
    }

    fn lock(&self) -> Result<LockFile, BlockError> {
        Ok(LockFile::acquire(
            &self.settings.paths.blocks_lock(),
            LOCK_TIMEOUT,
        )?)
    }

    /// Applies `changes` (and removes expired blocks) through the fast path, starting from
    /// nothing known (a one-shot command).
    pub fn change(
        &self,
        store: &mut Store,
        changes: &[BlockChange],
    ) -> Result<BlockReport, BlockError> {
        self.change_with(store, &mut BlockCache::default(), changes)
    }

    /// [`Blocks::change`] with what an earlier change left in `cache` (the daemon's).
    pub fn change_with(
        &self,
        store: &mut Store,
        cache: &mut BlockCache,
        changes: &[BlockChange],
    ) -> Result<BlockReport, BlockError> {
        let started = Instant::now();
        let _lock = self.lock()?;
        let result = self.change_locked(store, cache, changes);
        if result.is_err() {
            cache.forget();
        }
        Ok(BlockReport {
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            ..result?
        })
    }

    fn change_locked(
        &self,
        store: &mut Store,
        cache: &mut BlockCache,
        changes: &[BlockChange],
    ) -> Result<BlockReport, BlockError> {
        let files = self.files();
        let runtime = Runtime {
            settings: self.settings,
            files: &files,
        };
        // A change killed between its file write and its runtime update left this marker (and
        // perhaps a temp file): the runtime maps may lack what the database and the files say,
        // so they are rebuilt.
        let interrupted = self.pending_marker().exists();
        if interrupted {
            files.sweep_temp_files()?;
        }
        let in_line = cache.refresh(store, &files)?;
        self.set_pending()?;
        let tx = store.begin_blocks()?;
        let (results, expired) = stage(&tx, changes)?;
        let touched = touched(cache, changes, &results, &expired);
        let plan = Plan::choose(interrupted || !in_line, &cache.delta, &touched);
        if touched.is_empty() && plan == Plan::Delta {
            tx.commit()?;
            self.clear_pending()?;
            return Ok(report(results, expired, (Enforcement::Unchanged, None)));
        }
        // The files and the worker take the change before the database commits it, as an
        // apply's reload comes before its commit: the worker enforces a block one disk flush
        // after the request (the delta map's), not two (the commit's flush and the map's do
        // not overlap). A change killed before its commit leaves the marker, and the next
        // change or apply rebuilds files and worker from the database; one that fails is
        // rebuilt at once (`undo`). Either way, what the database says is what is served.
        let old_delta = std::mem::take(&mut cache.delta);
        let Written {
            before,
            steps,
            replaced,
        } = match self.write_files(&runtime, cache, &files, plan, &old_delta, &touched) {
            Ok(written) => written,
            Err(e) => {
                drop(tx);
                // A delta plan fails before its one rename or at it: no file changed, and the
                // marker left makes the next change rebuild anyway. Rewriting both maps may
                // have stopped half-way.
                return Err(match plan {
                    Plan::Delta => e,
                    Plan::Fold | Plan::Whole => self.undo(store, cache, e),
                });
            }
        };
        fault::point("block-after-files");
        let (enforced, committed) = std::thread::scope(|s| {
            // The old delta map is freed off the worker's path too (see `fsutil::Replaced`).
            let synced = replaced.map(|old| {
                s.spawn(|| {
                    drop(old);
                    files.sync_delta_folder()
                })
            });
            let enforced = self.enforce(&runtime, cache, &files, &steps, &touched, before);
            fault::point("block-after-runtime");
            // Committed even when HAProxy could not be made to enforce it: the files hold the
            // change, and a reload loads them. The commit's flush runs beside the folder's.
            let committed = tx.commit();
            let synced = synced.map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            (
                enforced.and_then(|e| synced.transpose().map(|_| e)),
                committed,
            )
        });
        if let Err(e) = committed {
            return Err(self.undo(store, cache, e.into()));
        }
        fault::point("block-after-commit");
        let enforced = enforced?;
        self.clear_pending()?;
        Ok(report(results, expired, enforced))
    }

    /// Puts the change in the map files: the delta map alone (its temp file written and synced
    /// while the master's process list is read), or both maps whole.
    fn write_files(
        &self,
        runtime: &Runtime,
        cache: &mut BlockCache,
        files: &BlockFiles,
        plan: Plan,
        old_delta: &BTreeSet<BlockKey>,
        touched: &Touched,
    ) -> Result<Written, BlockError> {
        if plan != Plan::Delta {
            let before = runtime.procs();
            self.write_folded(cache, files)?;
            let steps = match plan {
                Plan::Fold => fold_steps(cache, old_delta, touched),
                _ => whole_steps(cache),
            };
            return Ok(Written {
                before,
                steps,
                replaced: None,
            });
        }
        cache.delta = &(old_delta | &touched.new) - &touched.gone;
        let old = cache.delta_bytes().to_vec();
        // The master's processes are seen before the files change: a reload that starts later
        // reads the new files.
        let (before, staged) = std::thread::scope(|s| {
            let procs = s.spawn(|| runtime.procs());
            let staged = files.stage_delta(&cache.delta, &old);
            let procs = procs
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (procs, staged)
        });
        let (bytes, staged) = staged?;
        let replaced = staged
            .map(|staged| {
                staged.put().map_err(|source| BlockError::Write {
                    path: files.delta.display().to_string(),
                    source,
                })
            })
            .transpose()?;
        cache.wrote(None, bytes);
        Ok(Written {
            before,
            steps: delta_steps(cache, touched),
            replaced,
        })
    }

    /// After a change failed with `error` (its transaction rolled back), rebuilds the files and
    /// the worker from the database, so the failure changes nothing. If that fails too, the
    /// marker stays and the next change or apply rebuilds them.
    fn undo(&self, store: &Store, cache: &mut BlockCache, error: BlockError) -> BlockError {
        cache.forget();
        let rebuilt = store
            .block_keys(unix_now())
            .map_err(BlockError::from)
            .and_then(|keys| self.reconcile_locked(keys.into_iter().collect(), true));
        match rebuilt {
            Ok(_) => error,
            Err(undo) => BlockError::NotUndone {
                error: error.to_string(),
                undo: undo.to_string(),
            },
        }
    }

    /// Makes the worker match the files; a reload when that cannot be confirmed.
    fn enforce(
        &self,
        runtime: &Runtime,
        cache: &mut BlockCache,
        files: &BlockFiles,
        steps: &[Step],
        touched: &Touched,
        before: Option<ProcList>,
    ) -> Result<(Enforcement, Option<String>), BlockError> {
        match runtime.enforce(steps, before.clone())? {
            EnforceOutcome::Done(e, why) => Ok((e, why)),
            EnforceOutcome::Failed(why) => runtime.reload_instead(why),
            EnforceOutcome::NoDeltaMap => {
                // The worker's configuration predates the delta map: what it would load at a
                // reload is the base map alone, so every key goes there, files first.
                let moved = std::mem::take(&mut cache.delta);
                self.write_folded(cache, files)?;
                match runtime.enforce(&fold_steps(cache, &moved, touched), before)? {
                    EnforceOutcome::Done(e, why) => Ok((e, why)),
                    EnforceOutcome::Failed(why) => runtime.reload_instead(why),
                    EnforceOutcome::NoDeltaMap => {
                        unreachable!("a fold does not write to the delta map")
                    }
                }
            }
        }
    }

    /// Base map = every key, then an empty delta map (in that order: a key is never in
    /// neither file).
    fn write_folded(&self, cache: &mut BlockCache, files: &BlockFiles) -> Result<(), BlockError> {
        cache.delta.clear();
        let mark = files.write_base(&cache.all)?;
        fault::point("block-after-base");
        let bytes = files.write_delta(&cache.delta, cache.delta_bytes())?;
        cache.wrote(Some(mark), bytes);
        Ok(())
    }

    /// Folds a delta map of [`FOLD_WHEN_IDLE`] keys or more into the base map (the daemon does
    /// it when idle, so the delta stays small without a change paying for it). Returns whether
    /// it folded.
    pub fn fold(&self, store: &Store, cache: &mut BlockCache) -> Result<bool, BlockError> {
        let _lock = self.lock()?;
        let files = self.files();
        // Anything unusual is left to the next change, which rebuilds what it must.
        let in_line = cache.refresh(store, &files);
        if !matches!(in_line, Ok(true))
            || cache.delta.len() < FOLD_WHEN_IDLE
            || self.pending_marker().exists()
        {
            return in_line.map(|_| false);
        }
        self.set_pending()?;
        let runtime = Runtime {
            settings: self.settings,
            files: &files,
        };
        let before = runtime.procs();
        let moved = std::mem::take(&mut cache.delta);
        let result = self.write_folded(cache, &files).and_then(|()| {
            let steps = fold_steps(cache, &moved, &Touched::default());
            self.enforce(&runtime, cache, &files, &steps, &Touched::default(), before)
        });
        match result {
            Ok(_) => self.clear_pending().map(|()| true),
            Err(e) => {
                cache.forget();
                Err(e)
            }
        }
    }

    /// Makes the files (and, when they changed and HAProxy runs, the runtime maps) match
    /// `load`, the blocks in the database. Run by every apply before it validates, and by the
    /// daemon at start (`force_runtime`, since runtime entries may have been lost).
    ///
    /// `load` reads the blocks from the database; it runs under the lock, so a block committed
    /// meanwhile is either seen here or written after this by its own change.
    pub fn reconcile(
        &self,
        load: impl FnOnce() -> Result<Vec<BlockKey>, StoreError>,
        force_runtime: bool,
    ) -> Result<WorkerMap, BlockError> {
        let _lock = self.lock()?;
        self.reconcile_locked(load()?.into_iter().collect(), force_runtime)
    }

    /// [`Blocks::reconcile`] for a caller that keeps `cache` between applies: while the view
    /// is in line with the database and the files, no change was interrupted and no block
    /// expired, nothing is read but the files' heads (an apply at 100,000 blocks would
    /// otherwise read every key).
    pub fn reconcile_known(
        &self,
        store: &Store,
        cache: &mut BlockCache,
    ) -> Result<WorkerMap, BlockError> {
        let _lock = self.lock()?;
        let files = self.files();
        let in_line = !self.pending_marker().exists()
            && cache.refresh(store, &files)?
            && !store.has_expired_blocks(unix_now())?;
        if in_line {
            let runtime = Runtime {
                settings: self.settings,
                files: &files,
            };
            return Ok(match runtime.procs() {
                Some(_) => WorkerMap::InLine,
                None => WorkerMap::NotRunning,
            });
        }
        // Rebuilt from the database; the view reads it again next time.
        cache.forget();
        self.reconcile_locked(store.block_keys(unix_now())?.into_iter().collect(), false)
    }

    /// [`Blocks::reconcile`] with the lock held and the blocks `all` read.
    fn reconcile_locked(
        &self,
        all: BTreeSet<BlockKey>,
        force_runtime: bool,
    ) -> Result<WorkerMap, BlockError> {
        let files = self.files();
        let view = files.view()?;
        let delta = delta_keys(&view.delta_bytes).filter(|d| d.is_subset(&all));
        let fingerprint = |d: &BTreeSet<BlockKey>| {
            render::blocked_fingerprint(all.iter().filter(|k| !d.contains(k)))
        };
        let in_line = delta
            .as_ref()
            .is_some_and(|d| view.mark == Some(fingerprint(d)));
        let needed = !in_line || force_runtime || self.pending_marker().exists();
        let runtime = Runtime {
            settings: self.settings,
            files: &files,
        };
        if !needed {
            return Ok(match runtime.procs() {
                Some(_) => WorkerMap::InLine,
                None => WorkerMap::NotRunning,
            });
        }
        // Rebuilt whole: the files folded (unless they are already), then both runtime maps.
        let mut cache = BlockCache::known(all, delta.unwrap_or_default(), view);
        if !cache.delta.is_empty() || !in_line {
            self.write_folded(&mut cache, &files)?;
        }
        let worker = match runtime.enforce(&whole_steps(&cache), runtime.procs())? {
            EnforceOutcome::Done(Enforcement::NotRunning, _) => WorkerMap::NotRunning,
            EnforceOutcome::Done(Enforcement::NotLoaded, why) => {
                tracing::info!(
                    "{}: the blocks reach HAProxy with the reload that loads hapctl's files",
                    why.unwrap_or_default()
                );
                WorkerMap::NotLoaded
            }
            EnforceOutcome::Done(..) | EnforceOutcome::NoDeltaMap => WorkerMap::InLine,
            EnforceOutcome::Failed(runtime) => {
                return Err(BlockError::NotEnforced {
                    path: files.base.display().to_string(),
                    runtime,
                    reload: "not attempted".into(),
                })
            }
        };
        self.clear_pending()?;
        Ok(worker)
    }

    fn pending_marker(&self) -> std::path::PathBuf {
        self.settings.paths.run_dir.join("blocks.pending")
    }

    // The marker guards against a killed process, not a lost machine (a reboot empties the
    // runtime maps anyway): no fsync, so a block costs no extra disk flush.
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

    /// A digest of both map files now (to tell, after a reload, whether a block raced with it).
    pub fn file_now(&self) -> MapsDigest {
        self.files().digest_now()
    }

    /// After a reload: if the files changed since `before` (a block landed while the new
    /// worker was reading its files), the new worker may lack it: replace its maps whole.
    pub fn after_reload(
        &self,
        load: impl FnOnce() -> Result<Vec<BlockKey>, StoreError>,
        before: &MapsDigest,
    ) -> Result<(), BlockError> {
        if self.file_now() != *before {
            self.sync(load)?;
        }
        Ok(())
    }

    /// [`Blocks::reconcile`] of the runtime maps too, where a worker without the maps is an
    /// error: it runs after HAProxy loaded hapctl's files.
    pub fn sync(
        &self,
        load: impl FnOnce() -> Result<Vec<BlockKey>, StoreError>,
    ) -> Result<(), BlockError> {
        match self.reconcile(load, true)? {
            WorkerMap::NotLoaded => Err(BlockError::NotLoaded {
                path: self.files().base.display().to_string(),
            }),
            WorkerMap::InLine | WorkerMap::NotRunning => Ok(()),
        }
    }
}

/// What [`Blocks::write_files`] did: the master's processes before, the worker's steps and,
/// for the delta map, the file it replaced (see `fsutil::Replaced`), whose folder is still to
/// sync.
struct Written {
    before: Option<ProcList>,
    steps: Vec<Step>,
    replaced: Option<fsutil::Replaced>,
}

/// The database side of a change, not committed yet: expired blocks out, then each change in
/// order.
fn stage(
    tx: &BlockTx,
    changes: &[BlockChange],
) -> Result<(Vec<ChangeResult>, Vec<String>), BlockError> {
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
    Ok((results, expired))
}

fn report(
    results: Vec<ChangeResult>,
    expired: Vec<String>,
    (enforcement, runtime_error): (Enforcement, Option<String>),
) -> BlockReport {
    BlockReport {
        results,
        expired,
        enforcement,
        runtime_error,
        duration_ms: 0.0,
    }
}

#[cfg(test)]
mod tests;
