//! Durable file operations: atomic replacement and an exclusive lock file.
//!
//! HAProxy reads whole files at reload time; a half-written map line is a fatal configuration
//! error (see HAPROXY-FACTS.md). So every file it reads is replaced atomically: a temp file in
//! the same folder, fsync, rename over the target, fsync the folder.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Infix of temp files; a crash can leave them behind and `sweep_temp_files` removes them.
pub const TEMP_INFIX: &str = ".hapctl-tmp.";

/// Mode of a new file HAProxy reads (an existing file keeps its own mode).
pub const DEFAULT_MODE: u32 = 0o644;

/// Replaces `path` with `bytes` atomically, creating parent folders. The file keeps its mode
/// if it existed; otherwise it gets `new_mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], new_mode: u32) -> io::Result<()> {
    // The old file is freed at once, as before `Replaced`: a writer that waits for the folder
    // sync anyway gains nothing by freeing it later.
    drop(Staged::write(path, bytes, new_mode)?.put()?);
    sync_parent(path)
}

/// One file of [`write_atomic_stages`]: what to write where, and the mode of a new file.
pub struct FileWrite<'a> {
    pub path: &'a Path,
    pub bytes: &'a [u8],
    pub new_mode: u32,
}

/// Replaces several files atomically, as [`write_atomic`] does each, in one durable step that
/// costs about three disk flushes instead of two per file: every temp file is written and
/// synced at once (in parallel), then stage by stage the stage's files are renamed and their
/// folders synced. A file of a later stage is never in place, even after a power cut, while
/// one of an earlier stage is not (a marker that must precede the files it describes goes in
/// the first stage). On an error, the temp files not renamed yet are removed.
pub fn write_atomic_stages(stages: &[&[FileWrite]]) -> io::Result<()> {
    let all: Vec<&FileWrite> = stages.iter().flat_map(|s| s.iter()).collect();
    let written: Vec<io::Result<Staged>> = std::thread::scope(|scope| {
        let jobs: Vec<_> = all
            .iter()
            .map(|f| scope.spawn(move || Staged::write(f.path, f.bytes, f.new_mode)))
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    // Any failure drops (and so removes) every temp file before one is renamed.
    let mut staged = written
        .into_iter()
        .collect::<io::Result<Vec<Staged>>>()?
        .into_iter();
    for stage in stages {
        let mut folders: Vec<&Path> = vec![];
        for f in stage.iter() {
            drop(staged.next().expect("one staged file per write").put()?);
            let folder = parent(f.path);
            if !folders.contains(&folder) {
                folders.push(folder);
            }
        }
        sync_dirs(&folders)?;
    }
    Ok(())
}

/// A temp file written and synced beside its target, not in place yet; dropped before
/// [`Staged::put`], it is removed.
pub struct Staged {
    tmp: PathBuf,
    target: PathBuf,
}

impl Staged {
    /// Writes and syncs the temp file of `path` (creating parent folders). It gets the mode of
    /// the file it replaces, or `new_mode` — always a private `new_mode` (no group or other
    /// bits): what holds a secret never inherits an older copy's wider mode.
    pub fn write(path: &Path, bytes: &[u8], new_mode: u32) -> io::Result<Staged> {
        let dir = parent(path);
        fs::create_dir_all(dir)?;
        let mode = match fs::metadata(path) {
            Ok(_) if new_mode & 0o077 == 0 => new_mode,
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(e) if e.kind() == io::ErrorKind::NotFound => new_mode,
            Err(e) => return Err(e),
        };
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
        let staged = Staged {
            tmp: dir.join(format!(
                ".{}{TEMP_INFIX}{}",
                name.to_string_lossy(),
                std::process::id()
            )),
            target: path.to_path_buf(),
        };
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&staged.tmp)?;
        f.write_all(bytes)?;
        // The umask may have narrowed the mode given to open().
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        Ok(staged)
    }

    /// Renames the temp file over its target: every reader sees the new bytes from now on;
    /// after a power cut too once the folder is synced ([`sync_parent`]). Returns the file it
    /// replaced, still open: see [`Replaced`].
    pub fn put(mut self) -> io::Result<Replaced> {
        // Opened before the rename so that the rename only unlinks it. Not being able to open
        // it costs time, not safety.
        let old = File::open(&self.target).ok();
        fs::rename(&self.tmp, &self.target)?;
        // Nothing left for the drop to remove.
        self.tmp = PathBuf::new();
        Ok(Replaced { _old: old })
    }
}

/// The file a [`Staged::put`] replaced, held open: its inode is freed when this drops. On
/// ext4 freeing the inode of a file just synced costs 0.2–4 ms (measured on an AMD EPYC VM,
/// idle to loaded: the whole cost of a rename over it), so a caller in a hurry drops this
/// after what it hurries for.
#[must_use = "dropping it at once frees the old file now; hold it to free it later"]
pub struct Replaced {
    _old: Option<File>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Writes a file that must not exist yet and syncs it; its folder is not synced. For files
/// of a folder nothing refers to until it is complete (the caller syncs the folder then).
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    // The umask may have narrowed the mode given to open().
    f.set_permissions(fs::Permissions::from_mode(mode))?;
    f.sync_all()
}

/// Creates `dir` (and its parents) and makes it 0700: it holds secrets.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Writes a secret (a private key, a PEM bundle with its key) atomically, mode 0600 in a 0700
/// folder, whatever mode an older copy had.
pub fn write_secret(path: &Path, bytes: &[u8]) -> io::Result<()> {
    private_dir(parent(path))?;
    if let Ok(m) = fs::metadata(path) {
        if m.permissions().mode() & 0o077 != 0 {
            fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
        }
    }
    write_atomic(path, bytes, 0o600)
}

/// Removes a file and makes the removal durable; absent is fine.
pub fn remove_durable(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => sync_parent(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Reads a file; `None` when it does not exist.
pub fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes the temp files a killed writer left in `dir` (those of live processes are writes
/// in progress and stay); returns how many.
pub fn sweep_temp_files(dir: &Path) -> io::Result<usize> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((_, pid)) = name.split_once(TEMP_INFIX) else {
            continue;
        };
        // A temp file of a process still running is a write in progress, not a leftover.
        let writer = pid.parse::<i32>().ok();
        // This process's own temp files too: another thread (the daemon's block worker) may be
        // writing one right now.
        if writer.is_some_and(|p| p == std::process::id() as i32 || crate::process::pid_alive(p)) {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            // A directory (a temp link's target is not one, but be safe) or already gone.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Syncs the folder of `path`: a rename or removal there is durable once this returns.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    sync_dir(parent(path))
}

/// Syncs the folders at once (one thread each beyond the first).
fn sync_dirs(dirs: &[&Path]) -> io::Result<()> {
    match dirs {
        [] => Ok(()),
        [one] => sync_dir(one),
        [first, rest @ ..] => std::thread::scope(|scope| {
            let others: Vec<_> = rest
                .iter()
                .map(|d| scope.spawn(move || sync_dir(d)))
                .collect();
            let mut result = sync_dir(first);
            for o in others {
                let r = o.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                result = result.and(r);
            }
            result
        }),
    }
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// An exclusive `flock` on a file, released on drop (and by the kernel if the process dies,
/// so a killed apply never leaves the host locked).
#[derive(Debug)]
pub struct LockFile {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another hapctl operation has held {path} for more than {waited:?}; wait for it to finish, or check for a hung process")]
    Timeout { path: PathBuf, waited: Duration },
    #[error("cannot open lock file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

impl LockFile {
    /// Waits up to `timeout` for the lock.
    pub fn acquire(path: &Path, timeout: Duration) -> Result<LockFile, LockError> {
        let io_err = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        fs::create_dir_all(parent(path)).map_err(io_err)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err)?;
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            // SAFETY: flock on a file descriptor we own; no memory is shared.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(LockFile { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io_err(err));
            }
            if start.elapsed() >= timeout {
                return Err(LockError::Timeout {
                    path: path.to_path_buf(),
                    waited: timeout,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_keeps_mode_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/a.map");
        write_atomic(&path, b"one\n", 0o640).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&path, b"two\n", 0o644).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two\n");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn staged_writes_go_in_place_together_or_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (marker, a, b) = (
            dir.path().join("run/marker"),
            dir.path().join("a.cfg"),
            dir.path().join("maps/b.map"),
        );
        fs::write(&a, b"old a").unwrap();
        fs::set_permissions(&a, fs::Permissions::from_mode(0o640)).unwrap();
        let write = |path, bytes| FileWrite {
            path,
            bytes,
            new_mode: 0o644,
        };
        write_atomic_stages(&[
            &[write(&marker, b"reloading\n")],
            &[write(&a, b"new a"), write(&b, b"new b")],
        ])
        .unwrap();
        assert_eq!(fs::read(&marker).unwrap(), b"reloading\n");
        assert_eq!(fs::read(&a).unwrap(), b"new a");
        assert_eq!(fs::read(&b).unwrap(), b"new b");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&a), mode(&b)), (0o640, 0o644), "a keeps its mode");

        // One file that cannot be written (its folder is a file): nothing moves, no temp stays.
        let blocked = dir.path().join("a.cfg/c.map");
        let err = write_atomic_stages(&[
            &[write(&marker, b"writing\n")],
            &[write(&a, b"newer a"), write(&blocked, b"c")],
        ]);
        assert!(err.is_err());
        assert_eq!(fs::read(&marker).unwrap(), b"reloading\n");
        assert_eq!(fs::read(&a).unwrap(), b"new a");
        for folder in [dir.path().to_path_buf(), dir.path().join("run")] {
            let temps: Vec<_> = fs::read_dir(&folder)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(TEMP_INFIX))
                .collect();
            assert!(temps.is_empty(), "{temps:?} left in {}", folder.display());
        }
    }

    #[test]
    fn sweep_removes_only_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        // PID 1 is alive: its temp file is a write in progress.
        fs::write(dir.path().join(format!(".b.map{TEMP_INFIX}1")), b"busy").unwrap();
        fs::write(
            dir.path().join(format!(".a.map{TEMP_INFIX}999999999")),
            b"half",
        )
        .unwrap();
        fs::write(dir.path().join("a.map"), b"whole").unwrap();
        assert_eq!(sweep_temp_files(dir.path()).unwrap(), 1);
        assert!(dir.path().join("a.map").exists());
        assert!(dir.path().join(format!(".b.map{TEMP_INFIX}1")).exists());
    }

    #[test]
    fn lock_is_exclusive_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apply.lock");
        let held = LockFile::acquire(&path, Duration::from_secs(1)).unwrap();
        let err = LockFile::acquire(&path, Duration::from_millis(30)).unwrap_err();
        assert!(matches!(err, LockError::Timeout { .. }), "{err}");
        drop(held);
        LockFile::acquire(&path, Duration::from_millis(30)).unwrap();
    }
}
