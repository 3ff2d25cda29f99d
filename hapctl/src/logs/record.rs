//! Reading the access log back: one JSON object per line (keys of the log-format in
//! `haproxy.cfg.j2`), filtered by domain and status.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{rotated_path, LogError};
use crate::model::bounded;

/// One request. A value HAProxy did not have is `"-"`; a key an overridden template left out
/// is empty or 0.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct AccessRecord {
    /// Accept time, Unix seconds with milliseconds.
    pub ts: f64,
    /// The request id the backend got as `X-Request-Id`.
    pub id: String,
    /// The real client IP (forwarding headers of trusted proxies applied).
    pub client: String,
    /// The TCP peer.
    pub peer: String,
    pub host: String,
    pub method: String,
    pub path: String,
    pub status: i64,
    pub bytes: i64,
    pub tq: i64,
    pub tw: i64,
    pub tc: i64,
    pub tr: i64,
    pub ta: i64,
    /// HAProxy's termination state (`----`, `CD--`, `LR--`, …).
    pub term: String,
    pub backend: String,
    /// The HTTP version the client spoke: `HTTP/1.1`, `HTTP/2.0`, `HTTP/3.0`.
    pub proto: String,
    pub tls: String,
    pub sni: String,
    /// The hapctl rule that answered instead of a backend: `blocked`, `unknown-host`,
    /// `suspended`, or `-`.
    pub denied_by: String,
}

