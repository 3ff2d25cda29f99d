//! The dashboard at 10,000 domains: the Domains page pages and searches through the API's
//! pages (`GET /v1/domains?limit=50&after&q`), and no page of the dashboard ever asks for the
//! whole list (the browser's own resource timings say what it fetched and how much).

use std::time::Instant;

use serde_json::{json, Value};

use super::{open, serve, sign_in, Browser};
use testkit::seed::seed_domains;
use testkit::{Backend, Edge};

const DOMAINS: usize = 10_000;
const PAGE: usize = 50;

fn name(i: usize) -> String {
    format!("d{i:05}.example.com")
}

/// The names in the table's rows, in order.
fn shown(b: &Browser) -> Vec<String> {
    let v = b.js(
        "return [...document.querySelectorAll('main tbody tr th')].map(e => e.textContent)",
        vec![],
    );
    serde_json::from_value(v).unwrap()
}

/// Waits for the page summary `text`, then checks the rows are exactly `want`.
fn page_is(b: &Browser, text: &str, want: &[String]) {
    b.wait_text("main .summary", text);
    b.wait_js(
        &format!("the rows of {text}"),
        "return [...document.querySelectorAll('main tbody tr th')].map(e => e.textContent).join() === arguments[0]",
        vec![json!(want.join(","))],
    );
    assert_eq!(shown(b), want);
}

#[test]
fn ten_thousand_domains_are_searched_and_paged_without_loading_them_all() {
    let edge = Edge::new();
    let app = Backend::start("many");
    let t = Instant::now();
    seed_domains(&edge, (0..DOMAINS).map(name), &app.addr());
    edge.ok(&["haproxy", "start"]);
    eprintln!("{DOMAINS} domains seeded and loaded in {:?}", t.elapsed());
    edge.wait_for_body(&name(4242), "many");
    let (api, b) = serve(&edge);
    sign_in(&b, &api);
    // Room for every request the pages make (Chromium keeps 250 entries by default).
    b.js("performance.setResourceTimingBufferSize(100000)", vec![]);
    b.wait_text(".card", &format!("Domains{DOMAINS}"));

    open(&b, &api, "domains", "Domains");
    let first: Vec<String> = (0..PAGE).map(name).collect();
    page_is(&b, &format!("1–{PAGE} of {DOMAINS}"), &first);
    b.click("main .pager button:last-child");
    let second: Vec<String> = (PAGE..2 * PAGE).map(name).collect();
    page_is(&b, &format!("51–100 of {DOMAINS}"), &second);
    b.click("main .pager button:last-child");
    let third: Vec<String> = (2 * PAGE..3 * PAGE).map(name).collect();
    page_is(&b, &format!("101–150 of {DOMAINS}"), &third);
    b.click("main .pager button:first-child");
    page_is(&b, &format!("51–100 of {DOMAINS}"), &second);
    b.screenshot("domains-10000");

    // A search finds the one domain among 10,000; emptied, the first page comes back.
    b.fill("#d-search", "d04242");
    page_is(&b, "1–1 of 1 matching “d04242”", &[name(4242)]);
    b.wait_js(
        "no next page for one match",
        "return document.querySelector('main .pager button:last-child').disabled",
        vec![],
    );
    b.screenshot("domains-10000-search");
    b.fill("#d-search", "d0999");
    let tail: Vec<String> = (9990..DOMAINS).map(name).collect();
    page_is(&b, "1–10 of 10 matching “d0999”", &tail);
    // Backspaced away, as a person does.
    b.keys("#d-search", &"\u{E003}".repeat(5));
    page_is(&b, &format!("1–{PAGE} of {DOMAINS}"), &first);

    // The Protections page searches the same way.
    open(&b, &api, "protections", "Protections");
    b.fill("#p-search", "d04242");
    b.wait_js(
        "the one match on the Protections page",
        "const r = [...document.querySelectorAll('main table')[0].querySelectorAll('tbody tr th')]; return r.length === 1 && r[0].textContent === arguments[0]",
        vec![json!(name(4242))],
    );

    // What the browser fetched: every domain list was one page of 50, none near the whole list
    // (10,000 domains are about 2 MB of JSON; a page about 10 KB).
    let fetched = b.js(
        "return performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname === '/v1/domains').map(e => ({url: e.name, bytes: e.decodedBodySize, ms: e.duration}))",
        vec![],
    );
    let fetched = fetched.as_array().unwrap();
    assert!(fetched.len() >= 6, "{fetched:?}");
    for f in fetched {
        let url = f["url"].as_str().unwrap();
        assert!(
            url.contains(&format!("limit={PAGE}")),
            "not one page: {url}"
        );
        let bytes = f["bytes"].as_u64().unwrap();
        assert!(bytes < 64 * 1024, "{url}: {bytes} bytes");
    }
    let biggest = fetched.iter().map(|f| f["bytes"].as_u64().unwrap()).max();
    assert!(
        biggest > Some(1000),
        "the timings measured no body: {fetched:?}"
    );
    let mut ms: Vec<f64> = fetched.iter().map(|f| f["ms"].as_f64().unwrap()).collect();
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "{} domain pages fetched, largest {} bytes, median {:.1} ms, slowest {:.1} ms",
        ms.len(),
        biggest.unwrap(),
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
    let all: Value = api.get("/v1/domains?limit=1").json["total"].clone();
    assert_eq!(all, json!(DOMAINS));
}
