//! `/health`, `/`, `/default-page`, the reload routes, authentication (E4), routing and body
//! refusals (JSON E1 where the old system sent HTML), the old clients' calls, and the
//! certificate and security routes' answers that need no CA.

use std::process::Command;

use serde_json::{json, Value};

use super::{assert_e1, assert_keys, old_edge, php_message, reloads, TIMEOUT};
use testkit::daemon::{http_call, http_request, ApiResponse};
use testkit::run_bounded;

const E4: &str = r#"{"error":"Unauthorized - Invalid or missing API key"}"#;

#[test]
fn health_pages_and_reload_routes_answer_as_before() {
    let (edge, _app, api) = old_edge();
    // No token needed on the three open routes.
    let r = http_call(api.port, "GET", "/health", None, None, None).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"status": "healthy", "haproxy_status": "running", "database": "connected"})
    );
    let strict = http_call(api.port, "GET", "/v1/health", None, None, None).unwrap();
    assert_eq!(
        (strict.status, &strict.json),
        (200, &json!({"status": "ok"}))
    );
    for (path, text) in [("/default-page", "Site Not Configured"), ("/", "hapctl")] {
        let r = http_call(api.port, "GET", path, None, None, None).unwrap();
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert!(
            r.header("content-type")
                .unwrap_or("")
                .starts_with("text/html"),
            "{r:?}"
        );
        assert!(r.text.contains(text), "{path}: {}", r.text);
    }

    // Each reload route reloads (confirmed) even when nothing changed, as the old ones did.
    for (method, path, want) in [
        ("GET", "/api/regenerate", json!({"status": "success"})),
        ("GET", "/api/reload", json!({"status": "success"})),
        (
            "POST",
            "/api/config/reload",
            json!({"status": "success", "message": "HAProxy configuration reloaded safely"}),
        ),
    ] {
        let before = edge.show_proc().master;
        let r = api.call(method, path, None);
        assert_eq!((r.status, &r.json), (200, &want), "{method} {path}: {r:?}");
        let after = edge.show_proc().master;
        assert_eq!(
            after.reloads,
            before.reloads + 1,
            "{method} {path} did not reload"
        );
        assert_eq!(
            after.pid, before.pid,
            "{method} {path}: the master was restarted"
        );
        assert_eq!(edge.get(super::SHOP, "/").body, "ok");
    }
}

#[test]
fn authentication_routing_and_bodies_answer_in_the_old_envelopes() {
    let (edge, _app, api) = old_edge();
    let before = reloads(&edge);
    let wrong = "Bearer wrong".to_string();
    let lower = format!("bearer {}", api.token);
    for (method, path) in [
        ("GET", "/api/domains"),
        ("POST", "/api/blocked-ips/sync"),
        ("GET", "/api/reload"),
        ("GET", "/api/certificates/status"),
    ] {
        for auth in [None, Some(wrong.as_str()), Some(lower.as_str())] {
            let mut headers = Vec::new();
            if let Some(a) = auth {
                headers.push(("Authorization", a));
            }
            let r = http_request(api.port, method, path, &headers, None, TIMEOUT).unwrap();
            assert_eq!(
                (r.status, r.text.as_str()),
                (401, E4),
                "{method} {path} with {auth:?}"
            );
        }
    }
    // The /v1 routes keep their own 401.
    let r = http_call(api.port, "GET", "/v1/status", None, None, None).unwrap();
    assert_eq!((r.status, r.error_code()), (401, "unauthorized"), "{r:?}");
    assert_eq!(reloads(&edge), before, "an unauthenticated call ran");

    // An unknown path or a wrong method: routing answers first (no token needed), E1.
    for token in [None, Some(api.token.as_str())] {
        let r = http_call(api.port, "GET", "/api/nothing", None, None, token).unwrap();
        assert_e1(&r, 404, "Not Found");
        let r = http_call(
            api.port,
            "PUT",
            "/api/domain",
            Some(b"{}"),
            Some("application/json"),
            token,
        )
        .unwrap();
        assert_e1(&r, 405, "Method Not Allowed");
        let r = http_call(api.port, "POST", "/health", None, None, token).unwrap();
        assert_e1(&r, 405, "Method Not Allowed");
    }
    let r = http_call(api.port, "GET", "/v1/nothing", None, None, None).unwrap();
    assert_eq!((r.status, r.error_code()), (404, "not_found"), "{r:?}");

    // Bodies the old system answered with Werkzeug HTML: JSON E1, same status.
    let big = format!("{{\"ip_address\":\"{}\"}}", "1".repeat(2 << 20));
    for (body, content_type, status, message) in [
        (
            br#"{"ip_address":"192.0.2.1"}"#.to_vec(),
            Some("text/plain"),
            415,
            "Content-Type",
        ),
        (
            br#"{"ip_address":"192.0.2.1"}"#.to_vec(),
            None,
            415,
            "Content-Type",
        ),
        (
            b"{\"ip_address\":".to_vec(),
            Some("application/json"),
            400,
            "JSON",
        ),
        (b"null".to_vec(), Some("application/json"), 400, "object"),
        (b"[1,2]".to_vec(), Some("application/json"), 400, "object"),
        (big.into_bytes(), Some("application/json"), 413, "limit"),
    ] {
        let r = api.raw("POST", "/api/blocked-ips", Some(&body), content_type);
        assert_e1(&r, status, message);
    }
    assert_eq!(api.get("/api/blocked-ips").json, json!([]));
}

