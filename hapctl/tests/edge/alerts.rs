//! Alerts end to end: `hapctl serve` with `[alerts]` pointing at a local webhook receiver and
//! a local SMTP sink (both from the kit). A killed master, a failing renewal (Pebble gone), a
//! defect alarm and a domain answering 5xx each give one "firing" notice, and one "resolved"
//! once they clear (the 5xx a minute later: its window). `hapctl alerts test` sends one of each
//! kind to both. The other conditions: `alerts/events.rs` (a restart loop, a failed
//! rollback), `alerts/states.rs` (a certificate expiring, the WAF agent down), `alerts/fleet.rs`
//! (an edge lagging, an edge gone).

mod events;
mod fleet;
mod states;

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
    let mail = format!(
        "smtp = \"smtp://127.0.0.1:{}\"\nemail_to = [\"ops@example.com\"]\nemail_from = \"edge@example.com\"\n",
        sink.port
    );
    edge.write_settings(&(edge.settings_text() + &section(hook, &[]) + &mail));
}

/// `[alerts]` with the webhook `hook` alone: the defaults of [`alerts_to`], with `keys` (TOML
/// values) over them.
fn hook_to(edge: &Edge, hook: &Backend, keys: &[(&str, &str)]) {
    edge.write_settings(&(edge.settings_text() + &section(hook, keys)));
}

/// The `[alerts]` section: the webhook `hook`, `check_every` 1 s, `quiet` 2 s, and `keys` over
/// those.
fn section(hook: &Backend, keys: &[(&str, &str)]) -> String {
    let webhook = format!("\"http://127.0.0.1:{}/hook/secret-token\"", hook.port);
    let mut all: BTreeMap<&str, &str> = BTreeMap::from([
        ("webhook", webhook.as_str()),
        ("check_every", "\"1s\""),
        ("quiet", "\"2s\""),
        ("timeout", "\"5s\""),
        ("error_min_requests", "5"),
    ]);
    all.extend(keys.iter().copied());
    let lines: String = all.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
    format!("\n[alerts]\n{lines}")
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

/// Waits (up to 150 s: a domain's 5xx window is a minute or two) until the webhook got `kind`'s notice in `state`, and returns it.
fn wait_notice(hook: &Recorded, kind: &str, state: &str) -> Value {
    let found = || {
        notices(hook)
            .into_iter()
            .find(|n| n["kind"] == kind && n["state"] == state)
    };
    crate::waf::wait_up_to(
        Duration::from_secs(150),
        &format!("a {state} {kind}"),
        &|| found().is_some(),
    );
    found().unwrap()
}

/// `notice`'s summary begins with `prefix`.
fn assert_summary(notice: &Value, prefix: &str) {
    let summary = notice["summary"].as_str().unwrap_or_default();
    assert!(summary.starts_with(prefix), "{notice:#?}");
}

/// `kind` was notified exactly once firing and once resolved, both about `subject`; the
/// firing notice.
fn once_then_resolved(hook: &Recorded, kind: &str, subject: &str) -> Value {
    let all: Vec<Value> = notices(hook)
        .into_iter()
        .filter(|n| n["kind"] == kind)
        .collect();
    let states: Vec<(&str, &str)> = all
        .iter()
        .map(|n| (n["state"].as_str().unwrap(), n["subject"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [("firing", subject), ("resolved", subject)],
        "{all:#?}"
    );
    all[0].clone()
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

    // A certificate from the CA; then a CA that refuses every request (Pebble rejecting each
    // nonce it gave) and the certificate due: the daemon's renewal fails on the CA's answer.
    let api = Daemon::start(&edge);
    let r = api.call(
        "POST",
        &format!("/v1/certificates/{SHOP}/request"),
        Some(&json!({})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    drop(api);
    drop(pebble);
    let refusing = Pebble::start_with_env(edge.port, &[("PEBBLE_WFE_NONCEREJECT", "100")]);
    edge.set_acme(&refusing.directory_url(), &refusing.ca_root_path(), None);
    let db = rusqlite::Connection::open(edge.path("state.db")).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    db.execute(
        "UPDATE certificates SET next_renewal = 0 WHERE name = ?1",
        [SHOP],
    )
    .unwrap();
    let api = Daemon::start(&edge);
    wait_notice(&bodies, "renewal-failing", "firing");
    let refused = notices(&bodies)
        .into_iter()
        .find(|n| n["kind"] == "renewal-failing")
        .unwrap();
    assert!(
        refused["summary"].as_str().unwrap().contains("badNonce"),
        "{refused}"
    );

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
    // Resolved once the errors left the last minute.
    wait_notice(&bodies, "domain-errors", "resolved");
    let errors = once_then_resolved(&bodies, "domain-errors", BROKEN);
    assert_summary(&errors, "100.0 % of 6 requests");

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
