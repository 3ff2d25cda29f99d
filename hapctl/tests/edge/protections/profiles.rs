//! The `wordpress` path-protection profile against the real haproxy: each old gate (PEER-API
//! §2.7) and the two POST limits (§2.6) behave as before, switched per domain at runtime (0
//! reloads), trusted clients exempt, other domains untouched, URIs normalised, hostile input
//! refused with nothing written.

use std::net::Ipv4Addr;
use std::thread;

use testkit::daemon::Daemon;
use testkit::pages::{log_line, override_template, themed_page};
use testkit::{http_send, Backend, Edge, Response};

const WP: &str = "blog.example.com";
const PLAIN: &str = "plain.example.com";

fn client(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

/// A body-less request from `from`, with a Cookie header unless `cookie` is empty.
fn send(
    edge: &Edge,
    from: Ipv4Addr,
    method: &str,
    host: &str,
    path: &str,
    cookie: &str,
) -> Response {
    let mut headers = Vec::new();
    if !cookie.is_empty() {
        headers.push(("Cookie", cookie));
    }
    if method == "POST" {
        headers.push(("Content-Length", "0"));
    }
    http_send(Some(from), method, edge.port, host, path, &headers)
}

fn get(edge: &Edge, host: &str, path: &str) -> Response {
    send(edge, client(2), "GET", host, path, "")
}

fn reloads(edge: &Edge) -> u32 {
    edge.show_proc().master.reloads
}

/// An edge with WP (wordpress profile) and PLAIN (none), local addresses not exempt.
fn wp_edge(extra_limits: &[&str]) -> (Edge, Backend) {
    let edge = Edge::started();
    let app = Backend::start("ok");
    for host in [WP, PLAIN] {
        edge.ok(&["domain", "add", host, "--server", &app.addr()]);
    }
    let mut args = vec!["limits", "set", "--local-exempt", "off"];
    args.extend_from_slice(extra_limits);
    edge.ok(&args);
    let before = reloads(&edge);
    edge.ok(&["domain", "profile", WP, "--add", "wordpress"]);
    assert_eq!(reloads(&edge), before, "enabling a profile is a map change");
    (edge, app)
}

#[test]
fn the_wordpress_gates_behave_as_the_old_rules() {
    let (edge, _app) = wp_edge(&[]);

    // wp-login cookie challenge: the form sets whplc, a POST without it is refused.
    let form = get(&edge, WP, "/wp-login.php");
    assert_eq!(form.status, 200);
    let cookie = form.header("set-cookie").expect("the form sets the cookie");
    assert_eq!(
        cookie,
        "whplc=1; path=/; max-age=1800; httponly; secure; samesite=lax"
    );
    assert_eq!(
        send(&edge, client(2), "POST", WP, "/wp-login.php", "").status,
        403
    );
    assert_eq!(
        send(&edge, client(2), "POST", WP, "/wp-login.php", "whplc=1").status,
        200
    );

    // wp-admin gate: anonymous visitors go to wp-login with the path to come back to.
    let gate = get(&edge, WP, "/wp-admin/options.php?x=1");
    assert_eq!(gate.status, 302);
    assert_eq!(
        gate.header("location"),
        Some("/wp-login.php?redirect_to=%2fwp-admin%2foptions.php")
    );
    let sub = get(&edge, WP, "/blog/wp-admin/");
    assert_eq!(
        sub.header("location"),
        Some("/blog/wp-login.php?redirect_to=%2fblog%2fwp-admin%2f")
    );
    for allowed in [
        "/wp-admin/admin-ajax.php",
        "/wp-admin/admin-post.php",
        "/wp-admin/load-styles.php",
        "/wp-admin/load-scripts.php",
        "/wp-admin/css/forms.css",
        "/wp-admin/js/common.js",
        "/wp-admin/images/logo.png",
    ] {
        assert_eq!(
            get(&edge, WP, allowed).status,
            200,
            "{allowed} passes the gate"
        );
    }
    // An asset path naming a .php file, and install.php, are gated.
    assert_eq!(get(&edge, WP, "/wp-admin/css/x.php").status, 302);
    assert_eq!(get(&edge, WP, "/wp-admin/install.php").status, 302);
    // Encoded separators and unsafe paths are refused.
    assert_eq!(get(&edge, WP, "/wp-admin%2foptions.php").status, 403);
    assert_eq!(get(&edge, WP, "/x/wp-admin%5Coptions.php").status, 403);
    assert_eq!(get(&edge, WP, "/\\x/wp-admin/options.php").status, 403);
    // A logged-in visitor passes.
    let logged_in = "a=1; wordpress_logged_in_abc=xyz";
    assert_eq!(
        send(&edge, client(2), "GET", WP, "/wp-admin/", logged_in).status,
        200
    );

    // wp-json batch virtual patch, anonymous only.
    for path in [
        "/wp-json/batch/v1",
        "/?rest_route=/batch/v1",
        "/index.php?rest_route=%2Fbatch%2Fv1",
    ] {
        assert_eq!(get(&edge, WP, path).status, 403, "{path}");
        assert_eq!(
            send(&edge, client(2), "POST", WP, path, logged_in).status,
            200,
            "{path}"
        );
    }

    // URI normalisation: the gates see, and the backend receives, the normalised path.
    for sneaky in [
        "/wp-admin//options.php",
        "/%77p-admin/options.php",
        "/x/../wp-admin/options.php",
    ] {
        assert_eq!(get(&edge, WP, sneaky).status, 302, "{sneaky}");
    }
    let seen = get(&edge, PLAIN, "/a//b/./c/../d?q=%7e");
    assert_eq!(seen.seen("request-line"), "get /a/b/d?q=~ http/1.1");

    // A domain without the profile is untouched.
    assert_eq!(
        send(&edge, client(2), "POST", PLAIN, "/wp-login.php", "").status,
        200
    );
    assert_eq!(get(&edge, PLAIN, "/wp-admin/").status, 200);
    assert_eq!(get(&edge, PLAIN, "/wp-json/batch/v1").status, 200);
    assert!(get(&edge, PLAIN, "/wp-login.php")
        .header("set-cookie")
        .is_none());

    // A trusted client (the rate-limit exemption map) skips the profile, at runtime.
    let before = reloads(&edge);
    edge.ok(&["limits", "exempt", "add", "127.0.0.5"]);
    assert_eq!(
        send(&edge, client(5), "POST", WP, "/wp-login.php", "").status,
        200
    );
    assert_eq!(
        send(&edge, client(5), "GET", WP, "/wp-admin/", "").status,
        200
    );

    // The per-host gate exemption: wp-admin open, the other gates stay.
    edge.ok(&["domain", "profile", WP, "--wp-admin-gate", "off"]);
    assert_eq!(get(&edge, WP, "/wp-admin/").status, 200);
    assert_eq!(get(&edge, WP, "/wp-admin%2fx").status, 200);
    assert_eq!(
        send(&edge, client(2), "POST", WP, "/wp-login.php", "").status,
        403
    );

    // Off again: every gate is gone; nothing reloaded.
    edge.ok(&["domain", "profile", WP, "--rm", "wordpress"]);
    assert_eq!(
        send(&edge, client(2), "POST", WP, "/wp-login.php", "").status,
        200
    );
    assert_eq!(get(&edge, WP, "/wp-json/batch/v1").status, 200);
    assert_eq!(
        reloads(&edge),
        before,
        "profile changes and exemptions are map changes"
    );
}

#[test]
fn the_two_post_limits_trip_at_their_thresholds() {
    // A 1 s tarpit keeps the test short (the tarpit length is the limits' setting).
    let (edge, _app) = wp_edge(&["--tarpit", "1"]);
    let post = |from, path| send(&edge, from, "POST", WP, path, "whplc=1").status;
    let a = client(3);
    for i in 1..=30 {
        assert_eq!(post(a, "/wp-login.php"), 200, "login POST {i} of 30");
    }
    let started = std::time::Instant::now();
    assert_eq!(
        post(a, "/wp-login.php"),
        429,
        "the 31st login POST is tarpitted"
    );
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    // Another client, and GETs, are not counted.
    assert_eq!(post(client(4), "/wp-login.php"), 200);
    assert_eq!(send(&edge, a, "GET", WP, "/wp-login.php", "").status, 200);

    let b = client(6);
    for i in 1..=60 {
        assert_eq!(post(b, "/xmlrpc.php"), 200, "xmlrpc POST {i} of 60");
    }
    assert_eq!(
        post(b, "/xmlrpc.php"),
        429,
        "the 61st xmlrpc POST is tarpitted"
    );
    // Its own table: the login counter of b is untouched.
    assert_eq!(post(b, "/wp-login.php"), 200);
}

#[test]
fn wordpress_denies_answer_themed_pages_with_the_request_id() {
    let (edge, _app) = wp_edge(&["--tarpit", "1"]);
    let _daemon = Daemon::start(&edge);
    let refused = send(&edge, client(2), "POST", WP, "/wp-login.php", "");
    let id = themed_page(&refused, 403, "refused by a protection rule");
    assert_eq!(refused.header("retry-after"), None);
    assert_eq!(log_line(&edge, &id)["denied_by"], "wordpress:login-cookie");

    // The login POST limit: still a tarpit, answered with the limited page.
    edge.ok(&["domain", "profile", WP, "--wp-login-posts", "1"]);
    let post = || send(&edge, client(3), "POST", WP, "/wp-login.php", "whplc=1");
    assert_eq!(post().status, 200);
    let started = std::time::Instant::now();
    let held = post();
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    let id = themed_page(&held, 429, "Too many requests");
    assert_eq!(held.header("retry-after"), Some("60"), "the 60 s window");
    let line = log_line(&edge, &id);
    assert_eq!(line["denied_by"], "wordpress:login-rate", "{line}");
    assert_eq!(line["status"], 429, "{line}");

    // An override of the denied page in the templates folder is served.
    override_template(
        &edge,
        "denied.html.j2",
        "<h1>Nope</h1><code>{{ request_id }}</code>\n",
    );
    edge.ok(&["apply"]);
    let batch = get(&edge, WP, "/wp-json/batch/v1");
    let id = themed_page(&batch, 403, "<h1>Nope</h1>");
    assert_eq!(log_line(&edge, &id)["denied_by"], "wordpress:batch");
}

#[test]
fn the_post_thresholds_change_at_runtime_and_survive_a_reload() {
    let (edge, _app) = wp_edge(&["--tarpit", "1"]);
    let posts = |from: Ipv4Addr, path: &str, n: usize| -> Vec<u16> {
        (0..n)
            .map(|_| send(&edge, from, "POST", WP, path, "whplc=1").status)
            .collect()
    };
    let before = reloads(&edge);
    let out = edge.ok(&["domain", "profile", WP, "--wp-login-posts", "3", "--json"]);
    assert!(out.contains("no reload"), "{out}");
    let a = client(7);
    assert_eq!(posts(a, "/wp-login.php", 4), vec![200, 200, 200, 429]);
    // Raised at runtime: counted 4 so far, the 5th and 6th pass, the 7th is over 6.
    edge.ok(&["domain", "profile", WP, "--wp-login-posts", "6"]);
    assert_eq!(posts(a, "/wp-login.php", 3), vec![200, 200, 429]);
    edge.ok(&["domain", "profile", WP, "--wp-xmlrpc-posts", "2"]);
    assert_eq!(posts(client(8), "/xmlrpc.php", 3), vec![200, 200, 429]);
    assert_eq!(reloads(&edge), before, "thresholds are map values");
    let map = std::fs::read_to_string(edge.path("live/maps/profiles.map")).unwrap();
    assert!(map.contains(&format!("\n{WP} 6:2:wordpress:\n")), "{map}");

    // Written to the map file a reload reads: kept by one (the new worker's tables are empty).
    edge.ok(&["limits", "set", "--tarpit", "2"]);
    assert!(reloads(&edge) > before);
    let mut got = posts(client(9), "/wp-login.php", 7);
    assert_eq!(got.pop(), Some(429), "the 7th login POST is over 6");
    assert!(got.iter().take(5).all(|s| *s == 200), "{got:?}");
    let shown = edge.run(&["domain", "profile", WP]);
    let said = String::from_utf8_lossy(&shown.stderr);
    assert!(
        said.contains("wp-login POSTs 6/60s, xmlrpc POSTs 2/60s"),
        "{said}"
    );
}

#[test]
fn hostile_profile_input_is_refused_with_nothing_written() {
    let (edge, app) = wp_edge(&[]);
    let before = edge.live_files();
    for args in [
        vec!["domain", "profile", WP, "--add", "drupal"],
        vec![
            "domain",
            "profile",
            WP,
            "--add",
            "wordpress\nhttp-request allow",
        ],
        vec!["domain", "profile", WP, "--rm", "WordPress"],
        vec!["domain", "profile", WP, "--add", ":wordpress:"],
        vec!["domain", "profile", WP, "--wp-admin-gate", "maybe"],
        vec!["domain", "profile", "bad host", "--add", "wordpress"],
    ] {
        edge.expect_code(2, &args);
    }
    for bad in [
        "0",
        "100001",
        "abc",
        "5\nhttp-request allow",
        " 5",
        "5s",
        "1e3",
        "-1",
    ] {
        for flag in ["--wp-login-posts", "--wp-xmlrpc-posts"] {
            let out = edge.expect_code(2, &["domain", "profile", WP, &format!("{flag}={bad}")]);
            assert!(out.contains(&flag[2..]), "{flag}={bad:?}: {out}");
        }
    }
    assert_eq!(edge.live_files(), before, "nothing written");
    // The profile is in the map file a reload reads: it survives one (a tarpit change reloads).
    let reloaded = reloads(&edge);
    edge.ok(&["limits", "set", "--tarpit", "2"]);
    assert!(reloads(&edge) > reloaded);
    assert_eq!(get(&edge, WP, "/wp-admin/").status, 302);
    // A removed domain takes its profiles with it: re-added, it starts without any.
    edge.ok(&["domain", "rm", WP]);
    edge.ok(&["domain", "add", WP, "--server", &app.addr()]);
    assert_eq!(get(&edge, WP, "/wp-admin/").status, 200);
}

#[test]
fn the_api_replaces_a_domains_profiles_at_runtime() {
    let (edge, _app) = wp_edge(&[]);
    let daemon = testkit::daemon::Daemon::start(&edge);
    let api = daemon.client();
    let before = reloads(&edge);
    let path = format!("/v1/domains/{PLAIN}/profiles");
    let on = api.call(
        "PUT",
        &path,
        Some(
            &serde_json::json!({"profiles": ["wordpress"], "wp_admin_gate": false, "wp_xmlrpc_posts": 2}),
        ),
    );
    assert_eq!(on.status, 200, "{}", on.text);
    assert_eq!(on.json["profiles"], serde_json::json!(["wordpress"]));
    assert_eq!(on.json["wp_admin_gate"], false);
    assert_eq!(
        (
            on.json["wp_login_posts"].clone(),
            on.json["wp_xmlrpc_posts"].clone()
        ),
        (30.into(), 2.into())
    );
    let xmlrpc: Vec<u16> = (0..3)
        .map(|_| send(&edge, client(9), "POST", PLAIN, "/xmlrpc.php", "").status)
        .collect();
    assert_eq!(
        xmlrpc,
        vec![200, 200, 429],
        "the threshold set through the API"
    );
    assert_eq!(
        send(&edge, client(2), "POST", PLAIN, "/wp-login.php", "").status,
        403
    );
    assert_eq!(get(&edge, PLAIN, "/wp-admin/").status, 200, "gate off");
    assert_eq!(get(&edge, PLAIN, "/wp-json/batch/v1").status, 403);
    // The access log (written by the daemon's receiver) names the rule that denied.
    for rule in ["wordpress:login-cookie", "wordpress:batch"] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let needle = format!("\"denied_by\":\"{rule}\"");
        while !std::fs::read_to_string(edge.path("logs/access.log"))
            .unwrap_or_default()
            .contains(&needle)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no log line with {needle}"
            );
            thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    // Unknown names, wrong types and unknown fields are refused; the domain keeps its set.
    for bad in [
        serde_json::json!({"profiles": ["drupal"]}),
        serde_json::json!({"profiles": ["wordpress\nhttp-request allow"]}),
        serde_json::json!({"profiles": "wordpress"}),
        serde_json::json!({"profiles": [], "extra": 1}),
    ] {
        let r = api.call("PUT", &path, Some(&bad));
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
    }
    for field in ["wp_login_posts", "wp_xmlrpc_posts"] {
        for value in [
            serde_json::json!(0),
            serde_json::json!(100001),
            serde_json::json!(-1),
            serde_json::json!("10"),
            serde_json::json!(1.5),
        ] {
            let body = serde_json::json!({"profiles": ["wordpress"], field: value});
            let r = api.call("PUT", &path, Some(&body));
            assert_eq!(r.status, 400, "{body}: {}", r.text);
            assert!(r.text.contains(field), "{body}: {}", r.text);
        }
    }
    assert_eq!(
        send(&edge, client(2), "POST", PLAIN, "/wp-login.php", "").status,
        403
    );
    let missing = api.call(
        "PUT",
        "/v1/domains/none.example.com/profiles",
        Some(&serde_json::json!({"profiles": ["wordpress"]})),
    );
    assert_eq!(missing.status, 404, "{}", missing.text);

    let off = api.call("PUT", &path, Some(&serde_json::json!({"profiles": []})));
    assert_eq!(off.status, 200, "{}", off.text);
    assert_eq!(
        send(&edge, client(2), "POST", PLAIN, "/wp-login.php", "").status,
        200
    );
    assert_eq!(
        reloads(&edge),
        before,
        "API profile changes are map changes"
    );
}
