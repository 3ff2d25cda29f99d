//! `hapctl serve` on an edge of a fleet: the follower (read the fleet's state as it changes,
//! apply it here) and the edge's status key, both on the fleet's runtime. With etcd down the
//! edge keeps serving what it applied last and tries again every quarter second.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::clock::unix_now;
use crate::edge::{Edge, EdgeError, FleetApplyOutcome};
use crate::fleet::follow::{self, Batch};
use crate::fleet::object::{Change, Object, ObjectKey, Objects};
use crate::fleet::status::EdgeReport;
use crate::fleet::FleetLink;

/// How long an edge's status key outlives the edge.
const STATUS_TTL: i64 = 10;
const STATUS_EVERY: Duration = Duration::from_secs(3);
/// The wait after etcd could not be read: short, so an edge catches up soon after etcd returns.
const RETRY: Duration = Duration::from_millis(250);

/// What the status key says beyond the apply record: the last read's trouble.
#[derive(Default)]
struct Health {
    etcd_error: Option<String>,
    refused_keys: Vec<(String, String)>,
    published: bool,
}

/// Starts the follower and the status keeper on `link`'s runtime. `edge` is a connection of
/// the follower's own.
pub fn start(link: Arc<FleetLink>, mut edge: Edge, status_edge: Edge, waiting: Arc<AtomicBool>) {
    edge.follow_fleet();
    // Checked in the background by the apply worker, as the daemon's own runtime changes are:
    // an apply here waits for no `haproxy -c`.
    edge.defer_checks();
    let health = Arc::new(Mutex::new(Health::default()));
    let edge = Arc::new(Mutex::new(edge));
    let applied = Arc::new(Notify::new());
    let follower = Follower {
        link: link.clone(),
        edge,
        health: health.clone(),
        applied: applied.clone(),
        waiting,
    };
    link.handle().spawn(follow(follower));
    let status_edge = Arc::new(Mutex::new(status_edge));
    link.handle()
        .spawn(keep_status(link.clone(), status_edge, health, applied));
}

/// What the follower loop shares with the rest of the daemon.
struct Follower {
    link: Arc<FleetLink>,
    edge: Arc<Mutex<Edge>>,
    health: Arc<Mutex<Health>>,
    /// Told after each apply (the status key says it at once).
    applied: Arc<Notify>,
    /// True while an apply of the fleet's changes waits or runs.
    waiting: Arc<AtomicBool>,
}

async fn follow(f: Follower) {
    let Follower {
        link,
        edge,
        health,
        applied,
        waiting,
    } = f;
    let at = lock(&edge).fleet_record().map(|r| r.revision).unwrap_or(0);
    let settings = link.settings().clone();
    let mut follower = follow::Follower::new(
        link.etcd().clone(),
        link.layout().clone(),
        settings.full_read_every,
        at,
    );
    // Changes of watch batches this edge refused: tried again with the next one.
    let mut pending: BTreeMap<ObjectKey, Option<Object>> = BTreeMap::new();
    loop {
        let batch = match follower.next(&LocalEdge(&edge), unix_now).await {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!("{e}");
                lock(&health).etcd_error = Some(e.to_string());
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        note_read(&health, &batch);
        if !batch.published {
            tracing::warn!("no fleet state is published under {}: this edge serves its own until `hapctl fleet publish`", settings.prefix.as_str());
            continue;
        }
        if batch.full {
            pending.clear();
        }
        pending.extend(batch.changes);
        let changes: Vec<_> = pending
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let revision = batch.revision;
        let outcome = apply(&edge, &waiting, revision, changes).await;
        match outcome {
            Ok(FleetApplyOutcome::Applied { .. }) => pending.clear(),
            Ok(FleetApplyOutcome::Refused { message }) => {
                tracing::error!("fleet revision {revision} refused on this edge: {message}")
            }
            Err(e) => tracing::error!("applying fleet revision {revision} failed: {e}"),
        }
        // The status key says it now, not at its next turn.
        applied.notify_one();
    }
}

/// The follower's edge, as a read of the whole fleet compares it.
struct LocalEdge<'a>(&'a Mutex<Edge>);

impl follow::Local for LocalEdge<'_> {
    fn objects(&self) -> Objects {
        lock(self.0).fleet_objects().unwrap_or_else(|e| {
            tracing::error!("cannot read this edge's state for the fleet's diff: {e}");
            Default::default()
        })
    }

    fn keys(&self) -> Option<(BTreeSet<ObjectKey>, i64)> {
        lock(self.0)
            .fleet_keys()
            .map_err(|e| tracing::error!("cannot read this edge's keys for the fleet's diff: {e}"))
            .ok()
    }

    fn revision(&self) -> Option<i64> {
        lock(self.0)
            .fleet_record()
            .map(|r| r.revision)
            .map_err(|e| tracing::error!("cannot read this edge's fleet revision: {e}"))
            .ok()
    }
}

/// Applies `changes` on the follower's connection, off the async threads. `waiting` tells the
/// apply worker's background check of runtime changes to give way meanwhile.
async fn apply(
    edge: &Arc<Mutex<Edge>>,
    waiting: &Arc<AtomicBool>,
    revision: i64,
    changes: Vec<Change>,
) -> Result<FleetApplyOutcome, String> {
    let edge = edge.clone();
    waiting.store(true, Ordering::Relaxed);
    let outcome =
        tokio::task::spawn_blocking(move || lock(&edge).apply_fleet(revision, &changes)).await;
    waiting.store(false, Ordering::Relaxed);
    outcome
        .map_err(|e| e.to_string())?
        .map_err(|e: EdgeError| e.to_string())
}

