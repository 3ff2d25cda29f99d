//! The dashboard in a real headless Chromium (WebDriver, `dashboard/webdriver.rs`) against
//! a real `hapctl serve` and HAProxy: sign in; add a domain and reach it through the edge; a
//! hostile name refused at its field with nothing changed; an edit that keeps every option the
//! domain had, and a removal; a block enforced through the edge (403) and lifted, and one made
//! elsewhere shown live; suspension and the HTTPS redirect through the edge; the other pages;
//! every page at a phone's width; sign out, after which no page and no API call works. In
//! `dashboard/`: `deliveries.rs` a delivery, a rollback and a proof with their steps as they
//! run; `protections.rs` a domain's and the edge-wide protections and an imported
//! certificate, refusals at their fields; `acme.rs` a certificate ordered and renewed through
//! a real ACME CA; `scale.rs` 10,000 domains paged and searched; `waf.rs` a domain's WAF
//! policy enforced by the real agent; `recovery.rs` apply now and HAProxy reload / stop /
//! start from the Overview; `proxies.rs` trusted proxies believed through the edge; `logs.rs`
//! a request through the edge on the Logs page; `states.rs` a limits preset, renew all due,
//! a block rebuild, error states; `traffic.rs` a known traffic pattern read back from the
//! charts. Every page is saved to target/dashboard-screenshots/.

mod webdriver;
// More scenarios; `session` is the serving and sign-in over plain HTTP, no browser.
mod access;
mod acme;
mod deliveries;
mod fleet;
mod logs;
mod protections;
mod proxies;
mod recovery;
mod scale;
mod session;
mod states;
mod traffic;
mod waf;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::{json, Value};

use hapctl::tls::probe;
use hapctl::tls::x509::CertInfo;
use testkit::daemon::{http_request, Daemon};
use testkit::{Backend, Edge};
use webdriver::Browser;

const SHOP: &str = "shop.example.com";
const CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// Controls (buttons, fields, links) with no accessible name: no label, aria-label or text.
const UNNAMED: &str = r#"return [...document.querySelectorAll('button, input, select, textarea, a[href]')]
  .filter(e => e.offsetParent !== null)
  .filter(e => !(e.getAttribute('aria-label') || (e.labels && e.labels.length) || e.textContent.trim()))
  .map(e => e.outerHTML.slice(0, 120))"#;

/// Every page of the dashboard: its hash and its heading.
const PAGES: [(&str, &str); 9] = [
    ("overview", "Overview"),
    ("traffic", "Traffic"),
    ("domains", "Domains"),
    ("blocks", "Blocks"),
    ("certificates", "Certificates"),
    ("protections", "Protections"),
    ("deliveries", "Deliveries"),
    ("applies", "Applies"),
    ("logs", "Logs"),
];

fn url(api: &Daemon, rest: &str) -> String {
    format!("http://127.0.0.1:{}/ui/{rest}", api.port)
}

/// Opens a page of the dashboard and waits until its data is shown (no "Loading…" left).
fn open(b: &Browser, api: &Daemon, page: &str, heading: &str) {
    b.goto(&url(api, &format!("#/{page}")));
    b.wait_text("main h1", heading);
    b.wait_js(
        &format!("{page} loaded"),
        "return document.querySelector('main .state.loading:not([hidden])') === null && document.querySelectorAll('main tbody tr').length > 0",
        vec![],
    );
    let unnamed = b.js(UNNAMED, vec![]);
    assert_eq!(unnamed, json!([]), "{page}: controls without a name");
}

fn sign_in(b: &Browser, api: &Daemon) {
    b.goto(&url(api, ""));
    b.wait_js(
        "the sign-in form",
        "return !document.getElementById('signin').hidden",
        vec![],
    );
    b.fill("#token", &format!("{}\u{E007}", api.token));
    b.wait_text("main h1", "Overview");
}

