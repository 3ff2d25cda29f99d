//! The block fast path through the CLI, against the real haproxy: runtime API, no reload, no
//! `haproxy -c`, and the file kept in step so reloads keep exactly the committed blocks.

use std::net::Ipv4Addr;

use testkit::daemon::blocked_map_file_keys;
use testkit::{check_runs, counting_haproxy, Backend, Edge};

const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const C: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

fn counted_edge() -> (Edge, std::path::PathBuf, Backend) {
    let mut edge = Edge::new();
    let (wrapper, log) = counting_haproxy(edge.state_dir());
    edge.set_env("HAPCTL_HAPROXY_BIN", wrapper.to_str().unwrap());
    edge.ok(&["haproxy", "start"]);
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    (edge, log, app)
}

#[test]
fn blocks_take_effect_without_reload_or_check_and_survive_reloads() {
    let (edge, log, _app) = counted_edge();
    let reloads = edge.show_proc().master.reloads;
    let checks = check_runs(&log);

    let out = edge.ok(&["block", "add", "127.0.0.2", "--reason", "test"]);
    assert!(
        out.contains("created") && out.contains("enforced: runtime"),
        "{out}"
    );
    assert_eq!(edge.get_from(B, "shop.example.com", "/").status, 403);
    edge.ok(&["block", "add", "127.0.0.3"]);
    assert_eq!(edge.get_from(C, "shop.example.com", "/").status, 403);
    let out = edge.ok(&["block", "rm", "127.0.0.3"]);
    assert!(out.contains("removed"), "{out}");
    assert_eq!(edge.get_from(C, "shop.example.com", "/").status, 200);

    assert_eq!(edge.show_proc().master.reloads, reloads, "no reload");
    assert_eq!(check_runs(&log), checks, "no haproxy -c");
    let files = blocked_map_file_keys(&edge);
    assert!(
        files.contains("127.0.0.2") && !files.contains("127.0.0.3"),
        "{files:?}"
    );

    // A later reload (a domain change only a reload loads: the first websocket domain)
    // keeps exactly the committed blocks.
    let other = Backend::start("other");
    edge.ok(&[
        "domain",
        "add",
        "other.example.com",
        "--server",
        &other.addr(),
        "--profile",
        "websocket",
    ]);
    assert!(edge.show_proc().master.reloads > reloads);
    assert_eq!(
        edge.get_from(B, "shop.example.com", "/").status,
        403,
        "persisted"
    );
    assert_eq!(
        edge.get_from(C, "shop.example.com", "/").status,
        200,
        "nothing returns that was removed"
    );
    // One haproxy -c for that domain change: the blocks did not cost a second one.
    assert_eq!(check_runs(&log), checks + 1);
}

#[test]
fn networks_cover_their_addresses_and_unblocking_one_key_keeps_a_covering_network() {
    let (edge, _log, _app) = counted_edge();
    edge.ok(&["block", "add", "127.0.0.0/30"]);
    assert_eq!(edge.get_from(B, "shop.example.com", "/").status, 403);
    edge.ok(&["block", "add", "127.0.0.2"]);
    edge.ok(&["block", "rm", "127.0.0.2"]);
    assert_eq!(
        edge.get_from(B, "shop.example.com", "/").status,
        403,
        "still covered by the /30"
    );
    edge.ok(&["block", "rm", "127.0.0.0/30"]);
    assert_eq!(edge.get_from(B, "shop.example.com", "/").status, 200);
    edge.expect_code(7, &["block", "rm", "127.0.0.0/30"]);
}

#[test]
fn expired_blocks_are_lifted_by_the_next_block_change() {
    let (edge, _log, _app) = counted_edge();
    edge.ok(&["block", "add", "127.0.0.2", "--ttl", "1s"]);
    assert_eq!(edge.get_from(B, "shop.example.com", "/").status, 403);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(
        !edge.ok(&["block", "ls"]).contains("127.0.0.2"),
        "expired blocks are not listed"
    );
    let out = edge.ok(&["block", "add", "127.0.0.3"]);
    assert!(out.contains("expired and removed: 127.0.0.2"), "{out}");
    assert_eq!(edge.get_from(B, "shop.example.com", "/").status, 200);
}

