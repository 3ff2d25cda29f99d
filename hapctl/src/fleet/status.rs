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
    /// Unix seconds of this report.
    pub at: i64,
}

/// The fleet as `hapctl fleet status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct FleetView {
    /// The fleet's current revision.
    pub revision: i64,
    pub published: bool,
    pub edges: Vec<EdgeView>,
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

/// Every edge's status key, beside the fleet's revision of its last change.
pub async fn read_view(
    etcd: &super::etcd::Etcd,
    layout: &super::Layout,
) -> Result<FleetView, super::FleetError> {
    let revision = last_change(etcd, layout).await?;
    let published = etcd.get(&layout.marker()).await?.is_some();
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
    })
}
