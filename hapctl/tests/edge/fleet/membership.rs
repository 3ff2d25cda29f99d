//! Joining a fleet, leaving it, and a fleet whose state was never published.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::json;
use testkit::daemon::Daemon;
use testkit::etcd::EtcdCluster;
use testkit::fleet::FleetLab;
use testkit::{Backend, Edge};

use super::{put_domain, serves, WITHIN};

#[test]
fn a_new_edge_joining_serves_the_fleets_domains_and_enforces_its_blocks() {
    let mut lab = FleetLab::start(1, 2);
    let backend = Backend::start("joined");
    put_domain(&lab, 0, "joined.example.com", &backend);
    let block = json!({ "ip": "127.0.0.2", "reason": "before e2 joined" });
    let r = lab.daemon(1).call("POST", "/v1/blocked-ips", Some(&block));
    assert!(r.status == 200 || r.status == 201, "{r:?}");
    lab.join("e2");
    lab.wait_all(WITHIN, serves("joined.example.com", "joined"));
    lab.wait_all(WITHIN, |_, edge| {
        let r = edge.get_from(Ipv4Addr::new(127, 0, 0, 2), "joined.example.com", "/");
        (r.status == 403)
            .then_some(())
            .ok_or_else(|| format!("{} {}", r.status, r.body))
    });
    lab.wait_all(WITHIN, |_, _| {
        let view = lab.status(0);
        let names: Vec<&str> = view["edges"]
            .as_array()
            .map(|e| e.iter().filter_map(|x| x["name"].as_str()).collect())
            .unwrap_or_default();
        (names == ["e0", "e1", "e2"])
            .then_some(())
            .ok_or_else(|| view.to_string())
    });
}

#[test]
fn an_edge_that_leaves_keeps_serving_its_last_state_alone() {
    let mut lab = FleetLab::start(1, 2);
    let backend = Backend::start("kept");
    put_domain(&lab, 0, "kept.example.com", &backend);
    lab.wait_current(WITHIN);
    lab.edges[1].1.kill();
    let said = lab.edge(1).ok(&["fleet", "leave"]);
    assert!(said.contains("left the fleet"), "{said}");
    assert!(!lab
        .edge(1)
        .settings_text()
        .lines()
        .any(|l| l.trim() == "[fleet]"));
    lab.restart_daemon(1);
    // Served from its own state (a startup apply may reload first: waited for, bounded).
    lab.wait_all(WITHIN, serves("kept.example.com", "kept"));
    // The fleet goes on without it, and it changes alone.
    let later = Backend::start("later");
    put_domain(&lab, 0, "later.example.com", &later);
    put_domain(&lab, 1, "alone.example.com", &later);
    assert_eq!(lab.edge(0).get("later.example.com", "/").status, 200);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(lab.edge(1).get("later.example.com", "/").status, 404);
    assert_eq!(lab.edge(0).get("alone.example.com", "/").status, 404);
    assert!(lab.etcd.get("/hapctl/edges/e1").is_none());
    let view = lab.status(0);
    assert_eq!(view["edges"].as_array().map(Vec::len), Some(1), "{view}");
}

#[test]
fn an_edge_on_an_unpublished_fleet_serves_its_own_state_and_refuses_changes_until_published() {
    let etcd = EtcdCluster::start(1);
    let edge = Edge::new();
    let backend = Backend::start("own");
    edge.ok(&[
        "domain",
        "add",
        "own.example.com",
        "--server",
        &backend.addr(),
    ]);
    edge.write_settings(&format!(
        "{}\n[fleet]\nendpoints = {}\nname = \"solo\"\n",
        edge.settings_text(),
        etcd.endpoints_toml()
    ));
    let daemon = Daemon::start(&edge);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(edge.get("own.example.com", "/").status, 200);
    let body = json!({ "servers": [{ "address": backend.addr() }] });
    let r = daemon.call("PUT", "/v1/domains/other.example.com", Some(&body));
    assert_eq!(r.status, 409, "{r:?}");
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("hapctl fleet publish"),
        "{r:?}"
    );
    // Published, it is the fleet's state, and changes go through.
    edge.ok(&["fleet", "publish"]);
    let r = daemon.call("PUT", "/v1/domains/other.example.com", Some(&body));
    assert!(r.status == 200 || r.status == 201, "{r:?}");
    assert_eq!(edge.get("other.example.com", "/").status, 200);
    assert_eq!(edge.get("own.example.com", "/").status, 200);
    assert!(etcd.get("/hapctl/state/domain/own.example.com").is_some());
}

#[test]
fn an_edge_reaches_etcd_over_tls_with_a_client_certificate() {
    let ca = testkit::pki::TestCa::new("etcd");
    let etcd = EtcdCluster::start_tls(1, &ca);
    let tls = etcd.tls().unwrap().clone();
    let edge = Edge::new();
    let fleet = |identity: bool| {
        let mut text = format!(
            "\n[fleet]\nendpoints = {}\nname = \"secure\"\nca = \"{}\"\ntimeout = \"1s\"\n",
            etcd.endpoints_toml(),
            tls.ca.display()
        );
        if identity {
            text += &format!(
                "cert = \"{}\"\nkey = \"{}\"\n",
                tls.client_cert.display(),
                tls.client_key.display()
            );
        }
        text
    };
    let alone = edge.settings_text();
    // Without a client certificate etcd refuses the connection: said, nothing published.
    edge.write_settings(&(alone.clone() + &fleet(false)));
    let said = edge.expect_code(1, &["fleet", "publish"]);
    assert!(said.contains("etcd"), "{said}");
    assert!(etcd.get("/hapctl/published").is_none());
    edge.write_settings(&(alone + &fleet(true)));
    edge.ok(&["fleet", "publish"]);
    let daemon = Daemon::start(&edge);
    let backend = Backend::start("over tls");
    let body = json!({ "servers": [{ "address": backend.addr() }] });
    let r = daemon.call("PUT", "/v1/domains/tls.example.com", Some(&body));
    assert!(r.status == 200 || r.status == 201, "{r:?}");
    assert_eq!(edge.get("tls.example.com", "/").status, 200);
    assert!(etcd.get("/hapctl/state/domain/tls.example.com").is_some());
}
