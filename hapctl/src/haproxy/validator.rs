//! `haproxy -c`: HAProxy's own judgement of a file set, before anything is reloaded.
//!
//! The verdict keeps two failures apart that an exit code alone confuses: a configuration
//! HAProxy rejected (`Invalid`, with its messages) and a validator that could not run at all
//! (`Unavailable`: missing binary, timeout, crash). Only the first says anything about the
//! configuration.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::process::{run_cancellable, run_with_timeout, ProcessError};
use crate::settings::Settings;

use super::messages;

/// Bound on `haproxy -v`, which reads no configuration.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigVerdict {
    Valid,
    /// HAProxy judged the files and refused them.
    Invalid {
        /// HAProxy's `[ALERT]`/`[WARNING]` lines (naming file and line), in order; its other
        /// output when it printed none of those (e.g. "no listener").
        messages: Vec<String>,
    },
    /// The check could not be run; nothing is known about the files.
    Unavailable {
        reason: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error(transparent)]
    Run(#[from] ProcessError),
    #[error("`{binary} -v` did not print a version line (got {output:?}); is it HAProxy?")]
    Unrecognized { binary: String, output: String },
}

#[derive(Debug, Clone)]
pub struct Validator {
    binary: PathBuf,
    timeout: Duration,
}

impl Validator {
    pub fn new(binary: impl Into<PathBuf>, timeout: Duration) -> Validator {
        Validator {
            binary: binary.into(),
            timeout,
        }
    }

    pub fn from_settings(settings: &Settings) -> Validator {
        Validator::new(&settings.haproxy.binary, settings.haproxy.check_timeout)
    }

    /// Runs `haproxy -c -f FILE...` on the files, in the order HAProxy loads them.
    pub fn check(&self, files: &[&Path]) -> ConfigVerdict {
        self.check_unless(files, &|| false)
    }

    /// [`Validator::check`], stopped when `give_way` answers true (then `Unavailable`: no
    /// verdict on the files).
    pub fn check_unless(&self, files: &[&Path], give_way: &dyn Fn() -> bool) -> ConfigVerdict {
        if files.is_empty() {
            return ConfigVerdict::Unavailable {
                reason: "no configuration file was given to check".into(),
            };
        }
        let mut cmd = Command::new(&self.binary);
        cmd.arg("-c");
        for file in files {
            cmd.arg("-f").arg(file);
        }
        let output = match run_cancellable(&mut cmd, self.timeout, give_way) {
            Ok(output) => output,
            Err(e) => {
                return ConfigVerdict::Unavailable {
                    reason: e.to_string(),
                }
            }
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        match output.status.code() {
            Some(0) => ConfigVerdict::Valid,
            // 1: errors; 2: no error but nothing to run ("no listener"). Both are HAProxy's
            // judgement of the files, so both reject them.
            Some(code @ (1 | 2)) => ConfigVerdict::Invalid {
                messages: invalid_messages(code, &stdout, &stderr),
            },
            Some(code) => ConfigVerdict::Unavailable {
                reason: format!(
                    "`{} -c` exited with unexpected status {code}: {}",
                    self.binary.display(),
                    messages::last_lines(&format!("{stderr}\n{stdout}"), 5).join(" | ")
                ),
            },
            None => ConfigVerdict::Unavailable {
                reason: format!(
                    "`{} -c` was killed by a signal ({})",
                    self.binary.display(),
                    output.status
                ),
            },
        }
    }

    /// Cheap check, without running it, that the binary resolves to an executable file
    /// (looked up in PATH when it has no slash).
    pub fn available(&self) -> Result<(), String> {
        resolve_executable(&self.binary).map(|_| ())
    }

    /// What the binary was built with, from `haproxy -vv`'s feature list.
    pub fn features(&self) -> Result<Features, VersionError> {
        let output = run_with_timeout(
            Command::new(&self.binary).arg("-vv"),
            VERSION_TIMEOUT.min(self.timeout),
        )?;
        Ok(Features::parse(&String::from_utf8_lossy(&output.stdout)))
    }

    /// The version `haproxy -v` reports, e.g. `2.6.12-1+deb12u4`.
    pub fn version(&self) -> Result<String, VersionError> {
        let output = run_with_timeout(
            Command::new(&self.binary).arg("-v"),
            VERSION_TIMEOUT.min(self.timeout),
        )?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        // "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/"
        stdout
            .lines()
            .next()
            .and_then(|line| {
                let mut words = line.split_whitespace();
                words
                    .by_ref()
                    .find(|w| *w == "version")
                    .and_then(|_| words.next())
            })
            .map(str::to_string)
            .ok_or_else(|| VersionError::Unrecognized {
                binary: self.binary.display().to_string(),
                output: stdout.chars().take(200).collect(),
            })
    }
}

/// The build features hapctl looks at (`haproxy -vv`: `Feature list : … +QUIC …`, and the
/// multiplexers it lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// Serves QUIC (HTTP/3).
    pub quic: bool,
    /// Its QUIC runs on OpenSSL's compatibility layer (needs `limited-quic`).
    pub quic_openssl_compat: bool,
    /// Speaks SPOP through a multiplexer (3.1 and later): an SPOE agent's backend is
    /// `mode spop`, its idle connections kept and shared between threads.
    pub spop_mux: bool,
}

