//! Faults: etcd down, its leader killed during writes, a restore from an older snapshot.

use std::time::Duration;

use serde_json::json;
use testkit::fleet::FleetLab;
use testkit::Backend;

use super::{not_served, put_domain, put_domain_once_etcd_is_back, serves, WITHIN};

#[test]
fn with_etcd_down_every_edge_serves_writes_answer_503_and_all_catch_up_when_it_returns() {
    let mut lab = FleetLab::start(3, 3);
    let backend = Backend::start("steady");
    put_domain(&lab, 0, "steady.example.com", &backend);
    lab.wait_all(WITHIN, serves("steady.example.com", "steady"));
    lab.etcd.stop_all();
    // Traffic goes on, reads of local state answer, writes are refused with the reason.
    for i in 0..3 {
        assert_eq!(lab.edge(i).get("steady.example.com", "/").status, 200);
        assert!(lab.daemon(i).domain_names().contains("steady.example.com"));
        let body = json!({ "servers": [{ "address": backend.addr() }] });
        let r = lab
            .daemon(i)
            .call("PUT", "/v1/domains/new.example.com", Some(&body));
        assert_eq!(r.status, 503, "{r:?}");
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("etcd is unreachable") && message.contains("nothing was changed"),
            "{r:?}"
        );
    }
    assert_eq!(lab.edge(1).get("new.example.com", "/").status, 404);
    lab.etcd.start_all();
    // Back: a write on one edge reaches every edge again.
    let next = Backend::start("after");
    put_domain_once_etcd_is_back(&lab, 2, "after.example.com", &next);
    lab.wait_all(WITHIN, serves("after.example.com", "after"));
}

/// An edge that can reach only one member, killed while the others take a put and a delete:
/// when the member returns, the edge's watch opens again from its revision and etcd replays
/// both, before any read of the whole fleet (it follows 30 s later), even one that fell due.
#[test]
fn an_edge_cut_off_from_etcd_resumes_its_watch_and_gets_every_change_made_meanwhile() {
    let mut lab = FleetLab::start_with(3, 2, |i, edge| {
        if i == 1 {
            only_the_last_endpoint(edge);
            // The shortest: a periodic read falls due while the member is down (below).
            edge.write_settings(&format!(
                "{}full_read_every = \"5s\"\n",
                edge.settings_text()
            ));
            // The follower's reads are logged at `info`.
            edge.set_env("HAPCTL_LOG", "hapctl::fleet=info,warn");
        }
    });
    let backend = Backend::start("kept");
    put_domain(&lab, 0, "gone.example.com", &backend);
    put_domain(&lab, 0, "kept.example.com", &backend);
    lab.wait_all(WITHIN, serves("gone.example.com", "kept"));
    lab.etcd.kill(2);
    let r = lab
        .daemon(0)
        .call("DELETE", "/v1/domains/gone.example.com", None);
    assert_eq!(r.status, 200, "{r:?}");
    let added = Backend::start("added");
    put_domain(&lab, 0, "added.example.com", &added);
    // Cut off, e1 serves what it had.
    assert_eq!(lab.edge(1).get("gone.example.com", "/").status, 200);
    assert_eq!(lab.edge(1).get("added.example.com", "/").status, 404);
    // Down long enough for e1's periodic read to fall due: the resumed watch still comes first.
    std::thread::sleep(Duration::from_secs(6));
    lab.etcd.restart(2);
    lab.wait_all(WITHIN, serves("added.example.com", "added"));
    lab.wait_all(WITHIN, not_served("gone.example.com"));
    lab.wait_all(WITHIN, serves("kept.example.com", "kept"));
    // Back, the watch was opened again before any read of the whole fleet.
    let log = lab.daemon(1).log_text();
    let since_the_cut = &log[log
        .rfind("the fleet's watch ended")
        .expect("the watch ended")..];
    let resumed = since_the_cut.find("the fleet's watch opened again from revision");
    let read = since_the_cut.find("keys at revision");
    assert!(
        resumed.is_some_and(|r| read.is_none_or(|f| r < f)),
        "{since_the_cut}"
    );
}

