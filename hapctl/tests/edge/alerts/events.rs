//! The alerts of events: a restart loop (the master killed twice within the window) and an
//! apply whose rollback fails.

use std::time::Duration;

use serde_json::json;
use testkit::daemon::{Daemon, Serve};
use testkit::{Backend, Edge};

use super::{assert_summary, hook_to, once_then_resolved, wait_notice};

/// SIGKILLs the master and waits until the daemon's supervision started a new one.
fn kill_master(edge: &Edge) {
    let master = edge.master_pid();
    // SAFETY: a signal to the test's own HAProxy master.
    assert_eq!(unsafe { libc::kill(master, libc::SIGKILL) }, 0);
    crate::waf::wait_for("a new master", &|| {
        edge.try_show_proc().is_ok_and(|p| p.master.pid != master)
    });
}

#[test]
fn a_master_killed_twice_within_the_window_is_one_restart_loop_alert() {
    let edge = Edge::new();
    let (hook, bodies) = Backend::recording();
    // `quiet` outlasts the time between the two restarts: they are one haproxy-restarted.
    hook_to(
        &edge,
        &hook,
        &[
            ("restart_loop", "2"),
            ("restart_window", "\"10s\""),
            ("quiet", "\"10s\""),
        ],
    );
    edge.start().unwrap();
    let _api = Daemon::start(&edge);
    kill_master(&edge);
    // The daemon counted that restart (its start is over) before the next kill.
    wait_notice(&bodies, "haproxy-restarted", "firing");
    kill_master(&edge);
    wait_notice(&bodies, "haproxy-restart-loop", "firing");
    // Resolved once the first restart left the window, `quiet` after the last look that
    // counted two.
    wait_notice(&bodies, "haproxy-restart-loop", "resolved");
    wait_notice(&bodies, "haproxy-restarted", "resolved");
    let looping = once_then_resolved(&bodies, "haproxy-restart-loop", "");
    assert_summary(&looping, "HAProxy restarted 2 times within 10 s");
    once_then_resolved(&bodies, "haproxy-restarted", "");
}

/// The daemon's apply (its metrics are what the alert loop counts; a CLI apply is another
/// process's) whose reloads fail, the new set's and then the rollback's (the test's fault).
#[test]
fn an_apply_whose_rollback_fails_is_one_alert() {
    let edge = Edge::started();
    let (hook, bodies) = Backend::recording();
    hook_to(&edge, &hook, &[]);
    let serve = Serve {
        env: &[("HAPCTL_FAULT", "fail:reload")],
        ..Serve::within(Duration::from_secs(30))
    };
    let api = Daemon::try_start(&edge, &serve).unwrap();
    // A limit is a change that needs a reload.
    let r = api.call("PUT", "/v1/limits", Some(&json!({ "tarpit_secs": 23 })));
    assert!(r.text.contains("rollback-failed"), "{r:?}");
    wait_notice(&bodies, "rollback-failed", "firing");
    wait_notice(&bodies, "rollback-failed", "resolved");
    let failed = once_then_resolved(&bodies, "rollback-failed", "");
    assert_summary(&failed, "ROLLBACK FAILED");
}
