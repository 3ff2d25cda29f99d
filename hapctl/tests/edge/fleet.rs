//! A fleet: edges sharing one desired state in a real 3-member etcd cluster, each applying it
//! through its own HAProxy. Requests go through every edge's HAProxy to prove a change is in
//! effect there.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::json;
use testkit::fleet::FleetLab;
use testkit::{Backend, Edge};

const WITHIN: Duration = Duration::from_secs(15);

fn put_domain(lab: &FleetLab, on: usize, host: &str, backend: &Backend) -> serde_json::Value {
    let body = json!({ "servers": [{ "address": backend.addr() }] });
    let r = lab
        .daemon(on)
        .call("PUT", &format!("/v1/domains/{host}"), Some(&body));
    assert!(r.status == 200 || r.status == 201, "{r:?}");
    r.json
}

fn serves(host: &'static str, body: &'static str) -> impl Fn(usize, &Edge) -> Result<(), String> {
    move |_, edge| {
        let r = edge.get(host, "/");
        (r.status == 200 && r.body.contains(body))
            .then_some(())
            .ok_or_else(|| format!("GET {host}: {} {:?}", r.status, r.body))
    }
}

#[test]
fn a_domain_put_on_one_edge_serves_through_every_edge() {
    let lab = FleetLab::start(3, 3);
    let backend = Backend::start("shop-v1");
    let answer = put_domain(&lab, 1, "shop.example.com", &backend);
    assert!(
        answer["apply"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("published at fleet revision")),
        "{answer}"
    );
    lab.wait_all(WITHIN, serves("shop.example.com", "shop-v1"));
    // A server change on another edge replaces it everywhere.
    let other = Backend::start("shop-v2");
    put_domain(&lab, 2, "shop.example.com", &other);
    lab.wait_all(WITHIN, serves("shop.example.com", "shop-v2"));
    // Every edge reports the same revision, none lagging.
    lab.wait_all(WITHIN, |i, _| {
        let view = lab.status(i);
        let edges = view["edges"].as_array().cloned().unwrap_or_default();
        let fine = edges.len() == 3
            && edges
                .iter()
                .all(|e| e["lagging"] == false && e["haproxy"] == "ok");
        fine.then_some(()).ok_or_else(|| view.to_string())
    });
}

#[test]
fn a_block_made_on_one_edge_is_enforced_by_every_edge_without_a_reload() {
    let lab = FleetLab::start(3, 3);
    let backend = Backend::start("site");
    put_domain(&lab, 0, "site.example.com", &backend);
    lab.wait_all(WITHIN, serves("site.example.com", "site"));
    let reloads: Vec<usize> = (0..3).map(|i| reload_count(lab.edge(i))).collect();
    let r = lab.daemon(2).call(
        "POST",
        "/v1/blocked-ips",
        Some(&json!({ "ip": "127.0.0.2", "reason": "fleet test", "ttl": "1h" })),
    );
    assert!(r.status == 200 || r.status == 201, "{r:?}");
    let client = Ipv4Addr::new(127, 0, 0, 2);
    lab.wait_all(WITHIN, |_, edge| {
        let r = edge.get_from(client, "site.example.com", "/");
        (r.status == 403)
            .then_some(())
            .ok_or_else(|| format!("{} {}", r.status, r.body))
    });
    // The other clients still pass, and no edge reloaded for the block.
    for (i, before) in reloads.iter().enumerate() {
        assert_eq!(lab.edge(i).get("site.example.com", "/").status, 200);
        assert_eq!(reload_count(lab.edge(i)), *before, "edge e{i} reloaded");
    }
    // The block carries its expiry on every edge.
    for i in 0..3 {
        let page = lab.daemon(i).get("/v1/blocked-ips");
        let block = &page.json["blocks"][0];
        assert_eq!(block["key"], "127.0.0.2", "{page:?}");
        assert!(block["expires_at"].is_number(), "{page:?}");
    }
}

/// Workers the master started so far (one more per reload).
fn reload_count(edge: &Edge) -> usize {
    edge.show_proc().master.reloads as usize
}

#[test]
fn a_change_computed_from_a_stale_state_is_refused_with_a_conflict() {
    let mut lab = FleetLab::start(1, 2);
    let backend = Backend::start("a");
    put_domain(&lab, 0, "race.example.com", &backend);
    lab.wait_all(WITHIN, serves("race.example.com", "a"));
    // Edge 1 stops following; another writer changes the domain meanwhile.
    lab.edges[1].1.kill();
    let newer = Backend::start("b");
    put_domain(&lab, 0, "race.example.com", &newer);
    // Edge 1 (its state one revision behind) changes the same domain: refused, nothing written.
    let out = lab.edge(1).run(&[
        "domain",
        "add",
        "race.example.com",
        "--server",
        &backend.addr(),
    ]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("domain/race.example.com changed on another edge"),
        "{text}"
    );
    assert!(lab
        .etcd
        .get("/hapctl/state/domain/race.example.com")
        .unwrap()
        .contains(&newer.addr()));
}

#[test]
fn a_hand_edited_key_that_does_not_parse_is_refused_and_reported_while_the_rest_applies() {
    let lab = FleetLab::start(1, 2);
    lab.etcd
        .put("/hapctl/state/domain/bad.example.com", "{\"servers\": 7}");
    let backend = Backend::start("good");
    put_domain(&lab, 0, "good.example.com", &backend);
    lab.wait_all(WITHIN, serves("good.example.com", "good"));
    lab.wait_all(WITHIN, |i, _| {
        let view = lab.status(i);
        let refused = view["edges"]
            .as_array()
            .map(|edges| {
                edges.iter().all(|e| {
                    e["refused"][1]
                        .as_str()
                        .is_some_and(|m| m.contains("domain/bad.example.com"))
                })
            })
            .unwrap_or(false);
        refused.then_some(()).ok_or_else(|| view.to_string())
    });
    assert_eq!(lab.edge(1).get("bad.example.com", "/").status, 404);
}