/// `curl -s` with the Bearer key, as the old shell scripts call the API.
fn curl(port: u16, token: Option<&str>, args: &[&str], path: &str) -> (String, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "--max-time", "30", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    cmd.args(args).arg(format!("http://127.0.0.1:{port}{path}"));
    let out = run_bounded(cmd, TIMEOUT);
    assert!(
        out.status.success(),
        "curl failed (is it installed?): {}",
        testkit::describe(&out)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (body.to_string(), code.to_string())
}

#[test]
fn the_old_clients_calls_work_unchanged() {
    let (edge, app, api) = old_edge();
    // The monitor: `curl -sf :8000/health` and `.status == "healthy"`.
    let (body, code) = curl(api.port, None, &["-f"], "/health");
    assert_eq!(code, "200");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["status"],
        "healthy"
    );

    // The shell scripts: block, list, unblock with `curl -H "Authorization: Bearer $KEY"`.
    let json = ["-H", "Content-Type: application/json", "-X"];
    let post = [
        &json[..],
        &[
            "POST",
            "-d",
            r#"{"ip_address":"127.0.0.2","reason":"abuse"}"#,
        ],
    ]
    .concat();
    let (body, code) = curl(api.port, Some(&api.token), &post, "/api/blocked-ips");
    assert_eq!(code, "200", "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&v["status"], &v["message"]),
        (&json!("success"), &json!("IP 127.0.0.2 has been blocked"))
    );
    assert!(v["blocked_ip_id"].is_i64(), "{v}");
    let (body, _) = curl(api.port, Some(&api.token), &[], "/api/blocked-ips");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list[0]["ip_address"], "127.0.0.2", "a bare array: {list}");
    let (body, code) = curl(api.port, None, &[], "/api/blocked-ips");
    assert_eq!((body.as_str(), code.as_str()), (E4, "401"));
    let del = [
        &json[..],
        &["DELETE", "-d", r#"{"ip_address":"127.0.0.2"}"#],
    ]
    .concat();
    let (body, code) = curl(api.port, Some(&api.token), &del, "/api/blocked-ips");
    assert_eq!(code, "200", "{body}");
    let add = format!(
        r#"{{"domain":"php.example.com","backend_name":"php_site","template_override":null,"servers":[{{"name":"web1","address":"127.0.0.1","port":"{}","options":"check"}}]}}"#,
        app.port
    );
    let post = [&json[..], &["POST", "-d", &add]].concat();
    let (body, code) = curl(api.port, Some(&api.token), &post, "/api/domain");
    assert_eq!(code, "200", "{body}");
    assert_eq!(edge.get("php.example.com", "/").body, "ok");

    // The PHP panel: POST JSON, read `$result['message'] ?? 'Unknown error'`, iterate lists.
    let php = |method: &str, path: &str, body: &Value| -> ApiResponse {
        let bytes = serde_json::to_vec(body).unwrap();
        let bearer = format!("Bearer {}", api.token);
        let headers = [
            ("Content-Type", "application/json"),
            ("Authorization", bearer.as_str()),
            ("Accept", "application/json"),
        ];
        http_request(api.port, method, path, &headers, Some(&bytes), TIMEOUT).unwrap()
    };
    let r = php(
        "POST",
        "/api/blocked-ips",
        &json!({"ip_address": "192.0.2.60", "reason": "panel", "blocked_by": "admin"}),
    );
    assert_eq!(php_message(&r), "IP 192.0.2.60 has been blocked");
    let r = php(
        "POST",
        "/api/blocked-ips",
        &json!({"ip_address": "192.0.2.60"}),
    );
    assert_eq!(php_message(&r), "IP address is already blocked");
    let r = php(
        "POST",
        "/api/blocked-ips",
        &json!({"ip_address": "not an ip"}),
    );
    assert!(php_message(&r).contains("ip_address"), "{r:?}");
    let r = php(
        "DELETE",
        "/api/domain",
        &json!({"domain": "absent.example.com"}),
    );
    assert_eq!(php_message(&r), "Domain not found");
    let r = php(
        "POST",
        "/api/domain",
        &json!({"domain": "x.example.com", "backend_name": "x", "servers": [{"name": "w", "address": "wp_site_1", "port": 80, "options": "check"}]}),
    );
    // A container name that does not resolve (yet) is accepted: its server waits in
    // maintenance, every other domain is served.
    assert_eq!(
        (r.status, &r.json["status"]),
        (200, &json!("success")),
        "{r:?}"
    );
    assert_eq!(edge.get("php.example.com", "/").body, "ok");
    let r = php("GET", "/api/domains", &json!({}));
    let names: Vec<&str> = r
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["domain"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["shop.example.com", "php.example.com", "x.example.com"]
    );
}

