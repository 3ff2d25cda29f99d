//! Scopes in the dashboard: a read-only session shows no control it cannot use (and the
//! server refuses such calls anyway, `tests/edge/access.rs`); the Audit page shows who
//! changed what, for an admin only.

use serde_json::json;

use super::webdriver::Browser;
use super::{open, serve, url};
use testkit::Edge;

/// Which of these selectors match an element the page shows.
const SHOWN: &str = "return arguments[0].filter(css => [...document.querySelectorAll(css)].some(e => e.offsetParent !== null))";

fn sign_in_with(b: &Browser, api: &testkit::daemon::Daemon, token: &str) {
    b.goto(&url(api, ""));
    b.wait_js(
        "the sign-in form",
        "return !document.getElementById('signin').hidden",
        vec![],
    );
    b.fill("#token", &format!("{token}\u{E007}"));
    b.wait_text("main h1", "Overview");
}

#[test]
fn a_read_only_session_shows_no_change_control_and_an_admin_sees_the_audit() {
    let edge = Edge::started();
    edge.ok(&["block", "add", "192.0.2.44"]);
    let viewer = edge
        .ok(&["token", "add", "viewer", "--scope", "read"])
        .trim()
        .to_string();
    let (api, b) = serve(&edge);
    sign_in_with(&b, &api, &viewer);
    let controls = json!([
        "#ov-apply",
        "#ov-reload",
        "#ov-stop",
        "nav a[href='#/audit']",
    ]);
    assert_eq!(b.js(SHOWN, vec![controls]), json!([]), "overview");
    open(&b, &api, "blocks", "Blocks");
    let controls = json!(["main form", "#b-sync", "main td button"]);
    assert_eq!(b.js(SHOWN, vec![controls]), json!([]), "blocks");
    // Reads still work: the block is listed, the pager is there.
    b.wait_text("main tbody th", "192.0.2.44");
    open(&b, &api, "domains", "Domains");
    assert_eq!(
        b.js(SHOWN, vec![json!(["main form"])]),
        json!([]),
        "domains"
    );
    drop(b);

    let b = Browser::start(1280, 900);
    sign_in_with(&b, &api, &api.token);
    let controls = json!(["#ov-apply", "#ov-stop", "nav a[href='#/audit']"]);
    assert_eq!(
        b.js(SHOWN, vec![controls.clone()]),
        controls,
        "an admin sees them"
    );
    open(&b, &api, "audit", "Audit");
    b.wait_text("main tbody", "hapctl block add");
    b.wait_text("main tbody", "hapctl token add");
}