/// Waits until the edge answers `SHOP` with `status`.
fn wait_status(edge: &Edge, status: u16) {
    let deadline = std::time::Instant::now() + webdriver::WAIT;
    loop {
        let r = edge.get(SHOP, "/");
        if r.status == status {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the edge never answered {status}: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `hapctl serve` on `edge`, and a browser at a laptop's size.
fn serve(edge: &Edge) -> (Daemon, Browser) {
    (Daemon::start(edge), Browser::start(1280, 900))
}

/// An edge serving `SHOP` from a backend, `hapctl serve`, and a browser signed in on `page`.
fn shop_on_page(page: &str, heading: &str) -> (Edge, Backend, Daemon, Browser) {
    let edge = Edge::started();
    let app = Backend::start("shop");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let (api, b) = serve(&edge);
    sign_in(&b, &api);
    open(&b, &api, page, heading);
    (edge, app, api, b)
}

/// What a script in the page gets from `fetch(path)`: the status.
fn fetch_status(b: &Browser, path: &str) -> Value {
    b.js_async(
        "const done = arguments[arguments.length - 1]; fetch(arguments[0]).then(r => done(r.status), e => done(String(e)))",
        vec![json!(path)],
    )
}

#[test]
fn an_operator_runs_the_edge_from_the_dashboard() {
    let edge = Edge::started();
    let app = Backend::start("shop");
    let (api, b) = serve(&edge);

    // Signed out: the sign-in form, and the API refuses the page.
    b.goto(&url(&api, ""));
    b.wait_js(
        "the sign-in form",
        "return !document.getElementById('signin').hidden && document.getElementById('app').hidden",
        vec![],
    );
    assert_eq!(fetch_status(&b, "/v1/status"), 401);
    b.screenshot("signin");
    b.fill("#token", "not-the-token\u{E007}");
    b.wait_text("#token-error", "wrong API token");
    assert_eq!(
        b.js(
            "return document.getElementById('token').getAttribute('aria-invalid')",
            vec![]
        ),
        "true"
    );

    sign_in(&b, &api);
    let master = edge.master_pid();
    b.wait_text(".card", &format!("PID {master}"));
    b.wait_text(".card", "Known-good");
    open(&b, &api, "overview", "Overview");
    b.screenshot("overview");
    // The token is nowhere the page can reach; the session cookie is HttpOnly and Strict.
    let leaks = b.js(
        "return [document.documentElement.outerHTML, location.href, JSON.stringify(localStorage), JSON.stringify(sessionStorage), document.cookie].filter(t => t.includes(arguments[0])).length",
        vec![json!(api.token)],
    );
    assert_eq!(leaks, 0);
    assert_eq!(b.js("return document.cookie", vec![]), "");
    let cookies = b.cookies();
    let session = cookies
        .iter()
        .find(|c| c["name"] == "hapctl_session")
        .unwrap_or_else(|| panic!("no session cookie: {cookies:?}"))
        .clone();
    assert_eq!(session["httpOnly"], true, "{session}");
    assert_eq!(session["sameSite"], "Strict", "{session}");
    assert!(session["expiry"].as_u64().is_some(), "expiring: {session}");

    // A domain added in the page is routed through the edge.
    open(&b, &api, "domains", "Domains");
    b.wait_text("main tbody", "No domain yet");
    b.fill("#d-name", SHOP);
    b.fill("#d-servers", &app.addr());
    b.click("main form button[type=submit]");
    b.wait_text("main tbody th", SHOP);
    edge.wait_for_body(SHOP, "shop");
    // The save is over in the page (the row may show first, from the poll).
    b.wait_js(
        "the form emptied after the save",
        "return !document.querySelector('main form button[type=submit]').disabled && document.getElementById('d-name').value === ''",
        vec![],
    );
    b.screenshot("domains");

    // A hostile name: the API's error at the name field, nothing changed.
    let before: BTreeSet<String> = api.domain_names();
    let hostile = "evil<img src=x onerror=alert(1)>.example.com";
    b.fill("#d-name", hostile);
    b.fill("#d-servers", &app.addr());
    b.click("main form button[type=submit]");
    let error = b.wait_text("#d-name-error", "invalid domain");
    assert!(error.contains(hostile), "shown as text: {error}");
    assert_eq!(
        b.js(
            "return document.getElementById('d-name').getAttribute('aria-invalid')",
            vec![]
        ),
        "true"
    );
    assert_eq!(
        b.js("return document.querySelectorAll('img').length", vec![]),
        0
    );
    // A bad server: at the servers field, with its line.
    b.fill("#d-name", "other.example.com");
    b.fill("#d-servers", &format!("{}\nnot-an-address", app.addr()));
    b.click("main form button[type=submit]");
    b.wait_text("#d-servers-error", "line 2:");
    b.screenshot("domains-errors");
    assert_eq!(api.domain_names(), before, "nothing changed");
    // The search finds it, and finds nothing for a name that is not there.
    b.fill("#d-search", "shop");
    b.wait_text("main .summary", "of 1");
    b.fill("#d-search", "nothing-like-it");
    b.wait_text("main tbody", "No domain matches");

    // An edit in the page keeps what the form holds beyond the address (the server's name and
    // options, an http-check profile, SSE routing); then the domain is removed from the page.
    let other = "api.example.com";
    let route = format!("/v1/domains/{other}");
    let full = json!({"servers": [{"address": app.addr(), "name": "api", "maxconn": 500,
        "inter": "2s", "fall": 3, "rise": 2}], "profile": "http-check:/health", "sse_routing": true});
    let r = api.call("PUT", &route, Some(&full));
    assert_eq!(r.status, 201, "{r:?}");
    let kept = api.get(&route).json;
    b.fill("#d-search", "api.");
    b.click(&format!("button[aria-label='Edit {other}']"));
    b.wait_js(
        "the servers in the edit form",
        "return document.getElementById('d-servers').value.includes('name=api maxconn=500 inter=2s fall=3 rise=2') && document.getElementById('d-sse').checked && document.getElementById('d-profile').value === 'http-check:/health'",
        vec![],
    );
    b.keys("#d-servers", " weight=7");
    b.click("main form button[type=submit]");
    wait_toast(&b, &format!("{other} replaced"));
    let mut want = kept.clone();
    want["servers"][0]["options"]["weight"] = json!(7);
    assert_eq!(
        api.get(&route).json,
        want,
        "the edit changed only the weight"
    );
    b.click(&format!("button[aria-label='Remove {other}']"));
    b.click(&format!("button[aria-label='Remove {other}']"));
    b.wait_text("main tbody", "No domain matches");
    assert_eq!(api.domain_names(), before, "removed");

    // A block from the page is enforced through the edge; lifting it serves again.
    open(&b, &api, "blocks", "Blocks");
    b.wait_text("main tbody", "Nobody is blocked");
    assert_eq!(edge.get_from(CLIENT, SHOP, "/").status, 200);
    b.fill("#b-ip", &CLIENT.to_string());
    b.fill("#b-reason", "from the dashboard");
    b.fill("#b-ttl", "1h\u{E007}");
    b.wait_text("main tbody th", &CLIENT.to_string());
    b.wait_text("main tbody", "in 1 h");
    assert_eq!(edge.get_from(CLIENT, SHOP, "/").status, 403);
    assert_eq!(edge.get(SHOP, "/").status, 200, "only that client");
    // A bulk paste with one bad line: the line named, nothing blocked.
    b.fill(
        "#b-bulk",
        "198.51.100.7 scanner\n# a comment\nnot-an-ip abuse",
    );
    b.click("form[aria-labelledby=bulk-form-title] button[type=submit]");
    b.wait_text("#b-bulk-error", "line 3:");
    assert_eq!(api.blocked_keys(), BTreeSet::from([CLIENT.to_string()]));
    b.screenshot("blocks");
    // Live: a block made elsewhere (a script, through the API) shows without a reload, and the
    // row already shown is kept as it was (not redrawn: no jump, focus kept).
    b.js(
        "window.__same_page = true; document.querySelector(`main tbody tr[data-key='${arguments[0]}']`).__kept = true",
        vec![json!(CLIENT.to_string())],
    );
    let scripted = "198.51.100.9";
    let r = api.call(
        "POST",
        "/v1/blocked-ips",
        Some(&json!({"ip": scripted, "reason": "from a script"})),
    );
    assert_eq!(r.status, 201, "{r:?}");
    b.wait_text("main tbody th", scripted);
    let kept = b.js(
        "return window.__same_page === true && document.querySelector(`main tbody tr[data-key='${arguments[0]}']`).__kept === true",
        vec![json!(CLIENT.to_string())],
    );
    assert_eq!(kept, true, "the page reloaded or redrew an unchanged row");
    // The filters: by network, then by reason; emptied, both again.
    let listed = "return [...document.querySelectorAll('main tbody th')].map(e => e.textContent).join() === arguments[0]";
    let both = format!("{CLIENT},{scripted}");
    b.fill("#b-prefix", "198.51.100.0/24");
    b.wait_js("the network filter", listed, vec![json!(scripted)]);
    b.keys("#b-prefix", &"\u{E003}".repeat(15));
    b.wait_js("no filter", listed, vec![json!(both)]);
    b.fill("#b-reason-q", "script");
    b.wait_js("the reason filter", listed, vec![json!(scripted)]);
    b.keys("#b-reason-q", &"\u{E003}".repeat(6));
    b.wait_js("no filter", listed, vec![json!(both)]);
    let r = api.call("DELETE", &format!("/v1/blocked-ips/{scripted}"), None);
    assert_eq!(r.status, 200, "{r:?}");
    b.wait_js(
        "the scripted block gone from the page",
        "return ![...document.querySelectorAll('main tbody th')].some(e => e.textContent === arguments[0])",
        vec![json!(scripted)],
    );
    b.click(&format!("button[aria-label='Unblock {CLIENT}']"));
    b.click(&format!("button[aria-label='Unblock {CLIENT}']"));
    b.wait_text("main tbody", "Nobody is blocked");
    assert_eq!(edge.get_from(CLIENT, SHOP, "/").status, 200);

    // The other pages show the edge's data.
    open(&b, &api, "certificates", "Certificates");
    b.wait_text("main tbody th", "default");
    b.screenshot("certificates");
    open(&b, &api, "protections", "Protections");
    b.wait_text("main tbody th", SHOP);
    // Suspension and the HTTPS redirect from the page, seen through the edge.
    b.click(&format!("button[aria-label='Suspend {SHOP}']"));
    wait_status(&edge, 503);
    b.wait_text("main tbody td", "suspended");
    b.click(&format!("button[aria-label='Resume {SHOP}']"));
    wait_status(&edge, 200);
    let redirect = format!("select[aria-label='HTTP to HTTPS for {SHOP}']");
    b.click(&format!("{redirect} option[value='301']"));
    wait_status(&edge, 301);
    // The page has the answer (the select is enabled again, redrawn from the API).
    b.wait_js(
        "the redirect shown",
        "const s = document.querySelector(arguments[0]); return s && !s.disabled && s.value === '301'",
        vec![json!(redirect)],
    );
    b.screenshot("protections");
    b.click(&format!("{redirect} option[value='off']"));
    wait_status(&edge, 200);
    open(&b, &api, "applies", "Applies");
    b.wait_text("main tbody", &format!("domain put {SHOP}"));
    // The diff the domain's apply made: its route in hosts.map, as the API keeps it.
    let id = b.js(
        "return [...document.querySelectorAll('main tbody tr')].find(r => r.children[2].textContent === arguments[0]).dataset.key",
        vec![json!(format!("domain put {SHOP}"))],
    );
    let row = format!("main tbody tr[data-key='{}']", id.as_str().unwrap());
    b.click(&format!("{row} td:last-child > details > summary"));
    b.click(&format!("{row} details.diff-details > summary"));
    b.wait_text(&format!("{row} pre.diff"), "hosts.map (this apply)");
    let shown = b.wait_text(&format!("{row} pre.diff .add"), &format!("+{SHOP}"));
    let kept = api
        .get(&format!("/v1/applies/{}", id.as_str().unwrap()))
        .json;
    let diff = kept["diff"].as_str().unwrap_or_default();
    assert!(diff.contains(&shown), "{shown} not in {kept}");
    assert!(
        !diff.contains(&api.token) && !diff.contains("PRIVATE KEY"),
        "{diff}"
    );
    b.js(
        "document.querySelector(arguments[0]).scrollIntoView()",
        vec![json!(format!("{row} pre.diff"))],
    );
    b.screenshot("applies");
    open(&b, &api, "deliveries", "Deliveries");
    b.wait_text("main tbody", "No generation");
    b.screenshot("deliveries");

    // Keyboard: Tab from the skip link reaches the navigation, Enter follows it.
    b.js("document.querySelector('.skip').focus()", vec![]);
    b.press("\u{E004}");
    assert_eq!(
        b.js("return document.activeElement.textContent", vec![]),
        "Overview"
    );
    b.press("\u{E007}");
    b.wait_text("main h1", "Overview");

    // The time of the last poll changes every few seconds: not announced to screen readers.
    assert_eq!(
        b.js(
            "return document.getElementById('live').hasAttribute('aria-live')",
            vec![]
        ),
        false
    );

    // A phone: no page is wider than the screen.
    b.resize(390, 844);
    for (page, heading) in PAGES {
        open(&b, &api, page, heading);
        b.screenshot(&format!("{page}-phone"));
        let overflow = b.js(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
            vec![],
        );
        assert!(
            overflow.as_i64().unwrap() <= 0,
            "{page} is wider than the phone by {overflow} px"
        );
    }
    b.resize(1280, 900);

    // Sign out: the form again, and the old cookie opens nothing any more.
    let cookie = format!("hapctl_session={}", session["value"].as_str().unwrap());
    b.click("#signout");
    b.wait_js(
        "the sign-in form",
        "return !document.getElementById('signin').hidden && document.querySelector('main').children.length === 0",
        vec![],
    );
    b.screenshot("signed-out");
    for path in [
        "/v1/status",
        "/v1/domains",
        "/v1/blocked-ips",
        "/ui/session",
    ] {
        assert_eq!(fetch_status(&b, path), 401, "{path} from the page");
        let r = http_request(
            api.port,
            "GET",
            path,
            &[("Cookie", &cookie)],
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(r.status, 401, "{path} with the old cookie: {r:?}");
    }
    b.goto(&url(&api, "#/domains"));
    b.wait_js(
        "the sign-in form after a reload",
        "return !document.getElementById('signin').hidden && document.querySelectorAll('main tbody tr').length === 0",
        vec![],
    );
}

/// Waits for the page's passing message (a fixed element: not seen by `wait_text`).
fn wait_toast(b: &Browser, text: &str) {
    let shown = "return document.getElementById('toast').textContent";
    let found = b.try_wait_js(
        &format!("{shown}.includes(arguments[0])"),
        vec![json!(text)],
    );
    if found.is_err() {
        b.screenshot("failure");
        panic!(
            "the page never showed the message {text:?}; the last message was {}; screenshot failure.png",
            b.js(shown, vec![])
        );
    }
}

/// The serial of the leaf the HTTPS bind serves for `sni`, by a real handshake.
fn served_serial(edge: &Edge, sni: &str) -> String {
    let served = probe::handshake(edge.https_addr(), sni, Duration::from_secs(5)).unwrap();
    let leaf = served.chain.first().expect("a certificate");
    CertInfo::from_der(leaf).unwrap().serial
}

/// Types each `(field, value)` into the editor's form headed `title`, then submits it.
fn submit(b: &Browser, title: &str, fields: &[(&str, &str)]) {
    for (field, value) in fields {
        b.fill(field, value);
    }
    b.click(&format!(
        "form[aria-labelledby={title}] button[type=submit]"
    ));
}

#[test]
fn the_client_side_logic_passes_its_unit_tests() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/tests");
    let mut cmd = std::process::Command::new("node");
    cmd.arg("--test").arg(&dir);
    let out = testkit::run_bounded(cmd, Duration::from_secs(60));
    let text = testkit::describe(&out);
    assert!(
        out.status.success(),
        "node --test {}: {text}",
        dir.display()
    );
    let passed: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("# pass "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(passed >= 6, "some tests did not run: {text}");
}
