//! Changes on an edge of a fleet: computed on this edge's state (at the fleet revision it
//! applied), checked with `haproxy -c` when they need a reload, published to etcd, then
//! applied here by the follower like on every other edge; the answer waits for that.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Edge, EdgeError};
use crate::apply::{ApplyError, ApplyOutcome, ApplyReport};
use crate::blocks::{BlockChange, BlockReport, ChangeResult, Enforcement};
use crate::clock::unix_now;
use crate::fleet::object::{changes_between, objects_of, Change, Object, ObjectKey, Objects};
use crate::fleet::{FleetError, FleetLink};
use crate::settings::Rollout;

use super::fleet_canary::Canary;
use crate::haproxy::ConfigVerdict;
use crate::model::{EdgeState, ProxyNet, ProxyPreset};
use crate::store::{FleetRecord, StoreError, Tx, APPLYING};

/// How long a writer waits for this edge to apply what it published.
const APPLY_WAIT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(5);

impl Edge {
    /// Whether changes go to the fleet (rather than straight to this edge).
    pub(super) fn publishes(&self) -> bool {
        self.settings.fleet.is_some() && !self.fleet_follower
    }

    /// This connection applies what the fleet's follower read: it never publishes.
    pub fn follow_fleet(&mut self) {
        self.fleet_follower = true;
    }

    /// Shares the daemon's connection to etcd (otherwise one is made on first use).
    pub fn join_fleet(&mut self, link: Arc<FleetLink>) {
        self.fleet = Some(link);
    }

    /// The connection to etcd this one shares, if any.
    pub fn shared_fleet(&self) -> Option<Arc<FleetLink>> {
        self.fleet.clone()
    }

    /// The connection to etcd: the shared one, else one made now and kept.
    pub fn fleet_link(&mut self) -> Result<Arc<FleetLink>, EdgeError> {
        let link = self.link()?;
        self.fleet = Some(link.clone());
        Ok(link)
    }

    /// The connection to etcd: the shared one, else one made for this call.
    pub fn link(&self) -> Result<Arc<FleetLink>, EdgeError> {
        if let Some(link) = &self.fleet {
            return Ok(link.clone());
        }
        let settings = self.settings.fleet.as_ref().ok_or(FleetError::NoFleet)?;
        Ok(FleetLink::connect(settings)?)
    }

    pub fn fleet_record(&self) -> Result<FleetRecord, EdgeError> {
        Ok(self.store.fleet_record()?)
    }

    /// The objects of this edge's committed state, blocks included (what a full read of the
    /// fleet is compared with).
    pub fn fleet_objects(&self) -> Result<Objects, EdgeError> {
        let proxies = presets(self.store.trusted_proxies()?)?;
        let blocks = self.store.blocks()?;
        let now = unix_now();
        let blocks: Vec<_> = blocks.into_iter().filter(|b| !b.is_expired(now)).collect();
        self.with_state(|s| objects_of(s, &proxies, &blocks))
    }

    /// The keys of this edge's committed objects, blocks included, and the fleet revision
    /// they are at (what a read after a broken watch compares).
    pub fn fleet_keys(&self) -> Result<(BTreeSet<ObjectKey>, i64), EdgeError> {
        let proxies = presets(self.store.trusted_proxies()?)?;
        let mut keys: BTreeSet<ObjectKey> =
            self.with_state(|s| objects_of(s, &proxies, &[]).into_keys().collect())?;
        let blocks = self.store.block_keys(unix_now())?;
        keys.extend(blocks.into_iter().map(ObjectKey::Block));
        Ok((keys, self.store.fleet_record()?.revision))
    }

