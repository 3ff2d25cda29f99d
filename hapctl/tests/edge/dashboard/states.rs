//! Smaller parts of the pages: a domain's rate-limit preset chosen in its editor (off, then
//! standard) is what the API then holds; "Renew all due" on the Certificates page says what it
//! did (nothing is due on this edge); the blocked maps rebuilt from the Blocks page, the block
//! still enforced; the Overview's notice of a server whose host name does not resolve; the
//! Deliveries page shows an error state for each list it cannot read (the daemon gone).

use std::net::Ipv4Addr;

use hapctl::model::LimitPolicy;
use serde_json::json;

use super::{open, shop_on_page, wait_toast, SHOP};

#[test]
fn a_limits_preset_renewals_a_block_sync_and_the_deliveries_error_states() {
    let (edge, _app, mut api, b) = shop_on_page("protections", "Protections");
    b.click(&format!(
        "button[aria-label='Edit the protections of {SHOP}']"
    ));
    b.wait_text("#pe-title", SHOP);
    let own = || api.get("/v1/limits").json["domains"][SHOP].clone();
    for preset in ["off", "standard"] {
        b.click(&format!("#pe-preset option[value='{preset}']"));
        b.click("form[aria-labelledby=pe-limits-title] button[type=submit]");
        wait_toast(&b, "its own rate limits saved");
        let want = serde_json::to_value(LimitPolicy::preset(preset).unwrap()).unwrap();
        b.wait_text("main tbody td", "own · use default");
        assert_eq!(own(), want, "{preset}");
        b.js("document.getElementById('toast').textContent = ''", vec![]);
    }
    b.screenshot("protections-limits-preset");

    open(&b, &api, "certificates", "Certificates");
    b.click("#c-renew-due");
    b.wait_text("#c-renew-outcome", "No certificate is due for renewal.");
    assert_eq!(
        api.call("POST", "/v1/renewals", None).json,
        json!({"renewals": []})
    );

    edge.ok(&["block", "add", "127.0.0.8"]);
    open(&b, &api, "blocks", "Blocks");
    b.click("#b-sync");
    b.wait_text("#b-sync-outcome", "Rebuilt: ");
    assert_eq!(
        edge.get_from(Ipv4Addr::new(127, 0, 0, 8), SHOP, "/").status,
        403
    );

    edge.ok(&["domain", "add", "blog.test", "--server", "wp_site_1:80"]);
    open(&b, &api, "overview", "Overview");
    b.wait_text("#ov-names", "1 server(s) do not resolve now");
    b.wait_text("#ov-names", "wp_site_1: blog.test, server s1");
    b.wait_text(
        "#ov-names",
        "until its name resolves at a reload; set [resolvers]",
    );
    b.screenshot("overview-unresolved");

    open(&b, &api, "deliveries", "Deliveries");
    b.wait_text("main tbody", "No delivery yet");
    b.wait_text("main tbody", "No proof yet");
    api.kill();
    b.wait_text("main .state.error", "Cannot list the deliveries:");
    b.wait_text("main .state.error", "Cannot list the proofs:");
    b.wait_text("main .state.error", "Cannot read the generations:");
    b.screenshot("deliveries-errors");
}
