//! What the block path knows between two changes: every blocked key, and which of them the
//! delta map holds (the base map holds the others). The daemon's block worker keeps one for
//! its lifetime, so a change costs what it changes, not a read of every key; a one-shot
//! command starts from an empty one.
//!
//! Other processes change the blocks too (the CLI, an apply's reconcile). Before each change,
//! under the block lock, the view is checked against the truth: SQLite's `data_version` (moves
//! when another connection committed), the delta map's bytes and the base map's fingerprint.
//! A stale view is rebuilt; files that do not match any view are rewritten whole.

use std::collections::BTreeSet;

use crate::clock::unix_now;
use crate::model::BlockKey;
use crate::render;
use crate::store::Store;

use super::files::{delta_keys, BlockFiles, FilesView};
use super::BlockError;

/// The block path's view of the database and of the two map files.
#[derive(Debug, Default)]
pub struct BlockCache {
    /// Every key with a row (expired ones until a change removes them).
    pub(super) all: BTreeSet<BlockKey>,
    /// The keys the delta map holds; `all` minus these is the base map.
    pub(super) delta: BTreeSet<BlockKey>,
    /// `data_version` when `all` was last right; `None` before the first read.
    data_version: Option<i64>,
    /// The files as this view last saw or wrote them.
    files: Option<FilesView>,
    /// Whether the files hold exactly `all` split as `delta` says.
    in_line: bool,
}

impl BlockCache {
    /// Brings the view up to date; returns whether the files hold exactly its keys (else the
    /// next write must be a whole one, and so must the runtime change).
    pub(super) fn refresh(
        &mut self,
        store: &Store,
        files: &BlockFiles,
    ) -> Result<bool, BlockError> {
        let version = store.blocks_data_version()?;
        let reread = self.data_version != Some(version);
        if reread {
            // Every row: the files still hold a key that expired but was not removed yet.
            self.all = store.block_keys(i64::MIN)?.into_iter().collect();
            self.data_version = Some(version);
        }
        let view = files.view()?;
        if reread || self.files.as_ref() != Some(&view) {
            self.in_line = self.fits(&view);
            if !self.in_line {
                // Written by an apply's reconcile, which leaves out the blocks that expired but
                // were not removed yet: the same split of the keys still in force fits.
                let in_force: BTreeSet<BlockKey> =
                    store.block_keys(unix_now())?.into_iter().collect();
                if in_force.len() < self.all.len() {
                    let all = std::mem::replace(&mut self.all, in_force);
                    self.in_line = self.fits(&view);
                    if !self.in_line {
                        self.all = all;
                    }
                }
            }
            self.files = Some(view);
        }
        Ok(self.in_line)
    }

    /// Whether `view` holds exactly `all`, split as its delta says (which becomes `delta`).
    fn fits(&mut self, view: &FilesView) -> bool {
        match delta_keys(&view.delta_bytes) {
            Some(delta) if delta.is_subset(&self.all) => {
                let base = self.all.iter().filter(|k| !delta.contains(k));
                let fits = view.mark.as_deref() == Some(&render::blocked_fingerprint(base));
                self.delta = delta;
                fits
            }
            _ => false,
        }
    }

    /// A view of files known to hold `all` split as `delta` says (read as `files`).
    pub(super) fn known(
        all: BTreeSet<BlockKey>,
        delta: BTreeSet<BlockKey>,
        files: FilesView,
    ) -> BlockCache {
        BlockCache {
            all,
            delta,
            data_version: None,
            files: Some(files),
            in_line: true,
        }
    }

    /// The delta map's bytes as last seen.
    pub(super) fn delta_bytes(&self) -> &[u8] {
        self.files.as_ref().map_or(&[], |f| &f.delta_bytes)
    }

    /// Records what a change wrote: the files now hold `all` split as `delta` says.
    /// (`data_version` stays: this connection's own commits do not move it.)
    pub(super) fn wrote(&mut self, mark: Option<String>, delta_bytes: Vec<u8>) {
        let old_mark = self.files.as_ref().and_then(|f| f.mark.clone());
        self.files = Some(FilesView {
            mark: mark.or(old_mark),
            delta_bytes,
        });
        self.in_line = true;
    }

    /// Forgets everything: the next change reads the database and the files again.
    pub(super) fn forget(&mut self) {
        *self = BlockCache::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Block;

    fn keys(list: &[&str]) -> BTreeSet<BlockKey> {
        list.iter().map(|k| k.parse().unwrap()).collect()
    }

    #[test]
    fn the_view_follows_other_writers_of_the_database_and_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Store::open(&dir.path().join("s.db"), &dir.path().join("b.db")).unwrap();
        let (mut ours, mut theirs) = (open(), open());
        let files = BlockFiles {
            base: dir.path().join("blocked.map"),
            delta: dir.path().join("blocked-delta.map"),
        };
        ours.put_blocks(&[
            Block::sample("10.0.0.1", None),
            Block::sample("10.0.0.2", None),
        ]);
        ours.put_blocks(&[Block::sample("10.0.0.3", None)]);
        files.write_base(&keys(&["10.0.0.1", "10.0.0.2"])).unwrap();
        files.write_delta(&keys(&["10.0.0.3"]), b"").unwrap();

        let mut cache = BlockCache::default();
        assert!(
            cache.refresh(&ours, &files).unwrap(),
            "base + delta = every key"
        );
        assert_eq!(cache.delta, keys(&["10.0.0.3"]));
        assert!(cache.refresh(&ours, &files).unwrap(), "nothing moved");

        // Another process blocks a key: the database moved, the files do not have it yet.
        theirs.put_blocks(&[Block::sample("10.0.0.4", None)]);
        assert!(!cache.refresh(&ours, &files).unwrap());
        assert!(
            cache.all.contains(&"10.0.0.4".parse().unwrap()),
            "read again"
        );
        // ... and writes it, folded: the view takes the new split.
        files
            .write_base(&keys(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]))
            .unwrap();
        files.write_delta(&BTreeSet::new(), b"x").unwrap();
        assert!(cache.refresh(&ours, &files).unwrap());
        assert!(cache.delta.is_empty());

        // A block expired but not removed yet, left out by a reconcile's files: they fit.
        theirs.put_blocks(&[Block::sample("10.0.0.5", Some(1))]);
        files
            .write_base(&keys(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]))
            .unwrap();
        assert!(cache.refresh(&ours, &files).unwrap());
        assert!(!cache.all.contains(&"10.0.0.5".parse().unwrap()));

        // Files that hold something else are never taken for in line.
        files.write_delta(&keys(&["192.0.2.1"]), b"").unwrap();
        assert!(!cache.refresh(&ours, &files).unwrap());
        std::fs::write(&files.delta, "garbage\n").unwrap();
        assert!(!cache.refresh(&ours, &files).unwrap());
    }
}
