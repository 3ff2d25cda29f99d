//! The block fast path through the CLI, against the real haproxy: runtime API, no reload, no
//! `haproxy -c`, and the file kept in step so reloads keep exactly the committed blocks.

mod common;

use std::net::Ipv4Addr;

use common::{check_runs, counting_haproxy, Backend, Edge};

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
    let map = std::fs::read_to_string(edge.path("live/maps/blocked.map")).unwrap();
    assert!(
        map.contains("127.0.0.2 1\n") && !map.contains("127.0.0.3"),
        "{map}"
    );

    // A later reload (any domain change) keeps exactly the committed blocks.
    let other = Backend::start("other");
    edge.ok(&[
        "domain",
        "add",
        "other.example.com",
        "--server",
        &other.addr(),
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