/// A change whose commit fails (`HAPCTL_FAULT=fail:block-commit`, the error a disk gives)
/// after the files and the worker took it changes nothing: it is reported, and the files, the
/// worker's maps and what HAProxy refuses are what the database holds, for a block (delta map),
/// an unblock of a delta key and an unblock of a base key (both maps rewritten).
#[test]
fn a_change_whose_commit_fails_is_undone_in_the_files_and_the_worker() {
    use testkit::daemon::runtime_blocked_keys;

    let (edge, _log, _app) = counted_edge();
    let keys = |list: &[&str]| -> std::collections::BTreeSet<String> {
        list.iter().map(|k| k.to_string()).collect()
    };
    let failing = |args: &[&str], what: &str| {
        let mut cmd = edge.command(args);
        cmd.env("HAPCTL_FAULT", "fail:block-commit");
        let out = testkit::run_bounded(cmd, std::time::Duration::from_secs(120));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: the change is refused");
        assert!(
            stderr.contains("disk I/O error") && stderr.contains("fail:block-commit"),
            "{what}: the error names the failed commit: {stderr}"
        );
        assert!(
            !edge.path("run/blocks.pending").exists(),
            "{what}: undone at once, no marker left"
        );
    };
    let expect = |blocked: &[&str], what: &str| {
        assert_eq!(blocked_map_file_keys(&edge), keys(blocked), "{what}: files");
        assert_eq!(runtime_blocked_keys(&edge), keys(blocked), "{what}: worker");
        let listed = edge.ok(&["block", "ls"]);
        for (ip, client) in [("127.0.0.2", B), ("127.0.0.3", C)] {
            let held = blocked.contains(&ip);
            assert_eq!(
                listed.contains(ip),
                held,
                "{what}: database, {ip}: {listed}"
            );
            let status = edge.get_from(client, "shop.example.com", "/").status;
            assert_eq!(status, if held { 403 } else { 200 }, "{what}: {ip} served");
        }
    };

    failing(&["block", "add", "127.0.0.2"], "a block");
    expect(&[], "after a failed block");

    edge.ok(&["block", "add", "127.0.0.2"]);
    failing(&["block", "rm", "127.0.0.2"], "an unblock of a delta key");
    expect(&["127.0.0.2"], "after a failed unblock of a delta key");

    // Folded into the base map: its unblock rewrites both maps.
    edge.ok(&["block", "sync"]);
    failing(&["block", "rm", "127.0.0.2"], "an unblock of a base key");
    expect(&["127.0.0.2"], "after a failed unblock of a base key");

    // The edge goes on as before.
    edge.ok(&["block", "add", "127.0.0.3"]);
    expect(&["127.0.0.2", "127.0.0.3"], "after the next block");
}

#[test]
fn blocks_made_while_haproxy_is_stopped_are_loaded_at_start() {
    let edge = Edge::new();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    let out = edge.ok(&["block", "add", "127.0.0.2"]);
    assert!(out.contains("not-running"), "{out}");
    edge.ok(&["haproxy", "start"]);
    assert_eq!(edge.get_from(B, "shop.example.com", "/").status, 403);
}

