//! Renewal by the daemon itself: the v1 renew route, the worker a few seconds after start,
//! and a failure that is recorded, shown (status, metrics) and backed off, never looped.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{acme_edge, assert_keys, assert_served, no_key, reloads, sample};
use hapctl::tls::x509::serial_matches;
use testkit::daemon::{ApiClient, Daemon};
use testkit::Edge;

fn set_due(edge: &Edge, name: &str) {
    let db = rusqlite::Connection::open(edge.path("state.db")).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    let n = db
        .execute(
            "UPDATE certificates SET next_renewal = 0 WHERE name = ?1",
            [name],
        )
        .unwrap();
    assert_eq!(n, 1, "no certificate {name}");
}

/// Polls `GET /v1/certificates/{name}` until `done` holds (the worker's first pass is ~5 s
/// after start; an order takes a few seconds).
fn wait_for(api: &ApiClient, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = api.get(&format!("/v1/certificates/{name}"));
        if done(&r.json) {
            return r.json;
        }
        assert!(Instant::now() < deadline, "{what} did not happen: {r:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_daemon_renews_due_certificates_itself_and_a_failure_backs_off() {
    let (edge, pebble) = acme_edge();
    edge.ok(&["haproxy", "start"]);
    let before = reloads(&edge);
    let name = "renew.example.com";
    let route = format!("/v1/certificates/{name}");

    let api = Daemon::start(&edge);
    let r = api.call("POST", &format!("{route}/request"), Some(&json!({})));
    assert_eq!(r.status, 201, "{r:?}");
    no_key(&r);
    assert_eq!(
        (&r.json["installed"], &r.json["reloads"]),
        (&json!("runtime"), &json!(0))
    );
    let first = r.json["serial"].as_str().unwrap().to_string();
    assert_served(&edge, name, &first);
    let r = api.call("POST", &format!("{route}/renew"), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_keys(&r.json, &["name", "report", "error"]);
    let second = r.json["report"]["serial"].as_str().unwrap().to_string();
    assert!(!serial_matches(&second, &first));
    assert_served(&edge, name, &second);
    let metrics = api.get("/metrics").text;
    assert_eq!(
        sample(&metrics, "hapctl_certificate_renewals_total"),
        Some(1.0)
    );
    let r = api.call("POST", "/v1/certificates/default/renew", None);
    assert_eq!((r.status, r.error_code()), (400, "refused"), "{r:?}");
    drop(api);

    // Due: the worker renews it a few seconds after start, with no reload.
    set_due(&edge, name);
    let api = Daemon::start(&edge);
    let row = wait_for(&api, name, "the worker's renewal", |c| {
        c["serial"]
            .as_str()
            .is_some_and(|s| !serial_matches(s, &second))
    });
    let third = row["serial"].as_str().unwrap().to_string();
    assert_served(&edge, name, &third);
    assert!(row["next_renewal"].as_i64().unwrap() > hapctl::clock::unix_now());
    let metrics = api.get("/metrics").text;
    assert_eq!(
        sample(&metrics, "hapctl_certificate_renewals_total"),
        Some(1.0)
    );
    drop(api);

    // The CA is gone: the renewal fails once, is recorded and backs off; the certificate
    // keeps serving.
    drop(pebble);
    set_due(&edge, name);
    let api = Daemon::start(&edge);
    let row = wait_for(&api, name, "the failed renewal", |c| {
        c["last_error"].is_string()
    });
    assert_eq!(row["failures"], 1, "{row}");
    let retry = row["retry_at"].as_i64().unwrap() - hapctl::clock::unix_now();
    assert!(retry > 8 * 60, "retried in {retry} s: no backoff");
    assert_served(&edge, name, &third);
    let status = api.get("/v1/status");
    let failing = &status.json["certificates"]["failing"];
    assert_eq!(failing[0]["name"], name, "{status:?}");
    assert_eq!(failing[0]["failures"], 1);
    assert!(failing[0]["last_error"].is_string());
    let metrics = api.get("/metrics").text;
    let series = |m: &str| format!("{m}{{name=\"{name}\"}}");
    assert_eq!(
        sample(
            &metrics,
            &series("hapctl_certificate_renewal_failures_total")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, &series("hapctl_certificate_renewal_failing")),
        Some(1.0)
    );
    // Backing off: a pass now renews nothing and does not try again.
    let r = api.call("POST", "/api/certificates/renew", None);
    assert_eq!(r.json["message"], "No certificates needed renewal", "{r:?}");
    assert_eq!(api.get(&route).json["failures"], 1);
    // Asked by name, it tries (and fails: 502, the old one still served).
    let r = api.call("POST", &format!("{route}/renew"), None);
    assert_eq!((r.status, r.error_code()), (502, "renewal_failed"), "{r:?}");
    assert_eq!(api.get(&route).json["failures"], 2);
    assert_served(&edge, name, &third);
    assert_eq!(reloads(&edge), before, "renewals reloaded HAProxy");
}
