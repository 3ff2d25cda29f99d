//! Whole file sets on disk: the live set HAProxy reads and the known-good snapshot.
//!
//! The known-good snapshot is replaced atomically as a whole: each version is a folder
//! `<known_good_dir>.<n>` holding the files and a `MANIFEST`, and `known_good_dir` is a
//! symlink switched with one `rename`. A crash during promotion leaves the previous snapshot
//! in force, never a mix of two.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::fsutil::{self, DEFAULT_MODE};
use crate::render::{FileId, FileSet};
use crate::settings::Paths;

const MANIFEST: &str = "MANIFEST";

/// The bytes of each file of a set that exists; absent ids are absent files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    files: BTreeMap<FileId, Vec<u8>>,
}

impl Snapshot {
    /// Reads the files HAProxy reads now.
    pub fn read_live(paths: &Paths) -> io::Result<Snapshot> {
        let mut files = BTreeMap::new();
        for id in FileId::RENDERED {
            if let Some(bytes) = fsutil::read_optional(&id.path(paths))? {
                files.insert(id, bytes);
            }
        }
        Ok(Snapshot { files })
    }

    pub fn from_set(set: FileSet) -> Snapshot {
        Snapshot {
            files: set
                .into_files()
                .into_iter()
                .map(|f| (f.id, f.bytes))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn get(&self, id: FileId) -> Option<&[u8]> {
        self.files.get(&id).map(Vec::as_slice)
    }

    /// Ids whose content differs between the two snapshots (including present vs absent).
    pub fn differing(&self, other: &Snapshot) -> Vec<FileId> {
        FileId::RENDERED
            .into_iter()
            .filter(|id| self.get(*id) != other.get(*id))
            .collect()
    }

    /// The configuration files present in this snapshot, as `haproxy -f` arguments.
    pub fn config_paths(&self, paths: &Paths) -> Vec<PathBuf> {
        [FileId::Config, FileId::Generation]
            .into_iter()
            .filter(|id| self.files.contains_key(id))
            .map(|id| id.path(paths))
            .collect()
    }

    /// Makes the live files equal to this snapshot, touching only those that differ.
    /// `before_each` runs before every write (the crash points hook in there).
    pub fn write_live(
        &self,
        paths: &Paths,
        current: &Snapshot,
        mut before_each: impl FnMut(usize),
    ) -> io::Result<()> {
        for (n, id) in self.differing(current).into_iter().enumerate() {
            before_each(n);
            let path = id.path(paths);
            match self.get(id) {
                Some(bytes) => fsutil::write_atomic(&path, bytes, id.mode())?,
                None => fsutil::remove_durable(&path)?,
            }
        }
        Ok(())
    }

    /// [`Snapshot::write_live`] behind `marker` in one durable step (three disk flushes, not
    /// two per file): the marker is in place, even after a power cut, before any file of this
    /// set is. Files this snapshot lacks are removed after.
    pub fn write_live_behind(
        &self,
        paths: &Paths,
        current: &Snapshot,
        marker: fsutil::FileWrite,
    ) -> io::Result<()> {
        let differing = self.differing(current);
        let targets: Vec<(PathBuf, Option<&[u8]>, u32)> = differing
            .iter()
            .map(|id| (id.path(paths), self.get(*id), id.mode()))
            .collect();
        let writes: Vec<fsutil::FileWrite> = targets
            .iter()
            .filter_map(|(path, bytes, mode)| {
                bytes.map(|bytes| fsutil::FileWrite {
                    path,
                    bytes,
                    new_mode: *mode,
                })
            })
            .collect();
        fsutil::write_atomic_stages(&[&[marker], &writes])?;
        for (path, bytes, _) in &targets {
            if bytes.is_none() {
                fsutil::remove_durable(path)?;
            }
        }
        Ok(())
    }
}

/// The last file set that validated and loaded.
pub struct KnownGood {
    link: PathBuf,
}

impl KnownGood {
    pub fn new(paths: &Paths) -> KnownGood {
        KnownGood {
            link: paths.known_good_dir.clone(),
        }
    }

    /// The snapshot, or `None` when there is none (or it was never completed).
    pub fn load(&self) -> io::Result<Option<Snapshot>> {
        let manifest = match fsutil::read_optional(&self.link.join(MANIFEST))? {
            Some(m) => String::from_utf8_lossy(&m).into_owned(),
            None => return Ok(None),
        };
        let mut files = BTreeMap::new();
        for name in manifest.lines().filter(|l| !l.is_empty()) {
            let id = FileId::ALL
                .into_iter()
                .find(|id| id.name() == name)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: unknown file {name:?} in {MANIFEST}",
                            self.link.display()
                        ),
                    )
                })?;
            files.insert(id, fs::read(self.link.join(name))?);
        }
        Ok(Some(Snapshot { files }))
    }

    /// Replaces the snapshot with `snapshot`, atomically.
    pub fn promote(&self, snapshot: &Snapshot) -> io::Result<()> {
        let parent = self.link.parent().unwrap_or(Path::new("."));
        let base = self
            .link
            .file_name()
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "known_good_dir has no name")
            })?
            .to_string_lossy()
            .into_owned();
        fs::create_dir_all(parent)?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let version = format!("{base}.{stamp}");
        let dir = parent.join(&version);
        let previous = fs::read_link(&self.link).ok();
        // The folder is new and unreferenced until the link below names it (a crash leaves
        // a stale version that `sweep` removes), so its files need no temp-and-rename each:
        // one fsync per file written and one per folder. A file the snapshot in force holds
        // with the same bytes is hard-linked (no version's file is ever changed in place):
        // at 10,000 domains most of a promotion is haproxy.cfg and hosts.map unchanged.
        let in_force = previous.as_ref().map(|v| parent.join(v));
        fs::create_dir_all(&dir)?;
        let mut folders = std::collections::BTreeSet::from([dir.clone()]);
        let mut manifest = String::new();
        for (id, bytes) in &snapshot.files {
            let path = dir.join(id.name());
            let folder = path.parent().unwrap_or(&dir).to_path_buf();
            fs::create_dir_all(&folder)?;
            folders.insert(folder);
            let same = in_force
                .as_ref()
                .map(|old| old.join(id.name()))
                .filter(|old| fs::read(old).is_ok_and(|b| b == *bytes));
            match same {
                Some(old) if fs::hard_link(&old, &path).is_ok() => {}
                _ => fsutil::write_new(&path, bytes, id.mode())?,
            }
            manifest.push_str(id.name());
            manifest.push('\n');
        }
        fsutil::write_new(&dir.join(MANIFEST), manifest.as_bytes(), DEFAULT_MODE)?;
        for folder in &folders {
            fs::File::open(folder)?.sync_all()?;
        }

        if self.link.is_dir() && previous.is_none() {
            // A plain folder from an older layout: it cannot be renamed over; remove it.
            fs::remove_dir_all(&self.link)?;
        }
        let tmp_link = parent.join(format!(
            ".{base}{}{}",
            fsutil::TEMP_INFIX,
            std::process::id()
        ));
        let _ = fs::remove_file(&tmp_link);
        std::os::unix::fs::symlink(&version, &tmp_link)?;
        fs::rename(&tmp_link, &self.link)?;
        fs::File::open(parent)?.sync_all()?;
        self.remove_stale_versions(parent, &base, &version)
    }

    /// Removes what a killed promotion leaves: the temp link and half-written snapshot folders.
    pub fn sweep(&self) -> io::Result<()> {
        let parent = self.link.parent().unwrap_or(Path::new("."));
        let Some(base) = self
            .link
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
        else {
            return Ok(());
        };
        fsutil::sweep_temp_files(parent)?;
        match fs::read_link(&self.link) {
            Ok(current) => self.remove_stale_versions(parent, &base, &current.to_string_lossy()),
            // No snapshot yet: any version folder is a half-written first one.
            Err(_) if !self.link.exists() => self.remove_stale_versions(parent, &base, ""),
            Err(_) => Ok(()),
        }
    }

    /// Deletes snapshot folders other than the current one (older ones, or a half-written one a
    /// crash left behind).
    fn remove_stale_versions(&self, parent: &Path, base: &str, current: &str) -> io::Result<()> {
        let prefix = format!("{base}.");
        for entry in fs::read_dir(parent)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_version = name
                .strip_prefix(&prefix)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if is_version && name != current {
                fs::remove_dir_all(entry.path())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Settings, DEFAULT_SETTINGS_TOML};

    fn paths(dir: &Path) -> Paths {
        Settings::parse(dir, Path::new("t"), DEFAULT_SETTINGS_TOML)
            .unwrap()
            .paths
    }

    #[test]
    fn promote_replaces_the_whole_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let paths = paths(dir.path());
        let kg = KnownGood::new(&paths);
        assert_eq!(kg.load().unwrap(), None);
        let mut a = Snapshot::default();
        a.files.insert(FileId::Config, b"a\n".to_vec());
        a.files.insert(FileId::HostsMap, b"h\n".to_vec());
        kg.promote(&a).unwrap();
        assert_eq!(kg.load().unwrap(), Some(a.clone()));
        let mut b = Snapshot::default();
        b.files.insert(FileId::Config, b"b\n".to_vec());
        kg.promote(&b).unwrap();
        assert_eq!(kg.load().unwrap(), Some(b.clone()));
        // An unchanged file is the same inode in the next version; a changed one is new.
        let inode = |id: FileId| {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(paths.known_good_dir.join(id.name()))
                .unwrap()
                .ino()
        };
        let mut c = b.clone();
        c.files.insert(FileId::HostsMap, b"c\n".to_vec());
        let config = inode(FileId::Config);
        kg.promote(&c).unwrap();
        assert_eq!(kg.load().unwrap(), Some(c));
        assert_eq!(inode(FileId::Config), config);
        kg.promote(&b).unwrap();
        assert_eq!(kg.load().unwrap(), Some(b));
        kg.promote(&Snapshot::default()).unwrap();
        assert_eq!(kg.load().unwrap(), Some(Snapshot::default()));
        let versions = fs::read_dir(dir.path()).unwrap().filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("known-good.")
        });
        assert_eq!(versions.count(), 1, "old snapshot folders are removed");
    }

    #[test]
    fn write_live_touches_only_what_differs_and_removes_absent_files() {
        let dir = tempfile::tempdir().unwrap();
        let paths = paths(dir.path());
        let mut want = Snapshot::default();
        want.files.insert(FileId::Config, b"cfg\n".to_vec());
        want.files.insert(FileId::HostsMap, b"h\n".to_vec());
        let mut writes = 0;
        want.write_live(&paths, &Snapshot::read_live(&paths).unwrap(), |_| {
            writes += 1
        })
        .unwrap();
        assert_eq!(writes, 2);
        assert_eq!(Snapshot::read_live(&paths).unwrap(), want);
        let mut fewer = want.clone();
        fewer.files.remove(&FileId::HostsMap);
        fewer.write_live(&paths, &want, |_| {}).unwrap();
        assert!(!FileId::HostsMap.path(&paths).exists());
    }
}
