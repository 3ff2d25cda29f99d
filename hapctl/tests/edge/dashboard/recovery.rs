//! Recovery from the Overview: "Apply now" shows the apply's outcome; HAProxy reloaded (the
//! master's reload count rises, the reason is shown and kept in the history), stopped after
//! a confirmation (the edge refuses connections, and `hapctl serve` does not start it again),
//! started again (served; a second start is refused: never two masters).

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{shop_on_page, webdriver, SHOP};
use testkit::Edge;

/// Waits until nothing accepts a connection on the edge's HTTP port.
fn wait_refused(edge: &Edge) {
    let addr = SocketAddr::from(([127, 0, 0, 1], edge.port));
    let deadline = Instant::now() + webdriver::WAIT;
    while TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the edge still accepts connections"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The number the HAProxy card shows after "Reloads".
const SHOWN_RELOADS: &str = "const dt = [...document.querySelectorAll('.card dt')].find(e => e.textContent === 'Reloads'); return dt ? dt.nextElementSibling.textContent : null";

#[test]
fn haproxy_is_reloaded_stopped_and_started_from_the_overview() {
    let (edge, _app, api, b) = shop_on_page("overview", "Overview");

    // Apply now: nothing changed since the daemon's startup apply, and the page says so.
    b.click("#ov-apply");
    b.wait_text("#ov-outcome", "Apply: unchanged");

    // A reload: the master's count rises, the page shows the reason, the history keeps it.
    let before = edge.show_proc().master.reloads;
    b.click("#ov-reload");
    let line = b.wait_text("#ov-outcome", "Reload: master PID");
    assert!(
        line.contains("reason: requested: asked for by POST /v1/haproxy/reload"),
        "{line}"
    );
    assert_eq!(edge.show_proc().master.reloads, before + 1);
    b.wait_js(
        "the reload count in the HAProxy card",
        &format!("{SHOWN_RELOADS} === arguments[0]"),
        vec![json!((before + 1).to_string())],
    );
    b.wait_text(
        "main tbody",
        "requested: asked for by POST /v1/haproxy/reload",
    );
    b.screenshot("overview-reloaded");

    // Stop asks once more; the first click changes nothing.
    let master = edge.master_pid();
    b.click("#ov-stop");
    b.wait_text("#ov-stop", "Confirm stop");
    assert_eq!(
        edge.get(SHOP, "/").status,
        200,
        "not stopped before the confirmation"
    );
    b.click("#ov-stop");
    b.wait_text("#ov-outcome", &format!("Stop: master PID {master} stopped"));
    wait_refused(&edge);
    b.wait_text(".card", "Stopped on purpose");
    b.screenshot("overview-stopped");
    let status = api.get("/v1/status").json;
    assert_eq!(status["haproxy"]["procs"], json!(null), "{status}");
    assert_eq!(status["supervision"]["stop_requested"], true, "{status}");
    // The daemon's supervision loop left it down: no restart in the history.
    let restarts: Vec<_> = status["applies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["outcome"] == "restarted")
        .collect();
    assert!(restarts.is_empty(), "{restarts:?}");
    wait_refused(&edge);

    // Start: applied, then served again; a second start is refused (never two masters).
    b.click("#ov-start");
    let line = b.wait_text("#ov-outcome", "Start: master PID");
    assert!(line.contains("running · apply "), "{line}");
    edge.wait_for_body(SHOP, "shop");
    let started = edge.master_pid();
    assert_ne!(started, master);
    b.wait_text(".card", &format!("PID {started}"));
    b.click("#ov-start");
    b.wait_text("#ov-outcome", "Start refused: HAProxy is already running");
    assert_eq!(edge.master_pid(), started);
    assert_eq!(
        api.get("/v1/status").json["supervision"]["stop_requested"],
        false
    );
    b.screenshot("overview-started");
}
