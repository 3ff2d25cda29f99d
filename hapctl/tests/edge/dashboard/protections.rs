//! Protections and certificates changed from the page, each refusal at its field with nothing
//! changed: a domain's HSTS (sent by the HTTPS bind), its own rate limits (429 through the
//! edge for one client), the wordpress thresholds, the edge-wide limits, the WAF mode on an
//! edge without `[waf]`; a certificate bundle imported (served on the HTTPS bind), deleted.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::json;

use super::{open, serve, served_serial, sign_in, submit, wait_toast, SHOP, UNNAMED};
use hapctl::tls::x509::serial_matches;
use testkit::pki::TestCa;
use testkit::{self, Backend, Edge};

/// The `Strict-Transport-Security` header `SHOP` answers with on the HTTPS bind.
fn hsts(edge: &Edge) -> Option<String> {
    let mut curl = std::process::Command::new("curl");
    curl.args([
        "-sSk",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "--max-time",
        "5",
        "--resolve",
    ])
    .arg(format!("{SHOP}:{}:127.0.0.1", edge.https_port))
    .arg(format!("https://{SHOP}:{}/", edge.https_port));
    let out = testkit::run_bounded(curl, Duration::from_secs(10));
    assert!(out.status.success(), "curl: {}", testkit::describe(&out));
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("strict-transport-security")
            .then(|| v.trim().to_string())
    })
}

