//! The edge manager's certificate routes against Pebble: the shapes of `PEER-API.md` §1.2
//! (fields, status codes, 207, E1 and E3), downloads, and the two-call DNS-01 flow with the
//! test playing the operator who publishes the TXT record.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::{
    acme_edge, assert_e1, assert_e3, assert_keys, assert_served, no_key, reloads, sample, served,
    SHOP,
};
use hapctl::tls::x509::serial_matches;
use testkit::daemon::{http_call, Daemon};

#[test]
fn the_edge_managers_certificate_routes_keep_their_shapes_against_a_real_ca() {
    let (edge, _pebble) = acme_edge();
    edge.ok(&["haproxy", "start"]);
    let api = Daemon::start(&edge);
    let before = reloads(&edge);
    let certs_dir = edge.path("live/certs");
    let pem_of = |name: &str| certs_dir.join(format!("{name}.pem")).display().to_string();

    // A name that is not a host name is refused before anything is ordered.
    let r = api.call(
        "POST",
        "/api/certificates/request",
        Some(&json!({"domains": [SHOP, "bad_name!"]})),
    );
    assert_eq!(r.status, 400, "{r:?}");
    assert_keys(&r.json, &["status", "message"]);
    assert!(
        r.json["message"].as_str().unwrap().contains("bad_name!"),
        "{r:?}"
    );

    // POST /api/certificates/request: per-domain results, 207 when mixed (a wildcard needs
    // DNS-01, and this edge has no hook).
    let r = api.call(
        "POST",
        "/api/certificates/request",
        Some(&json!({"domains": [SHOP, "*.nohook.example.com"]})),
    );
    assert_eq!(r.status, 207, "{r:?}");
    assert_keys(&r.json, &["status", "summary", "results"]);
    assert_eq!(r.json["status"], "completed");
    assert_eq!(
        r.json["summary"],
        json!({"total": 2, "successful": 1, "failed": 1})
    );
    let ok = &r.json["results"][0];
    assert_keys(
        ok,
        &[
            "domain",
            "status",
            "message",
            "cert_path",
            "domains_covered",
        ],
    );
    assert_eq!(ok["domain"], SHOP);
    assert_eq!(ok["status"], "success");
    assert_eq!(ok["message"], "Certificate obtained successfully");
    assert_eq!(ok["cert_path"], pem_of(SHOP));
    assert_eq!(ok["domains_covered"], json!([SHOP, "www.shop.example.com"]));
    let failed = &r.json["results"][1];
    assert_keys(failed, &["domain", "status", "message"]);
    assert_eq!(
        (&failed["domain"], &failed["status"]),
        (&json!("*.nohook.example.com"), &json!("error"))
    );
    let issued = served(&edge, "www.shop.example.com");
    assert!(
        issued.names.contains(&SHOP.to_string()),
        "{:?}",
        issued.names
    );
    assert!(
        issued.issuer.to_lowercase().contains("pebble"),
        "{}",
        issued.issuer
    );

    // A current certificate is kept (one string is a list of one); force_renewal orders again.
    let r = api.call(
        "POST",
        "/api/certificates/request",
        Some(&json!({"domains": SHOP})),
    );
    assert_eq!(
        (r.status, r.json["summary"]["successful"].clone()),
        (200, json!(1)),
        "{r:?}"
    );
    assert_served(&edge, SHOP, &issued.serial);
    let r = api.call(
        "POST",
        "/api/certificates/request",
        Some(&json!({"domains": [SHOP], "force_renewal": true, "include_www": false})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["results"][0]["domains_covered"], json!([SHOP]));
    let renewed = served(&edge, SHOP);
    assert!(
        !serial_matches(&renewed.serial, &issued.serial),
        "not ordered again"
    );
    let r = api.call(
        "POST",
        "/api/certificates/request",
        Some(&json!({"domains": ["*.nohook.example.com"]})),
    );
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(
        r.json["summary"],
        json!({"total": 1, "successful": 0, "failed": 1})
    );
    for body in [json!({"domains": []}), json!({}), json!({"domains": null})] {
        let r = api.call("POST", "/api/certificates/request", Some(&body));
        assert_e1(&r, 400, "At least one domain is required");
    }

    // POST /api/ssl.
    let r = api.call(
        "POST",
        "/api/ssl",
        Some(&json!({"domain": "api.example.com"})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"status": "success", "domain": "api.example.com", "cert_path": pem_of("api.example.com"),
            "message": "Certificate obtained successfully"})
    );
    assert!(served(&edge, "api.example.com")
        .names
        .contains(&"api.example.com".to_string()));
    for body in [json!({}), json!({"domain": ""}), json!({"domain": null})] {
        assert_e1(
            &api.call("POST", "/api/ssl", Some(&body)),
            400,
            "Domain is required",
        );
    }
    assert_e1(
        &api.call("POST", "/api/ssl", Some(&json!({"domain": 5}))),
        400,
        "domain",
    );
    assert_e1(
        &api.call("POST", "/api/ssl", Some(&json!({"domain": "a b"}))),
        400,
        "domain",
    );
    let r = api.raw("POST", "/api/ssl", Some(b"domain=x"), Some("text/plain"));
    assert_e1(&r, 415, "JSON");

    // POST /api/ssl/bundle.
    let sans = json!(["Alt.Example.com", " ", "alt.example.com"]);
    let r = api.call(
        "POST",
        "/api/ssl/bundle",
        Some(&json!({"primary": " bundle.example.com ", "sans": sans})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"status": "success", "primary": "bundle.example.com", "names": ["bundle.example.com", "alt.example.com"],
            "cert_path": pem_of("bundle.example.com"), "cleanup": {"removed": [], "errors": [], "skipped": []},
            "message": "Bundled certificate obtained for 2 names"})
    );
    assert!(served(&edge, "alt.example.com")
        .names
        .contains(&"bundle.example.com".to_string()));
    let many: Vec<String> = (0..100).map(|i| format!("n{i}.example.com")).collect();
    for (body, message) in [
        (Value::Null, "\"primary\" is required"),
        (
            json!({"sans": ["a.example.com"]}),
            "\"primary\" is required",
        ),
        (
            json!({"primary": "localhost"}),
            "invalid primary: 'localhost'",
        ),
        (json!({"primary": 5}), "invalid primary: 5"),
        (
            json!({"primary": "a.example.com", "sans": "b.example.com"}),
            "\"sans\" must be a list",
        ),
        (
            json!({"primary": "a.example.com", "sans": [5]}),
            "invalid SAN entry: 5",
        ),
        (
            json!({"primary": "a.example.com", "sans": [null]}),
            "invalid SAN entry: None",
        ),
        (
            json!({"primary": "a.example.com", "sans": ["-x.com"]}),
            "invalid SAN: '-x.com'",
        ),
        (
            json!({"primary": "a.example.com", "sans": many}),
            "Too many SANs (101); Let's Encrypt limit is 100",
        ),
    ] {
        let bytes = serde_json::to_vec(&body).unwrap();
        let r = api.raw(
            "POST",
            "/api/ssl/bundle",
            Some(&bytes),
            Some("application/json"),
        );
        assert_e1(&r, 400, message);
        assert_eq!(r.json["message"], message, "{r:?}");
    }

    // GET /api/certificates/status: one entry per served host name.
    let r = api.get("/api/certificates/status");
    assert_eq!(r.status, 200, "{r:?}");
    assert_keys(&r.json, &["certificates"]);
    let entries = r.json["certificates"].as_array().unwrap();
    let hosts: BTreeSet<&str> = entries
        .iter()
        .map(|e| e["domain"].as_str().unwrap())
        .collect();
    let want = [
        SHOP,
        "api.example.com",
        "bundle.example.com",
        "alt.example.com",
    ];
    assert_eq!(hosts, want.into_iter().collect(), "{r:?}");
    for e in entries {
        assert_keys(
            e,
            &[
                "domain",
                "ssl_enabled",
                "cert_path",
                "expires",
                "days_until_expiry",
            ],
        );
        assert_eq!(e["ssl_enabled"], true);
        assert!(e["cert_path"].as_str().unwrap().ends_with(".pem"), "{e}");
        let expires = e["expires"].as_str().unwrap();
        let shape = expires.len() == 19
            && expires.chars().enumerate().all(|(i, c)| match i {
                4 | 7 => c == '-',
                10 => c == 'T',
                13 | 16 => c == ':',
                _ => c.is_ascii_digit(),
            });
        assert!(shape, "expires {expires:?} is not YYYY-MM-DDTHH:MM:SS");
        assert!(e["days_until_expiry"].as_i64().unwrap() > 0, "{e}");
    }

    // Downloads: the chain with or without the key, as attachments; 404 in E1.
    let r = api.get(&format!("/api/certificates/{SHOP}/download"));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("content-type"),
        Some("application/pem-certificate-chain")
    );
    assert_eq!(
        r.header("content-disposition"),
        Some(format!("attachment; filename=\"{SHOP}.pem\"").as_str())
    );
    assert!(r.text.starts_with("-----BEGIN CERTIFICATE-----") && r.text.contains("PRIVATE KEY"));
    let key = api.get(&format!("/api/certificates/{SHOP}/key"));
    assert_eq!(key.status, 200, "{key:?}");
    assert!(key.text.contains("PRIVATE KEY") && !key.text.contains("CERTIFICATE"));
    assert!(
        r.text.ends_with(&key.text),
        "the download ends with the key"
    );
    assert_eq!(
        key.header("content-disposition"),
        Some(format!("attachment; filename=\"{SHOP}_key.pem\"").as_str())
    );
    let chain = api.get("/api/certificates/alt.example.com/cert");
    assert_eq!(chain.status, 200, "{chain:?}");
    assert!(chain.text.contains("CERTIFICATE") && !chain.text.contains("PRIVATE KEY"));
    assert_eq!(
        chain.header("content-disposition"),
        Some("attachment; filename=\"alt.example.com_cert.pem\"")
    );
    for (part, message) in [
        ("download", "Certificate not found for domain"),
        ("key", "Private key not found for domain"),
        ("cert", "Certificate not found for domain"),
    ] {
        let r = api.get(&format!("/api/certificates/absent.example.com/{part}"));
        assert_e1(&r, 404, message);
        let r = http_call(
            api.port,
            "GET",
            &format!("/api/certificates/{SHOP}/{part}"),
            None,
            None,
            None,
        )
        .unwrap();
        assert_eq!(r.status, 401, "{part} without the token: {r:?}");
        assert_eq!(
            r.json,
            json!({"error": "Unauthorized - Invalid or missing API key"}),
            "the old 401 (E4)"
        );
        no_key(&r);
    }

    // Nothing is due: the renew route says so (and never reloads either way).
    let r = api.call("POST", "/api/certificates/renew", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"status": "success", "message": "No certificates needed renewal"})
    );
    let metrics = api.get("/metrics").text;
    assert!(
        sample(
            &metrics,
            &format!("hapctl_certificate_expiry_seconds{{name=\"{SHOP}\"}}")
        )
        .is_some_and(|s| s > 0.0),
        "{metrics}"
    );
    assert_eq!(reloads(&edge), before, "issuing reloaded HAProxy");
}

