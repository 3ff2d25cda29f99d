//! Applying what the fleet's follower read: the desired state through this edge's own safe
//! apply (runtime path where it can), blocks through the block fast path, and the revision
//! recorded with the state it describes.

use std::collections::BTreeSet;

use super::fleet::presets;
use super::{Edge, EdgeError};
use crate::apply::{ApplyError, ApplyReport};
use crate::blocks::{BlockChange, Blocks};
use crate::clock::unix_now;
use crate::fleet::object::{Change, Object, ObjectKey};
use crate::model::{DomainProtections, HttpsPolicy, Limits, ProxyNet, WafPolicy};
use crate::store::{FleetApplied, Tx};

/// How an apply of fleet changes went.
#[derive(Debug)]
pub enum FleetApplyOutcome {
    /// The edge is at the revision now.
    Applied { message: String },
    /// The edge refused the changes (HAProxy's reason); it stays where it was.
    Refused { message: String },
}

impl Edge {
    /// Brings this edge to fleet revision `revision` by `changes`. Blocks go through this
    /// connection's block view (kept between calls): a block costs what it changes, not a
    /// read of every block.
    pub fn apply_fleet(
        &mut self,
        revision: i64,
        changes: &[Change],
    ) -> Result<FleetApplyOutcome, EdgeError> {
        let (blocks, state): (Vec<&Change>, Vec<&Change>) =
            changes.iter().partition(|(k, _)| k.is_block());
        let mut done = FleetApplied {
            revision,
            outcome: "unchanged",
            message: String::new(),
            checks: 0,
            reloads: 0,
        };
        if !state.is_empty() {
            let trigger = describe(revision, &state);
            let now = unix_now();
            let (report, _) = self.apply_locally(&trigger, |tx| {
                write_objects(tx, &state, now)?;
                tx.set_fleet_revision(revision)?;
                Ok(())
            })?;
            if !report.outcome.is_success() {
                let message = refusal(&report);
                self.store.set_fleet_refused(revision, &message)?;
                return Ok(FleetApplyOutcome::Refused { message });
            }
            done.outcome = report.outcome.as_str();
            done.message = report.message.clone();
            done.checks = report.checks;
            done.reloads = report.reloads;
        }
        if !blocks.is_empty() {
            let changes: Vec<BlockChange> = blocks.iter().filter_map(|c| block_change(c)).collect();
            let report = Blocks::new(&self.settings).change_with(
                &mut self.store,
                &mut self.block_view.borrow_mut(),
                &changes,
            );
            match report {
                Ok(r) => done.message.push_str(&format!(
                    "{}{} block change(s) enforced ({})",
                    if done.message.is_empty() { "" } else { "; " },
                    changes.len(),
                    serde_json::to_value(r.enforcement)
                        .map(|v| v.as_str().unwrap_or("").to_string())
                        .unwrap_or_default()
                )),
                Err(e) => {
                    let message = format!("the blocks could not be enforced: {e}");
                    self.store.set_fleet_refused(revision, &message)?;
                    return Ok(FleetApplyOutcome::Refused { message });
                }
            }
            if done.outcome == "unchanged" {
                done.outcome = "applied";
            }
        }
        self.store.set_fleet_applied(&done)?;
        Ok(FleetApplyOutcome::Applied {
            message: done.message,
        })
    }
}

fn describe(revision: i64, changes: &[&Change]) -> String {
    let mut names: Vec<String> = changes
        .iter()
        .take(5)
        .map(|(k, v)| {
            format!(
                "{} {}",
                if v.is_some() { "put" } else { "delete" },
                k.path()
            )
        })
        .collect();
    if changes.len() > 5 {
        names.push(format!("{} more", changes.len() - 5));
    }
    format!("fleet revision {revision}: {}", names.join(", "))
}

pub(super) fn refusal(report: &ApplyReport) -> String {
    let mut message = format!("{}: {}", report.outcome.as_str(), report.message);
    for line in &report.haproxy_messages {
        message.push('\n');
        message.push_str(line);
    }
    message
}

fn block_change((key, object): &Change) -> Option<BlockChange> {
    match (key, object) {
        (_, Some(Object::Block(b))) => Some(BlockChange::Put(b.clone())),
        (ObjectKey::Block(k), None) => Some(BlockChange::Remove(*k)),
        _ => None,
    }
}

