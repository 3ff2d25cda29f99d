//! Servers named by host name that do not resolve now, against the real HAProxy: the CLI's
//! report (HAProxy's verdict while it runs, the system resolver's while it is stopped),
//! `hapctl status`, and a name that starts resolving through `[resolvers]` (Pebble's DNS
//! server) whose server comes up without a reload.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use testkit::daemon::Daemon;
use testkit::pebble::Pebble;
use testkit::{Backend, Edge};

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn the_cli_names_the_servers_that_wait_for_their_name() {
    let edge = Edge::started();
    let app = Backend::start("up");
    let out = edge.ok(&[
        "domain",
        "add",
        "blog.test",
        "--server",
        "wp_site_1:80",
        "--server",
        &app.addr(),
    ]);
    assert!(out.starts_with("applied:"), "{out}");
    assert!(
        out.contains("WARNING: 1 server(s) do not resolve now: wp_site_1 (blog.test server s1). Each is down (in maintenance) until it resolves at a reload"),
        "{out}"
    );
    edge.wait_for_body("blog.test", "up");

    let out = json_of(&edge.ok(&[
        "domain",
        "add",
        "blog.test",
        "--server",
        "wp_site_1:80",
        "--json",
    ]));
    assert_eq!(out["outcome"], "applied", "{out}");
    assert_eq!(
        out["unresolved_servers"],
        json!([{"domain": "blog.test", "server": "s1", "host": "wp_site_1", "seen": "haproxy"}])
    );
    let status = json_of(&edge.ok(&["status", "--json"]));
    assert_eq!(
        status["resolution"]["unresolved_servers"][0]["host"],
        "wp_site_1"
    );

    // HAProxy stopped: the system resolver says what its start will find.
    edge.ok(&["haproxy", "stop"]);
    let out = json_of(&edge.ok(&[
        "domain",
        "add",
        "db.test",
        "--server",
        "db_primary:5432",
        "--json",
    ]));
    assert_eq!(out["outcome"], "applied", "{out}");
    assert_eq!(out["unresolved_servers"][0]["seen"], "no-address", "{out}");
    let out = json_of(&edge.ok(&[
        "domain",
        "add",
        "local.test",
        "--server",
        "localhost:80",
        "--json",
    ]));
    assert_eq!(
        out["unresolved_servers"],
        json!([]),
        "localhost resolves: {out}"
    );
    let status = json_of(&edge.ok(&["status", "--json"]));
    assert!(
        status["resolution"].is_null(),
        "HAProxy does not answer: {status}"
    );
}

#[test]
fn a_name_that_starts_resolving_comes_up_through_the_resolvers_without_a_reload() {
    let edge = Edge::started();
    let app = Backend::start("from the container");
    let dns = Pebble::start(edge.port);
    // No name resolves until it has a record of its own.
    dns.set_default_ipv4("");
    edge.set_resolvers(dns.dns_server());
    let api = Daemon::start(&edge);
    let body = json!({"domain": "blog.example.com", "backend_name": "blog",
        "servers": [{"name": "wp", "address": "wp_site_1", "port": app.port}]});
    let r = api.call("POST", "/api/domain", Some(&body));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json["unresolved_servers"][0]["host"], "wp_site_1",
        "{r:?}"
    );
    assert_eq!(r.json["runtime_resolvers"], true);
    let warning = r.json["warning"].as_str().unwrap();
    assert!(
        warning.contains(
            "the [resolvers] follow the name and put the server in service without a reload"
        ),
        "{warning}"
    );
    assert_eq!(edge.get("blog.example.com", "/").status, 503);

    let reloads = edge.show_proc().master.reloads;
    dns.add_a("wp_site_1", "127.0.0.1");
    let started = Instant::now();
    let deadline = started + Duration::from_secs(15);
    let mut last = edge.get("blog.example.com", "/");
    while last.body != "from the container" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        last = edge.get("blog.example.com", "/");
    }
    assert_eq!(last.body, "from the container", "{last:?}");
    eprintln!(
        "wp_site_1 served {:?} after its A record appeared",
        started.elapsed()
    );
    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");
    let status = api.get("/v1/status");
    assert_eq!(
        status.json["resolution"],
        json!({"unresolved_servers": [], "runtime_resolvers": true}),
        "{status:?}"
    );
}
