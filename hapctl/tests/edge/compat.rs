//! The conformance suite of the old edge manager's routes (`PEER-API.md` §1.1, §1.2): every
//! route against a real `hapctl serve` and the real HAProxy, asserting the old status codes
//! and the exact body shapes (field names, types, envelopes E1–E4, bare arrays, the old time
//! formats, stable integer ids), the old clients' own calls (curl with the Bearer key, a PHP
//! client that reads `message`), and that refused input changes nothing. The certificate
//! routes' issuing paths need a CA and run against Pebble in `certs/api/compat.rs`; here their
//! refusals and empty answers.

mod blocks;
mod domains;
mod names;
mod options;
mod service;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use testkit::daemon::{ApiResponse, Daemon};
use testkit::{Backend, Edge};

pub const SHOP: &str = "shop.example.com";

/// A running edge routing `SHOP` (added through the CLI) to a backend answering "ok", and its
/// API daemon.
pub fn old_edge() -> (Edge, Backend, Daemon) {
    let edge = Edge::started();
    let app = Backend::start("ok");
    edge.ok(&["domain", "add", SHOP, "--server", &app.addr()]);
    let api = Daemon::start(&edge);
    (edge, app, api)
}

pub fn reloads(edge: &Edge) -> u32 {
    edge.show_proc().master.reloads
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// `v` is an object with exactly these keys.
pub fn assert_keys(v: &Value, want: &[&str]) {
    assert_eq!(keys(v), want.iter().copied().collect(), "{v}");
}

/// E1 exactly, `{"status":"error","message"}`, the message containing `message`.
pub fn assert_e1(r: &ApiResponse, status: u16, message: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/json"), "{r:?}");
    assert_keys(&r.json, &["status", "message"]);
    assert_eq!(r.json["status"], "error", "{r:?}");
    let m = r.json["message"].as_str().unwrap();
    assert!(m.contains(message), "message {m:?} lacks {message:?}");
}

/// What the old PHP client shows: `$result['message'] ?? 'Unknown error'`.
pub fn php_message(r: &ApiResponse) -> String {
    r.json["message"]
        .as_str()
        .unwrap_or("Unknown error")
        .to_string()
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A time in one of the old formats (`YYYY-MM-DD HH:MM:SS`, or `YYYY-MM-DDTHH:MM:SS.ffffff`
/// naive), checked character by character, as Unix seconds (UTC).
pub fn old_time(text: &str, micros: bool) -> i64 {
    let sep = if micros { 'T' } else { ' ' };
    let pattern = if micros {
        "dddd-dd-ddTdd:dd:dd.dddddd"
    } else {
        "dddd-dd-dd dd:dd:dd"
    };
    assert_eq!(text.len(), pattern.len(), "{text:?} is not {pattern}");
    for (c, p) in text.chars().zip(pattern.chars()) {
        let ok = if p == 'd' { c.is_ascii_digit() } else { c == p };
        assert!(ok, "{text:?} is not {pattern}");
    }
    let rfc = format!("{}Z", text.replacen(sep, "T", 1));
    let t = humantime::parse_rfc3339(&rfc).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// `t` is within a minute of `now + offset`.
pub fn near(t: i64, offset: i64) {
    let want = now() + offset;
    assert!((t - want).abs() <= 60, "time {t}, want about {want}");
}

pub const TIMEOUT: Duration = Duration::from_secs(30);