    /// [`Edge::applier_run`] on an edge of a fleet: the change is made on a copy of this
    /// edge's state that is thrown away, and what differs is published.
    pub(super) fn publish_run<T>(
        &mut self,
        trigger: &str,
        change: impl FnOnce(&Tx) -> Result<T, ApplyError>,
    ) -> Result<(ApplyReport, Option<T>), EdgeError> {
        let link = self.fleet_link()?;
        let (basis, before, after, value, (old, changes)) = {
            let tx = self.store.begin()?;
            let basis = tx.fleet_revision()?;
            let before = tx.load_state()?;
            let old_proxies = presets(tx.trusted_proxies()?)?;
            let value = change(&tx)?;
            let after = tx.load_state()?;
            let new_proxies = presets(tx.trusted_proxies()?)?;
            // Dropped, not committed: the change reaches this edge through the fleet.
            let changes = changes_between((&before, &old_proxies), (&after, &new_proxies));
            (basis, before, after, value, changes)
        };
        if changes.is_empty() {
            // Nothing to change is only true of a state that is the fleet's: an edge behind it
            // would drop the change of someone who wants back what another writer replaced.
            link.block_on(crate::fleet::status::require_current(
                link.etcd(),
                link.layout(),
                basis,
            ))?;
            let report = ApplyReport::relayed(
                ApplyOutcome::Unchanged,
                "nothing to change in the fleet's state".into(),
                0,
                0,
            );
            return Ok((report, Some(value)));
        }
        let revision = match (
            needs_reload(&before, &after, &changes),
            link.settings().rollout,
        ) {
            (false, _) => link.publish(basis, &changes, unix_now())?,
            (true, Rollout::All) => {
                if let Some(refused) = self.check_for_fleet(&after)? {
                    return Ok((refused, None));
                }
                link.publish(basis, &changes, unix_now())?
            }
            (true, Rollout::Canary) => {
                let canary = Canary {
                    link: &link,
                    basis,
                    old: &old,
                    changes: &changes,
                };
                match self.canary(trigger, canary)? {
                    Ok(revision) => revision,
                    Err(refused) => return Ok((refused, None)),
                }
            }
        };
        let record = self.wait_for_revision(revision)?;
        let report = relayed(&record, revision);
        let value = report.outcome.is_success().then_some(value);
        Ok((report, value))
    }

    /// `rollout = "all"`: a change that needs a reload is checked here, before any edge sees
    /// it, so a set every edge would refuse never enters the fleet.
    fn check_for_fleet(&self, after: &EdgeState) -> Result<Option<ApplyReport>, EdgeError> {
        match self.check_scratch(after)?.verdict {
            ConfigVerdict::Valid => Ok(None),
            ConfigVerdict::Invalid { messages } => {
                let mut report = ApplyReport::relayed(
                    ApplyOutcome::Rejected,
                    "haproxy -c refused the change on this edge; it was not published to the fleet"
                        .into(),
                    1,
                    0,
                );
                report.haproxy_messages = messages;
                Ok(Some(report))
            }
            ConfigVerdict::Unavailable { reason } => Err(FleetError::Unchecked(reason).into()),
        }
    }

    /// Waits until this edge's follower applied `revision` (or refused it).
    fn wait_for_revision(&self, revision: i64) -> Result<FleetRecord, EdgeError> {
        let started = Instant::now();
        loop {
            let record = self.store.fleet_record()?;
            let refused = record.refused.as_ref().is_some_and(|(r, _)| *r >= revision);
            let done = record.revision >= revision && record.outcome != APPLYING;
            if done || refused {
                return Ok(record);
            }
            if started.elapsed() > APPLY_WAIT {
                return Err(FleetError::NotApplied {
                    revision,
                    waited: APPLY_WAIT,
                }
                .into());
            }
            std::thread::sleep(POLL);
        }
    }

