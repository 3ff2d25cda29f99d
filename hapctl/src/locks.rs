//! The host's locks and their order. A leaf module, so that `tls` and `edge` take the apply
//! lock without importing `apply`.
//!
//! The apply lock: one writer of the live files and of HAProxy's processes (apply, reload,
//! start, restart, the check of a runtime-changed set, the certificates' fallback reload) at
//! a time on this host.
//!
//! Its order with the other locks: whoever holds one takes only locks below it, never one
//! above, so no two holders wait for each other.
//!
//! 1. `deliver-<app>.lock`: a delivery's cutover applies under it.
//! 2. `certs.lock`: an apply takes it (`Certs::ensure_files`) and releases it before the
//!    apply lock; a certificate change hands it over ([`ApplyLock::after_releasing`]).
//! 3. `apply.lock`.
//! 4. `blocks.lock`: an apply brings the blocked map in line under the apply lock; the block
//!    path takes it alone, and nothing in it takes the apply lock.
//!
//! `acme-map.lock` (the HTTP-01 tokens) is held only around its own map's writes, no other
//! lock taken under it.

use std::time::Duration;

use crate::fsutil::{LockError, LockFile};
use crate::settings::Paths;

/// The apply lock, held until dropped.
#[must_use = "the apply lock is released when dropped"]
pub struct ApplyLock {
    _file: LockFile,
}

impl ApplyLock {
    /// Waits up to `timeout` for the apply lock. Take it holding none of the locks after it
    /// in the order above.
    pub fn acquire(paths: &Paths, timeout: Duration) -> Result<ApplyLock, LockError> {
        Ok(ApplyLock {
            _file: LockFile::acquire(&paths.apply_lock(), timeout)?,
        })
    }

    /// Releases `held` (a lock ordered before this one, above), then takes the apply lock:
    /// whoever waits for the apply lock keeps no apply waiting for `held` meanwhile.
    pub fn after_releasing(
        held: LockFile,
        paths: &Paths,
        timeout: Duration,
    ) -> Result<ApplyLock, LockError> {
        drop(held);
        ApplyLock::acquire(paths, timeout)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::settings::{Settings, DEFAULT_SETTINGS_TOML};

    #[test]
    fn the_apply_lock_is_taken_once_the_lock_before_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Settings::parse(dir.path(), Path::new("t"), DEFAULT_SETTINGS_TOML)
            .unwrap()
            .paths;
        std::fs::create_dir_all(&paths.run_dir).unwrap();
        let before = paths.run_dir.join("certs.lock");
        let held = LockFile::acquire(&before, Duration::from_secs(1)).unwrap();
        let apply = ApplyLock::after_releasing(held, &paths, Duration::from_secs(1)).unwrap();
        LockFile::acquire(&before, Duration::from_millis(30)).expect("released");
        let again = ApplyLock::acquire(&paths, Duration::from_millis(30));
        assert!(matches!(again, Err(LockError::Timeout { .. })));
        drop(apply);
        let _apply =
            ApplyLock::acquire(&paths, Duration::from_millis(30)).expect("released on drop");
    }
}
