//! Deliveries against the real haproxy and real demo-app processes.

use std::process::Stdio;

use testkit::{demo_app_edge, DemoEdge, Edge, Stream};

const HOST: &str = "shop.example.com";

/// An edge with app `shop` routed from `shop.example.com` and `first` delivered; its
/// generations are stopped on drop.
fn app_edge(first: &str) -> DemoEdge {
    demo_app_edge(HOST, first)
}

fn generations(edge: &Edge) -> serde_json::Value {
    serde_json::from_str(&edge.ok(&["generations", "--json"])).unwrap()
}

/// `(role, running)` of one version, from `hapctl generations`.
fn role_of(edge: &Edge, version: &str) -> (String, bool) {
    let all = generations(edge);
    let g = all
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["version"] == version)
        .unwrap_or_else(|| panic!("{version} unknown: {all}"));
    (
        g["role"].as_str().unwrap().to_string(),
        g["running"].as_bool().unwrap(),
    )
}

#[test]
fn a_delivery_keeps_streams_on_the_old_generation_and_serves_the_new_one() {
    let edge = app_edge("1.4.2");
    let before = edge.show_proc();
    let stream = Stream::open(edge.port, HOST, 30, 50);

    edge.ok(&["deliver", "1.5.0"]);
    edge.wait_for_body(HOST, "1.5.0\n");
    let lines = stream.finish().expect("the long stream ran to its end");
    assert_eq!(lines.len(), 30);
    assert!(
        lines.iter().all(|l| l.starts_with("1.4.2 ")),
        "every line from 1.4.2: {lines:?}"
    );

    let after = edge.show_proc();
    assert_eq!(after.master.pid, before.master.pid, "master unchanged");
    let old: Vec<i32> = before.all_worker_pids();
    assert!(
        after.workers.iter().any(|w| !old.contains(&w.pid)),
        "a new worker appeared"
    );
    assert_eq!(
        role_of(&edge, "1.4.2"),
        ("previous".into(), true),
        "1.4.2 still runs"
    );
    assert_eq!(role_of(&edge, "1.5.0"), ("current".into(), true));
    let cfg = std::fs::read_to_string(edge.path("live/generation.cfg")).unwrap();
    assert!(
        cfg.contains("backend applicatif") && cfg.contains("server courante 127.0.0.1:"),
        "{cfg}"
    );
}

#[test]
fn retention_keeps_the_replaced_generation_and_removes_the_one_before() {
    let edge = app_edge("1.4.2");
    edge.ok(&["deliver", "1.5.0"]);
    edge.ok(&["deliver", "1.6.0"]);
    edge.wait_for_body(HOST, "1.6.0\n");
    assert_eq!(
        role_of(&edge, "1.4.2"),
        ("retired".into(), false),
        "1.4.2 stopped"
    );
    assert_eq!(
        role_of(&edge, "1.5.0"),
        ("previous".into(), true),
        "1.5.0 kept"
    );

    let out = edge.ok(&["rollback"]);
    assert!(out.contains("delivered"), "{out}");
    edge.wait_for_body(HOST, "1.5.0\n");
    assert_eq!(
        role_of(&edge, "1.6.0"),
        ("previous".into(), true),
        "1.6.0 kept"
    );
    assert_eq!(role_of(&edge, "1.5.0"), ("current".into(), true));
}

#[test]
fn a_generation_that_never_becomes_ready_changes_nothing() {
    let edge = app_edge("1.4.2");
    let before = edge.live_files();
    let out = edge.expect_code(8, &["deliver", "2.0.0-never"]);
    assert!(
        out.contains("not-ready") && out.contains("nothing changed"),
        "{out}"
    );
    assert_eq!(edge.live_files(), before);
    assert_eq!(edge.get(HOST, "/").body, "1.4.2\n");
    assert_eq!(role_of(&edge, "1.4.2"), ("current".into(), true));
    // The started process was stopped; it was never recorded as a generation.
    assert!(generations(&edge)
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["version"] != "2.0.0-never"));
    let pidfile = edge.path("generations/shop/2.0.0-never.pid");
    assert!(
        !pidfile.exists(),
        "pidfile of the abandoned generation removed"
    );
    let ps = std::process::Command::new("pgrep")
        .args(["-f", "--version 2.0.0-never"])
        .output()
        .unwrap();
    assert!(
        ps.stdout.is_empty(),
        "process still running: {}",
        String::from_utf8_lossy(&ps.stdout)
    );
}

