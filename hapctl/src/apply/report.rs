//! The account of an apply: its outcome, steps, counts, and why each reload was made.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::unix_millis;
use crate::haproxy::{ReloadKind, ReloadReason};
use crate::render::FileId;
use crate::store::ApplyRecord;

use super::runtime_plan::NotRuntime;

/// What an apply did. Only `Applied` and `Unchanged` leave the desired-state change committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApplyOutcome {
    /// The new set validated, loaded, and is the known-good set now.
    Applied,
    /// The rendered set equals the live one: nothing ran.
    Unchanged,
    /// `haproxy -c` refused the new set (or the files could not be written); the known-good
    /// set was restored.
    Rejected,
    /// `haproxy -c` could not run, so the new set cannot be trusted; nothing changed.
    ValidatorUnavailable,
    /// The set validated but the reload failed; the known-good set was restored and reloaded.
    ReloadFailedRolledBack,
    /// Restoring the known-good set failed: the edge needs a person.
    RollbackFailed,
    /// History only: an apply killed half-way was undone by the next command.
    Recovered,
}

impl ApplyOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyOutcome::Applied => "applied",
            ApplyOutcome::Unchanged => "unchanged",
            ApplyOutcome::Rejected => "rejected",
            ApplyOutcome::ValidatorUnavailable => "validator-unavailable",
            ApplyOutcome::ReloadFailedRolledBack => "reload-failed-rolled-back",
            ApplyOutcome::RollbackFailed => "rollback-failed",
            ApplyOutcome::Recovered => "recovered",
        }
    }

    /// The outcome [`ApplyOutcome::as_str`] names (its serde name too).
    pub fn parse(text: &str) -> Option<ApplyOutcome> {
        serde_json::from_value(serde_json::Value::String(text.to_string())).ok()
    }

    pub fn is_success(self) -> bool {
        matches!(self, ApplyOutcome::Applied | ApplyOutcome::Unchanged)
    }

    /// Process exit code for this outcome (documented in `hapctl --help`).
    pub fn exit_code(self) -> i32 {
        match self {
            ApplyOutcome::Applied | ApplyOutcome::Unchanged | ApplyOutcome::Recovered => 0,
            ApplyOutcome::Rejected => 3,
            ApplyOutcome::ValidatorUnavailable => 4,
            ApplyOutcome::ReloadFailedRolledBack => 5,
            ApplyOutcome::RollbackFailed => 6,
        }
    }
}

/// The full account of one apply.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub outcome: ApplyOutcome,
    /// One sentence for people.
    pub message: String,
    /// HAProxy's own lines (ALERTs with file and line) when it refused something.
    pub haproxy_messages: Vec<String>,
    pub changed_files: Vec<&'static str>,
    /// Unix time in milliseconds at which the apply started.
    pub started_at_ms: i64,
    /// `haproxy -c` runs made by this apply.
    pub checks: u32,
    pub reloads: u32,
    /// One per reload, in order: why it was needed.
    pub reload_reasons: Vec<ReloadReason>,
    #[serde(serialize_with = "as_millis")]
    pub duration: Duration,
    /// Time spent in each step, in order.
    pub steps: Vec<Step>,
    /// The unified diff of the files it changed, kept in the history (`GET /v1/applies/{id}`).
    #[serde(skip)]
    pub diff: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub name: &'static str,
    #[serde(serialize_with = "as_millis")]
    pub duration: Duration,
}

impl ApplyReport {
    /// The account of an apply made by another part of this edge (the fleet's follower),
    /// relayed to the one who asked for the change: its outcome, message and counts.
    pub fn relayed(
        outcome: ApplyOutcome,
        message: String,
        checks: u32,
        reloads: u32,
    ) -> ApplyReport {
        ApplyReport {
            outcome,
            message,
            haproxy_messages: Vec::new(),
            changed_files: Vec::new(),
            started_at_ms: unix_millis(),
            checks,
            reloads,
            reload_reasons: Vec::new(),
            duration: Duration::ZERO,
            steps: Vec::new(),
            diff: String::new(),
        }
    }
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Collects the account of an apply as it goes.
pub(super) struct Progress {
    started: Instant,
    pub(super) started_at_ms: i64,
    last: Instant,
    steps: Vec<Step>,
    pub(super) checks: u32,
    reloads: u32,
    reasons: Vec<ReloadReason>,
    pub(super) changed: Vec<FileId>,
    pub(super) diff: String,
}

impl Progress {
    pub(super) fn new() -> Progress {
        let now = Instant::now();
        Progress {
            started: now,
            started_at_ms: unix_millis(),
            last: now,
            steps: Vec::new(),
            checks: 0,
            reloads: 0,
            reasons: Vec::new(),
            changed: Vec::new(),
            diff: String::new(),
        }
    }

