//! Who may change the edge, and who did (docs/access.md), against a real `hapctl serve` and
//! HAProxy: every route × every scope as `/openapi.json` declares them (old routes included),
//! no secret anywhere after a run of every route, the audit trail of a burst of changes by
//! several tokens across a SIGKILL, no change without its record, dashboard sessions acting
//! with their token's scopes, the command line's changes, and plain HTTP off loopback refused.

mod tls;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use testkit::daemon::{http_call, http_request, ApiClient, ApiResponse, Daemon, Serve};
use testkit::{free_port, Edge};

const SCOPES: [&str; 6] = ["read", "blocks", "domains", "certs", "deliver", "admin"];

/// `hapctl token add NAME --scope SCOPE`: its secret (stdout, once).
fn add_token(edge: &Edge, name: &str, scope: &str) -> String {
    edge.ok(&["token", "add", name, "--scope", scope])
        .trim()
        .to_string()
}

/// One request as `token`, with `{}` as the body of routes that take one.
fn call_as(port: u16, token: &str, method: &str, path: &str, has_body: bool) -> ApiResponse {
    let (body, ct) = if has_body {
        (Some(&b"{}"[..]), Some("application/json"))
    } else {
        (None, None)
    };
    http_call(port, method, path, body, ct, Some(token)).unwrap()
}

/// A route of `/openapi.json` with the scope it declares (`None`: open).
struct Route {
    method: String,
    path: String,
    scope: Option<String>,
    has_body: bool,
}

fn routes(api: &ApiClient) -> Vec<Route> {
    let doc = api.get("/openapi.json");
    let mut out = Vec::new();
    for (path, ops) in doc.json["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            let scope = op["x-hapctl-scope"].as_str().map(String::from);
            // The extension and the bearer requirement say the same.
            let bearer = op.pointer("/security/0/bearer/0").and_then(Value::as_str);
            assert_eq!(scope.as_deref(), bearer, "{method} {path}: {op}");
            out.push(Route {
                method: method.to_uppercase(),
                path: path.clone(),
                scope,
                has_body: op.get("requestBody").is_some(),
            });
        }
    }
    assert!(out.len() > 70, "only {} routes", out.len());
    out
}

fn concrete(path: &str) -> String {
    path.replace("{name}", "scope.example.com")
        .replace("{key}", "192.0.2.1")
        .replace("{domain}", "scope.example.com")
        .replace("{id}", "1")
        .replace("{preset}", "cloudflare")
}

/// A token per scope, named `t-<scope>`: their secrets by scope.
fn token_per_scope(edge: &Edge) -> BTreeMap<&'static str, String> {
    SCOPES
        .iter()
        .map(|s| (*s, add_token(edge, &format!("t-{s}"), s)))
        .collect()
}

