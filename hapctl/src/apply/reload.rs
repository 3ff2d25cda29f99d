//! The reload path of an apply: the files written behind the apply marker, one `haproxy -c`
//! on the full set, a reload through the master, and the known-good set put back on any
//! failure.

use std::path::PathBuf;

use crate::clock::unix_now;
use crate::fault;
use crate::haproxy::{ConfigVerdict, ReloadError, ReloadKind, ReloadReason};
use crate::model::Placement;

use super::memo::Role;
use super::recovery::Phase;
use super::report::{reason_for_files, Progress};
use super::runtime_plan::NotRuntime;
use super::{Applier, ApplyError, ApplyOutcome, Attempt, Converged, Loaded, Ran, Snapshot};

/// A failed step: the outcome to report, the sentence, HAProxy's own messages.
type Failed = (ApplyOutcome, String, Vec<String>);

/// Where the reload path starts.
pub(super) struct ReloadFrom {
    /// The set to put back if the new one fails.
    pub(super) target: Snapshot,
    /// Why the runtime path could not take the change.
    pub(super) why_not: Option<NotRuntime>,
    /// The runtime change tried first, and how it failed.
    pub(super) runtime_failure: Option<String>,
}

impl Applier<'_> {
    /// The executor of [`super::ApplyPath::Reload`], up to [`Applier::reload_path`]: the
    /// rollback target read (no runtime files to put back), and the runtime plan's placement
    /// saved when it `placed` added domains.
    pub(super) fn reload_from_start(
        &self,
        why: Option<NotRuntime>,
        placed: bool,
        a: &mut Attempt,
    ) -> Result<Ran, ApplyError> {
        let target = self.reload_path_target(&a.live, false, &mut a.p)?;
        if placed {
            a.tx.save_placement(&a.state.placement)?;
        }
        Ok(Ran::Reload(ReloadFrom {
            target,
            why_not: why,
            runtime_failure: None,
        }))
    }

    /// Writes the new set, checks it, reloads HAProxy with it when one runs; restores
    /// `from.target` on any failure.
    pub(super) fn reload_path(
        &self,
        mut a: Attempt,
        from: ReloadFrom,
    ) -> Result<Converged, ApplyError> {
        self.resize_slots(&mut a, from.why_not.as_ref())?;
        // A runtime change that failed may have changed the worker part way (a server added,
        // a route moved): if its fallback is refused, the known-good set is reloaded, so the
        // worker serves what the files say again instead of keeping those parts.
        let reload_back = from.runtime_failure.is_some() && self.master.show_proc().is_ok();
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
        let written = a.new.write_live(&self.settings.paths, &a.live, |n| {
            if n > 0 {
                fault::point(&format!("write:{n}"));
            }
        });
        if let Err(e) = written {
            let (outcome, restored) =
                self.restore(&from.target, refused(&mut a.p), ApplyOutcome::Rejected);
            let message = format!("writing the new files failed ({e}); {restored}");
            return Ok((a.p.report(outcome, message, vec![]), None));
        }
        fault::point("after-write");
        a.p.step("write");

        if let Some((outcome, what, messages)) = self.check_new(&a.new, &mut a.p) {
            let (outcome, restored) = self.restore(&from.target, refused(&mut a.p), outcome);
            let report = a.p.report(outcome, format!("{what}; {restored}"), messages);
            return Ok((report, None));
        }

        let running = self.master.show_proc().is_ok();
        if running {
            if let Some((outcome, message, messages)) = self.reload_new(&mut a, &from)? {
                return Ok((a.p.report(outcome, message, messages), None));
            }
        }
        fault::point("before-commit");
        let message = loaded_message(&a.p, running);
        Ok((
            a.p.report(ApplyOutcome::Applied, message, vec![]),
            Some(Loaded::Checked(a.new)),
        ))
    }

    /// A domain change only a reload loads: slotted domains move back to their own backends,
    /// and the spare slots are sized for the domains there are now. (Other reloads keep the
    /// placement: a recovery loads exactly the committed set.)
    fn resize_slots(
        &self,
        a: &mut Attempt,
        why_not: Option<&NotRuntime>,
    ) -> Result<(), ApplyError> {
        let fresh = Placement::sized_for(&a.state);
        let domain_change = matches!(
            why_not,
            Some(NotRuntime::Reload(_) | NotRuntime::Capacity(_))
        );
        if domain_change && fresh != a.state.placement {
            a.state.placement = fresh;
            a.tx.save_placement(&a.state.placement)?;
            a.new = self.render(&a.state, Role::New)?;
            a.p.changed = a.new.differing(&a.live);
            a.p.diff = self.diff(&a.live, &a.new);
            a.p.step("placement");
        }
        Ok(())
    }

    /// The one `haproxy -c` of the written set: `None` when valid, else the outcome, what
    /// failed and HAProxy's messages.
    fn check_new(&self, new: &Snapshot, p: &mut Progress) -> Option<Failed> {
        p.checks += 1;
        let config_paths = new.config_paths(&self.settings.paths);
        let verdict = self.validator.check(
            &config_paths
                .iter()
                .map(PathBuf::as_path)
                .collect::<Vec<_>>(),
        );
        p.step("check");
        match verdict {
            ConfigVerdict::Valid => None,
            ConfigVerdict::Invalid { messages } => Some((
                ApplyOutcome::Rejected,
                "HAProxy rejected the new configuration".to_string(),
                messages,
            )),
            ConfigVerdict::Unavailable { reason } => Some((
                ApplyOutcome::ValidatorUnavailable,
                format!("haproxy -c could not run ({reason})"),
                vec![],
            )),
        }
    }

    /// Reloads the running HAProxy with the written set; on failure, reloads the known-good
    /// set back and returns the outcome, the sentence and HAProxy's messages.
    fn reload_new(&self, a: &mut Attempt, from: &ReloadFrom) -> Result<Option<Failed>, ApplyError> {
        fault::point("before-reload");
        self.write_marker(Phase::Reloading)?;
        let p = &mut a.p;
        p.reload(reason_for_files(
            &p.changed,
            from.runtime_failure.as_deref(),
            from.why_not.as_ref(),
        ));
        let map_before = a.blocks.file_now();
        let reload = self.reload_master();
        p.step("reload");
        if let Err(e) = reload {
            p.reload(ReloadReason::new(
                ReloadKind::Rollback,
                format!("the reload of the new set failed ({e})"),
            ));
            let (outcome, restored) =
                self.restore(&from.target, true, ApplyOutcome::ReloadFailedRolledBack);
            let message = format!("the reload failed ({e}); {restored}");
            return Ok(Some((outcome, message, reload_messages(&e))));
        }
        fault::point("after-reload");
        // A block that landed while the new worker read its files may be missing there.
        let tx = a.tx;
        a.blocks
            .after_reload(|| tx.block_keys(unix_now()), &map_before)?;
        Ok(None)
    }
}

/// The sentence of a reload path that succeeded (`running`: HAProxy was reloaded).
fn loaded_message(p: &Progress, running: bool) -> String {
    let changed: Vec<&str> = p.changed.iter().map(|id| id.name()).collect();
    if running && changed.is_empty() {
        "the files were already hapctl's, but the running HAProxy had not loaded them (its worker had no blocked map): checked and reloaded".into()
    } else if running {
        format!("{} changed, HAProxy reloaded", changed.join(", "))
    } else {
        format!(
            "{} changed; HAProxy is not running, it will load this set when it starts",
            changed.join(", ")
        )
    }
}

fn reload_messages(e: &ReloadError) -> Vec<String> {
    match e {
        ReloadError::Failed { messages } => messages.clone(),
        _ => vec![],
    }
}
