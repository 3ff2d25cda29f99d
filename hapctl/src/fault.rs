//! Test-only crash points on the apply, block and certificate paths.
//!
//! When `HAPCTL_FAULT` names a point (`after-write`, or `write:2` for "after the second file
//! written"), the process kills itself with SIGKILL there: no destructor, no flush, exactly
//! like a power cut or an OOM kill. The crash-consistency tests drive every point; in normal
//! operation the variable is unset and a point costs one environment lookup. `fail:NAME`
//! makes the step `NAME` fail instead ([`fails`]), for the tests of a failure's undo (`fail:reload`:
//! every reload of an apply, so its rollback fails too).

/// Environment variable naming the point at which to crash.
pub const FAULT_ENV: &str = "HAPCTL_FAULT";

/// Whether `HAPCTL_FAULT` is `fail:<name>`: the step `name` is to fail as if the disk had.
pub fn fails(name: &str) -> bool {
    std::env::var(FAULT_ENV).is_ok_and(|v| v.strip_prefix("fail:") == Some(name))
}

/// Crashes here if `HAPCTL_FAULT` equals `name`.
pub fn point(name: &str) {
    if std::env::var(FAULT_ENV).is_ok_and(|v| v == name) {
        // SAFETY: sending a signal to ourselves; nothing after this runs.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
