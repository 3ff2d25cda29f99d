//! The real haproxy under test, and wrappers in front of it that count or refuse checks.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The real haproxy binary: `HAPCTL_HAPROXY_BIN` (test.sh runs the suites again on 3.0
/// that way), else Debian's, which `.ci/run` installs; a test never skips without it.
pub fn haproxy_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os(hapctl::settings::HAPROXY_BIN_ENV) {
        return PathBuf::from(bin);
    }
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/usr/local/sbin"])
    {
        let p = Path::new(dir).join("haproxy");
        if p.is_file() {
            return p;
        }
    }
    panic!("haproxy is not installed: run ./scripts/test.sh, which installs it");
}

/// The HAProxy under test's (major, minor) version, for the few measured differences.
pub fn haproxy_version() -> (u32, u32) {
    let version = hapctl::haproxy::Validator::new(haproxy_bin(), Duration::from_secs(10))
        .version()
        .expect("haproxy -v");
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next())
}

/// A shell script standing in front of the real haproxy that logs each invocation's
/// arguments, to count `haproxy -c` runs. It `exec`s the real binary, so the master it starts
/// is the real one with the same PID.
pub fn counting_haproxy(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("haproxy-calls.log");
    let script = dir.join("haproxy-counting");
    let text = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        haproxy_bin().display()
    );
    write_script(&script, &text);
    (script, log)
}

/// A HAProxy that serves QUIC, for the HTTP/3 suites: `HAPCTL_QUIC_HAPROXY_BIN`, else Debian's
/// 3.4 where `scripts/ensure-haproxy-sid.sh` caches it (`scripts/test.sh` runs it first).
pub fn quic_haproxy_bin() -> PathBuf {
    let bin = std::env::var_os("HAPCTL_QUIC_HAPROXY_BIN").map_or_else(
        || {
            let cache = std::env::var_os("HAPCTL_TEST_CACHE")
                .unwrap_or_else(|| "/var/cache/hapctl-tests".into());
            Path::new(&cache).join("haproxy-sid/haproxy-3.4")
        },
        PathBuf::from,
    );
    assert!(
        bin.is_file(),
        "no QUIC-capable HAProxy at {}: run ./scripts/test.sh (or scripts/ensure-haproxy-sid.sh), which fetches one",
        bin.display()
    );
    bin
}

/// Writes an executable shell script.
fn write_script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A wrapper in front of the real haproxy whose `haproxy -c` refuses a set holding `needle`: it
/// first runs `sed -i <sed>` on each checked file that contains `needle` (in place, so HAProxy
/// names the file and line hapctl wrote), then the real check. It stands for an HAProxy that
/// refuses what hapctl rendered for one item: the real one accepts every server the model
/// admits. It logs its calls as [`counting_haproxy`] does. `needle` and `sed` must not contain
/// `'`.
pub fn refusing_haproxy(dir: &Path, needle: &str, sed: &str) -> (PathBuf, PathBuf) {
    assert!(!needle.contains('\'') && !sed.contains('\''));
    let (script, log) = (dir.join("haproxy-refusing"), dir.join("haproxy-calls.log"));
    let text = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\ncase \" $* \" in *\" -c \"*)\n  prev=\n  for a in \"$@\"; do\n    if [ \"$prev\" = -f ] && grep -qF '{needle}' \"$a\"; then sed -i '{sed}' \"$a\"; fi\n    prev=\"$a\"\n  done;;\nesac\nexec '{}' \"$@\"\n",
        log.display(),
        haproxy_bin().display()
    );
    write_script(&script, &text);
    (script, log)
}

/// How many `haproxy -c` runs the counting wrapper saw.
pub fn check_runs(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().any(|a| a == "-c"))
        .count()
}
