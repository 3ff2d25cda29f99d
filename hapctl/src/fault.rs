//! Test-only crash points on the apply, block and certificate paths.
//!
//! When `HAPCTL_FAULT` names a point (`after-write`, or `write:2` for "after the second file
//! written"), the process kills itself with SIGKILL there: no destructor, no flush, exactly
//! like a power cut or an OOM kill. The crash-consistency tests drive every point; in normal
//! operation the variable is unset and a point costs one environment lookup.

/// Environment variable naming the point at which to crash.
pub const FAULT_ENV: &str = "HAPCTL_FAULT";

/// Crashes here if `HAPCTL_FAULT` equals `name`.
pub fn point(name: &str) {
    if std::env::var(FAULT_ENV).is_ok_and(|v| v == name) {
        // SAFETY: sending a signal to ourselves; nothing after this runs.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
