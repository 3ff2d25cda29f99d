//! Workers off root: with `[haproxy] user = "haproxy"` and the master started as root (these
//! tests run as root), the master stays root and every worker — the first and the one a reload
//! makes — runs as `haproxy`, while everything the edge does at runtime still works: serving,
//! reloads (the master re-reads the 0600 certificates as root), certificate imports through
//! the admin socket, blocks and maps at runtime, and the access log the unprivileged worker
//! sends to `hapctl serve`, which admits its user (and no other, `hapctl::logs`).

use std::net::Ipv4Addr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hapctl::tls::probe;
use hapctl::tls::x509::CertInfo;

use testkit::daemon::Daemon;
use testkit::pki::TestCa;
use testkit::{describe, Backend, Edge};

const SHOP: &str = "shop.example.com";
const SECURE: &str = "secure.test";
const BLOCKED_CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// `(uid, gid)` from `/proc/PID/status` (real ids; the test asserts all four are equal).
fn ids(pid: i32) -> (u32, u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u32 {
        let values: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(
            values.iter().all(|v| *v == values[0]),
            "pid {pid}: real, effective, saved and fs {name} differ: {values:?}"
        );
        values[0]
    };
    (field("Uid:"), field("Gid:"))
}

/// `(uid, gid)` of a host account, from `id`.
fn account(name: &str) -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = std::process::Command::new("id")
            .args([flag, name])
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (id("-u"), id("-g"))
}

/// The workers serving now are `expected`; the master is root.
fn assert_workers_run_as(edge: &Edge, expected: (u32, u32)) -> Vec<i32> {
    let procs = edge.show_proc();
    assert_eq!(ids(procs.master.pid), (0, 0), "the master stays root");
    assert!(!procs.workers.is_empty());
    for w in &procs.workers {
        assert_eq!(ids(w.pid), expected, "worker {}", w.pid);
    }
    procs.workers.iter().map(|w| w.pid).collect()
}

fn served_serial(edge: &Edge, sni: &str) -> String {
    let served = probe::handshake(edge.https_addr(), sni, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("handshake with SNI {sni}: {e}"));
    CertInfo::from_der(&served.chain[0]).unwrap().serial
}

fn wait_for_log_line(edge: &Edge, needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(edge.path("logs/access.log")).unwrap_or_default();
        if text.lines().any(|l| l.contains(needle)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            walk(&path, out);
        }
        out.push(path);
    }
}

/// No file under the state dir is world-writable; every file holding a private key (and the
/// API token) is root's alone.
fn assert_file_modes(edge: &Edge) {
    let mut files = Vec::new();
    walk(edge.state_dir(), &mut files);
    let mut keys = 0;
    for path in files {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        assert_eq!(
            mode & 0o002,
            0,
            "{} is world-writable ({mode:o})",
            path.display()
        );
        if meta.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            let secret = bytes.windows(11).any(|w| w == b"PRIVATE KEY")
                || path.file_name().is_some_and(|n| n == "api-token");
            if secret {
                keys += 1;
                assert_eq!(meta.uid(), 0, "{} is not root's", path.display());
                assert_eq!(
                    mode & 0o077,
                    0,
                    "{} is readable by others ({mode:o})",
                    path.display()
                );
            }
        }
    }
    assert!(
        keys >= 2,
        "the default certificate key and the token were checked"
    );
}