    /// Block changes on an edge of a fleet: published (no compare: the last writer of a
    /// block wins), then enforced here by the follower through the block fast path.
    pub(super) fn publish_blocks(
        &mut self,
        changes: &[BlockChange],
    ) -> Result<BlockReport, EdgeError> {
        let started = Instant::now();
        let link = self.fleet_link()?;
        let (results, fleet_changes) = self.block_results(changes)?;
        let basis = self.store.fleet_record()?.revision;
        let enforcement = if fleet_changes.is_empty() {
            Enforcement::Unchanged
        } else {
            let revision = link.publish(basis, &fleet_changes, unix_now())?;
            let record = self.wait_for_revision(revision)?;
            if let Some((r, why)) = record.refused.filter(|(r, _)| *r >= revision) {
                return Err(
                    FleetError::Etcd(format!("revision {r} was refused here: {why}")).into(),
                );
            }
            Enforcement::Runtime
        };
        Ok(BlockReport {
            results,
            expired: Vec::new(),
            enforcement,
            runtime_error: None,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// What each block change does, judged from this edge's blocks, and the fleet's changes.
    fn block_results(
        &mut self,
        changes: &[BlockChange],
    ) -> Result<(Vec<ChangeResult>, Vec<Change>), EdgeError> {
        let tx = self.store.begin_blocks()?;
        let mut results = Vec::new();
        let mut fleet = Vec::new();
        for change in changes {
            let (key, exists) = match change {
                BlockChange::Put(b) | BlockChange::Add(b) => (&b.key, tx.contains(&b.key)?),
                BlockChange::Remove(k) => (k, tx.contains(k)?),
            };
            let result = match (change, exists) {
                (BlockChange::Add(_), true) => ChangeResult::Exists,
                (BlockChange::Put(_), true) => ChangeResult::Updated,
                (BlockChange::Put(_) | BlockChange::Add(_), false) => ChangeResult::Created,
                (BlockChange::Remove(_), true) => ChangeResult::Removed,
                (BlockChange::Remove(_), false) => ChangeResult::NotFound,
            };
            let object = match change {
                BlockChange::Put(b) | BlockChange::Add(b) => Some(Object::Block(b.clone())),
                BlockChange::Remove(_) => None,
            };
            if !matches!(result, ChangeResult::Exists | ChangeResult::NotFound) {
                fleet.push((ObjectKey::Block(*key), object));
            }
            results.push(result);
        }
        Ok((results, fleet))
    }
}

/// Whether a change needs a reload somewhere: runtime changes (servers and domains the runtime
/// API takes, map changes) do not.
fn needs_reload(before: &EdgeState, after: &EdgeState, changes: &[Change]) -> bool {
    let maps_only = changes.iter().all(|(k, _)| {
        matches!(
            k,
            ObjectKey::Https(_)
                | ObjectKey::Suspended(_)
                | ObjectKey::Waf(_)
                | ObjectKey::Protections(_)
                | ObjectKey::DomainLimits(_)
                | ObjectKey::Exempt(_)
        )
    });
    !maps_only && !crate::apply::runtime_can_take(before, after)
}

/// The follower's account of the apply that reached `revision`, for the writer's answer.
fn relayed(record: &FleetRecord, revision: i64) -> ApplyReport {
    if let Some((r, why)) = record.refused.as_ref().filter(|(r, _)| *r >= revision) {
        return ApplyReport::relayed(
            ApplyOutcome::Rejected,
            format!(
                "published at fleet revision {revision}, but this edge refused revision {r}: {why}"
            ),
            0,
            0,
        );
    }
    let outcome = ApplyOutcome::parse(&record.outcome).unwrap_or(ApplyOutcome::Applied);
    ApplyReport::relayed(
        outcome,
        format!(
            "published at fleet revision {revision}; applied here: {}",
            record.message
        ),
        record.checks as u32,
        record.reloads as u32,
    )
}

/// The proxies' presets parsed (a row's preset is text).
pub(super) fn presets(
    rows: Vec<(ProxyNet, Option<String>)>,
) -> Result<Vec<(ProxyNet, Option<ProxyPreset>)>, StoreError> {
    rows.into_iter()
        .map(|(net, preset)| {
            let preset = preset
                .map(|p| p.parse::<ProxyPreset>())
                .transpose()
                .map_err(|source| StoreError::Corrupt {
                    table: "trusted_proxies",
                    key: net.to_string(),
                    source,
                })?;
            Ok((net, preset))
        })
        .collect()
}
