//! Per-client rate limits against the real haproxy: every rule trips at its threshold and not
//! before, answers its action, skips exempt clients and resets; thresholds change at runtime
//! with no reload and survive one; IPv6 clients are tracked; hostile inputs are refused.

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use testkit::daemon::Daemon;
use testkit::pages::{log_line, override_template, themed_page};
use testkit::{http_get, Backend, Edge};

const HOST: &str = "shop.example.com";

fn client(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

/// A started edge routing HOST, with local addresses NOT exempt (the tests come from 127/8).
fn edge_with(rules: &[&str]) -> (Edge, Backend) {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", HOST, "--server", &app.addr()]);
    let mut args = vec![
        "limits",
        "set",
        "--local-exempt",
        "off",
        "--preset",
        "custom",
    ];
    args.extend_from_slice(rules);
    edge.ok(&args);
    (edge, app)
}

fn add_domain_on(edge: &Edge, host: &str, port: u16) {
    edge.ok(&[
        "domain",
        "add",
        host,
        "--server",
        &format!("127.0.0.1:{port}"),
    ]);
}

fn statuses(edge: &Edge, from: Ipv4Addr, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| edge.get_from(from, HOST, "/").status)
        .collect()
}

fn reloads(edge: &Edge) -> u32 {
    edge.show_proc().master.reloads
}

#[test]
fn the_request_rate_trips_at_its_threshold_resets_and_skips_exempt_clients() {
    let (edge, _app) = edge_with(&["--req-rate", "5:deny"]);
    let a = client(2);
    assert_eq!(
        statuses(&edge, a, 5),
        vec![200; 5],
        "5 requests are within 5"
    );
    assert_eq!(edge.get_from(a, HOST, "/").status, 429, "the 6th is over");
    // Another client has its own counters.
    assert_eq!(edge.get_from(client(3), HOST, "/").status, 200);
    // The ACME path is never limited.
    let acme = edge.get_from(a, HOST, "/.well-known/acme-challenge/none");
    assert_ne!(acme.status, 429);

    // Reset: the client's entry is cleared, its next request counts 1.
    edge.ok(&["security", "clear", "127.0.0.2"]);
    assert_eq!(statuses(&edge, a, 5), vec![200; 5]);
    assert_eq!(edge.get_from(a, HOST, "/").status, 429);

    // A trusted client skips every rule at runtime, and is limited again once removed.
    let before = reloads(&edge);
    edge.ok(&["limits", "exempt", "add", "127.0.0.2/32"]);
    assert_eq!(statuses(&edge, a, 3), vec![200; 3]);
    edge.ok(&["limits", "exempt", "rm", "127.0.0.2/32"]);
    assert_eq!(edge.get_from(a, HOST, "/").status, 429);
    // Local addresses exempt (the default) is a map entry too.
    edge.ok(&["limits", "set", "--local-exempt", "on"]);
    assert_eq!(edge.get_from(a, HOST, "/").status, 200);
    assert_eq!(reloads(&edge), before, "exemptions are runtime changes");
    let out = edge.expect_code(7, &["limits", "exempt", "rm", "192.0.2.1"]);
    assert!(out.contains("is not exempt"), "{out}");
}

#[test]
fn a_threshold_changed_at_runtime_applies_to_the_next_request_and_survives_a_reload() {
    let (edge, _app) = edge_with(&["--req-rate", "3:deny"]);
    let a = client(4);
    assert_eq!(statuses(&edge, a, 4), vec![200, 200, 200, 429]);
    let before = reloads(&edge);
    let out = edge.ok(&["limits", "set", "--req-rate", "8:deny", "--json"]);
    assert!(out.contains("no reload"), "{out}");
    // Counted 4 so far: 5 to 8 pass, the 9th is over the new threshold.
    assert_eq!(statuses(&edge, a, 5), vec![200, 200, 200, 200, 429]);
    assert_eq!(reloads(&edge), before, "a threshold change never reloads");

    // A tarpit length is part of the config: it reloads, and the threshold stays 8 (the new
    // worker starts with an empty table).
    edge.ok(&["limits", "set", "--tarpit", "2"]);
    assert_eq!(reloads(&edge), before + 1);
    let mut got = statuses(&edge, a, 9);
    // The old worker may still count a request sent while it hands over; only the last counts.
    assert_eq!(got.pop(), Some(429));
    assert!(got.iter().take(7).all(|s| *s == 200), "{got:?}");
}

