//! The old clients' server inputs (`PEER-API.md` §1.2 `POST /api/domain`): free-text
//! `options`, `template_override` names, Docker container names resolved at runtime.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{assert_e1, old_edge};
use testkit::daemon::Daemon;
use testkit::pebble::Pebble;
use testkit::{Backend, Edge};

#[test]
fn the_old_options_and_templates_are_typed_and_served() {
    let (edge, app, api) = old_edge();
    let spare = Backend::start("backup");
    let body = json!({"domain": "chat.example.com", "backend_name": "chat_backend",
    "template_override": "hap_backend_websocket",
    "servers": [
        {"name": "web1", "address": "127.0.0.1", "port": app.port, "options": "check inter 2s fall 3 rise 2 weight 10"},
        {"name": "spare", "address": "127.0.0.1", "port": spare.port, "options": "check backup"},
    ]});
    let r = api.call("POST", "/api/domain", Some(&body));
    assert_eq!(r.status, 200, "{r:?}");
    // The primary answers; the backup waits.
    for _ in 0..5 {
        assert_eq!(edge.get("chat.example.com", "/").body, "ok");
    }
    let cfg = std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap();
    let backend = cfg
        .split("\nbackend ")
        .find(|b| b.starts_with("d_chat.example.com"))
        .expect("the backend section");
    for line in [
        "timeout tunnel 6h",
        "timeout server 6h",
        "option http-no-delay",
        &format!(
            "server web1 127.0.0.1:{} check inter 2s fall 3 rise 2 weight 10\n",
            app.port
        ),
        &format!("server spare 127.0.0.1:{} check backup\n", spare.port),
    ] {
        assert!(backend.contains(line), "{line:?} not in\n{backend}");
    }
    let rows = api.get("/api/domains").json;
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["domain"] == "chat.example.com")
        .unwrap();
    assert_eq!(row["template_override"], "hap_backend_longlived");

    // Refused whole, naming the field and the token; nothing changes.
    let live = edge.live_files();
    for (options, needle) in [
        ("check redir http://elsewhere", "`redir`"),
        ("check resolvers docker_dns", "[resolvers]"),
        ("None", "`None`"),
    ] {
        let mut bad = body.clone();
        bad["servers"][0]["options"] = json!(options);
        let r = api.call("POST", "/api/domain", Some(&bad));
        assert_e1(&r, 400, "servers[0].options");
        assert!(
            r.json["message"].as_str().unwrap().contains(needle),
            "{r:?}"
        );
    }
    let mut bad = body.clone();
    bad["template_override"] = json!("hap_backend_custom");
    assert_e1(
        &api.call("POST", "/api/domain", Some(&bad)),
        400,
        "template_override",
    );
    assert_eq!(edge.live_files(), live, "a refused input changed the files");
}

#[test]
fn a_container_name_resolves_at_runtime_through_the_configured_resolvers() {
    let edge = Edge::started();
    let app = Backend::start("from the container");
    // A real DNS server on loopback: challtestsrv answers every A query with 127.0.0.1.
    let dns = Pebble::start(edge.port);
    edge.set_resolvers(dns.dns_server());
    let api = Daemon::start(&edge);
    let body = json!({"domain": "blog.example.com", "backend_name": "blog",
        "servers": [{"name": "wp", "address": "wp_site_1", "port": app.port.to_string(),
            "options": "check resolvers docker_dns init-addr last,libc,none"}]});
    let r = api.call("POST", "/api/domain", Some(&body));
    assert_eq!(r.status, 200, "{r:?}");
    let cfg = std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap();
    assert!(
        cfg.contains(&format!(
            "server wp wp_site_1:{} check resolvers hapctl init-addr last,libc,none",
            app.port
        )),
        "{cfg}"
    );
    // The name is unknown to libc: only HAProxy's runtime resolution can reach the backend.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = edge.get("blog.example.com", "/");
    while last.body != "from the container" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        last = edge.get("blog.example.com", "/");
    }
    assert_eq!(last.body, "from the container", "{last:?}");
}