#[test]
fn certificate_and_security_routes_answer_without_a_ca_as_before() {
    let (_edge, _app, api) = old_edge();
    let r = api.get("/api/certificates/status");
    assert_eq!((r.status, &r.json), (200, &json!({"certificates": []})));
    let r = api.call("POST", "/api/certificates/renew", None);
    assert_eq!(
        r.json,
        json!({"status": "success", "message": "No certificates needed renewal"})
    );
    for part in ["download", "cert"] {
        assert_e1(
            &api.get(&format!("/api/certificates/absent.example.com/{part}")),
            404,
            "Certificate not found for domain",
        );
    }
    assert_e1(
        &api.get("/api/certificates/absent.example.com/key"),
        404,
        "Private key not found for domain",
    );
    for (path, body, message) in [
        ("/api/ssl", json!({}), "Domain is required"),
        (
            "/api/ssl/bundle",
            json!({"primary": "no tld"}),
            "invalid primary",
        ),
        (
            "/api/ssl/bundle",
            json!({"primary": "a.example.com", "sans": "b.example.com"}),
            "\"sans\" must be a list",
        ),
        (
            "/api/certificates/request",
            json!({"domains": []}),
            "At least one domain is required",
        ),
    ] {
        assert_e1(&api.call("POST", path, Some(&body)), 400, message);
    }
    for (path, message) in [
        ("/api/ssl/dns-challenge/request", "Domain is required"),
        ("/api/ssl/dns-challenge/verify", "Invalid domain format"),
    ] {
        let body = if message == "Domain is required" {
            json!({})
        } else {
            json!({"domain": "bad_domain.example"})
        };
        let r = api.call("POST", path, Some(&body));
        assert_eq!(r.status, 400, "{r:?}");
        assert_keys(&r.json, &["success", "error"]);
        assert_eq!(r.json["success"], false);
        assert!(r.json["error"].as_str().unwrap().contains(message), "{r:?}");
    }

    // Its 200 shape is tests/edge/protections/limit_routes.rs's.
    assert_e1(
        &api.get("/api/security/stats?limit=x"),
        400,
        "limit and min_req_rate must be integers",
    );
}
