//! Several changes of the desired state in one apply (one `haproxy -c`, one reload at most):
//! either all of them are committed, once HAProxy took them, or none is.

use super::policies::require_domain;
use super::{DomainChange, Edge, EdgeError};
use crate::apply::ApplyReport;
use crate::clock::unix_now;
use crate::model::{BlockKey, Domain, EdgeState, ProxyNet, ProxyPreset};

/// One change inside a batch.
#[derive(Debug, Clone)]
pub enum StateChange {
    Domain(DomainChange),
    /// Trust (true) or distrust (false) a proxy network added by hand.
    TrustProxy(ProxyNet, bool),
    /// Makes a preset's networks exactly these.
    Preset(ProxyPreset, Vec<ProxyNet>),
    /// A network that skips every rate limit (true) or no longer does (false).
    LimitExempt(BlockKey, bool),
    /// The domain must exist (or be created earlier in the same batch).
    Suspend(Domain, bool),
    /// The wordpress wp-admin gate of an existing domain, on or off.
    WpAdminGate(Domain, bool),
}

impl StateChange {
    fn apply(&self, tx: &crate::store::Tx<'_>) -> Result<(), crate::apply::ApplyError> {
        match self {
            StateChange::Domain(change) => {
                change.apply(tx)?;
            }
            StateChange::TrustProxy(net, true) => {
                tx.add_trusted_proxy(net)?;
            }
            StateChange::TrustProxy(net, false) => {
                tx.remove_trusted_proxy(net)?;
            }
            StateChange::Preset(preset, nets) => {
                tx.set_preset_proxies(*preset, nets)?;
            }
            StateChange::LimitExempt(net, exempt) => {
                tx.set_exempt(net, *exempt)?;
            }
            StateChange::Suspend(d, on) => {
                require_domain(tx, d)?;
                tx.set_suspended(d, *on, unix_now())?;
            }
            StateChange::WpAdminGate(d, on) => {
                require_domain(tx, d)?;
                let mut p = tx.load_state()?.protections.remove(d).unwrap_or_default();
                p.wp_admin_gate = *on;
                tx.set_protections(d, &p)?;
            }
        }
        Ok(())
    }
}

impl Edge {
    /// Applies `changes` in order, in one apply. A refused change (or a refused set) leaves
    /// the desired state as it was.
    pub fn apply_state_changes(
        &mut self,
        trigger: &str,
        changes: &[StateChange],
    ) -> Result<ApplyReport, EdgeError> {
        let (report, _) =
            self.applier_run(trigger, |tx| changes.iter().try_for_each(|c| c.apply(tx)))?;
        Ok(report)
    }

    /// The desired state `changes` would make, without keeping them (the transaction is rolled
    /// back): what a check on a scratch copy looks at.
    pub fn preview_state(&mut self, changes: &[StateChange]) -> Result<EdgeState, EdgeError> {
        let tx = self.store.begin()?;
        for change in changes {
            change.apply(&tx)?;
        }
        Ok(tx.load_state()?)
    }
}
