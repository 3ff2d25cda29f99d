//! The safe apply path against the real haproxy: routing, blocks, every failure outcome, the
//! fast path, atomic writes and concurrency.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;

use testkit::{check_runs, counting_haproxy, Backend, Edge};

const CLIENT_B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

#[test]
fn a_domain_is_routed_and_unrouted() {
    let edge = Edge::started();
    let app = Backend::start("hello from shop");
    assert_eq!(edge.get("shop.example.com", "/").status, 404);

    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    let r = edge.get("Shop.Example.com:8080", "/");
    assert_eq!((r.status, r.body.as_str()), (200, "hello from shop"));

    edge.ok(&["domain", "rm", "shop.example.com"]);
    let r = edge.get("shop.example.com", "/");
    assert_eq!(r.status, 404);
    assert!(r.body.contains("Unknown host"), "{r:?}");
}

#[test]
fn wildcards_route_every_subdomain_and_exact_names_win() {
    let edge = Edge::started();
    let wild = Backend::start("wild");
    let eu = Backend::start("eu");
    let exact = Backend::start("exact");
    edge.ok(&[
        "domain",
        "add",
        "*.example.com",
        "--server",
        &wild.addr(),
        "--profile",
        "websocket",
    ]);
    edge.ok(&["domain", "add", "*.eu.example.com", "--server", &eu.addr()]);
    edge.ok(&[
        "domain",
        "add",
        "www.example.com",
        "--server",
        &exact.addr(),
    ]);
    assert_eq!(edge.get("a.example.com", "/").body, "wild");
    assert_eq!(edge.get("a.b.example.com", "/").body, "wild");
    assert_eq!(edge.get("x.eu.example.com", "/").body, "eu");
    assert_eq!(edge.get("www.example.com", "/").body, "exact");
    assert_eq!(
        edge.get("example.com", "/").status,
        404,
        "a wildcard does not cover its apex"
    );
}

#[test]
fn a_blocked_client_gets_403_and_unblocked_200() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    edge.ok(&[
        "block",
        "add",
        "127.0.0.2",
        "--reason",
        "abuse",
        "--ttl",
        "1h",
    ]);

    let r = edge.get_from(CLIENT_B, "shop.example.com", "/");
    assert_eq!(r.status, 403);
    assert!(r.body.contains("Access denied"), "{r:?}");
    assert_eq!(
        edge.get("shop.example.com", "/").status,
        200,
        "other clients still pass"
    );
    let listed = edge.ok(&["block", "ls", "--json"]);
    assert!(
        listed.contains("\"127.0.0.2\"") && listed.contains("abuse"),
        "{listed}"
    );

    edge.ok(&["block", "rm", "127.0.0.2"]);
    assert_eq!(edge.get_from(CLIENT_B, "shop.example.com", "/").status, 200);
    edge.expect_code(7, &["block", "rm", "127.0.0.2"]);
}

#[test]
fn forwarding_headers_are_believed_only_from_trusted_proxies() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    edge.ok(&["block", "add", "203.0.113.9"]);
    // No proxy is trusted: a spoofed header neither blocks nor unblocks anyone.
    let spoofed = [("X-Forwarded-For", "203.0.113.9")];
    assert_eq!(
        edge.get_with_headers("shop.example.com", "/", &spoofed)
            .status,
        200
    );
}

