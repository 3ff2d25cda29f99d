//! `hapctl serve` keeps HAProxy running (direct mode), against the real haproxy and a real
//! daemon process: a master killed with SIGKILL is started again from the known-good set with
//! its blocks and certificates, a master that cannot start is retried with a growing pause and
//! never doubled, an interrupted apply is recovered before the restart, `hapctl haproxy stop`
//! is respected, and in systemd mode the daemon only notices, reconciles and counts.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use hapctl::fsutil::LockFile;
use hapctl::tls::probe;
use hapctl::tls::x509::{serial_matches, CertInfo};
use serde_json::Value;

use testkit::daemon::{ApiClient, Daemon};
use testkit::pki::TestCa;
use testkit::{http, run_bounded, Backend, Edge};

const SHOP: &str = "shop.example.com";
const OTHER: &str = "other.example.com";
const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// The functional deadline for a restart (the target, under a second, is measured, not
/// asserted).
const RESTART_DEADLINE: Duration = Duration::from_secs(10);

/// An edge routing `SHOP` to a backend answering "ok", and its daemon, which started HAProxy
/// itself (so the master is its child).
fn supervised_edge() -> (Edge, Backend, Daemon) {
    let edge = Edge::new();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let api = Daemon::start(&edge);
    (edge, app, api)
}

/// Every live HAProxy master of this edge, found in /proc by its master socket on the command
/// line (a master is such a process whose parent is not one).
fn masters(edge: &Edge) -> Vec<i32> {
    let socket = edge.path("run/master.sock").display().to_string();
    let mut procs = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        // A zombie has no command line; `Z` is checked anyway.
        if cmdline.contains(&socket) && fields.first() != Some(&"Z") {
            procs.push((pid, fields.get(1).and_then(|p| p.parse::<i32>().ok())));
        }
    }
    let pids: BTreeSet<i32> = procs.iter().map(|(pid, _)| *pid).collect();
    procs
        .into_iter()
        .filter(|(_, ppid)| !ppid.is_some_and(|p| pids.contains(&p)))
        .map(|(pid, _)| pid)
        .collect()
}

/// Exactly one master, `pid`, once the killed master's workers are gone: they exit within
/// milliseconds of it, and look like masters meanwhile (their parent is gone). Two masters
/// would both stay.
fn assert_one_master(edge: &Edge, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = masters(edge);
        if found == [pid] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "masters {found:?}, expected only {pid}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// One request that may fail: `Some((status, body))` when the edge answered.
fn try_get(port: u16, host: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    let raw = http::raw_request("GET", "/", host, &[], None);
    let answer = http::exchange(stream, &raw, Duration::from_secs(2)).ok()?;
    Some((answer.status, answer.text()))
}

/// The master PID on the master socket, if it answers.
fn answering_master(edge: &Edge) -> Option<i32> {
    edge.master().show_proc().ok().map(|p| p.master.pid)
}

/// Waits until a master other than `old` answers and the edge serves `SHOP` again; returns
/// how long that took.
fn wait_served_by_new_master(edge: &Edge, old: i32, deadline: Duration, api: &Daemon) -> Duration {
    let started = Instant::now();
    loop {
        let new = answering_master(edge).filter(|pid| *pid != old);
        if new.is_some() && try_get(edge.port, SHOP) == Some((200, "ok".into())) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < deadline,
            "no new master served within {deadline:?}; masters {:?}\n{}",
            masters(edge),
            api.log_text()
        );
        thread::sleep(Duration::from_millis(2));
    }
}

fn kill(pid: i32) {
    assert_eq!(
        unsafe { libc::kill(pid, libc::SIGKILL) },
        0,
        "kill -9 {pid}"
    );
}

/// The apply history, newest first.
fn history(api: &ApiClient) -> Vec<Value> {
    let r = api.get("/v1/applies");
    assert_eq!(r.status, 200, "{r:?}");
    r.json.as_array().expect("a list").clone()
}

