//! Certificates once per fleet, against real etcd, real HAProxy and a real ACME CA (Pebble,
//! whose log shows every certificate it issues). Pebble validates HTTP-01 on e0's HTTP bind,
//! and the orders run on e1: e0 answers tokens it never ordered.

use std::time::{Duration, Instant};

use hapctl::tls::probe;
use hapctl::tls::x509::{serial_matches, CertInfo};
use serde_json::Value;
use testkit::fleet::{copy_fleet_key, AcmeFleet, FleetLab};
use testkit::pebble::Pebble;
use testkit::pki::TestCa;
use testkit::Edge;

use super::{settled_reloads, WITHIN};

const HANDSHAKE: Duration = Duration::from_secs(5);
/// Long enough for a dead holder's lease to expire and another edge's next look.
const TAKEOVER: Duration = Duration::from_secs(45);

/// A lab of 3 edges sharing one fleet key, each with `[acme]` pointing at a Pebble that
/// validates on e0.
fn acme_fleet() -> (FleetLab, Pebble) {
    let acme = AcmeFleet::default();
    let lab = FleetLab::start_with(1, 3, |i, edge| acme.prepare(i, edge).unwrap());
    (lab, acme.into_pebble())
}

fn served_serial(edge: &Edge, sni: &str) -> Result<String, String> {
    let served = probe::handshake(edge.https_addr(), sni, HANDSHAKE).map_err(|e| e.to_string())?;
    let leaf = served.chain.first().ok_or("no certificate sent")?;
    Ok(CertInfo::from_der(leaf).map_err(|e| e.to_string())?.serial)
}