#[test]
fn the_real_client_ip_comes_from_trusted_proxies_only_in_a_fixed_order() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    let get = |headers: &[(&str, &str)]| edge.get_with_headers("shop.example.com", "/", headers);
    let spoofed = [
        ("CF-Connecting-IP", "203.0.113.9"),
        ("True-Client-IP", "203.0.113.10"),
        ("X-Real-IP", "203.0.113.11"),
        ("X-Forwarded-For", "203.0.113.12"),
    ];
    // Untrusted peer: every forwarding header is removed, the client is the peer.
    let r = get(&spoofed);
    assert_eq!(r.seen_real_ip, "127.0.0.1");
    assert_eq!(r.seen("cf-connecting-ip"), "");
    assert_eq!(r.seen("true-client-ip"), "");

    edge.ok(&["proxy", "add", "127.0.0.1"]);
    // Trusted: CF-Connecting-IP first, then X-Real-IP, then the last X-Forwarded-For element.
    assert_eq!(get(&spoofed).seen_real_ip, "203.0.113.9");
    assert_eq!(get(&spoofed[1..]).seen_real_ip, "203.0.113.11");
    let chain = [("X-Forwarded-For", "198.51.100.1, 198.51.100.7")];
    assert_eq!(get(&chain).seen_real_ip, "198.51.100.7");
    // A header that is not an IP is skipped, never believed.
    let garbage = [
        ("CF-Connecting-IP", "not-an-ip"),
        ("X-Forwarded-For", "198.51.100.7"),
    ];
    assert_eq!(get(&garbage).seen_real_ip, "198.51.100.7");
    let v6 = [("CF-Connecting-IP", "2001:db8::7")];
    assert_eq!(get(&v6).seen_real_ip, "2001:db8::7");
    // The real client is who blocks apply to.
    edge.ok(&["block", "add", "203.0.113.9"]);
    assert_eq!(get(&spoofed).status, 403);
    assert_eq!(get(&chain).status, 200);
}

#[test]
fn the_cloudflare_preset_is_trusted_updated_and_removed_as_one() {
    let edge = Edge::started();
    edge.ok(&["proxy", "add", "192.0.2.0/24"]);
    edge.ok(&["proxy", "add", "--preset", "cloudflare"]);
    let ls = edge.ok(&["proxy", "ls"]);
    assert_eq!(
        ls.lines().filter(|l| l.ends_with("\tcloudflare")).count(),
        22,
        "{ls}"
    );
    assert!(ls.contains("2606:4700::/32\tcloudflare"), "{ls}");
    // A newer list replaces the old one.
    let list = edge.path("cf.txt");
    std::fs::write(&list, "# fetched today\n173.245.48.0/20\n2400:cb00::/32\n").unwrap();
    edge.ok(&[
        "proxy",
        "add",
        "--preset",
        "cloudflare",
        "--from",
        list.to_str().unwrap(),
    ]);
    let ls = edge.ok(&["proxy", "ls"]);
    assert_eq!(
        ls.lines().filter(|l| l.ends_with("\tcloudflare")).count(),
        2,
        "{ls}"
    );
    // A bad list changes nothing.
    std::fs::write(&list, "173.245.48.0/20\nnot-a-range\n").unwrap();
    let out = edge.expect_code(
        2,
        &[
            "proxy",
            "add",
            "--preset",
            "cloudflare",
            "--from",
            list.to_str().unwrap(),
        ],
    );
    assert!(out.contains("not-a-range"), "{out}");
    assert_eq!(edge.ok(&["proxy", "ls"]), ls);
    edge.ok(&["proxy", "rm", "--preset", "cloudflare"]);
    assert_eq!(edge.ok(&["proxy", "ls"]).trim(), "192.0.2.0/24");
    edge.expect_code(2, &["proxy", "add", "--preset", "akamai"]);
}

