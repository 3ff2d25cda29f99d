//! Domains added and removed through the runtime API: a new domain takes a pre-allocated slot
//! backend (`slot_<kind>_<n>`, its servers `<domain>:<server>`) and its route in `hosts.map`,
//! with 0 `haproxy -c` and 0 reloads in the apply; a removed one loses its route, then its
//! servers, drained. The files say the same at every moment (a reload in between changes
//! nothing served), a full kind reloads with its reason and makes room, and a kill at each
//! step of the runtime path recovers to the old set. Real HAProxy.

use std::time::Duration;

use hapctl::haproxy::{CliSocket, RuntimeMap, RuntimeServers, ServerState};
use serde_json::Value;
use testkit::app::{apply_json, App};
use testkit::{Edge, Stream};

const SHOP: &str = "shop.example.com";

fn served(edge: &Edge, host: &str, n: usize) -> Vec<String> {
    let mut seen: Vec<String> = (0..n)
        .map(|_| {
            let r = edge.get(host, "/version");
            format!("{} {}", r.status, r.body.trim())
        })
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

fn worker_servers(edge: &Edge, backend: &str) -> std::collections::BTreeMap<String, ServerState> {
    RuntimeServers::new(CliSocket::new(
        edge.path("run/admin.sock"),
        Duration::from_secs(5),
    ))
    .state(backend)
    .unwrap()
}

/// Where the worker's `hosts.map` routes `host`.
fn worker_route(edge: &Edge, host: &str) -> Option<String> {
    RuntimeMap::on_worker(
        CliSocket::new(edge.path("run/admin.sock"), Duration::from_secs(5)),
        edge.path("live/maps/hosts.map").display().to_string(),
    )
    .value_of(host)
    .unwrap()
}

fn live(edge: &Edge, file: &str) -> String {
    std::fs::read_to_string(edge.path(file)).unwrap()
}

fn no_check_no_reload(report: &Value) {
    assert_eq!(report["outcome"], "applied", "{report}");
    assert_eq!(
        (report["checks"].as_u64(), report["reloads"].as_u64()),
        (Some(0), Some(0)),
        "{report}"
    );
}

/// An edge with a first domain: the first domain of a kind reloads (no slot of that kind
/// yet) and sizes the spare slots.
fn edge_with_a_first_domain(app: &App) -> Edge {
    let edge = Edge::started();
    let report = apply_json(
        &edge,
        &[
            "domain",
            "add",
            "first.example.com",
            "--server",
            &app.addr(),
        ],
    );
    assert_eq!(report["reloads"], 1, "{report}");
    let reason = &report["reload_reasons"][0];
    assert!(
        reason["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("first default domain"),
        "{report}"
    );
    assert!(live(&edge, "live/haproxy.cfg").contains("backend slot_default_15\n"));
    edge
}

#[test]
fn domains_come_and_go_at_runtime_and_the_files_say_the_same() {
    let (a, b) = (App::start("a"), App::start("b"));
    let edge = edge_with_a_first_domain(&a);
    let reloads = edge.show_proc().master.reloads;

    // A new domain: a slot takes its servers, then hosts.map its route.
    let report = apply_json(
        &edge,
        &[
            "domain",
            "add",
            SHOP,
            "--server",
            &a.addr(),
            "--server",
            &format!("{},weight=2", b.addr()),
        ],
    );
    no_check_no_reload(&report);
    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");
    assert_eq!(served(&edge, SHOP, 20), ["200 a", "200 b"]);
    let config = live(&edge, "live/haproxy.cfg");
    assert!(
        config.contains(&format!(
            "backend slot_default_0\n    # slot: {SHOP} (default)\n"
        )) && config.contains(&format!("    server {SHOP}:s1 {} check", a.addr())),
        "the files first: {config}"
    );
    assert!(live(&edge, "live/maps/hosts.map").contains(&format!("{SHOP} slot_default_0\n")));
    assert_eq!(worker_route(&edge, SHOP).as_deref(), Some("slot_default_0"));
    let held = worker_servers(&edge, "slot_default_0");
    assert_eq!(
        held.keys().collect::<Vec<_>>(),
        [&format!("{SHOP}:s1"), &format!("{SHOP}:s2")]
    );
    assert_eq!(held[&format!("{SHOP}:s2")].weight, 2);
    // The CLI checked the changed set after it was in effect: known-good again.
    let status: Value = serde_json::from_str(&edge.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["live_is_known_good"], true, "{status}");

    // The slotted domain's servers change at runtime too.
    let report = apply_json(
        &edge,
        &[
            "domain",
            "add",
            SHOP,
            "--server",
            &format!("{},weight=0", a.addr()),
            "--server",
            &b.addr(),
        ],
    );
    no_check_no_reload(&report);
    assert_eq!(served(&edge, SHOP, 10), ["200 b"]);

    // A reload in between loads the same thing from the files.
    edge.ok(&["haproxy", "reload"]);
    assert_eq!(served(&edge, SHOP, 10), ["200 b"]);
    let held = worker_servers(&edge, "slot_default_0");
    assert_eq!(held[&format!("{SHOP}:s1")].weight, 0);
    assert_eq!(held[&format!("{SHOP}:s2")].weight, 1);
    let reloads = edge.show_proc().master.reloads;

    // Removed while a stream runs on it: the route goes first, the stream ends whole.
    let stream = Stream::open(edge.port, SHOP, 15, 100);
    let report = apply_json(&edge, &["domain", "rm", SHOP]);
    no_check_no_reload(&report);
    assert_eq!(
        stream.finish().map(|l| l.len()),
        Ok(15),
        "the stream ended whole"
    );
    assert_eq!(edge.show_proc().master.reloads, reloads);
    assert_eq!(edge.get(SHOP, "/version").status, 404, "no route any more");
    assert_eq!(worker_route(&edge, SHOP), None);
    assert!(worker_servers(&edge, "slot_default_0").is_empty());
    let config = live(&edge, "live/haproxy.cfg");
    assert!(!config.contains(&format!("server {SHOP}:")), "{config}");
    assert!(!live(&edge, "live/maps/hosts.map").contains(SHOP));

    // A domain in its own backend goes the same way, and its slot-less backend stays empty
    // in the worker until the next reload.
    let report = apply_json(&edge, &["domain", "rm", "first.example.com"]);
    no_check_no_reload(&report);
    assert_eq!(edge.get("first.example.com", "/version").status, 404);
    assert!(worker_servers(&edge, "d_first.example.com")
        .values()
        .all(|s| s.admin_state != 0));

    // Back again: the freed slot is taken first.
    no_check_no_reload(&apply_json(
        &edge,
        &["domain", "add", SHOP, "--server", &a.addr()],
    ));
    assert_eq!(worker_route(&edge, SHOP).as_deref(), Some("slot_default_0"));
    assert_eq!(served(&edge, SHOP, 5), ["200 a"]);
    assert_eq!(edge.show_proc().master.reloads, reloads, "still no reload");
}

#[test]
fn a_full_kind_reloads_says_why_and_makes_room() {
    let a = App::start("a");
    let edge = edge_with_a_first_domain(&a);
    let host = |i: usize| format!("n{i}.example.com");
    for i in 0..16 {
        let report = apply_json(&edge, &["domain", "add", &host(i), "--server", &a.addr()]);
        no_check_no_reload(&report);
    }
    // The 17th finds every default slot taken: one check, one reload, and the reason.
    let report = apply_json(&edge, &["domain", "add", &host(16), "--server", &a.addr()]);
    assert_eq!(
        (report["checks"].as_u64(), report["reloads"].as_u64()),
        (Some(1), Some(1)),
        "{report}"
    );
    let reason = &report["reload_reasons"][0];
    assert_eq!(reason["kind"], "capacity", "{report}");
    assert!(
        reason["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("16 of 16 in use"),
        "{report}"
    );
    // That reload moved every slotted domain to a backend of its own and freed the slots.
    let config = live(&edge, "live/haproxy.cfg");
    for i in 0..17 {
        assert!(
            config.contains(&format!("backend d_{}\n", host(i))),
            "{}",
            host(i)
        );
        assert_eq!(served(&edge, &host(i), 1), ["200 a"], "{}", host(i));
    }
    assert!(!config.contains("# slot: "), "every slot is free again");
    // The reload is in the metrics' reasons and the history.
    let history = edge.ok(&["status"]);
    assert!(history.contains("capacity"), "{history}");
    // And the next one goes through the runtime path again.
    no_check_no_reload(&apply_json(
        &edge,
        &["domain", "add", &host(17), "--server", &a.addr()],
    ));
}

/// A kill at `point` of a runtime domain add; the next command recovers: the worker and the
/// files are the known-good set again (the change was not committed), and serve it.
fn killed_at(point: &str) {
    let a = App::start("a");
    let edge = edge_with_a_first_domain(&a);
    let known_good = edge.live_files();

    let mut cmd = edge.command(&["domain", "add", SHOP, "--server", &a.addr()]);
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
    assert!(
        edge.live_files() == known_good,
        "{point}: the known-good set"
    );
    assert_eq!(worker_route(&edge, SHOP), None, "{point}: no route");
    assert!(
        worker_servers(&edge, "slot_default_0").is_empty(),
        "{point}: the worker agrees with the files"
    );
    assert_eq!(edge.get(SHOP, "/version").status, 404, "{point}");
    assert_eq!(served(&edge, "first.example.com", 3), ["200 a"], "{point}");
    assert!(edge.ok(&["status"]).contains("recovered"), "{point}");
    // The change made again goes through.
    no_check_no_reload(&apply_json(
        &edge,
        &["domain", "add", SHOP, "--server", &a.addr()],
    ));
    assert_eq!(served(&edge, SHOP, 3), ["200 a"], "{point}");
}

#[test]
fn a_kill_after_the_files_of_a_runtime_domain_add_recovers() {
    killed_at("runtime-servers:after-write");
}

#[test]
fn a_kill_after_the_runtime_domain_add_before_the_commit_recovers() {
    killed_at("runtime-servers:after-push");
}
