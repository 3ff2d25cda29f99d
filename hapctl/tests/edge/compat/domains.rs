//! `GET /api/domains`, `POST /api/domain`, `DELETE /api/domain`.

use serde_json::{json, Value};

use super::{assert_e1, assert_keys, old_edge, php_message, SHOP};
use testkit::daemon::Daemon;

const ROW: &[&str] = &[
    "id",
    "domain",
    "ssl_enabled",
    "ssl_cert_path",
    "template_override",
    "is_wildcard",
    "backend_name",
];

#[test]
fn domains_answer_with_the_old_shapes_codes_and_stable_ids() {
    let (edge, app, api) = old_edge();
    let server = |options: &str| json!({"name": "web1", "address": "127.0.0.1", "port": app.port, "options": options});

    // Create: 200 (never 201), the id of the new row. The CLI's SHOP got id 1.
    let body = json!({"domain": "legacy.example.com", "backend_name": "legacy_backend",
        "template_override": null, "servers": [server("check weight 10")], "is_wildcard": false});
    let r = api.call("POST", "/api/domain", Some(&body));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json, json!({"status": "success", "domain_id": 2}));
    assert_eq!(edge.get("legacy.example.com", "/").body, "ok");

    // Update: same id. Extra fields ignored (top level and in a server), as before.
    let mut update = body.clone();
    update["servers"] = json!([{"name": "web2", "address": "127.0.0.1", "port": app.port,
        "options": "check maxconn 100", "comment": "extra"}]);
    update["panel_user"] = json!("admin");
    let r = api.call("POST", "/api/domain", Some(&update));
    assert_eq!(
        r.json,
        json!({"status": "success", "domain_id": 2}),
        "{r:?}"
    );

    // The old clients' inputs: a port as a numeric string, `is_wildcard` as 1, no options.
    let r = api.call(
        "POST",
        "/api/domain",
        Some(
            &json!({"domain": "w.example.com", "backend_name": "w_backend", "is_wildcard": 1,
            "template_override": "websocket",
            "servers": [{"name": "s1", "address": "127.0.0.1", "port": app.port.to_string()}]}),
        ),
    );
    assert_eq!(
        r.json,
        json!({"status": "success", "domain_id": 3}),
        "{r:?}"
    );
    assert_eq!(edge.get("chat.w.example.com", "/").body, "ok", "wildcard");

    // GET: a bare array in id order, the old fields and types.
    let r = api.get("/api/domains");
    assert_eq!(r.status, 200, "{r:?}");
    let rows = r
        .json
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {r:?}"));
    for row in rows {
        assert_keys(row, ROW);
    }
    let ids: Vec<i64> = rows.iter().map(|d| d["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3], "{r:?}");
    assert_eq!(rows[0]["domain"], SHOP);
    assert_eq!(
        (
            &rows[2]["domain"],
            &rows[2]["is_wildcard"],
            &rows[2]["template_override"]
        ),
        (&json!("*.w.example.com"), &json!(1), &json!("websocket"))
    );
    assert_eq!(
        (
            &rows[1]["is_wildcard"],
            &rows[1]["ssl_enabled"],
            &rows[1]["ssl_cert_path"],
            &rows[1]["template_override"]
        ),
        (&json!(0), &json!(0), &Value::Null, &Value::Null)
    );
    // The backend_name each client gave; the CLI's domain shows hapctl's own name.
    let names: Vec<&str> = rows
        .iter()
        .map(|d| d["backend_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["d_shop.example.com", "legacy_backend", "w_backend"]);

    // DELETE: a wildcard posted bare (with is_wildcard) is deleted under the same bare name.
    let r = api.call(
        "DELETE",
        "/api/domain",
        Some(&json!({"domain": "w.example.com"})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"status": "success", "message": "Domain configuration removed"})
    );
    assert_eq!(edge.get("chat.w.example.com", "/").status, 404);
    let r = api.call(
        "DELETE",
        "/api/domain",
        Some(&json!({"domain": "w.example.com"})),
    );
    assert_e1(&r, 404, "Domain not found");
    assert_eq!(php_message(&r), "Domain not found");
    let r = api.call("DELETE", "/api/domain", Some(&json!({"backend_name": "x"})));
    assert_e1(&r, 400, "Domain is required");

    // Ids survive a restart and are never given to another domain.
    drop(api);
    let api = Daemon::start(&edge);
    let r = api.call(
        "POST",
        "/api/domain",
        Some(&json!({"domain": "new.example.com", "backend_name": "n",
            "servers": [{"name": "s1", "address": "127.0.0.1", "port": app.port}]})),
    );
    assert_eq!(
        r.json,
        json!({"status": "success", "domain_id": 4}),
        "3 was removed: {r:?}"
    );
    let r = api.call("POST", "/api/domain", Some(&update));
    assert_eq!(r.json["domain_id"], 2, "{r:?}");
    let ids: Vec<i64> = api
        .get("/api/domains")
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 4]);
}

