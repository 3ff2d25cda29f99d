//! A domain's servers changed through the runtime API: added, re-weighted and removed with
//! 0 `haproxy -c` and 0 reloads in the apply, the files written first and read back, the
//! removed server drained of its stream before it goes, the set checked and promoted to
//! known-good after, and files and worker equal across the next reload. Real HAProxy.

use std::time::Duration;

use hapctl::haproxy::{CliSocket, RuntimeServers};
use serde_json::Value;
use testkit::app::{apply_json, App};
use testkit::{Edge, Stream};

const HOST: &str = "shop.example.com";
const BACKEND: &str = "d_shop.example.com";

fn versions_served(edge: &Edge, n: usize) -> Vec<String> {
    let mut seen: Vec<String> = (0..n)
        .map(|_| edge.get(HOST, "/version").body.trim().to_string())
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

/// The worker's servers, through its admin socket.
fn worker(edge: &Edge) -> RuntimeServers {
    RuntimeServers::new(CliSocket::new(
        edge.path("run/admin.sock"),
        Duration::from_secs(5),
    ))
}

fn worker_servers(edge: &Edge) -> std::collections::BTreeMap<String, hapctl::haproxy::ServerState> {
    worker(edge).state(BACKEND).unwrap()
}

/// The apply's `haproxy -c` runs and reloads.
fn assert_checks_and_reloads(report: &Value, checks: u64, reloads: u64) {
    assert_eq!(
        (report["checks"].as_u64(), report["reloads"].as_u64()),
        (Some(checks), Some(reloads)),
        "{report}"
    );
}

/// An edge routing HOST to `a`, then `b` added through the runtime path (no check, no
/// reload); returns the master's reload count.
fn edge_with_a_runtime_added_server(a: &App, b: &App) -> (Edge, u32) {
    let edge = Edge::started();
    edge.ok(&["domain", "add", HOST, "--server", &a.addr()]);
    let reloads = edge.show_proc().master.reloads;
    let report = apply_json(
        &edge,
        &[
            "domain",
            "add",
            HOST,
            "--server",
            &a.addr(),
            "--server",
            &b.addr(),
        ],
    );
    assert_eq!(report["outcome"], "applied", "{report}");
    assert_checks_and_reloads(&report, 0, 0);
    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");
    (edge, reloads)
}

#[test]
fn servers_change_at_runtime_and_the_files_say_the_same() {
    let (a, b) = (App::start("a"), App::start("b"));
    // Add a second server: the worker takes it, no check, no reload.
    let (edge, reloads) = edge_with_a_runtime_added_server(&a, &b);
    assert_eq!(versions_served(&edge, 20), ["a", "b"]);
    let config = std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap();
    assert!(
        config.contains(&format!("server s2 {}", b.addr())),
        "the file first"
    );
    // The CLI checked the changed set after it was in effect: known-good again.
    let status: Value = serde_json::from_str(&edge.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["live_is_known_good"], true, "{status}");

    // Weight 0 on s1: everything goes to s2, still without a reload.
    let report = apply_json(
        &edge,
        &[
            "domain",
            "add",
            HOST,
            "--server",
            &format!("{},weight=0", a.addr()),
            "--server",
            &b.addr(),
        ],
    );
    assert_eq!(report["reloads"], 0, "{report}");
    assert_eq!(versions_served(&edge, 10), ["b"]);
    assert_eq!(worker_servers(&edge)["s1"].weight, 0);

    // Remove s2 while a stream runs on it: the apply waits until the stream ended.
    let stream = Stream::open(edge.port, HOST, 15, 100);
    let report = apply_json(&edge, &["domain", "add", HOST, "--server", &a.addr()]);
    assert_eq!(report["reloads"], 0, "{report}");
    assert_eq!(
        stream.finish().unwrap().len(),
        15,
        "the stream on the removed server ended whole"
    );
    assert!(
        !report["message"].as_str().unwrap().contains("draining"),
        "{report}"
    );
    assert!(!worker_servers(&edge).contains_key("s2"));
    assert_eq!(versions_served(&edge, 5), ["a"]);
    assert_eq!(edge.show_proc().master.reloads, reloads, "still no reload");

    // A change only a reload loads (the first websocket domain): the new worker reads the
    // same servers from the files.
    edge.ok(&[
        "domain",
        "add",
        "other.example.com",
        "--server",
        &b.addr(),
        "--profile",
        "websocket",
    ]);
    assert_eq!(edge.show_proc().master.reloads, reloads + 1);
    let after = worker_servers(&edge);
    assert_eq!(after.keys().collect::<Vec<_>>(), ["s1"]);
    assert_eq!(after["s1"].weight, 1);
    assert_eq!(versions_served(&edge, 5), ["a"]);
}

#[test]
fn a_server_change_the_runtime_cannot_take_reloads_and_says_why() {
    let edge = Edge::started();
    let a = App::start("a");
    edge.ok(&["domain", "add", HOST, "--server", &a.addr()]);
    // Turning checks off is another server line: only a reload loads it.
    let report = apply_json(
        &edge,
        &[
            "domain",
            "add",
            HOST,
            "--server",
            &format!("{},nocheck", a.addr()),
        ],
    );
    assert_eq!(report["reloads"], 1, "{report}");
    let detail = report["reload_reasons"][0]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.starts_with("haproxy.cfg changed, which only a reload loads: server s1")
            && detail.contains("options other than weight and address"),
        "{report}"
    );
    assert_eq!(versions_served(&edge, 3), ["a"]);
}

