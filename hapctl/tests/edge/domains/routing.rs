//! Old-manager parity at the edge, against the real HAProxy: the answer for unknown hosts
//! (`[edge] unknown_host`: the 404 page or the old 200 "site not configured" page, both
//! templates) and per-request SSE routing (event streams of a domain to its long-lived twin
//! backend), set from the CLI, `/v1` and the compat `POST /api/domain`. Which backend served a
//! request is read from the access log (`backend`), found by the request id the client got.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::daemon::Daemon;
use testkit::{Backend, Edge, Response};

const SHOP: &str = "shop.example.com";
const STREAM: &[(&str, &str)] = &[("Accept", "text/event-stream")];

/// The request id the edge gave a response (it is in the access log and on the pages).
fn request_id(r: &Response) -> String {
    let id = r.header("x-request-id").unwrap_or_default().to_string();
    assert_eq!(id.len(), 36, "a request id on every answer: {r:?}");
    id
}

/// The `backend` field of the access-log line of the request `r` answered.
fn backend_of(edge: &Edge, r: &Response) -> String {
    assert_eq!(r.status, 200, "{r:?}");
    let id = request_id(r);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(edge.path("logs/access.log")).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["id"] == id.as_str());
        if let Some(v) = found {
            return v["backend"].as_str().unwrap_or_default().to_string();
        }
        assert!(Instant::now() < deadline, "no access-log line for {id}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where a plain request, two kinds of event stream and two near misses of `host` go.
fn routes(edge: &Edge, host: &str) -> [String; 5] {
    [
        backend_of(edge, &edge.get(host, "/")),
        backend_of(edge, &edge.get_with_headers(host, "/events", STREAM)),
        backend_of(edge, &edge.get(host, "/api?action=stream&x=1")),
        backend_of(edge, &edge.get(host, "/api?action=streams")),
        backend_of(
            edge,
            &edge.get_with_headers(host, "/", &[("Accept", "text/html, application/json")]),
        ),
    ]
}

fn expect_routes(edge: &Edge, host: &str, normal: &str, streams: &str) {
    let n = normal.to_string();
    let s = streams.to_string();
    assert_eq!(
        routes(edge, host),
        [n.clone(), s.clone(), s, n.clone(), n],
        "plain, Accept: text/event-stream, ?action=stream, ?action=streams, Accept: text/html for {host}"
    );
}

fn config(edge: &Edge) -> String {
    std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap()
}

/// An unknown host's answer on `path`: `status`, a body containing `text` and the request id.
fn expect_page(edge: &Edge, path: &str, status: u16, text: &str) {
    let r = edge.get("nobody.example.net", path);
    assert_eq!(r.status, status, "{r:?}");
    assert!(r.body.contains(text), "{text:?} in {r:?}");
    assert!(
        r.body.contains(&request_id(&r)),
        "the page carries the id: {r:?}"
    );
}

#[test]
fn unknown_hosts_get_the_404_page_or_the_old_200_page_with_settable_text() {
    let edge = Edge::started();
    expect_page(&edge, "/", 404, "Unknown host");

    edge.set_setting_keys("edge", &[("unknown_host", "200".into())]);
    edge.ok(&["apply"]);
    expect_page(&edge, "/", 200, "Site Not Configured");
    // As the old default app answered: 200 on / only.
    expect_page(&edge, "/wp-login.php", 404, "Unknown host");

    // The texts are templates: an override in the templates folder is what is served.
    let templates = edge.path("templates");
    std::fs::create_dir_all(&templates).unwrap();
    for (file, text) in [
        ("not-configured.html.j2", "Parked by Example Hosting."),
        ("unknown-host.html.j2", "No such site here."),
    ] {
        let page = format!("<p>{text} Reference {{{{ request_id }}}}</p>\n");
        std::fs::write(templates.join(file), page).unwrap();
    }
    edge.write_settings(&edge.settings_text().replace(
        "# templates_dir = \"templates\"",
        "templates_dir = \"templates\"",
    ));
    edge.ok(&["apply"]);
    let r = edge.get("nobody.example.net", "/");
    assert_eq!(r.status, 200, "{r:?}");
    let id = request_id(&r);
    let expected = format!("<p>Parked by Example Hosting. Reference {id}</p>");
    assert_eq!(r.body.trim(), expected, "exactly the override's text");
    expect_page(&edge, "/x", 404, "No such site here. Reference");

    // Back to the default: the 404 page (overridden text) on / too.
    edge.set_setting_keys("edge", &[("unknown_host", "404".into())]);
    edge.ok(&["apply"]);
    expect_page(&edge, "/", 404, "No such site here.");

    // Anything else is refused, naming the key; the live files stay as they were.
    let before = edge.live_files();
    for bad in ["500", "ok", ""] {
        edge.set_setting_keys("edge", &[("unknown_host", bad.into())]);
        let out = edge.run(&["apply"]);
        let text = testkit::describe(&out);
        assert!(!out.status.success(), "{bad:?} accepted: {text}");
        assert!(text.contains("edge.unknown_host"), "{text}");
    }
    assert_eq!(edge.live_files(), before, "nothing changed");
    assert_eq!(edge.get("nobody.example.net", "/").status, 404);
}

#[test]
fn event_streams_go_to_the_twin_only_for_domains_with_sse_routing() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    let _daemon = Daemon::start(&edge);
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    // Off by default: everything to the normal backend, and no twin rendered.
    let normal = "d_shop.example.com";
    let twin = "d_shop.example.com_sse";
    expect_routes(&edge, SHOP, normal, normal);
    assert!(!config(&edge).contains(twin));

    edge.ok(&["domain", "sse", SHOP, "on"]);
    expect_routes(&edge, SHOP, normal, twin);
    let cfg = config(&edge);
    let section = cfg
        .split("\nbackend ")
        .find(|s| s.starts_with(twin))
        .expect("the twin backend");
    for line in [
        "option http-no-delay",
        "timeout server 6h",
        "timeout tunnel 6h",
        "timeout http-keep-alive 6h",
        &format!("server s1 {}", app.addr()),
    ] {
        assert!(section.contains(line), "{line} in {section}");
    }
    let listed: Value = serde_json::from_str(&edge.ok(&["domain", "ls", "--json"])).unwrap();
    assert_eq!(listed[0]["sse_routing"], true, "{listed}");
    // Replacing the domain without the flag turns it off, like its profile; with it, on.
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    expect_routes(&edge, SHOP, normal, normal);
    edge.ok(&[
        "domain",
        "add",
        SHOP,
        "--server",
        &app.addr(),
        "--sse-routing",
    ]);
    expect_routes(&edge, SHOP, normal, twin);
    edge.ok(&["domain", "sse", SHOP, "off"]);
    expect_routes(&edge, SHOP, normal, normal);
    assert!(!config(&edge).contains(twin));

    // A wildcard's SSE routing never reaches an exact name under it that has it off.
    edge.ok(&[
        "domain",
        "add",
        "*.example.com",
        "--server",
        &app.addr(),
        "--sse-routing",
    ]);
    expect_routes(
        &edge,
        "any.example.com",
        "w_example.com",
        "w_example.com_sse",
    );
    expect_routes(&edge, SHOP, normal, normal);

    // Refused: nothing changes.
    let before = edge.live_files();
    let out = edge.expect_code(2, &["domain", "sse", SHOP, "yes"]);
    assert!(out.contains("state") && out.contains("on or off"), "{out}");
    let out = edge.expect_code(7, &["domain", "sse", "absent.example.com", "on"]);
    assert!(out.contains("does not exist"), "{out}");
    let out = edge.expect_code(2, &["domain", "sse", "bad host!", "on"]);
    assert!(out.contains("domain"), "{out}");
    assert_eq!(edge.live_files(), before);
}