impl Features {
    pub fn parse(vv: &str) -> Features {
        let on = |name: &str| {
            vv.lines()
                .filter(|l| l.trim_start().starts_with("Feature list"))
                .flat_map(|l| l.split_whitespace())
                .any(|w| w.strip_prefix('+') == Some(name))
        };
        // "Available multiplexer protocols :" then one line each, e.g.
        // "       spop : mode=SPOP  side=BE     mux=SPOP  flags=HOL_RISK|NO_UPG".
        let spop_mux = vv
            .lines()
            .skip_while(|l| !l.starts_with("Available multiplexer protocols"))
            .take_while(|l| !l.trim().is_empty())
            .any(|l| l.split_whitespace().any(|w| w == "mux=SPOP"));
        Features {
            quic: on("QUIC"),
            quic_openssl_compat: on("QUIC_OPENSSL_COMPAT"),
            spop_mux,
        }
    }
}

pub fn invalid_messages(code: i32, stdout: &str, stderr: &str) -> Vec<String> {
    let found = messages::alerts_and_warnings(&format!("{stderr}\n{stdout}"));
    if !found.is_empty() {
        return found;
    }
    let other: Vec<String> = messages::last_lines(&format!("{stderr}\n{stdout}"), 20)
        .into_iter()
        .filter(|l| !l.starts_with("[NOTICE]"))
        .collect();
    if other.is_empty() {
        vec![format!(
            "haproxy -c exited with status {code} without a message"
        )]
    } else {
        other
    }
}