/// A kill at `point` of a runtime server change; the next command recovers: the worker and
/// the files are the known-good set again (the change was not committed), and serve it.
fn killed_at(point: &str) {
    let edge = Edge::started();
    let (a, b) = (App::start("a"), App::start("b"));
    edge.ok(&["domain", "add", HOST, "--server", &a.addr()]);
    let known_good = std::fs::read(edge.path("live/haproxy.cfg")).unwrap();

    let mut cmd = edge.command(&[
        "domain",
        "add",
        HOST,
        "--server",
        &a.addr(),
        "--server",
        &b.addr(),
    ]);
    cmd.env("HAPCTL_FAULT", point);
    let out = testkit::run_bounded(cmd, Duration::from_secs(60));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{point}: {}",
        testkit::describe(&out)
    );

    let report = apply_json(&edge, &["apply"]);
    assert_eq!(report["outcome"], "unchanged", "{point}: {report}");
    assert_eq!(
        std::fs::read(edge.path("live/haproxy.cfg")).unwrap(),
        known_good,
        "{point}: the files are the known-good set"
    );
    assert_eq!(
        worker_servers(&edge).keys().collect::<Vec<_>>(),
        ["s1"],
        "{point}: the worker agrees with the files"
    );
    assert_eq!(versions_served(&edge, 10), ["a"], "{point}");
    let history = edge.ok(&["status"]);
    assert!(history.contains("recovered"), "{point}: {history}");
}

#[test]
fn a_kill_after_the_files_of_a_runtime_server_change_recovers() {
    killed_at("runtime-servers:after-write");
}

#[test]
fn a_kill_after_the_runtime_change_before_the_commit_recovers() {
    killed_at("runtime-servers:after-push");
}