/// Every route with every scope's token: refused with 403 naming its scope unless the token
/// has it or is admin, and then let through (whatever the handler answers to `{}`). The
/// refused calls change nothing. Returns the tokens' secrets.
fn every_route_with_every_scope(edge: &Edge, api: &Daemon) -> BTreeMap<&'static str, String> {
    let tokens = token_per_scope(edge);
    let routes = routes(api);
    let reloads = edge.show_proc().master.reloads;
    let applies = api.get("/v1/applies").json;
    for r in &routes {
        let Some(need) = &r.scope else { continue };
        let path = concrete(&r.path);
        for (scope, secret) in &tokens {
            if *scope == need || *scope == "admin" {
                continue;
            }
            let a = call_as(api.port, secret, &r.method, &path, r.has_body);
            assert_eq!(a.status, 403, "{} {path} as {scope}: {a:?}", r.method);
            let message = if path.starts_with("/api/") {
                a.json["message"].as_str().unwrap_or_default().to_string()
            } else {
                assert_eq!(a.error_field(), "scope", "{a:?}");
                a.json["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            };
            assert!(message.contains(&format!("`{need}`")), "{message}");
        }
    }
    assert_eq!(
        edge.show_proc().master.reloads,
        reloads,
        "a refused call reloaded"
    );
    assert_eq!(
        api.get("/v1/applies").json,
        applies,
        "a refused call applied"
    );
    assert!(api.blocked_keys().is_empty() && api.domain_names().is_empty());
    for r in &routes {
        // An order from Let's Encrypt's production directory (api_certs.rs runs it against
        // Pebble), and a stop that would leave the routes after it without HAProxy.
        if r.path.ends_with("/request") && r.path.starts_with("/v1/")
            || r.path == "/v1/haproxy/stop"
        {
            continue;
        }
        let path = concrete(&r.path);
        let allowed: Vec<&str> = match &r.scope {
            None => SCOPES.to_vec(),
            Some(need) => vec![need.as_str(), "admin"],
        };
        for scope in allowed {
            let a = call_as(api.port, &tokens[scope], &r.method, &path, r.has_body);
            assert!(
                !matches!(a.status, 401 | 403) && a.status < 500,
                "{} {path} as {scope}: {a:?}",
                r.method
            );
        }
    }
    tokens
}

#[test]
fn a_token_can_do_exactly_what_its_scope_allows_on_every_route() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    every_route_with_every_scope(&edge, &api);
    // The audit trail names each refusal's token and the scope it lacked.
    let refused = api.get("/v1/audit?who=t-blocks&limit=10000").json;
    let refused = refused["records"].as_array().unwrap();
    assert!(refused
        .iter()
        .any(|r| r["action"] == "PUT /v1/domains/{name}"
            && r["result"]["status"] == 403
            && r["summary"].as_str().unwrap().contains("`domains`")));
}