#[test]
fn the_two_call_dns_flow_issues_a_wildcard_the_caller_proves() {
    let (edge, pebble) = acme_edge();
    edge.ok(&["haproxy", "start"]);
    let api = Daemon::start(&edge);
    let before = reloads(&edge);
    let base = "wild.example.com";

    let r = api.call(
        "POST",
        "/api/ssl/dns-challenge/request",
        Some(&json!({"domain": format!("*.{base}")})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_keys(&r.json, &["success", "data"]);
    assert_eq!(r.json["success"], true);
    assert_keys(&r.json["data"], &["challenge_token", "base_domain"]);
    assert_eq!(r.json["data"]["base_domain"], base);
    let token = r.json["data"]["challenge_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!token.is_empty(), "a fresh account needs a record: {r:?}");

    // The operator publishes the record, then asks to verify.
    pebble.set_txt(&format!("_acme-challenge.{base}"), &token);
    let r = api.call(
        "POST",
        "/api/ssl/dns-challenge/verify",
        Some(&json!({"domain": base})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let path = edge.path(&format!("live/certs/wildcard.{base}.pem"));
    assert_eq!(
        r.json,
        json!({"success": true, "data": {"domain": format!("*.{base}"), "cert_path": path.display().to_string(),
            "message": "Wildcard certificate obtained and HAProxy updated"}})
    );
    let leaf = served(&edge, &format!("a.{base}"));
    assert_eq!(leaf.names, vec![format!("*.{base}")]);
    let status = api.get("/api/certificates/status");
    assert!(status.text.contains(&format!("\"*.{base}\"")), "{status:?}");

    // The order was used up.
    let r = api.call(
        "POST",
        "/api/ssl/dns-challenge/verify",
        Some(&json!({"domain": base})),
    );
    assert_e3(&r, 400, "No pending DNS challenge");

    // A record nobody published: the CA refuses, 500 in E3, nothing served for it.
    let r = api.call(
        "POST",
        "/api/ssl/dns-challenge/request",
        Some(&json!({"domain": "unproven.example.com"})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = api.call(
        "POST",
        "/api/ssl/dns-challenge/verify",
        Some(&json!({"domain": "*.unproven.example.com"})),
    );
    assert_e3(&r, 500, "");
    assert_eq!(
        api.get("/v1/certificates/wildcard.unproven.example.com")
            .status,
        404
    );

    for (body, message) in [
        (json!({}), "Domain is required"),
        (json!({"domain": ""}), "Domain is required"),
        (json!({"domain": "bad_domain.com"}), "Invalid domain format"),
        (json!({"domain": "-x.example.com"}), "Invalid domain format"),
        // (Extra fields are ignored, as the old routes did: `docs/compat.md`.)
    ] {
        for route in ["request", "verify"] {
            let r = api.call(
                "POST",
                &format!("/api/ssl/dns-challenge/{route}"),
                Some(&body),
            );
            assert_e3(&r, 400, message);
        }
    }
    assert_eq!(reloads(&edge), before);
}