#[test]
fn a_suspended_domain_gets_503_without_a_reload_and_stays_suspended_across_reloads() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    edge.ok(&["domain", "add", "*.w.example.com", "--server", &app.addr()]);
    let reloads = edge.show_proc().master.reloads;
    let report: serde_json::Value =
        serde_json::from_str(&edge.ok(&["domain", "suspend", "shop.example.com", "--json"]))
            .unwrap();
    assert_eq!(
        (report["checks"].as_u64(), report["reloads"].as_u64()),
        (Some(0), Some(0)),
        "{report}"
    );
    let r = edge.get("shop.example.com", "/");
    assert_eq!(r.status, 503);
    assert!(r.body.contains("temporarily unavailable"), "{}", r.body);
    assert_eq!(
        edge.get("a.w.example.com", "/").status,
        200,
        "other domains unaffected"
    );
    edge.ok(&["domain", "suspend", "*.w.example.com"]);
    assert_eq!(edge.get("a.b.w.example.com", "/").status, 503);
    assert_eq!(
        edge.show_proc().master.reloads,
        reloads,
        "no reload for a suspension"
    );
    // The map file says the same as the worker: a reload keeps the suspension.
    edge.ok(&["haproxy", "reload"]);
    assert_eq!(edge.get("shop.example.com", "/").status, 503);
    edge.ok(&["domain", "resume", "shop.example.com"]);
    assert_eq!(edge.get("shop.example.com", "/").status, 200);
    assert_eq!(edge.get("a.w.example.com", "/").status, 503);
    edge.expect_code(7, &["domain", "suspend", "nobody.example.com"]);
    // Removing a domain forgets its suspension.
    edge.ok(&["domain", "rm", "*.w.example.com"]);
    edge.ok(&["domain", "add", "*.w.example.com", "--server", &app.addr()]);
    assert_eq!(edge.get("a.w.example.com", "/").status, 200);
}

#[test]
fn a_template_haproxy_rejects_changes_nothing() {
    let edge = Edge::started();
    let app = Backend::start("old");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    let before = edge.live_files();
    let master = edge.master_pid();
    let domains_before = edge.ok(&["domain", "ls", "--json"]);

    let templates = edge.path("templates");
    std::fs::create_dir_all(&templates).unwrap();
    let cfg = include_str!("../../../templates/haproxy.cfg.j2")
        .replace("defaults\n", "defaults\n    this-is-not-a-keyword 1\n");
    std::fs::write(templates.join("haproxy.cfg.j2"), cfg).unwrap();
    edge.write_settings(&edge.settings_text().replace(
        "# templates_dir = \"templates\"",
        "templates_dir = \"templates\"",
    ));

    let other = Backend::start("new");
    let out = edge.expect_code(
        3,
        &[
            "domain",
            "add",
            "new.example.com",
            "--server",
            &other.addr(),
        ],
    );
    assert!(out.contains("rejected"), "{out}");
    assert!(
        out.contains("this-is-not-a-keyword") && out.contains("haproxy.cfg:"),
        "HAProxy's own message with file:line: {out}"
    );
    assert_eq!(
        edge.live_files(),
        before,
        "live files byte-identical to before"
    );
    assert_eq!(edge.master_pid(), master);
    assert_eq!(edge.get("shop.example.com", "/").body, "old");
    assert_eq!(
        edge.ok(&["domain", "ls", "--json"]),
        domains_before,
        "database unchanged"
    );
    let status = edge.ok(&["status", "--json"]);
    assert!(status.contains("\"rejected\""), "{status}");
}

#[test]
fn an_unavailable_validator_writes_nothing() {
    let mut edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    let before = edge.live_files();
    edge.set_env("HAPCTL_HAPROXY_BIN", "/nonexistent/haproxy");
    let out = edge.expect_code(
        4,
        &["domain", "add", "new.example.com", "--server", &app.addr()],
    );
    assert!(
        out.contains("validator-unavailable") && out.contains("/nonexistent/haproxy"),
        "{out}"
    );
    assert_eq!(edge.live_files(), before);
    assert!(!edge.ok(&["domain", "ls"]).contains("new.example.com"));
    assert_eq!(edge.get("shop.example.com", "/").status, 200);
}

#[test]
fn a_config_that_validates_but_cannot_load_is_rolled_back() {
    let edge = Edge::started();
    let app = Backend::start("still here");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    let before = edge.live_files();
    let master = edge.master_pid();

    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    edge.write_settings(&edge.settings_text().replace(
        &format!("127.0.0.1:{}", edge.port),
        &format!("127.0.0.1:{busy_port}"),
    ));
    let out = edge.expect_code(5, &["apply"]);
    assert!(out.contains("reload-failed-rolled-back"), "{out}");
    assert_eq!(edge.live_files(), before, "known-good set restored");
    assert_eq!(edge.master_pid(), master, "never a restart");
    assert_eq!(edge.get("shop.example.com", "/").body, "still here");
    assert!(!edge.show_proc().workers.is_empty());
}

