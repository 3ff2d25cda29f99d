//! The CLI's domain changes go to a running `hapctl serve` of the same state directory over
//! its unix socket (`run/api.sock`), and are applied by the CLI itself when no daemon listens
//! there. Real HAProxy, real daemon: the daemon's request counters say which way each went.

use std::time::Duration;

use testkit::daemon::Daemon;
use testkit::{Backend, Edge};

const SHOP: &str = "shop.example.com";

/// The daemon's count of answered requests to `route` with `status`.
fn requests(api: &Daemon, method: &str, route: &str, status: u16) -> u64 {
    let needle = format!(
        "hapctl_api_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} "
    );
    api.get("/metrics")
        .text
        .lines()
        .find_map(|l| l.strip_prefix(&needle))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[test]
fn domain_changes_go_through_the_running_daemon_and_are_applied_here_without_one() {
    let edge = Edge::started();
    let app = Backend::start("shop");
    let api = Daemon::start(&edge);
    let socket = edge.path("run/api.sock");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the socket is the daemon user's");
    }

    // Added through the daemon: routed, the CLI says so and prints the daemon's report.
    let server = format!("{},nocheck", app.addr());
    let out = edge.expect_code(0, &["domain", "add", SHOP, "--server", &server]);
    assert!(out.contains(&format!("domain {SHOP} added")), "{out}");
    assert!(out.contains("applied: "), "{out}");
    assert_eq!(requests(&api, "PUT", "/v1/domains/{name}", 201), 1);
    assert_eq!(edge.get(SHOP, "/").body, "shop");

    // A weight change: the runtime path, its JSON report as the API answered it.
    let weighted = format!("{},weight=7,nocheck", app.addr());
    let json = edge.ok(&["domain", "add", SHOP, "--server", &weighted, "--json"]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (report["outcome"].as_str(), report["reloads"].as_u64()),
        (Some("applied"), Some(0)),
        "{report}"
    );
    assert!(json.trim_start().starts_with("{\n  \"outcome\""), "{json}");
    assert_eq!(requests(&api, "PUT", "/v1/domains/{name}", 200), 1);
    let listed = edge.ok(&["domain", "ls", "--json"]);
    assert!(listed.contains("\"weight\": 7"), "{listed}");

    // Policies, and the answers for a domain that does not exist.
    edge.ok(&[
        "domain",
        "https",
        SHOP,
        "--redirect",
        "301",
        "--hsts",
        "600",
    ]);
    assert_eq!(edge.get(SHOP, "/").status, 301);
    edge.ok(&["domain", "https", SHOP]);
    edge.ok(&["domain", "suspend", SHOP]);
    assert_eq!(edge.get(SHOP, "/").status, 503);
    edge.ok(&["domain", "resume", SHOP]);
    assert_eq!(edge.get(SHOP, "/").status, 200);
    assert_eq!(requests(&api, "PUT", "/v1/domains/{name}/https", 200), 2);
    assert_eq!(requests(&api, "POST", "/v1/domains/{name}/suspend", 200), 1);
    let out = edge.expect_code(7, &["domain", "suspend", "absent.example.com"]);
    assert!(out.contains("absent.example.com does not exist"), "{out}");
    let out = edge.expect_code(7, &["domain", "rm", "absent.example.com"]);
    assert!(out.contains("does not exist"), "{out}");
    assert_eq!(requests(&api, "DELETE", "/v1/domains/{name}", 404), 1);

    // Bad input is refused by the CLI itself: nothing reaches the daemon.
    let out = edge.expect_code(2, &["domain", "add", "bad_name!", "--server", &server]);
    assert!(out.contains("bad_name!"), "{out}");
    let out = edge.expect_code(2, &["domain", "https", SHOP, "--redirect", "302"]);
    assert!(out.contains("redirect"), "{out}");
    let bad = api.get("/metrics").text;
    assert!(!bad.contains("status=\"400\""), "{bad}");

    // Without the daemon (its socket removed as it stops) the CLI applies on its own.
    let mut api = api;
    api.signal(libc::SIGTERM);
    api.wait_exit(Duration::from_secs(20))
        .expect("the daemon stops on SIGTERM");
    assert!(!socket.exists(), "the socket goes with the daemon");
    edge.ok(&["domain", "rm", SHOP]);
    assert_eq!(edge.get(SHOP, "/").status, 404);
    // A policy of an absent domain, applied here: refused, and no apply in the history.
    let last_apply = || {
        let status: serde_json::Value =
            serde_json::from_str(&edge.ok(&["status", "--json"])).unwrap();
        status["applies"][0]["id"].clone()
    };
    let before = last_apply();
    let out = edge.expect_code(7, &["domain", "https", SHOP, "--redirect", "301"]);
    assert!(out.contains("does not exist"), "{out}");
    assert_eq!(last_apply(), before);

    // A dead daemon's socket (SIGKILL leaves it): nobody answers, so the CLI applies here.
    let stale = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    drop(stale);
    assert!(socket.exists());
    edge.ok(&["domain", "add", SHOP, "--server", &server]);
    assert_eq!(edge.get(SHOP, "/").body, "shop");
}

