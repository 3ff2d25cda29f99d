//! `systemctl` for the systemd mode: start, stop, restart and query a unit, never waiting
//! for a password prompt, always with a timeout.

use std::process::Command;
use std::time::Duration;

use crate::process::{run_with_timeout, ProcessError};

use super::messages;

/// Bound on `systemctl show`, which only reads the unit's state.
const SYSTEMCTL_QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// `systemctl` could not run, or failed.
#[derive(Debug, thiserror::Error)]
pub enum SystemctlError {
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error("`systemctl {action} {unit}` failed: {message}; see `systemctl status {unit}` and `journalctl -u {unit}`")]
    Failed {
        action: &'static str,
        unit: String,
        message: String,
    },
}

/// `systemctl` arguments for ACTION on UNIT.
fn systemctl_args(action: &str, options: &[&str], unit: &str) -> Vec<String> {
    // Never wait for a password prompt: a non-interactive caller would hang until the timeout.
    ["--no-ask-password", action]
        .iter()
        .chain(options)
        .chain([&unit])
        .map(|s| s.to_string())
        .collect()
}

/// Runs `systemctl ACTION [OPTIONS] UNIT`; its stdout on success.
pub(crate) fn systemctl(
    action: &'static str,
    options: &[&str],
    unit: &str,
    timeout: Duration,
) -> Result<String, SystemctlError> {
    run(systemctl_args(action, options, unit), action, unit, timeout)
}

fn run(
    args: Vec<String>,
    action: &'static str,
    unit: &str,
    timeout: Duration,
) -> Result<String, SystemctlError> {
    let output = run_with_timeout(Command::new("systemctl").args(args), timeout)?;
    if !output.status.success() {
        return Err(SystemctlError::Failed {
            action,
            unit: unit.to_string(),
            message: format!(
                "{}: {}",
                output.status,
                messages::last_lines(&String::from_utf8_lossy(&output.stderr), 5).join(" | ")
            ),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

const MAIN_PID_OPTIONS: [&str; 2] = ["--property=MainPID", "--value"];

pub(crate) fn systemd_main_pid(unit: &str) -> Result<Option<i32>, SystemctlError> {
    let out = systemctl("show", &MAIN_PID_OPTIONS, unit, SYSTEMCTL_QUERY_TIMEOUT)?;
    let pid: i32 = out.trim().parse().map_err(|_| SystemctlError::Failed {
        action: "show",
        unit: unit.to_string(),
        message: format!("MainPID is not a number: {:?}", out.trim()),
    })?;
    // MainPID=0: the unit has no running main process.
    Ok((pid > 0).then_some(pid))
}

/// `systemctl daemon-reload`: systemd reads changed unit files and drop-ins.
pub(crate) fn daemon_reload(timeout: Duration) -> Result<(), SystemctlError> {
    let args = ["--no-ask-password", "daemon-reload"]
        .map(String::from)
        .to_vec();
    run(args, "daemon-reload", "", timeout).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemctl_command_lines() {
        assert_eq!(
            systemctl_args("start", &[], "haproxy.service"),
            ["--no-ask-password", "start", "haproxy.service"]
        );
        assert_eq!(
            systemctl_args("stop", &[], "haproxy.service"),
            ["--no-ask-password", "stop", "haproxy.service"]
        );
        assert_eq!(
            systemctl_args("show", &MAIN_PID_OPTIONS, "haproxy.service"),
            [
                "--no-ask-password",
                "show",
                "--property=MainPID",
                "--value",
                "haproxy.service"
            ]
        );
    }
}
