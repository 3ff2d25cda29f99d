//! Hostile input through the CLI, against one running edge: every case of
//! `tests/corpus/hostile.tsv` (format and escapes described in its header) and a few huge
//! ones generated here must be refused with the documented exit code and an error that names
//! the problem, and, after all of them, nothing may have changed: live files, database,
//! history, settings, HAProxy's master, routing.

mod common;

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{Backend, Edge};

const CORPUS: &str = include_str!("corpus/hostile.tsv");
const CONTROL_DOMAIN: &str = "control.example.com";
/// An error message is for a person: a bounded amount of text, whatever the input.
const MAX_STDERR: usize = 4096;

#[derive(Debug, Clone)]
struct Case {
    /// Where the case comes from (`hostile.tsv:LINE` or `generated`).
    origin: String,
    command: String,
    arg: Vec<u8>,
    expected: String,
    /// A known defect this case shows (see the corpus header).
    finding: Option<String>,
}

impl Case {
    fn label(&self) -> String {
        let shown = String::from_utf8_lossy(&self.arg);
        let shown: String = if shown.chars().count() > 60 {
            format!(
                "{}… ({} bytes)",
                shown.chars().take(60).collect::<String>(),
                self.arg.len()
            )
        } else {
            shown.into_owned()
        };
        format!("{} {} {:?}", self.origin, self.command, shown)
    }
}

/// Decodes the corpus escapes: `\n \r \t \0 \\ \xHH \u{H…}`.
fn unescape(s: &str, origin: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next() {
            Some('n') => out.push(b'\n'),
            Some('r') => out.push(b'\r'),
            Some('t') => out.push(b'\t'),
            Some('0') => out.push(0),
            Some('\\') => out.push(b'\\'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(
                    u8::from_str_radix(&hex, 16)
                        .unwrap_or_else(|_| panic!("{origin}: bad \\x escape {hex:?}")),
                );
            }
            Some('u') => {
                assert_eq!(chars.next(), Some('{'), "{origin}: \\u needs braces");
                let hex: String = chars.by_ref().take_while(|c| *c != '}').collect();
                let c = u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or_else(|| panic!("{origin}: bad \\u escape {hex:?}"));
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            other => panic!("{origin}: unknown escape \\{other:?}"),
        }
    }
    out
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, line) in CORPUS.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let origin = format!("hostile.tsv:{}", i + 1);
        let fields: Vec<&str> = line.split('\t').collect();
        assert!(
            (3..=4).contains(&fields.len()),
            "{origin}: want command, argument, expected[, finding]: {line:?}"
        );
        assert!(!fields[2].is_empty(), "{origin}: empty expectation");
        cases.push(Case {
            arg: unescape(fields[1], &origin),
            command: fields[0].to_string(),
            expected: fields[2].to_string(),
            finding: fields.get(3).map(|f| f.to_string()),
            origin,
        });
    }
    cases
}