#[test]
fn the_v1_api_and_the_old_post_api_domain_set_sse_routing() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    let api = Daemon::start(&edge);
    let servers = json!([{"address": app.addr()}]);

    // On (created), then replaced without the field: off.
    for (body, status, on) in [
        (json!({"servers": servers, "sse_routing": true}), 201, true),
        (json!({"servers": servers}), 200, false),
    ] {
        let r = api.call("PUT", "/v1/domains/live.example.com", Some(&body));
        assert_eq!(r.status, status, "{r:?}");
        let shown = api.get("/v1/domains/live.example.com");
        assert_eq!(shown.json["sse_routing"], on, "{shown:?}");
        let streams = if on {
            "d_live.example.com_sse"
        } else {
            "d_live.example.com"
        };
        expect_routes(&edge, "live.example.com", "d_live.example.com", streams);
    }

    // Hostile values: 400, nothing changed.
    let before = edge.live_files();
    for bad in [json!("yes"), json!(1), json!(null), json!({"on": true})] {
        let body = json!({"servers": servers, "sse_routing": bad});
        let r = api.call("PUT", "/v1/domains/live.example.com", Some(&body));
        if bad.is_null() {
            // null is "absent": off, which it already is.
            assert_eq!(r.status, 200, "{r:?}");
            continue;
        }
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert!(r.text.contains("sse_routing"), "{bad}: {r:?}");
    }
    let r = api.call(
        "PUT",
        "/v1/domains/app.example.com",
        Some(&json!({"app": "shop", "sse_routing": true})),
    );
    assert_eq!((r.status, r.error_field()), (400, "sse_routing"), "{r:?}");
    assert_eq!(edge.live_files(), before);

    // The old clients: the default template (null) and the long-lived ones had the twin.
    let old = |domain: &str, template: Value, wildcard: bool| {
        let body = json!({"domain": domain, "backend_name": "x_backend", "template_override": template,
            "is_wildcard": wildcard, "servers": [{"name": "web1", "address": "127.0.0.1",
            "port": app.port.to_string(), "options": "check"}]});
        let r = api.call("POST", "/api/domain", Some(&body));
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.json["status"], "success", "{r:?}");
    };
    for (template, on) in [
        (Value::Null, true),
        (json!("hap_backend"), true),
        (json!("hap_backend_websocket"), true),
        (json!("hap_backend_longlived"), true),
        (json!("hap_backend_basic"), false),
        (json!("hap_backend_http_check"), false),
    ] {
        old("old.example.com", template.clone(), false);
        let twin = if on {
            "d_old.example.com_sse"
        } else {
            "d_old.example.com"
        };
        expect_routes(&edge, "old.example.com", "d_old.example.com", twin);
        assert_eq!(
            api.get("/v1/domains/old.example.com").json["sse_routing"],
            on,
            "{template}"
        );
    }
    // Its wildcard ACLs had no SSE routing.
    old("old.example.org", Value::Null, true);
    assert_eq!(
        api.get("/v1/domains/*.old.example.org").json["sse_routing"],
        false
    );
}