#[test]
fn a_tarpit_holds_the_request_then_answers_its_status() {
    let (edge, _app) = edge_with(&["--req-rate", "2:tarpit-503", "--tarpit", "1"]);
    let a = client(5);
    assert_eq!(statuses(&edge, a, 2), vec![200, 200]);
    let t = Instant::now();
    assert_eq!(edge.get_from(a, HOST, "/").status, 503);
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn limit_answers_are_the_limited_page_with_the_request_id() {
    let (edge, _app) = edge_with(&["--req-rate", "2:deny", "--tarpit", "1"]);
    let _daemon = Daemon::start(&edge);
    let a = client(11);
    assert_eq!(statuses(&edge, a, 2), vec![200, 200]);
    let denied = edge.get_from(a, HOST, "/");
    let id = themed_page(&denied, 429, "Too many requests");
    assert_eq!(
        denied.header("retry-after"),
        Some("10"),
        "the request window"
    );
    let line = log_line(&edge, &id);
    assert_eq!(line["status"], 429, "{line}");
    assert_eq!(line["denied_by"], "limit:req_rate", "{line}");

    // A tarpit still holds the request, then answers the page (runtime changes, no reload).
    let before = reloads(&edge);
    edge.ok(&["limits", "set", "--req-rate", "2:tarpit-503"]);
    let t = Instant::now();
    let held = edge.get_from(a, HOST, "/");
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    let id = themed_page(&held, 503, "Too many requests");
    assert_eq!(held.header("retry-after"), Some("10"));
    assert_eq!(log_line(&edge, &id)["status"], 503);
    // A 403 answer carries no Retry-After.
    edge.ok(&["limits", "set", "--req-rate", "2:deny-403"]);
    let forbidden = edge.get_from(a, HOST, "/");
    themed_page(&forbidden, 403, "Too many requests");
    assert_eq!(forbidden.header("retry-after"), None);
    assert_eq!(reloads(&edge), before);

    // The page is a template: an override in the templates folder is served (`%` stays text).
    override_template(
        &edge,
        "limited.html.j2",
        "<p style=\"width:100%\">Slow down <code>{{ request_id }}</code></p>\n",
    );
    edge.ok(&["apply"]);
    assert!(reloads(&edge) > before, "a page is read at load");
    let b = client(12);
    assert_eq!(statuses(&edge, b, 2), vec![200, 200]);
    let themed = edge.get_from(b, HOST, "/");
    let id = themed_page(&themed, 403, "Slow down");
    assert!(themed.body.contains("width:100%\""), "{}", themed.body);
    assert_eq!(log_line(&edge, &id)["denied_by"], "limit:req_rate");
}

#[test]
fn a_log_rule_lets_the_request_through() {
    let (edge, _app) = edge_with(&["--req-rate", "2:log"]);
    assert_eq!(statuses(&edge, client(6), 4), vec![200; 4]);
}

#[test]
fn the_connection_rate_trips_at_its_threshold() {
    let (edge, _app) = edge_with(&["--conn-rate", "3:deny-403"]);
    let a = client(7);
    assert_eq!(statuses(&edge, a, 4), vec![200, 200, 200, 403]);
}

/// A backend that reads a request and closes 2 s later without answering (the request stays
/// in flight meanwhile).
fn hanging_backend() -> u16 {
    serve_forever(|conn| {
        thread::sleep(Duration::from_secs(2));
        drop(conn);
    })
}

fn serve_forever(handle: fn(TcpStream)) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            thread::spawn(move || handle(conn));
        }
    });
    port
}

#[test]
fn the_error_rate_trips_at_its_threshold() {
    let (edge, _app) = edge_with(&["--err-rate", "3:deny-403"]);
    let not_found = Backend::not_found();
    add_domain_on(&edge, "err.example.com", not_found.port);
    let a = client(8);
    let got: Vec<u16> = (0..5)
        .map(|_| edge.get_from(a, "err.example.com", "/").status)
        .collect();
    // Three 404s are within 3; the 4th request sees 3 errors... and the rule is "above 3".
    assert_eq!(&got[..4], &[404, 404, 404, 404], "{got:?}");
    assert_eq!(got[4], 403, "{got:?}");
}

#[test]
fn concurrent_requests_trip_at_their_threshold() {
    let (edge, _app) = edge_with(&["--conn-cur", "2:deny"]);
    let port = hanging_backend();
    add_domain_on(&edge, "slow.example.com", port);
    let a = client(9);
    let held: Vec<TcpStream> = (0..2).map(|_| hold_from(&edge, a)).collect();
    thread::sleep(Duration::from_millis(300));
    assert_eq!(edge.get_from(a, HOST, "/").status, 429, "3 in flight > 2");
    // HAProxy ends the held streams (502) once the backend closes them.
    thread::sleep(Duration::from_millis(2500));
    drop(held);
    assert_eq!(
        edge.get_from(a, HOST, "/").status,
        200,
        "back to 1 in flight"
    );
}

/// A request from `source` to the hanging backend, left in flight.
fn hold_from(edge: &Edge, source: Ipv4Addr) -> TcpStream {
    let mut s = testkit::connect_source(source, edge.port);
    s.write_all(b"GET / HTTP/1.1\r\nHost: slow.example.com\r\n\r\n")
        .unwrap();
    s
}