/// Writes `changes` in an order the database's references allow: domains put first, then
/// the objects that hang on them, removed domains last.
pub(super) fn write_objects(tx: &Tx, changes: &[&Change], now: i64) -> Result<(), ApplyError> {
    let rank = |(k, v): &&Change| match (k, v) {
        (ObjectKey::Domain(_), Some(_)) => 0,
        (ObjectKey::Domain(_), None) => 2,
        _ => 1,
    };
    let mut ordered: Vec<&Change> = changes.to_vec();
    ordered.sort_by_key(rank);
    let mut proxies = Vec::new();
    for change in ordered {
        match change {
            (ObjectKey::Proxy(net), object) => proxies.push((net, object)),
            (key, object) => write_object(tx, key, object.as_ref(), now)?,
        }
    }
    write_proxies(tx, &proxies)
}

fn write_object(
    tx: &Tx,
    key: &ObjectKey,
    object: Option<&Object>,
    now: i64,
) -> Result<(), ApplyError> {
    match (key, object) {
        (ObjectKey::Domain(d), Some(Object::Servers(b))) => drop(tx.put_domain(d, b, now)?),
        (ObjectKey::Domain(d), Some(Object::App(a))) => drop(tx.put_app_domain(d, a, now)?),
        (ObjectKey::Domain(d), None) => drop(tx.remove_domain(d)?),
        (ObjectKey::Https(d), o) => {
            let policy = match o {
                Some(Object::Https(p)) => *p,
                _ => HttpsPolicy::default(),
            };
            tx.set_https_policy(d, &policy)?
        }
        (ObjectKey::Suspended(d), o) => drop(tx.set_suspended(d, o.is_some(), now)?),
        (ObjectKey::Waf(d), o) => {
            let policy = match o {
                Some(Object::Waf(p)) => p.clone(),
                _ => WafPolicy::default(),
            };
            tx.set_waf_policy(d, &policy)?
        }
        (ObjectKey::Protections(d), o) => {
            let p = match o {
                Some(Object::Protections(p)) => p.clone(),
                _ => DomainProtections::default(),
            };
            tx.set_protections(d, &p)?
        }
        (ObjectKey::DomainLimits(d), o) => {
            let policy = match o {
                Some(Object::DomainLimits(p)) => Some(p),
                _ => None,
            };
            tx.set_domain_limits(d, policy)?
        }
        (ObjectKey::Limits, o) => {
            let limits = match o {
                Some(Object::Limits(l)) => (**l).clone(),
                _ => Limits::default(),
            };
            tx.set_limit_settings(&limits)?
        }
        (ObjectKey::Exempt(k), o) => drop(tx.set_exempt(k, o.is_some())?),
        (ObjectKey::Proxy(_) | ObjectKey::Block(_), _) => {
            unreachable!("proxies and blocks are written apart")
        }
        (ObjectKey::Domain(_), Some(_)) => unreachable!("a domain's key only decodes to a route"),
    }
    Ok(())
}

/// Proxies by hand are added and removed one by one; a preset's networks are set whole.
fn write_proxies(tx: &Tx, changes: &[(&ProxyNet, &Option<Object>)]) -> Result<(), ApplyError> {
    if changes.is_empty() {
        return Ok(());
    }
    let current = presets(tx.trusted_proxies()?)?;
    let mut touched_presets = BTreeSet::new();
    for (net, object) in changes {
        let was = current
            .iter()
            .find(|(n, _)| n == *net)
            .and_then(|(_, p)| *p);
        match object {
            Some(Object::Proxy(None)) => drop(tx.add_trusted_proxy(net)?),
            Some(Object::Proxy(Some(p))) => drop(touched_presets.insert(*p)),
            _ => drop(tx.remove_trusted_proxy(net)?),
        }
        touched_presets.extend(was);
    }
    for preset in touched_presets {
        let nets: Vec<ProxyNet> = current
            .iter()
            .filter(|(n, p)| *p == Some(preset) && !changes.iter().any(|(c, _)| *c == n))
            .map(|(n, _)| *n)
            .chain(
                changes
                    .iter()
                    .filter(|&(_n, o)| matches!(o, Some(Object::Proxy(Some(p))) if *p == preset))
                    .map(|(n, _o)| *(*n)),
            )
            .collect();
        tx.set_preset_proxies(preset, &nets)?;
    }
    Ok(())
}
