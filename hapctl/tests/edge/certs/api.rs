//! The daemon's certificate routes against the real HAProxy and, for ACME, a real Pebble: the
//! `/v1/certificates` routes (import served without a reload, list, show, delete, bad bundles
//! refused with nothing written, the hostile corpus), a domain's HTTPS policy, the edge
//! manager's `/api/ssl*` and `/api/certificates*` routes with the shapes of `PEER-API.md`
//! §1.2 (E1/E3 envelopes, 207, the two-call DNS-01 flow), and renewal by the daemon itself
//! (worker, backoff, metrics, status).

// The edge manager's routes and renewal.
mod compat;
mod renewal;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use hapctl::tls::probe;
use hapctl::tls::x509::{serial_matches, CertInfo};
use testkit::daemon::{http_request, ApiClient, ApiResponse, Daemon};
use testkit::pebble::Pebble;
use testkit::pki::TestCa;
use testkit::{Backend, Edge};

const TIMEOUT: Duration = Duration::from_secs(5);
const SHOP: &str = "shop.example.com";

fn reloads(edge: &Edge) -> u32 {
    edge.show_proc().master.reloads
}

/// The leaf a handshake with `sni` gets from the edge's HTTPS bind.
fn served(edge: &Edge, sni: &str) -> CertInfo {
    let s = probe::handshake(edge.https_addr(), sni, TIMEOUT)
        .unwrap_or_else(|e| panic!("handshake with SNI {sni}: {e}"));
    CertInfo::from_der(s.chain.first().expect("a certificate")).expect("a parsable leaf")
}

