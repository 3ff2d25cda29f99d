//! Alerts end to end: `hapctl serve` with `[alerts]` pointing at a local webhook receiver and
//! a local SMTP sink (both from the kit). A killed master, a failing renewal (Pebble gone) and
//! a defect alarm each give one "firing" notice, and one "resolved" once they clear; a domain
//! answering 5xx gives one "firing" (its window takes a minute or two to clear, so its
//! "resolved" is left to the tracker's unit test). `hapctl alerts test` sends one of each
//! kind to both.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::daemon::Daemon;
use testkit::pebble::Pebble;
use testkit::smtp::SmtpSink;
use testkit::{Backend, Edge, Recorded};

const SHOP: &str = "shop.example.com";
const BROKEN: &str = "broken.example.com";

/// `[alerts]` sending to `hook` and `sink`, looking every second; an event resolves after 2 s.
fn alerts_to(edge: &Edge, hook: &Backend, sink: &SmtpSink) {
    let text = edge.settings_text()
        + &format!(
            "\n[alerts]\nwebhook = \"http://127.0.0.1:{}/hook/secret-token\"\nsmtp = \"smtp://127.0.0.1:{}\"\nemail_to = [\"ops@example.com\"]\nemail_from = \"edge@example.com\"\ncheck_every = \"1s\"\nquiet = \"2s\"\ntimeout = \"5s\"\nerror_min_requests = 5\n",
            hook.port, sink.port
        );
    edge.write_settings(&text);
}

