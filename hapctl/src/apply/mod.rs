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
mod pending;
mod recovery;
mod report;
mod runtime_maps;
mod runtime_plan;
mod runtime_push;
mod snapshot;

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::blocks::{Blocks, WorkerMap};
use crate::clock::unix_now;
use crate::fault;
use crate::fsutil::{self, LockFile};
use crate::haproxy::{
    CliSocket, Master, ReloadError, ReloadKind, ReloadReason, Validator, Verdict,
};
use crate::model::{EdgeState, Placement};
use crate::render::{self, FileId, RenderError, Templates};
use crate::settings::Settings;
use crate::store::{Store, StoreError, Tx};
use crate::tls::Certs;

pub use diff::unified as diff_files;
pub use layout::LayoutMismatch;
pub use memo::RenderMemo;
use memo::Role;
pub use pending::{PendingCheck, RuntimeCheck};
use recovery::Phase;
use report::{reason_for_files, record, Progress};
pub use report::{ApplyReport, Outcome, Step};
use runtime_push::RuntimeOutcome;
pub use snapshot::{KnownGood, Snapshot};

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
        // Before the apply lock: the certificate path takes the apply lock under its own.
        Certs::new(self.settings).ensure_files(store)?;
        let _lock = LockFile::acquire(&self.settings.paths.apply_lock(), LOCK_TIMEOUT)?;
        if let Some(report) = self.recover()? {
            store.record_apply_diff(
                &record(&report, "recovery of an interrupted apply"),
                &report.diff,
            )?;
        }
        // The blocked map is the block path's: bring it in line with the database first, so
        // the set validated below carries the current blocks.
        let blocks = Blocks::new(self.settings);
        let worker = blocks.reconcile(|| store.block_keys(unix_now()), false)?;
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
            if report.outcome != Outcome::RollbackFailed {
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
    ) -> Result<(ApplyReport, Option<Loaded>), ApplyError> {
        let mut p = Progress::new();
        let mut state = tx.load_state()?;
        // Added domains take free slots in `state` here; saved below if the plan is used.
        let plan = runtime_plan::plan(before, &mut state);
        let mut new = self.render(&state, Role::New)?;
        p.step("render");
        let paths = &self.settings.paths;
        let live = Snapshot::read_live(paths).map_err(io_context("cannot read the live files"))?;
        p.changed = new.differing(&live);

        if p.changed.is_empty() && !stale_worker {
            let message = "the live files already match the desired state".into();
            return Ok((p.report(Outcome::Unchanged, message, vec![]), None));
        }
        // One question to the master for the decisions before the first write (a running
        // worker to change, the files it loads): each costs a round trip on its socket.
        let procs = self.master.show_proc().ok();
        // Maps alone (policies, suspensions, limits, profiles, WAF) reach the worker through
        // the runtime API; so do the servers and routes of a runtime plan. Neither needs a
        // rollback target unless it falls back to a reload, nor the check of a runtime change
        // before it: back-to-back runtime changes do not each wait for the previous one's
        // `haproxy -c`, which the background check covers.
        let maps_only = !stale_worker
            && procs.is_some()
            && p.changed.iter().all(|id| FileId::RUNTIME_MAPS.contains(id));
        let runtime_path = !stale_worker && (plan.is_ok() || maps_only);
        // The history's diff (10-15 ms at 10,000 domains): a runtime change is in effect first.
        if !runtime_path {
            self.diff_step(&live, &new, &mut p);
        }
        // Before the first write: a master that loads other files cannot take this set.
        if let Some(procs) = &procs {
            layout::check(self.settings, &new, procs.master.pid)?;
        }

        // Without a validator nothing can be trusted: stop before the first write.
        if let Err(reason) = self.validator.available() {
            let message = format!(
                "haproxy -c cannot run ({reason}); nothing was written. Install haproxy or fix [haproxy] binary"
            );
            if runtime_path {
                self.diff_step(&live, &new, &mut p);
            }
            return Ok((
                p.report(Outcome::ValidatorUnavailable, message, vec![]),
                None,
            ));
        }

        fault::point("before-snapshot");
        // A runtime change reads no rollback target (1.5 MB at 10,000 domains) unless it falls
        // back.
        let mut target = None;
        if !runtime_path {
            target = Some(self.reload_path_target(&live, false, &mut p)?);
        }

        let (mut runtime_failure, mut why_not) = (None, None);
        if maps_only {
            let pushed = self.runtime_maps(&new, &live, &mut p)?;
            self.diff_step(&live, &new, &mut p);
            match pushed {
                Ok(message) => {
                    // Valid by construction; with an unchecked runtime change under it, the
                    // set becomes known-good with that change's check.
                    let loaded = if self.runtime_check_pending() {
                        Loaded::Unchecked
                    } else {
                        Loaded::Checked(new)
                    };
                    return Ok((p.report(Outcome::Applied, message, vec![]), Some(loaded)));
                }
                Err(failure) => {
                    target = Some(self.reload_path_target(&live, true, &mut p)?);
                    runtime_failure = Some(failure);
                }
            }
        } else if !stale_worker {
            if plan.is_ok() {
                tx.save_placement(&state.placement)?;
            }
            let outcome = match (runtime_push::usable(plan, &p.changed), &procs) {
                (Err(why), _) => RuntimeOutcome::Reload {
                    why: Some(why),
                    failure: None,
                },
                (Ok(plan), Some(_)) => {
                    self.runtime_change(plan, before, &state, &new, &live, &mut p)?
                }
                // No worker to change: the files wait for HAProxy's start.
                (Ok(_), None) => RuntimeOutcome::Reload {
                    why: None,
                    failure: None,
                },
            };
            if runtime_path {
                self.diff_step(&live, &new, &mut p);
            }
            match outcome {
                RuntimeOutcome::Applied(message) => {
                    return Ok((
                        p.report(Outcome::Applied, message, vec![]),
                        Some(Loaded::Unchecked),
                    ))
                }
                RuntimeOutcome::Reload { why, failure } => {
                    if runtime_path {
                        target = Some(self.reload_path_target(&live, failure.is_some(), &mut p)?);
                    }
                    (runtime_failure, why_not) = (failure, why);
                }
            }
        }

        // A domain change only a reload loads: slotted domains move back to their own
        // backends, and the spare slots are sized for the domains there are now. (Other
        // reloads keep the placement: a recovery loads exactly the committed set.)
        let fresh = Placement::sized_for(&state);
        let domain_change = matches!(
            why_not,
            Some(runtime_plan::NotRuntime::Reload(_) | runtime_plan::NotRuntime::Capacity(_))
        );
        if domain_change && fresh != state.placement {
            state.placement = fresh;
            tx.save_placement(&state.placement)?;
            new = self.render(&state, Role::New)?;
            p.changed = new.differing(&live);
            p.diff = self.diff(&live, &new);
            p.step("placement");
        }

        let target = match target {
            Some(target) => target,
            None => self.reload_path_target(&live, false, &mut p)?,
        };
        // A runtime change that failed may have changed the worker part way (a server added,
        // a route moved): if its fallback is refused, the known-good set is reloaded, so the
        // worker serves what the files say again instead of keeping those parts.
        let reload_back = runtime_failure.is_some() && self.master.show_proc().is_ok();
        let refused = |p: &mut Progress| {
            if reload_back {
                p.reload(ReloadReason::new(
                    ReloadKind::Rollback,
                    "the runtime change failed and its fallback was refused: the known-good set is reloaded so the worker drops what the runtime change had done",
                ));
            }
            reload_back
        };
        self.write_marker(Phase::Writing)?;
        let written = new.write_live(paths, &live, |n| {
            if n > 0 {
                fault::point(&format!("write:{n}"));
            }
        });
        if let Err(e) = written {
            let (outcome, restored) = self.restore(&target, refused(&mut p), Outcome::Rejected);
            let message = format!("writing the new files failed ({e}); {restored}");
            return Ok((p.report(outcome, message, vec![]), None));
        }
        fault::point("after-write");
        p.step("write");

        p.checks += 1;
        let config_paths = new.config_paths(paths);
        let verdict = self.validator.check(
            &config_paths
                .iter()
                .map(PathBuf::as_path)
                .collect::<Vec<_>>(),
        );
        p.step("check");
        let (failure, messages) = match verdict {
            Verdict::Valid => (None, vec![]),
            Verdict::Invalid { messages } => (
                Some((
                    Outcome::Rejected,
                    "HAProxy rejected the new configuration".to_string(),
                )),
                messages,
            ),
            Verdict::Unavailable { reason } => (
                Some((
                    Outcome::ValidatorUnavailable,
                    format!("haproxy -c could not run ({reason})"),
                )),
                vec![],
            ),
        };
        if let Some((outcome, what)) = failure {
            let (outcome, restored) = self.restore(&target, refused(&mut p), outcome);
            return Ok((
                p.report(outcome, format!("{what}; {restored}"), messages),
                None,
            ));
        }

        let running = self.master.show_proc().is_ok();
        if running {
            fault::point("before-reload");
            self.write_marker(Phase::Reloading)?;
            p.reload(reason_for_files(
                &p.changed,
                runtime_failure.as_deref(),
                why_not.as_ref(),
            ));
            let map_before = blocks.file_now();
            let reload = self.master.reload(self.settings.haproxy.reload_timeout);
            p.step("reload");
            if let Err(e) = reload {
                p.reload(ReloadReason::new(
                    ReloadKind::Rollback,
                    format!("the reload of the new set failed ({e})"),
                ));
                let (outcome, restored) =
                    self.restore(&target, true, Outcome::ReloadFailedRolledBack);
                let message = format!("the reload failed ({e}); {restored}");
                return Ok((p.report(outcome, message, reload_messages(&e)), None));
            }
            fault::point("after-reload");
            // A block that landed while the new worker read its files may be missing there.
            blocks.after_reload(|| tx.block_keys(unix_now()), &map_before)?;
        }

        fault::point("before-commit");
        let changed: Vec<&str> = p.changed.iter().map(|id| id.name()).collect();
        let message = if running && changed.is_empty() {
            "the files were already hapctl's, but the running HAProxy had not loaded them (its worker had no blocked map): checked and reloaded".into()
        } else if running {
            format!("{} changed, HAProxy reloaded", changed.join(", "))
        } else {
            format!(
                "{} changed; HAProxy is not running, it will load this set when it starts",
                changed.join(", ")
            )
        };
        Ok((
            p.report(Outcome::Applied, message, vec![]),
            Some(Loaded::Checked(new)),
        ))
    }

    fn diff_step(&self, live: &Snapshot, new: &Snapshot, p: &mut Progress) {
        p.diff = self.diff(live, new);
        p.step("diff");
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

fn reload_messages(e: &ReloadError) -> Vec<String> {
    match e {
        ReloadError::Failed { messages } => messages.clone(),
        _ => vec![],
    }
}
