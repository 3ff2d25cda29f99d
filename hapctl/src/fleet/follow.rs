//! Following the fleet's state: a watch from the last revision seen, and one consistent read
//! (then a diff against this edge's objects) whenever the watch cannot be trusted — at start,
//! after a cancelled or compacted watch, a reconnect, a revision that went back, and
//! periodically, since watches have lost events before (etcd #18089, #19179).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{EventType, WatchStream};

use super::etcd::{Etcd, Snapshot};
use super::object::{decode, diff, Change, Object, ObjectKey, Objects};
use super::{FleetError, KeyClass, Layout};

/// What to bring this edge to: the changes up to `revision`.
#[derive(Debug, Default)]
pub struct Batch {
    pub revision: i64,
    /// In key order, each key once.
    pub changes: Vec<Change>,
    /// Keys that did not parse, and why: refused, this edge keeps what it had for them.
    pub refused: Vec<(String, String)>,
    /// Whether the fleet's state exists (`hapctl fleet publish` ran). Without it there is
    /// nothing to apply: an empty prefix must not empty an edge.
    pub published: bool,
    /// A full read (rather than watch events).
    pub full: bool,
    /// The revision went back (etcd restored from an older snapshot): the read wins over
    /// everything this edge had.
    pub went_back: bool,
}

/// A full read's batch: what turns `current` (this edge's objects) into the fleet's.
pub fn batch_of_snapshot(
    layout: &Layout,
    snapshot: &Snapshot,
    current: &Objects,
    now: i64,
) -> Batch {
    let mut fleet = Objects::new();
    let mut batch = Batch {
        revision: snapshot.revision,
        full: true,
        ..Batch::default()
    };
    for kv in &snapshot.kvs {
        match layout.classify(&kv.key) {
            KeyClass::Marker => batch.published = true,
            KeyClass::Other => {}
            KeyClass::Object(path) => match parse(path, Some(&kv.value), now) {
                Ok((key, Some(object))) => {
                    fleet.insert(key, object);
                }
                Ok((_, None)) => {}
                Err((key, reason)) => {
                    // This edge keeps its own object for a key it cannot read.
                    if let Some((k, o)) = key.and_then(|k| current.get_key_value(&k)) {
                        fleet.insert(k.clone(), o.clone());
                    }
                    batch.refused.push((path.to_string(), reason));
                }
            },
        }
    }
    batch.changes = diff(current, &fleet);
    batch
}

/// The batch of watch events up to `revision`; the last event of a key wins.
fn batch_of_events(
    layout: &Layout,
    responses: &[etcd_client::WatchResponse],
    now: i64,
    published: bool,
) -> Batch {
    let mut changes: BTreeMap<ObjectKey, Option<Object>> = BTreeMap::new();
    let mut batch = Batch {
        published,
        ..Batch::default()
    };
    for event in responses.iter().flat_map(|r| r.events()) {
        let Some(kv) = event.kv() else { continue };
        let key = String::from_utf8_lossy(kv.key());
        batch.revision = batch.revision.max(kv.mod_revision());
        let value = (event.event_type() == EventType::Put).then(|| kv.value());
        match layout.classify(&key) {
            KeyClass::Marker => batch.published = value.is_some(),
            KeyClass::Other => {}
            KeyClass::Object(path) => match parse(path, value, now) {
                Ok((k, object)) => {
                    changes.insert(k, object);
                }
                Err((_, reason)) => batch.refused.push((path.to_string(), reason)),
            },
        }
    }
    batch.changes = changes.into_iter().collect();
    batch
}

type Parsed = Result<(ObjectKey, Option<Object>), (Option<ObjectKey>, String)>;

/// An object's key and value (`None`: gone, or a block whose expiry passed).
fn parse(path: &str, value: Option<&[u8]>, now: i64) -> Parsed {
    let key = ObjectKey::parse(path).map_err(|e| (None, e.to_string()))?;
    let Some(value) = value else {
        return Ok((key, None));
    };
    match decode(&key, value) {
        Ok(Object::Block(b)) if b.is_expired(now) => Ok((key, None)),
        Ok(object) => Ok((key, Some(object))),
        Err(e) => Err((Some(key), e.to_string())),
    }
}

/// Reads the fleet's state as it changes.
pub struct Follower {
    etcd: Etcd,
    layout: Layout,
    full_read_every: Duration,
    /// The highest revision etcd has shown (events, the edges' status keys, progress
    /// notices): a read below it means etcd went back.
    position: i64,
    stream: Option<WatchStream>,
    next_full: Instant,
    /// The newest revision of the fleet's `changed` key seen: the last change of the desired
    /// state. A read whose `changed` is older went back, however many status writes since
    /// moved etcd's own revision on.
    changed_seen: i64,
    /// Whether the fleet's marker key exists, as last read.
    published: bool,
}

/// How long a watch waits for more events to apply with the first ones.
const COALESCE: Duration = Duration::from_millis(5);

impl Follower {
    /// `applied` is the revision this edge's state is at (0: none yet).
    pub fn new(etcd: Etcd, layout: Layout, full_read_every: Duration, applied: i64) -> Follower {
        Follower {
            etcd,
            layout,
            full_read_every,
            position: applied,
            stream: None,
            next_full: Instant::now(),
            published: false,
            changed_seen: 0,
        }
    }