#[test]
fn the_backend_name_a_client_gave_is_what_it_reads_back() {
    let (edge, app, api) = old_edge();
    let label = |api: &Daemon| {
        let list = api.get("/api/domains").json;
        let row = list
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["domain"] == "blog.example.com");
        row.map(|d| d["backend_name"].as_str().unwrap().to_string())
    };
    let server = json!({"name": "web1", "address": "127.0.0.1", "port": app.port});
    let body =
        json!({"domain": "blog.example.com", "backend_name": "WP blog #1", "servers": [server]});
    assert_eq!(api.call("POST", "/api/domain", Some(&body)).status, 200);
    assert_eq!(label(&api).as_deref(), Some("WP blog #1"));
    let cfg = std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap();
    assert!(!cfg.contains("WP blog"), "a label is never rendered");

    // Changed through /v1 or the CLI, the domain keeps it; across a restart too.
    let put = json!({"servers": [{"address": format!("127.0.0.1:{}", app.port), "weight": 5}]});
    assert_eq!(
        api.call("PUT", "/v1/domains/blog.example.com", Some(&put))
            .status,
        200
    );
    edge.ok(&["domain", "add", "blog.example.com", "--server", &app.addr()]);
    drop(api);
    let api = Daemon::start(&edge);
    assert_eq!(label(&api).as_deref(), Some("WP blog #1"));

    // Posted again, it is replaced; a label that is not printable text is refused.
    let mut again = body.clone();
    again["backend_name"] = json!("blog_backend");
    assert_eq!(api.call("POST", "/api/domain", Some(&again)).status, 200);
    assert_eq!(label(&api).as_deref(), Some("blog_backend"));
    for bad in [json!("a\nb"), json!("x".repeat(129)), json!("  ")] {
        let mut refused = body.clone();
        refused["backend_name"] = bad;
        assert_e1(
            &api.call("POST", "/api/domain", Some(&refused)),
            400,
            "backend_name",
        );
    }
    assert_eq!(label(&api).as_deref(), Some("blog_backend"));

    // It goes with the domain: added again without one, hapctl's own name is shown.
    let r = api.call(
        "DELETE",
        "/api/domain",
        Some(&json!({"domain": "blog.example.com"})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        api.call("PUT", "/v1/domains/blog.example.com", Some(&put))
            .status,
        201
    );
    assert_eq!(label(&api).as_deref(), Some("d_blog.example.com"));
}

#[test]
fn refused_domain_input_gets_an_e1_400_naming_the_field_and_changes_nothing() {
    let (edge, app, api) = old_edge();
    let live = edge.live_files();
    let applies = api.get("/v1/applies").json;
    let listed = api.get("/api/domains").json;
    let with = |server: Value, extra: Value| {
        let mut body = json!({"domain": "new.example.com", "backend_name": "new_backend", "servers": [server]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let ok = json!({"name": "s1", "address": "127.0.0.1", "port": app.port});
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"backend_name": "b", "servers": [ok]}),
            "Domain and backend_name are required",
        ),
        (
            json!({"domain": "new.example.com", "servers": [ok]}),
            "Domain and backend_name are required",
        ),
        (
            json!({"domain": "", "backend_name": "b"}),
            "Domain and backend_name are required",
        ),
        (
            with(
                json!({"name": "s1", "address": "127.0.0.1", "port": app.port, "options": "check redir /elsewhere"}),
                json!({}),
            ),
            "servers[0].options",
        ),
        (
            with(
                json!({"name": "s1", "address": "127.0.0.1", "port": app.port, "options": "check\n use-server x"}),
                json!({}),
            ),
            "servers[0].options",
        ),
        (
            with(
                json!({"name": "s1", "address": "127.0.0.1", "port": "80a"}),
                json!({}),
            ),
            "servers[0].port",
        ),
        (
            with(
                json!({"name": "s1", "address": "127.0.0.1", "port": 0}),
                json!({}),
            ),
            "servers[0].port",
        ),
        (
            with(json!({"name": "s1", "address": "127.0.0.1"}), json!({})),
            "servers[0].port",
        ),
        (
            with(
                json!({"name": "s1", "address": "127.0.0.1 backup", "port": 80}),
                json!({}),
            ),
            "servers[0].address",
        ),
        (
            with(json!({"name": "s1", "port": 80}), json!({})),
            "servers[0].address",
        ),
        (
            with(
                ok.clone(),
                json!({"template_override": "hap_backend_custom"}),
            ),
            "template_override",
        ),
        (
            with(ok.clone(), json!({"is_wildcard": "maybe"})),
            "is_wildcard",
        ),
        (
            with(ok.clone(), json!({"domain": "bad_name!.example.com"})),
            "domain",
        ),
        (with(ok.clone(), json!({"servers": []})), "server"),
        (
            with(ok.clone(), json!({"servers": "127.0.0.1:80"})),
            "servers",
        ),
        (with(json!(5), json!({})), "servers[0]"),
    ];
    for (body, message) in &cases {
        let r = api.call("POST", "/api/domain", Some(body));
        assert_e1(&r, 400, message);
    }
    assert_eq!(edge.live_files(), live, "the live files changed");
    assert_eq!(api.get("/v1/applies").json, applies, "an apply ran");
    assert_eq!(api.get("/api/domains").json, listed);
}
