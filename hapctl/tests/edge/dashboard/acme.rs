//! ACME from the page against a real ACME CA (Pebble, testkit/src/pebble.rs): a certificate
//! ordered on the Certificates page (HTTP-01 answered by the edge itself) is listed and served
//! on the HTTPS bind, then renewed from its row: a new serial in the page and in a real
//! handshake; a wildcard ordered with DNS-01 (the hook publishing the TXT record in Pebble's
//! DNS server) serves every name under it; no reload for any of them.

use serde_json::json;

use super::{open, serve, served_serial, sign_in, wait_toast};
use hapctl::tls::x509::serial_matches;
use testkit::pebble::{dns_hook_path, Pebble};
use testkit::Edge;

const NAME: &str = "acme.example.com";

/// The serial the page shows in `name`'s row once it shows one other than `not`.
fn shown_serial(b: &super::Browser, name: &str, not: Option<&str>) -> String {
    let v = b.wait_js(
        "the certificate's serial in its row",
        "const e = document.querySelector(`main tbody tr[data-key='${arguments[0]}'] code.serial`); return e && e.textContent !== arguments[1] && e.textContent",
        vec![json!(name), json!(not.unwrap_or_default())],
    );
    v.as_str().unwrap().to_string()
}

#[test]
fn a_certificate_is_ordered_and_renewed_from_the_page_through_a_real_acme_ca() {
    let mut edge = Edge::new();
    // Declared after the edge, so it stops first.
    let pebble = Pebble::start(edge.port);
    let hook = dns_hook_path();
    edge.set_acme(&pebble.directory_url(), &pebble.ca_root_path(), Some(&hook));
    let (key, value) = pebble.hook_env();
    edge.set_env(&key, &value);
    edge.ok(&["haproxy", "start"]);
    let reloads = || edge.show_proc().master.reloads;
    let (api, b) = serve(&edge);
    sign_in(&b, &api);
    open(&b, &api, "certificates", "Certificates");
    b.screenshot("certificates-acme-before");
    let before = reloads();

    // Ordered from the page: issued by the CA, listed, served by a handshake.
    b.fill("#o-name", NAME);
    b.click("form[aria-labelledby=order-form-title] button[type=submit]");
    wait_toast(&b, &format!("{NAME} issued and served"));
    let row = format!("main tbody tr[data-key='{NAME}']");
    b.wait_text(&format!("{row} td"), "acme-http-01");
    let first = shown_serial(&b, NAME, None);
    let listed = api.get(&format!("/v1/certificates/{NAME}")).json;
    assert_eq!(listed["source"], "acme-http-01", "{listed}");
    assert_eq!(
        listed["serial"],
        first.as_str(),
        "the page shows the API's serial"
    );
    let served = served_serial(&edge, NAME);
    assert!(
        serial_matches(&served, &first),
        "served {served}, ordered {first}"
    );
    b.wait_text(&format!("{row} td"), "in ");
    b.screenshot("certificates-acme-ordered");

    // Renewed from its row: a new serial shown, served, and still no reload.
    b.click(&format!("button[aria-label='Renew {NAME}']"));
    wait_toast(&b, &format!("{NAME} renewed"));
    let second = shown_serial(&b, NAME, Some(&first));
    assert!(!serial_matches(&second, &first), "{second} = {first}");
    let served = served_serial(&edge, NAME);
    assert!(
        serial_matches(&served, &second),
        "served {served}, renewed {second}"
    );
    b.screenshot("certificates-acme-renewed");

    // A wildcard through DNS-01: every name under it is served the new certificate.
    let wildcard = "wildcard.example.test";
    b.fill("#o-name", wildcard);
    b.fill("#o-names", "*.example.test");
    b.click("form[aria-labelledby=order-form-title] input[type=checkbox]");
    b.click("form[aria-labelledby=order-form-title] button[type=submit]");
    wait_toast(&b, &format!("{wildcard} issued and served"));
    let row = format!("main tbody tr[data-key='{wildcard}']");
    b.wait_text(&format!("{row} td"), "acme-dns-01");
    b.wait_text(&format!("{row} td"), "*.example.test");
    let issued = shown_serial(&b, wildcard, None);
    for sni in ["a.example.test", "b.example.test"] {
        let served = served_serial(&edge, sni);
        assert!(
            serial_matches(&served, &issued),
            "{sni}: served {served}, issued {issued}"
        );
    }
    assert!(
        pebble.query_txt("_acme-challenge.example.test").is_empty(),
        "the hook was asked to clean up"
    );
    assert_eq!(reloads(), before, "an order or a renewal reloaded HAProxy");
    b.screenshot("certificates-acme-wildcard");
}