/// Huge inputs, made here rather than stored.
fn generated() -> Vec<Case> {
    let case = |command: &str, arg: Vec<u8>, expected: &str, finding: Option<&str>| Case {
        origin: "generated".into(),
        command: command.into(),
        arg,
        expected: expected.into(),
        finding: finding.map(String::from),
    };
    let big = |n: usize, c: u8| vec![c; n];
    // The kernel refuses a single argument above 128 KiB (MAX_ARG_STRLEN), so 100 KB is the
    // largest argument a command line can carry; 1 MB goes through the settings file.
    let k100 = 100_000;
    let mb = 1 << 20;
    let mut long_server = big(k100, b'a');
    long_server.extend_from_slice(b":80");
    let mut labels = b"a.".repeat(130);
    labels.extend_from_slice(b"com");
    let mut huge_bind = b"@http_bind@http_bind = \"".to_vec();
    huge_bind.extend(big(mb, b'9'));
    huge_bind.push(b'"');
    let mut huge_comment_then_bad_key = b"+".to_vec();
    huge_comment_then_bad_key.extend(b"# padding padding padding\n".repeat(mb / 26));
    huge_comment_then_bad_key.extend_from_slice(b"sneaky_key = 1");
    vec![
        case("domain", big(k100, b'a'), "253", None),
        case("domain", labels, "253", None),
        case("domain", big(mb, b'a'), "argument list too long", None),
        case("server", long_server, "253", None),
        case("profile", big(k100, b'x'), "must be default", None),
        case("block", big(k100, b'1'), "IPv4", None),
        case("reason", big(k100, b'r'), "longer than 500", None),
        case("reason", big(501, b'r'), "longer than 500", None),
        case("ttl", big(k100, b'9'), "must be a duration", None),
        case("proxy", big(k100, b'1'), "IPv4", None),
        case("http_bind", big(k100, b'9'), "edge.http_bind", None),
        case("settings", huge_bind, "edge.http_bind", None),
        case("settings", huge_comment_then_bad_key, "sneaky_key", None),
        case(
            "settings",
            [b"!".to_vec(), big(mb, b'z')].concat(),
            "hapctl.toml",
            None,
        ),
    ]
}

/// A command line that carries `arg`, or the spawn error when the OS refuses it.
fn run(cmd: &mut Command) -> Result<Output, std::io::Error> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let err = thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} did not finish within 60 s");
        }
        thread::sleep(Duration::from_millis(2));
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    })
}

fn joined(prefix: &str, arg: &[u8]) -> OsString {
    let mut s = OsString::from(prefix);
    s.push(OsStr::from_bytes(arg));
    s
}

/// Applies a `settings` argument (see the corpus header) to the settings text.
fn edited_settings(original: &str, arg: &[u8], origin: &str) -> Vec<u8> {
    match arg.first() {
        Some(b'!') => arg[1..].to_vec(),
        Some(b'+') => {
            let mut text = original.as_bytes().to_vec();
            if !text.ends_with(b"\n") {
                text.push(b'\n');
            }
            text.extend_from_slice(&arg[1..]);
            text.push(b'\n');
            text
        }
        Some(b'@') => {
            let rest = &arg[1..];
            let at = rest
                .iter()
                .position(|b| *b == b'@')
                .unwrap_or_else(|| panic!("{origin}: @KEY@TEXT"));
            let key = std::str::from_utf8(&rest[..at]).unwrap();
            let replacement = &rest[at + 1..];
            let prefix = format!("{key} =");
            let matching: Vec<usize> = original
                .lines()
                .enumerate()
                .filter(|(_, l)| l.starts_with(&prefix))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(
                matching.len(),
                1,
                "{origin}: exactly one line starts with {prefix:?}"
            );
            let mut out = Vec::new();
            for (i, line) in original.lines().enumerate() {
                if i == matching[0] {
                    out.extend_from_slice(replacement);
                } else {
                    out.extend_from_slice(line.as_bytes());
                }
                out.push(b'\n');
            }
            out
        }
        _ => panic!("{origin}: a settings argument starts with @, + or !"),
    }
}

/// Everything that must not change, captured from the edge.
#[derive(Debug, PartialEq, Eq)]
struct World {
    live: Vec<(std::path::PathBuf, Vec<u8>)>,
    settings: String,
    domains: String,
    blocks: String,
    proxies: String,
    applies: String,
}

fn world(edge: &Edge) -> World {
    let status: serde_json::Value = serde_json::from_str(&edge.ok(&["status", "--json"])).unwrap();
    World {
        live: edge.live_files(),
        settings: edge.settings_text(),
        domains: edge.ok(&["domain", "ls", "--json"]),
        blocks: edge.ok(&["block", "ls", "--json"]),
        proxies: edge.ok(&["proxy", "ls"]),
        applies: status["applies"].to_string(),
    }
}

