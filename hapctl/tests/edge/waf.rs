//! The web application firewall end to end: real HAProxy, the real agent (`hapctl waf serve`)
//! over libmodsecurity v3 and Debian's OWASP CRS, the access log through `hapctl serve`.

// `GET /v1/waf` and `POST /v1/waf/reload` against this file's lab.
mod api;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::daemon::{ApiResponse, Daemon};
use testkit::{free_port, http, Backend, Edge, Response};

const SHOP: &str = "shop.example.com";
const SQLI: &str = "/?id=1%27%20OR%20%271%27%3D%271";

struct Lab {
    // Dropped first: a `hapctl serve` still running when the edge stops its HAProxy starts a
    // new master (supervision), which outlived the test with its files deleted.
    daemon: Daemon,
    edge: Edge,
    _app: Backend,
    agent_port: u16,
    /// The CRS loader the agent reads (a copy of Debian's, so a test can break it).
    crs: PathBuf,
}

/// An edge whose `hapctl serve` runs the agent (direct mode), up and answering.
fn lab() -> Lab {
    lab_with_rules("")
}

/// [`lab`] with `rules` after Debian's CRS (the loader's copy).
fn lab_with_rules(rules: &str) -> Lab {
    let edge = Edge::new();
    let (agent_port, crs) = agent_settings(&edge, rules);
    edge.ok(&["haproxy", "start"]);
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let daemon = Daemon::start(&edge);
    wait_for("the agent is up", &|| agent_pid(&edge).is_some());
    // HAProxy's health check takes the agent in (rise 1, every second): a blocked attack says so.
    policy(&edge, &["--mode", "block"]);
    wait_for("HAProxy uses the agent", &|| get(&edge, SQLI).status == 403);
    Lab {
        edge,
        _app: app,
        daemon,
        agent_port,
        crs,
    }
}

/// `[waf]` for `edge`: the agent on a free port, reading a copy of Debian's CRS loader with
/// `rules` after it. The port, and the copy's path (a test can break it).
pub(crate) fn agent_settings(edge: &Edge, rules: &str) -> (u16, PathBuf) {
    let agent_port = free_port();
    let crs = edge.path("crs.load");
    let loader = std::fs::read_to_string(hapctl::settings::waf::DEBIAN_CRS).unwrap();
    std::fs::write(&crs, format!("{loader}\n{rules}\n")).unwrap();
    edge.set_setting_keys(
        "waf",
        &[
            ("listen", format!("127.0.0.1:{agent_port}")),
            ("crs", crs.display().to_string()),
        ],
    );
    (agent_port, crs)
}

/// The agent's PID, while its state file is fresh.
pub(crate) fn agent_pid(edge: &Edge) -> Option<i32> {
    // Exit 1 while it is down: the JSON says so too.
    let out = edge.run(&["waf", "status", "--json"]);
    let s: Value = serde_json::from_slice(&out.stdout).ok()?;
    (s["up"] == true)
        .then(|| s["pid"].as_i64().map(|p| p as i32))
        .flatten()
}

pub(crate) fn wait_for(what: &str, ok: &dyn Fn() -> bool) {
    wait_up_to(Duration::from_secs(20), what, ok)
}

pub(crate) fn wait_up_to(bound: Duration, what: &str, ok: &dyn Fn() -> bool) {
    let deadline = Instant::now() + bound;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        thread::sleep(Duration::from_millis(200));
    }
}

/// A request with an optional form body, every step bounded.
fn send(edge: &Edge, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut all = vec![
        ("User-Agent", "Mozilla/5.0 (X11; Linux x86_64)"),
        ("Accept", "text/html"),
    ];
    all.extend_from_slice(headers);
    if !body.is_empty() {
        all.push(("Content-Type", "application/x-www-form-urlencoded"));
    }
    let body = (!body.is_empty()).then_some(body.as_bytes());
    let raw = http::raw_request(method, path, SHOP, &all, body);
    let stream = http::connect(None, edge.port).unwrap();
    let answer = http::exchange(stream, &raw, Duration::from_secs(10)).unwrap();
    Response {
        status: answer.status,
        body: answer.text(),
        seen_real_ip: String::new(),
        head: answer.head.to_lowercase(),
    }
}

fn get(edge: &Edge, path: &str) -> Response {
    send(edge, "GET", path, &[], "")
}

/// The access-log record of `r` (by its request id), once `hapctl serve` wrote it.
fn record(edge: &Edge, r: &Response) -> Value {
    let id = r.header("x-request-id").expect("x-request-id").to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(edge.path("logs/access.log")).unwrap_or_default();
        if let Some(v) = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["id"] == id.as_str())
        {
            return v;
        }
        assert!(Instant::now() < deadline, "no log line for {id}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn policy(edge: &Edge, args: &[&str]) -> String {
    let mut all = vec!["waf", "policy", SHOP];
    all.extend_from_slice(args);
    edge.ok(&all)
}

