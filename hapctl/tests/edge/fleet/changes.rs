//! What a change made on one edge does on every edge.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::json;
use testkit::fleet::FleetLab;
use testkit::Backend;

use super::{put_domain, serves, settled_reloads, WITHIN};

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
    // The API shows the same fleet; an edge in no fleet says it is in none.
    let fleet = lab.daemon(1).get("/v1/fleet");
    assert_eq!(fleet.status, 200, "{fleet:?}");
    assert_eq!(
        fleet.json["edges"].as_array().map(Vec::len),
        Some(3),
        "{fleet:?}"
    );
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
    let reloads: Vec<u32> = (0..3).map(|i| settled_reloads(lab.edge(i))).collect();
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
        assert_eq!(settled_reloads(lab.edge(i)), *before, "edge e{i} reloaded");
    }
    // The block carries its expiry on every edge.
    for i in 0..3 {
        let page = lab.daemon(i).get("/v1/blocked-ips");
        let block = &page.json["blocks"][0];
        assert_eq!(block["key"], "127.0.0.2", "{page:?}");
        assert!(block["expires_at"].is_number(), "{page:?}");
    }
}

#[test]
fn a_change_computed_from_a_stale_state_is_refused_with_a_conflict() {
    let mut lab = FleetLab::start(1, 2);
    let backend = Backend::start("a");
    put_domain(&lab, 0, "race.example.com", &backend);
    lab.wait_current(WITHIN);
    // Edge 1 stops following; another writer changes the domain meanwhile.
    lab.edges[1].1.kill();
    let newer = Backend::start("b");
    put_domain(&lab, 0, "race.example.com", &newer);
    // Edge 1 (its state one revision behind) changes the same domain: refused, nothing written.
    let third = Backend::start("c");
    let refused = |server: &str, says: &str| {
        let out = lab
            .edge(1)
            .run(&["domain", "add", "race.example.com", "--server", server]);
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(text.contains(says), "{text}");
        let now = lab
            .etcd
            .get("/hapctl/state/domain/race.example.com")
            .unwrap();
        assert!(now.contains(&newer.addr()), "{now}");
    };
    refused(
        &third.addr(),
        "domain/race.example.com changed on another edge",
    );
    // Wanting back what it still has is no change from its old view: refused all the same.
    refused(&backend.addr(), "the change was judged on an old state");
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

/// A reload change HAProxy refuses on the edge that takes it: with either rollout, no edge
/// gets it. `canary` (the default) finds out by applying it there (restored at once);
/// `all` by `haproxy -c` on a scratch copy.
#[test]
fn a_change_haproxy_refuses_on_the_writing_edge_never_enters_the_fleet() {
    for rollout in ["canary", "all"] {
        let dir = tempfile::tempdir().unwrap();
        let (refusing, _) = testkit::refusing_haproxy(
            dir.path(),
            "timeout tarpit 23s",
            "s/timeout tarpit 23s/timeout tarpit nonsense/",
        );
        let lab = FleetLab::start_with(1, 2, |i, edge| {
            edge.write_settings(&format!(
                "{}rollout = \"{rollout}\"\n",
                edge.settings_text()
            ));
            if i == 0 {
                edge.set_env("HAPCTL_HAPROXY_BIN", &refusing.display().to_string());
            }
        });
        let before = lab.etcd.get("/hapctl/state/limits");
        let reloads = settled_reloads(lab.edge(1));
        let r = lab
            .daemon(0)
            .call("PUT", "/v1/limits", Some(&json!({ "tarpit_secs": 23 })));
        assert_eq!(r.status, 422, "{rollout}: {r:?}");
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("not published"), "{rollout}: {r:?}");
        assert_eq!(lab.etcd.get("/hapctl/state/limits"), before, "{rollout}");
        assert_eq!(
            settled_reloads(lab.edge(1)),
            reloads,
            "{rollout}: e1 reloaded"
        );
        assert_eq!(
            lab.edge(0).get("none.example.com", "/").status,
            404,
            "{rollout}: e0 serves"
        );
        if rollout == "canary" {
            let view = lab.status(1);
            assert_eq!(view["rollout"]["state"], "refused", "{view}");
            assert_eq!(view["rollout"]["canary"], "e0", "{view}");
            let why = view["rollout"]["message"].as_str().unwrap_or_default();
            assert!(why.contains("timeout tarpit"), "{view}");
        }
    }
}

/// `rollout = "canary"`: the edge that takes a reload change applies it first; the others
/// start theirs only after its reload was confirmed.
#[test]
fn a_reload_change_reaches_the_other_edges_only_after_the_canary_reloaded() {
    let lab = FleetLab::start(1, 3);
    let r = lab
        .daemon(0)
        .call("PUT", "/v1/limits", Some(&json!({ "tarpit_secs": 23 })));
    assert_eq!(r.status, 200, "{r:?}");
    let canary = last_apply(&lab, 0, "canary").expect("the canary's apply in e0's history");
    assert!(canary["reloads"].as_u64() >= Some(1), "{canary}");
    let done = canary["started_at_ms"].as_f64().unwrap() + canary["duration_ms"].as_f64().unwrap();
    lab.wait_all(WITHIN, |i, _| {
        if i == 0 {
            return Ok(());
        }
        // The files are written before the history row: wait for the row.
        let applied = last_apply(&lab, i, "fleet revision").ok_or("not applied yet")?;
        let started = applied["started_at_ms"].as_f64().unwrap();
        (started >= done && applied["reloads"].as_u64() >= Some(1))
            .then_some(())
            .ok_or_else(|| format!("e{i}: {applied} started before the canary's end {done}"))
    });
    let view = lab.status(2);
    assert_eq!(view["rollout"]["state"], "published", "{view}");
}

