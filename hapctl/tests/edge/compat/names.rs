//! Servers named by host name that do not resolve (a container registered before it starts):
//! the old route answers 200 and says which servers wait, and every other domain is served.

use serde_json::json;

use super::{old_edge, reloads, SHOP};

#[test]
fn a_server_whose_name_does_not_resolve_waits_and_the_answer_names_it() {
    let (edge, app, api) = old_edge();
    let before = reloads(&edge);
    let body = json!({"domain": "blog.example.com", "backend_name": "wp_blog",
        "servers": [{"name": "wp", "address": "wp_site_1", "port": 80, "options": "check"},
            {"name": "web", "address": "127.0.0.1", "port": app.port, "options": "check"}]});
    let r = api.call("POST", "/api/domain", Some(&body));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["status"], "success", "the old shape: {r:?}");
    assert_eq!(r.json["domain_id"], 2);
    assert_eq!(
        r.json["unresolved_servers"],
        json!([{"domain": "blog.example.com", "server": "wp", "host": "wp_site_1", "seen": "haproxy"}])
    );
    assert_eq!(r.json["runtime_resolvers"], false);
    let warning = r.json["warning"].as_str().unwrap();
    for needle in [
        "wp_site_1 (blog.example.com server wp)",
        "down (in maintenance) until it resolves at a reload",
        "set [resolvers]",
    ] {
        assert!(warning.contains(needle), "{needle:?} in {warning}");
    }
    assert_eq!(reloads(&edge), before + 1, "one reload, not refused");
    // The name's server waits; the domain's other server and every other domain serve.
    assert_eq!(edge.get("blog.example.com", "/").body, "ok");
    assert_eq!(edge.get(SHOP, "/").body, "ok");

    // HAProxy's status says so too, for as long as the name does not resolve.
    let status = api.get("/v1/status");
    assert_eq!(
        status.json["resolution"]["unresolved_servers"][0]["host"], "wp_site_1",
        "{status:?}"
    );
    assert!(edge
        .ok(&["status"])
        .contains("WARNING: 1 server(s) do not resolve now: wp_site_1"));

    // A name that resolves: nothing waits. Addresses only: the old shape exactly.
    let local = json!({"domain": "local.example.com", "backend_name": "local",
        "servers": [{"name": "web", "address": "localhost", "port": app.port}]});
    let r = api.call("POST", "/api/domain", Some(&local));
    assert_eq!(
        r.json,
        json!({"status": "success", "domain_id": 3, "unresolved_servers": [], "runtime_resolvers": false}),
        "{r:?}"
    );
    let ip_only = json!({"domain": "ip.example.com", "backend_name": "ip",
        "servers": [{"name": "web", "address": "127.0.0.1", "port": app.port}]});
    let r = api.call("POST", "/api/domain", Some(&ip_only));
    assert_eq!(
        r.json,
        json!({"status": "success", "domain_id": 4}),
        "{r:?}"
    );

    // `/v1` answers the same fields; its only server waiting, the domain answers 503.
    let put = json!({"servers": [{"address": "db_primary:5432", "name": "db"}]});
    let r = api.call("PUT", "/v1/domains/db.example.com", Some(&put));
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.json["unresolved_servers"][0]["host"], "db_primary");
    assert_eq!(edge.get("db.example.com", "/").status, 503);
    let names: Vec<String> = api.get("/v1/status").json["resolution"]["unresolved_servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["host"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["wp_site_1", "db_primary"], "in domain order");
}
