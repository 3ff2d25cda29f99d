//! The HTTP API daemon (`hapctl serve`) against the real haproxy, over real HTTP: blocks without
//! reloads, coalesced applies, auth, bad input, a SIGKILL in the middle of a burst, metrics,
//! SIGTERM, and expiry. The edge manager's routes have their own suite: tests/edge/compat.rs.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use testkit::daemon::{
    blocked_map_file_keys, http_call, http_call_with, http_request, runtime_blocked_keys,
    ApiClient, Daemon,
};
use testkit::{check_runs, counting_haproxy, free_port, Backend, Edge};

const SHOP: &str = "shop.example.com";
const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const C: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const E: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 5);

/// A running edge routing `SHOP` to a backend answering "ok", and its API daemon.
fn edge_with_api() -> (Edge, Backend, Daemon) {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let api = Daemon::start(&edge);
    (edge, app, api)
}

fn reloads(edge: &Edge) -> u32 {
    edge.show_proc().master.reloads
}

fn keys<const N: usize>(list: [&str; N]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
fn a_block_through_the_api_is_enforced_at_once_without_reload_or_check_and_survives_reloads() {
    let mut edge = Edge::new();
    let (wrapper, log) = counting_haproxy(edge.state_dir());
    edge.set_env("HAPCTL_HAPROXY_BIN", wrapper.to_str().unwrap());
    edge.ok(&["haproxy", "start"]);
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let api = Daemon::start(&edge);
    assert_eq!(edge.get_from(B, SHOP, "/").status, 200);
    let reloads_before = reloads(&edge);
    let checks_before = check_runs(&log);

    let r = api.call(
        "POST",
        "/v1/blocked-ips",
        Some(&json!({"ip": "127.0.0.2", "reason": "abuse"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.json["results"], json!(["created"]), "{r:?}");
    assert_eq!(r.json["enforcement"], "runtime", "{r:?}");
    assert_eq!(edge.get_from(B, SHOP, "/").status, 403, "enforced at once");
    assert_eq!(edge.get(SHOP, "/").status, 200, "other clients still pass");

    // A list, with a network.
    let r = api.call(
        "POST",
        "/v1/blocked-ips",
        Some(&json!([{"ip": "127.0.0.3"}, {"ip": "127.0.0.4/30", "ttl": "1h"}])),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.json["results"], json!(["created", "created"]), "{r:?}");
    assert_eq!(edge.get_from(C, SHOP, "/").status, 403);
    assert_eq!(
        edge.get_from(E, SHOP, "/").status,
        403,
        "covered by the /30"
    );
    // Blocking again refreshes and answers 200.
    let r = api.call("POST", "/v1/blocked-ips", Some(&json!({"ip": "127.0.0.3"})));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["results"], json!(["updated"]), "{r:?}");

    // Unblock: a CIDR needs its '/' encoded.
    let r = api.call("DELETE", "/v1/blocked-ips/127.0.0.4%2F30", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["results"], json!(["removed"]), "{r:?}");
    assert_eq!(edge.get_from(E, SHOP, "/").status, 200);
    let r = api.call("DELETE", "/v1/blocked-ips/127.0.0.3", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(edge.get_from(C, SHOP, "/").status, 200);
    let r = api.call("DELETE", "/v1/blocked-ips/127.0.0.3", None);
    assert_eq!(r.status, 404, "{r:?}");

    assert_eq!(reloads(&edge), reloads_before, "no reload for blocks");
    assert_eq!(check_runs(&log), checks_before, "no haproxy -c for blocks");
    assert_eq!(api.blocked_keys(), keys(["127.0.0.2"]));
    assert_eq!(blocked_map_file_keys(&edge), keys(["127.0.0.2"]));
    assert_eq!(runtime_blocked_keys(&edge), keys(["127.0.0.2"]));

    // A later reload (a domain PUT only a reload loads: the first websocket domain) keeps
    // exactly the committed blocks.
    let other = Backend::start("other");
    let r = api.call(
        "PUT",
        "/v1/domains/other.example.com",
        Some(&json!({"servers": [{"address": other.addr()}], "profile": "websocket"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert!(reloads(&edge) > reloads_before, "the domain PUT reloaded");
    assert_eq!(
        check_runs(&log),
        checks_before + 1,
        "one haproxy -c for the domain change: the blocks did not cost another"
    );
    assert_eq!(edge.get("other.example.com", "/").body, "other");
    assert_eq!(
        edge.get_from(B, SHOP, "/").status,
        403,
        "the block persisted"
    );
    assert_eq!(
        edge.get_from(C, SHOP, "/").status,
        200,
        "nothing returns that was removed"
    );
    assert_eq!(edge.get_from(E, SHOP, "/").status, 200);
    assert_eq!(runtime_blocked_keys(&edge), keys(["127.0.0.2"]));
}

#[test]
fn concurrent_blocks_all_land_in_the_database_the_file_and_the_runtime_map() {
    let (edge, _app, api) = edge_with_api();
    let reloads_before = reloads(&edge);
    let ips: Vec<String> = (0..200)
        .map(|i| format!("10.20.{}.{}", i / 100, i % 100 + 1))
        .collect();
    let barrier = Arc::new(Barrier::new(ips.len()));
    let answers: Vec<(String, u16, Value)> = thread::scope(|s| {
        let handles: Vec<_> = ips
            .iter()
            .map(|ip| {
                let (client, barrier) = (api.client(), barrier.clone());
                s.spawn(move || {
                    barrier.wait();
                    let r = client.call("POST", "/v1/blocked-ips", Some(&json!({"ip": ip})));
                    (ip.clone(), r.status, r.json)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (ip, status, body) in &answers {
        assert_eq!(*status, 201, "{ip}: {body}");
        assert_eq!(body["results"], json!(["created"]), "{ip}: {body}");
    }
    let want: BTreeSet<String> = ips.iter().cloned().collect();
    assert_eq!(api.blocked_keys(), want, "database");
    assert_eq!(blocked_map_file_keys(&edge), want, "map file");
    assert_eq!(runtime_blocked_keys(&edge), want, "runtime map");
    assert_eq!(reloads(&edge), reloads_before, "no reload");

    // Latency of single blocks, one after the other, from request sent to answer.
    let mut times = Vec::new();
    for i in 0..200 {
        let ip = format!("10.21.{}.{}", i / 100, i % 100 + 1);
        let t = Instant::now();
        let r = api.call("POST", "/v1/blocked-ips", Some(&json!({"ip": ip})));
        times.push(t.elapsed());
        assert_eq!(r.status, 201, "{r:?}");
    }
    times.sort();
    let (p50, p95) = (percentile(&times, 0.5), percentile(&times, 0.95));
    println!(
        "block POST latency over 200 sequential requests: p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        ms(p50),
        ms(p95),
        ms(times[times.len() - 1])
    );
    assert!(
        p50 < Duration::from_millis(250),
        "a block takes {p50:?} (p50): something waits"
    );
    assert_eq!(runtime_blocked_keys(&edge).len(), 400);
    assert_eq!(reloads(&edge), reloads_before, "no reload");
}

#[test]
fn concurrent_domain_puts_are_coalesced_into_few_reloads() {
    let edge = Edge::started();
    let app = Backend::start("routed");
    let api = Daemon::start(&edge);
    let before = reloads(&edge);
    let n = 50;
    let barrier = Arc::new(Barrier::new(n));
    let answers: Vec<(String, u16, Value)> = thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (client, barrier) = (api.client(), barrier.clone());
                let body = json!({"servers": [{"address": app.addr()}]});
                s.spawn(move || {
                    let host = format!("d{i}.example.com");
                    barrier.wait();
                    let r = client.call("PUT", &format!("/v1/domains/{host}"), Some(&body));
                    (host, r.status, r.json)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (host, status, body) in &answers {
        assert_eq!(*status, 201, "{host}: {body}");
        assert_eq!(body["result"], "created", "{host}: {body}");
    }
    let delta = reloads(&edge) - before;
    let applies: BTreeSet<u64> = answers
        .iter()
        .filter_map(|(_, _, b)| b["apply"]["started_at_ms"].as_u64())
        .collect();
    println!(
        "50 concurrent domain PUTs: {delta} reloads, {} distinct applies",
        applies.len()
    );
    assert!(delta >= 1, "the PUTs reloaded");
    assert!(delta < 25, "{delta} reloads for {n} PUTs: not coalesced");
    // Every PUT was answered after the apply that contained it: each is routed now.
    for (host, _, _) in &answers {
        let r = edge.get(host, "/");
        assert_eq!((r.status, r.body.as_str()), (200, "routed"), "{host}");
    }
    assert_eq!(api.domain_names().len(), n);
}

#[test]
fn every_route_but_health_needs_the_right_token() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(edge.path("api-token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "token file mode {mode:o}");

    let doc = api.get("/openapi.json");
    assert_eq!(doc.status, 200, "{doc:?}");
    let mut routes: Vec<(String, String, bool)> = Vec::new();
    for (path, ops) in doc.json["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            routes.push((
                method.to_uppercase(),
                path.clone(),
                op.get("requestBody").is_some(),
            ));
        }
    }
    assert!(
        routes.len() >= 25,
        "only {} routes: {routes:?}",
        routes.len()
    );
    for expected in [
        ("POST", "/v1/blocked-ips"),
        ("PUT", "/v1/domains/{name}"),
        ("POST", "/api/config/reload"),
        ("GET", "/metrics"),
        ("GET", "/health"),
    ] {
        assert!(
            routes
                .iter()
                .any(|(m, p, _)| (m.as_str(), p.as_str()) == expected),
            "{expected:?} not in the OpenAPI document"
        );
    }
    let concrete = |path: &str| {
        path.replace("{name}", "auth.example.com")
            .replace("{key}", "192.0.2.1")
            .replace("{domain}", "auth.example.com")
            .replace("{id}", "1")
            .replace("{preset}", "cloudflare")
    };
    assert!(
        routes.iter().all(|(_, p, _)| !concrete(p).contains('{')),
        "a path parameter this test does not know: {routes:?}"
    );

    let same_length_wrong: String = api
        .token
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect();
    let wrong_tokens = [
        format!("Bearer {same_length_wrong}"),
        "Bearer wrong".to_string(),
        format!("Bearer {}x", api.token),
        format!("Basic {}", api.token),
        api.token.clone(),
    ];
    let before_reloads = reloads(&edge);
    let before_applies = api.get("/v1/applies").json;
    let body = b"{}";
    for (method, path, has_body) in &routes {
        let path = concrete(path);
        let (body, ct) = if *has_body {
            (Some(&body[..]), Some("application/json"))
        } else {
            (None, None)
        };
        let missing = http_call(api.port, method, &path, body, ct, None).unwrap();
        if ["/health", "/v1/health", "/", "/default-page"].contains(&path.as_str()) {
            assert_eq!(missing.status, 200, "{path} needs no token: {missing:?}");
            continue;
        }
        assert_eq!(
            missing.status, 401,
            "{method} {path} without a token: {missing:?}"
        );
        // The edge manager's routes answer its own 401 (E4, tests/edge/compat.rs).
        if path.starts_with("/api/") {
            assert!(missing.json["error"].is_string(), "{missing:?}");
        } else {
            assert_eq!(missing.error_code(), "unauthorized", "{missing:?}");
        }
        for auth in &wrong_tokens {
            let r = http_call_with(
                api.port,
                method,
                &path,
                body,
                ct,
                Some(auth),
                Duration::from_secs(30),
            )
            .unwrap();
            assert_eq!(r.status, 401, "{method} {path} with {auth:?}: {r:?}");
        }
    }
    // None of them ran.
    assert_eq!(reloads(&edge), before_reloads);
    assert_eq!(api.get("/v1/applies").json, before_applies);
    assert!(api.blocked_keys().is_empty() && api.domain_names().is_empty());

    let mut seen = Vec::new();
    for (method, path, has_body) in &routes {
        // An order from the configured CA (Let's Encrypt's production directory here):
        // api_certs.rs runs it against Pebble.
        if (method.as_str(), path.as_str()) == ("POST", "/v1/certificates/{name}/request") {
            continue;
        }
        // It would stop HAProxy for the routes after it: dashboard/recovery.rs runs it.
        if (method.as_str(), path.as_str()) == ("POST", "/v1/haproxy/stop") {
            continue;
        }
        let path = concrete(path);
        let (body, ct) = if *has_body {
            (Some(&body[..]), Some("application/json"))
        } else {
            (None, None)
        };
        let r = http_call(api.port, method, &path, body, ct, Some(&api.token)).unwrap();
        assert!(
            r.status != 401 && r.status < 500,
            "{method} {path} with the token: {r:?}"
        );
        seen.push(format!("{method} {path} -> {}", r.status));
    }
    println!("with the right token:\n  {}", seen.join("\n  "));
    drop(api);

    // Without auth: only on a loopback address.
    let port = free_port();
    let out = edge.run(&["serve", "--no-auth", "--listen", &format!("0.0.0.0:{port}")]);
    assert!(!out.status.success(), "{}", testkit::describe(&out));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("--no-auth") && text.contains("loopback"),
        "{text}"
    );
    let open = Daemon::start_with(&edge, &["--no-auth"]);
    let r = http_call(open.port, "GET", "/v1/status", None, None, None).unwrap();
    assert_eq!(r.status, 200, "--no-auth on loopback: {r:?}");
}

#[test]
fn bad_input_is_refused_with_its_status_and_writes_nothing() {
    let (edge, app, api) = edge_with_api();
    // A block to leave alone.
    let r = api.call("POST", "/v1/blocked-ips", Some(&json!({"ip": "127.0.0.2"})));
    assert_eq!(r.status, 201, "{r:?}");

    let live = edge.live_files();
    let applies = api.get("/v1/applies").json;
    let blocks = api.get("/v1/blocked-ips").json;
    let domains = api.get("/v1/domains").json;
    let runtime = runtime_blocked_keys(&edge);
    let reloads_before = reloads(&edge);

    let server = |address: &str| json!({"servers": [{"address": address}]});
    let big: Vec<u8> = {
        let list: Vec<Value> = (0..30_000)
            .map(|i| json!({"ip": format!("10.50.{}.{}", i / 250, i % 250), "reason": "x".repeat(40)}))
            .collect();
        serde_json::to_vec(&list).unwrap()
    };
    assert!(big.len() > 2_000_000);
    let big_domain: Vec<u8> = {
        let mut v = serde_json::to_vec(&server(&app.addr())).unwrap();
        v.truncate(v.len() - 1);
        v.extend_from_slice(format!(", \"profile\": \"{}\"}}", "a".repeat(2_100_000)).as_bytes());
        v
    };
    let j = |v: Value| Some(serde_json::to_vec(&v).unwrap());
    const JSON: Option<&str> = Some("application/json");
    // (method, path, body, content type, status, the field named, if any: one of these)
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, &str, Option<Vec<u8>>, Option<&str>, u16, &[&str])> = vec![
        (
            "PUT",
            "/v1/domains/new.example.com",
            j(server("127.0.0.1:0")),
            JSON,
            400,
            &["address"],
        ),
        (
            "PUT",
            "/v1/domains/new.example.com",
            j(server("127.0.0.1:80\n    server x")),
            JSON,
            400,
            &["address"],
        ),
        (
            "PUT",
            "/v1/domains/new.example.com",
            j(json!({"servers": [{"address": app.addr(), "weight": 999}]})),
            JSON,
            400,
            &["weight"],
        ),
        (
            "PUT",
            "/v1/domains/new.example.com",
            j(json!({"servers": [{"address": app.addr()}], "app": "shop"})),
            JSON,
            400,
            &["app"],
        ),
        (
            "PUT",
            "/v1/domains/new.example.com",
            j(json!({"servers": [{"address": app.addr()}], "bogus": 1})),
            JSON,
            400,
            &["bogus"],
        ),
        (
            "PUT",
            "/v1/domains/new.example.com",
            j(json!({"servers": [{"address": app.addr()}], "profile": "turbo"})),
            JSON,
            400,
            &["profile"],
        ),
        (
            "PUT",
            "/v1/domains/new.example.com",
            Some(b"{\"servers\": [".to_vec()),
            JSON,
            400,
            &[],
        ),
        (
            "PUT",
            "/v1/domains/bad_name.example.com",
            j(server(&app.addr())),
            JSON,
            400,
            &["domain", "name"],
        ),
        (
            "POST",
            "/v1/blocked-ips",
            j(json!({"ip": "300.1.1.1"})),
            JSON,
            400,
            &["ip"],
        ),
        (
            "POST",
            "/v1/blocked-ips",
            j(json!({"ip": "127.0.0.9", "ttl": "soon"})),
            JSON,
            400,
            &["ttl"],
        ),
        (
            "POST",
            "/v1/blocked-ips",
            j(json!([{"ip": "127.0.0.9"}, {"ip": "10.0.0.0/33"}])),
            JSON,
            400,
            &["ip"],
        ),
        (
            "POST",
            "/v1/blocked-ips",
            j(json!({"ip": "127.0.0.9", "reason": "a\nb"})),
            JSON,
            400,
            &["reason"],
        ),
        ("POST", "/v1/blocked-ips", j(json!([])), JSON, 400, &["ip"]),
        (
            "DELETE",
            "/v1/blocked-ips/300.1.1.1",
            None,
            None,
            400,
            &["key", "ip"],
        ),
        ("GET", "/v1/nothing", None, None, 404, &[]),
        (
            "GET",
            "/v1/domains/absent.example.com",
            None,
            None,
            404,
            &[],
        ),
        (
            "DELETE",
            "/v1/domains/absent.example.com",
            None,
            None,
            404,
            &[],
        ),
        ("DELETE", "/v1/blocked-ips/192.0.2.77", None, None, 404, &[]),
        ("POST", "/v1/blocked-ips", Some(big.clone()), JSON, 413, &[]),
        (
            "PUT",
            "/v1/domains/new.example.com",
            Some(big_domain),
            JSON,
            413,
            &[],
        ),
        (
            "POST",
            "/v1/blocked-ips",
            j(json!({"ip": "127.0.0.9"})),
            None,
            415,
            &[],
        ),
        (
            "POST",
            "/v1/blocked-ips",
            j(json!({"ip": "127.0.0.9"})),
            Some("text/plain"),
            415,
            &[],
        ),
        (
            "PUT",
            "/v1/domains/new.example.com",
            Some(b"servers=127.0.0.1:80".to_vec()),
            Some("application/x-www-form-urlencoded"),
            415,
            &[],
        ),
    ];
    let mut failures = Vec::new();
    for (method, path, body, ct, status, fields) in &cases {
        let r = api.raw(method, path, body.as_deref(), *ct);
        let size = body.as_ref().map_or(0, Vec::len);
        let what = format!("{method} {path} ({size} bytes, {ct:?})");
        if r.status != *status {
            failures.push(format!(
                "{what}: expected {status}, got {} {}",
                r.status, r.text
            ));
            continue;
        }
        if r.error_code().is_empty() || r.json["error"]["message"].as_str().unwrap_or("").is_empty()
        {
            failures.push(format!("{what}: not the error shape: {}", r.text));
        }
        if !fields.is_empty() && !fields.iter().any(|f| r.error_field().contains(f)) {
            failures.push(format!(
                "{what}: error.field {:?} does not name {fields:?}: {}",
                r.error_field(),
                r.text
            ));
        }
    }
    // Nothing written on any of them.
    if edge.live_files() != live {
        failures.push("the live files changed".into());
    }
    let history = api.get("/v1/applies").json;
    if history != applies {
        let known = applies.as_array().cloned().unwrap_or_default();
        let new: Vec<String> = history
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| !known.contains(a))
            .map(|a| format!("{} ({})", a["trigger"], a["outcome"]))
            .collect();
        failures.push(format!("applies were recorded: {new:?}"));
    }
    if api.get("/v1/blocked-ips").json != blocks {
        failures.push("the blocks changed".into());
    }
    if api.get("/v1/domains").json != domains {
        failures.push("the domains changed".into());
    }
    if runtime_blocked_keys(&edge) != runtime {
        failures.push("the runtime map changed".into());
    }
    if reloads(&edge) != reloads_before {
        failures.push("HAProxy was reloaded".into());
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_daemon_killed_in_the_middle_of_a_burst_loses_nothing_it_acknowledged() {
    let (edge, _app, mut api) = edge_with_api();
    let master = edge.master_pid();
    let backend = Backend::start("burst");

    // HAProxy must keep serving throughout: a probe through the edge until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (stop, port) = (stop.clone(), edge.port);
        thread::spawn(move || {
            let (mut ok, mut failed) = (0u32, Vec::new());
            let deadline = Instant::now() + Duration::from_secs(90);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                let host = [("Host", SHOP)];
                match http_request(port, "GET", "/", &host, None, Duration::from_secs(10)) {
                    Ok(r) if r.status == 200 => ok += 1,
                    Ok(r) => failed.push(format!("{} {}", r.status, r.text)),
                    Err(e) => failed.push(e),
                }
                thread::sleep(Duration::from_millis(5));
            }
            (ok, failed)
        })
    };

    let acked_blocks = Arc::new(Mutex::new(Vec::<String>::new()));
    let acked_domains = Arc::new(Mutex::new(Vec::<String>::new()));
    let refused = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut workers = Vec::new();
    for t in 0..4 {
        let (client, acked, refused) = (api.client(), acked_blocks.clone(), refused.clone());
        workers.push(thread::spawn(move || {
            for i in 0..25 {
                let ip = format!("10.40.{t}.{}", i + 1);
                match client.try_call("POST", "/v1/blocked-ips", Some(&json!({"ip": ip}))) {
                    Ok(r) if r.status == 201 => acked.lock().unwrap().push(ip),
                    Ok(r) => refused
                        .lock()
                        .unwrap()
                        .push(format!("{ip}: {} {}", r.status, r.text)),
                    Err(_) => return, // the daemon is gone
                }
                thread::sleep(Duration::from_millis(40));
            }
        }));
    }
    for t in 0..4 {
        let (client, acked, refused) = (api.client(), acked_domains.clone(), refused.clone());
        let body = json!({"servers": [{"address": backend.addr()}]});
        workers.push(thread::spawn(move || {
            for i in 0..5 {
                let host = format!("k{t}-{i}.example.com");
                match client.try_call("PUT", &format!("/v1/domains/{host}"), Some(&body)) {
                    Ok(r) if r.status == 201 => acked.lock().unwrap().push(host),
                    Ok(r) => refused
                        .lock()
                        .unwrap()
                        .push(format!("{host}: {} {}", r.status, r.text)),
                    Err(_) => return,
                }
            }
        }));
    }
    // Kill once both bursts are well under way.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked_blocks.lock().unwrap().len() < 30 || acked_domains.lock().unwrap().len() < 6 {
        assert!(Instant::now() < deadline, "the burst did not get going");
        thread::sleep(Duration::from_millis(2));
    }
    api.kill();
    for w in workers {
        w.join().unwrap();
    }
    let acked_blocks = acked_blocks.lock().unwrap().clone();
    let acked_domains = acked_domains.lock().unwrap().clone();
    println!(
        "acknowledged before SIGKILL: {} of 100 blocks, {} of 20 domains",
        acked_blocks.len(),
        acked_domains.len()
    );
    let refused = refused.lock().unwrap().clone();
    // (Refusals while applies run are `blocks_keep_flowing_while_domain_applies_run`'s
    // business; here only what was acknowledged counts.)
    if !refused.is_empty() {
        println!("refused before the kill: {refused:#?}");
    }
    assert!(
        acked_blocks.len() < 100 || acked_domains.len() < 20,
        "the kill came after the burst: the test proves nothing"
    );

    let api = Daemon::start(&edge);
    let r = http_call(api.port, "GET", "/health", None, None, None).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    // Database, file and runtime agree, and hold everything acknowledged.
    let db = api.blocked_keys();
    assert_eq!(blocked_map_file_keys(&edge), db, "map file vs database");
    assert_eq!(runtime_blocked_keys(&edge), db, "runtime map vs database");
    for ip in &acked_blocks {
        assert!(db.contains(ip), "acknowledged block {ip} lost");
    }
    let domains = api.domain_names();
    for host in &acked_domains {
        assert!(domains.contains(host), "acknowledged domain {host} lost");
    }
    for host in domains.iter().filter(|d| d.starts_with('k')) {
        let r = edge.get(host, "/");
        assert_eq!((r.status, r.body.as_str()), (200, "burst"), "{host} routed");
    }
    assert_eq!(edge.master_pid(), master, "HAProxy was never restarted");

    stop.store(true, Ordering::SeqCst);
    let (ok, failed) = probe.join().unwrap();
    println!(
        "probe through the edge during the burst: {ok} ok, {} failed",
        failed.len()
    );
    assert!(failed.is_empty(), "the edge failed requests: {failed:?}");
    assert!(ok > 10, "the probe hardly ran: {ok}");
}

#[test]
fn blocks_keep_flowing_while_domain_applies_run() {
    let (edge, app, api) = edge_with_api();
    let done = Arc::new(AtomicBool::new(false));
    let applier = {
        let (client, done, addr) = (api.client(), done.clone(), app.addr());
        thread::spawn(move || {
            let mut durations = Vec::new();
            for i in 0..8 {
                let body = json!({"servers": [{"address": addr}]});
                let r = client.call("PUT", &format!("/v1/domains/a{i}.example.com"), Some(&body));
                assert_eq!(r.status, 201, "{r:?}");
                durations.push(r.json["apply"]["duration"].as_f64().unwrap_or(0.0));
            }
            done.store(true, Ordering::SeqCst);
            durations
        })
    };
    let blockers: Vec<_> = (0..3)
        .map(|t| {
            let (client, done, port) = (api.client(), done.clone(), edge.port);
            thread::spawn(move || {
                let mut answers = Vec::new();
                for i in 0..400u32 {
                    if done.load(Ordering::SeqCst) {
                        break;
                    }
                    // Loopback sources, so each block can be checked through the edge at once.
                    let source = Ipv4Addr::new(127, 0, 10 + t, (i % 250 + 1) as u8);
                    let ip = source.to_string();
                    let started = Instant::now();
                    let r = client.call("POST", "/v1/blocked-ips", Some(&json!({"ip": ip})));
                    let elapsed = started.elapsed();
                    let seen = testkit::http_get(Some(source), port, SHOP, "/", &[]).status;
                    answers.push((ip, elapsed, r, seen));
                }
                answers
            })
        })
        .collect();
    let durations = applier.join().unwrap();
    let answers: Vec<_> = blockers
        .into_iter()
        .flat_map(|b| b.join().unwrap())
        .collect();
    let mut latencies: Vec<Duration> = answers.iter().map(|(_, d, _, _)| *d).collect();
    latencies.sort();
    let mut enforcement = std::collections::BTreeMap::<String, usize>::new();
    for (_, _, r, seen) in &answers {
        *enforcement
            .entry(format!(
                "{} {} then {seen}",
                r.status, r.json["enforcement"]
            ))
            .or_default() += 1;
    }
    println!(
        "{} blocks during 8 domain applies (apply ms: {durations:?}): latency p50 {:.1} ms, max {:.1} ms; {enforcement:?}",
        answers.len(),
        ms(percentile(&latencies, 0.5)),
        ms(latencies[latencies.len() - 1]),
    );
    // Every block is held everywhere, whatever its answer said.
    let sent: BTreeSet<String> = answers.iter().map(|(ip, _, _, _)| ip.clone()).collect();
    let db = api.blocked_keys();
    assert_eq!(db, sent, "database");
    assert_eq!(blocked_map_file_keys(&edge), db, "map file vs database");
    assert_eq!(runtime_blocked_keys(&edge), db, "runtime map vs database");
    // Each answer told the truth: HAProxy ran throughout, and the next request from a blocked
    // address was refused.
    let wrong: Vec<String> = answers
        .iter()
        .filter(|(_, _, r, seen)| {
            !(r.status == 200 || r.status == 201)
                || r.json["enforcement"] == "not-running"
                || *seen != 403
        })
        .map(|(ip, _, r, seen)| {
            format!(
                "{ip}: {} {} (then a request from it got {seen})",
                r.status, r.text
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} blocks failed or were reported as not enforced while HAProxy ran; the first ones: {:#?}",
        wrong.len(),
        answers.len(),
        &wrong[..wrong.len().min(8)]
    );
}

/// The value of one Prometheus sample line `name{labels} value`, by its exact prefix.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn metrics_count_applies_checks_reloads_blocks_and_requests() {
    let (_edge, app, api) = edge_with_api();
    // The first websocket domain: a new kind of backend section, so a check and a reload.
    let r = api.call(
        "PUT",
        "/v1/domains/m.example.com",
        Some(&json!({"servers": [{"address": app.addr()}], "profile": "websocket"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let r = api.call("POST", "/v1/blocked-ips", Some(&json!({"ip": "127.0.0.2"})));
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(api.get("/v1/nothing").status, 404);
    assert_eq!(
        http_call(api.port, "GET", "/metrics", None, None, None)
            .unwrap()
            .status,
        401
    );

    let r = api.get("/metrics");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("text/plain")),
        "{r:?}"
    );
    let text = &r.text;
    let at_least = |series: &str, min: f64| {
        let v = sample(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
        assert!(v >= min, "{series} = {v}, expected >= {min}\n{text}");
        v
    };
    at_least("hapctl_applies_total{outcome=\"applied\"}", 1.0);
    assert!(
        text.contains("# TYPE hapctl_apply_duration_seconds histogram"),
        "{text}"
    );
    let count = at_least("hapctl_apply_duration_seconds_count", 1.0);
    assert_eq!(
        sample(text, "hapctl_apply_duration_seconds_bucket{le=\"+Inf\"}"),
        Some(count),
        "{text}"
    );
    assert!(
        sample(text, "hapctl_apply_duration_seconds_sum").is_some_and(|s| s > 0.0),
        "{text}"
    );
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("hapctl_apply_duration_seconds_bucket{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(buckets.len() >= 2, "{text}");
    assert!(
        buckets.windows(2).all(|w| w[0] <= w[1]),
        "buckets are cumulative: {buckets:?}"
    );
    at_least("hapctl_haproxy_checks_total", 1.0);
    // The domain PUT needed a reload: a new kind of backend is a config change. Every reason
    // is a series, 0 included.
    at_least("hapctl_reloads_total{reason=\"config\"}", 1.0);
    assert_eq!(
        sample(text, "hapctl_reloads_total{reason=\"rollback\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(text, "hapctl_blocked_entries"), Some(1.0), "{text}");
    for series in [
        "hapctl_api_requests_total{method=\"PUT\",route=\"/v1/domains/{name}\",status=\"201\"}",
        "hapctl_api_requests_total{method=\"POST\",route=\"/v1/blocked-ips\",status=\"201\"}",
        "hapctl_api_requests_total{method=\"GET\",route=\"/metrics\",status=\"401\"}",
    ] {
        assert_eq!(sample(text, series), Some(1.0), "{series} in\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("hapctl_api_requests_total{") && l.contains("status=\"404\"")),
        "unknown routes are counted too\n{text}"
    );
}

#[test]
fn sigterm_stops_the_daemon_with_exit_0_and_leaves_haproxy_serving() {
    let (edge, _app, mut api) = edge_with_api();
    let master = edge.master_pid();
    // A client holding an idle connection must not keep the daemon from stopping.
    let idle = std::net::TcpStream::connect(("127.0.0.1", api.port)).unwrap();
    let t = Instant::now();
    api.signal(libc::SIGTERM);
    let status = api
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("still running 10 s after SIGTERM:\n{}", api.log_text()));
    println!("the daemon stopped {:.0} ms after SIGTERM", ms(t.elapsed()));
    assert_eq!(status.code(), Some(0), "{status}\n{}", api.log_text());
    drop(idle);
    assert_eq!(unsafe { libc::kill(master, 0) }, 0, "the master runs");
    assert_eq!(edge.master_pid(), master);
    assert_eq!(edge.get(SHOP, "/").body, "ok", "the edge still serves");
    assert!(
        ApiClient {
            port: api.port,
            token: api.token.clone()
        }
        .try_call("GET", "/v1/status", None)
        .is_err(),
        "the API port is closed"
    );
}

#[test]
fn expired_blocks_are_lifted_on_time_by_the_daemon_itself() {
    let (edge, _app, api) = edge_with_api();
    let reloads_before = reloads(&edge);
    let r = api.call(
        "POST",
        "/v1/blocked-ips",
        Some(&json!({"ip": "127.0.0.2", "ttl": "2s"})),
    );
    let t0 = Instant::now();
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(edge.get_from(B, SHOP, "/").status, 403);
    // No request to the daemon from here on: only requests through the edge.
    let lifted = loop {
        let status = edge.get_from(B, SHOP, "/").status;
        if status == 200 {
            break t0.elapsed();
        }
        assert_eq!(status, 403);
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the expired block was not lifted within 5 s"
        );
        thread::sleep(Duration::from_millis(50));
    };
    println!("a 2 s block was lifted after {:.0} ms", ms(lifted));
    assert!(
        lifted >= Duration::from_millis(900),
        "lifted early: {lifted:?}"
    );
    assert!(lifted <= Duration::from_secs(4), "lifted late: {lifted:?}");
    assert!(runtime_blocked_keys(&edge).is_empty());
    assert!(blocked_map_file_keys(&edge).is_empty());
    assert!(api.blocked_keys().is_empty());
    assert_eq!(reloads(&edge), reloads_before, "no reload");
}

#[test]
fn an_edge_in_no_fleet_says_so() {
    let (_edge, _app, api) = edge_with_api();
    let r = api.get("/v1/fleet");
    assert_eq!((r.status, r.error_code()), (409, "no_fleet"), "{r:?}");
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("[fleet]"),
        "{r:?}"
    );
}

#[test]
fn without_waf_the_agent_routes_say_what_to_set() {
    let (_edge, _app, api) = edge_with_api();
    let r = api.get("/v1/waf");
    assert_eq!(
        (r.status, r.json.clone()),
        (200, json!({"configured": false})),
        "{r:?}"
    );
    let r = api.call("POST", "/v1/waf/reload", None);
    assert_eq!(
        (r.status, r.error_code()),
        (409, "waf_not_configured"),
        "{r:?}"
    );
    let message = r.json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("[waf]") && message.contains("docs/waf.md"),
        "{message}"
    );
    for (method, path, body) in [
        ("GET", "/v1/waf/rules", None),
        ("POST", "/v1/waf/test", Some(json!({"url": "/"}))),
    ] {
        let r = api.call(method, path, body.as_ref());
        assert_eq!(
            (r.status, r.error_code()),
            (409, "waf_not_configured"),
            "{path}: {r:?}"
        );
    }
}
