//! Deliveries from the page: a version of the demo app delivered with its steps shown while it
//! runs and served through the edge, rolled back, then a third version proved from outside
//! (**Prove it**): prove's lines, the six checks, the journal with its verdict.

use super::{open, serve, sign_in};
use testkit::demo_app_edge;

#[test]
fn a_delivery_and_a_rollback_show_their_steps_as_they_run() {
    let host = "app.example.com";
    let edge = demo_app_edge(host, "v1");
    // Versions named *slow* take 800 ms to become ready: time to see the steps come.
    let script = edge.path("run-app.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    let slow = text.replace(
        "*never*) delay=600000;;",
        "*never*) delay=600000;; *slow*) delay=800;;",
    );
    assert_ne!(slow, text, "the demo app's script changed: {text}");
    std::fs::write(&script, slow).unwrap();
    let (api, b) = serve(&edge);
    sign_in(&b, &api);
    open(&b, &api, "deliveries", "Deliveries");
    b.wait_text("main tbody th", "v1");

    b.fill("#v-version", "v2-slow\u{E007}");
    // While it runs, the steps appear one by one (the readiness poll takes a while).
    b.wait_js(
        "a step while the delivery runs",
        "return document.querySelector('.progress .state.loading') && document.querySelectorAll('.progress .steps li').length > 0",
        vec![],
    );
    b.wait_text(".progress .state", "delivered");
    edge.wait_for_body(host, "v2-slow\n");
    let steps = b.js(
        "return document.querySelectorAll('.progress .steps li').length",
        vec![],
    );
    assert!(steps.as_u64().unwrap() >= 3, "steps shown: {steps}");
    b.screenshot("deliveries-delivered");

    b.click(".cutover button.quiet");
    b.wait_text(".progress .state", "rollback shop → v1: delivered");
    edge.wait_for_body(host, "v1\n");
    b.screenshot("deliveries-rolled-back");
    let generations = api.get("/v1/status").json["generations"].clone();
    assert!(
        generations
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["version"] == "v1" && g["role"] == "current"),
        "{generations}"
    );

    // A delivery proved from outside, from the page (POST /v1/proofs: hapctl prove of
    // hapctl deliver): prove's lines while it runs, then its checks and its journal.
    b.wait_text("main tbody", "No proof yet");
    b.click("#v-prove");
    b.fill("#v-version", "v3\u{E007}");
    b.wait_js(
        "prove's lines while it runs",
        "return document.querySelector('.progress .state.loading') && document.querySelectorAll('.progress .steps li').length > 0",
        vec![],
    );
    // Measured either way (a failed check on a loaded machine is shown the same).
    let line = b.wait_text(
        ".progress .state.ok, .progress .state.bad",
        "prove shop → v3: ",
    );
    let passed = line.contains(": proved");
    assert!(passed || line.contains(": failed"), "{line}");
    edge.wait_for_body(host, "v3\n");
    for check in [
        "master",
        "new-worker",
        "probe",
        "streams",
        "version",
        "command",
    ] {
        b.wait_text(".progress .checks li", &format!("{check}: "));
    }
    b.screenshot("deliveries-proved");
    let listed = &api.get("/v1/proofs").json[0];
    let verdict = if passed { "PASSED" } else { "FAILED" };
    let title = format!("Proof of a cutover: {verdict}");
    assert_eq!(listed["title"], title.as_str(), "{listed}");
    b.wait_text("main tbody th", &title);
    let name = listed["name"].as_str().unwrap().to_string();
    assert!(line.contains(&name), "{line} names the journal");
    b.click(&format!("summary[aria-label='Journal {name}']"));
    let journal = b.wait_text("pre.journal", "deliver v3 --app shop");
    assert_eq!(
        journal,
        api.get(&format!("/v1/proofs/{name}")).json["markdown"]
    );
    for check in ["master", "new-worker", "probe", "streams", "version"] {
        assert!(
            journal.contains(&format!("| {check} |")),
            "{check}: {journal}"
        );
    }
    b.js(
        "document.querySelector('pre.journal').scrollIntoView()",
        vec![],
    );
    b.screenshot("deliveries-proof");
    let refused = api
        .try_call("GET", "/v1/proofs/..%2Fhapctl.toml", None)
        .unwrap();
    assert_eq!(
        (refused.status, refused.json["error"]["field"].as_str()),
        (400, Some("name"))
    );
}
