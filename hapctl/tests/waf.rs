//! The web application firewall end to end: real HAProxy, the real agent (`hapctl waf serve`)
//! over libmodsecurity v3 and Debian's OWASP CRS, the access log through `hapctl serve`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::{free_port, Backend, Edge, Response};
use serde_json::Value;

const SHOP: &str = "shop.example.com";
const SQLI: &str = "/?id=1%27%20OR%20%271%27%3D%271";

struct Lab {
    edge: Edge,
    _app: Backend,
    _daemon: Daemon,
}

/// An edge whose `hapctl serve` runs the agent (direct mode), up and answering.
fn lab() -> Lab {
    let edge = Edge::new();
    edge.set_setting_keys("waf", &[("listen", format!("127.0.0.1:{}", free_port()))]);
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
        _daemon: daemon,
    }
}

/// The agent's PID, while its state file is fresh.
fn agent_pid(edge: &Edge) -> Option<i32> {
    // Exit 1 while it is down: the JSON says so too.
    let out = edge.run(&["waf", "status", "--json"]);
    let s: Value = serde_json::from_slice(&out.stdout).ok()?;
    (s["up"] == true)
        .then(|| s["agent"]["pid"].as_i64().map(|p| p as i32))
        .flatten()
}

fn wait_for(what: &str, ok: &dyn Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        thread::sleep(Duration::from_millis(200));
    }
}

/// A request with an optional form body, every step bounded.
fn send(edge: &Edge, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let addr = SocketAddr::from(([127, 0, 0, 1], edge.port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {SHOP}\r\nConnection: close\r\n");
    req += "User-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\nAccept: text/html\r\n";
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    if !body.is_empty() {
        req += "Content-Type: application/x-www-form-urlencoded\r\n";
        req += &format!("Content-Length: {}\r\n", body.len());
    }
    req += "\r\n";
    req += body;
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Response {
        status: status.unwrap_or_else(|| panic!("no status line in {text:?}")),
        body: body.to_string(),
        seen_real_ip: String::new(),
        head: head.to_lowercase(),
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

    // The agent's own counters (its state file is rewritten every second).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status: Value = serde_json::from_str(&edge.ok(&["waf", "status", "--json"])).unwrap();
        assert_eq!(status["up"], true, "{status}");
        if status["agent"]["blocked"] == 5 {
            assert_eq!(status["agent"]["detected"], 1, "{status}");
            assert_eq!(status["agent"]["by_rule"]["942100"], 3, "{status}");
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
        assert_eq!(record(edge, &r)["waf"], "unavailable");
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
    // The daemon stops its agent with it.
    let second = agent_pid(edge).unwrap();
    drop(lab);
    let gone = !std::path::Path::new(&format!("/proc/{second}")).exists();
    assert!(gone, "the agent outlived hapctl serve");
}