#[test]
fn a_runtime_changed_set_haproxy_refuses_is_a_defect_alarm_never_promoted() {
    let edge = Edge::started();
    let a = App::start("a");
    edge.ok(&["domain", "add", HOST, "--server", &a.addr()]);
    let api = testkit::daemon::Daemon::start(&edge);
    // What a rendering defect would leave: a set changed at runtime that haproxy -c refuses.
    let config = edge.path("live/haproxy.cfg");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\nbackend defect\n    bogus_keyword 1\n");
    std::fs::write(&config, text).unwrap();
    std::fs::write(edge.path("run/unchecked"), "").unwrap();

    // The daemon's idle check finds it: health says so, the metric counts it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let health = loop {
        let r = api.get("/v1/health");
        if r.status == 503 {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never unhealthy: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        health.text.contains("DEFECT") && health.text.contains("bogus_keyword"),
        "{}",
        health.text
    );
    // Counted once the check returned (its alarm file is written just before).
    let counted = |text: &str| text.contains("hapctl_runtime_check_failures_total 1");
    let mut metrics = api.get("/metrics").text;
    while !counted(&metrics) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        metrics = api.get("/metrics").text;
    }
    assert!(counted(&metrics), "{metrics}");
    let status = edge.ok(&["status"]);
    assert!(status.contains("DEFECT ALARM"), "{status}");
    assert!(
        status.contains("live files are the known-good set: NO"),
        "not promoted: {status}"
    );

    // The next apply renders the committed state again: checked, reloaded, the alarm ends.
    edge.ok(&["apply"]);
    assert_eq!(api.get("/v1/health").status, 200);
    assert!(!edge.ok(&["status"]).contains("DEFECT"));
}

/// A map change (an HTTPS policy) on top of a runtime server change still waiting for its
/// check: it waits for no check and reads no rollback target (HAProxy's ~0.2-0.5 s per
/// change), and the set it leaves is promoted with the pending one's check, carrying both.
#[test]
fn a_map_change_over_an_unchecked_runtime_change_waits_for_no_check() {
    let (a, b) = (App::start("a"), App::start("b"));
    let (edge, reloads) = edge_with_a_runtime_added_server(&a, &b);
    // What the daemon leaves between a runtime change and its background check.
    std::fs::write(edge.path("run/unchecked"), "").unwrap();

    let report = apply_json(&edge, &["domain", "https", HOST, "--redirect", "301"]);
    assert_eq!(report["outcome"], "applied", "{report}");
    assert_checks_and_reloads(&report, 0, 0);
    let steps: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(
        steps.contains(&"runtime") && !steps.contains(&"snapshot"),
        "{report}"
    );
    assert_eq!(edge.get(HOST, "/").status, 301);
    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");

    // The CLI's check after the change promoted the set with both changes.
    assert!(!edge.path("run/unchecked").exists());
    let status: Value = serde_json::from_str(&edge.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["live_is_known_good"], true, "{status}");
    let known_good = std::fs::read_to_string(edge.path("known-good/haproxy.cfg")).unwrap();
    assert!(known_good.contains(&format!("server s2 {}", b.addr())));
    let https = std::fs::read_to_string(edge.path("known-good/maps/https.map")).unwrap();
    assert!(https.contains(HOST), "{https}");
}

/// Enough domains that HAProxy's check of the set takes a while (0.2-2 s here, with load).
const SLOW_CHECK_DOMAINS: usize = 10_000;

/// The `haproxy -c` child of `parent`, if one runs.
fn check_child(parent: i32) -> Option<i32> {
    let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default()
        + &std::fs::read_dir(format!("/proc/{parent}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .collect::<String>();
    children
        .split_whitespace()
        .filter_map(|pid| pid.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"-c"))
        })
}

