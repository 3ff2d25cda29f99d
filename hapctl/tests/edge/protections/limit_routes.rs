//! The rate-limit and security routes of the API against the real haproxy: runtime changes
//! with no reload, the stats in hapctl's shape and in the old manager's exact one (400/502).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::json;
use testkit::daemon::Daemon;
use testkit::{Backend, Edge};

const HOST: &str = "shop.example.com";
const A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 11);

fn keys(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn limits_exemptions_and_stats_through_the_api() {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", HOST, "--server", &app.addr()]);
    let api = Daemon::start(&edge);
    let reloads = || edge.show_proc().master.reloads;
    let before = reloads();

    let r = api.call(
        "PUT",
        "/v1/limits",
        Some(&json!({"preset": "custom", "rules": {"req_rate": "5:deny"}, "local_exempt": false})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let got: Vec<u16> = (0..6).map(|_| edge.get_from(A, HOST, "/").status).collect();
    assert_eq!(got, vec![200, 200, 200, 200, 200, 429]);
    assert_eq!(reloads(), before, "a policy change is a runtime map change");

    let r = api.get("/v1/limits");
    assert_eq!(r.json["default"]["req_rate"], "5:deny-429", "{r:?}");
    assert_eq!(r.json["local_exempt"], false);

    let r = api.get("/v1/security/stats?limit=5&min_rate=2");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json["sources"][0]["ip"], "127.0.0.11", "{r:?}");
    assert_eq!(r.json["sources"][0]["http_req_rate"], 6);

    // The old manager's shape, field for field.
    let r = api.get("/api/security/stats?limit=10&min_req_rate=0");
    assert_eq!(r.status, 200, "{r:?}");
    let want: BTreeSet<String> = [
        "status",
        "table",
        "table_size",
        "total_tracked_ips",
        "sources_with_activity",
        "counters",
        "counter_windows_ms",
        "returned",
        "min_req_rate",
        "sources",
        "note",
    ]
    .map(String::from)
    .into();
    assert_eq!(keys(&r.json), want);
    assert_eq!(r.json["status"], "success");
    assert_eq!(r.json["table_size"], 204800);
    assert_eq!(
        r.json["counters"],
        json!(["conn_cur", "conn_rate", "http_req_rate", "http_err_rate"])
    );
    assert_eq!(
        r.json["counter_windows_ms"],
        json!({"conn_rate": 10000, "http_req_rate": 10000, "http_err_rate": 30000})
    );
    assert_eq!(r.json["min_req_rate"], 0);
    let source = &r.json["sources"][0];
    let want: BTreeSet<String> = [
        "ip",
        "conn_cur",
        "conn_rate",
        "http_req_rate",
        "http_err_rate",
    ]
    .map(String::from)
    .into();
    assert_eq!(keys(source), want);
    assert_eq!(
        r.json["returned"],
        r.json["sources"].as_array().unwrap().len()
    );
    let r = api.get("/api/security/stats?limit=abc");
    assert_eq!(
        (r.status, r.json.clone()),
        (
            400,
            json!({"status": "error", "message": "limit and min_req_rate must be integers"})
        )
    );

    // Exempt at runtime, then the domain's own policy.
    let r = api.call(
        "POST",
        "/v1/limits/exempt",
        Some(&json!({"net": "127.0.0.11"})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(edge.get_from(A, HOST, "/").status, 200);
    let r = api.call("DELETE", "/v1/limits/exempt/127.0.0.11%2F32", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(edge.get_from(A, HOST, "/").status, 429);
    let path = format!("/v1/domains/{HOST}/limits");
    let r = api.call("PUT", &path, Some(&json!({"preset": "off"})));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(edge.get_from(A, HOST, "/").status, 200);
    let r = api.call(
        "POST",
        "/v1/security/clear",
        Some(&json!({"ip": "127.0.0.11"})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(reloads(), before, "every change above was at runtime");

    // Refused: nothing written.
    for body in [
        json!({"rules": {"req_rate": "0:deny"}}),
        json!({"rules": {"bogus": "5:deny"}}),
        json!({"preset": "strict"}),
        json!({"windows": {"req": 0}}),
        json!({"tarpit_secs": 61}),
        json!({"rules": {"err_rate": "5:deny\nhttp-request allow"}}),
    ] {
        let r = api.call("PUT", "/v1/limits", Some(&body));
        assert_eq!(r.status, 400, "{body}: {r:?}");
    }
    let r = api.call(
        "POST",
        "/v1/limits/exempt",
        Some(&json!({"net": "10.0.0.0/33"})),
    );
    assert_eq!(r.status, 400, "{r:?}");

    // HAProxy not answering: 502 in the old envelope.
    edge.ok(&["haproxy", "stop"]);
    let r = api.get("/api/security/stats");
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(r.json["status"], "error");
    assert_eq!(api.get("/v1/security/stats").status, 502);
}