fn note_read(health: &Mutex<Health>, batch: &Batch) {
    let mut h = lock(health);
    h.etcd_error = None;
    h.published = batch.published;
    if batch.every_value {
        h.refused_keys = batch.refused.clone();
    } else {
        // A key this batch read is as the batch says now; the others keep their refusal.
        let read = |key: &String| {
            batch.changes.iter().any(|(k, _)| k.path() == *key)
                || batch.refused.iter().any(|(r, _)| r == key)
        };
        h.refused_keys.retain(|(key, _)| !read(key));
        h.refused_keys.extend(batch.refused.iter().cloned());
    }
    for (key, why) in &batch.refused {
        tracing::error!("fleet key {key} refused, this edge keeps what it had: {why}");
    }
}

/// Keeps this edge's status key under a lease: written after each apply and every few
/// seconds, gone when the edge is.
async fn keep_status(
    link: Arc<FleetLink>,
    edge: Arc<Mutex<Edge>>,
    health: Arc<Mutex<Health>>,
    applied: Arc<Notify>,
) {
    let key = link.layout().edge(&link.settings().name);
    let mut lease = None;
    loop {
        let report = {
            let edge = edge.clone();
            let health = health.clone();
            let name = link.settings().name.to_string();
            tokio::task::spawn_blocking(move || report(&lock(&edge), &lock(&health), name)).await
        };
        if let Ok(report) = report {
            lease = write_status(&link, &key, &report, lease).await;
        }
        follow_peers(&link, &edge).await;
        let _ = tokio::time::timeout(STATUS_EVERY, applied.notified()).await;
    }
}

/// With `[fleet] peer`: the `peers` section follows the fleet's edges (their status keys);
/// a change reloads, with the edges named in the history.
async fn follow_peers(link: &Arc<FleetLink>, edge: &Arc<Mutex<Edge>>) {
    let settings = link.settings();
    let Some(bind) = settings.peer else { return };
    let view = match crate::fleet::status::read_view(link.etcd(), link.layout()).await {
        Ok(view) => view,
        Err(e) => return tracing::debug!("the fleet's edges cannot be read now: {e}"),
    };
    let wanted = view.peers(&settings.name, bind);
    let edge = edge.clone();
    let changed = tokio::task::spawn_blocking(move || lock(&edge).follow_peers(wanted)).await;
    match changed {
        Ok(Ok(Some(report))) => tracing::info!("fleet peers changed: {}", report.message),
        Ok(Ok(None)) => {}
        Ok(Err(e)) => tracing::error!("applying the fleet's peers failed: {e}"),
        Err(e) => tracing::error!("applying the fleet's peers failed: {e}"),
    }
}

/// Writes `report` under `lease` (a new one when it is gone); the lease in use.
async fn write_status(
    link: &FleetLink,
    key: &str,
    report: &EdgeReport,
    lease: Option<i64>,
) -> Option<i64> {
    let etcd = link.etcd();
    let lease = match lease {
        Some(id) if etcd.keep_alive(id).await.unwrap_or(false) => id,
        _ => etcd.lease(STATUS_TTL).await.ok()?,
    };
    let value = serde_json::to_string(report).expect("a status serialises");
    etcd.put(key, &value, Some(lease)).await.ok()?;
    Some(lease)
}

fn report(edge: &Edge, health: &Health, name: String) -> EdgeReport {
    let record = edge.fleet_record().unwrap_or_default();
    let mut refused = record.refused;
    if let Some((key, why)) = health.refused_keys.first() {
        refused.get_or_insert((record.revision, format!("key {key}: {why}")));
    }
    let haproxy = match edge.health_problem() {
        Ok(None) => "ok".to_string(),
        Ok(Some(problem)) => problem,
        Err(e) => e.to_string(),
    };
    let s = &edge.settings;
    let mut addresses = vec![format!("http {}", s.edge.http_bind)];
    addresses.extend(s.edge.https_bind.map(|a| format!("https {a}")));
    addresses.push(format!("api {}", s.api.listen));
    let peer = s.fleet.as_ref().and_then(|f| f.peer).map(|a| a.to_string());
    EdgeReport {
        name,
        applied_revision: record.revision,
        outcome: record.outcome,
        message: match &health.etcd_error {
            Some(e) => format!("{} (etcd: {e})", record.message),
            None if !health.published => "waiting for `hapctl fleet publish`".into(),
            None => record.message,
        },
        refused,
        haproxy,
        version: env!("CARGO_PKG_VERSION").to_string(),
        addresses,
        peer,
        generations: edge.live_generations(),
        at: unix_now(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(keys: &[&str]) -> Vec<(String, String)> {
        keys.iter()
            .map(|k| (k.to_string(), "no".to_string()))
            .collect()
    }

    /// A read that decoded only some values (a watch's events, a read after a broken watch)
    /// keeps the refusals of the keys it did not read; a read of every value replaces them.
    #[test]
    fn refusals_of_keys_a_batch_did_not_read_are_kept() {
        let health = Mutex::new(Health::default());
        let every = Batch {
            refused: refused(&["waf/a.example.com", "teapot/x"]),
            every_value: true,
            ..Batch::default()
        };
        note_read(&health, &every);
        let fixed = ObjectKey::parse("waf/a.example.com").unwrap();
        let partial = Batch {
            changes: vec![(fixed, None)],
            refused: refused(&["teapot/y"]),
            ..Batch::default()
        };
        note_read(&health, &partial);
        let keys = |h: &Mutex<Health>| -> Vec<String> {
            lock(h)
                .refused_keys
                .iter()
                .map(|(k, _)| k.clone())
                .collect()
        };
        assert_eq!(keys(&health), ["teapot/x", "teapot/y"]);
        note_read(&health, &every);
        assert_eq!(keys(&health), ["waf/a.example.com", "teapot/x"]);
    }
}
