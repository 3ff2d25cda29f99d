//! Crash consistency of the certificate path.
//!
//! A certificate change (a new certificate, a replacement as a renewal makes it, a removal) is
//! SIGKILLed at each of its crash points (`HAPCTL_FAULT=cert:…`) and at random instants; the
//! next command (`hapctl apply`) must leave: the old or the new certificate served for the
//! name (a real handshake, so never a key that does not match), the database, the PEM file and
//! the running worker agreeing on the serial, the worker's crt-list equal to the file, no
//! pending marker and no temp file — and a reload afterwards must serve the same thing.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use hapctl::haproxy::{CliSocket, RuntimeCerts};
use hapctl::tls::probe;
use hapctl::tls::x509::{serial_matches, CertInfo};

use testkit::pki::TestCa;
use testkit::{describe, run_bounded, Edge};

const NAME: &str = "shop.test";

#[derive(Debug, Clone, Copy)]
enum Change {
    /// `cert import` of a name only the default certificate answered.
    New,
    /// `cert import` of a new serial for a served name (what a renewal does).
    Replace,
    /// `cert rm`.
    Remove,
}

const IMPORT_POINTS: [&str; 4] = [
    "cert:after-pem",
    "cert:after-crt-list",
    "cert:after-runtime",
    "cert:before-db",
];

fn served_serial(edge: &Edge, sni: &str) -> String {
    let served = probe::handshake(edge.https_addr(), sni, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("handshake with SNI {sni}: {e}"));
    CertInfo::from_der(&served.chain[0]).unwrap().serial
}

fn db_serial(edge: &Edge, name: &str) -> Option<String> {
    let ls: serde_json::Value = serde_json::from_str(&edge.ok(&["cert", "ls", "--json"])).unwrap();
    ls["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .map(|c| c["serial"].as_str().unwrap().to_string())
}

fn runtime(edge: &Edge) -> RuntimeCerts {
    RuntimeCerts::new(CliSocket::new(
        edge.path("run/admin.sock"),
        Duration::from_secs(5),
    ))
}

fn file_serial(edge: &Edge, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(edge.path(&format!("live/certs/{name}.pem"))).ok()?;
    Some(hapctl::tls::installed_info(&text).unwrap().0.serial)
}

/// Everything that must hold after the recovery; `old`/`new` are the serials before and after
/// the change (`None`: the default certificate).
fn check_consistent(edge: &Edge, old: Option<&str>, new: Option<&str>, what: &str) {
    let default = db_serial(edge, "default").expect("the default certificate has a row");
    let served = served_serial(edge, NAME);
    let expected: Vec<&str> = [old, new].iter().map(|s| s.unwrap_or(&default)).collect();
    assert!(
        expected.iter().any(|e| serial_matches(e, &served)),
        "{what}: {NAME} is served with {served}, neither the old nor the new certificate {expected:?}"
    );
    let db = db_serial(edge, NAME);
    match &db {
        Some(db) => {
            assert!(
                serial_matches(db, &served),
                "{what}: database says {db}, served {served}"
            );
            let file = file_serial(edge, NAME).expect("a row has its file");
            assert!(
                serial_matches(&file, db),
                "{what}: file {file}, database {db}"
            );
        }
        None => {
            assert!(
                serial_matches(&default, &served),
                "{what}: no row but {served} served"
            );
            assert!(
                file_serial(edge, NAME).is_none(),
                "{what}: a file without a row is left"
            );
        }
    }
    let rt = runtime(edge);
    let list = edge.path("live/certs/crt-list").display().to_string();
    let file_lines: Vec<(String, Vec<String>)> = std::fs::read_to_string(&list)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let mut w = l.split_whitespace().map(String::from);
            (w.next().unwrap(), w.collect())
        })
        .collect();
    assert_eq!(
        rt.lines(&list).unwrap(),
        file_lines,
        "{what}: worker crt-list differs from the file"
    );
    for (file, _) in &file_lines {
        let loaded = rt.show(file).unwrap().expect("listed means loaded");
        let text = std::fs::read_to_string(file).unwrap();
        let on_disk = hapctl::tls::installed_info(&text).unwrap().0.serial;
        assert!(
            serial_matches(&loaded.serial, &on_disk),
            "{what}: {file} worker {} file {on_disk}",
            loaded.serial
        );
    }
    assert!(
        !edge.path("run/certs.pending").exists(),
        "{what}: marker left"
    );
    assert!(
        edge.temp_files().is_empty(),
        "{what}: temp files left: {:?}",
        edge.temp_files()
    );
}

