//! `/api/blocked-ips` (list, block, unblock, sync) and `/api/security/temporary-block|
//! clear-expired`.

use std::net::Ipv4Addr;

use serde_json::{json, Value};

use super::{assert_e1, assert_keys, near, old_edge, old_time, php_message, reloads, SHOP};
use testkit::daemon::{runtime_blocked_keys, Daemon};

const B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const ROW: &[&str] = &[
    "id",
    "ip_address",
    "reason",
    "blocked_at",
    "blocked_by",
    "expiry_time",
];

#[test]
fn blocks_answer_with_the_old_shapes_codes_and_ids_without_a_reload() {
    let (edge, _app, api) = old_edge();
    let before = reloads(&edge);
    let r = api.get("/api/blocked-ips");
    assert_eq!((r.status, &r.json), (200, &json!([])), "{r:?}");

    let r = api.call(
        "POST",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "127.0.0.2", "reason": "r", "blocked_by": "me", "extra": 1})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"status": "success", "blocked_ip_id": 1, "message": "IP 127.0.0.2 has been blocked", "runtime_map_updated": true})
    );
    assert_eq!(edge.get_from(B, SHOP, "/").status, 403, "enforced at once");
    let r = api.call(
        "POST",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "127.0.0.2"})),
    );
    assert_e1(&r, 409, "IP address is already blocked");
    assert_eq!(php_message(&r), "IP address is already blocked");

    // Defaults of the old route; a network is a key too.
    let r = api.call(
        "POST",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "198.51.100.0/24"})),
    );
    assert_eq!(r.json["blocked_ip_id"], 2, "{r:?}");

    // Temporary: one address, minutes (fractions too), expiring by itself.
    let r = api.call(
        "POST",
        "/api/security/temporary-block",
        Some(&json!({"ip_address": "192.0.2.9", "duration_minutes": 5})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_keys(
        &r.json,
        &["status", "message", "expires_at", "runtime_map_updated"],
    );
    assert_eq!(
        (
            &r.json["status"],
            &r.json["message"],
            &r.json["runtime_map_updated"]
        ),
        (
            &json!("success"),
            &json!("IP 192.0.2.9 temporarily blocked for 5 minutes"),
            &json!(true)
        )
    );
    near(old_time(r.json["expires_at"].as_str().unwrap(), true), 300);

    // The list: a bare array, newest first, the old fields, types and time formats.
    let r = api.get("/api/blocked-ips");
    let rows = r
        .json
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {r:?}"));
    assert_eq!(rows.len(), 3, "{r:?}");
    for row in rows {
        assert_keys(row, ROW);
        near(old_time(row["blocked_at"].as_str().unwrap(), false), 0);
    }
    let by_ip = |ip: &str| rows.iter().find(|b| b["ip_address"] == ip).unwrap().clone();
    let first = by_ip("127.0.0.2");
    assert_eq!(
        (
            &first["id"],
            &first["reason"],
            &first["blocked_by"],
            &first["expiry_time"]
        ),
        (&json!(1), &json!("r"), &json!("me"), &Value::Null)
    );
    let net = by_ip("198.51.100.0/24");
    assert_eq!(
        (&net["reason"], &net["blocked_by"]),
        (&json!("No reason provided"), &json!("API"))
    );
    let temp = by_ip("192.0.2.9");
    assert_eq!(
        (&temp["reason"], &temp["blocked_by"]),
        (&json!("Temporary block for 5 minutes"), &Value::Null)
    );
    near(old_time(temp["expiry_time"].as_str().unwrap(), true), 300);
    let order: Vec<&Value> = rows.iter().map(|b| &b["blocked_at"]).collect();
    assert!(
        order.windows(2).all(|w| w[0].as_str() >= w[1].as_str()),
        "newest first: {order:?}"
    );

    // Sync: an entry lost from the runtime maps is restored, every block read back.
    for map in testkit::daemon::BLOCKED_MAPS {
        hapctl::haproxy::RuntimeMap::new(
            hapctl::haproxy::CliSocket::new(
                edge.path("run/master.sock"),
                std::time::Duration::from_secs(5),
            ),
            edge.path(map).display().to_string(),
        )
        .remove("127.0.0.2")
        .unwrap();
    }
    assert_eq!(edge.get_from(B, SHOP, "/").status, 200, "entry dropped");
    let r = api.call("POST", "/api/blocked-ips/sync", None);
    assert_eq!(edge.get_from(B, SHOP, "/").status, 403, "sync restored it");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"status": "success", "message": "Verified 3/3 IPs present in the runtime map", "total_ips": 3,
            "synced_ips": 3, "accepted_commands": 3, "missing_ips": [], "runtime_map_synced": true})
    );

    // clear-expired: the daemon lifts a 3 s block by itself (the old one never did).
    let r = api.call(
        "POST",
        "/api/security/temporary-block",
        Some(&json!({"ip_address": "192.0.2.10", "duration_minutes": 0.05})),
    );
    assert_eq!(
        r.json["message"], "IP 192.0.2.10 temporarily blocked for 0.05 minutes",
        "{r:?}"
    );
    assert!(runtime_blocked_keys(&edge).contains("192.0.2.10"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while runtime_blocked_keys(&edge).contains("192.0.2.10") {
        assert!(
            std::time::Instant::now() < deadline,
            "the 3 s block was never lifted"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let r = api.call("POST", "/api/security/clear-expired", None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.json,
        json!({"status": "success", "message": "Cleared 0 expired IP blocks", "cleared_ips": [], "runtime_map_failures": []})
    );

    // Unblock.
    let r = api.call(
        "DELETE",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "127.0.0.2"})),
    );
    assert_eq!(
        r.json,
        json!({"status": "success", "message": "IP 127.0.0.2 has been unblocked", "runtime_map_updated": true}),
        "{r:?}"
    );
    assert_eq!(edge.get_from(B, SHOP, "/").body, "ok");
    let r = api.call(
        "DELETE",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "127.0.0.2"})),
    );
    assert_e1(&r, 404, "IP address not found in blocked list");
    assert_eq!(reloads(&edge), before, "a block reloaded HAProxy");

    // Ids: kept across a restart; an unblocked address blocked again gets a new one.
    drop(api);
    let api = Daemon::start(&edge);
    let ids = |api: &Daemon| -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = api
            .get("/api/blocked-ips")
            .json
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["ip_address"].as_str().unwrap().to_string(),
                    b["id"].as_i64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        ids(&api),
        [
            ("192.0.2.9".to_string(), 3),
            ("198.51.100.0/24".to_string(), 2)
        ]
    );
    let r = api.call(
        "POST",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "127.0.0.2"})),
    );
    assert_eq!(
        r.json["blocked_ip_id"], 5,
        "ids 1 and 4 were released, never reused: {r:?}"
    );
}

