//! The access log file with size-based rotation: `FILE` is written, `FILE.1` is the newest
//! rotated file, `FILE.KEEP` the oldest; a line never spans two files.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Mode of the log files: they hold client addresses.
const LOG_MODE: u32 = 0o640;

/// `FILE.n` (`n` ≥ 1), the n-th newest rotated file.
pub fn rotated_path(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

pub struct RotatingFile {
    path: PathBuf,
    max_size: u64,
    keep: u32,
    out: BufWriter<File>,
    size: u64,
    pub rotations: u64,
}

impl RotatingFile {
    /// Opens `path` for appending (creating it and its folder).
    pub fn open(path: &Path, max_size: u64, keep: u32) -> io::Result<RotatingFile> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            max_size,
            keep,
            out: BufWriter::with_capacity(256 * 1024, file),
            size,
            rotations: 0,
        })
    }

    /// Appends `line` and a newline, rotating first if the line would pass `max_size` (a line
    /// longer than `max_size` goes alone into a fresh file).
    pub fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let len = line.len() as u64 + 1;
        if self.size > 0 && self.size + len > self.max_size {
            self.rotate()?;
        }
        // Flushing before a line that would not fit keeps every write(2) to whole lines.
        if self.out.buffer().len() + line.len() + 1 > self.out.capacity() {
            self.out.flush()?;
        }
        self.out.write_all(line)?;
        self.out.write_all(b"\n")?;
        self.size += len;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        if self.keep == 0 {
            std::fs::remove_file(&self.path).or_else(ignore_missing)?;
        } else {
            for n in (1..self.keep).rev() {
                std::fs::rename(rotated_path(&self.path, n), rotated_path(&self.path, n + 1))
                    .or_else(ignore_missing)?;
            }
            std::fs::rename(&self.path, rotated_path(&self.path, 1))?;
        }
        self.out = BufWriter::with_capacity(256 * 1024, open_append(&self.path)?);
        self.size = 0;
        self.rotations += 1;
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(LOG_MODE)
        .open(path)
}

fn ignore_missing(e: io::Error) -> io::Result<()> {
    match e.kind() {
        io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_at_the_limit_and_keeps_n_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let mut f = RotatingFile::open(&path, 100, 2).unwrap();
        // 10 lines of 25 bytes (24 + newline): 4 per file.
        for i in 0..10 {
            f.write_line(format!("{i:024}").as_bytes()).unwrap();
        }
        f.flush().unwrap();
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        assert_eq!(f.rotations, 2);
        assert_eq!(read(path.clone()).lines().count(), 2);
        assert_eq!(read(rotated_path(&path, 1)).lines().count(), 4);
        assert!(read(rotated_path(&path, 2)).starts_with(&format!("{:024}", 0)));
        assert!(!rotated_path(&path, 3).exists());
        for _ in 0..8 {
            f.write_line(&[b'x'; 24]).unwrap();
        }
        f.flush().unwrap();
        assert!(
            !rotated_path(&path, 3).exists(),
            "only 2 rotated files are kept"
        );
        for p in [path.clone(), rotated_path(&path, 1), rotated_path(&path, 2)] {
            assert!(std::fs::metadata(&p).unwrap().len() <= 100, "{p:?}");
        }
    }

    #[test]
    fn keep_zero_truncates_and_reopen_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/access.log");
        let mut f = RotatingFile::open(&path, 10, 0).unwrap();
        f.write_line(b"0123456").unwrap();
        f.write_line(b"abcdefg").unwrap();
        f.flush().unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "abcdefg\n");
        assert!(!rotated_path(&path, 1).exists());
        let mut f = RotatingFile::open(&path, 100, 0).unwrap();
        f.write_line(b"more").unwrap();
        f.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "abcdefg\nmore\n");
    }
}