/// Polls the history until `pred` holds for the rows whose trigger starts with `prefix`
/// (oldest first).
fn wait_rows(api: &Daemon, prefix: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let mut rows: Vec<Value> = history(api)
            .into_iter()
            .filter(|r| r["trigger"].as_str().unwrap_or("").starts_with(prefix))
            .collect();
        rows.reverse();
        if pred(&rows) {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "history rows {prefix:?}: {rows:#?}\n{}",
            api.log_text()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The value of an unlabelled metric.
fn metric(api: &ApiClient, name: &str) -> u64 {
    let r = api.get("/metrics");
    assert_eq!(r.status, 200, "{r:?}");
    r.text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {}", r.text))
}

fn supervision(edge: &Edge) -> Value {
    let status: Value = serde_json::from_str(&edge.ok(&["haproxy", "status", "--json"])).unwrap();
    status["supervision"].clone()
}

fn served_serial(edge: &Edge, sni: &str) -> String {
    let served = probe::handshake(edge.https_addr(), sni, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("handshake with SNI {sni}: {e}"));
    CertInfo::from_der(served.chain.first().expect("a certificate"))
        .expect("the served leaf parses")
        .serial
}

#[test]
fn a_killed_master_is_started_again_with_its_blocks_and_certificates() {
    let (edge, _app, api) = supervised_edge();
    edge.ok(&[
        "block",
        "add",
        &B.to_string(),
        "--reason",
        "before the kill",
    ]);
    let ca = TestCa::new("supervision");
    let leaf = ca.leaf(&[SHOP]);
    let bundle = edge.path("shop.bundle");
    std::fs::write(&bundle, ca.bundle(&leaf)).unwrap();
    edge.ok(&["cert", "import", SHOP, "--pem", bundle.to_str().unwrap()]);
    assert_eq!(edge.get_from(B, SHOP, "/").status, 403);
    assert!(serial_matches(&served_serial(&edge, SHOP), &leaf.serial));
    let old = edge.master_pid();
    assert_eq!(masters(&edge), [old]);
    let before = supervision(&edge);
    assert_eq!(before["supervised"], true, "{before}");
    assert_eq!(before["daemon"]["restarts"], 0, "{before}");

    kill(old);
    let took = wait_served_by_new_master(&edge, old, RESTART_DEADLINE, &api);
    eprintln!(
        "supervision: kill -9 of the master -> served by a new master after {:.0} ms",
        took.as_secs_f64() * 1000.0
    );

    let new = edge.master_pid();
    assert_ne!(new, old);
    assert_one_master(&edge, new);
    let rows = wait_rows(&api, "haproxy restarted", |rows| !rows.is_empty());
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        rows[0]["trigger"],
        format!("haproxy restarted: master PID {old} exited (signal 9)")
    );
    assert_eq!(rows[0]["outcome"], "restarted");
    let message = rows[0]["message"].as_str().unwrap();
    eprintln!("supervision: the restart's own account: {message}");
    assert!(
        message.contains(&format!("started master PID {new} from the known-good set"))
            && message.contains("blocks and certificates reconciled"),
        "{message}"
    );
    assert_eq!(metric(&api, "hapctl_haproxy_restarts_total"), 1);
    assert_eq!(metric(&api, "hapctl_haproxy_restart_failures_total"), 0);

    // The block and the certificate added before the kill hold after it.
    assert_eq!(edge.get_from(B, SHOP, "/").status, 403);
    assert_eq!(edge.get(SHOP, "/").body, "ok");
    assert!(serial_matches(&served_serial(&edge, SHOP), &leaf.serial));
    assert_eq!(
        api.get("/v1/health").status,
        200,
        "{}",
        api.get("/v1/health").text
    );
    assert_eq!(api.get("/health").json["haproxy_status"], "running");

    let after = supervision(&edge);
    assert_eq!(after["daemon"]["restarts"], 1, "{after}");
    assert_eq!(after["daemon"]["mode"], "direct", "{after}");
    let text = edge.ok(&["haproxy", "status"]);
    assert!(
        text.contains("supervised (restarted by hapctl serve") && text.contains("1 restart(s)"),
        "{text}"
    );
    assert!(
        api.log_text().contains(&format!(
            "haproxy restarted: master PID {old} exited (signal 9); new master PID {new}"
        )),
        "{}",
        api.log_text()
    );
}

#[test]
fn a_master_that_cannot_start_is_retried_with_backoff_never_doubled_and_recovers() {
    let (edge, _app, api) = supervised_edge();
    let old = edge.master_pid();
    // Holding the apply lock keeps the restart waiting until the port is taken.
    let lock = LockFile::acquire(&edge.path("run/apply.lock"), Duration::from_secs(10)).unwrap();
    kill(old);
    let deadline = Instant::now() + Duration::from_secs(5);
    let busy = loop {
        match TcpListener::bind(("127.0.0.1", edge.port)) {
            Ok(l) => break l,
            Err(e) => assert!(Instant::now() < deadline, "the port stays taken: {e}"),
        }
        thread::sleep(Duration::from_millis(2));
    };
    drop(lock);

    let failed = wait_rows(&api, "haproxy restarted", |rows| {
        assert!(
            masters(&edge).len() <= 1,
            "two masters: {:?}",
            masters(&edge)
        );
        rows.len() >= 3
    });
    let base = format!("haproxy restarted: master PID {old} exited (signal 9)");
    assert_eq!(failed[0]["trigger"], base);
    assert_eq!(
        failed[1]["trigger"],
        format!("{base}; start 2 in a row, after a 1 s pause")
    );
    assert_eq!(
        failed[2]["trigger"],
        format!("{base}; start 3 in a row, after a 2 s pause")
    );
    for row in &failed[..3] {
        assert_eq!(row["outcome"], "restart-failed", "{row}");
        assert!(
            row["message"]
                .as_str()
                .unwrap()
                .contains("cannot bind socket"),
            "HAProxy's own reason: {row}"
        );
    }
    let at = |i: usize| failed[i]["started_at_ms"].as_i64().unwrap();
    let gaps = [at(1) - at(0), at(2) - at(1)];
    eprintln!("supervision: pauses between failed starts {gaps:?} ms");
    // The pauses are lower bounds by construction (a sleep is never shorter).
    assert!(gaps[0] >= 1000 && gaps[1] >= 2000, "{gaps:?}");
    assert!(masters(&edge).is_empty(), "{:?}", masters(&edge));
    assert!(metric(&api, "hapctl_haproxy_restart_failures_total") >= 3);
    assert_eq!(metric(&api, "hapctl_haproxy_restarts_total"), 0);
    assert_eq!(api.get("/v1/health").status, 503);

    drop(busy);
    let took = wait_served_by_new_master(&edge, old, Duration::from_secs(40), &api);
    eprintln!(
        "supervision: port freed -> served again after {:.0} ms (the pending pause)",
        took.as_secs_f64() * 1000.0
    );
    let rows = wait_rows(&api, "haproxy restarted", |rows| {
        rows.last().is_some_and(|r| r["outcome"] == "restarted")
    });
    assert!(rows.len() >= 4, "{rows:#?}");
    assert_one_master(&edge, edge.master_pid());
    assert_eq!(metric(&api, "hapctl_haproxy_restarts_total"), 1);
    assert!(api.log_text().contains("FAILED"), "{}", api.log_text());
    assert!(
        api.log_text().contains("next attempt in 1 s"),
        "{}",
        api.log_text()
    );
}

#[test]
fn an_interrupted_apply_is_recovered_before_the_restart() {
    let (edge, _app, api) = supervised_edge();
    let other = Backend::start("other");
    // Killed after writing the new files, before any check or reload (the first websocket
    // domain: only a reload loads it).
    let mut cmd = edge.command(&[
        "domain",
        "add",
        OTHER,
        "--server",
        &other.addr(),
        "--profile",
        "websocket",
    ]);
    cmd.env("HAPCTL_FAULT", "after-write");
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(!out.status.success(), "the apply was killed");
    assert!(edge.path("run/apply.pending").exists());
    assert_eq!(api.get("/v1/health").status, 503);

    let old = edge.master_pid();
    kill(old);
    let took = wait_served_by_new_master(&edge, old, RESTART_DEADLINE, &api);
    eprintln!(
        "supervision: kill -9 of the master after an interrupted apply -> served by a new master after {:.0} ms",
        took.as_secs_f64() * 1000.0
    );

    // Started from the known-good set: the interrupted domain was never committed.
    assert_eq!(try_get(edge.port, OTHER).map(|r| r.0), Some(404));
    assert!(!edge.path("run/apply.pending").exists());
    let status: Value = serde_json::from_str(&edge.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["live_is_known_good"], true, "{status}");
    // The restart's row is written after the new master serves (it carries the reconcile).
    // The recovery's row names the restart in its trigger too: wait for the restart's own.
    wait_rows(&api, "haproxy restarted", |rows| {
        rows.iter().any(|r| r["outcome"] == "restarted")
    });
    let rows: Vec<Value> = history(&api).into_iter().take(3).collect();
    let outcomes: Vec<&str> = rows
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["restarted", "unchanged", "recovered"],
        "{rows:#?}"
    );
    assert!(
        rows[1]["trigger"]
            .as_str()
            .unwrap()
            .ends_with("recovery of an interrupted apply first"),
        "{rows:#?}"
    );
    assert_eq!(api.get("/v1/health").status, 200);
}

