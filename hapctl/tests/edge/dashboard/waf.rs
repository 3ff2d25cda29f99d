//! A domain's WAF policy from the page, against the real agent: `hapctl serve` runs
//! `hapctl waf serve` over libmodsecurity and Debian's CRS (docs/waf.md). Block mode with
//! paranoia 2 and an exclusion set in the editor is what the API and `waf.map` then hold, and
//! an SQL injection gets 403 through the edge; hostile values are refused at their fields with
//! nothing changed; detect from the page lets it pass. The servers and the HTTPS policy the
//! domain had are kept by every save. The Overview's agent card shows it up with the API's
//! counters after the injection, and the rules reloaded from the Protections page show the
//! outcome; the rules' messages are shown beside their hits, and a request tried from the page
//! shows its verdict and rules without being sent.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{open, serve, sign_in, submit, wait_toast, SHOP};
use testkit::daemon::Daemon;
use testkit::{free_port, Backend, Edge, Response};

const SQLI: &str = "/?id=1%27%20OR%20%271%27%3D%271";

/// A request as a browser sends it (the CRS counts a missing Accept or User-Agent at PL 2).
fn browse(edge: &Edge, path: &str) -> Response {
    edge.get_with_headers(
        SHOP,
        path,
        &[
            ("User-Agent", "Mozilla/5.0 (X11; Linux x86_64)"),
            ("Accept", "text/html"),
        ],
    )
}