/// Runs one case; returns what is wrong with the outcome (empty: as expected). Panics on what
/// no case may ever do (succeed, crash, change the live files or leave state behind).
fn run_case(edge: &Edge, scratch: &std::path::Path, n: usize, case: &Case) -> Vec<String> {
    let arg = case.arg.as_slice();
    let bin = env!("CARGO_BIN_EXE_hapctl");
    let mut fresh = None;
    let original_settings = edge.settings_text();
    let mut cmd = match case.command.as_str() {
        "domain" => {
            let mut c = edge.command(&["domain", "add", "--server", "127.0.0.1:9", "--"]);
            c.arg(OsStr::from_bytes(arg));
            c
        }
        "server" => {
            let mut c = edge.command(&["domain", "add", "ok.example.com"]);
            c.arg(joined("--server=", arg));
            c
        }
        "profile" => {
            let mut c =
                edge.command(&["domain", "add", "ok.example.com", "--server", "127.0.0.1:9"]);
            c.arg(joined("--profile=", arg));
            c
        }
        "block" => {
            let mut c = edge.command(&["block", "add", "--"]);
            c.arg(OsStr::from_bytes(arg));
            c
        }
        "reason" => {
            let mut c = edge.command(&["block", "add", "203.0.113.77"]);
            c.arg(joined("--reason=", arg));
            c
        }
        "ttl" => {
            let mut c = edge.command(&["block", "add", "203.0.113.78"]);
            c.arg(joined("--ttl=", arg));
            c
        }
        "proxy" => {
            let mut c = edge.command(&["proxy", "add", "--"]);
            c.arg(OsStr::from_bytes(arg));
            c
        }
        "http_bind" => {
            let dir = scratch.join(format!("fresh-{n}"));
            let mut c = Command::new(bin);
            c.arg("--state-dir")
                .arg(&dir)
                .arg("init")
                .arg(joined("--http-bind=", arg))
                .env_remove("HAPCTL_FAULT")
                .env_remove("HAPCTL_STATE_DIR");
            fresh = Some(dir);
            c
        }
        "settings" => {
            let text = edited_settings(&original_settings, arg, &case.origin);
            std::fs::write(edge.path("hapctl.toml"), text).unwrap();
            edge.command(&["apply"])
        }
        other => panic!("{}: unknown command {other:?}", case.origin),
    };
    let result = run(&mut cmd);
    if case.command == "settings" {
        edge.write_settings(&original_settings);
    }
    if let Some(dir) = &fresh {
        assert!(
            !dir.exists(),
            "{}: a refused init created {}",
            case.label(),
            dir.display()
        );
    }

    let mut wrong = Vec::new();
    let want_code = if case.command == "settings" { 1 } else { 2 };
    match result {
        Err(e) => {
            // The OS refused the command line (NUL byte, argument too long): hapctl never ran.
            let msg = e.to_string().to_lowercase();
            if !msg.contains(&case.expected.to_lowercase()) {
                wrong.push(format!(
                    "the command could not be spawned ({e}), which does not say {:?}",
                    case.expected
                ));
            }
        }
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            assert!(
                matches!(code, Some(1..=100)),
                "{}: invalid input must be refused without a crash, got {:?}\n{}",
                case.label(),
                out.status,
                truncate(&stderr)
            );
            if code != Some(want_code) {
                wrong.push(format!("exit {code:?}, want {want_code}"));
            }
            if !stderr
                .to_lowercase()
                .contains(&case.expected.to_lowercase())
            {
                wrong.push(format!(
                    "stderr lacks {:?}: {}",
                    case.expected,
                    truncate(&stderr)
                ));
            }
            if let Some(b) = out
                .stderr
                .iter()
                .find(|b| b.is_ascii_control() && !matches!(b, b'\n' | b'\t'))
            {
                wrong.push(format!(
                    "stderr carries the raw control byte {b:#04x}: input must be escaped before it reaches a terminal"
                ));
            }
            if out.stderr.len() > MAX_STDERR {
                wrong.push(format!(
                    "stderr is {} bytes (more than {MAX_STDERR}): the input is echoed unbounded",
                    out.stderr.len()
                ));
            }
        }
    }
    wrong
}

