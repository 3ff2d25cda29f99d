//! What `hapctl prove` reports: every type here is serialised as is into `--json FILE`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::http::Cause;
use super::stream::StreamLog;
use super::Options;

/// The whole answer of `hapctl prove`: one proof per cutover.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub hapctl_version: &'static str,
    pub started_at: String,
    pub state_dir: PathBuf,
    /// The public bind measured (`settings.edge.http_bind`; 0.0.0.0 / :: mean loopback).
    pub edge: String,
    /// `command` or `cycle`.
    pub kind: &'static str,
    pub options: Options,
    /// Every proof passed and none was skipped.
    pub passed: bool,
    pub exit_code: u8,
    pub proofs: Vec<Proof>,
    /// Cutovers of a cycle that were not attempted, and why.
    pub not_run: Vec<NotRun>,
    /// The markdown journal written for this report.
    pub journal: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NotRun {
    pub label: String,
    pub command: Vec<String>,
    pub reason: String,
}

/// One measured cutover.
#[derive(Debug, Clone, Serialize)]
pub struct Proof {
    pub label: String,
    pub command: Vec<String>,
    pub passed: bool,
    pub started_at: String,
    /// From the first measurement to the last check.
    pub duration_ms: f64,
    pub expect_version: Option<String>,
    pub before: Before,
    pub run: CommandRun,
    pub after: After,
    pub probe: ProbeSummary,
    pub streams: Vec<StreamLog>,
    pub checks: Vec<Check>,
    /// Probe failures, in time order (at most 1000 kept; `probe.failed` counts them all).
    pub failures: Vec<ProbeFailure>,
    pub timeline: Vec<Event>,
    /// How to go back (markdown).
    pub way_back: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Processes {
    /// The master's PID as `show proc` names it.
    pub master_pid: Option<i32>,
    /// The PID from the pidfile (direct) or `systemctl show -p MainPID` (systemd).
    pub supervisor_pid: Option<i32>,
    pub supervisor_source: &'static str,
    pub reloads: Option<u32>,
    pub workers: Vec<i32>,
    pub old_workers: Vec<i32>,
    /// Why the master socket did not answer.
    pub error: Option<String>,
    pub t_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Before {
    pub processes: Processes,
    /// The version a short request got before anything ran.
    pub version_served: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct After {
    pub processes: Processes,
    /// Current workers that were not there before.
    pub new_workers: Vec<i32>,
    /// The version of the last successful probe request.
    pub version_served: Option<String>,
    /// `/version` answers (when `--expect-version` was given).
    pub version_answers: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CommandRun {
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub spawn_error: Option<String>,
    pub started_ms: f64,
    pub ended_ms: f64,
    pub duration_ms: f64,
    /// The tail of its output (64 KiB at most each).
    pub stdout: String,
    pub stderr: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeSummary {
    pub rate: f64,
    pub requests: u64,
    pub ok: u64,
    pub failed: u64,
    /// Requests started while the command ran.
    pub during_command: u64,
    /// Requests started late because too many were in flight.
    pub late: u64,
    pub by_cause: BTreeMap<&'static str, u64>,
    pub versions: Vec<VersionSeen>,
    /// Every change of the serving version between consecutive successful requests.
    pub switches: Vec<Switch>,
    pub latency_ms: Latency,
    pub first_ms: Option<f64>,
    pub last_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VersionSeen {
    pub version: String,
    pub requests: u64,
    pub first_ms: f64,
    pub last_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Switch {
    pub t_ms: f64,
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub median: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeFailure {
    pub t_ms: f64,
    pub duration_ms: f64,
    pub cause: Cause,
    pub detail: String,
    /// `before`, `during` or `after` the command.
    pub phase: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Pass,
    Fail,
    Skipped,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Fail => "FAIL",
            CheckStatus::Skipped => "skipped",
        }
    }
}

/// One judged check: what was required, what was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `master`, `new-worker`, `probe`, `streams`, `version` or `command`.
    pub name: &'static str,
    pub status: CheckStatus,
    pub expected: String,
    pub measured: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub t_ms: f64,
    /// `prove`, `command`, `master`, `probe` or `stream`.
    pub source: &'static str,
    pub what: String,
}

pub(crate) fn event(t_ms: f64, source: &'static str, what: String) -> Event {
    Event { t_ms, source, what }
}
