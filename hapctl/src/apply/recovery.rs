//! The apply's way back: the rollback target, putting a set back, the recovery of an apply
//! that was killed, and the apply marker that tells a recovery what the killed apply had done.

use std::path::PathBuf;

use crate::fsutil;
use crate::haproxy::{
    ConfigVerdict, ReloadError, ReloadKind, ReloadReason, ReloadReport, Supervisor,
};
use crate::render::FileId;

use super::report::Progress;
use super::{io_context, Applier, ApplyError, ApplyOutcome, ApplyReport, KnownGood, Snapshot};

/// What the apply marker says about the apply that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Files may be half-way between two sets; HAProxy has not been told.
    Writing,
    /// A reload with the new set may have happened.
    Reloading,
}

const MARKER_MODE: u32 = 0o600;

impl Phase {
    fn marker_text(self) -> &'static [u8] {
        match self {
            Phase::Writing => b"writing\n",
            Phase::Reloading => b"reloading\n",
        }
    }
}

impl Applier<'_> {
    /// Readies the reload path after a runtime path was not taken or failed: the files that
    /// path `wrote` go back first, then a runtime-changed set that waits for its check is
    /// checked and promoted, so that the rollback target (read last) carries it.
    pub(super) fn reload_path_target(
        &self,
        live: &Snapshot,
        wrote: bool,
        p: &mut Progress,
    ) -> Result<Snapshot, ApplyError> {
        let paths = &self.settings.paths;
        if wrote {
            let written =
                Snapshot::read_live(paths).map_err(io_context("cannot read the live files"))?;
            live.write_live(paths, &written, |_| {})
                .map_err(io_context("cannot put the previous files back"))?;
        }
        self.validate_pending_locked()?;
        let target = self.rollback_target(live, p)?;
        p.step("snapshot");
        Ok(target)
    }

    /// The set to put back if this apply fails: the known-good snapshot; on a host without
    /// one, the live set, adopted as known-good when HAProxy accepts it (one `haproxy -c`, once
    /// per host), or kept in memory only when it does not.
    fn rollback_target(&self, live: &Snapshot, p: &mut Progress) -> Result<Snapshot, ApplyError> {
        let known_good = KnownGood::new(&self.settings.paths);
        if let Some(snapshot) = known_good
            .load()
            .map_err(io_context("cannot read the known-good snapshot"))?
        {
            return Ok(snapshot);
        }
        let adopt = if live.is_empty() {
            true
        } else {
            p.checks += 1;
            let files = live.config_paths(&self.settings.paths);
            let verdict = self
                .validator
                .check(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>());
            match verdict {
                ConfigVerdict::Valid => true,
                other => {
                    tracing::warn!(?other, "the live set is not valid and there is no known-good snapshot: a failed apply will put the same live files back");
                    false
                }
            }
        };
        if adopt {
            known_good
                .promote(live)
                .map_err(io_context("cannot write the known-good snapshot"))?;
        }
        Ok(live.clone())
    }

    /// Puts `target` back on disk and, when the running HAProxy may have loaded something
    /// else, reloads it. Returns the outcome to report and a sentence about the rollback.
    pub(super) fn restore(
        &self,
        target: &Snapshot,
        reload_back: bool,
        on_success: ApplyOutcome,
    ) -> (ApplyOutcome, String) {
        let paths = &self.settings.paths;
        let result = Snapshot::read_live(paths)
            .and_then(|current| target.write_live(paths, &current, |_| {}))
            .map_err(|e| format!("ROLLBACK FAILED: restoring the previous files failed ({e}); fix the files under {} by hand", paths.config.display()));
        let result = result.and_then(|()| {
            if reload_back {
                self.reload_back()
                    .map_err(|e| format!("ROLLBACK FAILED: the previous files are back but reloading them failed ({e}); check HAProxy now"))
            } else {
                Ok(())
            }
        });
        match result {
            Ok(()) if reload_back => (on_success, "the previous files were restored and reloaded; the edge serves the known-good configuration".into()),
            Ok(()) => (on_success, "the previous files were restored; nothing was reloaded".into()),
            Err(message) => {
                tracing::error!("{message}");
                (ApplyOutcome::RollbackFailed, message)
            }
        }
    }

    /// The rollback's reload.
    fn reload_back(&self) -> Result<(), String> {
        self.reload_master().map(|_| ()).map_err(|e| e.to_string())
    }

    /// An apply's reload of the running HAProxy. `HAPCTL_FAULT=fail:reload` makes every one
    /// fail, the new set's and the rollback's, for the tests of a rollback that fails (no real
    /// cause of one is safe to provoke on a test machine).
    pub(super) fn reload_master(&self) -> Result<ReloadReport, ReloadError> {
        if crate::fault::fails("reload") {
            return Err(ReloadError::Failed {
                messages: vec!["HAPCTL_FAULT=fail:reload".into()],
            });
        }
        self.master.reload(self.settings.haproxy.reload_timeout)
    }

    /// Finishes what a killed apply left: removes temp files, puts the known-good set back,
    /// and reloads if HAProxy may have loaded the interrupted set. Returns what it did.
    pub(super) fn recover(&self) -> Result<Option<ApplyReport>, ApplyError> {
        let paths = &self.settings.paths;
        let marker = fsutil::read_optional(&paths.apply_marker())
            .map_err(io_context("cannot read the apply marker"))?;
        // Temp files a killed write left: next to the live files, the marker, the snapshot.
        let dirs = FileId::ALL
            .iter()
            .filter_map(|id| id.path(paths).parent().map(PathBuf::from));
        for dir in dirs.chain([paths.run_dir.clone()]) {
            fsutil::sweep_temp_files(&dir)
                .map_err(io_context("cannot remove leftover temp files"))?;
        }
        KnownGood::new(paths)
            .sweep()
            .map_err(io_context("cannot clean the known-good snapshot folder"))?;
        let Some(marker) = marker else {
            return Ok(None);
        };
        let phase = if marker.starts_with(b"reloading") {
            Phase::Reloading
        } else {
            Phase::Writing
        };
        let mut p = Progress::new();
        let known_good = KnownGood::new(paths)
            .load()
            .map_err(io_context("cannot read the known-good snapshot"))?;
        let report = match known_good {
            Some(snapshot) => {
                let reload_back = phase == Phase::Reloading && self.master_answers_eventually();
                if reload_back {
                    p.reload(ReloadReason::new(
                        ReloadKind::Recovery,
                        "an apply was killed while HAProxy was reloading its files",
                    ));
                }
                let (outcome, message) = self.restore(&snapshot, reload_back, ApplyOutcome::Recovered);
                p.report(outcome, format!("an earlier apply was interrupted; {message}"), vec![])
            }
            None => p.report(
                ApplyOutcome::Recovered,
                "an earlier apply was interrupted on a host without a known-good snapshot; nothing to restore".into(),
                vec![],
            ),
        };
        if report.outcome != ApplyOutcome::RollbackFailed {
            self.clear_marker()?;
        }
        Ok(Some(report))
    }

    /// Whether the master runs, waiting (bounded) while it re-executes: an apply killed
    /// mid-reload leaves a master whose socket refuses connections for a moment, and whose new
    /// worker carries the interrupted set, which must then be reloaded away.
    fn master_answers_eventually(&self) -> bool {
        Supervisor::from_settings(self.settings)
            .procs_when_answering(self.settings.haproxy.reload_timeout)
            .is_some_and(|p| !p.workers.is_empty())
    }

    /// Writes the files a runtime change changes behind the apply marker's "reloading", in
    /// one durable step: recovery after a crash from here on reloads, so the worker cannot
    /// keep servers, routes or map entries the files lost.
    pub(super) fn write_runtime_files(
        &self,
        new: &Snapshot,
        live: &Snapshot,
        context: &str,
    ) -> Result<(), ApplyError> {
        let marker = self.settings.paths.apply_marker();
        let marker = fsutil::FileWrite {
            path: &marker,
            bytes: Phase::Reloading.marker_text(),
            new_mode: MARKER_MODE,
        };
        new.write_live_behind(&self.settings.paths, live, marker)
            .map_err(io_context(context))
    }

    pub(super) fn write_marker(&self, phase: Phase) -> Result<(), ApplyError> {
        fsutil::write_atomic(
            &self.settings.paths.apply_marker(),
            phase.marker_text(),
            MARKER_MODE,
        )
        .map_err(io_context("cannot write the apply marker"))
    }

    pub(super) fn clear_marker(&self) -> Result<(), ApplyError> {
        fsutil::remove_durable(&self.settings.paths.apply_marker())
            .map_err(io_context("cannot remove the apply marker"))
    }
}
