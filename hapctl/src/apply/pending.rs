//! A set changed through the runtime API without a check becomes known-good only once a
//! `haproxy -c` of it passed: coalesced in the background by the daemon, at the end of a CLI
//! command, and before the next apply (so that apply's rollback target carries it). A failure
//! is a defect (the typed model rendered something HAProxy refuses): an alarm, never promoted.

use crate::fsutil;
use crate::haproxy::ConfigVerdict;

use super::{io_context, Applier, ApplyError, KnownGood, Snapshot, LOCK_TIMEOUT};
use crate::locks::ApplyLock;

/// Where the live set stands between a runtime change and its check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "messages")]
pub enum RuntimeCheck {
    /// No runtime-only change waits for a check.
    None,
    /// Changed at runtime, its `haproxy -c` not run yet (healthy: it is the committed state).
    Pending,
    /// The check refused the set: a defect alarm, with HAProxy's lines.
    Failed(Vec<String>),
}

impl RuntimeCheck {
    /// Read from the run folder's markers.
    pub fn read(paths: &crate::settings::Paths) -> RuntimeCheck {
        match std::fs::read_to_string(check_failed_marker(paths)) {
            Ok(text) => RuntimeCheck::Failed(text.lines().map(String::from).collect()),
            Err(_) if unchecked_marker(paths).exists() => RuntimeCheck::Pending,
            Err(_) => RuntimeCheck::None,
        }
    }
}

/// What a pending check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingCheck {
    /// Nothing was waiting for a check.
    Nothing,
    /// The live set passed and is known-good now.
    Promoted,
    /// HAProxy refused the live set: a defect, reported in `run/check-failed`.
    Refused(Vec<String>),
    /// Stopped for a change that arrived: the set stays pending, and the next check covers
    /// that change too.
    GaveWay,
}

impl Applier<'_> {
    /// Checks and promotes a runtime-changed live set, if one waits (takes the apply lock).
    /// `give_way`, asked while `haproxy -c` runs (at 10,000 domains about 2 s of CPU), stops
    /// it when true: a change waiting behind a background check would wait for all of it.
    pub fn validate_pending(
        &self,
        give_way: &dyn Fn() -> bool,
    ) -> Result<PendingCheck, ApplyError> {
        if !self.unchecked_marker().exists() {
            return Ok(PendingCheck::Nothing);
        }
        let _lock = ApplyLock::acquire(&self.settings.paths, LOCK_TIMEOUT)?;
        self.check_pending(give_way)
    }

    /// The check before an apply that can roll back: it never gives way.
    pub(super) fn validate_pending_locked(&self) -> Result<PendingCheck, ApplyError> {
        self.check_pending(&|| false)
    }

    fn check_pending(&self, give_way: &dyn Fn() -> bool) -> Result<PendingCheck, ApplyError> {
        if !self.unchecked_marker().exists() {
            return Ok(PendingCheck::Nothing);
        }
        let paths = &self.settings.paths;
        let live = Snapshot::read_live(paths).map_err(io_context("cannot read the live files"))?;
        let files = live.config_paths(paths);
        let files: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
        let verdict = self.validator.check_unless(&files, give_way);
        let result = match verdict {
            ConfigVerdict::Valid => {
                self.promote(&live)?;
                PendingCheck::Promoted
            }
            ConfigVerdict::Invalid { messages } => {
                tracing::error!(
                    "DEFECT: HAProxy refuses the set hapctl changed at runtime; it is not promoted to known-good: {}",
                    messages.join(" | ")
                );
                fsutil::write_atomic(
                    &self.check_failed_marker(),
                    messages.join("\n").as_bytes(),
                    0o600,
                )
                .map_err(io_context("cannot write the check-failed alarm"))?;
                PendingCheck::Refused(messages)
            }
            ConfigVerdict::Unavailable { .. } if give_way() => return Ok(PendingCheck::GaveWay),
            // Not a verdict on the set: it stays pending, checked again next time.
            ConfigVerdict::Unavailable { reason } => {
                tracing::warn!(
                    "the pending check of the runtime-changed set could not run: {reason}"
                );
                return Ok(PendingCheck::Nothing);
            }
        };
        fsutil::remove_durable(&self.unchecked_marker())
            .map_err(io_context("cannot remove the unchecked marker"))?;
        Ok(result)
    }

    /// The live set is known-good from now on; a check-failed alarm ends with it.
    pub(super) fn promote(&self, set: &Snapshot) -> Result<(), ApplyError> {
        KnownGood::new(&self.settings.paths)
            .promote(set)
            .map_err(io_context(
                "the change is live but promoting it to known-good failed",
            ))?;
        fsutil::remove_durable(&self.check_failed_marker())
            .map_err(io_context("cannot remove the check-failed alarm"))
    }

    /// Ends a committed runtime change: its apply marker becomes the unchecked marker in one
    /// rename, so a crash leaves one of them, never neither. The folder is not synced (one
    /// fsync less per change): a power cut that loses the rename leaves the apply marker, which
    /// the next command recovers from as from a kill right after the commit (the crash suite's
    /// `after-commit` point): the known-good set back, reloaded, the database converged again.
    pub(super) fn mark_unchecked(&self) -> Result<(), ApplyError> {
        std::fs::rename(self.settings.paths.apply_marker(), self.unchecked_marker()).map_err(
            io_context("cannot turn the apply marker into the unchecked marker"),
        )
    }

    fn unchecked_marker(&self) -> std::path::PathBuf {
        unchecked_marker(&self.settings.paths)
    }

    fn check_failed_marker(&self) -> std::path::PathBuf {
        check_failed_marker(&self.settings.paths)
    }
}

pub(super) fn unchecked_marker(paths: &crate::settings::Paths) -> std::path::PathBuf {
    paths.run_dir.join("unchecked")
}

fn check_failed_marker(paths: &crate::settings::Paths) -> std::path::PathBuf {
    paths.run_dir.join("check-failed")
}