#[test]
fn refused_block_input_gets_an_e1_400_and_changes_nothing() {
    let (edge, _app, api) = old_edge();
    let runtime = runtime_blocked_keys(&edge);
    let before = api.get("/api/blocked-ips").json;
    for (path, body, message) in [
        ("/api/blocked-ips", json!({}), "IP address is required"),
        (
            "/api/blocked-ips",
            json!({"ip_address": ""}),
            "IP address is required",
        ),
        (
            "/api/blocked-ips",
            json!({"ip_address": "not-an-ip"}),
            "ip_address",
        ),
        (
            "/api/blocked-ips",
            json!({"ip_address": "0.0.0.0/0"}),
            "ip_address",
        ),
        ("/api/blocked-ips", json!({"ip_address": 5}), "ip_address"),
        (
            "/api/blocked-ips",
            json!({"ip_address": "192.0.2.1", "reason": "a\nb"}),
            "reason",
        ),
        (
            "/api/security/temporary-block",
            json!({"ip_address": "192.0.2.0/24"}),
            "Invalid IP address format",
        ),
        (
            "/api/security/temporary-block",
            json!({"ip_address": "192.0.2.1", "duration_minutes": 0}),
            "duration_minutes",
        ),
        (
            "/api/security/temporary-block",
            json!({"ip_address": "192.0.2.1", "duration_minutes": -5}),
            "duration_minutes",
        ),
        (
            "/api/security/temporary-block",
            json!({"ip_address": "192.0.2.1", "duration_minutes": "5"}),
            "duration_minutes",
        ),
        (
            "/api/security/temporary-block",
            json!({}),
            "IP address is required",
        ),
    ] {
        let r = api.call("POST", path, Some(&body));
        assert_e1(&r, 400, message);
    }
    let r = api.call("DELETE", "/api/blocked-ips", Some(&json!({})));
    assert_e1(&r, 400, "IP address is required");
    assert_eq!(api.get("/api/blocked-ips").json, before);
    assert_eq!(runtime_blocked_keys(&edge), runtime);
}

#[test]
fn sync_without_haproxy_is_the_old_500_and_health_says_stopped_until_reload_starts_it() {
    let (edge, _app, api) = old_edge();
    api.call(
        "POST",
        "/api/blocked-ips",
        Some(&json!({"ip_address": "192.0.2.44"})),
    );
    edge.ok(&["haproxy", "stop"]);
    let r = api.get("/health");
    assert_eq!(
        (r.status, &r.json),
        (
            200,
            &json!({"status": "healthy", "haproxy_status": "stopped", "database": "connected"})
        )
    );
    let r = api.call("POST", "/api/blocked-ips/sync", None);
    assert_eq!(r.status, 500, "{r:?}");
    assert_keys(
        &r.json,
        &[
            "status",
            "message",
            "map_file_updated",
            "runtime_map_synced",
            "total_ips",
        ],
    );
    assert_eq!(
        (
            &r.json["status"],
            &r.json["map_file_updated"],
            &r.json["runtime_map_synced"],
            &r.json["total_ips"]
        ),
        (&json!("error"), &json!(true), &json!(false), &json!(1))
    );
    assert!(
        r.json["message"]
            .as_str()
            .unwrap()
            .starts_with("Could not read back the runtime map"),
        "{r:?}"
    );

    // GET /api/reload starts a stopped HAProxy, as before.
    let r = api.get("/api/reload");
    assert_eq!(
        (r.status, &r.json),
        (200, &json!({"status": "success"})),
        "{r:?}"
    );
    let r = api.get("/health");
    assert_eq!(r.json["haproxy_status"], "running", "{r:?}");
    assert_eq!(edge.get(SHOP, "/").body, "ok");
    assert!(runtime_blocked_keys(&edge).contains("192.0.2.44"));
}
