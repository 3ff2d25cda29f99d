//! The Traffic page: a known pattern through the edge (answered, blocked, limited, 5xx from a
//! dead server) read back from the charts in Chromium — the edge's bars, the reasons, the
//! domains' table and a domain's own chart — with the events of the hour and the
//! certificates' expiry axis. Screenshots in target/dashboard-screenshots/.

use serde_json::json;

use super::webdriver::Browser;
use super::{open, sign_in};
use crate::traffic::{
    pattern_edge, send_pattern, API, API_ALLOWED, BROKEN, F, K, M, N, SHOP, TOTAL,
};

/// The sum of a data attribute over the bars of the chart in `box_id`.
const BAR_SUM: &str = "return [...document.querySelectorAll(`#${arguments[0]} g.bar`)].reduce((s, g) => s + Number(g.dataset[arguments[1]]), 0)";

#[test]
fn the_traffic_page_draws_the_pattern_sent_through_the_edge() {
    let (edge, _app, api) = pattern_edge();
    let b = Browser::start(1280, 900);
    send_pattern(&edge);

    sign_in(&b, &api);
    open(&b, &api, "traffic", "Traffic");
    // The page polls: wait until every request is drawn.
    b.wait_js(
        "every request on the edge's chart",
        "return Number(document.querySelector('#t-edge .totals')?.dataset.requests) === arguments[0]",
        vec![json!(TOTAL)],
    );
    for (attr, want) in [("requests", TOTAL), ("errors", F), ("turned", M + K)] {
        assert_eq!(
            b.js(BAR_SUM, vec![json!("t-edge"), json!(attr)]),
            json!(want),
            "{attr}"
        );
    }
    let reasons = b.js(
        "return Object.fromEntries([...document.querySelectorAll('#t-edge li[data-reason]')].map(l => [l.dataset.reason, Number(l.dataset.count)]))",
        vec![],
    );
    assert_eq!(reasons, json!({"blocked": M, "limit:req_rate": K}));
    assert!(b
        .wait_text("#t-since", "a restart of hapctl serve empties this history")
        .contains("Counted by hapctl serve since"));

    // The domains' table, busiest first, and shop's own chart.
    let table = b.wait_js(
        "three domains",
        "const r = [...document.querySelectorAll('main tr[data-domain]')].map(t => [t.dataset.domain, ...[...t.children].slice(1, 4).map(c => c.textContent)]); return r.length === 3 ? r : null",
        vec![],
    );
    assert_eq!(
        table,
        json!([
            [SHOP, (N + M).to_string(), "0", M.to_string()],
            [API, (API_ALLOWED + K).to_string(), "0", K.to_string()],
            [BROKEN, F.to_string(), F.to_string(), "0"],
        ])
    );
    b.click(&format!("main tr[data-domain='{SHOP}'] button"));
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