/// The newest apply of edge `i` whose trigger contains `what`.
fn last_apply(lab: &FleetLab, i: usize, what: &str) -> Option<serde_json::Value> {
    let applies = lab.daemon(i).get("/v1/applies").json;
    applies.as_array().and_then(|a| {
        a.iter()
            .find(|x| x["trigger"].as_str().is_some_and(|t| t.contains(what)))
            .cloned()
    })
}

#[test]
fn an_edge_that_refuses_a_revision_reports_it_once_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (refusing, calls) = testkit::refusing_haproxy(
        dir.path(),
        "timeout tarpit 23s",
        "s/timeout tarpit 23s/timeout tarpit nonsense/",
    );
    let lab = FleetLab::start_with(1, 3, |i, edge| {
        if i == 2 {
            edge.set_env("HAPCTL_HAPROXY_BIN", &refusing.display().to_string());
        }
    });
    let r = lab
        .daemon(0)
        .call("PUT", "/v1/limits", Some(&json!({ "tarpit_secs": 23 })));
    assert_eq!(r.status, 200, "{r:?}");
    lab.wait_all(WITHIN, |i, _| {
        let view = lab.status(0);
        let e = &view["edges"][i];
        let fine = match i {
            2 => e["refused"][1]
                .as_str()
                .is_some_and(|m| m.contains("timeout tarpit")),
            _ => e["lagging"] == false,
        };
        fine.then_some(()).ok_or_else(|| view.to_string())
    });
    assert!(
        std::fs::read_to_string(lab.edge(1).path("live/haproxy.cfg"))
            .unwrap()
            .contains("timeout tarpit 23s")
    );
    // e2 keeps serving what it had and does not try the refused revision again by itself.
    assert!(
        !std::fs::read_to_string(lab.edge(2).path("live/haproxy.cfg"))
            .unwrap()
            .contains("23s")
    );
    let checks = testkit::check_runs(&calls);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        testkit::check_runs(&calls),
        checks,
        "the refused revision was tried again"
    );
    // A later change that does not need the refused one still waits behind it on e2, which
    // says so; the others apply it.
    let backend = Backend::start("later");
    put_domain(&lab, 1, "later.example.com", &backend);
    for i in 0..2 {
        lab.wait_all(WITHIN, |j, edge| {
            if j == i {
                serves("later.example.com", "later")(j, edge)
            } else {
                Ok(())
            }
        });
    }
}

#[test]
fn the_old_managers_routes_write_to_the_fleet_too() {
    let lab = FleetLab::start(1, 2);
    let backend = Backend::start("legacy");
    let r = lab.daemon(1).call(
        "POST",
        "/api/domain",
        Some(
            &json!({"domain": "old.example.com", "backend_name": "old_backend",
            "servers": [{"name": "web1", "address": "127.0.0.1", "port": backend.port}]}),
        ),
    );
    assert_eq!(r.status, 200, "{r:?}");
    lab.wait_all(WITHIN, serves("old.example.com", "legacy"));
    let r = lab.daemon(1).call(
        "POST",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "127.0.0.2", "reason": "old route"})),
    );
    assert_eq!(
        (r.status, &r.json["status"]),
        (200, &json!("success")),
        "{r:?}"
    );
    lab.wait_all(WITHIN, |_, edge| {
        let r = edge.get_from(Ipv4Addr::new(127, 0, 0, 2), "old.example.com", "/");
        (r.status == 403)
            .then_some(())
            .ok_or_else(|| format!("{} {}", r.status, r.body))
    });
}

/// `[fleet] peer`: the edges share the client table through HAProxy's peers, so a client over
/// a limit on one edge is over it on the others; each edge's history names the peers change.
/// How fast is the benchmark's (`--only fleet-wide`).
#[test]
fn a_client_over_a_limit_on_one_edge_is_denied_on_the_others() {
    let lab = FleetLab::start_with(1, 3, |_, edge| {
        let peer = format!("127.0.0.1:{}", FleetLab::peer_port());
        edge.write_settings(&format!("{}peer = \"{peer}\"\n", edge.settings_text()));
    });
    let backend = Backend::start("limited");
    put_domain(&lab, 0, "limited.example.com", &backend);
    let r = lab.daemon(0).call(
        "PUT",
        "/v1/limits",
        Some(&json!({"preset": "custom", "rules": {"req_rate": "5:deny"}, "local_exempt": false})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    // Every edge's section lists the three edges.
    lab.wait_all(WITHIN, |_, edge| {
        let cfg = std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap_or_default();
        let servers = cfg
            .lines()
            .filter(|l| l.trim_start().starts_with("server e"))
            .count();
        (servers == 3 && cfg.contains("peers hapctl_fleet"))
            .then_some(())
            .ok_or_else(|| format!("{servers} peers in its section"))
    });
    lab.wait_all(WITHIN, serves("limited.example.com", "limited"));
    let client = Ipv4Addr::new(127, 0, 0, 3);
    let statuses: Vec<u16> = (0..8)
        .map(|_| {
            lab.edge(0)
                .get_from(client, "limited.example.com", "/")
                .status
        })
        .collect();
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    for i in 1..3 {
        lab.wait_all(WITHIN, |j, edge| {
            if j != i {
                return Ok(());
            }
            let r = edge.get_from(client, "limited.example.com", "/");
            (r.status == 429)
                .then_some(())
                .ok_or_else(|| format!("{}", r.status))
        });
    }
    let history = lab.daemon(2).get("/v1/applies").json.to_string();
    assert!(history.contains("fleet peers: e0, e1, e2"), "{history}");
}