#[test]
fn workers_drop_to_the_configured_user_and_the_edge_keeps_working() {
    let haproxy = account("haproxy");
    let edge = Edge::new();
    // The workers reach nothing in the state dir: it stays closed to them.
    std::fs::set_permissions(edge.state_dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    edge.set_setting_keys("haproxy", &[("user", "haproxy".to_string())]);
    edge.ok(&["haproxy", "start"]);
    let live = std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap();
    assert!(live.contains("\n    user haproxy\n"), "{live}");
    assert!(live.contains("\n    group haproxy\n"), "{live}");
    let first = assert_workers_run_as(&edge, haproxy);

    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    assert_eq!(edge.get(SHOP, "/").status, 200);

    // The access log: `hapctl serve` admits the unprivileged worker's connection.
    let _daemon = Daemon::start(&edge);
    let r = edge.get(SHOP, "/logged-before-reload");
    assert_eq!(r.status, 200);
    assert!(
        wait_for_log_line(&edge, "/logged-before-reload"),
        "no access-log line from the unprivileged worker"
    );

    // A reload: the master (root) re-reads everything; the new worker drops too.
    edge.ok(&["haproxy", "reload"]);
    let second = assert_workers_run_as(&edge, haproxy);
    assert!(second.iter().all(|p| !first.contains(p)), "a new worker");
    assert_eq!(edge.get(SHOP, "/").status, 200);
    edge.get(SHOP, "/logged-after-reload");
    assert!(wait_for_log_line(&edge, "/logged-after-reload"));

    // A runtime certificate import (through the admin socket, no file read by the worker),
    // then a reload that loads the 0600 PEM as root.
    let ca = TestCa::new("privileges");
    let leaf = ca.leaf(&[SECURE]);
    let bundle = edge.path("secure.bundle");
    std::fs::write(&bundle, ca.bundle(&leaf)).unwrap();
    let reloads = edge.show_proc().master.reloads;
    edge.ok(&[
        "cert",
        "import",
        SECURE,
        "--pem",
        &bundle.display().to_string(),
    ]);
    std::fs::remove_file(&bundle).unwrap();
    assert_eq!(served_serial(&edge, SECURE), leaf.serial);
    assert_eq!(
        edge.show_proc().master.reloads,
        reloads,
        "imported at runtime"
    );
    edge.ok(&["haproxy", "reload"]);
    assert_workers_run_as(&edge, haproxy);
    assert_eq!(
        served_serial(&edge, SECURE),
        leaf.serial,
        "a reload loads the PEM"
    );

    // Blocks and maps still change at runtime.
    let reloads = edge.show_proc().master.reloads;
    edge.ok(&["block", "add", &BLOCKED_CLIENT.to_string()]);
    assert_eq!(edge.get_from(BLOCKED_CLIENT, SHOP, "/").status, 403);
    edge.ok(&["block", "rm", &BLOCKED_CLIENT.to_string()]);
    assert_eq!(edge.get_from(BLOCKED_CLIENT, SHOP, "/").status, 200);
    edge.ok(&["domain", "suspend", SHOP]);
    assert_eq!(edge.get(SHOP, "/").status, 503);
    edge.ok(&["domain", "resume", SHOP]);
    assert_eq!(edge.get(SHOP, "/").status, 200);
    assert_eq!(
        edge.show_proc().master.reloads,
        reloads,
        "no reload for blocks and maps"
    );
    assert_workers_run_as(&edge, haproxy);

    assert_file_modes(&edge);
}

#[test]
fn an_empty_user_keeps_the_workers_root_and_an_unknown_one_is_refused() {
    let edge = Edge::started();
    let live = std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap();
    assert!(!live.contains("\n    user "), "{live}");
    assert_workers_run_as(&edge, (0, 0));

    edge.set_setting_keys("haproxy", &[("user", "no-such-user-hapctl".to_string())]);
    let out = edge.run(&["haproxy", "status"]);
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("haproxy.user"), "{stderr}");
    assert!(stderr.contains("no-such-user-hapctl"), "{stderr}");
}

#[test]
fn chrooted_workers_serve_and_log_to_the_file_and_to_syslog() {
    let haproxy = account("haproxy");
    let edge = Edge::new();
    let syslog = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    syslog
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let jail = edge.path("jail");
    std::fs::create_dir(&jail).unwrap();
    std::fs::set_permissions(&jail, std::fs::Permissions::from_mode(0o755)).unwrap();

    // chroot with journald is refused, naming the key: /dev/log is not in the jail.
    edge.set_setting_keys(
        "haproxy",
        &[
            ("user", "haproxy".to_string()),
            ("chroot", jail.display().to_string()),
        ],
    );
    edge.set_setting_keys("logs", &[("target", "journald".to_string())]);
    let out = edge.run(&["haproxy", "start"]);
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("haproxy.chroot") && stderr.contains("journald"),
        "{stderr}"
    );

    // The file target: TCP needs nothing inside the jail.
    edge.set_setting_keys("logs", &[("target", "file".to_string())]);
    edge.ok(&["haproxy", "start"]);
    let live = std::fs::read_to_string(edge.path("live/haproxy.cfg")).unwrap();
    assert!(
        live.contains(&format!("\n    chroot {}\n", jail.display())),
        "{live}"
    );
    for pid in assert_workers_run_as(&edge, haproxy) {
        assert_eq!(
            std::fs::read_link(format!("/proc/{pid}/root")).unwrap(),
            jail
        );
    }

    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let daemon = Daemon::start(&edge);
    assert_eq!(edge.get(SHOP, "/jailed-file").status, 200);
    assert!(
        wait_for_log_line(&edge, "/jailed-file"),
        "no access-log line from the chrooted worker"
    );
    drop(daemon);

    let target = format!("syslog:{}", syslog.local_addr().unwrap());
    edge.set_setting_keys("logs", &[("target", target)]);
    // Renders the new log line and reloads.
    edge.ok(&["apply"]);
    assert_workers_run_as(&edge, haproxy);
    assert_eq!(edge.get(SHOP, "/jailed").status, 200);
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = syslog.recv(&mut buf).expect("a syslog datagram");
        if String::from_utf8_lossy(&buf[..n]).contains("/jailed") {
            break;
        }
        assert!(Instant::now() < deadline, "no log line for /jailed");
    }
    assert_file_modes(&edge);
}