#[test]
fn blocks_go_through_the_running_daemon_and_are_applied_here_without_one() {
    let edge = Edge::started();
    let app = Backend::start("shop");
    edge.ok(&[
        "domain",
        "add",
        SHOP,
        "--server",
        &format!("{},nocheck", app.addr()),
    ]);
    let api = Daemon::start(&edge);
    let client: std::net::Ipv4Addr = "127.0.0.7".parse().unwrap();
    assert_eq!(edge.get_from(client, SHOP, "/").status, 200);

    // Blocked through the daemon: enforced at once, the daemon's report printed.
    let out = edge.ok(&[
        "block",
        "add",
        "127.0.0.0/29",
        "--reason",
        "scan",
        "--ttl",
        "1d",
    ]);
    assert!(out.contains("127.0.0.0/29: created"), "{out}");
    assert!(out.contains("enforced: runtime"), "{out}");
    assert_eq!(requests(&api, "POST", "/v1/blocked-ips", 201), 1);
    assert_eq!(edge.get_from(client, SHOP, "/").status, 403);
    let listed: serde_json::Value =
        serde_json::from_str(&edge.ok(&["block", "ls", "--json"])).unwrap();
    let block = &listed[0];
    assert_eq!(
        (block["key"].as_str(), block["reason"].as_str()),
        (Some("127.0.0.0/29"), Some("scan")),
        "{listed}"
    );
    let lasts = block["expires_at"].as_i64().unwrap() - block["created_at"].as_i64().unwrap();
    assert!((86_399..=86_401).contains(&lasts), "a day: {lasts} s");

    // The report in JSON, as the local path prints it.
    let json = edge.ok(&["block", "rm", "127.0.0.0/29", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (
            report["results"][0].as_str(),
            report["enforcement"].as_str()
        ),
        (Some("removed"), Some("runtime")),
        "{report}"
    );
    assert!(report["expired"].is_array(), "{report}");
    assert_eq!(requests(&api, "DELETE", "/v1/blocked-ips/{key}", 200), 1);
    assert_eq!(edge.get_from(client, SHOP, "/").status, 200);
    // Not blocked: exit 7, as without a daemon.
    let out = edge.expect_code(7, &["block", "rm", "127.0.0.0/29"]);
    assert!(out.contains("127.0.0.0/29: not-found"), "{out}");
    assert_eq!(requests(&api, "DELETE", "/v1/blocked-ips/{key}", 404), 1);
    // Bad input never reaches the daemon.
    let out = edge.expect_code(2, &["block", "add", "127.0.0.300"]);
    assert!(out.contains("127.0.0.300"), "{out}");
    assert!(!api.get("/metrics").text.contains("status=\"400\""));

    // With the daemon gone, the CLI blocks on its own.
    let mut api = api;
    api.signal(libc::SIGTERM);
    api.wait_exit(Duration::from_secs(20))
        .expect("the daemon stops on SIGTERM");
    let out = edge.ok(&["block", "add", "127.0.0.7"]);
    assert!(out.contains("127.0.0.7: created"), "{out}");
    assert_eq!(edge.get_from(client, SHOP, "/").status, 403);
}