fn notices(hook: &Recorded) -> Vec<Value> {
    hook.lock()
        .unwrap()
        .iter()
        .map(|b| serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {b:?}")))
        .collect()
}

/// (kind, state) → how many notices said so.
fn counts(hook: &Recorded) -> BTreeMap<(String, String), usize> {
    let mut c = BTreeMap::new();
    for n in notices(hook) {
        let key = (
            n["kind"].as_str().unwrap().to_string(),
            n["state"].as_str().unwrap().to_string(),
        );
        *c.entry(key).or_default() += 1;
    }
    c
}

/// Waits until the webhook got `kind`'s notice in `state` (each look is a second apart).
fn wait_notice(hook: &Recorded, kind: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let key = (kind.to_string(), state.to_string());
    while !counts(hook).contains_key(&key) {
        assert!(
            Instant::now() < deadline,
            "no {state} {kind}: {:#?}",
            notices(hook)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn alerts_test_sends_one_of_each_kind_to_the_webhook_and_by_mail() {
    let edge = Edge::new();
    let (hook, bodies) = Backend::recording();
    let sink = SmtpSink::start();
    alerts_to(&edge, &hook, &sink);
    let out = edge.ok(&["alerts", "test"]);
    assert!(
        !out.contains("secret-token"),
        "the URL's token is never shown: {out}"
    );
    let kinds: Vec<String> = notices(&bodies)
        .iter()
        .map(|n| {
            assert_eq!(n["state"], "firing");
            n["kind"].as_str().unwrap().to_string()
        })
        .collect();
    let want: Vec<String> = hapctl::alerts::Kind::ALL
        .iter()
        .map(|k| k.as_str().to_string())
        .collect();
    assert_eq!(kinds, want);
    let mails = sink.mails();
    assert_eq!(mails.len(), want.len(), "{mails:#?}");
    assert_eq!(mails[0].to, ["ops@example.com"]);
    assert!(
        mails[0].data.contains("certificate-expiring"),
        "{}",
        mails[0].data
    );
}

#[test]
fn a_killed_master_a_failing_renewal_a_defect_alarm_and_5xx_fire_once() {
    let edge = Edge::new();
    let pebble = Pebble::start(edge.port);
    edge.set_acme(&pebble.directory_url(), &pebble.ca_root_path(), None);
    let (hook, bodies) = Backend::recording();
    let sink = SmtpSink::start();
    alerts_to(&edge, &hook, &sink);
    edge.start().unwrap();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);

    // A certificate from the CA, then the CA gone and the certificate due: the daemon's
    // renewal fails.
    let api = Daemon::start(&edge);
    let r = api.call(
        "POST",
        &format!("/v1/certificates/{SHOP}/request"),
        Some(&json!({})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    drop(api);
    drop(pebble);
    let db = rusqlite::Connection::open(edge.path("state.db")).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    db.execute(
        "UPDATE certificates SET next_renewal = 0 WHERE name = ?1",
        [SHOP],
    )
    .unwrap();
    let api = Daemon::start(&edge);
    wait_notice(&bodies, "renewal-failing", "firing");

    // The master killed: the daemon starts it again; the alert resolves 2 s later.
    let master = edge.master_pid();
    // SAFETY: a signal to the test's own HAProxy master.
    assert_eq!(unsafe { libc::kill(master, libc::SIGKILL) }, 0);
    wait_notice(&bodies, "haproxy-restarted", "firing");
    wait_notice(&bodies, "haproxy-restarted", "resolved");

    // A defect: a set changed at runtime that haproxy -c refuses (as a rendering defect
    // would leave it); the next apply ends it.
    let config = edge.path("live/haproxy.cfg");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\nbackend defect\n    bogus_keyword 1\n");
    std::fs::write(&config, text).unwrap();
    std::fs::write(edge.path("run/unchecked"), "").unwrap();
    wait_notice(&bodies, "defect-alarm", "firing");
    edge.ok(&["apply"]);
    wait_notice(&bodies, "defect-alarm", "resolved");

    // The failing certificate removed: that condition ends too.
    edge.ok(&["cert", "rm", SHOP]);
    wait_notice(&bodies, "renewal-failing", "resolved");

    // Once each, then once resolved; the same by mail.
    let c = counts(&bodies);
    for kind in ["renewal-failing", "haproxy-restarted", "defect-alarm"] {
        for state in ["firing", "resolved"] {
            assert_eq!(c[&(kind.to_string(), state.to_string())], 1, "{c:#?}");
        }
    }
    // The e-mail of a notice goes after its webhook call.
    let deadline = Instant::now() + Duration::from_secs(30);
    while sink.mails().len() < 6 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mails = sink.mails();
    assert_eq!(mails.len(), 6, "{mails:#?}");
    for kind in ["renewal-failing", "haproxy-restarted", "defect-alarm"] {
        let n = mails
            .iter()
            .filter(|m| m.data.contains(&format!(": {kind}")))
            .count();
        assert_eq!(n, 2, "{kind}: {mails:#?}");
    }
    // A domain answering 5xx (its server is a port nobody listens on): over the share of the
    // last minute with enough requests.
    let dead = format!("127.0.0.1:{}", testkit::free_port());
    edge.ok(&["domain", "add", BROKEN, "--server", &dead]);
    for _ in 0..6 {
        assert_eq!(edge.get(BROKEN, "/").status, 503);
    }
    wait_notice(&bodies, "domain-errors", "firing");
    let errors: Vec<Value> = notices(&bodies)
        .into_iter()
        .filter(|n| n["kind"] == "domain-errors")
        .collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0]["subject"], BROKEN);
    assert!(
        errors[0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("100.0 % of 6 requests"),
        "{errors:#?}"
    );

    let log = api.log_text();
    assert!(!log.contains("secret-token"), "{log}");
}

#[test]
fn the_prometheus_rules_pass_promtool() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/prometheus");
    for args in [
        ["check", "rules", "hapctl.rules.yml"],
        ["test", "rules", "hapctl.rules.test.yml"],
    ] {
        let mut cmd = std::process::Command::new("promtool");
        cmd.args(args).current_dir(&dir);
        let out = testkit::run_bounded(cmd, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "promtool {args:?}: {}",
            testkit::describe(&out)
        );
    }
}