fn assert_served(edge: &Edge, sni: &str, serial: &str) {
    let seen = served(edge, sni).serial;
    assert!(
        serial_matches(&seen, serial),
        "SNI {sni}: serial {seen}, want {serial}"
    );
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

fn assert_keys(v: &Value, want: &[&str]) {
    assert_eq!(keys(v), want.iter().copied().collect(), "{v}");
}

/// E1 exactly: `{"status":"error","message":…}`.
fn assert_e1(r: &ApiResponse, status: u16, message: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_keys(&r.json, &["status", "message"]);
    assert_eq!(r.json["status"], "error", "{r:?}");
    let m = r.json["message"].as_str().unwrap();
    assert!(m.contains(message), "message {m:?} lacks {message:?}");
}

/// E3 exactly: `{"success":false,"error":…}`.
fn assert_e3(r: &ApiResponse, status: u16, message: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_keys(&r.json, &["success", "error"]);
    assert_eq!(r.json["success"], false, "{r:?}");
    let m = r.json["error"].as_str().unwrap();
    assert!(m.contains(message), "error {m:?} lacks {message:?}");
}

fn no_key(r: &ApiResponse) {
    assert!(
        !r.text.contains("PRIVATE KEY"),
        "a private key in the answer: {}",
        r.text
    );
}

/// One sample of the Prometheus text, e.g. `hapctl_certificate_renewals_total`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// An edge (not started) whose `[acme]` points at a fresh Pebble validating HTTP-01 on the
/// edge's HTTP bind. Drop the Pebble before the edge.
fn acme_edge() -> (Edge, Pebble) {
    let edge = Edge::new();
    let pebble = Pebble::start(edge.port);
    edge.set_acme(&pebble.directory_url(), &pebble.ca_root_path(), None);
    (edge, pebble)
}

fn put_bundle(api: &ApiClient, name: &str, pem: &str, names: &[&str]) -> ApiResponse {
    let mut body = json!({ "pem": pem });
    if !names.is_empty() {
        body["names"] = json!(names);
    }
    api.call("PUT", &format!("/v1/certificates/{name}"), Some(&body))
}

#[test]
fn imported_certificates_are_served_listed_shown_and_removed_with_no_reload() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let before = reloads(&edge);
    let ca = TestCa::new("api");

    let first = ca.leaf(&[SHOP]);
    let r = put_bundle(&api, SHOP, &ca.bundle(&first), &[]);
    assert_eq!(r.status, 201, "{r:?}");
    no_key(&r);
    assert_eq!(r.json["installed"], "runtime", "{r:?}");
    assert_eq!(r.json["reloads"], 0, "{r:?}");
    assert_eq!(r.json["handshake_sni"], SHOP, "{r:?}");
    assert!(serial_matches(
        r.json["serial"].as_str().unwrap(),
        &first.serial
    ));
    assert_served(&edge, SHOP, &first.serial);

    // A replacement is a 200, served at once.
    let second = ca.leaf(&[SHOP, "www.shop.example.com"]);
    let r = put_bundle(&api, SHOP, &ca.bundle(&second), &[SHOP]);
    assert_eq!(r.status, 200, "{r:?}");
    assert_served(&edge, SHOP, &second.serial);
    assert_served(&edge, "www.shop.example.com", &second.serial);

    let list = api.get("/v1/certificates");
    assert_eq!(list.status, 200, "{list:?}");
    no_key(&list);
    assert_keys(&list.json, &["certificates"]);
    let all = list.json["certificates"].as_array().unwrap();
    let names: BTreeSet<&str> = all.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, BTreeSet::from(["default", SHOP]), "{list:?}");
    let shop = api.get(&format!("/v1/certificates/{SHOP}"));
    assert_eq!(shop.status, 200, "{shop:?}");
    no_key(&shop);
    assert_eq!(shop.json["source"], "upload");
    assert_eq!(
        shop.json["serves"],
        json!([SHOP, "www.shop.example.com"]),
        "{shop:?}"
    );
    assert!(serial_matches(
        shop.json["serial"].as_str().unwrap(),
        &second.serial
    ));
    let r = api.get("/v1/certificates/absent.example.com");
    assert_eq!((r.status, r.error_code()), (404, "not_found"), "{r:?}");

    // Status and metrics see it.
    let status = api.get("/v1/status");
    assert_eq!(status.json["certificates"]["count"], 2, "{status:?}");
    assert_eq!(status.json["certificates"]["failing"], json!([]));
    let metrics = api.get("/metrics").text;
    let left = sample(
        &metrics,
        &format!("hapctl_certificate_expiry_seconds{{name=\"{SHOP}\"}}"),
    )
    .unwrap_or_else(|| panic!("no expiry for {SHOP}:\n{metrics}"));
    assert!(left > 80.0 * 86_400.0 && left < 91.0 * 86_400.0, "{left}");

    // Bad bundles: 400 naming the problem, nothing written, the old one still served.
    let files = edge.live_files();
    let stranger = ca.leaf(&[SHOP]);
    let mismatched = format!(
        "{}{}{}",
        second.cert_pem, ca.intermediate_pem, stranger.key_pem
    );
    let other = ca.leaf(&["other.example.com"]);
    for (what, name, pem, names, code) in [
        (
            "a key of another certificate",
            SHOP,
            mismatched.as_str(),
            vec![],
            "key_mismatch",
        ),
        (
            "names not covered",
            SHOP,
            &ca.bundle(&other),
            vec![],
            "names_not_covered",
        ),
        (
            "names not covered (asked)",
            "other",
            &ca.bundle(&other),
            vec!["x.example.com"],
            "names_not_covered",
        ),
        ("garbage", SHOP, "hello", vec![], ""),
        (
            "the key alone",
            SHOP,
            stranger.key_pem.as_str(),
            vec![],
            "bundle_no_certificate",
        ),
    ] {
        let r = put_bundle(&api, name, pem, &names);
        assert_eq!(r.status, 400, "{what}: {r:?}");
        assert_eq!(r.error_field(), "pem", "{what}: {r:?}");
        if !code.is_empty() {
            assert_eq!(r.error_code(), code, "{what}: {r:?}");
        }
        no_key(&r);
    }
    for (what, body, field) in [
        ("no pem", json!({"names": [SHOP]}), "pem"),
        (
            "a bad name",
            json!({"pem": "x", "names": ["bad name"]}),
            "names[0]",
        ),
        (
            "names not a list",
            json!({"pem": "x", "names": SHOP}),
            "names",
        ),
        ("an unknown field", json!({"pem": "x", "key": "y"}), "key"),
    ] {
        let r = api.call("PUT", &format!("/v1/certificates/{SHOP}"), Some(&body));
        assert_eq!(r.status, 400, "{what}: {r:?}");
        assert!(r.error_field().contains(field), "{what}: {r:?}");
    }
    let r = put_bundle(&api, "Bad..Name", &ca.bundle(&second), &[]);
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(edge.live_files(), files, "a refused bundle changed a file");
    assert_served(&edge, SHOP, &second.serial);

    // Removal: its names fall back to the default certificate.
    let r = api.call("DELETE", &format!("/v1/certificates/{SHOP}"), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["installed"], "runtime", "{r:?}");
    assert!(!serial_matches(&served(&edge, SHOP).serial, &second.serial));
    assert_eq!(api.get(&format!("/v1/certificates/{SHOP}")).status, 404);
    let r = api.call("DELETE", &format!("/v1/certificates/{SHOP}"), None);
    assert_eq!((r.status, r.error_code()), (404, "not_found"), "{r:?}");
    let r = api.call("DELETE", "/v1/certificates/default", None);
    assert_eq!((r.status, r.error_code()), (400, "refused"), "{r:?}");
    assert_eq!(
        reloads(&edge),
        before,
        "certificate routes reloaded HAProxy"
    );
}

