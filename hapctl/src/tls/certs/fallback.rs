//! The certificate path's fallback when the runtime install fails: the live set checked
//! and reloaded once, under the apply lock, and recorded in the apply history.

use std::time::{Duration, Instant};

use super::{CertError, Certs, InstallReport};
use crate::clock::unix_millis;
use crate::fsutil::LockFile;
use crate::haproxy::{ConfigVerdict, Master, ReloadKind, ReloadReason, Validator};
use crate::locks::ApplyLock;
use crate::store::{ApplyRecord, Store};

/// How long the apply lock is awaited for the fallback reload.
const APPLY_LOCK_TIMEOUT: Duration = Duration::from_secs(300);

impl Certs<'_> {
    /// The fallback: one `haproxy -c` of the live set, then one reload, recorded in the
    /// apply history with the reason. Under the apply lock, taken once `certs_lock` is
    /// released: applies take ours (ensure_files) before theirs, never the other way round.
    pub(super) fn checked_reload(
        &self,
        certs_lock: LockFile,
        store: &mut Store,
        what: &str,
        why: &str,
        report: &mut InstallReport,
    ) -> Result<(), CertError> {
        let _apply =
            ApplyLock::after_releasing(certs_lock, &self.settings.paths, APPLY_LOCK_TIMEOUT)?;
        let started = Instant::now();
        let started_at_ms = unix_millis();
        let paths = &self.settings.paths;
        report.checks += 1;
        let verdict = Validator::from_settings(self.settings).check(&paths.config_files());
        let reloading = matches!(verdict, ConfigVerdict::Valid);
        let result = match verdict {
            ConfigVerdict::Valid => {
                report.reloads += 1;
                Master::from_settings(self.settings)
                    .reload(self.settings.haproxy.reload_timeout)
                    .map(|_| ())
                    .map_err(|e| format!("the reload failed: {e}"))
            }
            ConfigVerdict::Invalid { messages } => Err(format!(
                "haproxy -c refused the live files: {}",
                messages.join("; ")
            )),
            ConfigVerdict::Unavailable { reason } => {
                Err(format!("haproxy -c cannot run: {reason}"))
            }
        };
        store.record_apply(&ApplyRecord {
            id: 0,
            started_at_ms,
            duration_ms: started.elapsed().as_millis() as i64,
            trigger: format!("{what}: runtime install failed ({why})"),
            outcome: if result.is_ok() {
                "applied"
            } else {
                "rejected"
            }
            .into(),
            message: match &result {
                Ok(()) => "the live files were checked and reloaded".into(),
                Err(e) => e.clone(),
            },
            checks: 1,
            reloads: report.reloads as i64,
            changed_files: vec![],
            reload_reasons: match reloading {
                true => vec![ReloadReason::new(
                    ReloadKind::CertificateFallback,
                    format!("{what}: the runtime install failed ({why})"),
                )
                .to_string()],
                false => vec![],
            },
        })?;
        result.map_err(|message| CertError::NotServed {
            name: report.name.to_string(),
            path: self.pem_path(&report.name).display().to_string(),
            message,
        })
    }
}
