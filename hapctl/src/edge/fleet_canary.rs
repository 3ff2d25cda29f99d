//! `rollout = "canary"`: a change that needs a reload is applied on the edge that takes it
//! first — the real check, reload and confirmation — and published to the fleet only once that
//! succeeded. A refusal there leaves every edge as it was; the rollout key says where it
//! stopped and why.

use std::sync::Arc;

use super::fleet_apply::{refusal, write_objects};
use super::{Edge, EdgeError};
use crate::apply::{ApplyOutcome, ApplyReport};
use crate::clock::unix_now;
use crate::fleet::object::{Change, Objects};
use crate::fleet::status::{RolloutReport, RolloutState};
use crate::fleet::FleetLink;

/// A change to roll out: what it is computed from and what it changes.
pub(super) struct Canary<'a> {
    pub link: &'a Arc<FleetLink>,
    /// The fleet revision the change was computed at.
    pub basis: i64,
    /// The objects before the change (to undo it here if the fleet does not take it).
    pub old: &'a Objects,
    pub changes: &'a [Change],
}

impl Edge {
    /// Applies `c` here, then publishes it: the revision made, or this edge's refusal (nothing
    /// published, nothing changed anywhere).
    pub(super) fn canary(
        &mut self,
        trigger: &str,
        c: Canary,
    ) -> Result<Result<i64, ApplyReport>, EdgeError> {
        let mut mark = RolloutReport {
            canary: c.link.settings().name.to_string(),
            basis: c.basis,
            state: RolloutState::Canary,
            revision: None,
            message: trigger.to_string(),
            at: unix_now(),
        };
        // Asked and said before anything changes here: with etcd away, or the change already
        // outdated by another writer, nothing does.
        c.link.precheck(c.basis, c.changes, unix_now())?;
        self.mark_rollout(c.link, &mark)?;
        let refs: Vec<&Change> = c.changes.iter().collect();
        let here = format!("{trigger} (canary: here first, then the fleet)");
        let (report, _) = self.apply_locally(&here, |tx| write_objects(tx, &refs, unix_now()))?;
        if !report.outcome.is_success() {
            mark.state = RolloutState::Refused;
            mark.message = refusal(&report);
            self.mark_rollout_logged(c.link, &mark);
            return Ok(Err(refused_here(report)));
        }
        match c.link.publish(c.basis, c.changes, unix_now()) {
            Ok(revision) => {
                mark.state = RolloutState::Published;
                mark.revision = Some(revision);
                self.mark_rollout_logged(c.link, &mark);
                Ok(Ok(revision))
            }
            Err(e) => {
                self.undo_canary(&c);
                mark.state = RolloutState::Refused;
                mark.message = format!("applied here, then not published: {e}");
                self.mark_rollout_logged(c.link, &mark);
                Err(e.into())
            }
        }
    }

    /// The fleet did not take what this edge applied: this edge goes back to the objects it
    /// had (the follower's next full read would, too).
    fn undo_canary(&mut self, c: &Canary) {
        let back: Vec<Change> = c
            .changes
            .iter()
            .map(|(k, _)| (k.clone(), c.old.get(k).cloned()))
            .collect();
        let refs: Vec<&Change> = back.iter().collect();
        let undone = self.apply_locally("canary undone: the fleet did not take the change", |tx| {
            write_objects(tx, &refs, unix_now())
        });
        if let Err(e) = undone {
            tracing::error!("undoing a canary change the fleet did not take failed: {e}");
        }
    }

    fn mark_rollout(&self, link: &FleetLink, mark: &RolloutReport) -> Result<(), EdgeError> {
        let value = serde_json::to_string(mark).expect("a rollout report serialises");
        let key = link.layout().rollout();
        link.block_on(link.etcd().put(&key, &value, None))?;
        Ok(())
    }

    /// [`Edge::mark_rollout`] once the outcome is known: a failure to say it changes nothing.
    fn mark_rollout_logged(&self, link: &FleetLink, mark: &RolloutReport) {
        if let Err(e) = self.mark_rollout(link, mark) {
            tracing::warn!("cannot record the rollout's state in etcd: {e}");
        }
    }
}

fn refused_here(mut report: ApplyReport) -> ApplyReport {
    if report.outcome == ApplyOutcome::Rejected {
        report.message = format!(
            "{}; it was not published to the fleet (canary: no other edge changed)",
            report.message
        );
    }
    report
}