fn serves_serial(sni: &'static str, serial: String) -> impl Fn(usize, &Edge) -> Result<(), String> {
    move |_, edge| {
        let got = served_serial(edge, sni)?;
        serial_matches(&got, &serial)
            .then_some(())
            .ok_or_else(|| format!("{sni}: serial {got} served, {serial} expected"))
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Every value under the fleet's prefix, as etcdctl prints it.
fn etcd_dump(lab: &FleetLab) -> String {
    let out = lab.etcd.etcdctl(&["get", "--prefix", &lab.prefix]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The serial `cert ls --json` gives the fleet's copy of `name` on `edge`, and the edges it
/// says serve it.
fn fleet_entry(edge: &Edge, name: &str) -> (String, Vec<String>) {
    let v = json(&edge.ok(&["cert", "ls", "--json"]));
    let entry = &v["fleet"][name];
    let serial = entry["fleet_serial"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let edges = entry["installed"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    (serial, edges)
}

#[test]
fn a_certificate_is_ordered_once_for_the_fleet_and_a_dead_holders_order_finished_by_another() {
    let (lab, pebble) = acme_fleet();
    let reloads: Vec<u32> = (0..3).map(|i| settled_reloads(lab.edge(i))).collect();

    // e1 orders; Pebble asks e0, which never ordered anything.
    let out = lab.edge(1).ok(&["cert", "request", "shop.test", "--json"]);
    let issued_at = Instant::now();
    assert!(!out.contains("PRIVATE KEY"), "{out}");
    let serial = json(&out)["serial"].as_str().unwrap().to_string();
    lab.wait_all(WITHIN, serves_serial("shop.test", serial.clone()));
    println!(
        "shop.test served by all 3 edges {} ms after e1's order returned",
        issued_at.elapsed().as_millis()
    );
    assert_eq!(pebble.issued_count(), 1, "{}", pebble.log_tail());
    for (i, before) in reloads.iter().enumerate() {
        assert_eq!(settled_reloads(lab.edge(i)), *before, "edge e{i} reloaded");
    }
    lab.wait_all(WITHIN, |_, edge| {
        let (fleet_serial, edges) = fleet_entry(edge, "shop.test");
        (serial_matches(&fleet_serial, &serial) && edges == ["e0", "e1", "e2"])
            .then_some(())
            .ok_or_else(|| format!("cert ls: {fleet_serial} on {edges:?}"))
    });
    // The key is in etcd only sealed.
    let dump = etcd_dump(&lab);
    assert!(dump.contains("/hapctl/certs/shop.test"), "{dump}");
    assert!(
        !dump.contains("PRIVATE KEY"),
        "a private key in clear in etcd"
    );
    let key_pem = std::fs::read_to_string(lab.edge(2).path("live/certs/shop.test.pem")).unwrap();
    for line in key_pem
        .lines()
        .skip_while(|l| !l.contains("PRIVATE KEY"))
        .skip(1)
        .take(3)
    {
        assert!(
            !dump.contains(line),
            "part of the private key is in etcd in clear"
        );
    }

    // The ordering edge dies after the CA issued and before etcd has the certificate:
    // another edge takes the order over when the lock's lease ends, with no second issuance.
    let mut dying = lab.edge(1).command(&["cert", "request", "later.test"]);
    dying.env("HAPCTL_FAULT", "acme:after-finalize");
    let out = testkit::run_bounded(dying, Duration::from_secs(120));
    assert!(
        !out.status.success(),
        "the fault point was not reached: {out:?}"
    );
    assert_eq!(
        pebble.issued_count_once(2, WITHIN),
        2,
        "{}",
        pebble.log_tail()
    );
    let deadline = Instant::now() + TAKEOVER;
    let later = loop {
        let (fleet_serial, _) = fleet_entry(lab.edge(0), "later.test");
        if !fleet_serial.is_empty() {
            break fleet_serial;
        }
        assert!(
            Instant::now() < deadline,
            "no edge finished the order: {}\n{}",
            etcd_dump(&lab),
            lab.daemon(0).log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    lab.wait_all(WITHIN, serves_serial("later.test", later));
    assert_eq!(
        pebble.issued_count(),
        2,
        "the order was finished with the certificate already issued: {}",
        pebble.log_tail()
    );
    // The edges that looked for unfinished orders at the same time began none of their own:
    // after their next look (every 5 s), still no order and no other issuance.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        !etcd_dump(&lab).contains("/hapctl/acme/order/"),
        "the order record is gone"
    );
    assert_eq!(pebble.issued_count(), 2, "{}", pebble.log_tail());
}

#[test]
fn an_uploaded_certificate_reaches_every_edge_and_its_removal_too() {
    let mut lab = FleetLab::start_with(1, 3, |i, edge| {
        if i == 0 {
            edge.ok(&["fleet", "key"]);
        }
    });
    let ca = TestCa::new("fleet upload");
    let leaf = ca.leaf(&["up.test"]);
    let bundle = lab.edge(2).path("up.pem");
    std::fs::write(&bundle, ca.bundle(&leaf)).unwrap();

    // Without the fleet key an edge changes nothing and says what to do.
    let pem = bundle.to_str().unwrap();
    let out = lab
        .edge(1)
        .run(&["cert", "import", "up.test", "--pem", pem]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("hapctl fleet key"),
        "{err}"
    );
    assert!(
        !etcd_dump(&lab).contains("/hapctl/certs/"),
        "nothing in the fleet"
    );
    // The default certificate stays each edge's own: no fleet key needed, nothing in etcd.
    let default = ca.leaf(&["edge-default.test"]);
    let default_pem = lab.edge(1).path("default.pem");
    std::fs::write(&default_pem, ca.bundle(&default)).unwrap();
    lab.edge(1).ok(&[
        "cert",
        "import",
        "default",
        "--pem",
        default_pem.to_str().unwrap(),
    ]);
    assert!(
        !etcd_dump(&lab).contains("/hapctl/certs/"),
        "the default stays local"
    );

    // e2 has the key: every edge with it serves the certificate, without a reload.
    copy_fleet_key(lab.edge(0), lab.edge(2)).unwrap();
    let reloads: Vec<u32> = (0..3).map(|i| settled_reloads(lab.edge(i))).collect();
    let out = lab
        .edge(2)
        .ok(&["cert", "import", "up.test", "--pem", pem, "--json"]);
    let serial = json(&out)["serial"].as_str().unwrap().to_string();
    for i in [0, 2] {
        let check = serves_serial("up.test", serial.clone());
        let deadline = Instant::now() + WITHIN;
        while let Err(why) = check(i, lab.edge(i)) {
            assert!(Instant::now() < deadline, "e{i}: {why}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // e1 cannot open the key until the operator copies the file; then it installs by itself.
    assert!(served_serial(lab.edge(1), "up.test").is_ok_and(|s| !serial_matches(&s, &serial)));
    copy_fleet_key(lab.edge(0), lab.edge(1)).unwrap();
    lab.wait_all(
        Duration::from_secs(30),
        serves_serial("up.test", serial.clone()),
    );
    for (i, before) in reloads.iter().enumerate() {
        assert_eq!(settled_reloads(lab.edge(i)), *before, "edge e{i} reloaded");
    }

    // e0 removes it (e0 made the key): every edge falls back to its default certificate.
    lab.edge(0).ok(&["cert", "rm", "up.test"]);
    lab.wait_all(WITHIN, |_, edge| {
        let got = served_serial(edge, "up.test")?;
        (!serial_matches(&got, &serial))
            .then_some(())
            .ok_or_else(|| format!("up.test still served ({got})"))
    });
    lab.wait_all(WITHIN, |_, edge| {
        let v = json(&edge.ok(&["cert", "ls", "--json"]));
        let names: Vec<&str> = v["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        (!names.contains(&"up.test"))
            .then_some(())
            .ok_or_else(|| format!("still listed: {names:?}"))
    });

    // An edge that leaves is no longer counted among those serving a certificate.
    lab.edge(2).ok(&["cert", "import", "up.test", "--pem", pem]);
    let e2 = "/hapctl/installed/up.test/e2";
    lab.wait_all(WITHIN, |_, _| {
        lab.etcd.get(e2).map(drop).ok_or_else(|| format!("no {e2}"))
    });
    lab.edges[2].1.kill();
    lab.edge(2).ok(&["fleet", "leave"]);
    assert_eq!(lab.etcd.get(e2), None, "{}", etcd_dump(&lab));
    assert!(lab.etcd.get("/hapctl/installed/up.test/e0").is_some());
}