#[test]
fn haproxy_stop_is_respected_by_the_daemon_and_start_lifts_it() {
    let (edge, _app, mut api) = supervised_edge();
    edge.ok(&["haproxy", "stop"]);
    // Twenty looks of the loop.
    thread::sleep(Duration::from_secs(2));
    assert!(masters(&edge).is_empty(), "{:?}", masters(&edge));
    assert_eq!(try_get(edge.port, SHOP), None);
    let s = supervision(&edge);
    assert_eq!(
        (&s["supervised"], &s["stop_requested"]),
        (&Value::Bool(true), &Value::Bool(true)),
        "{s}"
    );
    let text = edge.ok(&["haproxy", "status"]);
    assert!(
        text.contains("stopped with `hapctl haproxy stop`"),
        "{text}"
    );
    assert_eq!(metric(&api, "hapctl_haproxy_restarts_total"), 0);

    // A daemon started meanwhile leaves it stopped too.
    drop(api);
    api = Daemon::start(&edge);
    thread::sleep(Duration::from_secs(1));
    assert!(masters(&edge).is_empty(), "{:?}", masters(&edge));
    assert!(
        api.log_text().contains("HAProxy stays stopped"),
        "{}",
        api.log_text()
    );

    edge.ok(&["haproxy", "start"]);
    assert_eq!(supervision(&edge)["stop_requested"], false);
    let started = edge.master_pid();
    // Supervised again: this master (started by the CLI, not the daemon's child) is restarted.
    kill(started);
    wait_served_by_new_master(&edge, started, RESTART_DEADLINE, &api);
    let rows = wait_rows(&api, "haproxy restarted", |rows| !rows.is_empty());
    assert_eq!(
        rows[0]["trigger"],
        format!("haproxy restarted: master PID {started} exited")
    );
    assert_one_master(&edge, edge.master_pid());
}