#[test]
fn every_bundle_of_the_hostile_corpus_is_refused_through_the_api_and_nothing_is_written() {
    let edge = Edge::started();
    let api = Daemon::start(&edge);
    let before = reloads(&edge);
    let files = edge.live_files();
    let listed = api.get("/v1/certificates").text;
    let corpus = testkit::tls_corpus::hostile_corpus_at(hapctl::clock::unix_now());
    assert!(corpus.len() >= 30, "only {} cases", corpus.len());
    let mut wrong = Vec::new();
    let mut inexact = 0;
    for case in &corpus {
        // JSON carries text: bytes that are not UTF-8 arrive replaced, so only the refusal
        // is asserted for those, not its code.
        let (pem, exact) = match std::str::from_utf8(&case.input) {
            Ok(text) => (text.to_string(), true),
            Err(_) => {
                inexact += 1;
                (String::from_utf8_lossy(&case.input).into_owned(), false)
            }
        };
        let names: Vec<&str> = case.must_cover.iter().map(String::as_str).collect();
        // Not a host name, so only `names` says what it must cover.
        let r = put_bundle(&api, "hostile_case", &pem, &names);
        let message = r.json["error"]["message"].as_str().unwrap_or("");
        let mut problems = Vec::new();
        if r.status != 400 {
            problems.push(format!("status {}", r.status));
        }
        if exact && r.error_code() != case.code {
            problems.push(format!("code {:?}, want {:?}", r.error_code(), case.code));
        }
        if exact && !message.contains(&case.fragment) {
            problems.push(format!("message lacks {:?}", case.fragment));
        }
        if let Some(f) = testkit::tls_corpus::key_fragments(&case.input)
            .iter()
            .find(|f| r.text.contains(f.as_str()))
        {
            problems.push(format!("the answer quotes the key ({f})"));
        }
        if !problems.is_empty() {
            wrong.push(format!(
                "{}: {}: {}",
                case.name,
                problems.join(", "),
                r.text
            ));
        }
    }
    eprintln!(
        "{} hostile bundles refused through PUT /v1/certificates ({inexact} not UTF-8: refusal only)",
        corpus.len()
    );
    assert!(
        wrong.is_empty(),
        "{} case(s):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert_eq!(edge.live_files(), files, "a refused bundle changed a file");
    assert!(edge.temp_files().is_empty(), "{:?}", edge.temp_files());
    assert_eq!(api.get("/v1/certificates").text, listed);
    assert_eq!(reloads(&edge), before);
}

#[test]
fn the_https_policy_route_changes_redirects_at_runtime_with_no_reload() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let api = Daemon::start(&edge);
    let before = reloads(&edge);
    let get = |path: &str| {
        http_request(edge.port, "GET", path, &[("Host", SHOP)], None, TIMEOUT).unwrap()
    };
    let route = format!("/v1/domains/{SHOP}/https");

    let body =
        json!({"redirect": "308", "hsts_max_age": 31_536_000, "hsts_include_subdomains": true});
    let r = api.call("PUT", &route, Some(&body));
    assert_eq!(r.status, 200, "{r:?}");
    assert_keys(&r.json, &["result", "apply"]);
    assert_eq!(r.json["apply"]["reloads"], 0, "{r:?}");
    let answer = get("/cart?x=1");
    assert_eq!(answer.status, 308, "{answer:?}");
    let location = answer.header("location").unwrap_or("");
    assert!(
        location.starts_with("https://shop.example.com"),
        "{location}"
    );
    assert!(location.ends_with("/cart?x=1"), "{location}");
    // The ACME path is never redirected (HTTP-01 must reach HAProxy's token map).
    assert_ne!(get("/.well-known/acme-challenge/abc").status, 308);

    let r = api.call("PUT", &route, Some(&json!({"redirect": "301"})));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get("/").status, 301);
    let r = api.call("PUT", &route, Some(&json!({"redirect": "off"})));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get("/").status, 200);

    for (what, body, status, field) in [
        ("302", json!({"redirect": "302"}), 400, "redirect"),
        ("a number", json!({"redirect": 301}), 400, "redirect"),
        (
            "max-age 0",
            json!({"redirect": "off", "hsts_max_age": 0}),
            400,
            "hsts_max_age",
        ),
        (
            "max-age too long",
            json!({"redirect": "off", "hsts_max_age": 99_999_999_999u64}),
            400,
            "hsts_max_age",
        ),
        (
            "subdomains alone",
            json!({"redirect": "off", "hsts_include_subdomains": true}),
            400,
            "hsts_include_subdomains",
        ),
        ("no redirect", json!({}), 400, "redirect"),
        (
            "unknown field",
            json!({"redirect": "off", "hsts": 1}),
            400,
            "hsts",
        ),
    ] {
        let r = api.call("PUT", &route, Some(&body));
        assert_eq!(r.status, status, "{what}: {r:?}");
        assert!(r.error_field().contains(field), "{what}: {r:?}");
    }
    let r = api.call(
        "PUT",
        "/v1/domains/absent.example.com/https",
        Some(&json!({"redirect": "308"})),
    );
    assert_eq!((r.status, r.error_code()), (404, "not_found"), "{r:?}");
    assert_eq!(reloads(&edge), before, "the HTTPS policy reloaded HAProxy");
}

#[test]
fn suspension_routes_switch_the_503_page_at_runtime_with_no_reload() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let api = Daemon::start(&edge);
    let before = reloads(&edge);
    let get = || http_request(edge.port, "GET", "/", &[("Host", SHOP)], None, TIMEOUT).unwrap();
    let r = api.call("POST", &format!("/v1/domains/{SHOP}/suspend"), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["apply"]["reloads"], 0, "{r:?}");
    assert_eq!(get().status, 503);
    let r = api.call("POST", &format!("/v1/domains/{SHOP}/resume"), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get().status, 200);
    let r = api.call("POST", "/v1/domains/absent.example.com/suspend", None);
    assert_eq!((r.status, r.error_code()), (404, "not_found"), "{r:?}");
    assert_eq!(reloads(&edge), before, "suspension reloaded HAProxy");
}
