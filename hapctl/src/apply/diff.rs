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
/// Unchanged lines shown around each change (similar's default, as `diff -u`).
const CONTEXT: usize = 3;

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
        let path = id.path(paths).display().to_string();
        let mut header = Some(format!(
            "--- {path} ({})\n+++ {path} ({})\n",
            labels.0, labels.1
        ));
        for hunk in file_hunks(old.get(*id), new.get(*id)) {
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

/// The unified hunks from `old` to `new` (absent: empty), masked.
fn file_hunks(old: Option<&[u8]>, new: Option<&[u8]>) -> Vec<String> {
    let before = String::from_utf8_lossy(old.unwrap_or_default());
    let after = String::from_utf8_lossy(new.unwrap_or_default());
    // A key block spans lines, so it is masked on the whole text; other secrets line by line.
    let (before, after, shift) = if before.contains("PRIVATE KEY") || after.contains("PRIVATE KEY")
    {
        (mask(&before).into_owned(), mask(&after).into_owned(), 0)
    } else {
        let (b, a, shift) = trim_common(&before, &after);
        (mask(b).into_owned(), mask(a).into_owned(), shift)
    };
    similar::TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(&before, &after)
        .unified_diff()
        .iter_hunks()
        .map(|hunk| shift_lines(&hunk.to_string(), shift))
        .collect()
}

/// `before` and `after` without the lines they share at their start and end, less `CONTEXT`
/// lines each side, and how many lines were left out at the start. A one-line change to a
/// 1.5 MB haproxy.cfg (10,000 domains) is then diffed in a few lines, not all 40,000.
fn trim_common<'a>(before: &'a str, after: &'a str) -> (&'a str, &'a str, usize) {
    let same = shared_len(
        before.bytes(),
        after.bytes(),
        before.as_bytes().chunks(4096),
        after.as_bytes().chunks(4096),
    );
    // Bytes, not chars: the texts may differ inside a character. Cuts are made after newlines.
    let line_after = |t: &[u8]| t.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
    let mut start = line_after(&before.as_bytes()[..same]);
    for _ in 0..CONTEXT {
        if start == 0 {
            break;
        }
        start = line_after(&before.as_bytes()[..start - 1]);
    }
    let (b, a) = (&before[start..], &after[start..]);
    let tail = shared_len(
        b.bytes().rev(),
        a.bytes().rev(),
        b.as_bytes().rchunks(4096),
        a.as_bytes().rchunks(4096),
    );
    let shared = &b.as_bytes()[b.len() - tail..];
    let next_line = |from: usize| {
        shared[from..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(tail, |i| from + i + 1)
    };
    // The shared end starts at a line start in both only after its first newline (or when
    // both texts have one just before it).
    let line_start = |t: &str| t.len() == tail || t.as_bytes()[t.len() - tail - 1] == b'\n';
    let mut keep = if line_start(b) && line_start(a) {
        0
    } else {
        next_line(0)
    };
    for _ in 0..CONTEXT {
        keep = next_line(keep);
    }
    let skipped_lines = before[..start].bytes().filter(|&c| c == b'\n').count();
    (
        &b[..b.len() - tail + keep],
        &a[..a.len() - tail + keep],
        skipped_lines,
    )
}

/// How many bytes two texts share from one end: chunk by chunk (a `memcmp` each), then byte
/// by byte inside the first chunk that differs. `bytes_*` walk from the same end as `chunks_*`.
fn shared_len<'t>(
    bytes_a: impl Iterator<Item = u8>,
    bytes_b: impl Iterator<Item = u8>,
    chunks_a: impl Iterator<Item = &'t [u8]>,
    chunks_b: impl Iterator<Item = &'t [u8]>,
) -> usize {
    let whole: usize = chunks_a
        .zip(chunks_b)
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x.len())
        .sum();
    whole
        + bytes_a
            .skip(whole)
            .zip(bytes_b.skip(whole))
            .take_while(|(x, y)| x == y)
            .count()
}

/// A hunk whose `@@ -A,B +C,D @@` line numbers are moved down by `by` lines.
fn shift_lines(hunk: &str, by: usize) -> String {
    let Some((head, rest)) = hunk.split_once('\n') else {
        return hunk.to_string();
    };
    if by == 0 {
        return hunk.to_string();
    }
    let shifted: Vec<String> = head
        .split(' ')
        .map(|word| match word.strip_prefix(['-', '+']) {
            Some(range) if word.len() > 1 => {
                let (first, count) = range
                    .split_once(',')
                    .map_or((range, None), |(f, c)| (f, Some(c)));
                match first.parse::<usize>() {
                    Ok(n) => {
                        let sign = &word[..1];
                        let count = count.map(|c| format!(",{c}")).unwrap_or_default();
                        format!("{sign}{}{count}", n + by)
                    }
                    Err(_) => word.to_string(),
                }
            }
            _ => word.to_string(),
        })
        .collect();
    format!("{}\n{rest}", shifted.join(" "))
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
        Snapshot::from_set(s)
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

    /// What similar makes of the whole texts, untrimmed.
    fn plain(before: &str, after: &str) -> Vec<String> {
        similar::TextDiff::configure()
            .diff_lines(before, after)
            .unified_diff()
            .iter_hunks()
            .map(|h| h.to_string())
            .collect()
    }

    #[test]
    fn trimming_the_shared_lines_changes_no_hunk() {
        // Past 4,096 bytes, so whole chunks are compared before single bytes.
        let base: Vec<String> = (0..4000).map(|n| format!("line {n}\n")).collect();
        let text = |lines: &[String]| lines.concat();
        type Edit = Box<dyn Fn(&mut Vec<String>)>;
        let edits: Vec<(&str, Edit)> = vec![
            ("one line", Box::new(|l| l[2000] = "changed\n".into())),
            ("first line", Box::new(|l| l[0] = "changed\n".into())),
            ("last line", Box::new(|l| l[3999] = "changed\n".into())),
            ("insert", Box::new(|l| l.insert(1500, "new\n".into()))),
            ("delete", Box::new(|l| drop(l.remove(2500)))),
            ("append", Box::new(|l| l.push("extra\n".into()))),
            (
                "two places",
                Box::new(|l| {
                    l[10] = "a\n".into();
                    l[3800] = "b\n".into();
                }),
            ),
            (
                "a line's end",
                Box::new(|l| l[1000] = "line 1000 and more\n".into()),
            ),
            (
                "a line's start",
                Box::new(|l| l[1000] = "xline 1000\n".into()),
            ),
            (
                "no final newline",
                Box::new(|l| l[3999] = "line 3999".into()),
            ),
            ("emptied", Box::new(|l| l.clear())),
        ];
        for (what, edit) in edits {
            let mut changed = base.clone();
            edit(&mut changed);
            for (before, after) in [(text(&base), text(&changed)), (text(&changed), text(&base))] {
                let fast = file_hunks(Some(before.as_bytes()), Some(after.as_bytes()));
                assert_eq!(fast, plain(&before, &after), "{what}");
                assert!(!fast.is_empty(), "{what}");
            }
        }
        // Texts that differ inside a character (é and è share their first byte).
        let (before, after) = (
            format!("{}caf\u{e9}\n{}", text(&base), text(&base)),
            format!("{}caf\u{e8}x\n{}", text(&base), text(&base)),
        );
        let fast = file_hunks(Some(before.as_bytes()), Some(after.as_bytes()));
        assert_eq!(fast, plain(&before, &after));
        assert!(file_hunks(Some(b"same\n"), Some(b"same\n")).is_empty());
        assert_eq!(file_hunks(None, Some(b"new\n")), plain("", "new\n"));
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