/// Waits until the edge answers `path` with `status` (the health check takes the agent in
/// within a second or two of its start; a map change is at once).
fn wait_status(edge: &Edge, path: &str, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = browse(edge, path);
        if r.status == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path}: never {status}, last {r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SHOP as the Protections page lists it (servers, HTTPS, protections, limits, WAF).
fn listed(api: &Daemon) -> Value {
    api.get(&format!("/v1/domains?limit=1&q={SHOP}")).json["domains"][0].clone()
}

fn waf_map(edge: &Edge) -> String {
    std::fs::read_to_string(edge.path("live/maps/waf.map")).unwrap_or_default()
}

#[test]
fn a_domains_waf_policy_is_set_from_the_page_and_enforced_by_the_agent() {
    let edge = Edge::new();
    edge.set_setting_keys(
        "waf",
        &[
            ("listen", format!("127.0.0.1:{}", free_port())),
            ("crs", hapctl::settings::waf::DEBIAN_CRS.to_string()),
        ],
    );
    edge.ok(&["haproxy", "start"]);
    let app = Backend::start("shop");
    let (api, b) = serve(&edge);
    // A domain with more than an address, and an HTTPS policy: every save must keep them.
    let route = format!("/v1/domains/{SHOP}");
    let domain = json!({"servers": [{"address": app.addr(), "name": "web", "weight": 7, "maxconn": 100}],
        "profile": "websocket"});
    assert_eq!(api.call("PUT", &route, Some(&domain)).status, 201);
    let https = json!({"redirect": "off", "hsts_max_age": 600});
    let r = api.call("PUT", &format!("{route}/https"), Some(&https));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(browse(&edge, SQLI).status, 200, "no policy yet");
    let before = listed(&api);
    assert_eq!(before["waf"]["mode"], "off", "{before}");

    sign_in(&b, &api);
    open(&b, &api, "protections", "Protections");
    let row = format!("main tbody tr[data-key='{SHOP}']");
    b.wait_text(&format!("{row} td"), "off");
    b.click(&format!(
        "button[aria-label='Edit the protections of {SHOP}']"
    ));
    b.wait_text("#pe-title", SHOP);

    // Block, paranoia 2, an exclusion under /search: the API and the map hold it, and an SQL
    // injection gets the agent's 403 through the edge (a clean request still 200).
    b.click("#pw-mode option[value='block']");
    submit(
        &b,
        "pe-waf-title",
        &[("#pw-paranoia", "2"), ("#pw-exclusions", "942100@/search")],
    );
    wait_toast(&b, &format!("{SHOP}: WAF policy saved"));
    let policy = json!({"mode": "block", "fail": "open", "paranoia": 2, "threshold": 5,
        "body_limit": 8192, "exclusions": [{"rule": 942100, "path": "/search"}]});
    let now = api.get(&route).json;
    assert_eq!(now["waf"], policy, "{now}");
    let mut kept = before.clone();
    kept["waf"] = policy.clone();
    assert_eq!(listed(&api), kept, "only the policy changed");
    let line = format!("{SHOP} block:open:2:5:8192:942100@/search");
    assert!(waf_map(&edge).contains(&line), "{}", waf_map(&edge));
    b.wait_text(
        &format!("{row} td"),
        "block · PL 2 · threshold 5 · fail open · 1 exclusion",
    );
    wait_status(&edge, SQLI, 403);
    assert_eq!(browse(&edge, "/?id=42").status, 200);
    b.js(
        "document.querySelector(arguments[0]).scrollIntoView()",
        vec![json!(row)],
    );
    b.screenshot("protections-waf");

    // Hostile values: each refused at its field (an exclusion with its line), nothing changed.
    let invalid = "return document.getElementById(arguments[0]).getAttribute('aria-invalid')";
    submit(&b, "pe-waf-title", &[("#pw-paranoia", "9")]);
    b.wait_text("#pw-paranoia-error", "invalid paranoia \"9\"");
    assert_eq!(b.js(invalid, vec![json!("pw-paranoia")]), "true");
    submit(
        &b,
        "pe-waf-title",
        &[
            ("#pw-paranoia", "2"),
            ("#pw-exclusions", "942100@/search\n\n920350@search"),
        ],
    );
    let refusal = b.wait_text("#pw-exclusions-error", "line 3:");
    assert!(
        refusal.contains("\"search\": must start with '/'") && !refusal.contains("column"),
        "{refusal}"
    );
    assert_eq!(b.js(invalid, vec![json!("pw-exclusions")]), "true");
    assert_eq!(listed(&api), kept, "nothing changed");
    assert!(waf_map(&edge).contains(&line), "{}", waf_map(&edge));
    b.screenshot("protections-waf-refused");

    // Detect from the page: the injection passes (logged only), the rest as it was.
    b.click("#pw-mode option[value='detect']");
    submit(&b, "pe-waf-title", &[("#pw-exclusions", "942100@/search")]);
    b.wait_text(&format!("{row} td"), "detect · PL 2");
    kept["waf"]["mode"] = json!("detect");
    assert_eq!(listed(&api), kept, "only the mode changed");
    wait_status(&edge, SQLI, 200);
    // The editor opened again shows the policy as the API has it.
    b.click(&format!(
        "button[aria-label='Edit the protections of {SHOP}']"
    ));
    b.wait_js(
        "the policy in the editor",
        "return document.getElementById('pw-mode').value === 'detect' && document.getElementById('pw-paranoia').value === '2' && document.getElementById('pw-exclusions').value === '942100@/search'",
        vec![],
    );

    // The Overview's agent card: up, and the counters the API has after the injection.
    let waf = wait_agent(&api, &|w| {
        w["blocked"].as_u64() >= Some(1) && w["detected"].as_u64() >= Some(1)
    });
    open(&b, &api, "overview", "Overview");
    let card = "section[aria-label='WAF agent']";
    b.wait_text(&format!("{card} .ok"), "Up");
    // The value next to a term of the card.
    let shown = "const dt = [...document.querySelectorAll(arguments[0] + ' dt')].find(e => e.textContent === arguments[1]); return !!dt && dt.nextElementSibling.textContent === arguments[2]";
    for (name, key) in [("Blocked", "blocked"), ("Detected", "detected")] {
        let want = waf[key].to_string();
        b.wait_js(
            &format!("{name} {want} on the card"),
            shown,
            vec![json!(card), json!(name), json!(want)],
        );
    }
    b.screenshot("overview-waf");

    // Protections: the counters by rule, and a reload from the page with its outcome.
    open(&b, &api, "protections", "Protections");
    let hits = waf["by_rule"]["942100"].to_string();
    b.wait_text(
        "section[aria-labelledby='pw'] tbody tr[data-key='942100'] td",
        &hits,
    );
    b.click("section[aria-labelledby='pw'] button");
    let done = b.wait_text("#pw-reload-outcome.ok", "Rules reloaded:");
    let rules = format!("{} rules · {}", waf["rules"], waf["crs"].as_str().unwrap());
    assert!(
        done.contains(&rules) && done.contains(&format!("PID {}", waf["pid"])),
        "{done}"
    );
    assert_eq!(api.get("/v1/waf").json["reloads"], 1);
    b.screenshot("protections-waf-reloaded");

    // Each rule's message beside its hits (GET /v1/waf/rules), and a request tried from the
    // page without being sent (POST /v1/waf/test): scored under the domain's policy, now
    // detect at paranoia 2.
    b.wait_text(
        "section[aria-labelledby='pw'] tbody tr[data-key='942100'] td",
        "SQL Injection",
    );
    b.fill("#pwt-url", &format!("https://{SHOP}{SQLI}"));
    b.fill("#pwt-headers", "User-Agent: Mozilla/5.0");
    b.click("form[aria-labelledby=pwt] button[type=submit]");
    let verdict = b.wait_text("#pwt-verdict", "Detected (logged, not blocked)");
    assert!(
        verdict.contains(&format!(
            "policy {SHOP}'s (detect:open:2:5:8192:942100@/search)"
        )),
        "{verdict}"
    );
    b.wait_text(".trial tbody tr[data-key='942100'] td", "SQL Injection");
    b.screenshot("protections-waf-trial");
    // A path without its slash: refused at the URL field.
    b.fill("#pwt-url", "search?q=1");
    b.click("form[aria-labelledby=pwt] button[type=submit]");
    b.wait_text("#pwt-url-error", "must be a path");
    assert_eq!(
        b.js(
            "return document.getElementById('pwt-url').getAttribute('aria-invalid')",
            vec![]
        ),
        "true"
    );
}

/// `GET /v1/waf` once `ok` holds (the agent rewrites its state file every second).
fn wait_agent(api: &Daemon, ok: &dyn Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let w = api.get("/v1/waf").json;
        if w["up"] == true && ok(&w) {
            return w;
        }
        assert!(Instant::now() < deadline, "{w}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
