//! The safe apply: the one path by which any change reaches HAProxy.
//!
//! lock → recover an interrupted apply → change the desired state (uncommitted) → render →
//! identical to live? done → known-good snapshot exists (else adopt the live set if it
//! validates) → write the changed files atomically → one `haproxy -c` on the full set →
//! reload through the master and confirm → commit the desired state → promote to known-good.
//! Any failure restores the known-good set (and reloads back if the live config changed) and
//! rolls the desired-state change back, and the outcome says exactly what happened.

mod diff;
mod layout;
mod memo;
mod path;
mod pending;
mod recovery;
mod reload;
mod report;
mod runtime_maps;
mod runtime_plan;
mod runtime_push;
mod snapshot;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use crate::blocks::{BlockCache, Blocks, WorkerMap};
use crate::clock::unix_now;
use crate::fault;
use crate::fsutil;
use crate::haproxy::{CliSocket, Master, Validator};
use crate::locks::ApplyLock;
use crate::model::EdgeState;
use crate::render::{self, RenderError, Templates};
use crate::settings::Settings;
use crate::store::{Store, StoreError, Tx};
use crate::tls::Certs;

pub use diff::unified as diff_files;
pub use layout::LayoutMismatch;
pub use memo::RenderMemo;
use memo::Role;
use path::ApplyPath;
pub use pending::{PendingCheck, RuntimeCheck};
use reload::ReloadFrom;
use report::{record, Progress};
pub use report::{ApplyOutcome, ApplyReport, Step};
pub use snapshot::{KnownGood, Snapshot};

/// Whether the runtime API alone can take `old` → `new` when only domains and servers differ
/// (the other changes the runtime path takes are map changes, known by their kind).
pub fn runtime_can_take(old: &EdgeState, new: &EdgeState) -> bool {
    runtime_plan::plan(old, &mut new.clone()).is_ok()
}

/// How long an apply waits for another one to finish.
const LOCK_TIMEOUT: Duration = Duration::from_secs(300);

/// Failures that stop an apply before it touched the edge (or, for `Io`, while restoring what
/// it touched: see the message).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Lock(#[from] fsutil::LockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Blocks(#[from] crate::blocks::BlockError),
    #[error(transparent)]
    Certs(#[from] crate::tls::CertError),
    #[error(transparent)]
    Layout(#[from] layout::LayoutMismatch),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The requested change does not apply to the current state (e.g. removing an absent
    /// domain); nothing was changed.
    #[error("{0}")]
    NotFound(String),
}

fn io_context(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ApplyError {
    let context = context.into();
    move |source| ApplyError::Io { context, source }
}

/// The apply transaction and what it needs.
pub struct Applier<'a> {
    settings: &'a Settings,
    templates: &'a Templates,
    validator: Validator,
    master: Master,
    /// Renders kept from earlier applies by a long-lived caller (the daemon).
    memo: Option<&'a RefCell<RenderMemo>>,
    /// The block path's view kept by a long-lived caller: the reconcile before each apply
    /// reads no block while it is in line.
    block_view: Option<&'a RefCell<BlockCache>>,
}

/// What `converge` returns: the account, and on success the set now loaded (none when
/// nothing changed).
type Converged = (ApplyReport, Option<Loaded>);

/// One apply under way: its transaction, the state and files it makes live, its account.
struct Attempt<'t> {
    tx: &'t Tx<'t>,
    blocks: &'t Blocks<'t>,
    /// The new desired state, with its slot placement.
    state: EdgeState,
    /// The files `state` renders.
    new: Arc<Snapshot>,
    /// The files on disk before this apply.
    live: Snapshot,
    p: Progress,
}

impl Attempt<'_> {
    fn diff_step(&mut self, applier: &Applier) {
        self.p.diff = applier.diff(&self.live, &self.new);
        self.p.step("diff");
    }
}