#[test]
fn a_change_during_the_background_check_goes_first_and_the_next_check_covers_it() {
    let edge = Edge::new();
    let a = App::start("a");
    let name = |i: usize| format!("d{i:05}.example.com");
    testkit::seed::seed_domains(&edge, (0..SLOW_CHECK_DOMAINS).map(name), &a.addr());
    edge.ok(&["haproxy", "start"]);
    let api = testkit::daemon::Daemon::start(&edge);
    let weight = |w: u16| {
        let server = serde_json::json!({"address": a.addr(), "weight": w, "check": false});
        let body = serde_json::json!({ "servers": [server] });
        let r = api.call("PUT", &format!("/v1/domains/{}", name(7)), Some(&body));
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json["apply"]["reloads"], 0, "{}", r.text);
    };

    let counter = |name: &str| {
        let metrics = api.get("/metrics").text;
        let line = format!("\n{name} ");
        let at = metrics
            .find(&line)
            .unwrap_or_else(|| panic!("{name}: {metrics}"));
        metrics[at + line.len()..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // A runtime change; 200 ms later the daemon's idle check of it starts. A second change
    // while it runs is answered, and the check it interrupted is gone. On a loaded machine
    // the check may end before the second change arrives: then the scenario is played again
    // (a few times at most), never passed without a check giving way.
    let mut w = 5;
    for attempt in 1.. {
        weight(w);
        let check = loop {
            if let Some(pid) = check_child(api.pid()) {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no background check started"
            );
            std::thread::sleep(Duration::from_millis(2));
        };
        weight(w + 1);
        assert!(
            !hapctl::process::pid_alive(check),
            "the check {check} still runs"
        );
        if counter("hapctl_runtime_checks_gave_way_total") == 1 {
            break;
        }
        assert!(
            attempt < 4 && counter("hapctl_haproxy_checks_total") >= attempt,
            "no check gave way to the change that arrived during it (attempt {attempt})"
        );
        w += 2;
    }
    let last = w + 1;

    // The next idle check covers both changes: promoted, the known-good set has the last
    // weight.
    while edge.path("run/unchecked").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the set was never promoted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let known_good = std::fs::read_to_string(edge.path("known-good/haproxy.cfg")).unwrap();
    let line = known_good
        .lines()
        .skip_while(|l| *l != format!("backend d_{}", name(7)))
        .find(|l| l.trim_start().starts_with("server "))
        .unwrap()
        .to_string();
    assert!(line.contains(&format!("weight {last}")), "{line}");
}

/// Someone changed the worker by hand (a server s3 added on the admin socket): the runtime
/// change's first add goes in, its second is refused by HAProxy. The apply falls back to a
/// check and a reload, recorded as such, and the new worker is exactly the files: what the
/// half-done push and the hand-made server had changed is gone.
#[test]
fn a_runtime_change_that_fails_part_way_falls_back_and_the_worker_is_the_files_again() {
    let edge = Edge::started();
    let (a, b, c, hand) = (
        App::start("a"),
        App::start("b"),
        App::start("c"),
        App::start("by-hand"),
    );
    edge.ok(&["domain", "add", HOST, "--server", &a.addr()]);
    worker(&edge)
        .add(BACKEND, "s3", &hand.addr(), "", false)
        .unwrap();
    assert!(versions_served(&edge, 30).contains(&"by-hand".to_string()));
    let reloads = edge.show_proc().master.reloads;

    let report = apply_json(
        &edge,
        &[
            "domain",
            "add",
            HOST,
            "--server",
            &a.addr(),
            "--server",
            &b.addr(),
            "--server",
            &c.addr(),
        ],
    );
    assert_eq!(report["outcome"], "applied", "{report}");
    assert_checks_and_reloads(&report, 1, 1);
    let reason = &report["reload_reasons"][0];
    assert_eq!(reason["kind"], "runtime-failed", "{report}");
    assert!(
        reason["detail"].as_str().unwrap_or_default().contains("s3"),
        "the refused command is named: {report}"
    );
    assert_eq!(edge.show_proc().master.reloads, reloads + 1);
    let worker = worker_servers(&edge);
    assert_eq!(worker.keys().collect::<Vec<_>>(), ["s1", "s2", "s3"]);
    assert_eq!(
        format!("{}:{}", worker["s3"].addr, worker["s3"].port),
        c.addr(),
        "the files' s3, not the hand-made one"
    );
    assert_eq!(versions_served(&edge, 30), ["a", "b", "c"]);
}
