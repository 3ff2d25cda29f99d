//! The dashboard's serving and sign-in against a real `hapctl serve` and HAProxy, over real
//! HTTP: the embedded files and their headers, the token exchanged for an HttpOnly session
//! cookie, `/v1` with the cookie (changes only with the CSRF header, from the same origin),
//! sign-out, bearer tokens unchanged, and the paged domain list the dashboard reads.
//! The browser itself drives the dashboard in tests/edge/dashboard.rs.

use std::time::Duration;

use serde_json::{json, Value};

use testkit::daemon::{http_request, ApiResponse, Daemon};
use testkit::{Backend, Edge};

const SHOP: &str = "shop.example.com";

/// A request with these headers and an optional JSON body.
fn send(
    api: &Daemon,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> ApiResponse {
    let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
    let mut all = headers.to_vec();
    if bytes.is_some() {
        all.push(("Content-Type", "application/json"));
    }
    http_request(
        api.port,
        method,
        path,
        &all,
        bytes.as_deref(),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// Signs in; returns `(Cookie header value, CSRF token, Set-Cookie line)`.
fn sign_in(api: &Daemon, extra: &[(&str, &str)]) -> (String, String, String) {
    let r = send(
        api,
        "POST",
        "/ui/session",
        extra,
        Some(&json!({"token": api.token})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        !r.text.contains(&api.token),
        "the answer must not carry the token: {r:?}"
    );
    let set = r
        .header("set-cookie")
        .expect("a session cookie")
        .to_string();
    let pair = set.split(';').next().unwrap().to_string();
    let csrf = r.json["csrf"].as_str().expect("a CSRF token").to_string();
    (pair, csrf, set)
}

#[test]
fn the_dashboard_files_are_served_embedded_with_strict_headers() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let index = send(&api, "GET", "/ui/", &[], None);
    assert_eq!(index.status, 200, "{index:?}");
    assert!(index
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(index
        .text
        .contains("<script type=\"module\" src=\"js/app.js\">"));
    let csp = index.header("content-security-policy").unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(index.header("x-content-type-options"), Some("nosniff"));
    // Every module the page imports is there, as JavaScript.
    for path in ["js/app.js", "js/api.js", "js/pages/domains.js", "style.css"] {
        let r = send(&api, "GET", &format!("/ui/{path}"), &[], None);
        assert_eq!(r.status, 200, "{path}: {r:?}");
        let ct = r.header("content-type").unwrap();
        assert_eq!(
            ct.starts_with("text/javascript"),
            path.ends_with(".js"),
            "{path}: {ct}"
        );
    }
    let missing = send(&api, "GET", "/ui/js/nothing.js", &[], None);
    assert_eq!(missing.status, 404);
    let up = send(&api, "GET", "/ui/../api-token", &[], None);
    assert_ne!(up.status, 200, "{up:?}");
    assert!(!up.text.contains(&api.token));
    let bare = send(&api, "GET", "/ui", &[], None);
    assert_eq!(bare.status, 308);
    assert_eq!(bare.header("location"), Some("/ui/"));
    // The old manager's page (GET /, no token) leads to the dashboard.
    let root = send(&api, "GET", "/", &[], None);
    assert_eq!(root.status, 200, "{root:?}");
    assert!(root.text.contains(r#"<a href="/ui/">"#), "{}", root.text);
}

#[test]
fn the_session_cookie_replaces_the_token_and_changes_need_the_csrf_header() {
    let edge = Edge::started();
    let app = Backend::start("shop");
    let api = Daemon::start(&edge);

    // Nothing without a session.
    assert_eq!(send(&api, "GET", "/v1/status", &[], None).status, 401);
    assert_eq!(send(&api, "GET", "/ui/session", &[], None).status, 401);

    // A wrong token: refused at its field, slowly, and no cookie.
    let wrong = send(
        &api,
        "POST",
        "/ui/session",
        &[],
        Some(&json!({"token": "0".repeat(64)})),
    );
    assert_eq!(wrong.status, 401, "{wrong:?}");
    assert_eq!(wrong.error_field(), "token");
    assert!(wrong.header("set-cookie").is_none());
    let not_json = send(&api, "POST", "/ui/session", &[], None);
    assert!(not_json.header("set-cookie").is_none(), "{not_json:?}");

    let (cookie, csrf, set) = sign_in(&api, &[]);
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    assert!(
        set.contains("Path=/") && set.contains("Max-Age=43200"),
        "{set}"
    );
    assert!(!set.contains("Secure"), "plain HTTP on loopback: {set}");
    assert_ne!(csrf, api.token);
    let (_, _, over_tls) = sign_in(&api, &[("X-Forwarded-Proto", "https")]);
    assert!(over_tls.ends_with("; Secure"), "{over_tls}");

    // Reads with the cookie alone; a reloaded page gets its CSRF token back.
    let c = [("Cookie", cookie.as_str())];
    let status = send(&api, "GET", "/v1/status", &c, None);
    assert_eq!(status.status, 200, "{status:?}");
    let again = send(&api, "GET", "/ui/session", &c, None);
    assert_eq!(again.json["csrf"], csrf.as_str());
    assert_eq!(again.header("cache-control"), Some("no-store"));

    // Changes: refused without the CSRF header, with a wrong one, from another origin.
    let body = json!({"servers": [{"address": app.addr()}]});
    let path = format!("/v1/domains/{SHOP}");
    let origin_self = format!("http://127.0.0.1:{}", api.port);
    for (headers, why) in [
        (vec![("Cookie", cookie.as_str())], "no CSRF header"),
        (
            vec![
                ("Cookie", cookie.as_str()),
                ("X-CSRF-Token", api.token.as_str()),
            ],
            "the API token is not the CSRF token",
        ),
        (
            vec![
                ("Cookie", cookie.as_str()),
                ("X-CSRF-Token", csrf.as_str()),
                ("Origin", "http://attacker.example"),
            ],
            "another origin",
        ),
        (
            vec![("X-CSRF-Token", csrf.as_str())],
            "the CSRF token without the cookie",
        ),
    ] {
        let r = send(&api, "PUT", &path, &headers, Some(&body));
        assert!(matches!(r.status, 401 | 403), "{why}: {r:?}");
    }
    assert!(api.domain_names().is_empty(), "nothing changed");
    assert_eq!(edge.get(SHOP, "/").status, 404, "not routed yet");

    let ok = send(
        &api,
        "PUT",
        &path,
        &[
            ("Cookie", cookie.as_str()),
            ("X-CSRF-Token", csrf.as_str()),
            ("Origin", origin_self.as_str()),
        ],
        Some(&body),
    );
    assert_eq!(ok.status, 201, "{ok:?}");
    edge.wait_for_body(SHOP, "shop");

    // Polling: an ETag, and a 304 without a body while nothing changed.
    let page = "/v1/domains?limit=10";
    let first = send(&api, "GET", page, &c, None);
    let tag = first.header("etag").expect("an ETag").to_string();
    let same = send(
        &api,
        "GET",
        page,
        &[("Cookie", cookie.as_str()), ("If-None-Match", tag.as_str())],
        None,
    );
    assert_eq!(same.status, 304, "{same:?}");
    assert!(same.text.is_empty());
    assert!(
        api.get(page).header("etag").is_none(),
        "bearer answers unchanged"
    );

    // The cookie is the dashboard's way into /v1 only, not into the old manager's routes.
    assert_eq!(send(&api, "GET", "/api/domains", &c, None).status, 401);
    // Bearer tokens work as before, with or without a cookie.
    assert_eq!(api.get("/v1/status").status, 200);

    // Sign-out needs the CSRF token too; then the cookie opens nothing.
    assert_eq!(send(&api, "DELETE", "/ui/session", &c, None).status, 403);
    let out = send(
        &api,
        "DELETE",
        "/ui/session",
        &[("Cookie", cookie.as_str()), ("X-CSRF-Token", csrf.as_str())],
        None,
    );
    assert_eq!(out.status, 200, "{out:?}");
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(send(&api, "GET", "/v1/status", &c, None).status, 401);
    assert_eq!(send(&api, "GET", "/ui/session", &c, None).status, 401);
    let late = send(
        &api,
        "DELETE",
        &path,
        &[("Cookie", cookie.as_str()), ("X-CSRF-Token", csrf.as_str())],
        None,
    );
    assert_eq!(late.status, 401, "{late:?}");
    assert_eq!(api.domain_names().len(), 1);
}

#[test]
fn domains_are_listed_by_pages_with_a_search() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    for name in [
        "a.example.com",
        "b.example.com",
        "c.example.org",
        "d.example.com",
    ] {
        edge.ok(&["domain", "add", name, "--server", &app.addr()]);
    }
    let api = Daemon::start(&edge);
    // No parameter: the bare array, as before.
    assert_eq!(api.get("/v1/domains").json.as_array().unwrap().len(), 4);

    let first = api.get("/v1/domains?limit=3");
    assert_eq!(first.status, 200, "{first:?}");
    let names = |r: &ApiResponse| -> Vec<String> {
        r.json["domains"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["domain"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(&first),
        ["a.example.com", "b.example.com", "c.example.org"]
    );
    assert_eq!(first.json["total"], 4);
    assert_eq!(first.json["next"], "c.example.org");
    assert_eq!(first.json["domains"][0]["suspended"], false);
    let second = api.get("/v1/domains?limit=3&after=c.example.org");
    assert_eq!(names(&second), ["d.example.com"]);
    assert!(second.json["next"].is_null());

    let found = api.get("/v1/domains?q=.ORG");
    assert_eq!(names(&found), ["c.example.org"]);
    assert_eq!(found.json["total"], 1);
    for bad in ["limit=0", "limit=5000", "page=2"] {
        let r = api.get(&format!("/v1/domains?{bad}"));
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert!(!r.error_field().is_empty(), "{bad}: {r:?}");
    }
}

/// `curl` over the edge's HTTPS bind with `host` resolved to it: `(status, headers, body)`.
fn through_edge(
    edge: &Edge,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String, String) {
    let port = edge.https_port;
    let mut curl = std::process::Command::new("curl");
    curl.args([
        "-sSk",
        "-D",
        "-",
        "--max-time",
        "10",
        "-X",
        method,
        "--resolve",
    ])
    .arg(format!("{host}:{port}:127.0.0.1"));
    for (k, v) in headers {
        curl.arg("-H").arg(format!("{k}: {v}"));
    }
    if let Some(body) = body {
        curl.args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(body.to_string());
    }
    curl.arg(format!("https://{host}:{port}{path}"));
    let out = testkit::run_bounded(curl, Duration::from_secs(15));
    assert!(out.status.success(), "curl: {}", testkit::describe(&out));
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

#[test]
fn the_dashboard_works_behind_the_edge_over_https() {
    const ADMIN: &str = "admin.example.com";
    let edge = Edge::started();
    let app = Backend::start("shop");
    let api = Daemon::start(&edge);
    // The edge serves the API under a name of its own, TLS terminated by HAProxy.
    edge.ok(&[
        "domain",
        "add",
        ADMIN,
        "--server",
        &format!("127.0.0.1:{}", api.port),
    ]);

    let (status, _, page) = through_edge(&edge, ADMIN, "GET", "/ui/", &[], None);
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("js/app.js"), "{page}");

    let (status, head, body) = through_edge(
        &edge,
        ADMIN,
        "POST",
        "/ui/session",
        &[],
        Some(&json!({"token": api.token})),
    );
    assert_eq!(status, 200, "{head}{body}");
    let set = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("a session cookie: {head}"));
    assert!(
        set.contains("; Secure") && set.contains("HttpOnly"),
        "over HTTPS the cookie is Secure: {set}"
    );
    let cookie = set
        .split_once(':')
        .unwrap()
        .1
        .trim()
        .split(';')
        .next()
        .unwrap();
    let csrf = serde_json::from_str::<Value>(&body).unwrap()["csrf"]
        .as_str()
        .unwrap()
        .to_string();

    let c = [("Cookie", cookie)];
    let (status, _, body) = through_edge(&edge, ADMIN, "GET", "/v1/status", &c, None);
    assert_eq!(status, 200, "{body}");

    // A change from the page's own public origin goes through; a foreign origin does not.
    let change = json!({"servers": [{"address": app.addr()}]});
    let path = format!("/v1/domains/{SHOP}");
    let public_origin = format!("https://{ADMIN}:{}", edge.https_port);
    let foreign = [
        ("Cookie", cookie),
        ("X-CSRF-Token", csrf.as_str()),
        ("Origin", "https://attacker.example"),
    ];
    let (status, _, body) = through_edge(&edge, ADMIN, "PUT", &path, &foreign, Some(&change));
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        send(
            &api,
            "GET",
            &path,
            &[("Authorization", &format!("Bearer {}", api.token))],
            None
        )
        .status,
        404,
        "nothing changed"
    );
    let own = [
        ("Cookie", cookie),
        ("X-CSRF-Token", csrf.as_str()),
        ("Origin", public_origin.as_str()),
    ];
    let (status, _, body) = through_edge(&edge, ADMIN, "PUT", &path, &own, Some(&change));
    assert!(status == 200 || status == 201, "{status} {body}");
    let (status, _, body) = through_edge(&edge, SHOP, "GET", "/", &[], None);
    assert_eq!(
        (status, body.as_str()),
        (200, "shop"),
        "the new domain is served"
    );
}