    /// The next batch to apply. `current` gives this edge's objects, for a full read's diff.
    /// An error means etcd could not be read: call again later; nothing is lost.
    pub async fn next(
        &mut self,
        current: impl FnOnce() -> Objects,
        now: impl Fn() -> i64,
    ) -> Result<Batch, FleetError> {
        loop {
            if self.stream.is_none() || Instant::now() >= self.next_full {
                return self.full_read(current, now()).await;
            }
            let stream = self.stream.as_mut().expect("a watch is open");
            let wait = self.next_full.saturating_duration_since(Instant::now());
            let first = match tokio::time::timeout(wait, stream.message()).await {
                Err(_) => continue,
                Ok(Ok(Some(r))) => r,
                Ok(Ok(None)) | Ok(Err(_)) => {
                    tracing::warn!("the fleet's watch ended; reading the whole state again");
                    self.stream = None;
                    continue;
                }
            };
            let mut responses = vec![first];
            while let Ok(Ok(Some(r))) = tokio::time::timeout(COALESCE, stream.message()).await {
                responses.push(r);
            }
            if responses
                .iter()
                .any(|r| r.canceled() || r.compact_revision() > 0)
            {
                tracing::warn!(
                    "the fleet's watch was cancelled or compacted; reading the whole state again"
                );
                self.stream = None;
                continue;
            }
            let seen = responses
                .iter()
                .filter_map(|r| r.header().map(|h| h.revision()));
            self.position = seen.fold(self.position, i64::max);
            let batch = batch_of_events(&self.layout, &responses, now(), self.published);
            if batch.published && !self.published {
                // Just published: everything is read at once, never half of it.
                self.stream = None;
                continue;
            }
            self.published = batch.published;
            if batch.changes.is_empty() && batch.refused.is_empty() {
                continue;
            }
            return Ok(batch);
        }
    }

    async fn full_read(
        &mut self,
        current: impl FnOnce() -> Objects,
        now: i64,
    ) -> Result<Batch, FleetError> {
        self.stream = None;
        let snapshot = self.etcd.read_prefix(&self.layout.root()).await?;
        let changed = self.layout.changed();
        let last_change = snapshot
            .kvs
            .iter()
            .find(|kv| kv.key == changed)
            .map_or(0, |kv| kv.mod_revision);
        let went_back = snapshot.revision < self.position || last_change < self.changed_seen;
        if went_back {
            tracing::error!(
                "etcd's revision went back (read at {}, its last change at {}; seen before: {} and {}; restored from an older snapshot?): the fleet's state as read now wins",
                snapshot.revision,
                last_change,
                self.position,
                self.changed_seen
            );
        }
        self.changed_seen = last_change;
        let mut batch = batch_of_snapshot(&self.layout, &snapshot, &current(), now);
        batch.went_back = went_back;
        self.published = batch.published;
        self.position = snapshot.revision;
        self.stream = Some(
            self.etcd
                .watch(&self.layout.root(), snapshot.revision + 1)
                .await?,
        );
        self.next_full = Instant::now() + self.full_read_every;
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::etcd::Kv;
    use crate::fleet::object::encode;

    fn layout() -> Layout {
        Layout::new(&crate::settings::FleetPrefix::parse("/f").unwrap())
    }

    fn kv(key: &str, value: &str) -> Kv {
        Kv {
            key: key.to_string(),
            value: value.as_bytes().to_vec(),
            mod_revision: 1,
        }
    }

    #[test]
    fn a_full_read_keeps_what_does_not_parse_and_drops_what_is_gone() {
        let d: ObjectKey = ObjectKey::parse("suspended/a.example.com").unwrap();
        let e: ObjectKey = ObjectKey::parse("exempt/192.0.2.0/24").unwrap();
        let current: Objects = [(d.clone(), Object::Suspended), (e.clone(), Object::Exempt)]
            .into_iter()
            .collect();
        let snapshot = Snapshot {
            revision: 9,
            kvs: vec![
                kv("/f/published", "{}"),
                kv("/f/edges/a", "{}"),
                kv("/f/state/suspended/a.example.com", "garbage"),
                kv(
                    "/f/state/suspended/b.example.com",
                    &encode(&Object::Suspended),
                ),
                kv("/f/state/teapot/x", "{}"),
            ],
        };
        let batch = batch_of_snapshot(&layout(), &snapshot, &current, 0);
        assert!(batch.published && batch.full);
        assert_eq!(batch.revision, 9);
        let got: Vec<(String, bool)> = batch
            .changes
            .iter()
            .map(|(k, v)| (k.path(), v.is_some()))
            .collect();
        assert_eq!(
            got,
            [
                ("suspended/b.example.com".to_string(), true),
                ("exempt/192.0.2.0/24".to_string(), false)
            ]
        );
        let refused: Vec<&str> = batch.refused.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(refused, ["suspended/a.example.com", "teapot/x"]);
    }

    #[test]
    fn an_unpublished_prefix_says_so() {
        let snapshot = Snapshot {
            revision: 3,
            kvs: vec![],
        };
        let current: Objects = [(ObjectKey::Limits, Object::Exempt)].into_iter().collect();
        assert!(!batch_of_snapshot(&layout(), &snapshot, &current, 0).published);
    }
}