/// Keeps only the last of the `[fleet]` endpoints in `edge`'s settings.
fn only_the_last_endpoint(edge: &mut testkit::Edge) {
    let text = edge.settings_text();
    let line = text
        .lines()
        .find(|l| l.starts_with("endpoints = "))
        .expect("a [fleet] endpoints line");
    let last = line
        .trim_end_matches(']')
        .rsplit(", ")
        .next()
        .expect("an endpoint");
    let last = last.trim_start_matches("endpoints = [");
    edge.write_settings(&text.replace(line, &format!("endpoints = [{last}]")));
}

#[test]
fn the_etcd_leader_killed_during_writes_loses_no_acknowledged_write() {
    let mut lab = FleetLab::start(3, 3);
    let clients: Vec<_> = (0..3).map(|i| lab.daemon(i).client()).collect();
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..6)
        .map(|t| {
            let client = clients[t % 3].clone();
            let acked = acked.clone();
            std::thread::spawn(move || {
                for n in 0..20 {
                    let ip = format!("10.{t}.{n}.1");
                    let body = json!({ "ip": ip, "reason": "leader test" });
                    if let Ok(r) = client.try_call("POST", "/v1/blocked-ips", Some(&body)) {
                        if r.status == 200 || r.status == 201 {
                            acked.lock().unwrap().push(ip);
                        }
                    }
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 20 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let leader = lab.etcd.leader();
    lab.etcd.kill(leader);
    for w in writers {
        w.join().unwrap();
    }
    lab.etcd.restart(leader);
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 60,
        "only {} of 120 writes acknowledged",
        acked.len()
    );
    for ip in &acked {
        assert!(
            lab.etcd.get(&format!("/hapctl/state/block/{ip}")).is_some(),
            "{ip} lost in etcd"
        );
    }
    lab.wait_all(WITHIN, |i, _| {
        let keys = lab.daemon(i).blocked_keys();
        match acked.iter().find(|ip| !keys.contains(*ip)) {
            None => Ok(()),
            Some(ip) => Err(format!("{ip} not blocked")),
        }
    });
    // Every edge holds every change up to the fleet's last one (each edge records the
    // revision it read at, so the numbers themselves differ by the status keys' writes).
    lab.wait_all(WITHIN, |_, _| {
        let view = lab.status(0);
        let edges = view["edges"].as_array().cloned().unwrap_or_default();
        let current = edges.len() == 3
            && edges.iter().all(|e| {
                e["lagging"] == false && e["applied_revision"].as_i64() >= view["revision"].as_i64()
            });
        current.then_some(()).ok_or_else(|| view.to_string())
    });
}

#[test]
fn etcd_restored_from_an_older_snapshot_is_detected_and_its_state_wins() {
    let mut lab = FleetLab::start(1, 2);
    let backend = Backend::start("old");
    put_domain(&lab, 0, "before.example.com", &backend);
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("etcd.db");
    lab.etcd.snapshot(&snapshot);
    put_domain(&lab, 1, "after.example.com", &backend);
    lab.wait_all(WITHIN, serves("after.example.com", "old"));
    lab.etcd.restore(&snapshot);
    lab.wait_all(WITHIN, not_served("after.example.com"));
    lab.wait_all(WITHIN, serves("before.example.com", "old"));
    assert!(lab.daemon(0).log_text().contains("revision went back"));
}

#[test]
fn an_edge_boots_and_serves_with_etcd_down_and_catches_up_when_it_returns() {
    let mut lab = FleetLab::start(3, 2);
    let backend = Backend::start("booted");
    put_domain(&lab, 0, "booted.example.com", &backend);
    lab.wait_current(WITHIN);
    lab.etcd.stop_all();
    lab.edges[1].1.kill();
    lab.restart_daemon(1);
    // Served from its own state (a startup apply may reload first: waited for, bounded).
    lab.wait_all(WITHIN, serves("booted.example.com", "booted"));
    // Back: what was written meanwhile elsewhere reaches the edge that booted alone.
    lab.etcd.start_all();
    let later = Backend::start("later");
    put_domain_once_etcd_is_back(&lab, 0, "later.example.com", &later);
    lab.wait_all(WITHIN, serves("later.example.com", "later"));
}
