//! Trusted proxies from the Protections page: a hostile network refused at its field with
//! nothing changed; a proxy added from the page has its X-Forwarded-For believed through the
//! edge (a block of the forwarded address answers 403 to requests through it, and only through
//! it); removed from the page, the header is not believed any more. Cloudflare's preset: a
//! pasted list with a bad line names the line and changes nothing; the shipped list trusted
//! and removed whole.

use std::net::Ipv4Addr;

use serde_json::json;

use super::{shop_on_page, wait_toast, SHOP};
use testkit::{http_get, Edge};

const PROXY: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);
const FORWARDED: &str = "198.51.100.20";

/// The status `SHOP` answers a request from `peer` that says it forwards for `FORWARDED`.
fn via(edge: &Edge, peer: Ipv4Addr) -> u16 {
    let headers = [("X-Forwarded-For", FORWARDED)];
    http_get(Some(peer), edge.port, SHOP, "/", &headers).status
}

#[test]
fn a_trusted_proxy_is_added_and_removed_from_the_page_and_believed_through_the_edge() {
    let (edge, _app, api, b) = shop_on_page("protections", "Protections");
    edge.ok(&["block", "add", FORWARDED]);
    b.wait_text("main tbody", "No trusted proxy");
    assert_eq!(
        via(&edge, PROXY),
        200,
        "not trusted yet: the header is removed"
    );

    // Hostile input: refused at the field, shown as text, nothing changed.
    let live = edge.live_files();
    let applies = api.get("/v1/applies").json;
    for (typed, said) in [
        ("0.0.0.0/0", "a /0 covers every address"),
        ("127.0.0.3/33", "longer than 32"),
        ("<img src=x onerror=alert(1)>", "contains whitespace"),
    ] {
        b.fill("#tp-net", typed);
        b.click("form[aria-labelledby=tp-title] button[type=submit]");
        let error = b.wait_text("#tp-net-error", said);
        assert!(error.contains(typed), "{typed}: {error}");
        assert_eq!(
            b.js(
                "return document.getElementById('tp-net').getAttribute('aria-invalid')",
                vec![]
            ),
            "true"
        );
    }
    assert_eq!(
        b.js("return document.querySelectorAll('img').length", vec![]),
        0
    );
    assert_eq!(api.get("/v1/trusted-proxies").json, json!({"proxies": []}));
    assert_eq!(edge.live_files(), live, "the live files changed");
    assert_eq!(api.get("/v1/applies").json, applies, "an apply ran");
    b.screenshot("protections-proxy-refused");

    // Trusted from the page: the forwarded client is who the block applies to.
    b.fill("#tp-net", &PROXY.to_string());
    b.click("form[aria-labelledby=tp-title] button[type=submit]");
    wait_toast(&b, &format!("{PROXY} trusted"));
    b.wait_text("main tbody th", &PROXY.to_string());
    b.wait_text("main tbody td", "added by hand");
    assert_eq!(
        api.get("/v1/trusted-proxies").json,
        json!({"proxies": [{"net": PROXY.to_string(), "preset": null}]})
    );
    assert_eq!(via(&edge, PROXY), 403, "the forwarded address is blocked");
    assert_eq!(
        via(&edge, OTHER),
        200,
        "another peer's header is not believed"
    );
    b.screenshot("protections-proxy-trusted");

    // Removed (asked twice): the header is removed again.
    let remove = format!("button[aria-label='Remove trusted proxy {PROXY}']");
    b.click(&remove);
    b.click(&remove);
    wait_toast(&b, &format!("{PROXY} no longer trusted"));
    b.wait_text("main tbody", "No trusted proxy");
    assert_eq!(via(&edge, PROXY), 200);

    // A preset: a newer list with a bad line is refused at its line, nothing trusted; the
    // shipped list is trusted and removed as one.
    let preset = "form[aria-labelledby=tpp-title] button[type=submit]";
    b.fill(
        "#tpp-nets",
        "# cloudflare.com/ips\n173.245.48.0/20\n0.0.0.0/0",
    );
    b.click(preset);
    b.wait_text("#tpp-nets-error", "line 3: ");
    assert_eq!(api.get("/v1/trusted-proxies").json, json!({"proxies": []}));
    b.fill("#tpp-nets", "");
    b.click(preset);
    wait_toast(&b, "cloudflare trusted");
    b.wait_text("main tbody th", "2c0f:f248::/32");
    let listed = api.get("/v1/trusted-proxies").json;
    let from = |p: &str| {
        listed["proxies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["preset"] == p)
            .count()
    };
    assert_eq!(from("cloudflare"), 22, "{listed}");
    let remove = "button[aria-label='Remove the cloudflare preset']";
    b.click(remove);
    b.click(remove);
    wait_toast(&b, "cloudflare no longer trusted");
    b.wait_text("main tbody", "No trusted proxy");
}
