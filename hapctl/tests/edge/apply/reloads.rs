//! Reload discipline: every reload carries its reason (history, status, metrics), a change
//! whose rendered set is unchanged never reloads, and `hapctl status` shows the old workers
//! still draining and their connections. Real HAProxy.

use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{demo_app_edge, Backend, Edge, Stream};

const HOST: &str = "shop.example.com";

fn status(edge: &Edge) -> Value {
    serde_json::from_str(&edge.ok(&["status", "--json"])).unwrap()
}

#[test]
fn every_reload_has_a_reason_and_an_unchanged_set_never_reloads() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", HOST, "--server", &app.addr()]);
    let applies = &status(&edge)["applies"];
    let last = &applies[0];
    assert_eq!(last["reloads"], 1, "{last}");
    assert_eq!(
        last["reload_reasons"][0],
        "config: haproxy.cfg, maps/hosts.map changed, which only a reload loads: shop.example.com is the first default domain: there is no slot backend of that kind yet",
        "{last}"
    );

    // The same state again: nothing rendered differs, so nothing runs.
    let out = edge.ok(&["apply", "--json"]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["outcome"], "unchanged", "{out}");
    assert_eq!(report["reloads"], 0, "{out}");
    assert_eq!(report["reload_reasons"], serde_json::json!([]), "{out}");

    // A change only runtime maps carry (an HTTPS policy) reloads nothing either.
    let out = edge.ok(&["domain", "https", HOST, "--hsts", "3600", "--json"]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["reloads"], 0, "{out}");

    // People see the reason in `hapctl status`.
    let text = edge.ok(&["status"]);
    assert!(
        text.contains("    reload: config: haproxy.cfg, maps/hosts.map changed"),
        "{text}"
    );
}

#[test]
fn status_shows_the_old_worker_draining_a_stream_and_its_connections() {
    let edge = demo_app_edge(HOST, "1.0.0");
    // 40 lines 100 ms apart: the stream outlives the reload by seconds.
    let stream = Stream::open(edge.port, HOST, 40, 100);
    let other = Backend::start("other");
    edge.ok(&[
        "domain",
        "add",
        "other.example.com",
        "--server",
        &other.addr(),
    ]);

    let haproxy = &status(&edge)["haproxy"];
    let draining = haproxy["draining"].as_array().unwrap();
    assert_eq!(draining.len(), 1, "{haproxy}");
    assert!(
        draining[0]["connections"].as_u64().unwrap() >= 1,
        "the stream is still served by the old worker: {haproxy}"
    );
    let text = edge.ok(&["status"]);
    assert!(
        text.contains("old worker PID") && text.contains("connection(s) left"),
        "{text}"
    );

    assert_eq!(stream.finish().unwrap().len(), 40, "the stream ended whole");
    // Its last connection closed, the old worker exits: nothing drains any more.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !status(&edge)["haproxy"]["draining"]
        .as_array()
        .unwrap()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the old worker never left");
        std::thread::sleep(Duration::from_millis(100));
    }
}