#[test]
fn in_systemd_mode_the_daemon_only_notices_reconciles_and_counts() {
    let edge = Edge::new();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    edge.ok(&["haproxy", "start"]);
    edge.set_setting_keys(
        "haproxy",
        &[
            ("mode", "systemd".into()),
            ("systemd_unit", "hapctl-test-absent.service".into()),
        ],
    );
    let api = Daemon::start(&edge);
    let old = edge.master_pid();
    kill(old);
    // The unit's Restart= would start it; hapctl does not.
    thread::sleep(Duration::from_secs(2));
    assert!(masters(&edge).is_empty(), "{:?}", masters(&edge));
    assert!(
        api.log_text().contains("waiting for its systemd unit"),
        "{}",
        api.log_text()
    );
    // A block while it is down is in the database and the file only.
    edge.ok(&["block", "add", &B.to_string()]);

    // Playing the unit's restart: the same master, started outside the daemon.
    edge.set_setting_keys("haproxy", &[("mode", "direct".into())]);
    edge.ok(&["haproxy", "start"]);
    let new = edge.master_pid();
    let rows = wait_rows(&api, "haproxy restarted by its systemd unit", |rows| {
        !rows.is_empty()
    });
    let trigger = rows[0]["trigger"].as_str().unwrap();
    assert!(
        trigger.starts_with(&format!(
            "haproxy restarted by its systemd unit: master PID {old} exited, back after"
        )) && trigger.ends_with(&format!("new master PID {new}")),
        "{trigger}"
    );
    assert_eq!(rows[0]["outcome"], "restarted");
    assert_eq!(metric(&api, "hapctl_haproxy_restarts_total"), 1);
    assert_eq!(edge.get_from(B, SHOP, "/").status, 403);
    assert_one_master(&edge, new);
}