#[test]
fn protections_and_certificates_are_changed_from_the_page_with_refusals_at_their_fields() {
    let edge = Edge::started();
    let app = Backend::start("shop");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    // The browser suite's clients are local: not exempt here, so limits apply to them.
    edge.ok(&["limits", "set", "--local-exempt", "off"]);
    let (api, b) = serve(&edge);
    sign_in(&b, &api);
    open(&b, &api, "protections", "Protections");
    b.click(&format!(
        "button[aria-label='Edit the protections of {SHOP}']"
    ));
    b.wait_text("#pe-title", SHOP);
    let unnamed = b.js(UNNAMED, vec![]);
    assert_eq!(unnamed, json!([]), "the editor's controls without a name");

    // HSTS: a max-age of 0 refused at its field, nothing changed; then a year with
    // includeSubDomains, sent by the HTTPS bind.
    let before = api.get("/v1/domains?limit=1").json;
    submit(&b, "pe-https-title", &[("#pe-hsts_max_age", "0")]);
    b.wait_text("#pe-hsts_max_age-error", "hsts_max_age 0: must be 1 to");
    let invalid = "return document.getElementById(arguments[0]).getAttribute('aria-invalid')";
    assert_eq!(b.js(invalid, vec![json!("pe-hsts_max_age")]), "true");
    assert_eq!(
        api.get("/v1/domains?limit=1").json,
        before,
        "nothing changed"
    );
    assert_eq!(hsts(&edge), None);
    // This edge has no [waf]: any mode but off is refused at the mode, nothing changed.
    b.click("#pw-mode option[value='block']");
    submit(&b, "pe-waf-title", &[]);
    b.wait_text("#pw-mode-error", "needs the [waf] section in hapctl.toml");
    assert_eq!(b.js(invalid, vec![json!("pw-mode")]), "true");
    assert_eq!(
        api.get("/v1/domains?limit=1").json,
        before,
        "nothing changed"
    );
    b.click("#pw-mode option[value='off']");
    b.click("#pe-hsts_include_subdomains");
    submit(&b, "pe-https-title", &[("#pe-hsts_max_age", "31536000")]);
    wait_toast(&b, "HTTPS policy saved");
    let year = "max-age=31536000; includeSubDomains";
    assert_eq!(hsts(&edge).as_deref(), Some(year));
    b.wait_text("main tbody td", "HSTS 31536000 s");

    // Its own rate limit: a bad rule named at its field; a low one answers 429 through the edge.
    submit(&b, "pe-limits-title", &[("#pe-req_rate", "many:deny")]);
    b.wait_text("#pe-req_rate-error", "many");
    assert_eq!(
        api.get("/v1/limits").json["domains"],
        json!({}),
        "nothing changed"
    );
    submit(&b, "pe-limits-title", &[("#pe-req_rate", "3:deny-429")]);
    // The policy is checked whole: the soft tier must stay below the hard one.
    b.wait_text("#pe-req_rate_soft-error", "must be below req_rate (3)");
    submit(&b, "pe-limits-title", &[("#pe-req_rate_soft", "off")]);
    wait_toast(&b, "its own rate limits saved");
    let client = Ipv4Addr::new(127, 0, 0, 5);
    let got: Vec<u16> = (0..4)
        .map(|_| edge.get_from(client, SHOP, "/").status)
        .collect();
    assert_eq!(got, vec![200, 200, 200, 429]);
    assert_eq!(
        edge.get(SHOP, "/").status,
        200,
        "another client has its own counters"
    );
    // The security top lists that client; forgetting its counters serves it again.
    let forget = format!("button[aria-label='Forget the counters of {client}']");
    b.wait_text("main tbody th", &client.to_string());
    b.click(&forget);
    b.wait_js(
        "the client gone from the security top",
        "return document.querySelector(arguments[0]) === null",
        vec![json!(forget)],
    );
    assert_eq!(
        edge.get_from(client, SHOP, "/").status,
        200,
        "counters forgotten"
    );
    b.wait_text("main tbody td", "own · use default");

    // WordPress thresholds: 0 refused at its field; 5 kept.
    b.click("#pe-profiles");
    submit(&b, "pe-wp-title", &[("#pe-wp_login_posts", "0")]);
    b.wait_text("#pe-wp_login_posts-error", "wp_login_posts");
    submit(&b, "pe-wp-title", &[("#pe-wp_login_posts", "5")]);
    wait_toast(&b, "wordpress profile saved");
    let shown = api.get("/v1/domains?limit=1").json["domains"][0]["protections"].clone();
    assert_eq!(
        (shown["profiles"].clone(), shown["wp_login_posts"].clone()),
        (json!(["wordpress"]), json!(5)),
        "{shown}"
    );
    b.wait_text("main tbody td", "wordpress");
    b.screenshot("protections-edit");
    // The row's switch turns the profile off and keeps the thresholds.
    b.click(&format!(
        "button[aria-label='Remove the wordpress profile on {SHOP}']"
    ));
    wait_toast(&b, "wordpress off");
    let kept = api.get("/v1/domains?limit=1").json["domains"][0]["protections"].clone();
    assert_eq!(
        (kept["profiles"].clone(), kept["wp_login_posts"].clone()),
        (json!([]), json!(5)),
        "{kept}"
    );

    // The edge-wide limits: a bad default rule and a window of 0 refused at their fields,
    // nothing changed; then a default of 2 requests, which SHOP follows again from its row.
    let limits_before = api.get("/v1/limits").json;
    submit(&b, "pl-edit-title", &[("#pl-req_rate", "lots:deny")]);
    b.wait_text("#pl-req_rate-error", "lots");
    submit(
        &b,
        "pl-edit-title",
        &[
            ("#pl-req_rate", "2:deny-429"),
            ("#pl-req_rate_soft", "off"),
            ("#pl-req_window", "0"),
        ],
    );
    b.wait_text("#pl-req_window-error", "req_window");
    assert_eq!(b.js(invalid, vec![json!("pl-req_window")]), "true");
    assert_eq!(api.get("/v1/limits").json, limits_before, "nothing changed");
    submit(&b, "pl-edit-title", &[("#pl-req_window", "10")]);
    wait_toast(&b, "edge-wide limits saved");
    let now = api.get("/v1/limits").json;
    assert_eq!(
        (
            &now["default"]["req_rate"],
            &now["windows"]["req"],
            &now["local_exempt"]
        ),
        (&json!("2:deny-429"), &json!(10), &json!(false)),
        "{now}"
    );
    b.click(&format!(
        "button[aria-label='{SHOP}: follow the default rate limits']"
    ));
    wait_toast(&b, "follows the default limits");
    let client = Ipv4Addr::new(127, 0, 0, 6);
    let got: Vec<u16> = (0..3)
        .map(|_| edge.get_from(client, SHOP, "/").status)
        .collect();
    assert_eq!(
        got,
        vec![200, 200, 429],
        "the default policy through the edge"
    );
    b.screenshot("protections-edge-limits");

    // A certificate imported through the page: a bundle without its key refused at the PEM
    // field, nothing changed; the whole bundle listed and served on the HTTPS bind.
    let ca = TestCa::new("dashboard");
    let leaf = ca.leaf(&[SHOP]);
    let bundle = ca.bundle(&leaf);
    open(&b, &api, "certificates", "Certificates");
    let paste = "const e = document.getElementById('c-pem'); e.value = arguments[0]; e.dispatchEvent(new Event('input'))";
    let import = |pem: &str| {
        b.js(paste, vec![json!(pem)]);
        submit(&b, "cert-form-title", &[("#c-name", SHOP)]);
    };
    let without_key = bundle.replace(&leaf.key_pem, "");
    assert_ne!(without_key, bundle);
    import(&without_key);
    let refusal = b.wait_js(
        "the refusal at the PEM field",
        "const e = document.getElementById('c-pem-error'); return document.getElementById('c-pem').getAttribute('aria-invalid') === 'true' && e.textContent",
        vec![],
    );
    assert!(refusal.as_str().unwrap().contains("key"), "{refusal}");
    let listed = || {
        api.get("/v1/certificates").json["certificates"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(listed(), 1, "only the default");
    import(&bundle);
    wait_toast(&b, &format!("{SHOP} served"));
    b.wait_text("main tbody th", SHOP);
    b.wait_text("main tbody", "upload");
    assert_eq!(listed(), 2);
    let serial = served_serial(&edge, SHOP);
    assert!(serial_matches(&serial, &leaf.serial), "{serial}");
    // The key does not stay in the page once it is served.
    let left = b.js("return document.getElementById('c-pem').value", vec![]);
    assert_eq!(left, "", "the PEM field keeps the key");
    b.screenshot("certificates-imported");
    // Deleted from the page (asked twice): the default certificate answers again.
    let delete = format!("button[aria-label='Delete {SHOP}']");
    b.click(&delete);
    b.click(&delete);
    wait_toast(&b, &format!("{SHOP} deleted"));
    assert_eq!(listed(), 1);
    assert!(
        !serial_matches(&served_serial(&edge, SHOP), &leaf.serial),
        "still served"
    );
}
