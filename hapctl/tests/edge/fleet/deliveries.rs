//! Deliveries edge by edge: every edge runs the demo app; `deliver V --fleet` on e0 asks each
//! edge in turn through etcd, each delivers under `hapctl prove`, and a probe spread over the
//! three edges and a stream held on each judge it from outside.

use serde_json::Value;
use testkit::fleet::{FleetLab, SpreadProbe};
use testkit::{DemoApp, GenerationsGuard, Stream};

use super::WITHIN;

const HOST: &str = "shop.test";

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The lab: each edge with the demo app (e1's versions containing `bad1` never become
/// ready), `shop.test` routed to it through the fleet, `1.0` delivered on each.
fn app_fleet() -> (FleetLab, GenerationsGuard) {
    let lab = FleetLab::start_with(1, 3, |i, edge| {
        let never = if i == 1 { "*never*|*bad1*" } else { "*never*" };
        let app = DemoApp {
            never_ready: never,
            ..DemoApp::for_tests(HOST, "1.0")
        };
        app.install(edge).unwrap();
    });
    let guard = GenerationsGuard(
        lab.edges
            .iter()
            .map(|(e, _)| e.state_dir().to_path_buf())
            .collect(),
    );
    lab.edge(0).ok(&["domain", "add", HOST, "--app", "shop"]);
    for i in 0..3 {
        lab.edge(i).ok(&["deliver", "1.0"]);
    }
    lab.wait_all(WITHIN, serving("1.0"));
    (lab, guard)
}

fn serving(version: &'static str) -> impl Fn(usize, &testkit::Edge) -> Result<(), String> {
    move |_, edge| {
        let r = edge.get(HOST, "/");
        (r.status == 200 && r.body == format!("{version}\n"))
            .then_some(())
            .ok_or_else(|| format!("{} {:?}", r.status, r.body))
    }
}

/// The generation each edge's status key says is live.
fn live(lab: &FleetLab) -> Vec<String> {
    let view = lab.status(0);
    let mut edges: Vec<(String, String)> = view["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            (
                name,
                e["generations"]["shop"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    edges.sort();
    edges.into_iter().map(|(_, v)| v).collect()
}

/// Waits until every edge's status key (rewritten every few seconds) says `version` is live.
fn wait_live(lab: &FleetLab, version: &str) {
    lab.wait_all(WITHIN, |_, _| {
        let now = live(lab);
        now.iter()
            .all(|v| v == version)
            .then_some(())
            .ok_or_else(|| format!("{now:?}"))
    });
}

#[test]
fn a_delivery_goes_edge_by_edge_proved_and_a_failure_rolls_back_the_edges_cut_over() {
    // `_generations` drops first (bindings drop in reverse), while the pidfiles still exist.
    let (lab, _generations) = app_fleet();
    let ports: Vec<u16> = lab.edges.iter().map(|(e, _)| e.port).collect();
    let probe = SpreadProbe::start(ports.clone(), HOST, 100);
    let streams: Vec<Stream> = ports
        .iter()
        .map(|p| Stream::open(*p, HOST, 800, 50))
        .collect();

    let out = lab.edge(0).run(&["deliver", "2.0", "--fleet", "--json"]);
    let summary = json(&String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{summary}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary["state"], "delivered", "{summary}");
    lab.wait_all(WITHIN, serving("2.0"));
    wait_live(&lab, "2.0");
    // Each edge proved its own cutover and kept the journal of it.
    for i in 0..3 {
        let proofs = lab.daemon(i).get("/v1/proofs").json;
        assert!(proofs.to_string().contains("PASSED"), "e{i}: {proofs}");
    }

    let out = lab.edge(2).run(&["rollback", "--fleet", "--json"]);
    let summary = json(&String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "{summary}");
    lab.wait_all(WITHIN, serving("1.0"));

    // e1 cannot make 3.0-bad1 ready: e0 (done first) goes back to 1.0, e2 is never asked.
    let out = lab
        .edge(0)
        .run(&["deliver", "3.0-bad1", "--fleet", "--json"]);
    let summary = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(9), "{summary}");
    let state = summary["state"].as_str().unwrap();
    assert!(state.starts_with("stopped at e1"), "{summary}");
    let edges = summary["edges"].to_string();
    assert!(edges.contains(r#"["e0","rolled back"]"#), "{edges}");
    assert!(edges.contains(r#"["e2","waiting"]"#), "{edges}");
    lab.wait_all(WITHIN, serving("1.0"));
    wait_live(&lab, "1.0");
    let status = lab.edge(1).ok(&["fleet", "status"]);
    assert!(status.contains("stopped at e1"), "{status}");

    let count = probe.stop();
    assert!(
        count.failed.is_empty(),
        "failed requests: {:?}",
        count.failed
    );
    assert!(count.sent > 100, "{count:?}");
    for (i, stream) in streams.into_iter().enumerate() {
        let lines = stream
            .finish()
            .unwrap_or_else(|e| panic!("e{i}'s stream: {e}"));
        assert_eq!(lines.len(), 800, "e{i}'s stream");
    }
}
