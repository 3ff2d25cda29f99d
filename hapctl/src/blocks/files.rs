//! The two files HAProxy reads the blocks from: the base map (`maps/blocked.map`, every key
//! as of its last full write, "fold") and the delta map (`maps/blocked-delta.map`, the keys
//! blocked since). The frontend matches a client against both, so their union is what a
//! reload enforces. A block rewrites only the small delta; an unblock of a base key, or a
//! delta grown past its bound, rewrites both (base first: until the delta is rewritten too,
//! a key is at worst in both files, never in neither).
//!
//! The base map's second line is the fingerprint of its key set, so whoever knows which keys
//! should be there can check the file by reading two lines.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;

use crate::fsutil::{self, DEFAULT_MODE};
use crate::model::BlockKey;
use crate::render::{self, FileId, BLOCKED_BASE_MARK};
use crate::settings::Paths;

use super::BlockError;

/// The two files and how to read and write them.
pub(super) struct BlockFiles {
    pub base: PathBuf,
    pub delta: PathBuf,
}

/// What the files say, read cheaply: the base map's fingerprint line and the whole delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FilesView {
    /// `None` when the base map is missing or has no fingerprint (written by an older hapctl).
    pub mark: Option<String>,
    pub delta_bytes: Vec<u8>,
}

impl BlockFiles {
    pub fn new(paths: &Paths) -> BlockFiles {
        BlockFiles {
            base: FileId::BlockedMap.path(paths),
            delta: FileId::BlockedDeltaMap.path(paths),
        }
    }