fn rules(v: &Value) -> Vec<String> {
    v["waf_rules"]
        .as_str()
        .unwrap()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn attacks_get_the_403_page_with_the_crs_rule_logged_and_clean_traffic_passes() {
    let lab = lab();
    let edge = &lab.edge;
    // A policy change is a map change: no check, no reload.
    let out = policy(edge, &["--mode", "block", "--body-limit", "8000"]);
    assert!(out.contains("reloads: 0"), "{out}");

    let clean = get(edge, "/products?page=2&sort=price");
    assert_eq!(clean.status, 200, "{}", clean.body);
    assert_eq!(record(edge, &clean)["waf"], "pass");

    let cases: [(&str, Response, &str); 4] = [
        ("sqli in the query", get(edge, SQLI), "942100"),
        (
            "xss in the body",
            send(
                edge,
                "POST",
                "/comment",
                &[],
                "text=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            ),
            "941100",
        ),
        (
            "path traversal",
            get(edge, "/download?file=..%2F..%2F..%2Fetc%2Fpasswd"),
            "930100",
        ),
        (
            "scanner",
            send(edge, "GET", "/", &[("User-Agent", "sqlmap/1.7.2")], ""),
            "913100",
        ),
    ];
    for (what, r, rule) in cases {
        assert_eq!(r.status, 403, "{what}: {}", r.body);
        let id = r.header("x-request-id").unwrap().to_string();
        // The old manager's headers on a block (PEER-API §2.8), for clients that read them.
        assert_eq!(r.header("waf-block"), Some("request"), "{what}: {}", r.head);
        assert_eq!(r.header("x-request-reference"), Some(id.as_str()), "{what}");
        assert!(
            r.body.contains(&id) && r.body.contains("web application firewall"),
            "{what}: {}",
            r.body
        );
        let log = record(edge, &r);
        assert_eq!(log["waf"], "block", "{what}: {log}");
        assert!(rules(&log).contains(&rule.to_string()), "{what}: {log}");
        assert!(
            log["denied_by"].as_str().unwrap().starts_with("waf:"),
            "{what}: {log}"
        );
    }

    // Detect-only: the same attack passes, logged with the same rules.
    policy(edge, &["--mode", "detect"]);
    let r = get(edge, SQLI);
    assert_eq!(r.status, 200);
    let log = record(edge, &r);
    assert_eq!(log["waf"], "detect");
    assert!(rules(&log).contains(&"942100".to_string()), "{log}");

    // An exclusion under a path lets that request through there, and only there.
    policy(edge, &["--mode", "block"]);
    let counted = rules(&log);
    let mut args = vec![];
    let excl: Vec<String> = counted.iter().map(|id| format!("{id}@/search")).collect();
    for e in &excl {
        args.extend(["--exclude", e.as_str()]);
    }
    policy(edge, &args);
    let through = get(edge, &SQLI.replacen('/', "/search", 1));
    assert_eq!(through.status, 200, "{}", through.body);
    assert_eq!(record(edge, &through)["waf"], "pass");
    assert_eq!(get(edge, SQLI).status, 403);

    // A known false positive of the CRS at paranoia 1: English prose in a comment form reads
    // as a Windows command injection (932115). Excluded under /comment, it passes there and
    // still blocks elsewhere.
    const PROSE: &str =
        "comment=I%20will%20be%20there%20at%206%3B%20select%20a%20seat%20from%20the%20front";
    let fp = send(edge, "POST", "/comment", &[], PROSE);
    assert_eq!(fp.status, 403, "{}", fp.body);
    assert_eq!(rules(&record(edge, &fp)), ["932115"]);
    policy(edge, &["--exclude", "932115@/comment"]);
    let through = send(edge, "POST", "/comment", &[], PROSE);
    assert_eq!(through.status, 200, "{}", through.body);
    assert_eq!(record(edge, &through)["waf"], "pass");
    assert_eq!(send(edge, "POST", "/contact", &[], PROSE).status, 403);

    // The agent's own counters (its state file is rewritten every second): the lab's probe
    // (one 403), seven blocks and a detection here.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status: Value = serde_json::from_str(&edge.ok(&["waf", "status", "--json"])).unwrap();
        assert_eq!(status["up"], true, "{status}");
        if status["blocked"] == 8 {
            assert_eq!(status["detected"], 1, "{status}");
            assert_eq!(status["by_rule"]["942100"], 4, "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "{status}");
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_stuck_agent_is_the_domains_failure_mode_and_its_return_is_automatic() {
    let lab = lab();
    let edge = &lab.edge;
    policy(edge, &["--mode", "block", "--fail", "open"]);

    // Stopped (SIGSTOP): no answer within HAProxy's processing timeout, then its health check
    // marks it down. The supervision does not restart a process that has not exited.
    let pid = agent_pid(edge).unwrap();
    hapctl::process::send_signal(pid, libc::SIGSTOP).unwrap();
    // Fail-open: the attack passes, marked in the log (slow, then down: both are errors).
    for _ in 0..3 {
        let r = get(edge, SQLI);
        assert_eq!(r.status, 200);
        let log = record(edge, &r);
        assert_eq!(log["waf"], "unavailable");
        // Why: HAProxy's SPOE error code (a timeout, then no agent to connect to).
        assert!(
            !matches!(log["waf_error"].as_str(), None | Some("" | "-")),
            "{log}"
        );
        thread::sleep(Duration::from_millis(700));
    }
    // Fail-closed: 503 with the page and the request id.
    policy(edge, &["--fail", "closed"]);
    let r = get(edge, "/");
    assert_eq!(r.status, 503);
    assert!(
        r.body.contains(r.header("x-request-id").unwrap()),
        "{}",
        r.body
    );
    let log = record(edge, &r);
    assert_eq!(
        (log["waf"].as_str(), log["denied_by"].as_str()),
        (Some("unavailable"), Some("waf-unavailable"))
    );

    // The agent answers again: no reload, no command; the health check brings it back in.
    hapctl::process::send_signal(pid, libc::SIGCONT).unwrap();
    wait_for("the edge uses the agent again", &|| {
        get(edge, SQLI).status == 403
    });
    assert_eq!(get(edge, "/").status, 200);
}

/// `hapctl status --json`'s `waf` object, and the text form's WAF line.
fn edge_status(edge: &Edge) -> (Value, String) {
    let json: Value = serde_json::from_slice(&edge.run(&["status", "--json"]).stdout).unwrap();
    let text = String::from_utf8_lossy(&edge.run(&["status"]).stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("waf agent:"))
        .unwrap_or_else(|| panic!("no waf line in\n{text}"))
        .to_string();
    (json["waf"].clone(), line)
}

#[test]
fn a_killed_agent_that_cannot_start_is_the_domains_failure_mode_until_it_can() {
    let lab = lab();
    let edge = &lab.edge;
    policy(edge, &["--mode", "block", "--fail", "open"]);
    let (health, line) = edge_status(edge);
    assert_eq!(health["up"], true, "{health}");
    assert!(line.starts_with("waf agent: up"), "{line}");

    // Rules libmodsecurity refuses, then SIGKILL: every start the supervision makes fails,
    // so the port is closed (connection refused, then the health check marks it down).
    let good = std::fs::read_to_string(&lab.crs).unwrap();
    std::fs::write(
        &lab.crs,
        format!("{good}\nSecRule ARGS \"x\" \"id:1,nonsense\"\n"),
    )
    .unwrap();
    let pid = agent_pid(edge).unwrap();
    hapctl::process::send_signal(pid, libc::SIGKILL).unwrap();
    // `hapctl status` says so at once (the state file's PID is gone), not when it is stale.
    wait_for("hapctl status shows the agent down", &|| {
        edge_status(edge).0["up"] == false
    });
    let (health, line) = edge_status(edge);
    assert_eq!(health["pid"], pid, "{health}");
    assert!(line.starts_with("waf agent: DOWN"), "{line}");

    // Fail-open: the attack passes, marked in the log.
    for _ in 0..3 {
        let r = get(edge, SQLI);
        assert_eq!(r.status, 200, "{}", r.body);
        let log = record(edge, &r);
        assert_eq!(
            (log["waf"].as_str(), log["denied_by"].as_str()),
            (Some("unavailable"), Some("-")),
            "{log}"
        );
        assert!(
            !matches!(log["waf_error"].as_str(), None | Some("" | "-")),
            "{log}"
        );
    }
    // Fail-closed: 503 with the request id, logged.
    policy(edge, &["--fail", "closed"]);
    let r = get(edge, "/products?page=2");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body.contains(r.header("x-request-id").unwrap()),
        "{}",
        r.body
    );
    assert_eq!(record(edge, &r)["denied_by"], "waf-unavailable");
    let log = std::fs::read_to_string(edge.path("waf-agent.log")).unwrap_or_default();
    assert!(
        log.contains("refused"),
        "the agent's log says why it does not start:\n{log}"
    );

    // The rules fixed: the supervision's next start (its pause is at most 30 s) serves, and
    // HAProxy's health check takes it in; nothing is run.
    std::fs::write(&lab.crs, good).unwrap();
    wait_up_to(Duration::from_secs(60), "the agent is back", &|| {
        agent_pid(edge).is_some_and(|p| p != pid)
    });
    wait_for("the edge uses the agent again", &|| {
        get(edge, SQLI).status == 403
    });
    assert_eq!(get(edge, "/products?page=2").status, 200);
    let (health, line) = edge_status(edge);
    assert_eq!(health["up"], true, "{health}");
    assert!(line.starts_with("waf agent: up"), "{line}");
}

/// A rule after the CRS that counts when the agent sees this client address.
const REAL_CLIENT: &str = "198.51.100.23";

#[test]
fn the_agent_sees_the_real_client_and_a_bounded_body() {
    let lab = lab_with_rules(&format!(
        "SecRule REMOTE_ADDR \"@ipMatch {REAL_CLIENT}\" \"id:948999,phase:1,pass,log,severity:CRITICAL,msg:'hapctl test: the real client'\""
    ));
    let edge = &lab.edge;
    policy(edge, &["--mode", "block"]);
    let from = |ip: &str| send(edge, "GET", "/", &[("X-Forwarded-For", ip)], "");

    // An untrusted peer's X-Forwarded-For is not the client: the agent sees 127.0.0.1.
    let r = from(REAL_CLIENT);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(record(edge, &r)["waf"], "pass");
    // Through a trusted proxy the agent sees the client the edge derived.
    edge.ok(&["proxy", "add", "127.0.0.1"]);
    wait_for("the proxy is trusted", &|| from(REAL_CLIENT).status == 403);
    let r = from(REAL_CLIENT);
    let log = record(edge, &r);
    assert_eq!(
        (r.status, log["client"].as_str()),
        (403, Some(REAL_CLIENT)),
        "{log}"
    );
    assert_eq!(rules(&log), ["948999"], "{log}");
    assert_eq!(from("198.51.100.24").status, 200);

    // The body: inspected up to the domain's limit, and never past [waf] body_max (8192),
    // the bound of one SPOP frame. An attack behind the bound is not seen: the design.
    let xss = "text=%3Cscript%3Ealert(1)%3C%2Fscript%3E";
    let behind = |n: usize| format!("pad={}&{xss}", "a".repeat(n));
    let post_with = |headers: &[(&str, &str)], body: &str| {
        let r = send(edge, "POST", "/comment", headers, body);
        let log = record(edge, &r);
        (r.status, log["waf"].as_str().unwrap().to_string())
    };
    let post = |body: &str| post_with(&[], body);
    policy(edge, &["--body-limit", "200"]);
    assert_eq!(post(&behind(100)), (403, "block".into()));
    assert_eq!(post(&behind(300)), (200, "pass".into()));
    policy(edge, &["--body-limit", "1048576"]);
    assert_eq!(post(&behind(300)), (403, "block".into()));
    assert_eq!(post(&behind(8000)), (403, "block".into()));
    assert_eq!(post(&behind(9000)), (200, "pass".into()));

    // Large headers leave the body less room in the frame: HAProxy cuts it short of
    // body_max. What arrived can still block; a cut body is never passed as clean, it is the
    // domain's failure mode (here open: passed, logged unavailable; closed: 503).
    let big = "b".repeat(7000);
    let large = [("X-Big", big.as_str()), ("X-Big2", big.as_str())];
    assert_eq!(post_with(&large, &behind(0)), (403, "block".into()));
    assert_eq!(
        post_with(&large, &behind(3000)),
        (200, "unavailable".into())
    );
    // The log says why: the agent's own error.
    let r = send(edge, "POST", "/comment", &large, &behind(3000));
    assert_eq!(record(edge, &r)["waf_error"], "body");
    assert_eq!(post_with(&large, "pad=clean"), (200, "pass".into()));
    policy(edge, &["--fail", "closed"]);
    assert_eq!(
        post_with(&large, &behind(3000)),
        (503, "unavailable".into())
    );
    // The agent counts them as errors (its state file is rewritten every second).
    wait_for("two cut bodies counted", &|| {
        agent_counter(edge, "errors") >= 2
    });
}

#[test]
fn hostile_policies_are_refused_and_change_nothing() {
    let edge = Edge::new();
    // Without [waf] nothing can be switched on.
    let out = edge.expect_code(2, &["waf", "policy", SHOP, "--mode", "block"]);
    assert!(out.contains("[waf]"), "{out}");
    edge.set_setting_keys("waf", &[("listen", format!("127.0.0.1:{}", free_port()))]);
    for (args, field) in [
        (&["--paranoia", "9"][..], "paranoia"),
        (&["--paranoia", "1;"], "paranoia"),
        (&["--threshold", "0"], "threshold"),
        (&["--threshold=-5"], "threshold"),
        (&["--body-limit", "99999999"], "body_limit"),
        (&["--exclude", "0"], "from 1 to 999999999"),
        (&["--exclude", "942100@search"], "must start with '/'"),
        (&["--exclude", "942100@/a b"], "contains"),
        (&["--exclude", "942100@/a:b"], "contains"),
        (&["--mode", "deny"], "mode"),
        (&["--fail", "maybe"], "fail"),
    ] {
        let mut all = vec!["waf", "policy", SHOP];
        all.extend_from_slice(args);
        let out = edge.expect_code(2, &all);
        assert!(out.contains(field), "{args:?}: {out}");
    }
    let out = edge.expect_code(7, &["waf", "policy", SHOP, "--mode", "block"]);
    assert!(out.contains(SHOP), "{out}");
    assert!(!edge.settings_text().is_empty());
    let db_rows = edge.ok(&["waf", "policy", SHOP]);
    assert!(db_rows.contains("off:open:1:5:8192:"), "{db_rows}");
}

#[test]
fn serve_keeps_the_agent_running() {
    let lab = lab();
    let edge = &lab.edge;
    policy(edge, &["--mode", "block"]);
    assert_eq!(get(edge, SQLI).status, 403);
    let first = agent_pid(edge).unwrap();
    // Killed, it is started again, and HAProxy uses the new one without being told.
    hapctl::process::send_signal(first, libc::SIGKILL).unwrap();
    wait_for("a new agent", &|| {
        agent_pid(edge).is_some_and(|p| p != first)
    });
    wait_for("the new agent blocks", &|| get(edge, SQLI).status == 403);
    // The dashboard's timeline has it: down then up, or a new PID if no look fell between.
    let api = lab.daemon.client();
    wait_for("the agent's restart among the edge's events", &|| {
        let events = api.get("/v1/traffic?points=*").json["events"].clone();
        let kinds: Vec<&str> = events
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["kind"].as_str())
            .collect();
        kinds.ends_with(&["waf-restarted"]) || kinds.ends_with(&["waf-down", "waf-up"])
    });
    // The daemon stops its agent with it.
    let second = agent_pid(edge).unwrap();
    drop(lab);
    let gone = !std::path::Path::new(&format!("/proc/{second}")).exists();
    assert!(gone, "the agent outlived hapctl serve");
}

/// The value of `name` in `GET /metrics`, once it is at least `min` (the agent rewrites its
/// state file every second); the whole text with it.
fn metric_at_least(lab: &Lab, name: &str, min: u64) -> (u64, String) {
    let api = lab.daemon.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = api.get("/metrics").text;
        let value = metric(&text, name);
        if value.is_some_and(|v| v >= min) {
            return (value.unwrap(), text);
        }
        assert!(Instant::now() < deadline, "{name} < {min} in\n{text}");
        thread::sleep(Duration::from_millis(200));
    }
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
}

fn waf_of(api: &testkit::daemon::ApiClient) -> Value {
    let r = api.get(&format!("/v1/domains/{SHOP}"));
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["waf"].clone()
}

#[test]
fn the_domain_api_carries_the_policy_and_metrics_export_the_agents_counters() {
    let lab = lab();
    let (edge, api) = (&lab.edge, lab.daemon.client());
    let server = json!([{"address": lab._app.addr()}]);
    // What the CLI set shows, typed, in the one domain and in the list.
    let waf = waf_of(&api);
    assert_eq!(
        waf,
        json!({"mode": "block", "fail": "open", "paranoia": 1, "threshold": 5, "body_limit": 8192, "exclusions": []})
    );
    let list = api.get("/v1/domains").json;
    assert_eq!(list[0]["waf"]["mode"], "block", "{list}");

    // PUT with a policy: detect-only, an exclusion under /search; a runtime map change.
    let policy = json!({"mode": "detect", "fail": "closed", "paranoia": 2, "threshold": 7,
        "body_limit": 4096, "exclusions": [{"rule": 942100, "path": "/search"}, {"rule": 920350}]});
    let r = api.call(
        "PUT",
        &format!("/v1/domains/{SHOP}"),
        Some(&json!({"servers": server, "waf": policy})),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(waf_of(&api), policy);
    let map = std::fs::read_to_string(edge.path("live/maps/waf.map")).unwrap();
    assert!(
        map.contains(&format!(
            "{SHOP} detect:closed:2:7:4096:942100@/search,920350"
        )),
        "{map}"
    );
    let r = get(edge, SQLI);
    assert_eq!(
        (r.status, record(edge, &r)["waf"].as_str()),
        (200, Some("detect"))
    );

    // A PUT without `waf` keeps the policy; so does the old manager's POST /api/domain.
    let r = api.call(
        "PUT",
        &format!("/v1/domains/{SHOP}"),
        Some(&json!({"servers": server})),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(waf_of(&api), policy);
    let (host, port) = lab
        ._app
        .addr()
        .rsplit_once(':')
        .map(|(h, p)| (h.to_string(), p.parse::<u16>().unwrap()))
        .unwrap();
    let old = json!({"domain": SHOP, "backend_name": "shop", "servers": [{"name": "s1", "address": host, "port": port}]});
    let r = api.call("POST", "/api/domain", Some(&old));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(waf_of(&api), policy);

    // Hostile policies: a 400 naming the field, nothing changed (state, map, HAProxy's map).
    let many: Vec<Value> = (1..=33).map(|n| json!({"rule": n})).collect();
    for (bad, field) in [
        (json!({"mode": "deny"}), "waf.mode"),
        (json!({"mode": 5}), "waf.mode"),
        (json!({"fail": "open"}), "waf.mode"),
        (json!({"mode": "block", "fail": "maybe"}), "waf.fail"),
        (json!({"mode": "block", "paranoia": 9}), "waf.paranoia"),
        (json!({"mode": "block", "paranoia": "1"}), "waf.paranoia"),
        (json!({"mode": "block", "paranoia": 1.5}), "waf.paranoia"),
        (json!({"mode": "block", "threshold": 0}), "waf.threshold"),
        (json!({"mode": "block", "threshold": -5}), "waf.threshold"),
        (
            json!({"mode": "block", "body_limit": 99_999_999}),
            "waf.body_limit",
        ),
        (
            json!({"mode": "block", "exclusions": [{"rule": 0}]}),
            "waf.exclusions[0].rule",
        ),
        (
            json!({"mode": "block", "exclusions": [{"rule": 1_000_000_000u64}]}),
            "waf.exclusions[0].rule",
        ),
        (
            json!({"mode": "block", "exclusions": [{"rule": 1, "path": "search"}]}),
            "waf.exclusions[0].path",
        ),
        (
            json!({"mode": "block", "exclusions": [{"rule": 1, "path": "/a b"}]}),
            "waf.exclusions[0].path",
        ),
        (
            json!({"mode": "block", "exclusions": [{"rule": 1, "path": "/a:b"}]}),
            "waf.exclusions[0].path",
        ),
        (
            json!({"mode": "block", "exclusions": [{"rule": 1, "hostile": 1}]}),
            "waf.exclusions[0]",
        ),
        (
            json!({"mode": "block", "exclusions": ["942100"]}),
            "waf.exclusions[0]",
        ),
        (
            json!({"mode": "block", "exclusions": many}),
            "waf.exclusions",
        ),
        (json!({"mode": "block", "hostile": 1}), "waf"),
        (json!("block"), "waf"),
        (json!([]), "waf"),
    ] {
        let body = json!({"servers": server, "waf": bad});
        let r: ApiResponse = api.call("PUT", &format!("/v1/domains/{SHOP}"), Some(&body));
        assert_eq!(
            (r.status, r.error_code()),
            (400, "invalid"),
            "{bad}: {}",
            r.text
        );
        assert!(
            r.error_field().starts_with(field),
            "{bad}: {field} vs {}",
            r.text
        );
        assert_eq!(waf_of(&api), policy, "{bad}");
    }
    assert_eq!(
        std::fs::read_to_string(edge.path("live/maps/waf.map")).unwrap(),
        map
    );
    // The schema documents what the route takes.
    let doc = api.get("/openapi.json").json;
    let schema = &doc["paths"]["/v1/domains/{name}"]["put"]["requestBody"]["content"]
        ["application/json"]["schema"];
    assert_eq!(
        schema["properties"]["waf"]["properties"]["mode"]["enum"],
        json!(["off", "detect", "block"])
    );

    // Off through the API: the map line goes, nothing is inspected.
    let off = json!({"servers": server, "waf": {"mode": "off"}});
    assert_eq!(
        api.call("PUT", &format!("/v1/domains/{SHOP}"), Some(&off))
            .status,
        200
    );
    assert!(!std::fs::read_to_string(edge.path("live/maps/waf.map"))
        .unwrap()
        .contains(SHOP));
    assert_eq!(waf_of(&api)["mode"], "off");

    // Block again, and the agent's counters on the daemon's /metrics after a blocked request.
    let block = json!({"servers": server, "waf": {"mode": "block"}});
    assert_eq!(
        api.call("PUT", &format!("/v1/domains/{SHOP}"), Some(&block))
            .status,
        200
    );
    assert_eq!(get(edge, SQLI).status, 403);
    // The lab's own probe blocked one, this test one; detect passed one.
    let (_, text) = metric_at_least(&lab, "hapctl_waf_blocked_total", 2);
    let value = |name: &str| metric(&text, name).unwrap_or_else(|| panic!("no {name} in\n{text}"));
    assert_eq!(value("hapctl_waf_agent_up"), 1);
    assert!(value("hapctl_waf_detected_total") >= 1, "{text}");
    assert!(
        value("hapctl_waf_rule_hits_total{rule=\"942100\"}") >= 3,
        "{text}"
    );
    let inspected = value("hapctl_waf_inspected_total");
    assert!(inspected >= 3, "{text}");
    assert_eq!(
        value("hapctl_waf_inspection_duration_seconds_count"),
        inspected
    );
    assert_eq!(
        value("hapctl_waf_inspection_duration_seconds_bucket{le=\"+Inf\"}"),
        inspected
    );
}

#[test]
fn rules_are_listed_and_a_request_is_evaluated_offline() {
    let edge = Edge::new();
    edge.set_setting_keys("waf", &[("listen", format!("127.0.0.1:{}", free_port()))]);
    let rules: Value = serde_json::from_str(&edge.ok(&["waf", "rules", "--json"])).unwrap();
    assert!(
        rules["crs"].as_str().unwrap().starts_with("OWASP_CRS/3."),
        "{}",
        rules["crs"]
    );
    assert!(rules["engine"]
        .as_str()
        .unwrap()
        .starts_with("ModSecurity v3"));
    assert!(rules["removed"]
        .as_array()
        .unwrap()
        .contains(&json!(901321)));
    let sqli = rules["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["file"]
                .as_str()
                .unwrap()
                .ends_with("REQUEST-942-APPLICATION-ATTACK-SQLI.conf")
        })
        .expect("the SQLi rules");
    let r942100 = sqli["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == 942100)
        .unwrap();
    assert_eq!(
        (r942100["phase"].as_u64(), r942100["paranoia"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(rules["rules"].as_u64().unwrap() > 300);
    // Its text form: one line per rule.
    let text = edge.ok(&["waf", "rules"]);
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("942100  phase 2  PL1")),
        "{text}"
    );

    // `waf test`: the attack scores over the threshold with its rule, clean traffic passes,
    // an exclusion of every counted rule lets it through.
    let test = |args: &[&str]| -> Value {
        let mut all = vec!["waf", "test", "--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&edge.ok(&all)).unwrap()
    };
    let attack = test(&[
        &format!("http://{SHOP}{SQLI}"),
        "-H",
        "User-Agent: Mozilla/5.0",
    ]);
    assert_eq!(attack["verdict"], "block", "{attack}");
    let counted: Vec<String> = attack["counted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.to_string())
        .collect();
    assert!(counted.contains(&"942100".to_string()), "{attack}");
    let detect = test(&[SQLI, "--policy", "detect:open:1:5:8192:"]);
    assert_eq!(detect["verdict"], "detect");
    let clean = test(&[
        "/products?page=2",
        "-H",
        "User-Agent: Mozilla/5.0",
        "-H",
        "Accept: text/html",
    ]);
    assert_eq!(clean["verdict"], "pass", "{clean}");
    let policy = format!("block:open:1:5:8192:{}", counted.join(","));
    assert_eq!(test(&[SQLI, "--policy", &policy])["verdict"], "pass");
    let body = test(&[
        "/comment",
        "--method",
        "POST",
        "-H",
        "Content-Type: application/x-www-form-urlencoded",
        "--body",
        "text=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    ]);
    assert_eq!(body["verdict"], "block", "{body}");
    // Refused input names its problem.
    // The URL's host: its Host header and its stored policy (a domain of this edge).
    edge.ok(&["domain", "add", SHOP, "--server", "127.0.0.1:9"]);
    edge.ok(&[
        "waf",
        "policy",
        SHOP,
        "--mode",
        "detect",
        "--threshold",
        "50",
    ]);
    let hosted = test(&[
        &format!("https://{SHOP}{SQLI}"),
        "-H",
        "User-Agent: Mozilla/5.0",
    ]);
    assert_eq!(
        (
            &hosted["verdict"],
            &hosted["policy_from"],
            &hosted["threshold"]
        ),
        (&json!("pass"), &json!(format!("{SHOP}'s")), &json!(50)),
        "{hosted}"
    );
    // A bare path has no Host header: the CRS counts it (920280).
    let bare = test(&[SQLI, "--domain", SHOP]);
    assert_eq!(bare["policy_from"], format!("{SHOP}'s"), "{bare}");
    assert!(
        bare["matched"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == 920280),
        "{bare}"
    );
    let out = edge.expect_code(2, &["waf", "test", "search?q=1"]);
    assert!(out.contains("url"), "{out}");
    let out = edge.expect_code(2, &["waf", "test", "/", "-H", "Bad Name: 1"]);
    assert!(out.contains("header"), "{out}");
    let out = edge.expect_code(2, &["waf", "test", "/", "--policy", "block:open:9:5:8192:"]);
    assert!(out.contains("paranoia"), "{out}");
}

/// The peer ports of HAProxy's established connections to the agent (IPv4 loopback).
fn agent_connections(port: u16) -> BTreeSet<u16> {
    // State 01: ESTABLISHED, seen from the agent's side.
    tcp_peers(port, "01")
}

/// HAProxy's ports whose connection to the agent the agent closed first: their TIME_WAIT
/// (state 06, a minute long) is on the agent's side. One HAProxy closed is on HAProxy's.
fn closed_by_agent(port: u16) -> BTreeSet<u16> {
    tcp_peers(port, "06")
}

/// The peers' ports of the agent's side (local port `port`) of connections in `state`.
fn tcp_peers(port: u16, state: &str) -> BTreeSet<u16> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_of = |a: &str| u16::from_str_radix(a.rsplit(':').next()?, 16).ok();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[3] == state && port_of(f[1]) == Some(port))
                .then(|| port_of(f[2]))
                .flatten()
        })
        .collect()
}

fn agent_counter(edge: &Edge, name: &str) -> u64 {
    let s: Value = serde_json::from_str(&edge.ok(&["waf", "status", "--json"])).unwrap();
    s[name].as_u64().unwrap_or_else(|| panic!("{name}: {s}"))
}

#[test]
fn a_rules_reload_keeps_haproxys_connections_and_every_request_inspected() {
    const MARKER: &str = "hapctl-reload-marker";
    let lab = lab();
    let edge = &lab.edge;
    assert_eq!(
        get(edge, &format!("/{MARKER}")).status,
        200,
        "no such rule yet"
    );
    // HAProxy's SPOP connections that last (the health checks' are closed at once).
    for _ in 0..5 {
        assert_eq!(get(edge, SQLI).status, 403);
    }
    let first = agent_connections(lab.agent_port);
    thread::sleep(Duration::from_millis(500));
    let before: BTreeSet<u16> = first
        .intersection(&agent_connections(lab.agent_port))
        .copied()
        .collect();
    assert!(!before.is_empty(), "no lasting SPOP connection: {first:?}");
    let pid = agent_pid(edge).unwrap();

    // Traffic the whole time: every attack blocked, every clean request inspected and passed.
    let stop = AtomicBool::new(false);
    let (answers, reloaded) = thread::scope(|s| {
        let traffic = s.spawn(|| {
            let mut answers = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                answers.push(("attack", get(edge, SQLI)));
                answers.push(("clean", get(edge, "/products?page=2")));
            }
            answers
        });
        // A changed rule set: a CRS-range rule (it scores) for a marker path.
        let mut loader = std::fs::read_to_string(&lab.crs).unwrap();
        loader += &format!("\nSecRule REQUEST_URI \"@contains {MARKER}\" \"id:944990,phase:1,pass,log,severity:CRITICAL,msg:'reload marker'\"\n");
        std::fs::write(&lab.crs, loader).unwrap();
        let out = edge.ok(&["waf", "reload"]);
        thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        (traffic.join().unwrap(), out)
    });
    assert!(reloaded.contains("rules reloaded"), "{reloaded}");
    // The new rule serves.
    let marked = get(edge, &format!("/{MARKER}"));
    assert_eq!(marked.status, 403, "{}", marked.body);
    assert_eq!(rules(&record(edge, &marked)), ["944990"]);
    assert!(answers.len() >= 4, "{}", answers.len());
    for (what, r) in &answers {
        let log = record(edge, r);
        let want = if *what == "attack" {
            (403, "block")
        } else {
            (200, "pass")
        };
        assert_eq!(
            (r.status, log["waf"].as_str().unwrap()),
            want,
            "{what}: {log}"
        );
    }
    // The reload closes none of HAProxy's connections. From 3.1 HAProxy itself may close an
    // idle one of its pool (seen in whole-suite runs on 3.2 and 3.4): a closed one must be
    // HAProxy's doing. The health checks' connections, which the agent ends, show that the
    // agent's closes are seen.
    let after = agent_connections(lab.agent_port);
    let dropped = closed_by_agent(lab.agent_port);
    assert!(!dropped.is_empty(), "no health check's close seen");
    assert!(
        before.is_disjoint(&dropped),
        "the agent closed connections: {before:?} then {after:?}, closed by the agent {dropped:?}"
    );
    assert_eq!(
        agent_pid(edge),
        Some(pid),
        "the agent was restarted, not reloaded"
    );
    assert_eq!(agent_counter(edge, "reloads"), 1);

    // Rules libmodsecurity refuses: the reload says so, the old rules keep serving.
    let mut loader = std::fs::read_to_string(&lab.crs).unwrap();
    loader += "\nSecRule ARGS \"@rx x\" \"id:1,phase:1,nonsense\"\n";
    std::fs::write(&lab.crs, loader).unwrap();
    let out = edge.run(&["waf", "reload"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("refused"), "{text}");
    assert_eq!(agent_counter(edge, "reload_failures"), 1);
    assert_eq!(get(edge, SQLI).status, 403);
    assert_eq!(get(edge, "/products?page=2").status, 200);
    assert!(before.is_disjoint(&closed_by_agent(lab.agent_port)));
}
