//! Each edge's account of itself under a leased key (`<prefix>/edges/<name>`): gone when the
//! edge is, so `hapctl fleet status` tells a running edge from one that left or died.

use serde::{Deserialize, Serialize};

/// What an edge says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeReport {
    pub name: String,
    /// The fleet revision its desired state is at.
    pub applied_revision: i64,
    /// How its last apply of the fleet's state went, and what it said.
    pub outcome: String,
    pub message: String,
    /// The last revision it could not apply, and why (HAProxy's message, or a key that did
    /// not parse).
    pub refused: Option<(i64, String)>,
    /// Whether its HAProxy answers, and what is wrong if not.
    pub haproxy: String,
    pub version: String,
    /// Where it serves and listens: HTTP, HTTPS, API.
    pub addresses: Vec<String>,
    /// Where its HAProxy meets the other edges' to share the client tables (`[fleet] peer`).
    #[serde(default)]
    pub peer: Option<String>,
    /// Each app's live generation on this edge (app → version).
    #[serde(default)]
    pub generations: std::collections::BTreeMap<String, String>,
    /// Unix seconds of this report.
    pub at: i64,
}

/// The last rollout of a change that needs a reload (`rollout = "canary"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutReport {
    /// The edge that applied it first.
    pub canary: String,
    /// The fleet revision the change was computed at.
    pub basis: i64,
    pub state: RolloutState,
    /// The revision it was published at (`published` only).
    pub revision: Option<i64>,
    /// What the change is; for a refusal, HAProxy's reason.
    pub message: String,
    pub at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutState {
    /// Being applied on the canary; no other edge has it.
    Canary,
    /// The canary took it; every edge applies it.
    Published,
    /// The canary refused it (or the fleet did not take it): no edge has it.
    Refused,
}

/// The fleet as `hapctl fleet status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct FleetView {
    /// The revision of the fleet's last change of its desired state.
    pub revision: i64,
    pub published: bool,
    pub edges: Vec<EdgeView>,
    /// The last rollout of a change that needs a reload, if any.
    pub rollout: Option<RolloutReport>,
    /// The last delivery edge by edge, if any.
    pub delivery: Option<super::deliveries::Summary>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EdgeView {
    #[serde(flatten)]
    pub report: EdgeReport,
    /// Behind the fleet's revision by a change of the desired state it has not applied.
    pub lagging: bool,
}

/// The revision of the fleet's last change of its desired state (0: none yet).
pub async fn last_change(
    etcd: &super::etcd::Etcd,
    layout: &super::Layout,
) -> Result<i64, super::FleetError> {
    let changed = etcd.read_prefix(&layout.changed()).await?;
    Ok(changed.kvs.first().map_or(0, |kv| kv.mod_revision))
}

/// Fails with a conflict when the fleet's state changed after revision `basis`.
pub async fn require_current(
    etcd: &super::etcd::Etcd,
    layout: &super::Layout,
    basis: i64,
) -> Result<(), super::FleetError> {
    let last = last_change(etcd, layout).await?;
    if last > basis {
        return Err(super::FleetError::Behind {
            at: basis,
            fleet: last,
        });
    }
    Ok(())
}

impl FleetView {
    /// The peers `local` shares its client tables with: every edge that says where it meets
    /// them (`local` with `bind`, whatever its key says).
    pub fn peers(
        &self,
        local: &crate::model::EdgeName,
        bind: std::net::SocketAddr,
    ) -> Option<crate::model::FleetPeers> {
        let mut peers = vec![(local.clone(), bind)];
        for e in &self.edges {
            let r = &e.report;
            let parsed = crate::model::EdgeName::parse(&r.name)
                .ok()
                .zip(r.peer.as_deref().and_then(|a| a.parse().ok()));
            if let Some((name, addr)) = parsed.filter(|(n, _)| n != local) {
                peers.push((name, addr));
            }
        }
        crate::model::FleetPeers::new(local.clone(), peers)
    }
}

/// Every edge's status key, beside the fleet's revision of its last change.
pub async fn read_view(
    etcd: &super::etcd::Etcd,
    layout: &super::Layout,
) -> Result<FleetView, super::FleetError> {
    let revision = last_change(etcd, layout).await?;
    let published = etcd.get(&layout.marker()).await?.is_some();
    let rollout = etcd
        .get(&layout.rollout())
        .await?
        .and_then(|v| serde_json::from_slice(&v).ok());
    let delivery = etcd
        .get(&layout.delivery_last())
        .await?
        .and_then(|v| serde_json::from_slice(&v).ok());
    let edges = etcd.read_prefix(&layout.edges()).await?;
    let mut views = Vec::new();
    for kv in edges.kvs {
        let report =
            serde_json::from_slice::<EdgeReport>(&kv.value).unwrap_or_else(|e| EdgeReport {
                name: kv.key.rsplit('/').next().unwrap_or_default().to_string(),
                message: format!("its status key does not parse: {e}"),
                ..EdgeReport::default()
            });
        views.push(EdgeView {
            lagging: report.applied_revision < revision,
            report,
        });
    }
    Ok(FleetView {
        revision,
        published,
        edges: views,
        rollout,
        delivery,
    })
}
