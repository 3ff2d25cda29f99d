//! Running one generation's process: directly (`exec`) or through a systemd template unit.

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fsutil;
use crate::model::{AppName, Generation, Version};
use crate::process::{self, pid_alive, run_with_timeout, signal_group, start_time};
use crate::settings::{AppSettings, RunnerSettings, Settings};

/// Bound on one `systemctl` call.
const SYSTEMCTL_TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("cannot start {app} {version}: {message}")]
    Start {
        app: String,
        version: String,
        message: String,
    },
    #[error("cannot stop {app} {version}: {message}")]
    Stop {
        app: String,
        version: String,
        message: String,
    },
    #[error(transparent)]
    Process(#[from] process::ProcessError),
    #[error("`systemctl {args}` failed: {message}; see `journalctl -u {unit}`")]
    Systemctl {
        args: String,
        unit: String,
        message: String,
    },
}

/// Runs the generations of one app.
pub enum Runner {
    Exec {
        app: AppName,
        argv: Vec<String>,
        dir: PathBuf,
        grace: Duration,
    },
    Systemd {
        unit_template: String,
        /// `systemctl` (a path only in tests).
        systemctl: PathBuf,
    },
}

impl Runner {
    pub fn new(settings: &Settings, app: &AppSettings) -> Runner {
        match &app.runner {
            RunnerSettings::Exec { argv } => Runner::Exec {
                app: app.name.clone(),
                argv: argv.clone(),
                dir: settings
                    .state_dir
                    .join("generations")
                    .join(app.name.as_str()),
                grace: app.stop_grace,
            },
            RunnerSettings::Systemd { unit } => Runner::Systemd {
                unit_template: unit.clone(),
                systemctl: PathBuf::from("systemctl"),
            },
        }
    }

