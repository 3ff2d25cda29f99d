//! The fleet's alerts on another edge: an edge that refused a revision lags until a later one
//! applies, and an edge whose daemon stopped is gone until it starts again.

use std::time::Duration;

use serde_json::json;
use testkit::fleet::FleetLab;
use testkit::Backend;

use super::{once_then_resolved, section, wait_notice};

#[test]
fn an_edge_that_refused_a_revision_lags_and_one_whose_daemon_stopped_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (refusing, _) = testkit::refusing_haproxy(
        dir.path(),
        "timeout tarpit 23s",
        "s/timeout tarpit 23s/timeout tarpit nonsense/",
    );
    let (hook, bodies) = Backend::recording();
    let alerts = section(&hook, &[]);
    let mut lab = FleetLab::start_with(1, 2, |i, edge| match i {
        0 => edge.write_settings(&(edge.settings_text() + &alerts)),
        _ => edge.set_env("HAPCTL_HAPROXY_BIN", &refusing.display().to_string()),
    });
    lab.wait_current(Duration::from_secs(30));
    let tarpit = |secs: u64| {
        let r = lab
            .daemon(0)
            .call("PUT", "/v1/limits", Some(&json!({ "tarpit_secs": secs })));
        assert_eq!(r.status, 200, "{r:?}");
    };

    // e1's HAProxy refuses the revision: it stays behind until a later one it takes.
    tarpit(23);
    let lagging = wait_notice(&bodies, "fleet-edge-lagging", "firing");
    tarpit(24);
    lab.wait_current(Duration::from_secs(30));
    wait_notice(&bodies, "fleet-edge-lagging", "resolved");
    assert_eq!(
        once_then_resolved(&bodies, "fleet-edge-lagging", "e1"),
        lagging
    );

    // e1's daemon stopped: its status key goes with its lease; started again, it is back.
    lab.edges[1].1.stop();
    wait_notice(&bodies, "fleet-edge-gone", "firing");
    lab.restart_daemon(1);
    wait_notice(&bodies, "fleet-edge-gone", "resolved");
    let gone = once_then_resolved(&bodies, "fleet-edge-gone", "e1");
    assert_eq!(gone["edge"], "e0", "{gone:#?}");
}