fn resolve_executable(binary: &Path) -> Result<PathBuf, String> {
    let hint = "install HAProxy or set `[haproxy] binary` (or HAPCTL_HAPROXY_BIN) to its path";
    if binary.as_os_str().as_bytes().contains(&b'/') {
        return if is_executable_file(binary) {
            Ok(binary.to_path_buf())
        } else if binary.exists() {
            Err(format!(
                "{} is not an executable file; check its mode, or {hint}",
                binary.display()
            ))
        } else {
            Err(format!("{} does not exist; {hint}", binary.display()))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| {
            format!(
                "`{}` was not found in PATH ({}); {hint}",
                binary.display(),
                path.to_string_lossy()
            )
        })
}

fn is_executable_file(path: &Path) -> bool {
    let Ok(c_path) = CString::new(OsStr::as_bytes(path.as_os_str())) else {
        return false;
    };
    // access(2) answers for this process's user, which mode bits alone cannot.
    // SAFETY: `c_path` is a valid NUL-terminated string.
    path.is_file() && unsafe { libc::access(c_path.as_ptr(), libc::X_OK) } == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_feature_list_says_whether_quic_is_built_in_and_on_which_layer() {
        let vv = |list: &str| {
            format!("HAProxy version 3.0.11\nFeature list : -51DEGREES {list} +RT\nDefault settings :\n")
        };
        assert_eq!(Features::parse(&vv("-QUIC")), Features::default());
        let native = Features::parse(&vv("+QUIC -QUIC_OPENSSL_COMPAT"));
        assert!(native.quic && !native.quic_openssl_compat);
        let compat = Features::parse(&vv("+QUIC +QUIC_OPENSSL_COMPAT"));
        assert!(compat.quic && compat.quic_openssl_compat);
        // Only the feature list counts.
        assert!(!Features::parse("OPTIONS = USE_QUIC=1 +QUIC\n").quic);
    }

    #[test]
    fn the_multiplexer_list_says_whether_spop_has_its_own() {
        let vv = |muxes: &str| {
            format!("Feature list : +QUIC\nAvailable multiplexer protocols :\n(protocols marked as <default> cannot be specified using 'proto' keyword)\n{muxes}         h2 : mode=HTTP  side=FE|BE  mux=H2  flags=HTX|HOL_RISK|NO_UPG\n\nAvailable services : none\n")
        };
        // 3.2's line; 3.0 has no such multiplexer.
        let spop = "       spop : mode=SPOP  side=BE     mux=SPOP  flags=HOL_RISK|NO_UPG\n";
        assert!(Features::parse(&vv(spop)).spop_mux);
        assert!(!Features::parse(&vv("")).spop_mux);
        assert!(!Features::parse("mux=SPOP\n").spop_mux, "outside the list");
    }

    use super::super::testutil::{edge_config, free_port, haproxy_bin};
    use super::*;

    fn validator() -> Validator {
        Validator::new(haproxy_bin(), Duration::from_secs(20))
    }

    #[test]
    fn a_valid_file_set_is_valid() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("haproxy.cfg");
        let gen = dir.path().join("generation.cfg");
        std::fs::write(&main, edge_config(free_port())).unwrap();
        std::fs::write(&gen, "backend app\n    server a 127.0.0.1:9\n").unwrap();
        assert_eq!(validator().check(&[&main, &gen]), ConfigVerdict::Valid);
    }

    #[test]
    fn an_invalid_file_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("haproxy.cfg");
        let gen = dir.path().join("generation.cfg");
        std::fs::write(&main, edge_config(free_port())).unwrap();
        std::fs::write(&gen, "backend app\n    bogus_keyword 1\n").unwrap();
        let ConfigVerdict::Invalid { messages } = validator().check(&[&main, &gen]) else {
            panic!("expected Invalid");
        };
        assert!(
            messages[0].starts_with("[ALERT] config : parsing [")
                && messages[0].contains("generation.cfg:2]")
                && messages[0].contains("bogus_keyword"),
            "{messages:?}"
        );
        assert!(messages.iter().all(|m| !m.starts_with("[NOTICE]")));
    }

    #[test]
    fn a_config_without_listener_is_invalid_with_haproxys_reason() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.cfg");
        std::fs::write(&empty, "").unwrap();
        let ConfigVerdict::Invalid { messages } = validator().check(&[&empty]) else {
            panic!("expected Invalid");
        };
        assert!(
            messages.iter().any(|m| m.contains("no listener")),
            "{messages:?}"
        );
    }

    #[test]
    fn a_missing_binary_makes_the_validator_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, edge_config(free_port())).unwrap();
        let v = Validator::new("/nonexistent/haproxy", Duration::from_secs(5));
        let ConfigVerdict::Unavailable { reason } = v.check(&[&cfg]) else {
            panic!("expected Unavailable");
        };
        assert!(reason.contains("/nonexistent/haproxy"), "{reason}");
        assert!(v.available().unwrap_err().contains("does not exist"));
        assert!(matches!(
            v.version(),
            Err(VersionError::Run(ProcessError::NotFound { .. }))
        ));
    }

    #[test]
    fn a_crashing_or_hanging_validator_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, "").unwrap();
        let script = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            let mut perm = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
            std::fs::set_permissions(&path, perm).unwrap();
            path
        };
        let cases = [
            (script("crash", "kill -KILL $$"), "signal"),
            (script("odd", "echo boom >&2; exit 7"), "status 7"),
            (script("hang", "exec sleep 10"), "did not finish"),
        ];
        for (binary, expected) in cases {
            let v = Validator::new(&binary, Duration::from_millis(300));
            match v.check(&[&cfg]) {
                ConfigVerdict::Unavailable { reason } => {
                    assert!(reason.contains(expected), "{reason}")
                }
                other => panic!("{}: {other:?}", binary.display()),
            }
        }
    }

    #[test]
    fn availability_is_checked_without_running_the_binary() {
        assert_eq!(
            Validator::new("sh", Duration::from_secs(1)).available(),
            Ok(())
        );
        assert_eq!(validator().available(), Ok(()));
        let err = Validator::new("no-such-haproxy-binary", Duration::from_secs(1))
            .available()
            .unwrap_err();
        assert!(err.contains("not found in PATH"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("haproxy");
        std::fs::write(&plain, "").unwrap();
        let err = Validator::new(&plain, Duration::from_secs(1))
            .available()
            .unwrap_err();
        assert!(err.contains("not an executable file"), "{err}");
    }

    #[test]
    fn reports_the_version() {
        let version = validator().version().unwrap();
        assert!(
            version.starts_with(|c: char| c.is_ascii_digit()),
            "{version}"
        );
        assert!(version.contains('.'), "{version}");
    }
}