    /// Starts `generation` (and, with systemd, enables it at boot).
    pub fn start(&self, generation: &Generation) -> Result<(), RunnerError> {
        match self {
            Runner::Exec { app, argv, dir, .. } => {
                let version = generation.version.as_str();
                let port = generation.port.to_string();
                let start_err = |message: String| RunnerError::Start {
                    app: app.to_string(),
                    version: version.to_string(),
                    message,
                };
                std::fs::create_dir_all(dir)
                    .map_err(|e| start_err(format!("cannot create {}: {e}", dir.display())))?;
                let log_path = dir.join(format!("{version}.log"));
                let log = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log_path)
                    .map_err(|e| start_err(format!("cannot open {}: {e}", log_path.display())))?;
                let err_log = log.try_clone().map_err(|e| start_err(e.to_string()))?;
                let args: Vec<String> = argv
                    .iter()
                    .map(|a| a.replace("{version}", version).replace("{port}", &port))
                    .collect();
                let mut cmd = Command::new(&args[0]);
                cmd.args(&args[1..])
                    .env("HAPCTL_APP", app.as_str())
                    .env("HAPCTL_VERSION", version)
                    .env("HAPCTL_PORT", &port)
                    .stdin(Stdio::null())
                    .stdout(log)
                    .stderr(err_log);
                // Its own session: the generation outlives this command and is stopped as a
                // group (the app's own children included).
                // SAFETY: setsid is async-signal-safe and touches no memory of ours.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::setsid() < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                let child = cmd
                    .spawn()
                    .map_err(|e| start_err(format!("cannot run {:?}: {e}", args[0])))?;
                let pid = child.id() as i32;
                let stamp = start_time(pid).unwrap_or(0);
                fsutil::write_atomic(
                    &self.pidfile(&generation.version),
                    format!("{pid} {stamp}\n").as_bytes(),
                    0o644,
                )
                .map_err(|e| start_err(format!("cannot write its pidfile: {e}")))?;
                Ok(())
            }
            Runner::Systemd { .. } => self.systemctl(&["enable", "--now"], &generation.version),
        }
    }

    /// Whether the generation's process runs.
    pub fn is_running(&self, version: &Version) -> bool {
        match self {
            Runner::Exec { .. } => self.pid(version).is_some(),
            Runner::Systemd { .. } => self.systemctl(&["is-active", "--quiet"], version).is_ok(),
        }
    }

    /// The PID of an exec generation, if it runs (checked against reuse by its start time).
    pub fn pid(&self, version: &Version) -> Option<i32> {
        let text = std::fs::read_to_string(self.pidfile(version)).ok()?;
        let mut parts = text.split_whitespace();
        let pid: i32 = parts.next()?.parse().ok()?;
        let stamp: u64 = parts.next()?.parse().ok()?;
        (pid_alive(pid) && start_time(pid) == Some(stamp)).then_some(pid)
    }

    /// Stops the generation for good (systemd: `disable --now`).
    pub fn remove(&self, app: &AppName, version: &Version) -> Result<(), RunnerError> {
        match self {
            Runner::Exec { grace, .. } => {
                let stop_err = |message: String| RunnerError::Stop {
                    app: app.to_string(),
                    version: version.to_string(),
                    message,
                };
                if let Some(pid) = self.pid(version) {
                    signal_group(pid, libc::SIGTERM).map_err(|e| stop_err(e.to_string()))?;
                    let deadline = Instant::now() + *grace;
                    while pid_alive(pid) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    if pid_alive(pid) {
                        signal_group(pid, libc::SIGKILL).map_err(|e| stop_err(e.to_string()))?;
                    }
                    // Reap it if it is our own child (a delivery aborted in this process).
                    // SAFETY: waitpid on a specific PID with WNOHANG; no memory shared.
                    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
                }
                fsutil::remove_durable(&self.pidfile(version)).map_err(|e| stop_err(e.to_string()))
            }
            Runner::Systemd { .. } => self.systemctl(&["disable", "--now"], version),
        }
    }

    /// Keeps the generation running but not started at boot (the one a delivery replaced).
    pub fn keep_not_at_boot(&self, version: &Version) -> Result<(), RunnerError> {
        match self {
            // `boot` starts only what the configuration designates: nothing to record.
            Runner::Exec { .. } => Ok(()),
            Runner::Systemd { .. } => self.systemctl(&["disable"], version),
        }
    }

    /// Makes the generation start at boot (the one now in service).
    pub fn start_at_boot(&self, version: &Version) -> Result<(), RunnerError> {
        match self {
            Runner::Exec { .. } => Ok(()),
            Runner::Systemd { .. } => self.systemctl(&["enable"], version),
        }
    }

    /// The last lines of an exec generation's log, for error messages.
    pub fn log_tail(&self, version: &Version) -> String {
        match self {
            Runner::Exec { dir, .. } => {
                let text =
                    std::fs::read_to_string(dir.join(format!("{version}.log"))).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(5)..].join(" | ")
            }
            Runner::Systemd { unit_template, .. } => format!(
                "see `journalctl -u {}`",
                unit_template.replace("{version}", version.as_str())
            ),
        }
    }

    fn pidfile(&self, version: &Version) -> PathBuf {
        match self {
            Runner::Exec { dir, .. } => dir.join(format!("{version}.pid")),
            Runner::Systemd { .. } => PathBuf::new(),
        }
    }

    fn systemctl(&self, action: &[&str], version: &Version) -> Result<(), RunnerError> {
        let Runner::Systemd {
            unit_template,
            systemctl,
        } = self
        else {
            unreachable!("systemctl is only used by the systemd runner")
        };
        let unit = unit_template.replace("{version}", version.as_str());
        let out = run_with_timeout(
            Command::new(systemctl).args(action).arg(&unit),
            SYSTEMCTL_TIMEOUT,
        )?;
        if out.status.success() {
            Ok(())
        } else {
            Err(RunnerError::Systemctl {
                args: format!("{} {unit}", action.join(" ")),
                unit,
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The systemd runner's calls, seen by a stand-in `systemctl` that logs its arguments
    /// (no systemd runs on the machines these tests run on).
    #[test]
    fn the_systemd_runner_enables_disables_and_removes_template_units() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls");
        let fake = dir.path().join("systemctl");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\n[ \"$1\" != is-active ]\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let runner = Runner::Systemd {
            unit_template: "pub-maj-app@{version}.service".into(),
            systemctl: fake,
        };
        let v: Version = "1.5.0".parse().unwrap();
        let app: AppName = "pub-maj-app".parse().unwrap();
        let generation = Generation {
            version: v.clone(),
            port: 18212.try_into().unwrap(),
        };
        runner.start(&generation).unwrap();
        assert!(
            !runner.is_running(&v),
            "is-active exiting non-zero means not running"
        );
        runner.keep_not_at_boot(&v).unwrap();
        runner.start_at_boot(&v).unwrap();
        runner.remove(&app, &v).unwrap();
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls.lines().collect::<Vec<_>>(),
            [
                "enable --now pub-maj-app@1.5.0.service",
                "is-active --quiet pub-maj-app@1.5.0.service",
                "disable pub-maj-app@1.5.0.service",
                "enable pub-maj-app@1.5.0.service",
                "disable --now pub-maj-app@1.5.0.service",
            ]
        );
    }
}
