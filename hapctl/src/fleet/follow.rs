//! Following the fleet's state: a watch from the last revision seen, and one consistent read
//! (then a diff against this edge's objects) whenever the watch cannot be trusted — at start,
//! after a cancelled or compacted watch, a revision that went back, and periodically, since
//! watches have lost events before (etcd #18089, #19179). A watch that merely ended (etcd
//! restarted, a connection lost) is opened again from this edge's revision at once: etcd
//! replays every change since, or says the revision was compacted (then the read). The read a
//! reconnect calls for follows later, as a check, so that it never delays the catch-up: it
//! lists every key of the fleet, and every edge makes it at the same moment after an outage.

use std::collections::{BTreeMap, BTreeSet};
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
    /// Every value was read and decoded: `refused` is every refusal there is (otherwise only
    /// those among the keys this batch read).
    pub every_value: bool,
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
        every_value: true,
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

/// A read after the watch broke (`listing`: every key at one revision, without values;
/// `changed`: the values of those changed after `since`, the revision this edge's state is
/// at): those keys' values, and deletions of what this edge has (`local`) that is gone. Every
/// change up to `since` reached this edge, so nothing else is decoded or compared.
pub fn batch_of_listing(
    layout: &Layout,
    listing: &Snapshot,
    changed: &Snapshot,
    since: i64,
    local: &BTreeSet<ObjectKey>,
    now: i64,
) -> Batch {
    let mut batch = Batch {
        revision: listing.revision,
        full: true,
        ..Batch::default()
    };
    let mut present = BTreeSet::new();
    for kv in &listing.kvs {
        match layout.classify(&kv.key) {
            KeyClass::Marker => batch.published = true,
            KeyClass::Other => {}
            KeyClass::Object(path) => match ObjectKey::parse(path) {
                Ok(key) => drop(present.insert(key)),
                Err(e) => batch.refused.push((path.to_string(), e.to_string())),
            },
        }
    }
    let mut changes: BTreeMap<ObjectKey, Option<Object>> = local
        .difference(&present)
        .map(|k| (k.clone(), None))
        .collect();
    for kv in changed.kvs.iter().filter(|kv| kv.mod_revision > since) {
        let KeyClass::Object(path) = layout.classify(&kv.key) else {
            continue;
        };
        match parse(path, Some(&kv.value), now) {
            Ok((key, object)) => drop(changes.insert(key, object)),
            Err((Some(_), reason)) => batch.refused.push((path.to_string(), reason)),
            // Its key did not parse: refused above already.
            Err((None, _)) => {}
        }
    }
    batch.changes = changes.into_iter().collect();
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

/// The revision of the newest write of the fleet's `changed` key among `responses` (0: none).
fn last_change_in(layout: &Layout, responses: &[etcd_client::WatchResponse]) -> i64 {
    let changed = layout.changed();
    let events = responses.iter().flat_map(|r| r.events());
    events
        .filter_map(|e| e.kv())
        .filter(|kv| kv.key() == changed.as_bytes())
        .map(|kv| kv.mod_revision())
        .max()
        .unwrap_or(0)
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

/// This edge's side of a read of the whole fleet.
pub trait Local {
    /// Every object this edge has (what a complete comparison compares).
    fn objects(&self) -> Objects;
    /// The keys of the objects this edge has, and the fleet revision its state is at (`None`
    /// when they cannot be read: the read compares every object then).
    fn keys(&self) -> Option<(BTreeSet<ObjectKey>, i64)>;
    /// The fleet revision this edge's state is at (`None`: unknown, or none yet).
    fn revision(&self) -> Option<i64>;
}

/// Changed keys read in one request after a broken watch; more are read page by page.
const CHANGED_AT_ONCE: usize = 2_000;

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
    /// Whether a read compared every object since this follower started.
    compared: bool,
    /// The watch ended without being cancelled or compacted: open it again where this edge is.
    resume: bool,
}

/// How long a watch waits for more events to apply with the first ones.
const COALESCE: Duration = Duration::from_millis(5);
/// When the consistent read follows a watch opened again after it ended.
const READ_AFTER_RESUME: Duration = Duration::from_secs(30);

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
            compared: false,
            resume: false,
        }
    }

    /// The next batch to apply. `local` is this edge's side, for a full read's diff.
    /// An error means etcd could not be read: call again later; nothing is lost.
    pub async fn next(
        &mut self,
        local: &impl Local,
        now: impl Fn() -> i64,
    ) -> Result<Batch, FleetError> {
        loop {
            // A periodic read that fell due during an outage waits for the resumed watch: made
            // by every edge at once as etcd returns, it would hold back the catch-up.
            let resumable = self.stream.is_none() && self.resume && self.compared;
            if resumable && self.resume_watch(local).await? {
                continue;
            }
            if self.stream.is_none() || Instant::now() >= self.next_full {
                return self.full_read(local, now()).await;
            }
            let stream = self.stream.as_mut().expect("a watch is open");
            let wait = self.next_full.saturating_duration_since(Instant::now());
            let first = match tokio::time::timeout(wait, stream.message()).await {
                Err(_) => continue,
                Ok(Ok(Some(r))) => r,
                Ok(Ok(None)) | Ok(Err(_)) => {
                    tracing::warn!(
                        "the fleet's watch ended; opening it again from this edge's revision"
                    );
                    self.stream = None;
                    self.resume = true;
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
            self.changed_seen = self
                .changed_seen
                .max(last_change_in(&self.layout, &responses));
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

    /// The watch opened again from this edge's revision, after one read of the fleet's
    /// `changed` key says etcd did not go back; false when the full read must decide.
    async fn resume_watch(&mut self, local: &impl Local) -> Result<bool, FleetError> {
        let Some(since) = local.revision().filter(|r| *r > 0) else {
            self.resume = false;
            return Ok(false);
        };
        let changed = self.etcd.read_prefix(&self.layout.changed()).await?;
        self.resume = false;
        if self.went_back(&changed) {
            return Ok(false);
        }
        self.position = self.position.max(changed.revision);
        self.stream = Some(self.etcd.watch(&self.layout.root(), since + 1).await?);
        // The read a reconnect owes (and a periodic one due meanwhile) still comes, as a check
        // of the replay, once the edge is serving what was replayed and etcd is past its
        // restart.
        self.next_full = Instant::now() + READ_AFTER_RESUME;
        tracing::info!(
            "the fleet's watch opened again from revision {} (etcd is at {})",
            since + 1,
            changed.revision
        );
        Ok(true)
    }

    /// One consistent read at one revision: every key listed, then, when a watch broke, the
    /// values of those changed since this edge's revision; at start, periodically and after a
    /// revision went back, every value, compared with every object this edge has.
    async fn full_read(&mut self, local: &impl Local, now: i64) -> Result<Batch, FleetError> {
        self.stream = None;
        let started = Instant::now();
        let root = self.layout.root();
        let listing = self.etcd.list_prefix(&root, 0).await?;
        let went_back = self.went_back(&listing);
        let complete = went_back || !self.compared || Instant::now() >= self.next_full;
        let keys = if complete { None } else { local.keys() };
        let compares_all = keys.is_none();
        let (mut batch, values) = if let Some((keys, since)) = keys {
            let (changed, snapshot) = self.changed_since(&listing, since).await?;
            let read = started.elapsed();
            let batch = batch_of_listing(&self.layout, &listing, &snapshot, since, &keys, now);
            (batch, (changed, read))
        } else {
            let snapshot = self.etcd.read_prefix_at(&root, listing.revision).await?;
            let read = started.elapsed();
            let batch = batch_of_snapshot(&self.layout, &snapshot, &local.objects(), now);
            (batch, (snapshot.kvs.len(), read))
        };
        batch.went_back = went_back;
        tracing::info!(
            "read the fleet's {} keys at revision {} ({} value(s)) in {} ms, compared with this edge's in {} ms: {} change(s)",
            listing.kvs.len(),
            listing.revision,
            values.0,
            values.1.as_millis(),
            (started.elapsed() - values.1).as_millis(),
            batch.changes.len()
        );
        self.compared |= compares_all;
        self.published = batch.published;
        self.position = listing.revision;
        self.stream = Some(self.etcd.watch(&root, listing.revision + 1).await?);
        self.next_full = Instant::now() + self.full_read_every;
        Ok(batch)
    }

    /// The values of the keys `listing` shows changed after `since` (how many, and the read):
    /// in one request when they are few, page by page otherwise.
    async fn changed_since(
        &self,
        listing: &Snapshot,
        since: i64,
    ) -> Result<(usize, Snapshot), FleetError> {
        let root = self.layout.root();
        let changed = listing
            .kvs
            .iter()
            .filter(|kv| kv.mod_revision > since)
            .count();
        let snapshot = match changed {
            0 => Snapshot {
                revision: listing.revision,
                kvs: Vec::new(),
            },
            n if n <= CHANGED_AT_ONCE => {
                let read = self.etcd.read_changed(&root, since, listing.revision);
                read.await?
            }
            _ => self.etcd.read_prefix_at(&root, listing.revision).await?,
        };
        Ok((changed, snapshot))
    }

    /// Whether `listing` (of the whole prefix, or of the `changed` key alone) is older than
    /// what this follower saw (etcd restored from an older snapshot); remembers its last
    /// change.
    fn went_back(&mut self, listing: &Snapshot) -> bool {
        let changed = self.layout.changed();
        let last_change = listing
            .kvs
            .iter()
            .find(|kv| kv.key == changed)
            .map_or(0, |kv| kv.mod_revision);
        let went_back = listing.revision < self.position || last_change < self.changed_seen;
        if went_back {
            tracing::error!(
                "etcd's revision went back (read at {}, its last change at {}; seen before: {} and {}; restored from an older snapshot?): the fleet's state as read now wins",
                listing.revision,
                last_change,
                self.position,
                self.changed_seen
            );
        }
        self.changed_seen = last_change;
        went_back
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::etcd::Kv;
    use crate::fleet::object::encode;

    /// Each change's key, and whether it puts (or deletes).
    fn puts_and_deletes(batch: &Batch) -> Vec<(String, bool)> {
        let changes = batch.changes.iter();
        changes.map(|(k, v)| (k.path(), v.is_some())).collect()
    }

    fn layout() -> Layout {
        Layout::new(&crate::settings::FleetPrefix::parse("/f").unwrap())
    }

    fn kv(key: &str, value: &str) -> Kv {
        Kv {
            key: key.to_string(),
            value: value.as_bytes().to_vec(),
            mod_revision: 1,
            lease: 0,
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
        assert!(batch.published && batch.full && batch.every_value);
        assert_eq!(batch.revision, 9);
        let got = puts_and_deletes(&batch);
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

    /// After a broken watch: only values changed after the edge's revision are decoded (an
    /// older one that would not parse is not even read), and what the edge has that is no
    /// longer listed is deleted.
    #[test]
    fn a_read_after_a_broken_watch_takes_the_changes_since_and_what_is_gone() {
        let at = |key: &str, value: &str, mod_revision| Kv {
            mod_revision,
            ..kv(key, value)
        };
        let key = |path| ObjectKey::parse(path).unwrap();
        let listing = Snapshot {
            revision: 12,
            kvs: vec![
                at("/f/published", "", 2),
                at("/f/state/suspended/a.example.com", "", 5),
                at("/f/state/suspended/b.example.com", "", 11),
                at("/f/state/teapot/x", "", 12),
            ],
        };
        let changed = Snapshot {
            revision: 12,
            kvs: vec![
                at("/f/state/suspended/a.example.com", "garbage", 5),
                at(
                    "/f/state/suspended/b.example.com",
                    &encode(&Object::Suspended),
                    11,
                ),
            ],
        };
        let local: BTreeSet<ObjectKey> = [
            key("suspended/a.example.com"),
            key("suspended/gone.example.com"),
        ]
        .into_iter()
        .collect();
        let batch = batch_of_listing(&layout(), &listing, &changed, 10, &local, 0);
        assert!(batch.published && batch.full && !batch.every_value);
        assert_eq!(batch.revision, 12);
        let got = puts_and_deletes(&batch);
        assert_eq!(
            got,
            [
                ("suspended/b.example.com".to_string(), true),
                ("suspended/gone.example.com".to_string(), false)
            ]
        );
        let refused: Vec<&str> = batch.refused.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(refused, ["teapot/x"]);
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
