//! The alerts of states the daemon sees at each look: a certificate within `cert_expiry`, and
//! the WAF agent down.

use testkit::daemon::Daemon;
use testkit::pki::TestCa;
use testkit::{Backend, Edge};

use super::{assert_summary, hook_to, once_then_resolved, wait_notice, SHOP};
use crate::waf::{agent_pid, agent_settings, wait_for, wait_up_to};

#[test]
fn a_certificate_within_cert_expiry_is_one_alert_resolved_when_removed() {
    let edge = Edge::new();
    let (hook, bodies) = Backend::recording();
    // The kit's leaves are valid for 90 days from yesterday: within 100 days.
    hook_to(&edge, &hook, &[("cert_expiry", "\"100days\"")]);
    edge.start().unwrap();
    let _api = Daemon::start(&edge);
    let ca = TestCa::new("alerts");
    let bundle = edge.path("shop.bundle");
    std::fs::write(&bundle, ca.bundle(&ca.leaf(&[SHOP]))).unwrap();
    edge.ok(&["cert", "import", SHOP, "--pem", bundle.to_str().unwrap()]);
    wait_notice(&bodies, "certificate-expiring", "firing");
    edge.ok(&["cert", "rm", SHOP]);
    wait_notice(&bodies, "certificate-expiring", "resolved");
    let expiring = once_then_resolved(&bodies, "certificate-expiring", SHOP);
    let summary = expiring["summary"].as_str().unwrap();
    let hours: i64 = summary
        .strip_prefix("expires in ")
        .and_then(|s| s.split(' ').next())
        .and_then(|h| h.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!((88 * 24..=90 * 24).contains(&hours), "{summary}");
}

#[test]
fn an_agent_that_cannot_start_is_one_alert_resolved_when_it_serves_again() {
    let edge = Edge::new();
    let (_, crs) = agent_settings(&edge, "");
    let (hook, bodies) = Backend::recording();
    hook_to(&edge, &hook, &[]);
    edge.start().unwrap();
    let _api = Daemon::start(&edge);
    wait_for("the agent is up", &|| agent_pid(&edge).is_some());

    // Rules libmodsecurity refuses, then SIGKILL: every start the supervision makes fails.
    let good = std::fs::read_to_string(&crs).unwrap();
    std::fs::write(
        &crs,
        format!("{good}\nSecRule ARGS \"x\" \"id:1,nonsense\"\n"),
    )
    .unwrap();
    let pid = agent_pid(&edge).unwrap();
    hapctl::process::send_signal(pid, libc::SIGKILL).unwrap();
    wait_notice(&bodies, "waf-agent-down", "firing");

    // The rules fixed: the supervision's next start (its pause is at most 30 s) serves.
    std::fs::write(&crs, good).unwrap();
    wait_up_to(
        std::time::Duration::from_secs(60),
        "the agent is back",
        &|| agent_pid(&edge).is_some_and(|p| p != pid),
    );
    wait_notice(&bodies, "waf-agent-down", "resolved");
    let down = once_then_resolved(&bodies, "waf-agent-down", "");
    assert_summary(&down, "the WAF agent is down: its process");
}
