//! The changes of the desired state a plan makes, and the changes that undo them: what the
//! import applies and what its check tries on scratch copies.

use super::{Item, ItemStatus, LegacyError, Plan};
use crate::edge::{DomainChange, Edge, StateChange};
use crate::model::ProxyPreset;

/// The items of a plan that are new to the edge.
pub(super) fn new<T>(items: &[Item<T>]) -> impl Iterator<Item = &T> {
    items
        .iter()
        .filter(|i| i.status == ItemStatus::New)
        .map(|i| &i.value)
}

/// The changes of the desired state, and the changes that undo them.
pub(super) fn state_changes(
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