#[test]
fn an_unchanged_apply_runs_no_check_and_no_reload() {
    let mut edge = Edge::new();
    let (wrapper, log) = counting_haproxy(edge.state_dir());
    edge.set_env("HAPCTL_HAPROXY_BIN", wrapper.to_str().unwrap());
    edge.ok(&["haproxy", "start"]);
    let app = Backend::start("ok");

    let runs = check_runs(&log);
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    assert_eq!(
        check_runs(&log) - runs,
        1,
        "exactly one haproxy -c per changing apply"
    );

    let reloads = edge.show_proc().master.reloads;
    let runs = check_runs(&log);
    let out = edge.ok(&["apply"]);
    assert!(out.starts_with("unchanged"), "{out}");
    edge.ok(&["domain", "add", "shop.example.com", "--server", &app.addr()]);
    assert_eq!(check_runs(&log), runs, "no haproxy -c when nothing changed");
    assert_eq!(
        edge.show_proc().master.reloads,
        reloads,
        "no reload when nothing changed"
    );
}

#[test]
fn file_modes_survive_and_maps_are_never_seen_half_written() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", "d0.example.com", "--server", &app.addr()]);
    let map = edge.path("live/maps/hosts.map");
    std::fs::set_permissions(&map, std::fs::Permissions::from_mode(0o640)).unwrap();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let text = std::fs::read_to_string(&map).unwrap();
                assert!(text.ends_with('\n'), "half-written map: {text:?}");
                for line in text.lines().filter(|l| !l.starts_with('#')) {
                    let (host, backend) = line.split_once(' ').expect("key and value");
                    // Its own backend, or a slot a runtime add gave it.
                    assert!(
                        format!("d_{host}") == backend || backend.starts_with("slot_default_"),
                        "torn line {line:?}"
                    );
                }
                reads += 1;
            }
            reads
        })
    };
    for i in 1..=5 {
        edge.ok(&[
            "domain",
            "add",
            &format!("d{i}.example.com"),
            "--server",
            &app.addr(),
        ]);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(reader.join().unwrap() > 0);
    assert_eq!(
        std::fs::metadata(&map).unwrap().permissions().mode() & 0o777,
        0o640
    );
}

#[test]
fn twenty_concurrent_domain_adds_all_land() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    let children: Vec<_> = (0..20)
        .map(|i| {
            edge.command(&[
                "domain",
                "add",
                &format!("c{i}.example.com"),
                "--server",
                &app.addr(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let listed = edge.ok(&["domain", "ls"]);
    for i in 0..20 {
        assert!(
            listed.contains(&format!("c{i}.example.com")),
            "c{i} lost: {listed}"
        );
        assert_eq!(edge.get(&format!("c{i}.example.com"), "/").status, 200);
    }
    assert!(edge.live_set_is_valid());
    assert!(edge.temp_files().is_empty());
}

#[test]
fn dry_run_shows_the_diff_and_verdict_and_writes_nothing() {
    let edge = Edge::started();
    let before = edge.live_files();
    let out = edge.ok(&["apply", "--dry-run"]);
    assert!(
        out.contains("no change") && out.contains("verdict: valid"),
        "{out}"
    );
    // Change the listener in the settings: the diff names it, nothing is written.
    let port = testkit::free_port();
    edge.write_settings(&edge.settings_text().replace(
        &format!("127.0.0.1:{}", edge.port),
        &format!("127.0.0.1:{port}"),
    ));
    let out = edge.ok(&["apply", "--dry-run"]);
    assert!(
        out.contains(&format!("+    bind 127.0.0.1:{port}")),
        "{out}"
    );
    assert_eq!(edge.live_files(), before);
}