/// Runs the change, killed at `point` (or after `delay`); returns whether it was killed.
fn killed_change(edge: &Edge, change: Change, bundle: &str, fault: Fault) -> bool {
    let args: Vec<&str> = match change {
        Change::New | Change::Replace => vec!["cert", "import", NAME, "--pem", bundle],
        Change::Remove => vec!["cert", "rm", NAME],
    };
    let mut cmd = edge.command(&args);
    match fault {
        Fault::Point(point) => {
            cmd.env("HAPCTL_FAULT", point);
            let out = run_bounded(cmd, Duration::from_secs(60));
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGKILL),
                "HAPCTL_FAULT={point} on {change:?} was not reached: {}",
                describe(&out)
            );
            true
        }
        Fault::After(delay) => {
            let mut child = cmd.spawn().unwrap();
            std::thread::sleep(delay);
            let done = child.try_wait().unwrap().is_some();
            let _ = child.kill();
            let _ = child.wait();
            !done
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Point(&'static str),
    After(Duration),
}

/// One change killed and recovered; returns whether the kill landed before the change ended.
fn round(change: Change, fault: Fault) -> bool {
    let edge = Edge::started();
    let ca = TestCa::new("crash");
    let write = |label: &str| {
        let path = edge.path(&format!("{label}.bundle"));
        let leaf = ca.leaf(&[NAME]);
        std::fs::write(&path, ca.bundle(&leaf)).unwrap();
        (path.display().to_string(), leaf.serial)
    };
    let (first, first_serial) = write("first");
    let old = match change {
        Change::New => None,
        Change::Replace | Change::Remove => {
            edge.ok(&["cert", "import", NAME, "--pem", &first]);
            Some(first_serial)
        }
    };
    let (second, second_serial) = write("second");
    let new = match change {
        Change::Remove => None,
        Change::New | Change::Replace => Some(second_serial),
    };
    let reloads_before = edge.show_proc().master.reloads;
    let what = format!("{change:?} killed at {fault:?}");
    let killed = killed_change(&edge, change, &second, fault);
    edge.ok(&["apply"]);
    check_consistent(&edge, old.as_deref(), new.as_deref(), &what);
    // What the files say is what a reload serves.
    let served = served_serial(&edge, NAME);
    edge.ok(&["haproxy", "reload"]);
    assert!(edge.show_proc().master.reloads > reloads_before);
    assert_eq!(
        served_serial(&edge, NAME),
        served,
        "{what}: a reload serves something else"
    );
    check_consistent(
        &edge,
        old.as_deref(),
        new.as_deref(),
        &format!("{what}, after a reload"),
    );
    killed
}

/// Runs the rounds three at a time (each has its own HAProxy; the machine has two cores).
/// Returns how many kills landed before their change ended.
fn run_rounds(rounds: Vec<(Change, Fault)>) -> usize {
    let mut killed = 0;
    for chunk in rounds.chunks(3) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&(change, fault)| s.spawn(move || round(change, fault)))
                .collect();
            for h in handles {
                killed += usize::from(h.join().expect("a round failed"));
            }
        });
    }
    killed
}

#[test]
fn every_certificate_crash_point_leaves_the_old_or_the_new_certificate() {
    let mut rounds: Vec<(Change, Fault)> = [Change::New, Change::Replace]
        .into_iter()
        .flat_map(|c| IMPORT_POINTS.map(|p| (c, Fault::Point(p))))
        .collect();
    rounds.push((Change::Remove, Fault::Point("cert:after-db-remove")));
    assert_eq!(run_rounds(rounds), 9);
}

#[test]
fn a_kill_at_any_instant_of_a_certificate_change_recovers() {
    // Delays spread over a change's ~10-100 ms, from before the first write to after the end.
    let delays = [3u64, 8, 15, 25, 40, 60, 90, 120, 200];
    let changes = [Change::New, Change::Replace, Change::Remove];
    let killed = run_rounds(
        delays
            .iter()
            .enumerate()
            .map(|(i, ms)| (changes[i % 3], Fault::After(Duration::from_millis(*ms))))
            .collect(),
    );
    // Most delays must land inside the change, or this tests nothing.
    assert!(
        killed >= 4,
        "only {killed} of {} kills landed inside the change",
        delays.len()
    );
}
