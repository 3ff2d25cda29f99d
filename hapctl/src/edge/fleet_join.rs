//! Becoming, seeing and leaving a fleet: `hapctl fleet publish`, `status`, `leave`.

use super::{Edge, EdgeError};
use crate::clock::unix_now;
use crate::fleet::etcd::Snapshot;
use crate::fleet::object::{decode, diff, ObjectKey, Objects};
use crate::fleet::publish::{self, Guard};
use crate::fleet::status::{self, FleetView};
use crate::fleet::{FleetError, KeyClass, Layout};
use crate::store::FleetApplied;

/// What `hapctl fleet publish` did.
#[derive(Debug, serde::Serialize)]
pub struct Published {
    pub revision: i64,
    /// Objects written (blocks included).
    pub objects: usize,
    /// Certificates put in the fleet (none without the fleet key).
    pub certificates: usize,
}

impl Edge {
    /// Publishes this edge's desired state as the fleet's, under a prefix where none is
    /// published yet; this edge is then at the revision it made. Never deletes anything of
    /// this edge.
    pub fn publish_fleet(&mut self) -> Result<Published, EdgeError> {
        let link = self.fleet_link()?;
        let (etcd, layout) = (link.etcd(), link.layout());
        let ours = self.fleet_objects()?;
        let now = unix_now();
        let revision = link.block_on(async {
            if etcd.get(&layout.marker()).await?.is_some() {
                return Err(FleetError::AlreadyPublished(layout.root()));
            }
            // Keys left by an earlier publish that stopped half-way are replaced.
            let there = etcd.read_prefix(&layout.state()).await?;
            let changes = diff(&leftovers(layout, &there), &ours);
            publish::publish(
                etcd,
                layout,
                there.revision,
                &changes,
                now,
                Guard::Unpublished,
            )
            .await?;
            let name = link.settings().name.to_string();
            publish::mark_published(etcd, layout, &name, now).await
        })?;
        self.store.set_fleet_applied(&FleetApplied {
            revision,
            outcome: "applied",
            message: "this edge's state published as the fleet's".into(),
            checks: 0,
            reloads: 0,
        })?;
        Ok(Published {
            revision,
            objects: ours.len(),
            certificates: self.publish_local_certificates()?,
        })
    }

    /// Every edge of the fleet as its status key says, and the fleet's revision.
    pub fn fleet_view(&self) -> Result<FleetView, EdgeError> {
        let link = self.link()?;
        Ok(link.block_on(status::read_view(link.etcd(), link.layout()))?)
    }

    /// Leaves the fleet: this edge's status key is deleted and its record forgotten; its
    /// state stays as applied last, served by this edge alone once `[fleet]` is gone from the
    /// settings (the caller's part).
    pub fn leave_fleet(&mut self) -> Result<(), EdgeError> {
        let link = self.fleet_link()?;
        let me = link.settings().name.to_string();
        let key = link.layout().edge(&link.settings().name);
        link.block_on(async {
            link.etcd().delete(&key).await?;
            // `cert ls` no longer counts this edge among those serving a certificate.
            let installed = format!("{}installed/", link.layout().root());
            for kv in link.etcd().read_prefix(&installed).await?.kvs {
                if kv.key.rsplit_once('/').is_some_and(|(_, edge)| edge == me) {
                    link.etcd().delete(&kv.key).await?;
                }
            }
            Ok::<_, FleetError>(())
        })?;
        self.store.clear_fleet_record()?;
        Ok(())
    }
}

impl Edge {
    /// Makes `wanted` the edges this one shares its client tables with: an apply (a reload)
    /// when they differ from the ones it has, nothing otherwise.
    pub fn follow_peers(
        &mut self,
        wanted: Option<crate::model::FleetPeers>,
    ) -> Result<Option<crate::apply::ApplyReport>, EdgeError> {
        if self.with_state(|s| s.peers == wanted)? {
            return Ok(None);
        }
        let names: Vec<&str> = wanted
            .iter()
            .flat_map(|p| p.peers.iter().map(|(n, _)| n.as_str()))
            .collect();
        let trigger = format!("fleet peers: {}", names.join(", "));
        let (report, _) =
            self.apply_locally(&trigger, |tx| Ok(tx.set_fleet_peers(wanted.as_ref())?))?;
        Ok(Some(report))
    }
}

/// The objects already under the state prefix (those that parse).
fn leftovers(layout: &Layout, there: &Snapshot) -> Objects {
    there
        .kvs
        .iter()
        .filter_map(|kv| match layout.classify(&kv.key) {
            KeyClass::Object(path) => {
                let key = ObjectKey::parse(path).ok()?;
                decode(&key, &kv.value).ok().map(|o| (key, o))
            }
            _ => None,
        })
        .collect()
}
