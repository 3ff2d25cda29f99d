//! The runtime path of an apply that changes maps alone (HTTPS policies, suspensions, limits,
//! profiles, WAF policies): the files first, then each map replaced in the running worker and
//! read back. The maps are rendered from typed values, so they are valid by construction.

use std::time::Duration;

use crate::fault;
use crate::haproxy::{CliSocket, RuntimeError, RuntimeMap};
use crate::render::FileId;

use super::reload::ReloadFrom;
use super::{pending, Applier, ApplyError, Attempt, Loaded, Ran, Snapshot};

impl Applier<'_> {
    /// The executor of [`super::ApplyPath::Maps`]: writes the changed maps and pushes them
    /// into the worker; if the worker refuses, the reload path takes over, with the files it
    /// wrote put back first.
    pub(super) fn maps_path(&self, a: &mut Attempt) -> Result<Ran, ApplyError> {
        self.write_runtime_files(&a.new, &a.live, "cannot write the changed maps")?;
        fault::point("runtime-maps:after-write");
        let pushed = self.push_maps(&a.new, &a.p.changed);
        if pushed.is_ok() {
            a.p.step("runtime");
        }
        a.diff_step(self);
        match pushed {
            Ok(()) => {
                let names: Vec<&str> = a.p.changed.iter().map(|id| id.name()).collect();
                let message = format!(
                    "{} changed through the runtime API (read back), no reload",
                    names.join(", ")
                );
                // Valid by construction; with an unchecked runtime change under it, the set
                // becomes known-good with that change's check.
                let loaded = if self.runtime_check_pending() {
                    Loaded::Unchecked
                } else {
                    Loaded::Checked(a.new.clone())
                };
                Ok(Ran::Applied(message, loaded))
            }
            Err(e) => {
                tracing::warn!("runtime map change failed ({e}); checking and reloading instead");
                Ok(Ran::Reload(ReloadFrom {
                    target: self.reload_path_target(&a.live, true, &mut a.p)?,
                    why_not: None,
                    runtime_failure: Some(e.to_string()),
                }))
            }
        }
    }

    /// Whether a set changed at runtime still waits for its `haproxy -c`.
    pub(super) fn runtime_check_pending(&self) -> bool {
        pending::unchecked_marker(&self.settings.paths).exists()
    }

    /// Replaces each changed map in the running worker and reads it back.
    fn push_maps(&self, new: &Snapshot, changed: &[FileId]) -> Result<(), RuntimeError> {
        for id in changed {
            let text = String::from_utf8_lossy(new.get(*id).unwrap_or_default()).into_owned();
            let entries: Vec<(&str, &str)> = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split_once(' '))
                .collect();
            // The apply lock is held: the worker's own socket, without the master's hop.
            let map = RuntimeMap::on_worker(
                CliSocket::new(&self.settings.paths.admin_socket, Duration::from_secs(5)),
                id.path(&self.settings.paths).display().to_string(),
            );
            map.replace_all(entries.iter().copied())?;
            let back = map.entries()?;
            let want: Vec<(String, String)> = entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            if back != want {
                return Err(RuntimeError::Refused {
                    command: format!("show map {}", id.name()),
                    answer: format!("{} entries read back, {} written", back.len(), want.len()),
                });
            }
        }
        Ok(())
    }
}
