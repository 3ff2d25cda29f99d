//! The unified diff between two file sets: what `hapctl apply --dry-run` shows and what every
//! apply keeps in its history. Rendered files hold no key (certificates live outside them), but
//! templates can be overridden, so HAProxy's password keywords and PEM private keys are masked
//! before the diff is made.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use super::Snapshot;
use crate::render::FileId;
use crate::settings::Paths;

/// Bound on the diff an apply keeps (a first apply at 10,000 domains adds megabytes of lines).
pub const HISTORY_LIMIT: usize = 256 * 1024;
/// Past this the diff algorithm settles for a correct but longer diff (huge rewritten files).
const DIFF_TIMEOUT: Duration = Duration::from_millis(300);
/// What replaces a masked value.
const MASK: &str = "<masked>";

/// The diff of the files `ids` from `old` to `new`, each file headed `PATH (label)`, at most
/// `limit` bytes (whole hunks; a last line says what was left out).
pub fn unified(
    old: &Snapshot,
    new: &Snapshot,
    ids: &[FileId],
    paths: &Paths,
    labels: (&str, &str),
    limit: usize,
) -> String {
    let mut out = String::new();
    let mut left_out = 0usize;
    for id in ids {
        let (before, after) = (text(old.get(*id)), text(new.get(*id)));
        let path = id.path(paths).display().to_string();
        let diff = similar::TextDiff::configure()
            .timeout(DIFF_TIMEOUT)
            .diff_lines(&before, &after);
        let mut header = Some(format!(
            "--- {path} ({})\n+++ {path} ({})\n",
            labels.0, labels.1
        ));
        for hunk in diff.unified_diff().iter_hunks() {
            let hunk = hunk.to_string();
            let head = header.as_ref().map_or(0, String::len);
            if left_out > 0 || out.len() + head + hunk.len() > limit {
                left_out += 1;
                continue;
            }
            out += &header.take().unwrap_or_default();
            out += &hunk;
        }
    }
    if left_out > 0 {
        let _ = writeln!(
            out,
            "… {left_out} more hunk(s) not kept: the diff is cut at {} KiB",
            limit / 1024
        );
    }
    out
}

/// A file's text (absent: empty), masked.
fn text(bytes: Option<&[u8]>) -> Cow<'_, str> {
    match String::from_utf8_lossy(bytes.unwrap_or_default()) {
        Cow::Borrowed(s) => mask(s),
        Cow::Owned(s) => Cow::Owned(mask(&s).into_owned()),
    }
}

/// `text` with the values of HAProxy's secret-bearing keywords (`password`,
/// `insecure-password`, `stats auth`) and every PEM private key block masked.
fn mask(text: &str) -> Cow<'_, str> {
    if !["password", "auth", "PRIVATE KEY"]
        .iter()
        .any(|k| text.contains(k))
    {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let mut in_key = false;
    for line in text.split_inclusive('\n') {
        let end = &line[line.trim_end().len()..];
        if line.contains("-----BEGIN") && line.contains("PRIVATE KEY") {
            in_key = true;
            out.push_str(MASK);
            out.push_str(end);
            continue;
        }
        if in_key {
            in_key = !line.contains("-----END");
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let secret_after = words.windows(2).position(|w| {
            matches!(w[0], "password" | "insecure-password") || w == ["stats", "auth"]
        });
        match secret_after {
            Some(i) => {
                let keep = if words[i] == "stats" { i + 2 } else { i + 1 };
                let indent = &line[..line.len() - line.trim_start().len()];
                out.push_str(indent);
                out.push_str(&words[..keep].join(" "));
                out.push(' ');
                out.push_str(MASK);
                out.push_str(end);
            }
            None => out.push_str(line),
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::FileSet;

    fn paths() -> Paths {
        let dir = std::path::Path::new("/edge");
        crate::settings::Settings::parse(dir, dir, crate::settings::DEFAULT_SETTINGS_TOML)
            .unwrap()
            .paths
    }

    fn set(config: &str) -> Snapshot {
        let mut s = FileSet::default();
        let path = FileId::Config.path(&paths());
        s.insert(FileId::Config, path, config.as_bytes().to_vec());
        Snapshot::from_set(&s)
    }

    #[test]
    fn a_diff_names_the_file_and_shows_the_changed_lines() {
        let (old, new) = (set("a\nb\nc\n"), set("a\nB\nc\n"));
        let d = unified(
            &old,
            &new,
            &[FileId::Config],
            &paths(),
            ("live", "rendered"),
            1 << 20,
        );
        let path = FileId::Config.path(&paths()).display().to_string();
        let head = format!("--- {path} (live)\n+++ {path} (rendered)\n@@");
        assert!(d.starts_with(&head), "{d}");
        assert!(d.contains("\n-b\n+B\n"), "{d}");
        assert_eq!(unified(&old, &old, &[], &paths(), ("a", "b"), 1 << 20), "");
    }

    #[test]
    fn a_diff_past_its_bound_keeps_whole_hunks_and_says_so() {
        let lines = |c: &str| {
            (0..2000)
                .map(|n| {
                    if n % 10 == 0 {
                        format!("{c}{n}\n")
                    } else {
                        format!("{n}\n")
                    }
                })
                .collect::<String>()
        };
        let (old, new) = (set(&lines("x")), set(&lines("y")));
        let full = unified(
            &old,
            &new,
            &[FileId::Config],
            &paths(),
            ("a", "b"),
            usize::MAX,
        );
        let cut = unified(&old, &new, &[FileId::Config], &paths(), ("a", "b"), 2048);
        assert!(
            full.len() > 4096 && cut.len() < 2200,
            "{} {}",
            full.len(),
            cut.len()
        );
        assert!(
            cut.ends_with("more hunk(s) not kept: the diff is cut at 2 KiB\n"),
            "{cut}"
        );
        assert!(full.starts_with(cut.lines().next().unwrap()));
    }

    #[test]
    fn secrets_an_override_template_may_hold_are_masked() {
        let old = set("userlist ops\n    user admin password $6$hash\n    user b insecure-password hunter2\nlisten stats\n    stats auth admin:s3cret\n");
        let new = set(
            "-----BEGIN PRIVATE KEY-----\nMIIEvQ\n-----END PRIVATE KEY-----\nplain auth line\n",
        );
        let d = unified(&old, &new, &[FileId::Config], &paths(), ("a", "b"), 1 << 20);
        for secret in ["$6$hash", "hunter2", "s3cret", "MIIEvQ"] {
            assert!(!d.contains(secret), "{secret} in {d}");
        }
        assert!(d.contains("-    user admin password <masked>\n"), "{d}");
        assert!(d.contains("-    stats auth <masked>\n"), "{d}");
        assert!(d.contains("+<masked>\n+plain auth line\n"), "{d}");
    }
}
