//! Hostile input through the CLI, against one running edge: every case of
//! `tests/corpus/hostile.tsv` (format and escapes described in its header) and a few huge
//! ones generated here must be refused with the documented exit code and an error that names
//! the problem, and, after all of them, nothing may have changed: live files, database,
//! history, settings, HAProxy's master, routing.
//!
//! The same through the API (`hapctl serve`, second test, below the line): the corpus cases
//! the API also takes, `tests/corpus/hostile_http.tsv` (bodies, content types, paths), and
//! requests generated from `/openapi.json` over every mutating route.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use hapctl::process::{run_with_timeout, ProcessError};
use testkit::{Backend, Edge};

const CORPUS: &str = include_str!("../corpus/hostile.tsv");
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
    /// `api=TEXT`: what the API's `error.message` must contain instead of `expected`.
    api_expected: Option<String>,
    /// `api-finding=ID`: a known defect the case shows through the API.
    api_finding: Option<String>,
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
            fields.len() >= 3,
            "{origin}: want command, argument, expected[, finding][, api=…][, api-finding=…]: {line:?}"
        );
        assert!(!fields[2].is_empty(), "{origin}: empty expectation");
        let (mut finding, mut api_expected, mut api_finding) = (None, None, None);
        for (i, extra) in fields[3..].iter().enumerate() {
            if let Some(v) = extra.strip_prefix("api=") {
                api_expected = Some(v.to_string());
            } else if let Some(v) = extra.strip_prefix("api-finding=") {
                api_finding = Some(v.to_string());
            } else if i == 0 {
                finding = (!extra.is_empty()).then(|| extra.to_string());
            } else {
                panic!("{origin}: unknown column {extra:?}");
            }
        }
        cases.push(Case {
            arg: unescape(fields[1], &origin),
            command: fields[0].to_string(),
            expected: fields[2].to_string(),
            finding,
            api_expected,
            api_finding,
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
        api_expected: None,
        api_finding: None,
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
        case("version", big(k100, b'1'), "1 to 64", None),
        case("app", big(k100, b'a'), "1-32 characters", None),
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
fn run(cmd: &mut Command) -> Result<Output, ProcessError> {
    match run_with_timeout(cmd, Duration::from_secs(60)) {
        Err(e @ ProcessError::Timeout { .. }) => panic!("{cmd:?}: {e}"),
        result => result,
    }
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
    limits: String,
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
        limits: edge.ok(&["limits", "show", "--json"]),
        applies: status["applies"].to_string(),
    }
}

/// The commands and fields of issue 10 (policies, protections, logs): corpus command → the
/// command line before the argument, and how the argument follows it: `--opt=ARG`, or after
/// `--` as a positional when the option is "".
const POLICY_COMMANDS: &[(&str, &[&str], &str)] = &[
    (
        "https_redirect",
        &["domain", "https", CONTROL_DOMAIN],
        "--redirect=",
    ),
    ("hsts", &["domain", "https", CONTROL_DOMAIN], "--hsts="),
    (
        "https_domain",
        &["domain", "https", "--redirect", "301"],
        "",
    ),
    ("suspend", &["domain", "suspend"], ""),
    ("resume", &["domain", "resume"], ""),
    (
        "profile_add",
        &["domain", "profile", CONTROL_DOMAIN],
        "--add=",
    ),
    (
        "profile_rm",
        &["domain", "profile", CONTROL_DOMAIN],
        "--rm=",
    ),
    (
        "profile_domain",
        &["domain", "profile", "--add", "wordpress"],
        "",
    ),
    (
        "wp_admin_gate",
        &["domain", "profile", CONTROL_DOMAIN],
        "--wp-admin-gate=",
    ),
    (
        "wp_login_posts",
        &["domain", "profile", CONTROL_DOMAIN],
        "--wp-login-posts=",
    ),
    (
        "wp_xmlrpc_posts",
        &["domain", "profile", CONTROL_DOMAIN],
        "--wp-xmlrpc-posts=",
    ),
    (
        "domain_limits",
        &["domain", "limits", "--preset", "off"],
        "",
    ),
    (
        "domain_preset",
        &["domain", "limits", CONTROL_DOMAIN],
        "--preset=",
    ),
    (
        "domain_rule",
        &["domain", "limits", CONTROL_DOMAIN],
        "--err-rate=",
    ),
    ("limits_preset", &["limits", "set"], "--preset="),
    ("limit_rule", &["limits", "set"], "--req-rate="),
    ("soft_rule", &["limits", "set"], "--req-rate-soft="),
    ("req_window", &["limits", "set"], "--req-window="),
    ("conn_window", &["limits", "set"], "--conn-window="),
    ("err_window", &["limits", "set"], "--err-window="),
    ("tarpit", &["limits", "set"], "--tarpit="),
    ("local_exempt", &["limits", "set"], "--local-exempt="),
    ("exempt_add", &["limits", "exempt", "add"], ""),
    ("exempt_rm", &["limits", "exempt", "rm"], ""),
    ("proxy_preset", &["proxy", "add"], "--preset="),
    ("top_limit", &["security", "top"], "--limit="),
    ("top_rate", &["security", "top"], "--min-rate="),
    ("security_clear", &["security", "clear"], ""),
    ("logs_status", &["logs"], "--status="),
    ("logs_domain", &["logs"], "--domain="),
];

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
        "version" => {
            let mut c = edge.command(&["deliver", "--"]);
            c.arg(OsStr::from_bytes(arg));
            c
        }
        "app" => {
            let mut c = edge.command(&["deliver", "v1"]);
            c.arg(joined("--app=", arg));
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
        other => {
            let Some((_, before, opt)) = POLICY_COMMANDS.iter().find(|(c, _, _)| *c == other)
            else {
                panic!("{}: unknown command {other:?}", case.origin)
            };
            let mut c = edge.command(before);
            match *opt {
                "" => c.arg("--").arg(OsStr::from_bytes(arg)),
                opt => c.arg(joined(opt, arg)),
            };
            c
        }
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

/// Every finding listed below is fixed: a mismatch fails. HAPCTL_STRICT_FINDINGS=0 turns
/// marked cases back into reports (to land a corpus of a newly found defect before its fix).
fn strict_findings() -> bool {
    std::env::var_os("HAPCTL_STRICT_FINDINGS").is_none_or(|v| v != "0")
}

/// A started edge routing the control domain, with one control block.
fn control_edge() -> (Edge, Backend) {
    let edge = Edge::started();
    // An ACME directory nobody serves: a wrongly accepted order fails here, never leaves the host.
    edge.set_setting_keys(
        "acme",
        &[("directory", "https://127.0.0.1:9/dir".to_string())],
    );
    let app = Backend::start("control");
    edge.ok(&["domain", "add", CONTROL_DOMAIN, "--server", &app.addr()]);
    edge.ok(&["block", "add", "203.0.113.1", "--reason", "control block"]);
    (edge, app)
}

#[test]
fn hostile_input_is_refused_and_changes_nothing() {
    let started = Instant::now();
    let strict = strict_findings();
    let (edge, _app) = control_edge();
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
    assert_eq!(after.limits, before.limits, "limits show --json");
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

// ---------------------------------------------------------------------------------------------
// The same corpus, and raw HTTP bodies, through the API (`hapctl serve`).
//
// One edge and one daemon for every request, one request at a time. Every request must be
// refused with the documented status in the error shape `{"error":{"code","message","field"}}`
// (but what the HTTP layer refuses before the API, without a body: 414 and 431 for an
// over-long target, 400 for broken framing), an answer of at most `MAX_ANSWER` bytes whatever the input, and afterwards the daemon
// must still answer `/health` 200 and the live files must be unchanged. After all of them the
// databases (as the API lists them), the runtime block map, HAProxy's master and its reload
// count must be unchanged, and the control domain still routed.
//
// API defects this suite found, all fixed (the ids stay on their cases as history; a marked
// case fails like any other unless HAPCTL_STRICT_FINDINGS=0):
//   A1  a path parameter that is not UTF-8 (`%FF`, `%C0%AF`) is refused by axum's `Path`
//       extractor in plain text ("Invalid URL: Invalid UTF-8 in `name`"), not the error shape
//   A2  a body of the wrong JSON type at the top level (`null`, `5`, `"x"`, `true`) answers
//       error.field "invalid type" (error.rs takes the message's first words for a path)
//   A3  POST /v1/blocked-ips: a field of the wrong type (and, in a list, a missing field)
//       answers error.field "body" (or "[i]") and a message that does not name the field
//       (`serde_json::from_value` gives no path)
//   A4  the input is echoed whole: a wrongly typed string value (`"weight": "xxx…"`), an
//       unknown key, an unsupported edge-manager option or template_override are repeated in
//       full (100 KB in, 100 KB out)
//   A5  a JSON array is accepted in place of an object: serde reads a struct from a sequence
//       (`PUT /v1/domains/x [[{"address":"…"}]]` creates the domain)
//   A6  POST /v1/blocked-ips takes duplicate keys (the last one wins) where every other route
//       refuses them ("duplicate field")
//   A7  a declared Content-Length above 1 MiB is not refused up front: with
//       `Expect: 100-continue` the daemon answers 100 Continue and waits for the body
//   A8  POST /api/blocked-ips: an invalid "blocked_by" is reported as field "author"
//   A9  PUT /v1/domains: a weight or maxconn beyond the integer type answers "expected u16" /
//       "expected u32", not the documented range (weight 0 to 256)
//   A10 a missing required field answers error.field null (edge-manager routes, POST
//       /v1/deliveries); only the message names it
//   A11 the edge-manager routes accept a body that is not JSON when the bad bytes sit in a
//       field they ignore (invalid UTF-8, a lone surrogate escape, a number out of range)

use serde_json::{json, Value};
use testkit::daemon::{
    http_call_with, http_send_raw, percent_encode_segment, runtime_blocked_keys, ApiClient,
    ApiResponse, ApiRoute, Daemon,
};

const HTTP_CORPUS: &str = include_str!("../corpus/hostile_http.tsv");
/// The daemon's body limit (`BODY_LIMIT` in src/api/mod.rs).
const BODY_LIMIT: usize = 1 << 20;
/// hyper refuses a request target longer than this (414) before the API sees it.
const MAX_URI: usize = 65_534;
/// No answer may be longer than this, whatever the input: an error names the problem, it does
/// not repeat the request.
const MAX_ANSWER: usize = 8 * 1024;
/// A path parameter value that parses (used where the path is not what is tested).
const OK_NAME: &str = "hostile-ok.example.com";
const OK_KEY: &str = "198.51.100.203";
/// A valid single server, for requests whose problem is elsewhere.
const OK_SERVERS: &str = r#"{"servers":[{"address":"127.0.0.1:9"}]}"#;

/// One request of the API pass and what must come back.
#[derive(Debug, Clone)]
struct Probe {
    /// `hostile.tsv:LINE`, `hostile_http.tsv:LINE` or `generated (what)`.
    origin: String,
    method: String,
    target: String,
    content_type: Option<String>,
    body: Option<Vec<u8>>,
    /// The whole request as bytes, sent instead of the fields above.
    raw: Option<Vec<u8>>,
    read_timeout: Duration,
    status: u16,
    /// `error.code`; `None`: any.
    code: Option<String>,
    /// `error.field` must contain one of these (`None`: not checked); `Some([])`: must be null
    /// or "body" (the body as a whole).
    field: Option<Vec<String>>,
    /// `error.message` must contain one of these, case-insensitively (empty: not checked).
    message: Vec<String>,
    /// The answer is in the error shape (false for what hyper refuses: no body).
    shape: bool,
    finding: Option<String>,
}

impl Probe {
    fn new(origin: impl Into<String>, method: &str, target: impl Into<String>) -> Probe {
        Probe {
            origin: origin.into(),
            method: method.into(),
            target: target.into(),
            content_type: None,
            body: None,
            raw: None,
            read_timeout: Duration::from_secs(30),
            status: 400,
            code: None,
            field: None,
            message: Vec::new(),
            shape: true,
            finding: None,
        }
    }

    fn json(mut self, body: impl Into<Vec<u8>>) -> Probe {
        self.content_type = Some("application/json".into());
        self.body = Some(body.into());
        self
    }

    fn want(mut self, status: u16, code: Option<&str>) -> Probe {
        self.status = status;
        self.code = code.map(String::from);
        self
    }

    fn field(mut self, names: &[&str]) -> Probe {
        self.field = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }

    fn message(mut self, any_of: &[&str]) -> Probe {
        self.message = any_of.iter().map(|s| s.to_string()).collect();
        self
    }

    fn finding(mut self, id: Option<&str>) -> Probe {
        if id.is_some() {
            self.finding = id.map(String::from);
        }
        self
    }

    /// Marks a known defect of how the field is named, when the field is checked.
    fn finding_on_field(self, id: &str) -> Probe {
        if self.field.as_ref().is_some_and(|f| !f.is_empty()) {
            self.finding(Some(id))
        } else {
            self
        }
    }

    fn label(&self) -> String {
        let target = if self.target.chars().count() > 80 {
            format!(
                "{}… ({} bytes)",
                self.target.chars().take(80).collect::<String>(),
                self.target.len()
            )
        } else {
            self.target.clone()
        };
        let size = self.raw.as_ref().or(self.body.as_ref()).map_or(0, Vec::len);
        let body = match (&self.raw, &self.body) {
            (Some(_), _) => format!("raw request, {size} bytes"),
            (None, Some(b)) if b.len() <= 60 => format!("{:?}", String::from_utf8_lossy(b)),
            (None, Some(b)) => format!(
                "{:?}… ({size} bytes)",
                String::from_utf8_lossy(&b[..60]).trim_end_matches('\u{fffd}')
            ),
            (None, None) => "no body".into(),
        };
        format!(
            "{} {} {target} [{}] {body}",
            self.origin,
            self.method,
            self.content_type.as_deref().unwrap_or("no content type")
        )
    }
}

/// `bytes` as a JSON string literal: through serde_json when it is UTF-8 (controls become
/// `\u00XX`), else with the invalid bytes left raw (the body is then not JSON at all).
fn json_string(bytes: &[u8]) -> Vec<u8> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return serde_json::to_vec(s).unwrap();
    }
    let mut out = vec![b'"'];
    for &b in bytes {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0..=0x1f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
    out
}

/// `template` with every `@ARG@` replaced by `value` (raw JSON text).
fn fill(template: &str, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut parts = template.split("@ARG@");
    out.extend_from_slice(parts.next().unwrap_or("").as_bytes());
    for part in parts {
        out.extend_from_slice(value);
        out.extend_from_slice(part.as_bytes());
    }
    out
}

/// What the API's message must contain for a corpus case.
fn api_message(case: &Case) -> String {
    if let Some(m) = &case.api_expected {
        m.clone()
    } else if case.arg.contains(&0) {
        "U+0000".into()
    } else {
        case.expected.clone()
    }
}

/// A corpus argument in a JSON body.
fn body_probe(case: &Case, method: &str, target: &str, body: Vec<u8>, fields: &[&str]) -> Probe {
    let p = Probe::new(case.origin.clone(), method, target).json(body);
    let len = p.body.as_ref().map_or(0, Vec::len);
    if len > BODY_LIMIT {
        p.want(413, Some("too_large")).message(&["limit"])
    } else if std::str::from_utf8(&case.arg).is_err() {
        p.want(400, Some("invalid_json")).message(&["unicode"])
    } else {
        p.want(400, Some("invalid"))
            .field(fields)
            .message(&[&api_message(case)])
            .finding(case.api_finding.as_deref())
    }
}

/// A corpus argument as the last path segment (`prefix` ends in '/').
fn path_probe(
    case: &Case,
    method: &str,
    prefix: &str,
    body: Option<&str>,
    fields: &[&str],
) -> Probe {
    let target = format!("{prefix}{}", percent_encode_segment(&case.arg));
    let mut p = Probe::new(case.origin.clone(), method, target);
    if let Some(b) = body {
        p = p.json(b.as_bytes());
    }
    if case.arg.is_empty() {
        p.want(404, Some("not_found")).message(&["no such route"])
    } else if p.target.len() > MAX_URI {
        // Above hyper's whole read buffer (about 400 KB) the head is too large: 431.
        let status = if p.target.len() > 400_000 { 431 } else { 414 };
        Probe { shape: false, ..p }.want(status, None)
    } else if std::str::from_utf8(&case.arg).is_err() {
        p.want(400, Some("invalid"))
            .field(fields)
            .message(&["UTF-8"])
            .finding(Some("A1"))
    } else {
        p.want(400, Some("invalid"))
            .field(fields)
            .message(&[&api_message(case)])
            .finding(case.api_finding.as_deref())
    }
}

/// A corpus argument as the value of a query parameter of `GET /v1/blocked-ips`.
fn query_probe(case: &Case, param: &str) -> Probe {
    let target = format!(
        "/v1/blocked-ips?{param}={}",
        percent_encode_segment(&case.arg)
    );
    let p = Probe::new(case.origin.clone(), "GET", target);
    if p.target.len() > MAX_URI {
        let status = if p.target.len() > 400_000 { 431 } else { 414 };
        Probe { shape: false, ..p }.want(status, None)
    } else if std::str::from_utf8(&case.arg).is_err() {
        p.want(400, Some("invalid"))
            .field(&[param])
            .message(&["UTF-8"])
    } else {
        p.want(400, Some("invalid"))
            .field(&[param])
            .message(&[&api_message(case)])
    }
}

/// A `server` spec (`HOST:PORT[,option…]`) as the API's server object; the option keys used.
fn server_object(spec: &[u8]) -> (Vec<u8>, Vec<String>) {
    let Ok(text) = std::str::from_utf8(spec) else {
        return (fill(r#"{"address":@ARG@}"#, &json_string(spec)), Vec::new());
    };
    let mut parts = text.split(',');
    let mut server = serde_json::Map::new();
    server.insert("address".into(), json!(parts.next().unwrap_or("")));
    let mut keys = Vec::new();
    for item in parts {
        let (key, value) = match item.split_once('=') {
            None if item == "check" => ("check".to_string(), json!(true)),
            None if item == "nocheck" => ("check".to_string(), json!(false)),
            None => (item.to_string(), json!(true)),
            Some(("check", v)) => (
                "check".to_string(),
                match v {
                    "on" | "true" | "yes" => json!(true),
                    "off" | "false" | "no" => json!(false),
                    other => json!(other),
                },
            ),
            Some((k @ ("weight" | "maxconn"), v)) => (
                k.to_string(),
                v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n)),
            ),
            Some((k, _)) => (k.to_string(), json!(true)),
        };
        keys.push(key.clone());
        server.insert(key, value);
    }
    (serde_json::to_vec(&server).unwrap(), keys)
}

/// The API requests for one corpus case, or why it has none.
fn api_probes(case: &Case) -> Result<Vec<Probe>, &'static str> {
    let s = json_string(&case.arg);
    let b = |m: &str, t: &str, template: &str, fields: &[&str]| {
        body_probe(case, m, t, fill(template, &s), fields)
    };
    Ok(match case.command.as_str() {
        "domain" => vec![
            path_probe(case, "PUT", "/v1/domains/", Some(OK_SERVERS), &["domain", "name"]),
            path_probe(case, "DELETE", "/v1/domains/", None, &["domain", "name"]),
            b(
                "POST",
                "/api/domain",
                r#"{"domain":@ARG@,"servers":[{"address":"127.0.0.1","port":9}]}"#,
                &["domain"],
            ),
            b("DELETE", "/api/domain", r#"{"domain":@ARG@}"#, &["domain"]),
        ],
        "server" => {
            let (server, keys) = server_object(&case.arg);
            let body = fill(r#"{"servers":[@ARG@]}"#, &server);
            let mut fields: Vec<&str> = keys.iter().map(String::as_str).collect();
            if fields.is_empty() {
                fields.push("servers[0].address");
            } else {
                fields.push("servers");
            }
            vec![body_probe(
                case,
                "PUT",
                "/v1/domains/ok.example.com",
                body,
                &fields,
            )]
        }
        "profile" => vec![b(
            "PUT",
            "/v1/domains/ok.example.com",
            r#"{"servers":[{"address":"127.0.0.1:9"}],"profile":@ARG@}"#,
            &["profile"],
        )],
        "block" => vec![
            b("POST", "/v1/blocked-ips", r#"{"ip":@ARG@}"#, &["ip"]),
            b(
                "POST",
                "/v1/blocked-ips",
                r#"[{"ip":"198.51.100.220"},{"ip":@ARG@}]"#,
                &["[1].ip"],
            ),
            path_probe(case, "DELETE", "/v1/blocked-ips/", None, &["key"]),
            query_probe(case, "prefix"),
            query_probe(case, "after"),
            b("POST", "/api/blocked-ips", r#"{"ip_address":@ARG@}"#, &["ip_address"]),
            b("DELETE", "/api/blocked-ips", r#"{"ip_address":@ARG@}"#, &["ip_address"]),
            b(
                "POST",
                "/api/security/temporary-block",
                r#"{"ip_address":@ARG@}"#,
                &["ip_address"],
            ),
        ],
        "reason" => vec![
            b(
                "POST",
                "/v1/blocked-ips",
                r#"{"ip":"203.0.113.77","reason":@ARG@}"#,
                &["reason"],
            ),
            query_probe(case, "reason"),
            b(
                "POST",
                "/v1/blocked-ips",
                r#"{"ip":"203.0.113.77","author":@ARG@}"#,
                &["author"],
            ),
            b(
                "POST",
                "/api/blocked-ips",
                r#"{"ip_address":"203.0.113.77","reason":@ARG@}"#,
                &["reason"],
            ),
            b(
                "POST",
                "/api/blocked-ips",
                r#"{"ip_address":"203.0.113.77","blocked_by":@ARG@}"#,
                &["blocked_by"],
            )
            .finding_on_field("A8"),
            b(
                "POST",
                "/api/security/temporary-block",
                r#"{"ip_address":"203.0.113.77","reason":@ARG@}"#,
                &["reason"],
            ),
        ],
        "ttl" => vec![
            b(
                "POST",
                "/v1/blocked-ips",
                r#"{"ip":"203.0.113.78","ttl":@ARG@}"#,
                &["ttl"],
            ),
            query_probe(case, "expiring"),
            b(
                "POST",
                "/v1/blocked-ips",
                r#"[{"ip":"203.0.113.78","ttl":@ARG@}]"#,
                &["[0].ttl"],
            ),
        ],
        "version" => vec![
            b("POST", "/v1/deliveries", r#"{"version":@ARG@}"#, &["version"]),
            b(
                "POST",
                "/v1/deliveries",
                r#"{"app":"shop","version":@ARG@}"#,
                &["version"],
            ),
        ],
        "app" => vec![
            b(
                "POST",
                "/v1/deliveries",
                r#"{"app":@ARG@,"version":"v1"}"#,
                &["app"],
            ),
            b("POST", "/v1/rollback", r#"{"app":@ARG@}"#, &["app"]),
            b("PUT", "/v1/domains/ok.example.com", r#"{"app":@ARG@}"#, &["app"]),
        ],
        "proxy" | "http_bind" | "settings" => {
            return Err("no API route takes it (trusted proxies, the HTTP bind and the settings file are CLI only)")
        }
        // The API's own fields of these are typed JSON (numbers, booleans, lists): its
        // generated requests (`schema_probes`) and the `protections::limit_routes` and
        // `protections::profiles` suites cover them.
        c if POLICY_COMMANDS.iter().any(|(p, _, _)| *p == c) => {
            return Err("the issue-10 policy commands are checked through the CLI here")
        }
        other => panic!("{}: unknown command {other:?}", case.origin),
    })
}

/// A valid body for each mutating route that takes one; the generated requests break one
/// thing in it. Values are chosen so that a valid body changes nothing where that is possible
/// (the control block exists: 409; absent names: 404; no [[app]]: 404); where it is not (PUT
/// a domain, POST a block, POST /api/domain, a temporary block) a wrongly accepted request
/// fails the test.
fn base_body(method: &str, path: &str) -> Option<Value> {
    Some(match (method, path) {
        // The WAF policy `off` is valid without [waf]; its fields are probed one by one.
        ("PUT", "/v1/domains/{name}") => json!({
            "servers": [{"address": "127.0.0.1:9", "name": "s1", "weight": 1, "maxconn": 10, "check": true}],
            "profile": "default",
            "waf": {"mode": "off", "fail": "open", "paranoia": 1, "threshold": 5, "body_limit": 8192,
                "exclusions": [{"rule": 942100, "path": "/search"}]}
        }),
        ("POST", "/v1/blocked-ips") => {
            json!({"ip": "198.51.100.200", "reason": "hostile", "author": "hostile", "ttl": "1h"})
        }
        ("POST", "/v1/deliveries") => json!({"app": "shop", "version": "v1"}),
        ("POST", "/v1/proofs") => json!({"app": "shop", "version": "v1"}),
        ("POST", "/v1/rollback") => json!({"app": "shop"}),
        ("POST", "/api/domain") => json!({
            "domain": OK_NAME, "backend_name": "hostile_backend", "template_override": null, "is_wildcard": false,
            "servers": [{"name": "s1", "address": "127.0.0.1", "port": 9, "options": "check weight 1"}]
        }),
        ("DELETE", "/api/domain") => json!({"domain": "hostile-absent.example.com"}),
        ("POST", "/api/blocked-ips") => {
            json!({"ip_address": "203.0.113.1", "reason": "hostile", "blocked_by": "hostile"})
        }
        ("DELETE", "/api/blocked-ips") => json!({"ip_address": "198.51.100.201"}),
        ("POST", "/api/security/temporary-block") => {
            json!({"ip_address": "198.51.100.202", "duration_minutes": 5})
        }
        // A valid bundle for OK_NAME: a wrongly accepted variant installs it and changes the
        // live files. Orders go to the unserved directory of `control_edge`.
        ("PUT", "/v1/certificates/{name}") => json!({"pem": ok_bundle(), "names": [OK_NAME]}),
        ("POST", "/v1/certificates/{name}/request") => json!({"names": [OK_NAME], "dns_01": false}),
        ("PUT", "/v1/domains/{name}/https") => {
            json!({"redirect": "308", "hsts_max_age": 31536000, "hsts_include_subdomains": true})
        }
        ("PUT", "/v1/limits") => json!({
            "preset": "standard", "rules": {"req_rate": "6000:deny-429", "err_rate": "100:tarpit-403"},
            "windows": {"req": 10, "conn": 10, "err": 30}, "tarpit_secs": 10, "local_exempt": true
        }),
        ("PUT", "/v1/domains/{name}/limits") => {
            json!({"preset": "custom", "rules": {"req_rate": "100:deny", "conn_cur": "50:tarpit-503"}})
        }
        ("PUT", "/v1/domains/{name}/profiles") => {
            json!({"profiles": ["wordpress"], "wp_admin_gate": false})
        }
        ("POST", "/v1/limits/exempt") => json!({"net": "198.51.100.0/24"}),
        ("POST", "/v1/trusted-proxies") => json!({"net": "198.51.100.0/24"}),
        // Evaluates without sending; the control edge has no [waf]: a valid body is a 409.
        ("POST", "/v1/waf/test") => json!({"url": "/search?q=1", "method": "GET"}),
        ("POST", "/v1/security/clear") => json!({"ip": "198.51.100.9"}),
        ("POST", "/api/ssl") => json!({"domain": OK_NAME}),
        ("POST", "/api/ssl/bundle") => {
            json!({"primary": OK_NAME, "sans": ["www.hostile-ok.example.com"]})
        }
        ("POST", "/api/certificates/request") => {
            json!({"domains": [OK_NAME], "force_renewal": false, "include_www": false})
        }
        ("POST", "/api/ssl/dns-challenge/request") => json!({"domain": "hostile-ok.example.com"}),
        ("POST", "/api/ssl/dns-challenge/verify") => json!({"domain": "hostile-ok.example.com"}),
        _ => return None,
    })
}

/// Mutating routes documented without a body: only wrong methods and paths reach them (a
/// body would be ignored and the route would run: sync, apply, reload).
const BODYLESS: &[(&str, &str)] = &[
    ("DELETE", "/v1/domains/{name}"),
    ("DELETE", "/v1/blocked-ips/{key}"),
    ("POST", "/v1/blocked-ips/sync"),
    ("POST", "/v1/apply"),
    ("POST", "/api/blocked-ips/sync"),
    ("POST", "/api/security/clear-expired"),
    ("POST", "/api/config/reload"),
    ("POST", "/v1/certificates/{name}/renew"),
    ("DELETE", "/v1/certificates/{name}"),
    ("POST", "/api/certificates/renew"),
    ("POST", "/v1/domains/{name}/suspend"),
    ("POST", "/v1/domains/{name}/resume"),
    ("DELETE", "/v1/domains/{name}/limits"),
    ("DELETE", "/v1/limits/exempt/{key}"),
    ("POST", "/v1/waf/reload"),
    ("POST", "/v1/haproxy/start"),
    ("POST", "/v1/haproxy/reload"),
    ("POST", "/v1/haproxy/stop"),
    ("DELETE", "/v1/trusted-proxies/{key}"),
    ("DELETE", "/v1/trusted-proxies/presets/{preset}"),
    ("POST", "/v1/renewals"),
];

/// A bundle (leaf for OK_NAME, chain, key) that the certificate routes would accept.
fn ok_bundle() -> &'static str {
    static BUNDLE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUNDLE.get_or_init(|| {
        let ca = testkit::pki::TestCa::new("hostile");
        ca.bundle(&ca.leaf(&[OK_NAME]))
    })
}

/// The old manager's routes answer errors in its own envelopes (`tests/edge/compat.rs`): E1
/// `{"status":"error","message"}` or, for the DNS challenge, E3 `{"success":false,"error"}`;
/// routing errors (404, 405) under `/api/` too.
fn old_envelope(target: &str) -> bool {
    target.starts_with("/api/") || ["/health", "/", "/default-page"].contains(&target)
}

/// Values of another JSON type that the old manager's routes accept, as it did: a port as a
/// numeric string, `is_wildcard` as 1.
const ACCEPTED: &[(&str, &str, &str)] = &[
    ("/api/domain", "port", "\"5\""),
    ("/api/domain", "is_wildcard", "1"),
];

/// Known defects of generated requests: (finding, route "METHOD path" or "*", kind, property
/// or "*").
const KNOWN: &[(&str, &str, &str, &str)] = &[
    ("A3", "POST /v1/blocked-ips", "wrong-type", "*"),
    ("A6", "POST /v1/blocked-ips", "duplicate", "*"),
    ("A4", "*", "huge-key", "*"),
    (
        "A4",
        "PUT /v1/domains/{name}",
        "huge-value",
        "servers|check|maxconn|weight",
    ),
    (
        "A4",
        "POST /api/domain",
        "huge-value",
        "is_wildcard|servers|template_override|options|port",
    ),
    (
        "A4",
        "POST /api/security/temporary-block",
        "huge-value",
        "duration_minutes",
    ),
    ("A8", "POST /api/blocked-ips", "huge-value", "blocked_by"),
    ("A10", "POST /v1/deliveries", "missing", "*"),
    ("A10", "POST /api/domain", "missing", "domain"),
    ("A10", "DELETE /api/domain", "missing", "*"),
    ("A10", "POST /api/blocked-ips", "missing", "*"),
    ("A10", "DELETE /api/blocked-ips", "missing", "*"),
    ("A10", "POST /api/security/temporary-block", "missing", "*"),
];

fn filled(path: &str) -> String {
    let target = path
        .replace("{name}", OK_NAME)
        .replace("{domain}", OK_NAME)
        .replace("{key}", OK_KEY)
        .replace("{id}", "1")
        .replace("{preset}", "cloudflare");
    assert!(!target.contains('{'), "a parameter to fill in {path}");
    target
}

fn replace_bytes(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// The cases of `tests/corpus/hostile_http.tsv` (format in its header), `*` expanded over
/// `routes` (the mutating routes that take a body).
fn http_corpus(routes: &[ApiRoute]) -> Vec<Probe> {
    let mut probes = Vec::new();
    for (i, line) in HTTP_CORPUS.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let origin = format!("hostile_http.tsv:{}", i + 1);
        let f: Vec<&str> = line.split('\t').collect();
        assert!(
            (8..=9).contains(&f.len()),
            "{origin}: want method, target, content type, body, status, code, field, message[, finding]: {line:?}"
        );
        type Target = (String, String, Option<Value>, Option<(String, Vec<u8>)>);
        let of = |r: &ApiRoute| -> Target {
            let base = base_body(&r.method, &r.path);
            let field = base.as_ref().and_then(first_string_property);
            (r.method.clone(), filled(&r.path), base, field)
        };
        let targets: Vec<Target> = if f[0] == "*" {
            assert_eq!(f[1], "*", "{origin}: method * goes with target *");
            routes.iter().map(of).collect()
        } else {
            let target = String::from_utf8(unescape(f[1], &origin)).unwrap();
            match routes
                .iter()
                .find(|r| r.method == f[0] && filled(&r.path) == target)
            {
                Some(r) => {
                    let (_, _, base, field) = of(r);
                    vec![(f[0].to_string(), target, base, field)]
                }
                None => vec![(f[0].to_string(), target, None, None)],
            }
        };
        for (method, target, base, field) in targets {
            let mut body = unescape(f[3], &origin);
            if body.windows(6).any(|w| w == b"@BASE@") {
                let base = base.unwrap_or_else(|| panic!("{origin}: @BASE@ but no base body"));
                body = replace_bytes(&body, b"@BASE@", &serde_json::to_vec(&base).unwrap());
            }
            if body.windows(7).any(|w| w == b"@FIELD@" || w == b"@VALUE@") {
                // A line for every route skips those whose body has no string to break.
                if field.is_none() && f[1] == "*" {
                    continue;
                }
                let (field, value) =
                    field.unwrap_or_else(|| panic!("{origin}: @FIELD@ but no string property"));
                body = replace_bytes(&body, b"@FIELD@", field.as_bytes());
                body = replace_bytes(&body, b"@VALUE@", &value);
            }
            let mut p = Probe::new(origin.clone(), &method, target);
            p.content_type = (f[2] != "-").then(|| f[2].to_string());
            p.body = Some(body);
            p.status = f[4]
                .parse()
                .unwrap_or_else(|_| panic!("{origin}: status {:?}", f[4]));
            p.code = (f[5] != "*").then(|| f[5].to_string());
            p.field = match f[6] {
                "-" => None,
                "(body)" => Some(Vec::new()),
                names => Some(names.split('|').map(String::from).collect()),
            };
            p.message = match f[7] {
                "-" => Vec::new(),
                m => m.split('|').map(String::from).collect(),
            };
            p.finding = f.get(8).filter(|s| !s.is_empty()).map(|s| s.to_string());
            probes.push(p);
        }
    }
    probes
}

/// The first (by name) property of a base body with a string value, and that value as JSON.
fn first_string_property(base: &Value) -> Option<(String, Vec<u8>)> {
    base.as_object()?
        .iter()
        .find(|(_, v)| v.is_string())
        .map(|(name, v)| (name.clone(), serde_json::to_vec(v).unwrap()))
}

/// The schema of one JSON object a body (or an array item) is: `oneOf` resolved to its object.
fn object_schema(schema: &Value) -> Option<&Value> {
    match schema["oneOf"].as_array() {
        Some(alternatives) => alternatives.iter().find(|a| a["type"] == "object"),
        None => (schema["type"] == "object").then_some(schema),
    }
}

fn schema_types(schema: &Value) -> Vec<String> {
    match &schema["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

/// JSON texts of a type the schema does not allow.
fn wrong_values(types: &[String], required: bool) -> Vec<&'static str> {
    let has = |t: &str| types.iter().any(|x| x == t);
    let mut v = Vec::new();
    if has("string") {
        v.extend(["5", "true", "[]", "{}"]);
    } else {
        v.push("\"5\"");
    }
    if has("integer") {
        v.extend(["1.5", "true", "-1", "1e999", "18446744073709551616", "[]"]);
    }
    if has("boolean") {
        v.extend(["1", "[]"]);
    }
    if has("array") {
        v.extend(["{}", "5"]);
    }
    if has("object") {
        v.extend(["[]", "5"]);
    }
    if required && !has("null") {
        v.push("null");
    }
    v
}

/// `base` with `value` (raw JSON text) at `at` (a property, or `[array, 0, property]`).
fn with_value(base: &Value, at: &[&str], value: &[u8]) -> Vec<u8> {
    const MARK: &str = "\u{e000}HOSTILE\u{e000}";
    let mut v = base.clone();
    let mut slot = &mut v;
    for key in at {
        slot = match key.parse::<usize>() {
            Ok(i) => &mut slot[i],
            Err(_) => &mut slot[*key],
        };
    }
    *slot = json!(MARK);
    replace_bytes(
        &serde_json::to_vec(&v).unwrap(),
        &serde_json::to_vec(MARK).unwrap(),
        value,
    )
}

fn without(base: &Value, at: &[&str]) -> Vec<u8> {
    let mut v = base.clone();
    let (last, parents) = at.split_last().unwrap();
    let mut slot = &mut v;
    for key in parents {
        slot = match key.parse::<usize>() {
            Ok(i) => &mut slot[i],
            Err(_) => &mut slot[*key],
        };
    }
    slot.as_object_mut().unwrap().remove(*last);
    serde_json::to_vec(&v).unwrap()
}

fn deep_arrays(n: usize) -> Vec<u8> {
    [vec![b'['; n], vec![b']'; n]].concat()
}

fn known(route: &str, kind: &str, property: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|(_, r, k, p)| {
            (*r == "*" || *r == route)
                && *k == kind
                && (*p == "*" || p.split('|').any(|p| p == property))
        })
        .map(|(id, ..)| *id)
}

/// Requests derived from each body route's schema and base body: wrong types, missing,
/// unknown and duplicate fields, 100 KB values and keys, numbers out of range, deep nesting.
fn schema_probes(route: &ApiRoute, base: &Value) -> Vec<Probe> {
    let name = format!("{} {}", route.method, route.path);
    let target = filled(&route.path);
    let schema = route.body.as_ref().and_then(object_schema);
    let schema = schema.unwrap_or_else(|| panic!("{name}: no object schema for its body"));
    let v1 = route.path.starts_with("/v1/");
    let gen = |kind: &str, property: &str, body: Vec<u8>| {
        Probe::new(
            format!("generated ({kind} {property})"),
            &route.method,
            target.clone(),
        )
        .json(body)
        .want(400, None)
        .finding(known(&name, kind, property))
    };
    let huge = serde_json::to_vec(&"x".repeat(100_000)).unwrap();
    let mut out = Vec::new();

    // The body's own properties, then those of array items and of objects with properties
    // (a domain's `waf`): (path to the value, property name, its schema, required).
    let mut slots: Vec<(Vec<String>, String, Value, bool)> = Vec::new();
    let mut objects: Vec<(Vec<String>, &Value)> = vec![(Vec::new(), schema)];
    // Arrays of objects, by path.
    let mut arrays: Vec<Vec<String>> = Vec::new();
    while let Some((at, object)) = objects.pop() {
        let required: Vec<&str> = object["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for (prop, pschema) in object["properties"].as_object().into_iter().flatten() {
            let mut path = at.clone();
            path.push(prop.clone());
            slots.push((
                path.clone(),
                prop.clone(),
                pschema.clone(),
                required.contains(&prop.as_str()),
            ));
            if let Some(items) = object_schema(&pschema["items"]) {
                arrays.push(path.clone());
                path.push("0".into());
                objects.push((path, items));
            } else if pschema["properties"].is_object() {
                objects.push((path, pschema));
            }
        }
    }

    for (path, prop, pschema, required) in &slots {
        let at: Vec<&str> = path.iter().map(String::as_str).collect();
        // A property of an array item or an object only where the base has one.
        let parent = format!("/{}", at[..at.len() - 1].join("/"));
        if at.len() > 1 && base.pointer(&parent).is_none() {
            continue;
        }
        let types = schema_types(pschema);
        for wrong in wrong_values(&types, *required) {
            if ACCEPTED.contains(&(route.path.as_str(), prop.as_str(), wrong)) {
                continue;
            }
            let code = if wrong == "1e999" {
                "invalid_json"
            } else {
                "invalid"
            };
            out.push(
                gen("wrong-type", prop, with_value(base, &at, wrong.as_bytes()))
                    .want(400, Some(code))
                    .field(&[prop]),
            );
        }
        // 100 KB where a value goes: refused, and not repeated in the answer.
        out.push(gen("huge-value", prop, with_value(base, &at, &huge)).field(&[prop]));
        // A number of 100,000 digits.
        let long_number = [b"1".to_vec(), vec![b'0'; 100_000]].concat();
        out.push(gen(
            "long-number",
            prop,
            with_value(base, &at, &long_number),
        ));
        // 10,000 nested arrays where the value goes.
        out.push(gen(
            "deep",
            prop,
            with_value(base, &at, &deep_arrays(10_000)),
        ));
        if *required {
            out.push(gen("missing", prop, without(base, &at)).field(&[prop]));
        }
    }
    for path in &arrays {
        let at: Vec<&str> = path.iter().map(String::as_str).collect();
        let prop = path.last().unwrap();
        if base.pointer(&format!("/{}", at.join("/"))).is_none() {
            continue;
        }
        for wrong in ["[5]", "[\"x\"]", "[null]", "[[]]", "[true]"] {
            out.push(
                gen("item-type", prop, with_value(base, &at, wrong.as_bytes()))
                    .want(400, Some("invalid"))
                    .field(&[prop]),
            );
        }
    }
    // An unknown field, at the top and in each array item (the /v1 routes refuse them; the
    // edge manager's routes ignore them, as the edge manager did).
    if v1 {
        let mut unknown = base.clone();
        unknown["hostile_unknown"] = json!(1);
        out.push(
            gen(
                "unknown",
                "hostile_unknown",
                serde_json::to_vec(&unknown).unwrap(),
            )
            .want(400, Some("invalid"))
            .field(&["hostile_unknown"]),
        );
        for path in &arrays {
            let pointer = format!("/{}/0", path.join("/"));
            let mut unknown = base.clone();
            let Some(Value::Object(item)) = unknown.pointer_mut(&pointer) else {
                continue;
            };
            item.insert("hostile_unknown".into(), json!(1));
            out.push(
                gen(
                    "unknown",
                    &format!("{}[0].hostile_unknown", path.join(".")),
                    serde_json::to_vec(&unknown).unwrap(),
                )
                .want(400, Some("invalid"))
                .field(&["hostile_unknown"]),
            );
        }
    }
    // A duplicate key: the first string property of the base again, last, with a number.
    if let Some((first, _)) = first_string_property(base) {
        let text = serde_json::to_vec(base).unwrap();
        let body = [
            &text[..text.len() - 1],
            format!(",\"{first}\":5}}").as_bytes(),
        ]
        .concat();
        out.push(
            gen("duplicate", &first, body)
                .want(400, Some("invalid"))
                .message(&["duplicate"]),
        );
    }
    // The base body cut in the middle.
    let text = serde_json::to_vec(base).unwrap();
    out.push(
        gen("truncated", "*", text[..text.len() / 2].to_vec())
            .want(400, Some("invalid_json"))
            .message(&["EOF"]),
    );
    // Keys: one of 100 KB, and 50,000 of them.
    let huge_key = fill("{@ARG@:1}", &huge);
    out.push(gen("huge-key", "*", huge_key));
    let many: Vec<String> = (0..50_000).map(|i| format!("\"k{i}\":0")).collect();
    out.push(gen(
        "many-keys",
        "*",
        format!("{{{}}}", many.join(",")).into_bytes(),
    ));
    // Nesting: 10,000 arrays, 10,000 objects, 100,000 unclosed arrays.
    out.push(gen("deep", "*", deep_arrays(10_000)));
    let objects = [
        "{\"a\":".repeat(10_000).into_bytes(),
        b"1".to_vec(),
        vec![b'}'; 10_000],
    ]
    .concat();
    out.push(gen("deep", "*", objects));
    out.push(gen("deep", "*", vec![b'['; 100_000]));
    // Above the limit: a long value, leading whitespace.
    let over = fill(
        r#"{"pad":@ARG@}"#,
        &serde_json::to_vec(&"a".repeat(BODY_LIMIT + 100)).unwrap(),
    );
    out.push(
        gen("too-large", "*", over)
            .want(413, Some("too_large"))
            .message(&["limit"]),
    );
    let padded = [vec![b' '; BODY_LIMIT], serde_json::to_vec(base).unwrap()].concat();
    out.push(
        gen("too-large", "*", padded)
            .want(413, Some("too_large"))
            .message(&["limit"]),
    );
    out
}

/// Lists for POST /v1/blocked-ips: one entry above the documented 100,000, and 20,000 valid
/// entries followed by an invalid one (refused as a whole, nothing blocked).
fn list_probes() -> Vec<Probe> {
    let entries = |n: usize, entry: &str| vec![entry; n].join(",");
    let over = format!("[{}]", entries(100_001, r#"{"ip":""}"#));
    let last_bad = format!(
        "[{},{{\"ip\":\"300.1.1.1\"}}]",
        entries(20_000, r#"{"ip":"198.51.100.240"}"#)
    );
    vec![
        Probe::new("generated (100,001 entries)", "POST", "/v1/blocked-ips")
            .json(over)
            .want(400, Some("invalid"))
            .field(&["ip"])
            .message(&["1 to 100000"]),
        Probe::new(
            "generated (20,000 entries, the last invalid)",
            "POST",
            "/v1/blocked-ips",
        )
        .json(last_bad)
        .want(400, Some("invalid"))
        .field(&["[20000].ip"])
        .message(&["IPv4"]),
    ]
}

/// Requests with a method the path does not document: 405 in the error shape.
fn method_probes(routes: &[ApiRoute]) -> Vec<Probe> {
    let mut paths: Vec<&str> = routes.iter().map(|r| r.path.as_str()).collect();
    paths.dedup();
    let mut out = Vec::new();
    for path in paths {
        for method in ["POST", "PUT", "DELETE", "PATCH"] {
            if routes.iter().any(|r| r.path == path && r.method == method) {
                continue;
            }
            out.push(
                Probe::new("generated (method)", method, filled(path))
                    .json(br#"{"hostile_unknown":true}"#.to_vec())
                    .want(405, Some("method_not_allowed"))
                    .message(&["method"]),
            );
        }
    }
    out
}

/// Requests made byte by byte: chunked bodies above the limit, a declared length above it,
/// broken framing.
fn raw_probes(api: &ApiClient, routes: &[ApiRoute]) -> Vec<Probe> {
    let head = |method: &str, target: &str, extra: &str| {
        format!(
            "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nConnection: close\r\n{extra}\r\n",
            api.port, api.token
        )
        .into_bytes()
    };
    let raw = |what: &str, method: &str, target: &str, bytes: Vec<u8>| {
        let mut p = Probe::new(format!("generated ({what})"), method, target);
        p.content_type = Some("application/json".into());
        p.raw = Some(bytes);
        p
    };
    let mut out = Vec::new();
    let chunk = vec![b'a'; 64 * 1024];
    for route in routes {
        let target = filled(&route.path);
        // 2 MiB in 64 KiB chunks.
        let mut bytes = head(&route.method, &target, "Transfer-Encoding: chunked\r\n");
        for _ in 0..32 {
            bytes.extend(format!("{:x}\r\n", chunk.len()).bytes());
            bytes.extend_from_slice(&chunk);
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(b"0\r\n\r\n");
        out.push(
            raw("chunked 2 MiB", &route.method, &target, bytes)
                .want(413, Some("too_large"))
                .message(&["limit"]),
        );
    }
    let put = filled("/v1/domains/{name}");
    // A declared length above the limit, announced with `Expect: 100-continue` (what curl
    // does for large bodies): refused at once, before any body byte.
    let mut p = raw(
        "declared 2 MiB, 100-continue",
        "PUT",
        &put,
        head(
            "PUT",
            &put,
            "Content-Length: 2097152\r\nExpect: 100-continue\r\n",
        ),
    )
    .want(413, Some("too_large"))
    .message(&["limit"])
    .finding(Some("A7"));
    p.read_timeout = Duration::from_secs(2);
    out.push(p);
    // Framing the HTTP layer refuses before the API (400 without a body).
    for (what, extra, body) in [
        (
            "two lengths",
            "Content-Length: 2\r\nContent-Length: 3\r\n",
            "{}",
        ),
        ("length not a number", "Content-Length: 2x\r\n", "{}"),
        ("negative length", "Content-Length: -1\r\n", "{}"),
        (
            "bad chunk size",
            "Transfer-Encoding: chunked\r\n",
            "zz\r\n{}\r\n0\r\n\r\n",
        ),
    ] {
        let mut bytes = head("PUT", &put, extra);
        bytes.extend_from_slice(body.as_bytes());
        let p = raw(what, "PUT", &put, bytes).want(400, None);
        out.push(Probe { shape: false, ..p });
    }
    out
}

/// Sends one probe.
fn send(api: &ApiClient, p: &Probe) -> Result<ApiResponse, String> {
    if let Some(raw) = &p.raw {
        return http_send_raw(api.port, raw, p.read_timeout);
    }
    let mut headers = Vec::new();
    if let Some(ct) = &p.content_type {
        headers.push(("Content-Type", ct.as_str()));
    }
    api.request(
        &p.method,
        &p.target,
        &headers,
        p.body.as_deref(),
        p.read_timeout,
    )
}

/// What is wrong with the answer to `p` (empty: as wanted).
fn judge(p: &Probe, answer: &Result<ApiResponse, String>) -> Vec<String> {
    let r = match answer {
        Ok(r) => r,
        Err(e) => return vec![format!("no answer: {e}")],
    };
    let mut wrong = Vec::new();
    let shown = truncate(&r.text);
    if r.status != p.status {
        wrong.push(format!("status {}, want {}: {shown}", r.status, p.status));
    }
    if r.text.len() > MAX_ANSWER {
        wrong.push(format!(
            "the answer is {} bytes (more than {MAX_ANSWER}): the input is echoed unbounded",
            r.text.len()
        ));
    }
    if !p.shape {
        return wrong;
    }
    if old_envelope(&p.target) {
        let e1 = r.json["status"] == "error" && r.json["message"].is_string();
        let e3 = r.json["success"] == false && r.json["error"].is_string();
        if !(e1 || e3) {
            wrong.push(format!("not the E1/E3 envelope: {shown}"));
            return wrong;
        }
        // E1 and E3 have no field: the message names it (`ip_address` as "IP address" too).
        let said = r.json["message"]
            .as_str()
            .or(r.json["error"].as_str())
            .unwrap_or("")
            .to_lowercase()
            .replace('_', " ");
        if let Some(names) = p.field.as_ref().filter(|n| !n.is_empty()) {
            let names_it = |n: &String| {
                let n = n.to_lowercase().replace('_', " ");
                said.contains(&n) || said.contains(n.trim_end_matches('s'))
            };
            if !names.iter().any(names_it) {
                wrong.push(format!("the message does not name {names:?}: {shown}"));
            }
        }
        return wrong;
    }
    let e = &r.json["error"];
    let (code, message) = (e["code"].as_str(), e["message"].as_str());
    let field = &e["field"];
    let is_shape = code.is_some_and(|c| !c.is_empty())
        && message.is_some_and(|m| !m.is_empty())
        && (field.is_null() || field.is_string())
        && e.as_object().is_some_and(|o| o.contains_key("field"));
    if !is_shape {
        wrong.push(format!("not the error shape: {shown}"));
        return wrong;
    }
    let (code, message) = (code.unwrap(), message.unwrap());
    if !r
        .header("content-type")
        .is_some_and(|ct| ct.starts_with("application/json"))
    {
        wrong.push(format!("content-type {:?}", r.header("content-type")));
    }
    if let Some(want) = &p.code {
        if code != want {
            wrong.push(format!("error.code {code:?}, want {want:?}: {shown}"));
        }
    }
    let field = field.as_str().unwrap_or("");
    match &p.field {
        None => {}
        Some(names) if names.is_empty() => {
            let whole_body = field.is_empty() || field == "body";
            if !whole_body {
                wrong.push(format!(
                    "error.field {field:?}, want null (the whole body): {shown}"
                ));
            }
        }
        Some(names) => {
            // The field itself, or its object (`servers[0]` for a missing `address`) with the
            // message naming the member; a syntax error has no field, its message the path.
            let in_message = |n: &str| {
                message.contains(&format!("`{n}`"))
                    || message.contains(&format!("{n}:"))
                    || message.contains(&format!(".{n}"))
            };
            let named = names.iter().any(|n| {
                field.contains(n.as_str())
                    || ((!field.is_empty() || code == "invalid_json") && in_message(n))
            });
            if !named {
                wrong.push(format!(
                    "error.field {field:?} does not name {names:?}: {shown}"
                ));
            }
        }
    }
    let lower = message.to_lowercase();
    if !p.message.is_empty() && !p.message.iter().any(|m| lower.contains(&m.to_lowercase())) {
        wrong.push(format!("error.message lacks {:?}: {shown}", p.message));
    }
    wrong
}

/// Everything the API pass must leave as it was.
#[derive(Debug, PartialEq, Eq)]
struct ApiWorld {
    live: Vec<(std::path::PathBuf, Vec<u8>)>,
    settings: String,
    domains: String,
    blocks: String,
    applies: String,
    deliveries: String,
    compat_domains: String,
    runtime_blocks: std::collections::BTreeSet<String>,
    reloads: u32,
}

fn api_world(edge: &Edge, api: &ApiClient) -> ApiWorld {
    let text = |path: &str| {
        let r = api.get(path);
        assert_eq!(r.status, 200, "GET {path}: {r:?}");
        r.text
    };
    ApiWorld {
        live: edge.live_files(),
        settings: edge.settings_text(),
        domains: text("/v1/domains"),
        blocks: text("/v1/blocked-ips"),
        applies: text("/v1/applies"),
        deliveries: text("/v1/deliveries"),
        compat_domains: text("/api/domains"),
        runtime_blocks: runtime_blocked_keys(edge),
        reloads: edge.show_proc().master.reloads,
    }
}

#[test]
fn hostile_input_through_the_api_is_refused_and_changes_nothing() {
    let started = Instant::now();
    let strict = strict_findings();
    let (edge, _app) = control_edge();
    let api = Daemon::start(&edge);
    let client = api.client();
    let master = edge.master_pid();
    let before = api_world(&edge, &client);

    // The routes, from the OpenAPI document: each mutating one is known here.
    let mutating = client.mutating_routes();
    let mut body_routes = Vec::new();
    for route in &mutating {
        match (route.body.is_some(), base_body(&route.method, &route.path)) {
            (true, Some(base)) => body_routes.push((route.clone(), base)),
            (false, None) if BODYLESS.contains(&(route.method.as_str(), route.path.as_str())) => {}
            _ => panic!(
                "{} {}: a mutating route this test does not know; give it a base body (base_body) or list it in BODYLESS",
                route.method, route.path
            ),
        }
    }
    let plain_routes: Vec<ApiRoute> = body_routes.iter().map(|(r, _)| r.clone()).collect();

    // The CLI corpus through the API.
    let mut cases = corpus();
    cases.extend(generated());
    let mut probes = Vec::new();
    let mut skipped: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut from_cli_lines = 0;
    for case in &cases {
        match api_probes(case) {
            Ok(p) => {
                from_cli_lines += 1;
                probes.extend(p);
            }
            Err(_) => *skipped.entry(case.command.as_str()).or_default() += 1,
        }
    }
    let from_cli = probes.len();
    probes.extend(http_corpus(&plain_routes));
    let from_http = probes.len() - from_cli;
    for (route, base) in &body_routes {
        probes.extend(schema_probes(route, base));
    }
    probes.extend(list_probes());
    probes.extend(method_probes(&client.routes()));
    probes.extend(raw_probes(&client, &plain_routes));
    let generated_count = probes.len() - from_cli - from_http;

    let mut failures = Vec::new();
    let mut findings: Vec<(String, String)> = Vec::new();
    let mut statuses: std::collections::BTreeMap<u16, usize> = Default::default();
    // Requests marked with a finding that behave as wanted (the mark may cover more requests
    // than show the defect; none at all means the finding is fixed: remove its marks).
    let mut passing: std::collections::BTreeMap<String, usize> = Default::default();
    for p in &probes {
        let answer = send(&client, p);
        if let Ok(r) = &answer {
            *statuses.entry(r.status).or_default() += 1;
        }
        let wrong = judge(p, &answer);
        let health = http_call_with(
            client.port,
            "GET",
            "/health",
            None,
            None,
            None,
            Duration::from_secs(10),
        );
        assert!(
            matches!(&health, Ok(r) if r.status == 200),
            "{}: the daemon no longer answers /health 200: {health:?}\n{}",
            p.label(),
            api.log_text()
        );
        assert_eq!(
            edge.live_files(),
            before.live,
            "{}: the live files changed",
            p.label()
        );
        let accepted = matches!(&answer, Ok(r) if (200..300).contains(&r.status));
        match (&p.finding, wrong.is_empty()) {
            (Some(f), true) => *passing.entry(f.clone()).or_default() += 1,
            (None, true) => {}
            (Some(f), false) if !accepted => {
                let line = format!("[{f}] {}: {}", p.label(), wrong.join("; "));
                if strict {
                    failures.push(line);
                } else {
                    findings.push((f.clone(), line));
                }
            }
            _ => failures.push(format!("{}: {}", p.label(), wrong.join("; "))),
        }
    }

    // Nothing changed; HAProxy was never touched and still routes.
    let after = api_world(&edge, &client);
    assert_eq!(after.live, before.live, "live files");
    assert_eq!(after.settings, before.settings, "settings file");
    assert_eq!(after.domains, before.domains, "GET /v1/domains");
    assert_eq!(after.blocks, before.blocks, "GET /v1/blocked-ips");
    assert_eq!(
        after.applies, before.applies,
        "GET /v1/applies: new apply rows"
    );
    assert_eq!(after.deliveries, before.deliveries, "GET /v1/deliveries");
    assert_eq!(
        after.compat_domains, before.compat_domains,
        "GET /api/domains"
    );
    assert_eq!(
        after.runtime_blocks, before.runtime_blocks,
        "the runtime block map"
    );
    assert_eq!(after.reloads, before.reloads, "HAProxy reloads");
    assert_eq!(edge.master_pid(), master, "HAProxy's master");
    let r = edge.get(CONTROL_DOMAIN, "/");
    assert_eq!((r.status, r.body.as_str()), (200, "control"));

    // Two examples of each known finding (HAPCTL_STRICT_FINDINGS=1 lists them all).
    let mut by_id: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (id, line) in &findings {
        by_id.entry(id).or_default().push(line);
    }
    for lines in by_id.values() {
        for line in lines.iter().take(2) {
            eprintln!("known finding {line}");
        }
        if lines.len() > 2 {
            eprintln!("  … and {} more", lines.len() - 2);
        }
    }
    let ids: Vec<&str> = by_id.keys().copied().collect();
    let per_id: Vec<String> = by_id
        .iter()
        .map(|(id, lines)| format!("{id} ×{}", lines.len()))
        .collect();
    for (id, n) in &passing {
        if !ids.contains(&id.as_str()) {
            eprintln!("note: finding {id} is marked on {n} request(s) and none shows it now: remove the marks");
        }
    }
    let skipped: Vec<String> = skipped.iter().map(|(c, n)| format!("{c} {n}")).collect();
    eprintln!(
        "hostile input (API): {} cases ({from_cli} from {from_cli_lines} CLI corpus cases, \
         {from_http} from hostile_http.tsv, {generated_count} generated) in {:.1} s; \
         statuses {statuses:?}; CLI cases without an API route: {}; \
         {} failures, {} known findings ({})",
        probes.len(),
        started.elapsed().as_secs_f64(),
        skipped.join(", "),
        failures.len(),
        findings.len(),
        per_id.join(", ")
    );
    assert!(
        failures.is_empty(),
        "{} request(s) not refused as expected:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
