//! Carrying out a plan through the edge services, all or nothing: certificates first (each on
//! the runtime path: no reload), then every change of the desired state in one apply (one
//! `haproxy -c`, one reload at most), then the blocks on the block path (no reload). If a
//! step fails, the steps before it are undone, so the edge is as it was.

use serde::Serialize;

use super::{Item, LegacyError, Plan, Status};
use crate::apply::ApplyReport;
use crate::blocks::{BlockChange, BlockReport};
use crate::edge::{DomainChange, Edge, StateChange};
use crate::model::{CertName, ProxyPreset};
use crate::tls::InstallReport;

/// What the import did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    pub certificates: Vec<InstallReport>,
    /// The one apply of the desired state (none when only certificates or blocks were new).
    pub apply: Option<ApplyReport>,
    pub blocks: Option<BlockReport>,
}

fn new<T>(items: &[Item<T>]) -> impl Iterator<Item = &T> {
    items
        .iter()
        .filter(|i| i.status == Status::New)
        .map(|i| &i.value)
}

/// The changes of the desired state, and the changes that undo them.
fn state_changes(
    edge: &Edge,
    plan: &Plan,
) -> Result<(Vec<StateChange>, Vec<StateChange>), LegacyError> {
    let mut todo = Vec::new();
    let mut undo = Vec::new();
    for d in new(&plan.domains) {
        let put = DomainChange::Put(d.domain.clone(), d.backend.clone());
        todo.push(StateChange::Domain(match &d.backend_name {
            Some(label) => DomainChange::WithLabel(Box::new(put), label.clone()),
            None => put,
        }));
        undo.push(StateChange::Domain(DomainChange::Remove(d.domain.clone())));
    }
    for net in new(&plan.trusted_proxies) {
        todo.push(StateChange::TrustProxy(*net, true));
        undo.push(StateChange::TrustProxy(*net, false));
    }
    if new(&plan.cloudflare).next().is_some() {
        // Added to what the preset has: an edge that trusts a newer list keeps it.
        let before = super::Current::of(edge)?.cloudflare;
        let mut after = before.clone();
        after.extend(new(&plan.cloudflare).copied());
        let preset = ProxyPreset::Cloudflare;
        todo.push(StateChange::Preset(preset, after.into_iter().collect()));
        undo.push(StateChange::Preset(preset, before.into_iter().collect()));
    }
    for key in new(&plan.limit_exempt) {
        todo.push(StateChange::LimitExempt(*key, true));
        undo.push(StateChange::LimitExempt(*key, false));
    }
    // A domain created here takes these with it when it is removed; only the others are
    // undone one by one, before any removal.
    let created = |d: &crate::model::Domain| new(&plan.domains).any(|i| &i.domain == d);
    for d in new(&plan.wp_admin_gate_off) {
        todo.push(StateChange::WpAdminGate(d.clone(), false));
        if !created(d) {
            undo.insert(0, StateChange::WpAdminGate(d.clone(), true));
        }
    }
    for d in new(&plan.suspended) {
        todo.push(StateChange::Suspend(d.clone(), true));
        if !created(d) {
            undo.insert(0, StateChange::Suspend(d.clone(), false));
        }
    }
    Ok((todo, undo))
}

/// Applies the new items of `plan` (a plan with none changes nothing).
pub fn import(edge: &mut Edge, plan: &Plan) -> Result<Outcome, LegacyError> {
    let mut outcome = Outcome::default();
    let (todo, undo_state) = state_changes(edge, plan)?;

    let mut installed: Vec<CertName> = Vec::new();
    for c in new(&plan.certificates) {
        match edge.import_certificate(&c.name, &c.pem, std::slice::from_ref(&c.host)) {
            Ok(report) => {
                installed.push(c.name.clone());
                outcome.certificates.push(report);
            }
            Err(e) => {
                let message = format!("certificate {} was not installed: {e}", c.name);
                let done = Done::certs(&installed);
                return Err(undo(edge, message, done, None));
            }
        }
    }

    if !todo.is_empty() {
        match edge.apply_state_changes("import-legacy", &todo) {
            Ok(report) if report.outcome.is_success() => outcome.apply = Some(report),
            Ok(report) => {
                let message = format!(
                    "the apply was {}: {}",
                    report.outcome.as_str(),
                    report.message
                );
                let done = Done::certs(&installed);
                return Err(undo(edge, message, done, Some(report)));
            }
            Err(e) => {
                let message = format!("the apply failed: {e}");
                let done = Done::certs(&installed);
                return Err(undo(edge, message, done, None));
            }
        }
    }

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
    report: Option<ApplyReport>,
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
        report: report.map(Box::new),
    }
}
