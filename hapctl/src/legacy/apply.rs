//! Carrying out a plan through the edge services, all or nothing: certificates first (each on
//! the runtime path: no reload), then every change of the desired state in one apply (one
//! `haproxy -c`, one reload at most), then the blocks on the block path (no reload). If a
//! step fails, the steps before it are undone, so the edge is as it was. One exception: when
//! HAProxy refuses the apply, the rows it refuses are found on scratch copies (`check.rs`),
//! left out of the plan, and the rest is applied once more.

use serde::Serialize;

use super::changes::{new, state_changes};
use super::check::{check, HaproxyCheck};
use super::{LegacyError, Plan};
use crate::apply::{ApplyOutcome, ApplyReport};
use crate::blocks::{BlockChange, BlockReport};
use crate::edge::{Edge, StateChange};
use crate::model::CertName;
use crate::tls::InstallReport;

/// What the import did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportOutcome {
    pub certificates: Vec<InstallReport>,
    /// The one apply of the desired state (none when only certificates or blocks were new).
    pub apply: Option<ApplyReport>,
    pub blocks: Option<BlockReport>,
}

/// Applies the new items of `plan` (a plan with none changes nothing). The rows HAProxy
/// refuses are moved to the plan's refused items.
pub fn import(edge: &mut Edge, plan: &mut Plan) -> Result<ImportOutcome, LegacyError> {
    let mut outcome = ImportOutcome::default();
    let installed = install_certificates(edge, plan, &mut outcome)?;
    let undo_state = match apply_state(edge, plan) {
        Ok((report, undo_state)) => {
            outcome.apply = report;
            undo_state
        }
        Err(not) => {
            return Err(undo(edge, not.message, Done::certs(&installed), not.report));
        }
    };
    let adds: Vec<BlockChange> = new(&plan.blocks).cloned().map(BlockChange::Add).collect();
    if !adds.is_empty() {
        match edge.change_blocks(&adds) {
            Ok(report) => outcome.blocks = Some(report),
            Err(e) => {
                let message = format!("the blocks were not applied: {e}");
                // The block path commits before it enforces: what it added is taken out too.
                let done = Done {
                    certs: &installed,
                    state: &undo_state,
                    blocks: &adds,
                };
                return Err(undo(edge, message, done, None));
            }
        }
    }
    Ok(outcome)
}

/// The new certificates, each on the runtime path; a failure undoes those installed before.
fn install_certificates(
    edge: &mut Edge,
    plan: &Plan,
    outcome: &mut ImportOutcome,
) -> Result<Vec<CertName>, LegacyError> {
    let mut installed: Vec<CertName> = Vec::new();
    for c in new(&plan.certificates) {
        match edge.import_certificate(&c.name, &c.pem, std::slice::from_ref(&c.host)) {
            Ok(report) => {
                installed.push(c.name.clone());
                outcome.certificates.push(report);
            }
            Err(e) => {
                let message = format!("certificate {} was not installed: {e}", c.name);
                return Err(undo(edge, message, Done::certs(&installed), None));
            }
        }
    }
    Ok(installed)
}

/// Why the desired state was not applied, with the apply's report when it holds HAProxy's
/// verdict.
struct NotApplied {
    message: String,
    report: Option<Box<ApplyReport>>,
}

impl NotApplied {
    fn because(message: String) -> NotApplied {
        NotApplied {
            message,
            report: None,
        }
    }
}

/// The one apply of the plan's changes of the desired state (none without any), and the
/// changes that undo it. When HAProxy refuses it, the rows it refuses leave the plan and the
/// rest is applied once more.
fn apply_state(
    edge: &mut Edge,
    plan: &mut Plan,
) -> Result<(Option<ApplyReport>, Vec<StateChange>), NotApplied> {
    let failed = |e: LegacyError| NotApplied::because(e.to_string());
    let (todo, undo) = state_changes(edge, plan).map_err(failed)?;
    if todo.is_empty() {
        return Ok((None, undo));
    }
    let report = apply_changes(edge, &todo)?;
    if report.outcome != ApplyOutcome::Rejected {
        return applied(report, undo);
    }
    let refused = plan.refused.len();
    plan.haproxy_check = check(edge, plan).map_err(failed)?;
    let rows_left_out = plan.refused.len() > refused;
    if plan.haproxy_check != Some(HaproxyCheck::Valid) || !rows_left_out {
        return applied(report, undo);
    }
    let (todo, undo) = state_changes(edge, plan).map_err(failed)?;
    if todo.is_empty() {
        return Ok((None, undo));
    }
    applied(apply_changes(edge, &todo)?, undo)
}

fn apply_changes(edge: &mut Edge, todo: &[StateChange]) -> Result<ApplyReport, NotApplied> {
    edge.apply_state_changes("import-legacy", todo)
        .map_err(|e| NotApplied::because(format!("the apply failed: {e}")))
}

fn applied(
    report: ApplyReport,
    undo: Vec<StateChange>,
) -> Result<(Option<ApplyReport>, Vec<StateChange>), NotApplied> {
    if report.outcome.is_success() {
        return Ok((Some(report), undo));
    }
    let message = format!(
        "the apply was {}: {}",
        report.outcome.as_str(),
        report.message
    );
    Err(NotApplied {
        message,
        report: Some(Box::new(report)),
    })
}

/// What was done before a step failed.
#[derive(Default)]
struct Done<'a> {
    certs: &'a [CertName],
    state: &'a [StateChange],
    blocks: &'a [BlockChange],
}

impl<'a> Done<'a> {
    fn certs(certs: &'a [CertName]) -> Done<'a> {
        Done {
            certs,
            ..Done::default()
        }
    }
}

/// Undoes the steps done before a failure; the error says what happened and whether the
/// edge is back where it was.
fn undo(
    edge: &mut Edge,
    message: String,
    done: Done<'_>,
    report: Option<Box<ApplyReport>>,
) -> LegacyError {
    let mut problems = Vec::new();
    let removes: Vec<BlockChange> = done
        .blocks
        .iter()
        .filter_map(|c| match c {
            BlockChange::Add(b) => Some(BlockChange::Remove(b.key)),
            _ => None,
        })
        .collect();
    if !removes.is_empty() {
        if let Err(e) = edge.change_blocks(&removes) {
            problems.push(format!("removing the imported blocks failed: {e}"));
        }
    }
    if !done.state.is_empty() {
        match edge.apply_state_changes("import-legacy undo", done.state) {
            Ok(r) if r.outcome.is_success() => {}
            Ok(r) => problems.push(format!(
                "undoing the apply was {}: {}",
                r.outcome.as_str(),
                r.message
            )),
            Err(e) => problems.push(format!("undoing the apply failed: {e}")),
        }
    }
    for name in done.certs.iter().rev() {
        if let Err(e) = edge.remove_certificate(name) {
            problems.push(format!("removing certificate {name} failed: {e}"));
        }
    }
    let undone = if problems.is_empty() {
        "nothing was changed (what had been done before was undone)".to_string()
    } else {
        format!(
            "UNDOING FAILED, the edge is partly imported: {}",
            problems.join("; ")
        )
    };
    LegacyError::NotApplied {
        message,
        undone,
        report,
    }
}