fn truncate(s: &str) -> String {
    if s.chars().count() > 400 {
        format!(
            "{}… ({} bytes)",
            s.chars().take(400).collect::<String>(),
            s.len()
        )
    } else {
        s.to_string()
    }
}

#[test]
fn hostile_input_is_refused_and_changes_nothing() {
    let started = Instant::now();
    let strict = std::env::var_os("HAPCTL_STRICT_FINDINGS").is_some_and(|v| v == "1");
    let edge = Edge::started();
    let app = Backend::start("control");
    edge.ok(&["domain", "add", CONTROL_DOMAIN, "--server", &app.addr()]);
    edge.ok(&["block", "add", "203.0.113.1", "--reason", "control block"]);
    edge.ok(&["proxy", "add", "127.0.0.9"]);
    let master = edge.master_pid();
    let before = world(&edge);
    let scratch = tempfile::tempdir().unwrap();

    let mut cases = corpus();
    let from_corpus = cases.len();
    assert!(from_corpus >= 150, "the corpus has {from_corpus} cases");
    cases.extend(generated());

    let mut failures = Vec::new();
    let mut findings: Vec<(String, String)> = Vec::new();
    let mut fixed = Vec::new();
    for (n, case) in cases.iter().enumerate() {
        let wrong = run_case(&edge, scratch.path(), n, case);
        assert_eq!(
            edge.live_files(),
            before.live,
            "{}: the live files changed",
            case.label()
        );
        match (&case.finding, wrong.is_empty()) {
            (None, true) => {}
            (None, false) => failures.push(format!("{}: {}", case.label(), wrong.join("; "))),
            (Some(f), false) => {
                let line = format!("[{f}] {}: {}", case.label(), wrong.join("; "));
                if strict {
                    failures.push(line);
                } else {
                    findings.push((f.clone(), line));
                }
            }
            (Some(f), true) => fixed.push(format!(
                "{}: marked {f} but behaves as wanted; remove the marker",
                case.label()
            )),
        }
    }

    // Nothing changed, HAProxy was never touched and still routes.
    let after = world(&edge);
    assert_eq!(after.live, before.live, "live files");
    assert_eq!(after.settings, before.settings, "settings file");
    assert_eq!(after.domains, before.domains, "domain ls --json");
    assert_eq!(after.blocks, before.blocks, "block ls --json");
    assert_eq!(after.proxies, before.proxies, "proxy ls");
    assert_eq!(
        after.applies, before.applies,
        "status --json: new apply rows"
    );
    assert_eq!(edge.master_pid(), master, "HAProxy's master");
    let r = edge.get(CONTROL_DOMAIN, "/");
    assert_eq!((r.status, r.body.as_str()), (200, "control"));
    assert!(
        std::fs::read_dir(scratch.path()).unwrap().next().is_none(),
        "a refused init left a state dir behind"
    );

    for (_, line) in &findings {
        eprintln!("known finding {line}");
    }
    for line in &fixed {
        eprintln!("note: {line}");
    }
    let mut ids: Vec<&str> = findings.iter().map(|(f, _)| f.as_str()).collect();
    ids.sort();
    ids.dedup();
    eprintln!(
        "hostile input: {} cases run ({from_corpus} from the corpus, {} generated) in {:.1} s; \
         {} failures, {} known findings ({}), {} marked findings now pass",
        cases.len(),
        cases.len() - from_corpus,
        started.elapsed().as_secs_f64(),
        failures.len(),
        findings.len(),
        ids.join(", "),
        fixed.len()
    );
    assert!(
        failures.is_empty(),
        "{} case(s) not refused as expected:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
