//! `hapctl audit`: who changed what, from where, with what result (docs/access.md); and the
//! records of the command line's own changes, made as the local user.

use std::path::Path;

use clap::Args;

use hapctl::access::Access;
use hapctl::clock::unix_millis;
use hapctl::contract::AuditQuery;
use hapctl::store::{AuditAttempt, AuditRecord, AuditResult};

use super::{open, output, Failure};

#[derive(Args)]
pub struct AuditArgs {
    /// Only records of the last DUR (e.g. 1h, 7d).
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
    since: Option<std::time::Duration>,
    /// Only this token's records (`uid:N`: the command line's, as that user).
    #[arg(long, value_name = "NAME")]
    who: Option<String>,
    /// Only records naming this object (a part of its name: a domain, an IP, a token…).
    #[arg(long, value_name = "NAME")]
    object: Option<String>,
    /// Records at most, newest first.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    limit: u32,
    #[arg(long)]
    json: bool,
}

pub fn run(dir: &Path, args: AuditArgs) -> Result<u8, Failure> {
    let query = AuditQuery {
        since: args.since,
        who: args.who,
        object: args.object,
        limit: Some(args.limit as usize),
    };
    let records = open(dir)?
        .access(false)?
        .audit(&query.filter(unix_millis()))?;
    if args.json {
        output::print_json(&records);
    } else {
        records.iter().for_each(|r| println!("{}", line(r)));
    }
    Ok(0)
}

/// One record on one line: time, who, via, from where, what, objects, result.
fn line(r: &AuditRecord) -> String {
    let a = &r.attempt;
    let at = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(a.at_ms.max(0) as u64),
    );
    let from = match &a.forwarded {
        Some(f) => format!("{} (for {f})", a.peer),
        None => a.peer.clone(),
    };
    let result = match &r.result {
        Some(res) => match &res.outcome {
            Some(o) => format!("{} {o}", res.status),
            None => res.status.to_string(),
        },
        None => "no result (stopped during the change)".into(),
    };
    format!(
        "{at}  {} via {}  from {from}  {}  [{}]  {}  → {result}",
        a.who,
        a.via,
        a.action,
        a.objects.join(", "),
        a.summary
    )
}

/// The record of a change made by this command line, as the local user: written before the
/// change (none written, no change) and finished with its exit code.
pub struct LocalChange {
    access: Access,
    id: i64,
}

impl LocalChange {
    /// Records `argv` (the command's words) if it is a change; `None` for a read.
    pub fn begin(dir: &Path, argv: &[String]) -> Result<Option<LocalChange>, Failure> {
        let Some(change) = change_of(argv) else {
            return Ok(None);
        };
        let access = open(dir)?.access(false)?;
        let attempt = AuditAttempt {
            at_ms: unix_millis(),
            // SAFETY: getuid cannot fail and touches no memory.
            who: format!("uid:{}", unsafe { libc::getuid() }),
            via: "cli".into(),
            peer: "local".into(),
            forwarded: None,
            action: change.action,
            objects: change.objects,
            summary: change.summary,
        };
        let id = access.begin(&attempt)?;
        Ok(Some(LocalChange { access, id }))
    }

    pub fn finish(self, code: u8) {
        let result = AuditResult {
            at_ms: unix_millis(),
            status: u16::from(code),
            outcome: None,
        };
        if let Err(e) = self.access.finish(self.id, &result) {
            eprintln!("warning: the audit record of this change has no result: {e}");
        }
    }
}

/// Commands that change nothing, by their first word or first two.
const READS: &[&str] = &[
    "init",
    "serve",
    "status",
    "logs",
    "generations",
    "prove",
    "audit",
    "boot",
    "help",
    "haproxy status",
    "domain ls",
    "block ls",
    "cert ls",
    "cert show",
    "proxy ls",
    "limits show",
    "limits ls",
    "security top",
    "waf serve",
    "waf status",
    "waf rules",
    "waf test",
    "fleet status",
    "token ls",
];

/// Options of the command line taking a value (their value is no word of the command).
const VALUED: &[&str] = &["--state-dir"];

/// A command line that changes something, as its record says it.
#[derive(Debug, PartialEq, Eq)]
struct Change {
    /// `hapctl domain add`.
    action: String,
    /// The words after the command's: names, addresses (and the values of options).
    objects: Vec<String>,
    /// Every argument after the command's words, options included (the command line takes
    /// no secret: keys and certificates are files).
    summary: String,
}

/// The change `argv` makes; `None` for a read. Pure.
fn change_of(argv: &[String]) -> Option<Change> {
    let mut words = Vec::new();
    let mut rest = Vec::new();
    let mut args = argv.iter().skip(1);
    while let Some(a) = args.next() {
        if VALUED.contains(&a.as_str()) {
            args.next();
        } else if a.starts_with("--state-dir=") || (a.starts_with('-') && words.is_empty()) {
            // The global options before the command (`--log-json`) say nothing of the change.
            continue;
        } else if !a.starts_with('-') && words.len() < 2 && rest.is_empty() {
            words.push(a.clone());
        } else {
            rest.push(a.clone());
        }
    }
    let first = words.first()?;
    let two = words.get(1).map(|w| format!("{first} {w}"));
    let read =
        READS.contains(&first.as_str()) || two.as_deref().is_some_and(|t| READS.contains(&t));
    if read || argv.iter().any(|a| a == "--help" || a == "-h") {
        return None;
    }
    // Groups have two command words; a command outside them has one.
    if !(words.len() > 1 && GROUPS.contains(&first.as_str())) {
        rest.splice(0..0, words.drain(1..));
    }
    let objects = rest
        .iter()
        .filter(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    Some(Change {
        action: format!("hapctl {}", words.join(" ")),
        objects,
        summary: rest.join(" "),
    })
}

const GROUPS: &[&str] = &[
    "haproxy", "domain", "block", "cert", "proxy", "limits", "security", "waf", "fleet", "token",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn changes_are_told_from_reads_by_their_words() {
        let c = change_of(&argv(
            "hapctl --state-dir /s domain add shop.example --server a=1.2.3.4:80",
        ))
        .unwrap();
        assert_eq!(c.action, "hapctl domain add");
        assert_eq!(c.objects, ["shop.example", "a=1.2.3.4:80"]);
        assert_eq!(c.summary, "shop.example --server a=1.2.3.4:80");
        let c = change_of(&argv(
            "hapctl --log-json --state-dir=/s rollback shop --json",
        ))
        .unwrap();
        assert_eq!(c.action, "hapctl rollback");
        assert_eq!(c.summary, "shop --json");
        assert_eq!(
            change_of(&argv("hapctl apply")).unwrap().action,
            "hapctl apply"
        );
        for read in [
            "hapctl --state-dir /s domain ls --json",
            "hapctl status",
            "hapctl token ls",
            "hapctl audit --since 1h",
            "hapctl block add --help",
            "hapctl",
        ] {
            assert_eq!(change_of(&argv(read)), None, "{read}");
        }
    }
}