#[test]
fn a_blocks_token_blocks_and_unblocks_and_nothing_else() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let blocker = ApiClient {
        port: api.port,
        token: add_token(&edge, "blocker", "blocks"),
    };
    let r = blocker.call(
        "POST",
        "/v1/blocked-ips",
        Some(&json!({"ip": "192.0.2.7", "reason": "scan"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let r = blocker.call("DELETE", "/v1/blocked-ips/192.0.2.7", None);
    assert_eq!(r.status, 200, "{r:?}");
    // The old manager's block route too, and its domain route not.
    let r = blocker.call(
        "POST",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "192.0.2.8"})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let put = json!({"servers": [{"name": "a", "address": "127.0.0.1:9"}]});
    let r = blocker.call("PUT", "/v1/domains/shop.example.com", Some(&put));
    assert_eq!((r.status, r.error_field()), (403, "scope"), "{r:?}");
    let r = blocker.call(
        "POST",
        "/api/domain",
        Some(&json!({"domain": "shop.example.com"})),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        blocker.get("/v1/status").status,
        403,
        "blocks alone cannot read"
    );
    assert_eq!(blocker.get("/v1/audit").status, 403);
    assert!(api.domain_names().is_empty());

    // Who did what, from where, with what result.
    let out = edge.ok(&["audit", "--who", "blocker", "--json"]);
    let records: Vec<Value> = serde_json::from_str(&out).unwrap();
    let post = records
        .iter()
        .find(|r| r["action"] == "POST /v1/blocked-ips")
        .expect("the block's record");
    assert_eq!(post["who"], "blocker");
    assert_eq!(post["via"], "api");
    assert!(
        post["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{post}"
    );
    assert_eq!(post["objects"], json!(["192.0.2.7"]));
    assert!(
        post["summary"].as_str().unwrap().contains("reason=scan"),
        "{post}"
    );
    assert_eq!(post["result"]["status"], 201);
    assert!(records
        .iter()
        .any(|r| r["action"] == "POST /api/blocked-ips" && r["via"] == "old-api"));
    let by_object = edge.ok(&["audit", "--object", "192.0.2.7"]);
    assert!(
        by_object.contains("DELETE /v1/blocked-ips/{key}"),
        "{by_object}"
    );
    assert_eq!(by_object.lines().count(), 2, "{by_object}");

    // Rotated, then removed, on the running daemon: each takes effect at the next request.
    let rotated = edge.ok(&["token", "rotate", "blocker"]).trim().to_string();
    let block = json!({"ip": "192.0.2.9"});
    assert_eq!(
        blocker.call("POST", "/v1/blocked-ips", Some(&block)).status,
        401
    );
    let blocker = ApiClient {
        port: api.port,
        token: rotated,
    };
    assert_eq!(
        blocker.call("POST", "/v1/blocked-ips", Some(&block)).status,
        201
    );
    edge.ok(&["token", "rm", "blocker"]);
    assert_eq!(
        blocker
            .call("DELETE", "/v1/blocked-ips/192.0.2.9", None)
            .status,
        401
    );
}

/// Every regular file under `dir`, recursively (sockets and FIFOs skipped).
fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let t = entry.file_type().unwrap();
        if t.is_dir() {
            files_under(&entry.path(), out);
        } else if t.is_file() {
            out.push(entry.path());
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn a_secret_appears_in_no_file_log_audit_record_or_json_output() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let tokens = every_route_with_every_scope(&edge, &api);
    // A dashboard sign-in and a wrong token too.
    let r = http_request(
        api.port,
        "POST",
        "/ui/session",
        &[("Content-Type", "application/json")],
        Some(json!({"token": tokens["read"]}).to_string().as_bytes()),
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!r.text.contains(&tokens["read"]));
    let rotated = edge
        .ok(&["token", "rotate", "t-deliver"])
        .trim()
        .to_string();
    let mut secrets: Vec<String> = tokens.values().cloned().collect();
    secrets.push(rotated);
    let mut outputs = vec![api.log_text()];
    for args in [
        &["audit", "--json", "--limit", "10000"][..],
        &["token", "ls", "--json"],
        &["status", "--json"],
        &["domain", "ls", "--json"],
        &["block", "ls", "--json"],
        &["cert", "ls", "--json"],
    ] {
        let out = edge.run(args);
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
        outputs.push(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    outputs.push(api.get("/v1/audit?limit=10000").text);
    let audit = api.get("/v1/audit?limit=10000").json;
    assert!(
        audit["records"].as_array().unwrap().len() > 200,
        "every change recorded"
    );
    let mut files = Vec::new();
    files_under(edge.state_dir(), &mut files);
    for secret in &secrets {
        for text in &outputs {
            assert!(
                !text.contains(secret.as_str()),
                "a secret in an output: {text}"
            );
        }
        for file in &files {
            let bytes = std::fs::read(file).unwrap_or_default();
            assert!(!contains(&bytes, secret), "a secret in {}", file.display());
        }
    }
    // The admin token `default` is in its own file only.
    for file in files.iter().filter(|f| !f.ends_with("api-token")) {
        let bytes = std::fs::read(file).unwrap_or_default();
        assert!(
            !contains(&bytes, &api.token),
            "the admin token in {}",
            file.display()
        );
    }
    for text in &outputs {
        assert!(
            !text.contains(&api.token),
            "the admin token in an output: {text}"
        );
    }
}

#[test]
fn after_a_sigkill_during_a_burst_every_acknowledged_change_has_its_record() {
    let edge = Edge::started();
    let mut api = Daemon::start(&edge);
    let names = ["burst-a", "burst-b", "burst-c"];
    let clients: Vec<ApiClient> = names
        .iter()
        .map(|n| ApiClient {
            port: api.port,
            token: add_token(&edge, n, "blocks"),
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let (stop, acked, name) = (stop.clone(), acked.clone(), names[i].to_string());
            std::thread::spawn(move || {
                for n in 0..=250u32 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let ip = format!("10.{i}.{}.{}", n / 250, n % 250);
                    let body = json!({ "ip": ip });
                    match client.try_call("POST", "/v1/blocked-ips", Some(&body)) {
                        Ok(r) if r.status == 201 => acked.lock().unwrap().push((name.clone(), ip)),
                        Ok(r) => assert!(r.status >= 500, "{r:?}"),
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    // Kill once some changes of each token are acknowledged, the others still sending.
    while {
        let acked = acked.lock().unwrap();
        names
            .iter()
            .any(|n| acked.iter().filter(|(w, _)| w == n).count() < 20)
    } {
        std::thread::sleep(Duration::from_millis(5));
    }
    api.kill();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let out = edge.ok(&["audit", "--json", "--limit", "10000"]);
    let records: Vec<Value> = serde_json::from_str(&out).unwrap();
    for (who, ip) in &acked {
        assert!(
            records.iter().any(|r| r["who"] == who.as_str()
                && r["action"] == "POST /v1/blocked-ips"
                && r["objects"] == json!([ip])),
            "{who} blocked {ip}, acknowledged, and has no record"
        );
    }
    println!(
        "{} acknowledged changes, {} records",
        acked.len(),
        records.len()
    );
}

#[test]
fn a_change_whose_record_cannot_be_written_is_not_made() {
    let edge = Edge::started();
    let serve = Serve {
        env: &[("HAPCTL_FAULT", "fail:audit-write")],
        ..Serve::within(Duration::from_secs(30))
    };
    let api = Daemon::try_start(&edge, &serve).unwrap();
    let r = api.call("POST", "/v1/blocked-ips", Some(&json!({"ip": "192.0.2.9"})));
    assert_eq!(
        (r.status, r.error_code()),
        (503, "audit_unavailable"),
        "{r:?}"
    );
    assert!(r.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("nothing was changed"));
    let put = json!({"servers": [{"name": "a", "address": "127.0.0.1:9"}]});
    let r = api.call("PUT", "/v1/domains/shop.example.com", Some(&put));
    assert_eq!(r.status, 503, "{r:?}");
    let r = api.call(
        "POST",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "192.0.2.10"})),
    );
    assert_eq!(
        (r.status, &r.json["status"]),
        (503, &json!("error")),
        "{r:?}"
    );
    assert!(api.blocked_keys().is_empty());
    assert!(api.domain_names().is_empty());
    assert_eq!(api.get("/v1/status").status, 200, "reads need no record");
}

/// One request to the daemon with these headers and body.
fn send(
    api: &Daemon,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> ApiResponse {
    http_request(
        api.port,
        method,
        path,
        headers,
        body,
        Duration::from_secs(30),
    )
    .unwrap()
}

/// Signs in with `token`: `(Cookie header, CSRF token, answer)`.
fn sign_in(api: &Daemon, token: &str) -> (String, String, ApiResponse) {
    let body = json!({ "token": token }).to_string();
    let r = http_request(
        api.port,
        "POST",
        "/ui/session",
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let cookie = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let csrf = r.json["csrf"].as_str().unwrap().to_string();
    (cookie, csrf, r)
}

#[test]
fn a_read_only_dashboard_session_is_refused_changes_and_is_recorded_as_its_token() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let viewer = add_token(&edge, "viewer", "read");
    let (cookie, csrf, r) = sign_in(&api, &viewer);
    assert_eq!(
        (r.json["token"].clone(), r.json["scopes"].clone()),
        (json!("viewer"), json!(["read"]))
    );
    let headers = [("Cookie", cookie.as_str()), ("X-CSRF-Token", csrf.as_str())];
    let again = send(&api, "GET", "/ui/session", &headers, None);
    assert_eq!(again.json["scopes"], json!(["read"]), "{again:?}");
    let get = send(&api, "GET", "/v1/status", &headers, None);
    assert_eq!(get.status, 200, "{get:?}");
    let mut post_headers = headers.to_vec();
    post_headers.push(("Content-Type", "application/json"));
    let body = json!({"ip": "192.0.2.11"}).to_string();
    let post = send(
        &api,
        "POST",
        "/v1/blocked-ips",
        &post_headers,
        Some(body.as_bytes()),
    );
    assert_eq!(
        (post.status, post.error_field()),
        (403, "scope"),
        "{post:?}"
    );
    assert!(api.blocked_keys().is_empty());

    // An admin session's change is recorded as its token, through the dashboard.
    let (cookie, csrf, _) = sign_in(&api, &api.token);
    let headers = [
        ("Cookie", cookie.as_str()),
        ("X-CSRF-Token", csrf.as_str()),
        ("Content-Type", "application/json"),
    ];
    let post = send(
        &api,
        "POST",
        "/v1/blocked-ips",
        &headers,
        Some(body.as_bytes()),
    );
    assert_eq!(post.status, 201, "{post:?}");
    let records = api.get("/v1/audit?object=192.0.2.11").json;
    let records = records["records"].as_array().unwrap();
    let done = records
        .iter()
        .find(|r| r["result"]["status"] == 201)
        .unwrap();
    assert_eq!(done["who"], "default");
    assert!(
        done["via"]
            .as_str()
            .unwrap()
            .starts_with("dashboard session "),
        "{done}"
    );
    let refused = api.get("/v1/audit?who=viewer").json;
    let refused = &refused["records"][0];
    assert_eq!(refused["action"], "POST /v1/blocked-ips", "{refused}");
    assert_eq!(refused["result"]["status"], 403, "{refused}");
    assert!(refused["via"]
        .as_str()
        .unwrap()
        .starts_with("dashboard session "));
    // The sign-in too: which session is which token's, from where.
    let viewer_records = api.get("/v1/audit?who=viewer").json;
    let signed_in = viewer_records["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "POST /ui/session")
        .expect("the sign-in's record");
    assert_eq!(signed_in["summary"], "signed in");
    assert_eq!(signed_in["via"], refused["via"], "the same session");
}

#[test]
fn the_command_lines_changes_are_recorded_as_the_local_user() {
    let edge = Edge::started();
    edge.ok(&["block", "add", "192.0.2.12"]);
    edge.expect_code(2, &["block", "add", "not-an-ip"]);
    let uid = format!("uid:{}", unsafe { libc::getuid() });
    let out = edge.ok(&["audit", "--who", &uid, "--json"]);
    let records: Vec<Value> = serde_json::from_str(&out).unwrap();
    let find = |object: &str| {
        records
            .iter()
            .find(|r| r["objects"] == json!([object]))
            .unwrap_or_else(|| panic!("no record of {object}: {out}"))
    };
    let ok = find("192.0.2.12");
    assert_eq!(ok["summary"], "192.0.2.12", "{ok}");
    assert_eq!(
        (&ok["action"], &ok["via"], &ok["result"]["status"]),
        (&json!("hapctl block add"), &json!("cli"), &json!(0))
    );
    assert_eq!(find("not-an-ip")["result"]["status"], 2);
    // With the daemon running, the command line hands its change over the unix socket:
    // still one record, the local user's.
    let api = Daemon::start(&edge);
    edge.ok(&["block", "add", "192.0.2.13"]);
    let records = api.get("/v1/audit?object=192.0.2.13").json;
    let records = records["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["who"], json!(uid), "{records:?}");
    drop(api);
    // Reads are not recorded; the token commands are, never with their secret.
    edge.ok(&["block", "ls"]);
    let secret = add_token(&edge, "later", "read");
    let out = edge.ok(&["audit", "--json"]);
    assert!(
        !out.contains("block ls") && out.contains("hapctl token add"),
        "{out}"
    );
    assert!(!out.contains(&secret));
    let e = edge.expect_code(2, &["token", "add", "bad name", "--scope", "read"]);
    assert!(e.contains("name"), "{e}");
    let e = edge.expect_code(2, &["token", "add", "x", "--scope", "root"]);
    assert!(
        e.contains("read, blocks, domains, certs, deliver, admin"),
        "{e}"
    );
    let e = edge.run(&["token", "rm", "default"]);
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("rotate"),
        "{e:?}"
    );
}

#[test]
fn plain_http_off_loopback_is_refused_at_start_with_what_to_do() {
    let edge = Edge::new();
    let out = edge.run(&["serve", "--listen", &format!("0.0.0.0:{}", free_port())]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    for hint in [
        "non-loopback",
        "tls_cert",
        "allow_plain_http",
        "docs/access.md",
    ] {
        assert!(text.contains(hint), "{hint}: {text}");
    }
    // Nothing started: no HAProxy master, no API.
    assert!(
        !edge.path("run/master.sock").exists(),
        "HAProxy was started"
    );
}

#[test]
fn a_domain_change_is_recorded_with_the_domain_before_and_what_was_asked() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let one = json!({"servers": [{"name": "a", "address": "127.0.0.1:9"}]});
    let two = json!({"servers": [{"name": "a", "address": "127.0.0.1:9"}, {"name": "b", "address": "127.0.0.1:10"}]});
    for body in [&one, &two] {
        let r = api.call("PUT", "/v1/domains/shop.example.com", Some(body));
        assert!(r.status < 300, "{r:?}");
    }
    let records = api.get("/v1/audit?object=shop.example.com").json;
    let summaries: Vec<&str> = records["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["summary"].as_str().unwrap())
        .collect();
    assert_eq!(summaries.len(), 2, "{summaries:?}");
    // Newest first: the second change saw the first one's domain.
    assert_eq!(summaries[1], "before: absent → servers=[1]");
    assert!(
        summaries[0].starts_with("before: ") && summaries[0].contains("servers=[1]"),
        "{}",
        summaries[0]
    );
    assert!(summaries[0].ends_with("→ servers=[2]"), "{}", summaries[0]);
    assert_eq!(
        records["records"][0]["result"]["outcome"], "applied",
        "{records}"
    );
}

/// The forwarded address is recorded only when the peer is a trusted proxy (`hapctl proxy
/// add`): from anyone else, an `X-Forwarded-For` header is the client's word and left out.
#[test]
fn the_forwarded_address_is_recorded_only_from_a_trusted_proxy() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let bearer = format!("Bearer {}", api.token);
    let block = |ip: &str| {
        let body = json!({ "ip": ip }).to_string();
        let headers = [
            ("Authorization", bearer.as_str()),
            ("Content-Type", "application/json"),
            ("X-Forwarded-For", "198.51.100.1, 203.0.113.9"),
        ];
        let r = send(
            &api,
            "POST",
            "/v1/blocked-ips",
            &headers,
            Some(body.as_bytes()),
        );
        assert!(r.status < 300, "{r:?}");
    };
    let record = |ip: &str| {
        let records = api.get(&format!("/v1/audit?object={ip}")).json;
        records["records"][0].clone()
    };
    block("192.0.2.1");
    let untrusted = record("192.0.2.1");
    assert!(untrusted["forwarded"].is_null(), "{untrusted}");
    assert!(
        untrusted["peer"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{untrusted}"
    );

    edge.ok(&["proxy", "add", "127.0.0.0/8"]);
    block("192.0.2.2");
    let trusted = record("192.0.2.2");
    // The address the trusted proxy saw: the last one of the list.
    assert_eq!(trusted["forwarded"], "203.0.113.9", "{trusted}");
}

/// A block and the edge-wide limits are recorded with what they were before, as a domain is.
#[test]
fn a_block_and_the_limits_are_recorded_with_what_they_were_before() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let summaries = |object: &str| -> Vec<String> {
        let records = api.get(&format!("/v1/audit?object={object}")).json;
        records["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["summary"].as_str().unwrap().to_string())
            .collect()
    };
    let block = json!({ "ip": "192.0.2.44", "reason": "scanner" });
    assert!(api.call("POST", "/v1/blocked-ips", Some(&block)).status < 300);
    assert!(
        api.call("DELETE", "/v1/blocked-ips/192.0.2.44", None)
            .status
            < 300
    );
    // Newest first.
    let blocks = summaries("192.0.2.44");
    assert!(blocks[1].starts_with("before: absent →"), "{blocks:?}");
    assert_eq!(
        blocks[0], "before: blocked (scanner) → removed",
        "{blocks:?}"
    );

    let limits = json!({"preset": "custom", "rules": {"req_rate": "50:deny"}});
    assert_eq!(api.call("PUT", "/v1/limits", Some(&limits)).status, 200);
    let records = api.get("/v1/audit?limit=5").json;
    let put = records["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "PUT /v1/limits")
        .cloned()
        .unwrap_or_else(|| panic!("{records}"));
    let summary = put["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("before: ") && summary.contains(" → "),
        "{summary}"
    );
    assert_ne!(summary, "before: absent → ", "{summary}");
}
