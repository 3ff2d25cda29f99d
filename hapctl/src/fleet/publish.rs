//! Writing a change to the fleet: one etcd transaction per change, which holds only if no
//! object it touches was changed after the revision the writer computed it from (no lost
//! update). A block that expires is written under a lease, so etcd removes it on time even
//! when no edge is up.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp};

use super::etcd::Etcd;
use super::object::{encode, Change, Object};
use super::{FleetError, Layout};

/// etcd's default limit of operations in one transaction (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// Lease lengths are rounded up to this, so a burst of blocks shares a few leases.
const LEASE_STEP: i64 = 60;

/// One key to write (`None`: delete it).
struct Write {
    key: String,
    value: Option<String>,
    /// Seconds the key may live (a block with an expiry).
    ttl: Option<i64>,
    /// Blocks are last-writer-wins (a refresh of the same block); every other object is
    /// compared with the writer's basis.
    compare: bool,
}

/// What a publication requires of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// A change: the fleet's state exists.
    Published,
    /// The first publication (`hapctl fleet publish`), before the marker.
    Unpublished,
}

/// Publishes `changes`, computed from the state at fleet revision `basis`; the revision it
/// made. Changes beyond one transaction go in several, each object whole in one of them.
pub async fn publish(
    etcd: &Etcd,
    layout: &Layout,
    basis: i64,
    changes: &[Change],
    now: i64,
    guard: Guard,
) -> Result<i64, FleetError> {
    let writes: Vec<Write> = changes
        .iter()
        .map(|(key, object)| write_of(layout, key, object.as_ref(), now))
        .collect();
    let leases = grant_leases(etcd, &writes).await?;
    let mut revision = basis;
    // Room is left for the marker's compare and the `changed` key.
    for chunk in writes.chunks(MAX_TXN_OPS - 1) {
        revision = publish_chunk(etcd, layout, basis, chunk, &leases, guard).await?;
    }
    Ok(revision)
}

/// Whether `changes`, computed at `basis`, would be taken now: the same compares as
/// [`publish`], nothing written. The canary asks before it changes its own edge.
pub async fn precheck(
    etcd: &Etcd,
    layout: &Layout,
    basis: i64,
    changes: &[Change],
    now: i64,
) -> Result<(), FleetError> {
    let writes: Vec<Write> = changes
        .iter()
        .map(|(key, object)| write_of(layout, key, object.as_ref(), now))
        .collect();
    for chunk in writes.chunks(MAX_TXN_OPS - 1) {
        let compares = compares_of(layout, basis, chunk, Guard::Published);
        if etcd.txn(compares, Vec::new()).await?.is_none() {
            why_refused(etcd, layout, basis, chunk, Guard::Published).await?;
        }
    }
    Ok(())
}

/// Writes the marker that makes the fleet's state exist: once, by the first publisher.
pub async fn mark_published(
    etcd: &Etcd,
    layout: &Layout,
    by: &str,
    now: i64,
) -> Result<i64, FleetError> {
    let marker = layout.marker();
    let value = serde_json::json!({ "by": by, "at": now }).to_string();
    let compares = vec![Compare::version(marker.as_str(), CompareOp::Equal, 0)];
    let ops = vec![
        TxnOp::put(marker.as_str(), value, None),
        TxnOp::put(layout.changed(), "{}", None),
    ];
    etcd.txn(compares, ops)
        .await?
        .ok_or_else(|| FleetError::AlreadyPublished(layout.root()))
}

fn write_of(
    layout: &Layout,
    key: &super::object::ObjectKey,
    object: Option<&Object>,
    now: i64,
) -> Write {
    let ttl = match object {
        Some(Object::Block(b)) => b.expires_at.map(|at| {
            let left = (at - now).max(1);
            (left + LEASE_STEP - 1) / LEASE_STEP * LEASE_STEP + LEASE_STEP
        }),
        _ => None,
    };
    Write {
        key: layout.object(key),
        value: object.map(encode),
        ttl,
        compare: !key.is_block(),
    }
}

/// A lease for each distinct lifetime among `writes`.
async fn grant_leases(etcd: &Etcd, writes: &[Write]) -> Result<BTreeMap<i64, i64>, FleetError> {
    let mut leases = BTreeMap::new();
    for ttl in writes.iter().filter_map(|w| w.ttl) {
        if let std::collections::btree_map::Entry::Vacant(e) = leases.entry(ttl) {
            e.insert(etcd.lease(ttl).await?);
        }
    }
    Ok(leases)
}

async fn publish_chunk(
    etcd: &Etcd,
    layout: &Layout,
    basis: i64,
    chunk: &[Write],
    leases: &BTreeMap<i64, i64>,
    guard: Guard,
) -> Result<i64, FleetError> {
    let compares = compares_of(layout, basis, chunk, guard);
    let ops = std::iter::once(TxnOp::put(layout.changed(), "{}", None))
        .chain(chunk.iter().map(|w| match &w.value {
            Some(v) => {
                let lease = w.ttl.and_then(|t| leases.get(&t));
                let options = lease.map(|id| PutOptions::new().with_lease(*id));
                TxnOp::put(w.key.as_str(), v.as_str(), options)
            }
            None => TxnOp::delete(w.key.as_str(), None),
        }))
        .collect();
    match etcd.txn(compares, ops).await? {
        Some(revision) => Ok(revision),
        None => why_refused(etcd, layout, basis, chunk, guard).await,
    }
}

/// What a chunk's transaction requires: the marker as `guard` says, and no object it touches
/// changed after `basis` (blocks are last-writer-wins).
fn compares_of(layout: &Layout, basis: i64, chunk: &[Write], guard: Guard) -> Vec<Compare> {
    let marker = match guard {
        Guard::Published => Compare::version(layout.marker(), CompareOp::Greater, 0),
        Guard::Unpublished => Compare::version(layout.marker(), CompareOp::Equal, 0),
    };
    let mut compares = vec![marker];
    compares.extend(
        chunk
            .iter()
            .filter(|w| w.compare)
            .map(|w| Compare::mod_revision(w.key.as_str(), CompareOp::Less, basis + 1)),
    );
    compares
}

/// A transaction's compare failed: the fleet is not published, or another writer changed an
/// object first — unless every key already holds what this one wrote (a retry after an
/// answer that was lost, or the same change made twice), which is a success.
async fn why_refused(
    etcd: &Etcd,
    layout: &Layout,
    basis: i64,
    chunk: &[Write],
    guard: Guard,
) -> Result<i64, FleetError> {
    match (guard, etcd.get(&layout.marker()).await?.is_some()) {
        (Guard::Published, false) => return Err(FleetError::NotPublished(layout.root())),
        (Guard::Unpublished, true) => return Err(FleetError::AlreadyPublished(layout.root())),
        _ => {}
    }
    let mut first_changed = None;
    for w in chunk.iter().filter(|w| w.compare) {
        let now = etcd.get(&w.key).await?;
        if now.as_deref() != w.value.as_ref().map(|v| v.as_bytes()) && first_changed.is_none() {
            first_changed = Some(w.key.clone());
        }
    }
    match first_changed {
        None => etcd.revision(&layout.marker()).await,
        Some(key) => {
            let shown = key
                .strip_prefix(&layout.state())
                .unwrap_or(&key)
                .to_string();
            Err(FleetError::Conflict(shown, basis))
        }
    }
}
