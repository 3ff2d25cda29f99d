//! Adopting an HAProxy that was started by someone else, from other files (a stock unit's
//! `-f haproxy.cfg` alone): the first apply must succeed when hapctl's layout fits the
//! master's command line, be truthful about blocks the running worker cannot hold, and refuse
//! before writing when a reload would not load what hapctl checks. Real HAProxy, direct mode
//! (the systemd side of `hapctl haproxy adopt` runs in tests/systemd_lab.rs).

use std::process::Command;
use std::time::Duration;

use testkit::{free_port, haproxy_bin, http_get, Edge};

/// The edge's live directory with a foreign `haproxy.cfg` (one frontend answering "stock" on
/// `port`), and a master started on hapctl's master socket with only that file, as a stock
/// unit would. Returns the master's PID.
fn start_foreign_master(edge: &Edge, port: u16) -> i32 {
    let config = edge.path("live/haproxy.cfg");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::create_dir_all(edge.path("run")).unwrap();
    std::fs::write(
        &config,
        format!(
            "global\n    stats socket {} mode 600 level admin\ndefaults\n    mode http\n    timeout client 5s\n    timeout server 5s\n    timeout connect 1s\nfrontend stock\n    bind 127.0.0.1:{port}\n    http-request return status 200 content-type text/plain string stock\n",
            edge.path("run/admin.sock").display()
        ),
    )
    .unwrap();
    let status = Command::new(haproxy_bin())
        .arg("-W")
        .arg("-D")
        .arg("-S")
        .arg(format!(
            "{},level,admin",
            edge.path("run/master.sock").display()
        ))
        .arg("-f")
        .arg(&config)
        .arg("-p")
        .arg(edge.path("run/haproxy.pid"))
        .status()
        .unwrap();
    assert!(status.success());
    for _ in 0..200 {
        if edge.master().show_proc().is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    edge.master_pid()
}

/// Stops whatever master runs, also when the test failed.
struct StopOnDrop<'a>(&'a Edge);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["haproxy", "stop"]);
    }
}

#[test]
fn a_foreign_master_gets_blocks_truthfully_then_is_adopted_with_one_reload() {
    let edge = Edge::new();
    let stock_port = free_port();
    let pid = start_foreign_master(&edge, stock_port);
    let _stop = StopOnDrop(&edge);
    assert_eq!(http_get(None, stock_port, "any", "/", &[]).body, "stock");

    // The worker has no blocked map: the block is stored and written, and said not enforced.
    let out = edge.ok(&["block", "add", "127.0.0.9", "--reason", "test"]);
    assert!(out.contains("NOT enforced yet"), "{out}");
    let map = std::fs::read_to_string(edge.path("live/maps/blocked.map")).unwrap();
    assert!(map.contains("127.0.0.9"), "{map}");

    // hapctl's generation file declares nothing (no app): the master's `-f haproxy.cfg`
    // fits, so the first apply is one check and one reload of the same master.
    let out = edge.ok(&["apply", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["outcome"], "applied", "{out}");
    assert_eq!(report["reloads"], 1, "{out}");
    assert_eq!(edge.master_pid(), pid, "adopted by a reload, not a restart");
    // Now hapctl's configuration serves, and the block is enforced.
    let blocked = edge.get_from("127.0.0.9".parse().unwrap(), "nowhere.test", "/");
    assert_eq!(blocked.status, 403, "{}", blocked.body);
    assert_eq!(edge.get("nowhere.test", "/").status, 404);
    let out = edge.ok(&["block", "add", "127.0.0.10", "--reason", "test"]);
    assert!(out.contains("enforced: runtime"), "{out}");
}

#[test]
fn a_master_that_would_not_load_hapctls_generation_file_is_refused_before_any_write() {
    let edge = Edge::new();
    // An app gives the generation file a backend: the master's `-f haproxy.cfg` alone no
    // longer fits.
    let app_port = free_port();
    let settings = format!(
        "{}\n[[app]]\nname = \"shop\"\nbackend = \"applicatif\"\nserver = \"courante\"\nreadiness_path = \"/ready\"\nports = {{ \"1.0.0\" = {app_port} }}\n[app.runner]\nkind = \"exec\"\ncommand = \"true {{version}} {{port}}\"\n",
        edge.settings_text()
    );
    edge.write_settings(&settings);
    let stock_port = free_port();
    let pid = start_foreign_master(&edge, stock_port);
    let _stop = StopOnDrop(&edge);
    let before = std::fs::read(edge.path("live/haproxy.cfg")).unwrap();

    let out = edge.run(&["apply"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("master PID {pid}"))
            && stderr.contains("does not load")
            && stderr.contains("generation.cfg")
            && stderr.contains("no configuration file was written")
            && stderr.contains("hapctl haproxy stop"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(edge.path("live/haproxy.cfg")).unwrap(),
        before
    );
    assert!(!edge.path("live/generation.cfg").exists());
    assert_eq!(
        http_get(None, stock_port, "any", "/", &[]).body,
        "stock",
        "still served"
    );
    assert_eq!(edge.master_pid(), pid);

    // The documented way out in direct mode: restart with hapctl's files.
    edge.ok(&["haproxy", "stop"]);
    edge.ok(&["haproxy", "start"]);
    assert_ne!(edge.master_pid(), pid);
    edge.ok(&["apply"]);
}

#[test]
fn adopt_is_refused_in_direct_mode() {
    let edge = Edge::new();
    let out = edge.run(&["haproxy", "adopt"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("hapctl haproxy start"), "{stderr}");
}
