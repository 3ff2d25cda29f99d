//! The Traffic page: a known pattern through the edge (answered, blocked, limited, 5xx from a
//! dead server) read back from the charts in Chromium — the edge's bars, the reasons, the
//! domains' table and a domain's own chart — with the events of the hour and the
//! certificates' expiry axis. Screenshots in target/dashboard-screenshots/.

use serde_json::json;

use super::webdriver::Browser;
use super::{open, sign_in};
use crate::traffic::{pattern_edge, send_pattern, Hosts, API_ALLOWED, F, K, M, N, TOTAL};

/// This test's own domains (see [`Hosts`]).
const HOSTS: Hosts = Hosts {
    shop: "shop.charts.example.com",
    api: "api.charts.example.com",
    broken: "broken.charts.example.com",
};

/// The sum of a data attribute over the bars of the chart in `box_id`.
const BAR_SUM: &str = "return [...document.querySelectorAll(`#${arguments[0]} g.bar`)].reduce((s, g) => s + Number(g.dataset[arguments[1]]), 0)";

#[test]
fn the_traffic_page_draws_the_pattern_sent_through_the_edge() {
    let (edge, _app, api) = pattern_edge(&HOSTS);
    let b = Browser::start(1280, 900);
    send_pattern(&edge, &HOSTS);

    sign_in(&b, &api);
    open(&b, &api, "traffic", "Traffic");
    // The page polls: wait until every request is drawn. The edge's chart holds the pattern
    // (and whatever another test's HAProxy may have sent: see `Hosts`); its bars add up to its
    // totals line.
    let drawn = b.wait_js(
        "every request on the edge's chart",
        "const n = Number(document.querySelector('#t-edge .totals')?.dataset.requests); return n >= arguments[0] ? n : null",
        vec![json!(TOTAL)],
    );
    assert_eq!(
        b.js(BAR_SUM, vec![json!("t-edge"), json!("requests")]),
        drawn
    );
    for (attr, least) in [("errors", F), ("turned", M + K)] {
        let bars = b.js(BAR_SUM, vec![json!("t-edge"), json!(attr)]);
        let line = b.js(
            "return Number(document.querySelector('#t-edge .totals').dataset[arguments[0]])",
            vec![json!(attr)],
        );
        assert_eq!(bars, line, "{attr}");
        assert!(bars.as_u64().unwrap() >= least, "{attr}: {bars}");
    }
    let reasons = b.js(
        "return Object.fromEntries([...document.querySelectorAll('#t-edge li[data-reason]')].map(l => [l.dataset.reason, Number(l.dataset.count)]))",
        vec![],
    );
    assert!(reasons["blocked"].as_u64().unwrap() >= M, "{reasons}");
    assert!(
        reasons["limit:req_rate"].as_u64().unwrap() >= K,
        "{reasons}"
    );
    assert!(b
        .wait_text("#t-since", "a restart of hapctl serve empties this history")
        .contains("Counted by hapctl serve since"));

    // The domains' table, busiest first, and shop's own chart.
    let table = b.wait_js(
        "the three domains",
        "const r = [...document.querySelectorAll('main tr[data-domain]')].filter(t => arguments[0].includes(t.dataset.domain)).map(t => [t.dataset.domain, ...[...t.children].slice(1, 4).map(c => c.textContent)]); return r.length === 3 && r[0][1] === arguments[1] ? r : null",
        vec![json!([HOSTS.shop, HOSTS.api, HOSTS.broken]), json!((N + M).to_string())],
    );
    assert_eq!(
        table,
        json!([
            [HOSTS.shop, (N + M).to_string(), "0", M.to_string()],
            [HOSTS.api, (API_ALLOWED + K).to_string(), "0", K.to_string()],
            [HOSTS.broken, F.to_string(), F.to_string(), "0"],
        ])
    );
    b.click(&format!("main tr[data-domain='{}'] button", HOSTS.shop));
    b.wait_js(
        "shop's chart",
        "return Number(document.querySelector('#t-domain .totals')?.dataset.requests) === arguments[0]",
        vec![json!(N + M)],
    );
    assert_eq!(
        b.js(BAR_SUM, vec![json!("t-domain"), json!("turned")]),
        json!(M)
    );

    // The hour's events (the domain adds are applies) and the certificates' axis.
    b.wait_js(
        "the applies among the events",
        "return document.querySelectorAll('#t-events li[data-kind=apply]').length >= 3",
        vec![],
    );
    b.wait_js(
        "the default certificate on the expiry axis",
        "return document.querySelector('#t-expiry g.cert[data-name=default]') !== null",
        vec![],
    );
    b.screenshot("traffic");
}
