//! The Logs page: a request sent through the edge appears while the page is open (the live
//! tail), with the request id the edge answered and the API lists; the status, client and
//! domain filters; a bad filter named at its field; the API's pages going back by `before`.

use std::net::Ipv4Addr;

use serde_json::json;

use super::{shop_on_page, SHOP};

const CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 7);

/// Every shown row's cell `column` (0-based) equals `want`, and there is at least one row.
const COLUMN_IS: &str = "const cells = [...document.querySelectorAll('main tbody tr:not(.empty)')].map(r => r.children[arguments[0]].textContent); return cells.length > 0 && cells.every(c => c === arguments[1])";

#[test]
fn a_request_through_the_edge_appears_on_the_logs_page() {
    let (edge, _app, api, b) = shop_on_page("logs", "Logs");

    // Live: the request shows up without a reload, with the id the edge answered.
    let r = edge.get_from(CLIENT, SHOP, "/seen-in-the-logs?x=1");
    assert_eq!(r.status, 200, "{r:?}");
    let id = r
        .head
        .lines()
        .find_map(|l| l.strip_prefix("x-request-id:"))
        .expect("a request id")
        .trim()
        .to_string();
    b.wait_text("main tbody th code", &id);
    let row = b.wait_text("main tbody tr", &id);
    for part in [SHOP, "/seen-in-the-logs", "200", "GET", &CLIENT.to_string()] {
        assert!(row.contains(part), "{part} in {row}");
    }
    let listed = api.get("/v1/logs?limit=1").json;
    assert_eq!(listed["records"][0]["id"], id.as_str(), "{listed}");
    b.screenshot("logs");

    // Filters: a 404 from another client for an unknown host, then by status and client.
    assert_eq!(edge.get("nobody.example.com", "/").status, 404);
    b.fill("#l-status", "4xx");
    b.wait_js("only 4xx rows", COLUMN_IS, vec![json!(1), json!("404")]);
    b.fill("#l-status", "abc");
    b.wait_text(
        "#l-status-error",
        "is not a status like 404 or a class like 4xx",
    );
    assert_eq!(
        b.js(
            "return document.getElementById('l-status').getAttribute('aria-invalid')",
            vec![]
        ),
        "true"
    );
    b.keys("#l-status", &"\u{E003}".repeat(3));
    b.fill("#l-client", &CLIENT.to_string());
    b.wait_js(
        "only that client's rows",
        COLUMN_IS,
        vec![json!(5), json!(CLIENT.to_string())],
    );
    b.fill("#l-domain", "*.example.com");
    b.wait_js(
        "only that client's rows",
        COLUMN_IS,
        vec![json!(3), json!(SHOP)],
    );
    b.screenshot("logs-filtered");

    // The API's pages: the second one starts after the first one's last record.
    let two = api.get("/v1/logs?limit=2").json;
    let first = api.get("/v1/logs?limit=1").json;
    let next = first["next"].as_str().expect("an older page");
    let second = api.get(&format!("/v1/logs?limit=1&before={next}")).json;
    assert_eq!(
        [&first["records"][0], &second["records"][0]],
        [&two["records"][0], &two["records"][1]],
        "{two}"
    );
    for (query, field) in [
        ("before=../x", "before"),
        ("limit=0", "limit"),
        ("host=x", "host"),
    ] {
        let r = api
            .try_call("GET", &format!("/v1/logs?{query}"), None)
            .unwrap();
        assert_eq!((r.status, r.error_field()), (400, field), "{query}: {r:?}");
    }
}