impl AccessRecord {
    pub fn parse(line: &str) -> Option<AccessRecord> {
        serde_json::from_str(line).ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    Exact(u16),
    /// `4xx`: 400-499.
    Class(u16),
}

impl std::str::FromStr for StatusFilter {
    type Err = String;
    fn from_str(s: &str) -> Result<StatusFilter, String> {
        let bad = || {
            format!(
                "{:?} is not a status like 404 or a class like 4xx",
                bounded(s)
            )
        };
        let b = s.as_bytes();
        match b {
            [c @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => {
                Ok(StatusFilter::Class(u16::from(c - b'0')))
            }
            [b'1'..=b'5', b'0'..=b'9', b'0'..=b'9'] => {
                s.parse().map(StatusFilter::Exact).map_err(|_| bad())
            }
            _ => Err(bad()),
        }
    }
}

/// `example.com` (exactly that host) or `*.example.com` (any name below it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainFilter {
    Exact(String),
    Below(String),
}

impl std::str::FromStr for DomainFilter {
    type Err = String;
    fn from_str(s: &str) -> Result<DomainFilter, String> {
        let lower = s.trim().to_ascii_lowercase();
        let ok = |d: &str| {
            !d.is_empty()
                && d.len() <= 253
                && d.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        };
        match lower.strip_prefix("*.") {
            Some(base) if ok(base) => Ok(DomainFilter::Below(format!(".{base}"))),
            None if ok(&lower) => Ok(DomainFilter::Exact(lower)),
            _ => Err(format!("{:?} is not a domain name or *.domain", bounded(s))),
        }
    }
}

/// A request id as HAProxy writes it (`uuid()`: 36 hex digits and dashes): where a page of
/// the log starts (the records written before it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestId(String);

impl std::str::FromStr for RequestId {
    type Err = String;
    fn from_str(s: &str) -> Result<RequestId, String> {
        let dashes = [8, 13, 18, 23];
        let ok = s.len() == 36
            && s.char_indices().all(|(i, c)| {
                if dashes.contains(&i) {
                    c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            });
        if ok {
            Ok(RequestId(s.to_ascii_lowercase()))
        } else {
            Err(format!(
                "{:?} is not a request id (a UUID: the `id` of a record, or the `next` of a page)",
                bounded(s)
            ))
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub domain: Option<DomainFilter>,
    pub status: Option<StatusFilter>,
    /// Only this real client (forwarding headers of trusted proxies applied).
    pub client: Option<IpAddr>,
}

impl Filter {
    pub fn matches(&self, r: &AccessRecord) -> bool {
        let domain = match &self.domain {
            None => true,
            Some(DomainFilter::Exact(d)) => r.host == *d,
            Some(DomainFilter::Below(suffix)) => r.host.ends_with(suffix.as_str()),
        };
        let status = match self.status {
            None => true,
            Some(StatusFilter::Exact(s)) => r.status == i64::from(s),
            Some(StatusFilter::Class(c)) => r.status / 100 == i64::from(c),
        };
        let client = self
            .client
            .is_none_or(|ip| r.client.parse::<IpAddr>() == Ok(ip));
        domain && status && client
    }
}

/// One page of the log, newest first; `next` is the `before` of the page after it (older),
/// `None` on the last one. `partial`: the search stopped at its budget before the page was
/// full; `next` goes on searching from there.
#[derive(Debug, Clone, Default)]
pub struct LogPage {
    pub records: Vec<(String, AccessRecord)>,
    pub next: Option<RequestId>,
    pub partial: bool,
}

/// The last `lines` matching records (raw line, parsed), oldest first: the current file, then
/// as many rotated files as it takes (`FILE.1`, … `FILE.keep`). Lines that are not records are
/// skipped.
pub fn read_tail(
    file: &Path,
    keep: u32,
    filter: &Filter,
    lines: usize,
) -> Result<Vec<(String, AccessRecord)>, LogError> {
    let mut page = read_page(file, keep, filter, lines, None, u64::MAX)?;
    page.records.reverse();
    Ok(page.records)
}

/// At most `limit` matching records, newest first (in the order they were written: a long
/// request is written when it ends), from the record `before` on (exclusive), else from the
/// newest. A `before` no longer in the files (rotated away) gives an empty page: every record
/// older than it went first. At most `budget` bytes of lines past `before` are examined: a
/// filter that matches little stops there (`partial`), and `next` goes on from the last line
/// examined. The files are read backwards a block at a time, so a page of recent records costs
/// a few blocks, not the 100 MiB of a full file.
pub fn read_page(
    file: &Path,
    keep: u32,
    filter: &Filter,
    limit: usize,
    before: Option<&RequestId>,
    budget: u64,
) -> Result<LogPage, LogError> {
    let mut page = LogPage::default();
    let mut skipping = before;
    let mut examined = 0u64;
    for n in 0..=keep {
        let path = if n == 0 {
            file.to_path_buf()
        } else {
            rotated_path(file, n)
        };
        let read_err = |source| LogError::Read {
            path: path.clone(),
            source,
        };
        let Some(mut lines) = Backwards::open(&path).map_err(read_err)? else {
            continue;
        };
        while let Some(line) = lines.next_line().map_err(read_err)? {
            if let Some(id) = skipping {
                // Cheap until the cursor's line: a substring, not a JSON parse.
                if line.contains(id.0.as_str())
                    && AccessRecord::parse(&line).is_some_and(|r| r.id.eq_ignore_ascii_case(&id.0))
                {
                    skipping = None;
                }
                continue;
            }
            let Some(record) = AccessRecord::parse(&line) else {
                continue;
            };
            examined += line.len() as u64 + 1;
            if !filter.matches(&record) {
                if examined >= budget {
                    page.partial = true;
                    page.next = record.id.parse().ok();
                    return Ok(page);
                }
                continue;
            }
            if page.records.len() == limit {
                page.next = page.records.last().and_then(|(_, r)| r.id.parse().ok());
                return Ok(page);
            }
            page.records.push((line, record));
        }
    }
    Ok(page)
}

/// The size of one backward read.
const BLOCK: u64 = 64 * 1024;

/// The lines of a file from its end back to its start, a block at a time.
struct Backwards {
    file: File,
    /// Where the part not read yet ends.
    pos: u64,
    /// The beginning of the earliest line read so far: it may go on in the block before.
    carry: Vec<u8>,
    /// The whole lines of the last block read, in file order, handed out from the end.
    ready: Vec<String>,
}

impl Backwards {
    /// `None` when the file does not exist (a rotated file not made yet).
    fn open(path: &Path) -> io::Result<Option<Backwards>> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let pos = file.metadata()?.len();
        Ok(Some(Backwards {
            file,
            pos,
            carry: Vec::new(),
            ready: Vec::new(),
        }))
    }

    fn next_line(&mut self) -> io::Result<Option<String>> {
        loop {
            if let Some(line) = self.ready.pop() {
                return Ok(Some(line));
            }
            if self.pos == 0 {
                if self.carry.is_empty() {
                    return Ok(None);
                }
                let first = std::mem::take(&mut self.carry);
                return Ok(Some(String::from_utf8_lossy(&first).into_owned()));
            }
            let start = self.pos.saturating_sub(BLOCK);
            let mut block = vec![0; (self.pos - start) as usize];
            self.file.seek(SeekFrom::Start(start))?;
            self.file.read_exact(&mut block)?;
            self.pos = start;
            block.extend_from_slice(&self.carry);
            match block.iter().position(|b| *b == b'\n') {
                Some(first) => {
                    self.ready = block[first + 1..]
                        .split(|b| *b == b'\n')
                        .map(|l| String::from_utf8_lossy(l).into_owned())
                        .collect();
                    block.truncate(first);
                    self.carry = block;
                }
                None => self.carry = block,
            }
        }
    }
}

/// Reads what is appended to the access log, across rotations: when the path names a new file,
/// the old one is read to its end first.
pub struct Follower {
    path: PathBuf,
    file: Option<File>,
    inode: u64,
    partial: Vec<u8>,
}

impl Follower {
    /// Starts at the current end of `path` (which may not exist yet).
    pub fn at_end(path: &Path) -> Follower {
        let mut f = Follower {
            path: path.to_path_buf(),
            file: None,
            inode: 0,
            partial: Vec::new(),
        };
        if let Ok(mut file) = File::open(path) {
            if file.seek(SeekFrom::End(0)).is_ok() {
                f.inode = file.metadata().map(|m| m.ino()).unwrap_or(0);
                f.file = Some(file);
            }
        }
        f
    }

    /// Complete lines appended since the last call.
    pub fn poll(&mut self) -> Result<Vec<String>, LogError> {
        let mut out = Vec::new();
        self.drain(&mut out)?;
        let current = std::fs::metadata(&self.path).map(|m| m.ino()).ok();
        if current.is_some() && current != Some(self.inode) {
            // Rotated (or created): the old file is complete, the new one starts at 0.
            self.partial.clear();
            self.file = File::open(&self.path).ok();
            self.inode = current.unwrap_or(0);
            self.drain(&mut out)?;
        }
        Ok(out)
    }

    fn drain(&mut self, out: &mut Vec<String>) -> Result<(), LogError> {
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|source| LogError::Read {
                path: self.path.clone(),
                source,
            })?;
        self.partial.extend_from_slice(&bytes);
        if let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') {
            let complete: Vec<u8> = self.partial.drain(..=end).collect();
            out.extend(
                String::from_utf8_lossy(&complete)
                    .lines()
                    .map(str::to_string),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(host: &str, status: u16) -> String {
        format!("{{\"host\":\"{host}\",\"status\":{status},\"id\":\"x\",\"tls\":\"-\"}}")
    }

    #[test]
    fn filters() {
        let f = |d: Option<&str>, s: Option<&str>| Filter {
            domain: d.map(|d| d.parse().unwrap()),
            status: s.map(|s| s.parse().unwrap()),
            client: None,
        };
        let r = AccessRecord::parse(&line("shop.example.com", 404)).unwrap();
        assert!(f(Some("shop.example.com"), Some("4xx")).matches(&r));
        assert!(f(Some("*.example.com"), Some("404")).matches(&r));
        assert!(f(Some("SHOP.example.com"), None).matches(&r));
        assert!(!f(Some("*.shop.example.com"), None).matches(&r));
        assert!(!f(Some("example.com"), None).matches(&r));
        assert!(!f(None, Some("5xx")).matches(&r));
        assert!(!f(None, Some("403")).matches(&r));
        for bad in ["4", "6xx", "4xxx", "abc", "099", "40x"] {
            assert!(bad.parse::<StatusFilter>().is_err(), "{bad}");
        }
        for bad in ["", "*.", "a b", "x\ny"] {
            assert!(bad.parse::<DomainFilter>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pages_go_back_by_request_id_across_rotated_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let id = |n: u32| format!("0000000{n}-0000-4000-8000-00000000000{n}");
        let rec = |n: u32, client: &str| {
            format!(
                "{{\"id\":\"{}\",\"host\":\"h{n}\",\"client\":\"{client}\",\"status\":200}}\n",
                id(n)
            )
        };
        std::fs::write(
            rotated_path(&path, 1),
            rec(1, "127.0.0.2") + &rec(2, "127.0.0.2"),
        )
        .unwrap();
        std::fs::write(
            &path,
            rec(3, "127.0.0.9") + "not json\n" + &rec(4, "::1") + &rec(5, "127.0.0.2"),
        )
        .unwrap();
        let all = Filter::default();
        let page = |before: Option<&RequestId>, filter: &Filter| {
            let p = read_page(&path, 1, filter, 2, before, u64::MAX).unwrap();
            let hosts: Vec<String> = p.records.iter().map(|(_, r)| r.host.clone()).collect();
            (hosts, p.next)
        };
        let (hosts, next) = page(None, &all);
        assert_eq!(
            (hosts, next.clone()),
            (vec!["h5".into(), "h4".into()], Some(id(4).parse().unwrap()))
        );
        let (hosts, next) = page(next.as_ref(), &all);
        assert_eq!(
            (hosts, next.clone()),
            (vec!["h3".into(), "h2".into()], Some(id(2).parse().unwrap()))
        );
        let (hosts, next) = page(next.as_ref(), &all);
        assert_eq!((hosts, next), (vec!["h1".to_string()], None));
        // A record no longer in the files: everything older went before it.
        let gone: RequestId = "0000000f-0000-4000-8000-00000000000f".parse().unwrap();
        assert_eq!(page(Some(&gone), &all), (vec![], None));
        let client = Filter {
            client: Some("127.0.0.9".parse().unwrap()),
            ..Filter::default()
        };
        assert_eq!(page(None, &client), (vec!["h3".to_string()], None));
        let v6 = Filter {
            client: Some("0:0:0:0:0:0:0:1".parse().unwrap()),
            ..Filter::default()
        };
        assert_eq!(page(None, &v6).0, ["h4"]);
        // The CLI's tail is the same read, oldest first.
        let tail = read_tail(&path, 1, &all, 3).unwrap();
        let hosts: Vec<&str> = tail.iter().map(|(_, r)| r.host.as_str()).collect();
        assert_eq!(hosts, ["h3", "h4", "h5"]);
        for bad in [
            "",
            "x",
            "../../etc/passwd",
            "0000000f-0000-4000-8000-00000000000",
            "0000000f_0000-4000-8000-00000000000f",
        ] {
            assert!(bad.parse::<RequestId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lines_read_backwards_cross_blocks_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        // Lines across block boundaries, one longer than a block, no newline at the end.
        let lines: Vec<String> = (0..300)
            .map(|i| {
                let n = if i == 150 {
                    BLOCK as usize + 10
                } else {
                    100 + i * 7 % 900
                };
                format!("{i}:{}", "x".repeat(n))
            })
            .collect();
        std::fs::write(&path, lines.join("\n")).unwrap();
        let mut back = Backwards::open(&path).unwrap().unwrap();
        let mut seen = Vec::new();
        while let Some(l) = back.next_line().unwrap() {
            seen.push(l);
        }
        seen.reverse();
        assert_eq!(seen, lines);
        assert!(Backwards::open(&dir.path().join("none")).unwrap().is_none());
    }

    #[test]
    fn a_filter_that_matches_little_stops_at_its_budget_and_goes_on_from_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let id = |n: u32| format!("{n:08x}-0000-4000-8000-000000000000");
        let text: String = (0..100)
            .map(|n| {
                let status = if n == 0 { 404 } else { 200 };
                format!(
                    "{{\"id\":\"{}\",\"host\":\"h{n}\",\"status\":{status}}}\n",
                    id(n)
                )
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        let filter = Filter {
            status: Some(StatusFilter::Exact(404)),
            ..Filter::default()
        };
        // A budget of about ten lines: ten pages of nothing, each going on from the last.
        let budget = 10 * 70;
        let mut before: Option<RequestId> = None;
        let mut pages = 0;
        let found = loop {
            let page = read_page(&path, 0, &filter, 5, before.as_ref(), budget).unwrap();
            pages += 1;
            if !page.records.is_empty() {
                break page;
            }
            assert!(page.partial && page.next.is_some(), "{page:?}");
            before = page.next;
        };
        assert_eq!(found.records[0].1.host, "h0");
        assert!((9..=11).contains(&pages), "{pages} pages");
        // Without a budget the one record comes at once.
        let all = read_page(&path, 0, &filter, 5, None, u64::MAX).unwrap();
        assert_eq!((all.records.len(), all.partial, all.next), (1, false, None));
    }

    #[test]
    fn tail_reaches_into_rotated_files_and_follow_survives_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        std::fs::write(
            rotated_path(&path, 1),
            format!("{}\n{}\n", line("a", 200), line("b", 404)),
        )
        .unwrap();
        std::fs::write(
            &path,
            format!("{}\nnot json\n{}\n", line("c", 404), line("d", 200)),
        )
        .unwrap();
        let all = read_tail(&path, 1, &Filter::default(), 10).unwrap();
        let hosts: Vec<&str> = all.iter().map(|(_, r)| r.host.as_str()).collect();
        assert_eq!(hosts, ["a", "b", "c", "d"]);
        let filter = Filter {
            status: Some(StatusFilter::Exact(404)),
            ..Filter::default()
        };
        let last = read_tail(&path, 1, &filter, 1).unwrap();
        assert_eq!(last[0].1.host, "c");

        let mut follow = Follower::at_end(&path);
        assert!(follow.poll().unwrap().is_empty());
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"host\":\"e\"}\n{\"host\":").unwrap();
        assert_eq!(follow.poll().unwrap(), ["{\"host\":\"e\"}"]);
        f.write_all(b"\"f\"}\n").unwrap();
        std::fs::rename(&path, rotated_path(&path, 1)).unwrap();
        std::fs::write(&path, "{\"host\":\"g\"}\n").unwrap();
        assert_eq!(
            follow.poll().unwrap(),
            ["{\"host\":\"f\"}", "{\"host\":\"g\"}"]
        );
    }
}