#[test]
fn an_ipv6_client_behind_a_trusted_proxy_is_tracked_and_limited() {
    let (edge, _app) = edge_with(&["--req-rate", "3:deny"]);
    edge.ok(&["proxy", "add", "127.0.0.1"]);
    let v6 = [("CF-Connecting-IP", "2001:db8::7")];
    let got: Vec<u16> = (0..4)
        .map(|_| http_get(None, edge.port, HOST, "/", &v6).status)
        .collect();
    assert_eq!(got, vec![200, 200, 200, 429]);
    // The proxy's other clients are not affected.
    let other = [("CF-Connecting-IP", "2001:db8::8")];
    assert_eq!(http_get(None, edge.port, HOST, "/", &other).status, 200);
    let top = edge.ok(&["security", "top", "--json", "--limit", "5"]);
    let top: serde_json::Value = serde_json::from_str(&top).unwrap();
    let first = &top["sources"][0];
    assert_eq!(first["ip"], "2001:db8::7", "{top}");
    assert_eq!(first["http_req_rate"], 4, "{top}");
    assert_eq!(top["table"], "st_clients");
    assert_eq!(top["counter_windows_ms"]["http_err_rate"], 30000);
    edge.ok(&["security", "clear", "2001:db8::7"]);
    assert_eq!(http_get(None, edge.port, HOST, "/", &v6).status, 200);
}

#[test]
fn per_domain_policies_override_the_default_at_runtime() {
    let (edge, app) = edge_with(&["--req-rate", "2:deny"]);
    edge.ok(&["domain", "add", "free.example.com", "--server", &app.addr()]);
    let before = reloads(&edge);
    edge.ok(&["domain", "limits", "free.example.com", "--preset", "off"]);
    let a = client(10);
    let free: Vec<u16> = (0..4)
        .map(|_| edge.get_from(a, "free.example.com", "/").status)
        .collect();
    assert_eq!(free, vec![200; 4]);
    assert_eq!(
        edge.get_from(a, HOST, "/").status,
        429,
        "the default still applies"
    );
    edge.ok(&["domain", "limits", "free.example.com", "--inherit"]);
    assert_eq!(edge.get_from(a, "free.example.com", "/").status, 429);
    assert_eq!(reloads(&edge), before);
}

#[test]
fn the_standard_preset_is_the_old_managers_rules() {
    let edge = Edge::new();
    let shown: serde_json::Value =
        serde_json::from_str(&edge.ok(&["limits", "show", "--json"])).unwrap();
    assert_eq!(
        shown["default"],
        serde_json::json!({"req_rate": "5000:deny-429", "req_rate_soft": "3000:tarpit-429",
            "conn_rate": "500:deny-429", "conn_cur": "500:deny-429", "err_rate": "100:tarpit-403"})
    );
    assert_eq!(
        shown["windows"],
        serde_json::json!({"req": 10, "conn": 10, "err": 30})
    );
    assert_eq!(
        (shown["tarpit_secs"].clone(), shown["local_exempt"].clone()),
        (10.into(), true.into())
    );
}

#[test]
fn hostile_limit_inputs_are_refused_with_nothing_written() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", HOST, "--server", &app.addr()]);
    let files = edge.live_files();
    let hostile: &[&[&str]] = &[
        &["limits", "set", "--req-rate", "0:deny"],
        &["limits", "set", "--req-rate", "1000001:deny"],
        &["limits", "set", "--req-rate", "-5:deny"],
        &["limits", "set", "--req-rate", "5:deny-200"],
        &["limits", "set", "--req-rate", "5:drop"],
        &["limits", "set", "--req-rate", "5:deny\nhttp-request allow"],
        &["limits", "set", "--req-rate", "5:deny if TRUE"],
        &["limits", "set", "--req-rate-soft", "6000:tarpit"],
        &["limits", "set", "--preset", "paranoid"],
        &["limits", "set", "--preset", "custom"],
        &["limits", "set", "--req-window", "0"],
        &["limits", "set", "--err-window", "3601"],
        &["limits", "set", "--conn-window", "10m"],
        &["limits", "set", "--tarpit", "0"],
        &["limits", "set", "--tarpit", "1d"],
        &["limits", "set", "--local-exempt", "maybe"],
        &["limits", "exempt", "add", "10.0.0.0/33"],
        &["limits", "exempt", "add", "300.1.1.1"],
        &["limits", "exempt", "add", "10.0.0.1 1\n0.0.0.0/0"],
        &["limits", "exempt", "add", ""],
        &["domain", "limits", HOST, "--preset", "strict"],
        &["domain", "limits", HOST, "--err-rate", "100:tarpit-999"],
        &["domain", "limits", HOST],
        &["domain", "limits", "bad host", "--preset", "off"],
        &["security", "clear", "10.0.0.0/8"],
        &["security", "clear", "127.0.0.1; clear table"],
        &["security", "top", "--limit", "0"],
    ];
    for args in hostile {
        let out = edge.run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            testkit::describe(&out)
        );
    }
    assert_eq!(edge.live_files(), files, "nothing written");
}