/// A reload in the middle of block changes loses nothing: two clients block and unblock
/// through the daemon while HAProxy reloads all the time, by hapctl's applies (domain changes,
/// which re-sync a block that raced with them) and by bare `reload`s on the master socket that
/// hapctl never hears of, and while the daemon folds its delta map into the base map (a pause
/// leaves it idle). At the end the database, both map files and both runtime maps hold the
/// same keys, and HAProxy refuses exactly those clients.
#[test]
fn reloads_in_the_middle_of_block_changes_lose_nothing() {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    use serde_json::json;
    use testkit::daemon::{runtime_blocked_keys, Daemon};

    // The pause comes after 2 × 180 blocks (2 × 144 still blocked): enough for the daemon to
    // fold when idle.
    const PER_CLIENT: u8 = 230;
    const PAUSE_AT: u8 = 180;
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    let api = Daemon::start(&edge);
    let reloads_before = edge.show_proc().master.reloads;

    let done = Arc::new(AtomicBool::new(false));
    let reloader = {
        let (client, done, master) = (api.client(), done.clone(), edge.path("run/master.sock"));
        let body = json!({"servers": [{"address": app.addr()}]});
        std::thread::spawn(move || {
            let socket = hapctl::haproxy::CliSocket::new(master, Duration::from_secs(10));
            let mut n = 0u32;
            while !done.load(Ordering::SeqCst) {
                if n.is_multiple_of(2) {
                    socket
                        .command("reload")
                        .expect("reload on the master socket");
                } else {
                    let r =
                        client.call("PUT", &format!("/v1/domains/r{n}.example.com"), Some(&body));
                    assert_eq!(r.status, 201, "{r:?}");
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(40));
            }
            n
        })
    };
    let pause = Arc::new(Barrier::new(2));
    let delta = edge.path("live/maps/blocked-delta.map");
    let clients: Vec<_> = (0..2u8)
        .map(|t| {
            let (client, pause, delta) = (api.client(), pause.clone(), delta.clone());
            std::thread::spawn(move || {
                let mut kept = BTreeSet::new();
                let mut removed = BTreeSet::new();
                for i in 0..PER_CLIENT {
                    if i == PAUSE_AT {
                        // Both idle: the block worker folds the delta map meanwhile.
                        pause.wait();
                        std::thread::sleep(Duration::from_millis(2000));
                        let text = std::fs::read_to_string(&delta).unwrap();
                        assert!(
                            text.lines().all(|l| l.starts_with('#')),
                            "after a second idle the delta map is folded: {text}"
                        );
                    }
                    let ip = format!("127.0.{}.{}", 20 + t, u16::from(i) + 1);
                    let r = client.call("POST", "/v1/blocked-ips", Some(&json!({"ip": ip})));
                    assert_eq!(r.status, 201, "{r:?}");
                    kept.insert(ip);
                    if i % 5 == 4 {
                        // Unblock one from before the pause as well as recent ones.
                        let old = format!("127.0.{}.{}", 20 + t, u16::from(i / 2) + 1);
                        if kept.remove(&old) {
                            let r = client.call("DELETE", &format!("/v1/blocked-ips/{old}"), None);
                            assert_eq!(r.status, 200, "{r:?}");
                            removed.insert(old);
                        }
                    }
                }
                (kept, removed)
            })
        })
        .collect();
    let (mut kept, mut removed) = (BTreeSet::new(), BTreeSet::new());
    for c in clients {
        let (k, r) = c.join().unwrap();
        kept.extend(k);
        removed.extend(r);
    }
    done.store(true, Ordering::SeqCst);
    let reloads = reloader.join().unwrap();
    // Let the last reload finish before looking.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        edge.show_proc().master.reloads >= reloads_before + reloads / 2,
        "HAProxy reloaded during the changes"
    );

    let db = api.blocked_keys();
    assert_eq!(db, kept, "database");
    assert_eq!(blocked_map_file_keys(&edge), db, "map files vs database");
    assert_eq!(runtime_blocked_keys(&edge), db, "runtime maps vs database");
    for ip in &kept {
        let r = edge.get_from(ip.parse().unwrap(), "shop.example.com", "/");
        assert_eq!(r.status, 403, "{ip} is blocked");
    }
    for ip in &removed {
        let r = edge.get_from(ip.parse().unwrap(), "shop.example.com", "/");
        assert_eq!(r.status, 200, "{ip} was unblocked");
    }
    println!(
        "{} blocks kept, {} removed, {reloads} reloads asked for during the changes",
        kept.len(),
        removed.len()
    );
}