    fn write_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> BlockError + '_ {
        move |source| BlockError::Write {
            path: path.display().to_string(),
            source,
        }
    }

    pub fn view(&self) -> Result<FilesView, BlockError> {
        Ok(FilesView {
            mark: self.mark().map_err(Self::write_err(&self.base))?,
            delta_bytes: fsutil::read_optional(&self.delta)
                .map_err(Self::write_err(&self.delta))?
                .unwrap_or_default(),
        })
    }

    /// The base map's fingerprint, from its first two lines.
    fn mark(&self) -> std::io::Result<Option<String>> {
        let mut head = [0u8; 512];
        let n = match std::fs::File::open(&self.base) {
            Ok(mut f) => read_up_to(&mut f, &mut head)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let text = String::from_utf8_lossy(&head[..n]);
        Ok(text
            .lines()
            .nth(1)
            .and_then(|l| l.strip_prefix(BLOCKED_BASE_MARK))
            .map(String::from))
    }

    /// Writes the base map with `keys` (atomically, durably); returns its fingerprint.
    pub fn write_base(&self, keys: &BTreeSet<BlockKey>) -> Result<String, BlockError> {
        let bytes = render::blocked_map(keys);
        fsutil::write_atomic(&self.base, &bytes, DEFAULT_MODE)
            .map_err(Self::write_err(&self.base))?;
        Ok(render::blocked_fingerprint(keys))
    }

    /// Writes the delta map with `keys` unless it holds exactly that; returns its bytes.
    pub fn write_delta(
        &self,
        keys: &BTreeSet<BlockKey>,
        now: &[u8],
    ) -> Result<Vec<u8>, BlockError> {
        let bytes = render::blocked_delta_map(keys);
        if bytes != now {
            fsutil::write_atomic(&self.delta, &bytes, DEFAULT_MODE)
                .map_err(Self::write_err(&self.delta))?;
        }
        Ok(bytes)
    }

    /// The delta map with `keys` written and synced beside the live one, to be put in place
    /// ([`fsutil::Staged::put`], then [`BlockFiles::sync_delta_folder`]); `None` when the map
    /// holds exactly that already. Also returns its bytes.
    pub fn stage_delta(
        &self,
        keys: &BTreeSet<BlockKey>,
        now: &[u8],
    ) -> Result<(Vec<u8>, Option<fsutil::Staged>), BlockError> {
        let bytes = render::blocked_delta_map(keys);
        if bytes == now {
            return Ok((bytes, None));
        }
        let staged = fsutil::Staged::write(&self.delta, &bytes, DEFAULT_MODE)
            .map_err(Self::write_err(&self.delta))?;
        Ok((bytes, Some(staged)))
    }

    /// Removes the temp files a killed block change left beside the maps.
    pub fn sweep_temp_files(&self) -> Result<(), BlockError> {
        for map in [&self.base, &self.delta] {
            let folder = map.parent().unwrap_or(std::path::Path::new("."));
            fsutil::sweep_temp_files(folder).map_err(Self::write_err(map))?;
        }
        Ok(())
    }

    /// Makes a delta map put in place durable.
    pub fn sync_delta_folder(&self) -> Result<(), BlockError> {
        fsutil::sync_parent(&self.delta).map_err(Self::write_err(&self.delta))
    }

    /// A digest of both files' bytes (to tell, after a reload, whether a block raced with it).
    /// Read in chunks: at 100,000 blocks the base map is 2.7 MB, which an apply held whole
    /// across its reload, and then read whole again beside it (BENCHMARKS.md, daemon memory).
    /// A missing or unreadable file reads as empty, as the bytes did.
    pub fn digest_now(&self) -> MapsDigest {
        let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        for path in [&self.base, &self.delta] {
            let len = digest_file(&mut ctx, path).unwrap_or(0);
            // Each file's length after its bytes: no two pairs of files hash the same stream.
            ctx.update(&len.to_le_bytes());
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        MapsDigest(out)
    }
}

/// SHA-256 of the base and delta maps' bytes, from [`BlockFiles::digest_now`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapsDigest([u8; 32]);

/// Feeds a file's bytes to `ctx`; returns how many. On an error part-way, what was fed stays
/// fed: the digest then differs from the file's, which at worst syncs the maps once more.
fn digest_file(ctx: &mut aws_lc_rs::digest::Context, path: &PathBuf) -> std::io::Result<u64> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                ctx.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The keys of a delta map's bytes; `None` when a line is not a key hapctl writes.
pub(super) fn delta_keys(bytes: &[u8]) -> Option<BTreeSet<BlockKey>> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            l.strip_suffix(&format!(" {}", render::BLOCKED_VALUE))?
                .parse()
                .ok()
        })
        .collect()
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(list: &[&str]) -> BTreeSet<BlockKey> {
        list.iter().map(|k| k.parse().unwrap()).collect()
    }

    #[test]
    fn the_digest_tells_any_change_of_either_file() {
        let dir = tempfile::tempdir().unwrap();
        let files = BlockFiles {
            base: dir.path().join("blocked.map"),
            delta: dir.path().join("blocked-delta.map"),
        };
        let none = files.digest_now();
        std::fs::write(&files.base, b"").unwrap();
        assert_eq!(
            files.digest_now(),
            none,
            "an empty file reads as a missing one"
        );
        std::fs::write(&files.base, b"10.0.0.1 1\n").unwrap();
        let base_only = files.digest_now();
        assert_ne!(base_only, none);
        assert_eq!(
            files.digest_now(),
            base_only,
            "unchanged files, same digest"
        );
        // The same bytes moved from one file to the other are a change.
        std::fs::write(&files.base, b"").unwrap();
        std::fs::write(&files.delta, b"10.0.0.1 1\n").unwrap();
        assert_ne!(files.digest_now(), base_only);
        // A file larger than one read chunk, changed past the first chunk.
        let big: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        std::fs::write(&files.base, &big).unwrap();
        let one = files.digest_now();
        let mut other = big.clone();
        other[150_000] ^= 1;
        std::fs::write(&files.base, &other).unwrap();
        assert_ne!(files.digest_now(), one);
    }

    #[test]
    fn the_base_map_names_its_keys_and_the_delta_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let files = BlockFiles {
            base: dir.path().join("blocked.map"),
            delta: dir.path().join("blocked-delta.map"),
        };
        assert_eq!(files.view().unwrap().mark, None, "no base map yet");
        let base = keys(&["10.0.0.0/8", "192.0.2.1", "2001:db8::1"]);
        let mark = files.write_base(&base).unwrap();
        assert_eq!(files.view().unwrap().mark, Some(mark.clone()));
        assert_eq!(mark, render::blocked_fingerprint(&base));
        assert_ne!(mark, render::blocked_fingerprint(&keys(&["10.0.0.0/8"])));
        assert!(mark.starts_with("3-"), "{mark}");

        let delta = keys(&["198.51.100.7", "10.1.0.0/16"]);
        let bytes = files.write_delta(&delta, &[]).unwrap();
        assert_eq!(files.view().unwrap().delta_bytes, bytes);
        assert_eq!(delta_keys(&bytes), Some(delta));
        assert_eq!(delta_keys(b"# header\n10.0.0.1 1\nnot-a-key 1\n"), None);
        assert_eq!(delta_keys(b"10.0.0.1 2\n"), None, "only hapctl's value");
        assert_eq!(delta_keys(b""), Some(BTreeSet::new()));
    }
}