#[test]
fn the_old_routes_add_change_and_remove_domains_at_runtime_twin_included() {
    let edge = Edge::started();
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    let api = Daemon::start(&edge);
    let post = |domain: &str, app: &Backend| {
        let body = json!({"domain": domain, "backend_name": "wp_backend", "servers": [
            {"name": "web1", "address": "127.0.0.1", "port": app.port, "options": "check"}]});
        let r = api.call("POST", "/api/domain", Some(&body));
        assert_eq!(
            (r.status, &r.json["status"]),
            (200, &json!("success")),
            "{r:?}"
        );
    };
    // The first domain with a twin reloads: it loads the spare slots of that kind.
    post("first.example.com", &a);
    let cfg = config(&edge);
    assert!(
        cfg.contains("\nbackend slot_default_sse_15\n")
            && cfg.contains("\nbackend slot_default_sse_15_sse\n"),
        "spare slots with their twins: {cfg}"
    );
    let reloads = edge.show_proc().master.reloads;

    // The next ones take a slot and its twin through the runtime API: no reload.
    post(SHOP, &a);
    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");
    let (slot, twin) = ("slot_default_sse_0", "slot_default_sse_0_sse");
    expect_routes(&edge, SHOP, slot, twin);
    let section = |name: &str| {
        let cfg = config(&edge);
        let at = cfg.find(&format!("\nbackend {name}\n")).expect(name);
        cfg[at..]
            .split("\nbackend ")
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        section(twin).contains("timeout tunnel 6h"),
        "{}",
        section(twin)
    );
    assert!(
        section(twin).contains(&format!("server {SHOP}:web1 127.0.0.1:{} check", a.port)),
        "the files first: {}",
        section(twin)
    );

    // Its server replaced: in the slot and the twin, at runtime.
    post(SHOP, &b);
    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");
    expect_routes(&edge, SHOP, slot, twin);
    let stream = edge.get_with_headers(SHOP, "/events", STREAM);
    assert_eq!(stream.body.trim(), "b", "{stream:?}");
    assert_eq!(edge.get(SHOP, "/").body.trim(), "b");

    // Removed: its route, then its servers, at runtime; the slot's twin line stays for the
    // next domain.
    let r = api.call("DELETE", "/api/domain", Some(&json!({"domain": SHOP})));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");
    assert_eq!(edge.get(SHOP, "/").status, 404);
    let sse_map = std::fs::read_to_string(edge.path("live/maps/sse.map")).unwrap();
    assert!(sse_map.contains(&format!("{slot} {twin}\n")), "{sse_map}");

    // A reload in between loads the same from the files: first.example.com still served.
    edge.ok(&["haproxy", "reload"]);
    let first = "first.example.com";
    expect_routes(
        &edge,
        first,
        "d_first.example.com",
        "d_first.example.com_sse",
    );
    let reloads = edge.show_proc().master.reloads;

    // A domain whose twin is its own is removed at runtime too: its line in sse.map goes.
    let r = api.call("DELETE", "/api/domain", Some(&json!({"domain": first})));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");
    assert_eq!(edge.get(first, "/").status, 404);
    let sse_map = std::fs::read_to_string(edge.path("live/maps/sse.map")).unwrap();
    assert!(!sse_map.contains("d_first.example.com"), "{sse_map}");
}