/// How a runtime executor ended.
enum Ran {
    /// In effect: the sentence for the report, and the set now loaded.
    Applied(String, Loaded),
    /// The reload path takes the change over.
    Reload(ReloadFrom),
}

/// The set a successful apply left live.
enum Loaded {
    /// Checked by `haproxy -c` (or maps valid by construction): known-good now.
    Checked(Arc<Snapshot>),
    /// Changed through the runtime API without a check: known-good once a background check
    /// passed ([`Applier::validate_pending`]).
    Unchecked,
}

impl<'a> Applier<'a> {
    pub fn new(settings: &'a Settings, templates: &'a Templates) -> Applier<'a> {
        Applier {
            settings,
            templates,
            validator: Validator::new(
                settings.haproxy.binary.clone(),
                settings.haproxy.check_timeout,
            ),
            master: Master::new(CliSocket::new(
                settings.paths.master_socket.clone(),
                Duration::from_secs(5),
            ))
            .with_log_file(settings.paths.haproxy_log.clone()),
            memo: None,
            block_view: None,
        }
    }

    /// Renders with `memo` kept between applies: at 10,000 domains most of a render is
    /// backend sections no change touched, and the state before a change was rendered by the
    /// apply before.
    pub fn with_memo(self, memo: &'a RefCell<RenderMemo>) -> Applier<'a> {
        Applier {
            memo: Some(memo),
            ..self
        }
    }

    /// Reconciles the blocked maps before each apply through `view`, kept between applies.
    pub fn with_block_view(self, view: &'a RefCell<BlockCache>) -> Applier<'a> {
        Applier {
            block_view: Some(view),
            ..self
        }
    }

    /// The files of `state`, the apply's new state or the one before the change (which the
    /// runtime path compares with the live files).
    fn render(&self, state: &EdgeState, role: Role) -> Result<Arc<Snapshot>, RenderError> {
        match self.memo {
            Some(memo) => memo
                .borrow_mut()
                .render(state, role, self.settings, self.templates),
            None => render::render_with(state, self.settings, self.templates, None)
                .map(|set| Arc::new(Snapshot::from_set(set))),
        }
    }

    /// Applies `change` to the desired state and makes the edge match it, all or nothing.
    /// `trigger` describes the change in the history. The change's own result comes back only
    /// when the apply succeeded (and the change was committed).
    pub fn apply<T>(
        &self,
        store: &mut Store,
        trigger: &str,
        change: impl FnOnce(&Tx) -> Result<T, ApplyError>,
    ) -> Result<(ApplyReport, Option<T>), ApplyError> {
        // The certificates' lock comes before the apply lock (see `crate::locks`).
        Certs::new(self.settings).ensure_files(store)?;
        let _lock = ApplyLock::acquire(&self.settings.paths, LOCK_TIMEOUT)?;
        if let Some(report) = self.recover()? {
            store.record_apply_diff(
                &record(&report, "recovery of an interrupted apply"),
                &report.diff,
            )?;
        }
        // The blocked map is the block path's: bring it in line with the database first, so
        // the set validated below carries the current blocks.
        let blocks = Blocks::new(self.settings);
        let worker = match self.block_view {
            Some(view) => blocks.reconcile_known(store, &mut view.borrow_mut())?,
            None => blocks.reconcile(|| store.block_keys(unix_now()), false)?,
        };
        let tx = store.begin()?;
        let before = tx.load_state()?;
        let value = change(&tx)?;
        let stale_worker = worker == WorkerMap::NotLoaded;
        let converged = self.converge(&tx, &blocks, stale_worker, &before);
        if let Some(memo) = self.memo {
            memo.borrow_mut().trim();
        }
        let (report, loaded) = converged?;
        if report.outcome.is_success() {
            tx.record_apply_diff(&record(&report, trigger), &report.diff)?;
            tx.commit()?;
            fault::point("after-commit");
            match loaded {
                Some(Loaded::Checked(set)) => {
                    self.promote(&set)?;
                    self.clear_marker()?;
                }
                Some(Loaded::Unchecked) => self.mark_unchecked()?,
                None => {}
            }
            Ok((report, Some(value)))
        } else {
            drop(tx);
            // After a failed rollback the marker stays, so the next command retries the recovery.
            if report.outcome != ApplyOutcome::RollbackFailed {
                self.clear_marker()?;
            }
            store.record_apply_diff(&record(&report, trigger), &report.diff)?;
            Ok((report, None))
        }
    }

    /// Makes the live files and HAProxy match the state in `tx`, restoring the previous set on
    /// any failure. On success, also returns the set now loaded (to promote), unless nothing
    /// changed. `stale_worker`: the running worker lacks hapctl's blocked map, so it was not
    /// started from these files: it is reloaded even when they are unchanged.
    fn converge(
        &self,
        tx: &Tx,
        blocks: &Blocks,
        stale_worker: bool,
        before: &EdgeState,
    ) -> Result<Converged, ApplyError> {
        let mut p = Progress::new();
        let mut state = tx.load_state()?;
        // Added domains take free slots in `state` here; saved if the path uses the plan.
        let plan = runtime_plan::plan(before, &mut state);
        let new = self.render(&state, Role::New)?;
        p.step("render");
        let paths = &self.settings.paths;
        let live = Snapshot::read_live(paths).map_err(io_context("cannot read the live files"))?;
        p.changed = new.differing(&live);
        // One question to the master for the decisions before the first write (a running
        // worker to change, the files it loads): each costs a round trip on its socket.
        let mut procs = None;
        let path = ApplyPath::choose(&p.changed, stale_worker, plan, || {
            procs = self.master.show_proc().ok();
            procs.is_some()
        });
        if path == ApplyPath::Unchanged {
            let message = "the live files already match the desired state".into();
            return Ok((p.report(ApplyOutcome::Unchanged, message, vec![]), None));
        }
        let mut a = Attempt {
            tx,
            blocks,
            state,
            new,
            live,
            p,
        };
        // The history's diff (10-15 ms at 10,000 domains): a runtime change is in effect first.
        if !path.is_runtime() {
            a.diff_step(self);
        }
        // Before the first write: a master that loads other files cannot take this set.
        if let Some(procs) = &procs {
            layout::check(self.settings, &a.new, procs.master.pid)?;
        }
        // Without a validator nothing can be trusted: stop before the first write.
        if let Err(reason) = self.validator.available() {
            let message = format!(
                "haproxy -c cannot run ({reason}); nothing was written. Install haproxy or fix [haproxy] binary"
            );
            if path.is_runtime() {
                a.diff_step(self);
            }
            let report =
                a.p.report(ApplyOutcome::ValidatorUnavailable, message, vec![]);
            return Ok((report, None));
        }
        fault::point("before-snapshot");
        let ran = match path {
            ApplyPath::Unchanged => unreachable!("returned above"),
            ApplyPath::Maps => self.maps_path(&mut a)?,
            ApplyPath::Runtime(plan) => self.runtime_path(plan, before, &mut a)?,
            ApplyPath::Reload { why, placed } => self.reload_from_start(why, placed, &mut a)?,
        };
        match ran {
            Ran::Applied(message, loaded) => Ok((
                a.p.report(ApplyOutcome::Applied, message, vec![]),
                Some(loaded),
            )),
            Ran::Reload(from) => self.reload_path(a, from),
        }
    }

    /// The diff an apply keeps in its history: every file that differs, bounded.
    fn diff(&self, old: &Snapshot, new: &Snapshot) -> String {
        let ids = new.differing(old);
        let labels = ("before", "this apply");
        diff::unified(
            old,
            new,
            &ids,
            &self.settings.paths,
            labels,
            diff::HISTORY_LIMIT,
        )
    }
}