#[test]
fn a_delivery_whose_config_is_rejected_is_restored_and_stops_nothing_that_ran() {
    let edge = app_edge("1.4.2");
    edge.ok(&["deliver", "1.5.0"]);
    let templates = edge.path("templates");
    std::fs::create_dir_all(&templates).unwrap();
    let gen = include_str!("../../templates/generation.cfg.j2")
        .replace("    http-check expect status 200", "    http-check expect status 200\n{%- if app.version == \"6.6.6\" %}\n    no-such-directive here\n{%- endif %}");
    std::fs::write(templates.join("generation.cfg.j2"), gen).unwrap();
    edge.write_settings(&edge.settings_text().replace(
        "# templates_dir = \"templates\"",
        "templates_dir = \"templates\"",
    ));
    let before = edge.live_files();

    let out = edge.expect_code(3, &["deliver", "6.6.6"]);
    assert!(
        out.contains("rejected") && out.contains("no-such-directive"),
        "{out}"
    );
    assert_eq!(edge.live_files(), before, "restored");
    assert_eq!(edge.get(HOST, "/").body, "1.5.0\n");
    assert_eq!(role_of(&edge, "1.4.2"), ("previous".into(), true));
    assert_eq!(role_of(&edge, "1.5.0"), ("current".into(), true));
    assert!(
        !edge.path("generations/shop/6.6.6.pid").exists(),
        "what the delivery started is stopped"
    );
}

#[test]
fn boot_after_a_reboot_starts_what_the_config_designates_and_the_cycle_works_again() {
    let edge = app_edge("1.4.2");
    edge.ok(&["deliver", "1.5.0"]);
    // "Reboot": the master and every generation die.
    let master = edge.master_pid();
    unsafe { libc::kill(master, libc::SIGKILL) };
    for g in generations(&edge).as_array().unwrap() {
        if let Some(pid) = g["pid"].as_i64() {
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", edge.port)).is_err(),
        "edge down"
    );

    let out = edge.ok(&["boot"]);
    assert!(out.contains("haproxy"), "{out}");
    edge.wait_for_body(HOST, "1.5.0\n");
    assert_eq!(role_of(&edge, "1.5.0"), ("current".into(), true));
    assert_eq!(
        role_of(&edge, "1.4.2"),
        ("previous".into(), false),
        "boot starts nothing else"
    );
    edge.ok(&["boot"]); // idempotent

    edge.ok(&["deliver", "1.6.0"]);
    edge.wait_for_body(HOST, "1.6.0\n");
    edge.ok(&["rollback"]);
    edge.wait_for_body(HOST, "1.5.0\n");
}

#[test]
fn refused_requests_change_nothing() {
    let edge = app_edge("1.4.2");
    let before = edge.live_files();
    let out = edge.expect_code(7, &["rollback"]);
    assert!(out.contains("no previous generation"), "{out}");
    let out = edge.ok(&["deliver", "1.4.2"]);
    assert!(out.contains("already live"), "{out}");
    let out = edge.expect_code(7, &["deliver", "1.5.0", "--app", "nope"]);
    assert!(out.contains("unknown app nope"), "{out}");
    for bad in ["1.5.0;rm", "../1", "1 2", "", "-1"] {
        let out = edge.expect_code(2, &["deliver", "--", bad]);
        assert!(out.contains("version"), "{bad:?}: {out}");
    }
    assert_eq!(edge.live_files(), before);
    assert_eq!(generations(&edge).as_array().unwrap().len(), 1);
}

#[test]
fn two_deliveries_at_once_never_interleave() {
    let edge = app_edge("1.4.2");
    let children: Vec<_> = ["1.5.0", "1.6.0"]
        .iter()
        .map(|v| {
            edge.command(&["deliver", v])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let all = generations(&edge);
    let current = all
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["role"] == "current")
        .unwrap();
    let previous = all
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["role"] == "previous")
        .unwrap();
    let (cur, prev) = (
        current["version"].as_str().unwrap(),
        previous["version"].as_str().unwrap(),
    );
    assert!(
        matches!((cur, prev), ("1.5.0", "1.6.0") | ("1.6.0", "1.5.0")),
        "{all}"
    );
    edge.wait_for_body(HOST, &format!("{cur}\n"));
    let cfg = std::fs::read_to_string(edge.path("live/generation.cfg")).unwrap();
    assert!(cfg.contains(&format!("generation {cur}")), "{cfg}");
    assert_eq!(role_of(&edge, "1.4.2").0, "retired");
}
