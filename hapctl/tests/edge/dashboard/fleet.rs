//! The Overview of an edge of a fleet lists every edge with its applied revision, and says
//! which one refused a change; an edge in no fleet shows no fleet table (the other suites).

use testkit::fleet::FleetLab;

use super::sign_in;
use super::webdriver::Browser;

#[test]
fn the_overview_lists_every_edge_of_the_fleet() {
    let lab = FleetLab::start(1, 2);
    let b = Browser::start(1280, 900);
    sign_in(&b, lab.daemon(0));
    b.wait_js(
        "the fleet table with both edges, current",
        "const s = document.getElementById('ov-fleet'); if (!s || s.hidden) return false;
         const rows = [...s.querySelectorAll('tbody tr')].map(r => r.textContent);
         return rows.length === 2 && rows[0].startsWith('e0') && rows[1].startsWith('e1')
           && rows.every(r => r.includes('current'));",
        vec![],
    );
    let summary = b.js(
        "return document.querySelector('#ov-fleet .summary').textContent",
        vec![],
    );
    assert!(
        summary.as_str().is_some_and(|s| s.contains("2 edge(s)")),
        "{summary}"
    );
    b.screenshot("overview-fleet");
}
