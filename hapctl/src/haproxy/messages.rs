//! HAProxy's own diagnostic lines, picked out of command output or its log file.
//!
//! They look like `[ALERT]    (6358) : config : parsing [gen.cfg:2] : unknown keyword ...`.
//! The PID and the column padding change on every run and say nothing to a user, so they are
//! dropped: `[ALERT] config : parsing [gen.cfg:2] : unknown keyword ...`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// At most this much of the log is read back, from the end: enough for every ALERT of a
/// failed start or reload, bounded even if the log grew a lot meanwhile.
const MAX_LOG_READ: u64 = 256 * 1024;

/// `[ALERT]` and `[WARNING]` lines of `text`, tidied, in order.
pub fn alerts_and_warnings(text: &str) -> Vec<String> {
    tagged(text, &["[ALERT]", "[WARNING]"])
}

/// `[ALERT]` lines of `text`, tidied, in order.
pub(crate) fn alerts(text: &str) -> Vec<String> {
    tagged(text, &["[ALERT]"])
}

/// The last `n` non-empty lines of `text`, tidied.
pub(crate) fn last_lines(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(tidy)
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

fn tagged(text: &str, tags: &[&str]) -> Vec<String> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| tags.iter().any(|t| l.starts_with(t)))
        .map(tidy)
        .collect()
}

/// `[TAG]   (PID) : rest` → `[TAG] rest`; any other line is kept as it is.
fn tidy(line: &str) -> String {
    let line = line.trim_end();
    let Some(close) = line.find(']').filter(|_| line.starts_with('[')) else {
        return line.to_string();
    };
    let (tag, rest) = line.split_at(close + 1);
    let rest = rest.trim_start();
    let rest = match rest.strip_prefix('(').and_then(|r| r.split_once(')')) {
        Some((pid, after)) if pid.chars().all(|c| c.is_ascii_digit()) => {
            let after = after.trim_start();
            after.strip_prefix(':').unwrap_or(after).trim_start()
        }
        _ => rest,
    };
    format!("{tag} {rest}")
}

/// A position in HAProxy's log file, to read what was written after it.
#[derive(Debug, Clone)]
pub(crate) struct LogMark {
    path: PathBuf,
    offset: u64,
}

impl LogMark {
    /// Marks the current end of the log (its start if it does not exist yet).
    pub(crate) fn at_end(path: &Path) -> LogMark {
        LogMark {
            path: path.to_path_buf(),
            offset: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        }
    }

    /// Everything appended since the mark; empty when the log cannot be read (the caller's
    /// error is about HAProxy, not about its log).
    pub(crate) fn appended(&self) -> String {
        let Ok(mut file) = File::open(&self.path) else {
            return String::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        // A log shorter than the mark was truncated or rotated: read it all.
        let from = if len < self.offset { 0 } else { self.offset };
        let from = from.max(len.saturating_sub(MAX_LOG_READ));
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(from)).is_err()
            || file.take(MAX_LOG_READ).read_to_end(&mut bytes).is_err()
        {
            return String::new();
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK_OUTPUT: &str = "[NOTICE]   (7095) : haproxy version is 2.6.12-1+deb12u4\n\
        [NOTICE]   (7095) : path to executable is /usr/sbin/haproxy\n\
        [ALERT]    (7095) : config : parsing [bad.cfg:10] : unknown keyword 'bogus_kw' in 'frontend' section\n\
        [WARNING]  (7095) : config : missing timeouts for frontend 'f'.\n\
        [ALERT]    (7095) : config : Fatal errors found in configuration.\n";

    #[test]
    fn keeps_alerts_and_warnings_in_order_without_pids() {
        assert_eq!(
            alerts_and_warnings(CHECK_OUTPUT),
            [
                "[ALERT] config : parsing [bad.cfg:10] : unknown keyword 'bogus_kw' in 'frontend' section",
                "[WARNING] config : missing timeouts for frontend 'f'.",
                "[ALERT] config : Fatal errors found in configuration.",
            ]
        );
        assert_eq!(alerts(CHECK_OUTPUT).len(), 2);
    }

    #[test]
    fn other_lines_are_kept_verbatim() {
        assert_eq!(
            tidy("Another reload is still in progress."),
            "Another reload is still in progress."
        );
        assert_eq!(tidy("[x] (abc) : y"), "[x] (abc) : y");
        assert_eq!(
            last_lines("a\n\n[NOTICE]   (1) : b\nc\n", 2),
            ["[NOTICE] b", "c"]
        );
    }

    #[test]
    fn log_mark_reads_only_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("haproxy.log");
        let missing = LogMark::at_end(&log);
        std::fs::write(&log, "old line\n").unwrap();
        let mark = LogMark::at_end(&log);
        std::fs::write(&log, "old line\nnew line\n").unwrap();
        assert_eq!(mark.appended(), "new line\n");
        assert_eq!(missing.appended(), "old line\nnew line\n");
        // Rotated: shorter than the mark, read from the start.
        std::fs::write(&log, "x\n").unwrap();
        assert_eq!(mark.appended(), "x\n");
    }
}