    /// Counts a reload about to be made, with its reason.
    pub(super) fn reload(&mut self, reason: ReloadReason) {
        tracing::info!(reason = reason.kind.as_str(), "reload: {}", reason.detail);
        self.reloads += 1;
        self.reasons.push(reason);
    }

    pub(super) fn step(&mut self, name: &'static str) {
        let now = Instant::now();
        self.steps.push(Step {
            name,
            duration: now - self.last,
        });
        self.last = now;
    }

    pub(super) fn report(
        self,
        outcome: ApplyOutcome,
        message: String,
        haproxy_messages: Vec<String>,
    ) -> ApplyReport {
        ApplyReport {
            outcome,
            message,
            haproxy_messages,
            changed_files: self.changed.iter().map(|id| id.name()).collect(),
            started_at_ms: self.started_at_ms,
            checks: self.checks,
            reloads: self.reloads,
            reload_reasons: self.reasons,
            duration: self.started.elapsed(),
            steps: self.steps,
            diff: self.diff,
        }
    }
}

pub(super) fn record(report: &ApplyReport, trigger: &str) -> ApplyRecord {
    let mut message = report.message.clone();
    for line in &report.haproxy_messages {
        message.push('\n');
        message.push_str(line);
    }
    ApplyRecord {
        id: 0,
        started_at_ms: report.started_at_ms,
        duration_ms: report.duration.as_millis() as i64,
        trigger: trigger.to_string(),
        outcome: report.outcome.as_str().to_string(),
        message,
        checks: report.checks as i64,
        reloads: report.reloads as i64,
        changed_files: report.changed_files.iter().map(|s| s.to_string()).collect(),
        reload_reasons: report
            .reload_reasons
            .iter()
            .map(ReloadReason::to_string)
            .collect(),
    }
}

/// The reason for reloading after `changed` files were written: the files a reload alone
/// loads and why the runtime path could not take the change (`why_not`), or, when every one
/// was a runtime map, why the runtime change failed.
pub(super) fn reason_for_files(
    changed: &[FileId],
    runtime_failure: Option<&str>,
    why_not: Option<&NotRuntime>,
) -> ReloadReason {
    let reload_only: Vec<&str> = changed
        .iter()
        .filter(|id| !FileId::RUNTIME_MAPS.contains(id))
        .map(|id| id.name())
        .collect();
    match (reload_only.is_empty(), runtime_failure, why_not) {
        (_, Some(e), _) => ReloadReason::new(
            ReloadKind::RuntimeFailed,
            format!("the runtime change of {} failed ({e})", names(changed)),
        ),
        (_, None, Some(NotRuntime::Capacity(why))) => {
            ReloadReason::new(ReloadKind::Capacity, why.clone())
        }
        (true, None, _) => ReloadReason::new(
            ReloadKind::StaleWorker,
            "the running worker had not loaded hapctl's files (it had no blocked map)",
        ),
        (false, None, why) => {
            let mut detail = format!(
                "{} changed, which only a reload loads",
                reload_only.join(", ")
            );
            if let Some(NotRuntime::Reload(why)) = why {
                detail += &format!(": {why}");
            }
            ReloadReason::new(ReloadKind::Config, detail)
        }
    }
}

fn names(ids: &[FileId]) -> String {
    ids.iter()
        .map(|id| id.name())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_name_the_files_only_a_reload_loads() {
        let r = reason_for_files(&[FileId::Config, FileId::RUNTIME_MAPS[0]], None, None);
        assert_eq!(r.kind, ReloadKind::Config);
        assert_eq!(r.detail, "haproxy.cfg changed, which only a reload loads");
        let r = reason_for_files(&FileId::RUNTIME_MAPS[..1], Some("refused"), None);
        assert_eq!(r.kind, ReloadKind::RuntimeFailed);
        assert!(r.detail.ends_with("failed (refused)"), "{}", r.detail);
        let r = reason_for_files(&[], None, None);
        assert_eq!(r.kind, ReloadKind::StaleWorker);
        assert_eq!(r.to_string().split(':').next(), Some("stale-worker"));
    }
}
